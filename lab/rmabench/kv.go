package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/kvload"
)

// The kv setup measures key/value caches with one load generator
// (internal/kvload) and the same workloads: OneRMA's cache (onerma-kv)
// against memcached and Redis, the servers all on this machine, every
// client and server on loopback. For each value size (kvSizes) it starts
// every system, loads the same keys into each, and runs
//
//   - kv-ycsb-c and kv-ycsb-b: closed loop at kvClients clients (Go
//     clients of memcached and Redis, one connection each; OneRMA's as its
//     target says), kvRounds interleaved rounds of -D each;
//   - at 32 B (and at 1 KB, OneRMA's cache alone, by two READs and
//     by one LOOKUP a GET), kv-fig8: Figure 8, open-loop GET latency
//     against offered load up to each system's saturation (fig8.go;
//     rmafigures -kv draws it);
//   - the peers' own tools at their best (kvtools.go).
//
// Each row's cpu_s_per_mops is the serving side's CPU per million
// operations, from /proc: memcached's or redis-server's process, or
// OneRMA's cache server and its engine with its polling core.

// kvSizes are the value sizes: HERD's 32 B and 1 KB.
var kvSizes = []int{32, 1024}

// Knobs of the kv setup (flags -kv-*).
var (
	kvClients = 16 // closed and open loop: clients (connections) of a synchronous driver
	kvRounds  = 3
	kvKeys32  = uint64(1_000_000) // keys at 32 B values
	kvKeys1K  = uint64(100_000)   // keys at 1 KB values
)

// kvTarget is one running key/value system under measurement.
type kvTarget struct {
	system string // "memcached", "redis", "onerma-kv", "onerma-kv-lookup"
	suffix string // appended to the setup: "" or "-memif"
	dial   kvload.Dialer
	// depth above 1: each client is an AsyncStore keeping depth GETs in
	// flight (clients: how many; 0 means 1); else kvClients synchronous
	// clients.
	depth, clients int
	pids           []int  // the serving side's processes, whose CPU is counted
	cores          int    // the serving side's worker threads (an engine: its polling cores)
	clientCPUs     []int  // the CPUs the clients are pinned to (kvload.Config.ClientCPUs)
	server         string // how the server was started, for the rows
	stop           func() error
	// pause and resume, when set, stop the target between its runs and
	// start it again for each (OneRMA's engines poll busy: frozen, they
	// take no CPU from the other systems while those are measured). A
	// target runs from its start until loaded, then stays paused but for
	// its runs.
	pause, resume func() error
	// stats, when set, reads the counters of the engine the clients'
	// portals are on (OneRMA's): a run's row says how many completion
	// doorbells that engine rang for them (kvTarget.run).
	stats func() (*ctlmsg.Stats, error)
}

// run runs cfg against t, resumed for it when it pauses between runs. With
// t.stats, note says what the clients' engine paid for waking them over
// the run, its warm-up included.
func (t *kvTarget) run(cfg kvload.Config) (res *kvload.Result, note string, err error) {
	if t.resume != nil {
		if err := t.resume(); err != nil {
			return nil, "", fmt.Errorf("resuming %s%s: %w", t.system, t.suffix, err)
		}
		defer t.pause()
	}
	var before *ctlmsg.Stats
	if t.stats != nil {
		if before, err = t.stats(); err != nil {
			return nil, "", err
		}
	}
	res, err = kvload.Run(t.dial, cfg)
	if err == nil && before != nil {
		after, serr := t.stats()
		if serr != nil {
			return nil, "", serr
		}
		rung, held := after.Doorbells-before.Doorbells, after.DoorbellsDeferred-before.DoorbellsDeferred
		note = fmt.Sprintf("the clients' engine rang %d completion doorbells over the run and its warm-up (%d held back)", rung, held)
		if ops := res.GetsDone + res.SetsDone; ops > 0 {
			note += fmt.Sprintf(", %.3f per operation measured", float64(rung)/float64(ops))
		}
	}
	return res, note, err
}

// concurrency is how many clients a run of t uses and how many GETs each
// keeps in flight.
func (t *kvTarget) concurrency() (clients, depth int) {
	if t.depth > 1 {
		return max(t.clients, 1), t.depth
	}
	return kvClients, 1
}

// onermaKVTargets starts OneRMA's cache for w's value size: on one
// loopback engine (suffix "") and over two engines on memif ("-memif"),
// each a kvTarget whose pids are the cache server's and its engine's
// processes. It is set by the file that links the cache's client (the kv
// package); nil, the kv rows have no onerma-kv system.
var onermaKVTargets func(bin, dir string, w kvload.Workload) ([]*kvTarget, error)

// kvKeys is the key count at a value size.
func kvKeys(size int) uint64 {
	if size <= 64 {
		return kvKeys32
	}
	return kvKeys1K
}

// startKVTargets starts every system for w and loads w's keys into each.
func startKVTargets(bin, dir string, w kvload.Workload) ([]*kvTarget, error) {
	var ts []*kvTarget
	fail := func(err error) ([]*kvTarget, error) {
		stopKVTargets(ts)
		return nil, err
	}
	// memcached's item memory: its slab class for a key and value plus
	// its item header, with room to spare (it must not evict).
	memMB := max(64, int(w.Keys*uint64(w.ValueBytes+160)*3/2>>20))
	mc, err := kvload.StartMemcached(memMB, 0)
	if err != nil {
		return fail(err)
	}
	ts = append(ts, &kvTarget{system: "memcached", cores: runtime.NumCPU(), dial: kvload.DialMemcached(mc.Addr), pids: []int{mc.Pid()}, server: mc.Command(), stop: mc.Stop})
	rdir, err := os.MkdirTemp(dir, "redis-")
	if err != nil {
		return fail(err)
	}
	rd, err := kvload.StartRedis(rdir, 0)
	if err != nil {
		return fail(err)
	}
	ts = append(ts, &kvTarget{system: "redis", cores: 1, dial: kvload.DialRedis(rd.Addr), pids: []int{rd.Pid()}, server: rd.Command(), stop: rd.Stop})
	if onermaKVTargets != nil {
		o, err := onermaKVTargets(bin, dir, w)
		if err != nil {
			return fail(fmt.Errorf("onerma-kv: %w", err))
		}
		ts = append(ts, o...)
	}
	for _, t := range ts {
		start := time.Now()
		if err := kvload.Load(t.dial, w, 8); err != nil {
			return fail(fmt.Errorf("%s%s: load %d keys of %d B: %w", t.system, t.suffix, w.Keys, w.ValueBytes, err))
		}
		fmt.Printf("kv: loaded %d keys of %d B into %s%s in %v\n", w.Keys, w.ValueBytes, t.system, t.suffix, time.Since(start).Round(time.Millisecond))
	}
	for _, t := range ts {
		if t.pause != nil {
			if err := t.pause(); err != nil {
				return fail(fmt.Errorf("pausing %s%s: %w", t.system, t.suffix, err))
			}
		}
	}
	return ts, nil
}

func stopKVTargets(ts []*kvTarget) error {
	var errs []error
	for _, t := range ts {
		if t.resume != nil { // a paused process would not see the stop's SIGTERM
			t.resume()
		}
		if err := t.stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", t.system, t.suffix, err))
		}
	}
	return errors.Join(errs...)
}

// kvRun measures the kv setups and Figure 8's sweep, emitting each row
// as it is measured.
func kvRun(bin, dir string, dur time.Duration, emit emitFunc) error {
	if onermaKVTargets == nil {
		fmt.Println("kv: no onerma-kv rows: this rmabench was built without OneRMA's cache client (onermakv.go)")
	}
	for _, size := range kvSizes {
		w := kvload.Workload{Keys: kvKeys(size), ValueBytes: size, Seed: 1}
		ts, err := startKVTargets(bin, dir, w)
		if err != nil {
			return err
		}
		var closed []Row // the closed-loop rows, whose throughput Figure 8 sweeps up to
		err = kvMeasure(ts, w, dur, func(r Row) { closed = append(closed, r); emit(r) })
		switch {
		case err != nil:
		case size == 32:
			err = fig8Run(ts, w, closed, emit)
		default: // the cache's two GET paths at 1 KB: two READs, one LOOKUP
			var cache []*kvTarget
			for _, t := range ts {
				if (t.system == "onerma-kv" || t.system == "onerma-kv-lookup") && t.suffix == "" {
					cache = append(cache, t)
				}
			}
			err = fig8Run(cache, w, closed, emit)
		}
		if serr := stopKVTargets(ts); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		if err := kvToolsRun(size, dir, dur, emit); err != nil {
			return err
		}
	}
	return nil
}

// kvMeasure runs YCSB-C and YCSB-B closed loop on every target in
// kvRounds interleaved rounds of dur each.
func kvMeasure(ts []*kvTarget, w kvload.Workload, dur time.Duration, emit emitFunc) error {
	for _, mix := range []kvload.Mix{kvload.YCSBC, kvload.YCSBB} {
		w := w
		w.Mix = mix
		runs := make([]func(emitFunc) error, len(ts))
		for i, t := range ts {
			runs[i] = func(emit emitFunc) error {
				clients, depth := t.concurrency()
				cfg := kvload.Config{Workload: w, Clients: clients, Depth: depth, Warmup: kvWarmup(dur), Duration: dur,
					CPU: kvload.NewCPUMeter(t.pids...), ClientCPUs: t.clientCPUs}
				res, note, err := t.run(cfg)
				if err != nil {
					return fmt.Errorf("%s%s %s %d B: %w", t.system, t.suffix, mix.Name, w.ValueBytes, err)
				}
				for _, r := range kvRows(t, cfg, res) {
					if note != "" {
						r.Note = addNote(r.Note, note)
					}
					emit(r)
				}
				return nil
			}
		}
		if err := interleavedRows(kvRounds, emit, runs...); err != nil {
			return err
		}
	}
	return nil
}

// kvWarmup is the unmeasured start of a run of dur.
func kvWarmup(dur time.Duration) time.Duration {
	return min(max(dur/10, 200*time.Millisecond), time.Second)
}

// kvRows are the rows of one run: its GETs, and its SETs if it had any.
func kvRows(t *kvTarget, cfg kvload.Config, res *kvload.Result) []Row {
	clients, depth := t.concurrency()
	loop := "closed loop"
	if cfg.Rate > 0 {
		loop = fmt.Sprintf("open loop, Poisson arrivals at %.0f/s", cfg.Rate)
	}
	cmd := fmt.Sprintf("rmabench -only kv: kvload %s, %s, %d keys of %d B, scrambled Zipfian 0.99, %d clients x %d in flight; server: %s",
		cfg.Workload.Mix.Name, loop, cfg.Workload.Keys, cfg.Workload.ValueBytes, clients, depth, t.server)
	setup := "kv-" + cfg.Workload.Mix.Name + t.suffix
	if cfg.Rate > 0 {
		setup = "kv-fig8" + t.suffix
	}
	// cpu_s_per_mops: the run's serving CPU per million of all its
	// operations (GETs only in YCSB-C).
	row := func(test string, done uint64, lat kvHist, perSec float64) Row {
		r := Row{System: t.system, Setup: setup, Test: test, Size: cfg.Workload.ValueBytes, Outstanding: clients * depth, Cores: t.cores,
			OpsPerSec: perSec, MBPerSec: perSec * float64(cfg.Workload.ValueBytes) / 1e6,
			P50us: lat.us(50), P99us: benchrow.F(lat.us(99)), P999us: benchrow.F(lat.us(99.9)),
			Ops: done, Errors: res.Failed(), Seconds: res.Seconds, OfferedOpsPerSec: cfg.Rate, Command: cmd}
		if done > 0 && res.ServerCPU > 0 {
			r.CPUSecPerMOps = benchrow.F(res.ServerCPU.Seconds() / (float64(res.GetsDone+res.SetsDone) / 1e6))
		}
		return r
	}
	get := row("get", res.GetsDone, kvHist{res.GetLat}, res.GetsPerSec())
	get.Note = kvNote(res)
	rows := []Row{get}
	if res.SetsDone > 0 {
		rows = append(rows, row("set", res.SetsDone, kvHist{res.SetLat}, res.SetsPerSec()))
	}
	return rows
}

// kvNote says what a row's numbers do not: failures by kind, and an open
// loop's send lag and unserved arrivals.
func kvNote(res *kvload.Result) string {
	var n []string
	if res.Failed() > 0 {
		n = append(n, fmt.Sprintf("%d misses, %d wrong values, %d errors (first: %v)", res.Misses, res.Bad, res.Errors, res.FirstError))
	}
	if res.Offered > 0 {
		lag := kvHist{res.Lag}
		n = append(n, fmt.Sprintf("sent after arrival: p50 %.1f us, p99 %.1f us (latency counts from arrival)", lag.us(50), lag.us(99)))
		if res.Unserved > 0 {
			n = append(n, fmt.Sprintf("%d arrivals never sent (saturated)", res.Unserved))
		}
	}
	return strings.Join(n, "; ")
}

// kvHist reads an HdrHistogram of nanoseconds in microseconds.
type kvHist struct{ h *hdrhistogram.Histogram }

func (k kvHist) us(q float64) float64 { return float64(k.h.ValueAtQuantile(q)) / 1e3 }
