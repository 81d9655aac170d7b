package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/internal/kvload"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

// onermaKVDepth is the GETs one client goroutine keeps in flight: the
// peers' concurrency (kvClients connections, one GET each).
const onermaKVDepth = 16

func init() { onermaKVTargets = startOnermaKV }

// startOnermaKV starts OneRMA's cache twice for w: an rmakv server and its
// clients on one loopback engine, and an rmakv server on engine B of a
// memif pair with its clients on engine A. The serving side of each is
// the rmakv server's process and its engine's. The engines poll with
// backoff, not busy: every system of the kv setup runs through all its
// rounds, and three busy pollers would take the two CPUs from memcached
// and Redis while they are measured (they spin while they serve, and
// their CPU time counts).
func startOnermaKV(bin, dir string, w kvload.Workload) ([]*kvTarget, error) {
	rmad, rmakv := filepath.Join(bin, "rmad"), filepath.Join(bin, "rmakv")
	creds, err := os.MkdirTemp(dir, "kv-creds-")
	if err != nil {
		return nil, err
	}
	ca, err := keyx.NewCA("rmabench kv CA", 0)
	if err != nil {
		return nil, err
	}
	sc, err := ca.IssueServer("rmakv-server")
	if err != nil {
		return nil, err
	}
	cc, err := ca.IssueClient("rmakv-client")
	if err != nil {
		return nil, err
	}
	if err := keyx.WriteDir(creds, sc, cc, true); err != nil {
		return nil, err
	}
	var ts []*kvTarget
	fail := func(err error) ([]*kvTarget, error) {
		stopKVTargets(ts)
		return nil, err
	}
	lopts := benchLoopback(rmad, dir, "bench-kv", "10.99.0.1", "1500")
	lopts.Busy, lopts.CPU = false, -1
	lo, err := testbed.Start(lopts)
	if err != nil {
		return fail(err)
	}
	t, err := onermaKVOn(rmakv, creds, w, lo, lo, "", "one loopback engine, backoff polling")
	if err != nil {
		lo.Stop(10 * time.Second)
		return fail(err)
	}
	ts = append(ts, t)
	oa, ob := testbed.MemifPair(rmad, dir, "bench-kva", "bench-kvb", "10.99.1.1", "10.99.1.2")
	oa.Extra = []string{"-log-level", "warn"}
	ob.Extra = oa.Extra
	a, err := testbed.Start(oa)
	if err != nil {
		return fail(err)
	}
	b, err := testbed.Start(ob)
	if err != nil {
		a.Stop(10 * time.Second)
		return fail(err)
	}
	t, err = onermaKVOn(rmakv, creds, w, a, b, "-memif", "clients on engine A, server on engine B, memif, backoff polling")
	if err != nil {
		a.Stop(10 * time.Second)
		b.Stop(10 * time.Second)
		return fail(err)
	}
	stopB := t.stop
	t.stop = func() error { return errors.Join(stopB(), a.Stop(10*time.Second)) }
	return append(ts, t), nil
}

// onermaKVOn starts an rmakv server on engine srvEng sized for w and
// returns its target, its clients on engine cliEng; the target's stop
// ends the server and srvEng.
func onermaKVOn(rmakv, creds string, w kvload.Workload, cliEng, srvEng *testbed.Engine, suffix, where string) (*kvTarget, error) {
	// Two slots per key (8 to a bucket); the slab holds the values that
	// do not fit a slot, with room to spare.
	buckets := uint64(1) << bits.Len64(max(w.Keys/4, 1)-1)
	slab := max(uint64(16<<20), w.Keys*uint64(w.ValueBytes+64)*3/2)
	args := []string{"server", "-socket", srvEng.Socket, "-creds", creds, "-listen", "127.0.0.1:0", "-quiet",
		"-buckets", fmt.Sprint(buckets), "-slab", fmt.Sprint(slab), "-max-value", fmt.Sprint(w.ValueBytes)}
	cmd := exec.Command(rmakv, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		return errors.Join(err, srvEng.Stop(10*time.Second))
	}
	// "rmakv: serving rpc ADDR keyx ADDR engine ADDR"
	first := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		l, _ := br.ReadString('\n')
		first <- l
		io.Copy(io.Discard, br)
	}()
	var rpc string
	select {
	case l := <-first:
		f := strings.Fields(l)
		if len(f) < 4 || f[1] != "serving" || f[2] != "rpc" {
			stop()
			return nil, fmt.Errorf("rmakv server said %q", l)
		}
		rpc = f[3]
	case <-time.After(60 * time.Second):
		stop()
		return nil, errors.New("rmakv server not serving after 60 s")
	}
	cfg := kv.ClientConfig{Socket: cliEng.Socket, Servers: []kv.ServerAddr{{RPC: rpc}}, CredsDir: creds,
		MaxInFlight: onermaKVDepth, MaxValue: w.ValueBytes}
	return &kvTarget{system: "onerma-kv", cores: 1, suffix: suffix, dial: kvload.DialOneRMAKV(cfg), depth: onermaKVDepth, clients: 1,
		pids: []int{cmd.Process.Pid, srvEng.Pid()}, server: rmakv + " " + strings.Join(args, " ") + " (" + where + ")", stop: stop}, nil
}
