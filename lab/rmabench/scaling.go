package main

// The platform's own crypto ceiling across cores: independent 4 KB
// seal+open loops (mbLoop, the engine's batched ipsec-mb path), one per
// vCPU, each pinned to its own CPU. What two loops move against one is
// the most an engine of two cores can gain over one on this host: the
// vCPUs may be hyperthreads of one physical core, or share the host's
// memory bandwidth and its hypervisor's time with other guests.

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/onerma/onerma/internal/cpupin"
)

// scalingRounds is how many interleaved rounds of one loop and two loops
// cryptoScaling runs.
const scalingRounds = 5

// scalingCPUs are the CPUs of a run of n loops: one loop runs on CPU 1
// (the loopback engine's, as the aes-gcm-limit rows), two on CPUs 1 and 0.
var scalingCPUs = []int{1, 0}

// cryptoScaling measures the platform rows of test crypto-scaling: runs
// of one loop and of two, in scalingRounds interleaved rounds, each run
// max(500 ms, min(dur, platformCap)/scalingRounds) long.
func cryptoScaling(dur time.Duration, emit emitFunc) error {
	d := max(500*time.Millisecond, min(dur, platformCap)/scalingRounds)
	run := func(n int) func() (Row, error) { return func() (Row, error) { return sealOpenLoops(n, d) } }
	return interleaved(scalingRounds, emit, run(1), run(2))
}

// sealOpenLoops runs n mbLoops for d, one per CPU of scalingCPUs[:n], each
// on its own locked and pinned thread, started together, and returns
// their total rate as one row.
func sealOpenLoops(n int, d time.Duration) (Row, error) {
	if n < 1 || n > len(scalingCPUs) {
		return Row{}, fmt.Errorf("crypto-scaling: %d loops, want 1..%d", n, len(scalingCPUs))
	}
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ops := make([]int, n)
	secs := make([]float64, n)
	errs := make([]error, n)
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			unpin, err := cpupin.Pin(scalingCPUs[i])
			if err != nil {
				errs[i] = err
				ready.Done()
				return
			}
			defer unpin()
			l, err := newMBLoop()
			if err != nil {
				errs[i] = err
				ready.Done()
				return
			}
			defer l.free()
			ready.Done()
			<-start
			t0 := time.Now()
			for time.Since(t0) < d {
				k, err := l.step()
				if err != nil {
					errs[i] = err
					return
				}
				ops[i] += k
			}
			secs[i] = time.Since(t0).Seconds()
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	for _, err := range errs {
		if err != nil {
			return Row{}, fmt.Errorf("crypto-scaling: %w", err)
		}
	}
	total, per := 0.0, make([]string, n)
	all := 0
	for i := range n {
		rate := float64(ops[i]) / secs[i]
		total += rate
		all += ops[i]
		per[i] = fmt.Sprintf("CPU %d %.0f", scalingCPUs[i], rate)
	}
	cpus := make([]string, n)
	for i, c := range scalingCPUs[:n] {
		cpus[i] = fmt.Sprint(c)
	}
	return Row{System: "host", Setup: "platform", Test: "crypto-scaling", Size: mbLoopBytes, Outstanding: mbLoopBurst, Cores: n,
		OpsPerSec: total, MBPerSec: total * mbLoopBytes / 1e6, Ops: uint64(all), Seconds: d.Seconds(),
		Command: fmt.Sprintf("rmabench -only crypto-scaling (%d independent loops of aesni/mb 4 KB seal+open, %d SealResponse in one Batch.Run then their OpenResponseDirect in one Run, one thread per CPU %s, started together, %v each)",
			n, mbLoopBurst, strings.Join(cpus, ","), d),
		Note: "ops/s: seal+open pairs of all loops; per loop: " + strings.Join(per, ", ")}, nil
}

// scalingGoal is the multi-core target: an engine's two cores / one, as a
// fraction of the platform's own two-loop / one-loop seal+open ratio.
const scalingGoal = 0.90

// scalingRatios returns the crypto-scaling rounds' two-loop / one-loop
// ratios (each round's pair of rows, in the order interleaved ran them).
func scalingRatios(rows []Row) []float64 {
	var ratios []float64
	var one *Row
	for i := range rows {
		r := &rows[i]
		if r.Setup != "platform" || r.Test != "crypto-scaling" {
			continue
		}
		if one == nil {
			one = r
			continue
		}
		a, b := one, r // a round's two rows, either order
		if a.Cores == 2 {
			a, b = b, a
		}
		if a.Cores == 1 && b.Cores == 2 && a.OpsPerSec > 0 {
			ratios = append(ratios, b.OpsPerSec/a.OpsPerSec)
		}
		one = nil
	}
	return ratios
}

// scalingShare is the selftest engine's 64 B read_bw on two cores over
// one (the median of selftestScaling's rounds, every poller at nice 0),
// against the platform's ceiling (the median of scalingRatios).
type scalingShare struct {
	got, ceiling float64
	rounds       int
}

func (s scalingShare) share() float64 { return s.got / s.ceiling }

// selftestScalingShare returns the run's scalingShare, false without
// both kinds of rounds.
func selftestScalingShare(rows []Row) (scalingShare, bool) {
	c := scalingRatios(rows)
	two, _ := selftestRoundRatios(rows)
	if len(c) == 0 || len(two) == 0 {
		return scalingShare{}, false
	}
	return scalingShare{got: median(two), ceiling: median(c), rounds: len(two)}, true
}

// printScaling prints the crypto-scaling rounds' two-loop/one-loop ratio
// and, when the run has them, the selftest engine's 64 B read_bw on two
// cores against one (selftestRoundRatios), whose target is scalingGoal
// of the platform's ratio.
func printScaling(rows []Row) {
	ratios := scalingRatios(rows)
	if len(ratios) == 0 {
		return
	}
	fmt.Printf("crypto-scaling: 4 KB seal+open, 2 loops / 1 loop (one per CPU), %d interleaved rounds: median %.2f (ratios %s)\n",
		len(ratios), median(ratios), ratioList(ratios))
	// The selftest setup's interleaved rounds, every poller at nice 0:
	// its single rows run one core at nice -20 and two at nice 0.
	if s, ok := selftestScalingShare(rows); ok {
		fmt.Printf("selftest read_bw 64 B: 2 cores / 1 core %.2f (median of %d interleaved rounds) = %.2f of the platform's %.2f (target >= %.2f)\n", s.got, s.rounds, s.share(), s.ceiling, scalingGoal)
	}
}
