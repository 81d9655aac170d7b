package main

import (
	"fmt"
	"time"

	"github.com/onerma/onerma/internal/kvload"
)

// Figure 8 of the 1RMA paper: GET latency (p50, p99) against the load
// offered to one server, open loop, each system up to its saturation.
// Here each system serves 32 B values of kvKeys32 keys (and, at 1 KB,
// OneRMA's cache GETting by two READs and by one LOOKUP), YCSB-C, offered
// Poisson arrivals at fractions of the GET throughput its closed-loop
// kv-ycsb-c runs reached in the same run, the systems interleaved at
// each fraction; a system leaves the sweep after its first saturated
// point (arrivals left unserved, or under 95 % of the offered load
// served). rmafigures -kv draws the rows (setup kv-fig8) into
// figures/fig8.png.

// fig8Fractions are the loads offered, as fractions of each system's
// closed-loop throughput; the last ones overload it on purpose.
var fig8Fractions = []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25}

// fig8D is the measurement of each point (-fig8-D).
var fig8D = 2 * time.Second

const (
	fig8Warmup = 300 * time.Millisecond
	fig8Drain  = time.Second
)

// fig8Run runs Figure 8's sweep on ts (loaded with w's keys), the
// capacities taken from closed, the kv-ycsb-c rows of the same run,
// emitting each point as it is measured.
func fig8Run(ts []*kvTarget, w kvload.Workload, closed []Row, emit emitFunc) error {
	w.Mix = kvload.YCSBC
	capacity := make(map[*kvTarget]float64)
	for _, t := range ts {
		var v []float64
		for _, r := range closed {
			if r.System == t.system && r.Setup == "kv-ycsb-c"+t.suffix && r.Test == "get" {
				v = append(v, r.OpsPerSec)
			}
		}
		if len(v) == 0 || median(v) <= 0 {
			// Its kv-ycsb-c rows say why (errors, their note).
			fmt.Printf("kv-fig8: %s%s left out: no kv-ycsb-c throughput to sweep up to\n", t.system, t.suffix)
			continue
		}
		capacity[t] = median(v)
	}
	saturated := make(map[*kvTarget]bool)
	for i, f := range fig8Fractions {
		for k := range ts {
			t := ts[k]
			if i%2 == 1 { // every other load in the other order
				t = ts[len(ts)-1-k]
			}
			if saturated[t] || capacity[t] == 0 {
				continue
			}
			clients, depth := t.concurrency()
			// Unpinned (no ClientCPUs): the pacer hands each arrival to
			// the client's goroutine, and a goroutine locked to a thread
			// pinned to the CPU a polling engine shares wakes through a
			// hand-off to that thread every time, which saturates the
			// client long before the cache (bench/HISTORY.md, kv-fig8).
			cfg := kvload.Config{Workload: w, Clients: clients, Depth: depth, Rate: f * capacity[t],
				Warmup: fig8Warmup, Duration: fig8D, Drain: fig8Drain, CPU: kvload.NewCPUMeter(t.pids...)}
			res, note, err := t.run(cfg)
			if err != nil {
				return fmt.Errorf("fig8 %s%s at %.0f GETs/s: %w", t.system, t.suffix, cfg.Rate, err)
			}
			r := kvRows(t, cfg, res)[0]
			if note != "" {
				r.Note = addNote(r.Note, note)
			}
			r.Note = addNote(r.Note, fmt.Sprintf("offered %.2f x its kv-ycsb-c throughput (%.0f GETs/s)", f, capacity[t]))
			if res.Saturated() {
				saturated[t] = true
				r.Note = addNote(r.Note, "saturated")
			}
			fmt.Printf("kv-fig8 %-10s offered %9.0f served %9.0f GETs/s  p50 %8.1f us  p99 %9.1f us%s\n",
				t.system+t.suffix, cfg.Rate, r.OpsPerSec, r.P50us, *r.P99us, map[bool]string{true: "  (saturated)"}[res.Saturated()])
			emit(r)
		}
	}
	return nil
}
