package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/internal/pattern"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// TestSelfTestFlags: the -selftest flags are checked before anything
// starts, each refusal saying what is wrong.
func TestSelfTestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" : accepted
	}{
		{[]string{"-selftest", "read_bw", "-s", "4096", "-O", "8", "-D", "2s"}, ""},
		{[]string{"-selftest", "read_lat", "-O", "8"}, ""}, // read_lat: one in flight
		{[]string{"-s", "64", "-D", "1s"}, "-D, -s need -selftest"},
		{[]string{"-selftest", "write_lat"}, `-selftest "write_lat": want read_bw, write_bw or read_lat`},
		{[]string{"-selftest", "read_bw", "-s", "4097"}, "-s 4097: want 1..4096"},
		{[]string{"-selftest", "read_bw", "-O", "0"}, "-O 0: want at least 1"},
		{[]string{"-selftest", "read_bw", "-D", "0s"}, "-D 0s"},
		{[]string{"-selftest", "read_bw", "-selftest-region", "0x10001"}, "need -selftest-peer"},
		{[]string{"-selftest", "read_bw", "-selftest-peer", "h:1", "-selftest-region", "0x10001"}, "needs TLS credentials"},
		{[]string{"-selftest", "read_bw", "-selftest-peer", "h:1", "-selftest-creds", "d"}, "needs -selftest-region"},
		{[]string{"-selftest", "read_bw", "-selftest-peer", "h:1", "-selftest-region", "1", "-selftest-creds", "d", "-selftest-region-bytes", "8192"}, "not with -selftest-peer"},
		{[]string{"-selftest", "read_bw", "-profile"}, ""},
		{[]string{"-profile"}, "-profile need -selftest"},
		{[]string{"-selftest", "read_bw", "-profile", "-selftest-handover"}, "not with -selftest-handover"},
	} {
		_, opt, err := loadConfig(tc.args, &bytes.Buffer{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		case tc.want == "" && tc.args[1] == "read_lat" && opt.selftest.depth != 1:
			t.Errorf("read_lat: -O %d", opt.selftest.depth)
		}
	}
}

// selfTestRow is the line "all ..." of a -selftest report.
type selfTestRow struct {
	ops, errors, handedOut, handedIn uint64
	opsPerSec                        float64
}

var allRow = regexp.MustCompile(`(?m)^all +(\S+) +(\d+) +(\d+) +(\d+) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +(\d+) +(\d+) +(\d+)$`)

// runSelfTest runs rmad with args in a helper process until it exits and
// returns what it printed (after READY), its log and its exit status.
func runSelfTest(t *testing.T, args []string) (out, log string, code int) {
	t.Helper()
	js, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRmadHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ONERMA_RMAD_HELPER="+string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("rmad -selftest still running after 60 s:\n%s\n%s", stdout.String(), stderr.String())
	}
	return strings.TrimPrefix(stdout.String(), "READY\n"), stderr.String(), cmd.ProcessState.ExitCode()
}

// checkPass checks a report that says PASS, and returns its sum's row.
func checkPass(t *testing.T, out, log string, code int) selfTestRow {
	t.Helper()
	m := allRow.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.HasSuffix(out, "\nselftest: PASS\n") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, log)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(m[i], 10, 64); return v }
	r := selfTestRow{ops: n(4), errors: n(10), handedOut: n(11), handedIn: n(12)}
	r.opsPerSec, _ = strconv.ParseFloat(m[5], 64)
	if r.ops == 0 || r.errors != 0 || r.opsPerSec < float64(r.ops)/1.5 {
		t.Fatalf("sum %+v:\n%s", r, out)
	}
	if !regexp.MustCompile(`(?m)^checked: (\d+) of (\d+) ops .*; 0 errors, 0 mismatches`).MatchString(out) {
		t.Fatalf("no clean checked line:\n%s", out)
	}
	t.Logf("\n%s", out)
	return r
}

// selfTestArgs are an engine's on the net_ring loopback (frames to itself
// cross the port), backoff polling, a TIMEOUT that outlasts the stalls of
// a loaded CI machine, and a 1 s run.
func selfTestArgs(t *testing.T, ip string, extra ...string) []string {
	return append([]string{
		"-iv-state", filepath.Join(t.TempDir(), "iv.state"),
		"-eal", strings.Join(dpdktest.Args(), " "),
		"-vdev", "net_ring0", "-port-name", "net_ring0", "-hairpin-self", "true",
		"-ip", ip, "-socket", filepath.Join(t.TempDir(), "rmad.sock"), "-poll-mode", "backoff",
		"-mbufs", "8191", "-log-level", "warn", "-timeout", "1s",
		"-D", "1s", "-warmup", "200ms",
	}, extra...)
}

// TestSelfTestLoopback: rmad -selftest on its own region through the
// net_ring loopback, READ and WRITE at one and two cores, read_lat, each
// for a second: every op checked, exit status 0, the report's sum sane.
// With -selftest-handover (two cores, at an address whose requests one
// core serves for the other) only the other core posts, and every answer
// crosses a hand-over ring: the port's hand-over counters show it.
func TestSelfTestLoopback(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("DPDK needs root; not root and CI is not \"true\"")
	}
	for _, tc := range []struct{ name, cores, test, size string }{
		{"read_bw", "1", "read_bw", "64"},
		{"write_bw-2cores", "2", "write_bw", "4096"},
		{"read_lat", "1", "read_lat", "64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, log, code := runSelfTest(t, selfTestArgs(t, "10.3.1.1", "-cores", tc.cores, "-selftest", tc.test, "-s", tc.size, "-O", "16"))
			checkPass(t, out, log, code)
			if !strings.Contains(out, "rmad selftest "+tc.test+": "+tc.size+" B ops") {
				t.Errorf("no heading:\n%s", out)
			}
		})
	}
	// -profile: the stage table after the report; with -json in the row.
	t.Run("profile", func(t *testing.T) {
		out, log, code := runSelfTest(t, selfTestArgs(t, "10.3.1.1", "-cores", "1", "-selftest", "read_bw", "-O", "16", "-profile"))
		checkPass(t, out, log, code)
		for _, want := range []string{"\nstages: ", "budget 250.0 ns per op (4.0 M ops/s, both roles on one core)", "\nreceive ", "\n  clock ", "\nunattributed ", "\ntotal "} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the report:\n%s", want, out)
			}
		}
		out, log, code = runSelfTest(t, selfTestArgs(t, "10.3.1.1", "-cores", "2", "-selftest", "write_bw", "-s", "4096", "-O", "8", "-profile", "-json"))
		var row profiledRow
		if err := json.Unmarshal([]byte(out), &row); err != nil || code != 0 || row.Stages == nil {
			t.Fatalf("exit %d, %v:\n%s\n%s", code, err, out, log)
		}
		rep := row.Stages
		total, _ := rep.Row("total")
		var sum float64
		for _, x := range rep.Rows {
			if x.Stage != "overhead" && x.Stage != "total" {
				sum += x.Cycles
			}
		}
		b := rep.Budget
		if rep.Ops != row.Ops || total.Cycles <= 0 || math.Abs(sum-total.Cycles) > 1e-6*total.Cycles ||
			b.TargetNs <= b.SealNs+b.OpenNs || !strings.Contains(b.Target, "goodput 0.60") || rep.FramesPerOp < 4 {
			t.Fatalf("stages %+v of row %+v", rep, row.Row)
		}
		if u, _ := rep.Row("unattributed"); math.Abs(u.Share) > 0.01 {
			t.Errorf("unattributed %.2f %% of the window", 100*u.Share)
		}
	})
	t.Run("handover", func(t *testing.T) {
		ip := netip.MustParseAddr("10.3.1.1")
		for engine.RequestCore(ip, 0, 2) == 0 && engine.RequestCore(ip, 1, 2) == 1 {
			ip = ip.Next()
		}
		out, log, code := runSelfTest(t, selfTestArgs(t, ip.String(), "-cores", "2", "-selftest", "read_bw", "-O", "16", "-selftest-handover"))
		r := checkPass(t, out, log, code)
		if r.handedIn < r.ops || r.handedOut < r.ops {
			t.Fatalf("%d ops, handed out %d, in %d: every request and answer should cross:\n%s", r.ops, r.handedOut, r.handedIn, out)
		}
	})
}

// TestSelfTestMemif: two engines over memif: one serves a region an
// application of this test owns (the pattern's bytes; K_d over keyx), the
// other runs -selftest against it with no application: READs checked
// against the pattern, WRITEs read back. A read of a region whose bytes
// are not the pattern fails with the byte that differs, and exit status 1.
func TestSelfTestMemif(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("DPDK needs root; not root and CI is not \"true\"")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "m.sock")
	memifEAL := func(name string) string {
		return strings.Join(testbed.EALArgs("st"+name+strconv.Itoa(os.Getpid())), " ")
	}
	srvSock := filepath.Join(dir, "b.sock")
	b := startRmad(t, []string{
		"-iv-state", filepath.Join(dir, "b.iv"), "-eal", memifEAL("b"),
		"-vdev", "net_memif0,role=server,id=0,socket=" + sock + ",socket-abstract=no", "-port-name", "net_memif0",
		"-ip", "10.3.2.2", "-socket", srvSock, "-poll-mode", "backoff", "-log-level", "warn", "-timeout", "1s",
	})
	defer b.stop(t)

	// The owner: a region of the pattern, its K_d served over TLS 1.3.
	p, err := portal.Dial(srvSock, "owner")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r, err := p.RegisterRegion(1<<20, abi.PermRemoteRead|abi.PermRemoteWrite|abi.PermLocalRead|abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	pattern.Fill(r.Bytes(), 0)
	srvCreds, cliCreds, err := keyx.NewPair("selftest", 0)
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "creds")
	if err := keyx.WriteDir(creds, srvCreds, cliCreds, false); err != nil {
		t.Fatal(err)
	}
	kx, err := keyx.NewServer(keyx.Config{Credentials: srvCreds, Owner: p.Identity().Addr,
		Permits: []keyx.Permit{{Client: cliCreds.Name(), Ops: keyx.Read | keyx.Write, Addrs: []netip.Prefix{keyx.AnyAddress}}}})
	if err != nil {
		t.Fatal(err)
	}
	kx.Add(r)
	addr, err := kx.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer kx.Close()

	args := func(test string) []string {
		return []string{
			"-iv-state", filepath.Join(dir, "a.iv"), "-eal", memifEAL("a"),
			"-vdev", "net_memif0,role=client,id=0,socket=" + sock + ",socket-abstract=no", "-port-name", "net_memif0",
			"-ip", "10.3.2.1", "-socket", filepath.Join(dir, "a.sock"), "-poll-mode", "backoff", "-log-level", "warn", "-timeout", "1s", "-resolve-timeout", "1s",
			"-selftest", test, "-s", "256", "-O", "16", "-D", "1s", "-warmup", "300ms",
			"-selftest-peer", addr.String(), "-selftest-region", fmt.Sprintf("%#x", uint32(r.ID())), "-creds", creds,
		}
	}
	for _, test := range []string{"read_bw", "write_bw"} {
		out, log, code := runSelfTest(t, args(test))
		checkPass(t, out, log, code)
		if want := fmt.Sprintf("target: region %#x of 1048576 bytes, the engine at 10.3.2.2's", uint32(r.ID())); !strings.Contains(out, want) {
			t.Errorf("%s: no %q:\n%s", test, want, out)
		}
		if test == "write_bw" && !strings.Contains(out, "the last of each slot read back: 16)") {
			t.Errorf("write_bw: no read-back:\n%s", out)
		}
	}

	// A byte of the region's first half that is not the pattern.
	r.Bytes()[70] ^= 0x5a
	out, _, code := runSelfTest(t, args("read_bw"))
	want := fmt.Sprintf("selftest: FAIL: core 0: READ of 256 B at offset 0x0 of region %#x on 10.3.2.2: byte 70 (region offset 0x46) is %#02x, want %#02x (what the region holds)",
		uint32(r.ID()), r.Bytes()[70], pattern.At(70))
	if code != 1 || !strings.Contains(out, want+"\n") {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, out)
	}
}
