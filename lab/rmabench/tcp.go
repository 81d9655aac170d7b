package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ucxTest is the ucx_perftest test for one of ours: ucp_get (the same
// one-sided read, with -O for the bandwidth test) for the reads,
// ucp_put_bw and ucp_put_lat for the writes.
func ucxTest(test string) string {
	switch test {
	case "write_bw":
		return "ucp_put_bw"
	case "write_lat":
		return "ucp_put_lat"
	}
	return "ucp_get"
}

// ucxRun runs ucx_perftest over TCP on loopback with the same size and
// outstanding depth.
func ucxRun(s spec, dur time.Duration) (Row, error) {
	// Iterations sized from a short probe so each run takes about dur.
	iters := 20000
	if s.test == "read_lat" {
		iters = 5000
	}
	var r Row
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		r, err = ucxOnce(s, iters)
		if err != nil {
			return r, err
		}
		if r.OpsPerSec > 0 {
			want := int(r.OpsPerSec * dur.Seconds())
			if want <= iters*2 {
				break
			}
			iters = want
		}
	}
	return r, err
}

func ucxOnce(s spec, iters int) (Row, error) {
	port := "13377"
	test := ucxTest(s.test)
	args := []string{"-t", test, "-s", strconv.Itoa(s.size), "-n", strconv.Itoa(iters), "-p", port}
	if s.depth > 1 {
		args = append(args, "-O", strconv.Itoa(s.depth))
	}
	env := append(os.Environ(), "UCX_TLS=tcp", "UCX_NET_DEVICES=lo")
	srv := exec.Command("ucx_perftest", args...)
	srv.Env = env
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return Row{}, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	time.Sleep(300 * time.Millisecond)
	cli := exec.Command("ucx_perftest", append([]string{"127.0.0.1"}, args...)...)
	cli.Env = env
	var out bytes.Buffer
	cli.Stdout, cli.Stderr = &out, &out
	if err := cli.Run(); err != nil {
		return Row{}, fmt.Errorf("ucx_perftest: %v\n%s\n%s", err, out.String(), srvOut.String())
	}
	note := "ucx_perftest reports no p99/p99.9"
	if test == "ucp_put_lat" {
		// A ping-pong of puts, each side polling its memory for the
		// other's: ucx_perftest reports half the round trip (ours:
		// post to completion, the whole four hops).
		note += "; ucp_put_lat is a ping-pong: p50 is half a round trip"
	}
	// Final: iters lat50 latavg latoverall bwavg bwoverall rateavg rateoverall
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 9 && f[0] == "Final:" {
			p := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
			return Row{System: "ucx-tcp", Setup: "tcp", Test: s.test, Size: s.size, Outstanding: s.depth, Cores: 1,
				OpsPerSec: p(8), MBPerSec: p(6) * 1.048576, P50us: p(2),
				Command: "UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest 127.0.0.1 " + strings.Join(args, " "),
				Note:    note}, nil
		}
	}
	return Row{}, fmt.Errorf("ucx_perftest: no Final line in\n%s", out.String())
}
