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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/kvload"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
	"github.com/onerma/onerma/portal"
)

// onermaKVDepth is the operations (GETs, and SETs pipelined on the
// update connection) one client goroutine keeps in flight: the peers'
// concurrency (kvClients connections, one operation each).
const onermaKVDepth = 16

func init() { onermaKVTargets = startOnermaKV }

// startOnermaKV starts OneRMA's cache twice for w: an rmakv server and its
// clients on one loopback engine, and an rmakv server on engine B of a
// memif pair with its clients on engine A. The serving side of each is
// the rmakv server's process and its engine's, polling core included.
//
// The engines spin and give their CPU to any other runnable thread when
// idle (poll mode yield), pinned: the loopback engine to CPU 1 (the
// clients' goroutine and the rmakv server pinned to CPU 0), A to CPU 0
// and B to CPU 1 (the clients share CPU 0 with A, the server CPU 1 with
// B, as on two hosts). Engines in poll mode yield run in rmabench's
// session (testbed.Start), so that their sched_yield hands the CPU to
// the clients (EEVDF moves a yielding thread back only within its own
// scheduling group). Unpinned, the kernel may put the client's thread on
// the loopback engine's CPU, which costs a third of the GETs or more
// (bench/HISTORY.md, kv).
//
// Yield is the mode for engines sharing CPUs with their clients: a busy
// engine starves a client on its CPU, and a backing-off one pays a timer
// wake-up per idle spell (bench/HISTORY.md, kv, has the comparison).
// Between their runs the engines are frozen (SIGSTOP), so memcached and
// Redis are measured with both CPUs free of them. The clients sleep on
// their portal's completion doorbell when they have nothing to send
// (kvload.Waiter), the memif one without spinning first: it shares engine
// A's CPU. The memif engines' TIMEOUT is 20 ms (their default on memif:
// 2 ms): on two CPUs shared with whatever else the host runs, a loop can
// be descheduled for milliseconds, and the bench's single server has no
// replica to fail over to.
func startOnermaKV(bin, dir string, w kvload.Workload) ([]*kvTarget, error) {
	rmad, rmakv := filepath.Join(bin, "rmad"), filepath.Join(bin, "rmakv")
	creds, err := os.MkdirTemp(dir, "kv-creds-")
	if err != nil {
		return nil, err
	}
	sc, cc, err := keyx.NewPair("rmakv", 0)
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
	lopts.Mode = "yield"
	lo, err := testbed.Start(lopts)
	if err != nil {
		return fail(err)
	}
	t, cfg, err := onermaKVOn(rmakv, creds, w, lo, lo, 0, "", portal.Options{},
		"one loopback engine, poll mode yield on CPU 1, frozen between runs")
	if err != nil {
		lo.Stop(10 * time.Second)
		return fail(err)
	}
	t.pause, t.resume = lo.Freeze, lo.Thaw
	ts = append(ts, t, lookupTwin(t, cfg))
	oa, ob := testbed.MemifPair(rmad, dir, "bench-kva", "bench-kvb", "10.99.1.1", "10.99.1.2")
	oa.Mode, oa.CPU = "yield", 0
	ob.Mode, ob.CPU = "yield", 1
	oa.Extra = []string{"-log-level", "warn", "-timeout", "20ms"}
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
	t, _, err = onermaKVOn(rmakv, creds, w, a, b, 1, "-memif", portal.Options{WaitSpins: -1},
		"clients on engine A, server on engine B, memif, poll mode yield on CPU 0 and 1, TIMEOUT 20 ms, frozen between runs")
	if err != nil {
		a.Stop(10 * time.Second)
		b.Stop(10 * time.Second)
		return fail(err)
	}
	stopB := t.stop
	t.stop = func() error { return errors.Join(stopB(), a.Stop(10*time.Second)) }
	t.pause = func() error { return errors.Join(a.Freeze(), b.Freeze()) }
	t.resume = func() error { return errors.Join(a.Thaw(), b.Thaw()) }
	return append(ts, t), nil
}

// onermaKVOn starts an rmakv server on engine srvEng sized for w, pinned
// to CPU srvCPU, and returns its target, its clients on engine cliEng
// pinned to CPU 0; the target's stop ends the server and srvEng.
func onermaKVOn(rmakv, creds string, w kvload.Workload, cliEng, srvEng *testbed.Engine, srvCPU int, suffix string, po portal.Options, where string) (*kvTarget, kv.ClientConfig, error) {
	// Four slots per key or more (8 to a bucket): with keys placed at
	// random, about 1 in 10^4 of 1 M keys then finds its bucket full and
	// evicts another (the Poisson tail; at two slots per key 0.66 %
	// would, and GETs of them would miss where memcached, sized not to
	// evict, misses none). The slab holds the values that do not fit a
	// slot, with room to spare.
	buckets := uint64(1) << bits.Len64(max(w.Keys/2, 1)-1)
	slab := max(uint64(16<<20), w.Keys*uint64(w.ValueBytes+64)*3/2)
	args := []string{"server", "-socket", srvEng.Socket, "-creds", creds, "-listen", "127.0.0.1:0", "-q",
		"-buckets", fmt.Sprint(buckets), "-slab", fmt.Sprint(slab), "-max-value", fmt.Sprint(w.ValueBytes)}
	args = append([]string{"-c", strconv.Itoa(srvCPU), rmakv}, args...)
	cmd := exec.Command("taskset", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, kv.ClientConfig{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, kv.ClientConfig{}, err
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
			return nil, kv.ClientConfig{}, fmt.Errorf("rmakv server said %q", l)
		}
		rpc = f[3]
	case <-time.After(60 * time.Second):
		stop()
		return nil, kv.ClientConfig{}, errors.New("rmakv server not serving after 60 s")
	}
	cfg := kv.ClientConfig{Socket: cliEng.Socket, Portal: po, Servers: []kv.ServerAddr{{RPC: rpc}}, CredsDir: creds,
		MaxInFlight: onermaKVDepth, MaxUpdates: onermaKVDepth, MaxValue: w.ValueBytes,
		NoLookup: true} // system onerma-kv: GETs with two READs (the bucket, the record)
	t := &kvTarget{system: "onerma-kv", cores: 1, suffix: suffix, dial: kvload.DialOneRMAKV(cfg), depth: onermaKVDepth, clients: 1, clientCPUs: []int{0},
		pids: []int{cmd.Process.Pid, srvEng.Pid()}, server: "taskset " + strings.Join(args, " ") + " (" + where + ")", stop: stop}
	rmactl := filepath.Join(filepath.Dir(rmakv), "rmactl")
	t.stats = func() (*ctlmsg.Stats, error) { return engineStats(rmactl, cliEng.Socket) }
	return t, cfg, nil
}

// lookupTwin is onerma-kv-lookup: t's server and engines, whose clients
// (cfg, t's) GET with kv's default, one LOOKUP a GET where the value may
// be in a record (at 32 B every value fits its slot under cfg.MaxValue:
// the clients read the bucket). t stops what they
// share (the twin's stop does nothing), and pausing either pauses both
// (each runs resumed).
func lookupTwin(t *kvTarget, cfg kv.ClientConfig) *kvTarget {
	tw := *t
	tw.system = "onerma-kv-lookup"
	cfg.NoLookup = false
	tw.dial = kvload.DialOneRMAKV(cfg)
	tw.stop = func() error { return nil }
	return &tw
}
