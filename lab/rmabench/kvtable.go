package main

import (
	"fmt"
	"strings"
)

// kvRef is the system the kv targets are stated against.
const kvRef = "memcached"

// kvSeries is one system's GET rows of one kv workload and size, in the
// order they ran: the k-th is from round k.
type kvSeries struct {
	system, setup string
	rows          []Row
}

func (s *kvSeries) med(f func(r *Row) float64) float64 {
	v := make([]float64, len(s.rows))
	for i := range s.rows {
		v[i] = f(&s.rows[i])
	}
	return median(v)
}

func kvCPU(r *Row) float64 {
	if r.CPUSecPerMOps == nil {
		return 0
	}
	return *r.CPUSecPerMOps
}

func kvP999(r *Row) float64 {
	if r.P999us == nil {
		return 0
	}
	return *r.P999us
}

// printKV prints, for each closed-loop kv workload and size, every
// system's medians over the rounds, each system's per-round ratios
// against memcached (same round, so seconds apart), the targets
// where onerma-kv ran, its GETs per serving CPU second against pipelined
// redis-benchmark's, and a summary of Figure 8's sweep.
func printKV(rows []Row) {
	type key struct {
		base string // the setup without "-memif"
		size int
	}
	var keys []key
	series := make(map[key][]*kvSeries)
	for _, r := range rows {
		if r.Test != "get" || !(strings.HasPrefix(r.Setup, "kv-ycsb-c") || strings.HasPrefix(r.Setup, "kv-ycsb-b")) {
			continue
		}
		k := key{strings.TrimSuffix(r.Setup, "-memif"), r.Size}
		if series[k] == nil {
			keys = append(keys, k)
		}
		var s *kvSeries
		for _, x := range series[k] {
			if x.system == r.System && x.setup == r.Setup {
				s = x
			}
		}
		if s == nil {
			s = &kvSeries{system: r.System, setup: r.Setup}
			series[k] = append(series[k], s)
		}
		s.rows = append(s.rows, r)
	}
	for _, k := range keys {
		var ref *kvSeries
		for _, s := range series[k] {
			name := s.system + strings.TrimPrefix(s.setup, k.base)
			fmt.Printf("%s %4d B %-16s median of %d rounds: %9.0f GETs/s  p50 %7.1f us  p99 %8.1f us  p99.9 %8.1f us  serving CPU %6.2f s per M ops\n",
				k.base, k.size, name, len(s.rows), s.med(func(r *Row) float64 { return r.OpsPerSec }), s.med(func(r *Row) float64 { return r.P50us }),
				s.med(p99), s.med(kvP999), s.med(kvCPU))
			if s.system == kvRef {
				ref = s
			}
		}
		if ref == nil {
			continue
		}
		for _, s := range series[k] {
			if s == ref {
				continue
			}
			n := min(len(s.rows), len(ref.rows))
			ops, lat, cpu := make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
			for i := range n {
				a, b := &s.rows[i], &ref.rows[i]
				if b.OpsPerSec > 0 && p99(b) > 0 && kvCPU(b) > 0 {
					ops = append(ops, a.OpsPerSec/b.OpsPerSec)
					lat = append(lat, p99(a)/p99(b))
					cpu = append(cpu, kvCPU(a)/kvCPU(b))
				}
			}
			if len(ops) == 0 {
				continue
			}
			name := s.system + strings.TrimPrefix(s.setup, k.base)
			fmt.Printf("%s %4d B %s/%s, %d interleaved rounds: GETs/s x%.2f (rounds %s), p99 x%.2f (%s), serving CPU per op x%.2f (%s)",
				k.base, k.size, name, kvRef, len(ops), median(ops), ratioList(ops), median(lat), ratioList(lat), median(cpu), ratioList(cpu))
			if s.system == "onerma-kv" && k.base == "kv-ycsb-c" && k.size == 32 {
				fmt.Print(" (targets: GETs/s x10 or more, p99 x0.20 or less)")
			}
			fmt.Println()
		}
	}
	// GETs per serving CPU second against redis-benchmark's pipelined
	// GETs of the same size (target: onerma-kv ahead).
	for _, rb := range rows {
		if rb.Setup != "kv-redis-benchmark-P16" || kvCPU(&rb) <= 0 {
			continue
		}
		for _, k := range keys {
			if k.size != rb.Size || k.base != "kv-ycsb-c" {
				continue
			}
			for _, s := range series[k] {
				if c := s.med(kvCPU); c > 0 {
					fmt.Printf("kv-ycsb-c %4d B %-16s %9.0f GETs per serving CPU second; redis-benchmark -P %d: %9.0f (x%.2f)\n",
						k.size, s.system+strings.TrimPrefix(s.setup, k.base), 1e6/c, kvToolPipeline, 1e6/kvCPU(&rb), kvCPU(&rb)/c)
				}
			}
		}
	}
	printFig8(rows)
}

// printFig8 prints each system's Figure 8 sweep in brief: its latency at
// the lowest load offered and the highest load it served unsaturated.
func printFig8(rows []Row) {
	var systems []string
	by := make(map[string][]Row)
	for _, r := range rows {
		if !strings.HasPrefix(r.Setup, "kv-fig8") {
			continue
		}
		name := r.System + strings.TrimPrefix(r.Setup, "kv-fig8")
		if by[name] == nil {
			systems = append(systems, name)
		}
		by[name] = append(by[name], r)
	}
	for _, name := range systems {
		rs := by[name]
		lo, best := rs[0], -1
		for i, r := range rs {
			if !strings.Contains(r.Note, "saturated") {
				best = i
			}
		}
		fmt.Printf("kv-fig8 %-14s at %7.0f GETs/s offered: p50 %6.1f us, p99 %7.1f us", name, lo.OfferedOpsPerSec, lo.P50us, p99(&lo))
		if best >= 0 {
			b := rs[best]
			fmt.Printf("; highest load served unsaturated %7.0f GETs/s: p50 %6.1f us, p99 %7.1f us", b.OfferedOpsPerSec, b.P50us, p99(&b))
		}
		fmt.Println()
	}
}
