package main

import (
	"fmt"
	"os"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
)

// nCLoopback is how many interleaved rounds cLoopbackRun runs.
const nCLoopback = 5

// cLoopbackSpecs are the tests of the c-loopback setup: 64 B and 4 KB
// read_bw at the loopback setup's depth.
var cLoopbackSpecs = []spec{{"read_bw", 64, 64}, {"read_bw", abi.MaxOpBytes, 64}}

// cLoopbackWait is how both clients wait for completions in the
// c-loopback setup: each sleeps on the engine's completion doorbell as
// soon as its completion ring is empty (-event, no spinning first). A
// client that busy-polls spends its CPU whether or not there is work, so
// its CPU time per op would only be the inverse of the engine's rate;
// sleeping, it spends what posting and reaping its ops and waking cost.
var cLoopbackWait = []string{"-event", "-spins", "-1"}

// cLoopbackGoal is the C client's target: its CPU time per op at most the
// Go portal's (median of the rounds' ratios).
const cLoopbackGoal = 1.0

// cLoopbackRun measures libonerma against package portal on the loopback
// engine (benchLoopback, MTU 1500): in nCLoopback interleaved rounds, each
// run max(1 s, dur/nCLoopback) long, rmaperf (system onerma) and
// onerma-perf (system onerma-c, libonerma's rmaperf) run each of
// cLoopbackSpecs, pinned to the same CPU, with the same flags (-self:
// each registers its own region and derives its own K_d). Every row
// carries cpu_ns_per_op, the client's getrusage CPU time per op; the
// engine's CPU is not in it (it polls on its own CPU either way).
// printCLoopback prints the median of each round's ratios.
func cLoopbackRun(rmad, rmaperf, onermaPerf, dir string, dur time.Duration, emit emitFunc) error {
	if _, err := os.Stat(onermaPerf); err != nil {
		return fmt.Errorf("%w (make build builds onerma-perf into bin/)", err)
	}
	d := max(time.Second, dur/nCLoopback)
	e, err := testbed.Start(benchLoopback(rmad, dir, "bench-c", "10.99.0.1", "1500"))
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	var runs []func() (Row, error)
	for _, s := range cLoopbackSpecs {
		for _, bin := range []string{rmaperf, onermaPerf} {
			runs = append(runs, func() (Row, error) {
				return rmaperfRun(bin, "0", s, d, "c-loopback", nil, append([]string{"-socket", e.Socket, "-self"}, cLoopbackWait...)...)
			})
		}
	}
	if err := interleaved(nCLoopback, emit, runs...); err != nil {
		return err
	}
	return e.Stop(10 * time.Second)
}

// cRound is one c-loopback round of one size: the Go client's row and
// the C client's.
type cRound struct{ goRow, cRow Row }

// cpuRatio is the C client's CPU time per op over the Go client's (0 when
// a row lacks it).
func (r cRound) cpuRatio() float64 {
	if r.goRow.CPUNsPerOp == nil || r.cRow.CPUNsPerOp == nil || *r.goRow.CPUNsPerOp <= 0 {
		return 0
	}
	return *r.cRow.CPUNsPerOp / *r.goRow.CPUNsPerOp
}

// cLoopbackRounds returns the c-loopback rounds of size: the k-th rmaperf
// row and the k-th onerma-perf row of that size, in the order measured
// (each round has one of each).
func cLoopbackRounds(rows []Row, size int) []cRound {
	var gos, cs []Row
	for _, r := range rows {
		if r.Setup != "c-loopback" || r.Test != "read_bw" || r.Size != size || r.CPUNsPerOp == nil {
			continue
		}
		switch r.System {
		case "onerma":
			gos = append(gos, r)
		case "onerma-c":
			cs = append(cs, r)
		}
	}
	out := make([]cRound, min(len(gos), len(cs)))
	for i := range out {
		out[i] = cRound{gos[i], cs[i]}
	}
	return out
}

// cLoopbackSummary is a size's medians over its rounds: the CPU ratio,
// and each client's CPU ns per op and ops/s.
type cLoopbackSummary struct {
	rounds                          int
	ratios                          []float64
	ratio, cpuC, cpuGo, opsC, opsGo float64
}

func summarizeCLoopback(rows []Row, size int) (cLoopbackSummary, bool) {
	rs := cLoopbackRounds(rows, size)
	var s cLoopbackSummary
	var cpuC, cpuGo, opsC, opsGo []float64
	for _, r := range rs {
		v := r.cpuRatio()
		if v <= 0 {
			continue
		}
		s.ratios = append(s.ratios, v)
		cpuC, cpuGo = append(cpuC, *r.cRow.CPUNsPerOp), append(cpuGo, *r.goRow.CPUNsPerOp)
		opsC, opsGo = append(opsC, r.cRow.OpsPerSec), append(opsGo, r.goRow.OpsPerSec)
	}
	if len(s.ratios) == 0 {
		return cLoopbackSummary{}, false
	}
	s.rounds = len(s.ratios)
	s.ratio, s.cpuC, s.cpuGo = median(s.ratios), median(cpuC), median(cpuGo)
	s.opsC, s.opsGo = median(opsC), median(opsGo)
	return s, true
}

// printCLoopback prints, per size, the median over rounds of the C
// client's CPU ns per op over the Go client's, with the target, and both
// clients' median ops/s beside it.
func printCLoopback(rows []Row) {
	for _, sp := range cLoopbackSpecs {
		s, ok := summarizeCLoopback(rows, sp.size)
		if !ok {
			continue
		}
		fmt.Printf("c-loopback %s %d B O=%d CPU ns per op, onerma-perf (C) / rmaperf (Go), %d interleaved rounds: median %.2f (ratios %s; %.0f / %.0f ns) (target <= %.2f); ops/s C %s, Go %s\n",
			sp.test, sp.size, sp.depth, s.rounds, s.ratio, ratioList(s.ratios), s.cpuC, s.cpuGo, cLoopbackGoal, fmtRate(s.opsC), fmtRate(s.opsGo))
	}
}

// cLoopbackMetric is the headline's C client metric at size.
func cLoopbackMetric(size int) func([]Row) (measure, bool) {
	return func(rows []Row) (measure, bool) {
		s, ok := summarizeCLoopback(rows, size)
		if !ok {
			return measure{}, false
		}
		return measure{fmt.Sprintf("%.2f (%d rounds; %.0f / %.0f ns; ops/s C %s, Go %s)", s.ratio, s.rounds, s.cpuC, s.cpuGo, fmtRate(s.opsC), fmtRate(s.opsGo)),
			fmt.Sprintf("≤ %.0f", cLoopbackGoal), judge(s.ratio <= cLoopbackGoal)}, true
	}
}
