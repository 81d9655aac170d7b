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

// The kv targets, kv-ycsb-c 32 B at the same concurrency: onerma-kv's
// GETs/s at least kvGoalOps times memcached's, its p99 at most kvGoalP99
// times memcached's, and more GETs per serving CPU second than pipelined
// redis-benchmark's (kvGoalTool).
const (
	kvGoalOps  = 10.0
	kvGoalP99  = 0.20
	kvGoalTool = 1.0
)

// name is the series' system, with its setup's suffix (-memif).
func (s *kvSeries) name(base string) string { return s.system + strings.TrimPrefix(s.setup, base) }

// kvGroup is one closed-loop kv workload (the setup without "-memif")
// and value size, and every system's series of it.
type kvGroup struct {
	base   string
	size   int
	series []*kvSeries
}

// kvGroups returns the closed-loop GET rows grouped by workload and
// size, then by system, each in the order first seen.
func kvGroups(rows []Row) []*kvGroup {
	var groups []*kvGroup
	for _, r := range rows {
		if r.Test != "get" || !(strings.HasPrefix(r.Setup, "kv-ycsb-c") || strings.HasPrefix(r.Setup, "kv-ycsb-b")) {
			continue
		}
		base := strings.TrimSuffix(r.Setup, "-memif")
		var g *kvGroup
		for _, x := range groups {
			if x.base == base && x.size == r.Size {
				g = x
			}
		}
		if g == nil {
			g = &kvGroup{base: base, size: r.Size}
			groups = append(groups, g)
		}
		var s *kvSeries
		for _, x := range g.series {
			if x.system == r.System && x.setup == r.Setup {
				s = x
			}
		}
		if s == nil {
			s = &kvSeries{system: r.System, setup: r.Setup}
			g.series = append(g.series, s)
		}
		s.rows = append(s.rows, r)
	}
	return groups
}

// ref is the group's memcached series, nil if none.
func (g *kvGroup) ref() *kvSeries {
	for _, s := range g.series {
		if s.system == kvRef {
			return s
		}
	}
	return nil
}

// kvVsRef is a series against memcached's of the same group, round by
// round (same round, so seconds apart): GETs/s, p99 and serving CPU per
// op, each over memcached's.
type kvVsRef struct {
	name          string
	ops, lat, cpu []float64
}

// vsRef returns every series of g but memcached's against memcached's,
// those with at least one comparable round.
func (g *kvGroup) vsRef() []kvVsRef {
	ref := g.ref()
	if ref == nil {
		return nil
	}
	var out []kvVsRef
	for _, s := range g.series {
		if s == ref {
			continue
		}
		n := min(len(s.rows), len(ref.rows))
		v := kvVsRef{name: s.name(g.base), ops: make([]float64, 0, n), lat: make([]float64, 0, n), cpu: make([]float64, 0, n)}
		for i := range n {
			a, b := &s.rows[i], &ref.rows[i]
			if b.OpsPerSec > 0 && p99(b) > 0 && kvCPU(b) > 0 {
				v.ops = append(v.ops, a.OpsPerSec/b.OpsPerSec)
				v.lat = append(v.lat, p99(a)/p99(b))
				v.cpu = append(v.cpu, kvCPU(a)/kvCPU(b))
			}
		}
		if len(v.ops) > 0 {
			out = append(out, v)
		}
	}
	return out
}

// kvToolRatio is a kv-ycsb-c series' GETs per serving CPU second against
// redis-benchmark's pipelined GETs of the same size.
type kvToolRatio struct {
	size       int
	name       string
	perCPU     float64 // the series' GETs per serving CPU second (median over rounds)
	toolPerCPU float64 // redis-benchmark's
}

func (k kvToolRatio) ratio() float64 { return k.perCPU / k.toolPerCPU }

// kvToolRatios returns every kv-ycsb-c series against each
// kv-redis-benchmark-P16 row of its size.
func kvToolRatios(rows []Row, groups []*kvGroup) []kvToolRatio {
	var out []kvToolRatio
	for _, rb := range rows {
		if rb.Setup != "kv-redis-benchmark-P16" || kvCPU(&rb) <= 0 {
			continue
		}
		for _, g := range groups {
			if g.size != rb.Size || g.base != "kv-ycsb-c" {
				continue
			}
			for _, s := range g.series {
				if c := s.med(kvCPU); c > 0 {
					out = append(out, kvToolRatio{g.size, s.name(g.base), 1e6 / c, 1e6 / kvCPU(&rb)})
				}
			}
		}
	}
	return out
}

// printKV prints, for each closed-loop kv workload and size, every
// system's medians over the rounds, each system's per-round ratios
// against memcached (same round, so seconds apart), the targets where
// onerma-kv ran, its GETs per serving CPU second against pipelined
// redis-benchmark's, and a summary of Figure 8's sweep.
func printKV(rows []Row) {
	groups := kvGroups(rows)
	for _, g := range groups {
		for _, s := range g.series {
			fmt.Printf("%s %4d B %-16s median of %d rounds: %9.0f GETs/s  p50 %7.1f us  p99 %8.1f us  p99.9 %8.1f us  serving CPU %6.2f s per M ops\n",
				g.base, g.size, s.name(g.base), len(s.rows), s.med(func(r *Row) float64 { return r.OpsPerSec }), s.med(func(r *Row) float64 { return r.P50us }),
				s.med(p99), s.med(kvP999), s.med(kvCPU))
		}
		for _, v := range g.vsRef() {
			fmt.Printf("%s %4d B %s/%s, %d interleaved rounds: GETs/s x%.2f (rounds %s), p99 x%.2f (%s), serving CPU per op x%.2f (%s)",
				g.base, g.size, v.name, kvRef, len(v.ops), median(v.ops), ratioList(v.ops), median(v.lat), ratioList(v.lat), median(v.cpu), ratioList(v.cpu))
			if strings.HasPrefix(v.name, "onerma-kv") && g.base == "kv-ycsb-c" && g.size == 32 {
				fmt.Printf(" (targets: GETs/s x%.0f or more, p99 x%.2f or less)", kvGoalOps, kvGoalP99)
			}
			fmt.Println()
		}
	}
	// GETs per serving CPU second against redis-benchmark's pipelined
	// GETs of the same size (target: onerma-kv ahead).
	for _, k := range kvToolRatios(rows, groups) {
		fmt.Printf("kv-ycsb-c %4d B %-16s %9.0f GETs per serving CPU second; redis-benchmark -P %d: %9.0f (x%.2f)\n",
			k.size, k.name, k.perCPU, kvToolPipeline, k.toolPerCPU, k.ratio())
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

// The lookup targets (issue 33): onerma-kv-lookup (a GET in one LOOKUP)
// against onerma-kv (two READs), kv-ycsb-c, same round: at 1 KB, GETs/s
// at least kvLookupGoalOps times and p50 at most kvLookupGoalP50 times;
// at 32 B (a value in its slot: one READ either way) GETs/s at least
// kvLookupGoal32 times.
const (
	kvLookupGoalOps = 1.3
	kvLookupGoalP50 = 0.65
	kvLookupGoal32  = 0.97
)

// kvLookupRatios returns, round by round, onerma-kv-lookup's GETs/s and
// p50 over onerma-kv's in kv-ycsb-c at size (on the loopback engine).
func kvLookupRatios(rows []Row, size int) (ops, p50 []float64) {
	for _, g := range kvGroups(rows) {
		if g.base != "kv-ycsb-c" || g.size != size {
			continue
		}
		var look, reads *kvSeries
		for _, s := range g.series {
			switch {
			case s.setup != g.base:
			case s.system == "onerma-kv-lookup":
				look = s
			case s.system == "onerma-kv":
				reads = s
			}
		}
		if look == nil || reads == nil {
			return nil, nil
		}
		for i := range min(len(look.rows), len(reads.rows)) {
			a, b := &look.rows[i], &reads.rows[i]
			if b.OpsPerSec > 0 && b.P50us > 0 {
				ops, p50 = append(ops, a.OpsPerSec/b.OpsPerSec), append(p50, a.P50us/b.P50us)
			}
		}
	}
	return ops, p50
}
