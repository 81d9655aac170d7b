package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The ab setup (-only ab, never part of the default list) compares two
// builds of the engine: the old build's rmad and rmaperf from the
// directory of -ab-old, the new ones from -bin. Each measurement starts
// the loopback engine of one build with the loopback setup's flags and
// CPUs (loopbackOnce, benchLoopback: busy on CPU 1, frames to itself
// through the net_ring port at MTU 1500, rmabench's -crypto; rmaperf on
// CPU 0), runs one test with that build's rmaperf and stops the engine,
// so both builds measure on the same CPUs and neither engine runs beside
// the other.

// abSpecs are the ab setup's tests: the loopback engine's bandwidth rows,
// where a change of the engine's per-op cost shows most.
var abSpecs = []spec{{"read_bw", 64, 64}, {"read_bw", 4096, 64}, {"write_bw", 64, 64}, {"write_bw", 4096, 64}}

// The systems of the ab setup's rows.
const (
	abOldSystem = "onerma-old"
	abNewSystem = "onerma"
)

// abBins returns the old build's rmad and rmaperf in oldDir, or why they
// cannot be used.
func abBins(oldDir string) (rmad, rmaperf string, err error) {
	if oldDir == "" {
		return "", "", errors.New("-only ab needs -ab-old DIR (the old build's rmad and rmaperf)")
	}
	rmad, rmaperf = filepath.Join(oldDir, "rmad"), filepath.Join(oldDir, "rmaperf")
	if err := statAll("-ab-old", "", rmad, rmaperf); err != nil {
		return "", "", err
	}
	return rmad, rmaperf, nil
}

// statAll reports the first of paths that cannot be stat'ed, as an error
// prefixed with what and followed by why (in parentheses) if not empty.
func statAll(what, why string, paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			if why != "" {
				return fmt.Errorf("%s: %w (%s)", what, err, why)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// abRun measures each of abSpecs in rounds interleaved rounds (setup
// "ab"), each run max(1 s, dur/rounds) long: a round is the old build's
// run (system onerma-old) and the new build's (onerma): the old first in
// the first round, the new first in the second, and so on. Each row's
// note names the engine binary; its command names the rmaperf binary.
// printAB prints each round's ratio new/old and their median.
func abRun(oldDir, rmad, rmaperf, dir, crypto string, rounds int, dur time.Duration, emit emitFunc) error {
	oldRmad, oldRmaperf, err := abBins(oldDir)
	if err != nil {
		return err
	}
	d := max(time.Second, dur/time.Duration(rounds))
	for _, s := range abSpecs {
		build := func(system, name, rmad, rmaperf string) func() (Row, error) {
			return func() (Row, error) {
				r, err := loopbackOnce(rmad, rmaperf, dir, name, "1500", crypto, s, d, "ab")
				if err != nil {
					return Row{}, fmt.Errorf("ab %s %s %d B: %w", system, s.test, s.size, err)
				}
				r.System = system
				r.Note = addNote(r.Note, "engine "+rmad)
				return r, nil
			}
		}
		if err := interleaved(rounds, emit,
			build(abOldSystem, "bench-ab-old", oldRmad, oldRmaperf),
			build(abNewSystem, "bench-ab", rmad, rmaperf)); err != nil {
			return err
		}
	}
	return nil
}

// printAB prints, for each test of the ab setup, every round's ops/s of
// the old and the new build (and which ran first), the round's ratio
// new/old, and the median of the ratios.
func printAB(rows []Row) {
	var tests []spec
	by := map[spec][]Row{}
	for _, r := range rows {
		if r.Setup != "ab" {
			continue
		}
		s := spec{r.Test, r.Size, r.Outstanding}
		if by[s] == nil {
			tests = append(tests, s)
		}
		by[s] = append(by[s], r)
	}
	for _, s := range tests {
		rs := by[s]
		name := fmt.Sprintf("ab %s %d B O=%d", s.test, s.size, s.depth)
		fmt.Printf("%-28s %12s %12s %8s\n", name, "old ops/s", "new ops/s", "new/old")
		var ratios []float64
		for k := 0; k+1 < len(rs); k += 2 { // a round: its two runs in the order they ran
			old, nu, first := rs[k], rs[k+1], "old"
			if old.System == abNewSystem {
				old, nu, first = nu, old, "new"
			}
			ratio := 0.0
			if old.OpsPerSec > 0 {
				ratio = nu.OpsPerSec / old.OpsPerSec
				ratios = append(ratios, ratio)
			}
			fmt.Printf("%-28s %12.0f %12.0f %8.3f\n", fmt.Sprintf("  round %d (%s first)", k/2+1, first), old.OpsPerSec, nu.OpsPerSec, ratio)
		}
		if len(ratios) > 0 {
			fmt.Printf("%s new/old, %d interleaved rounds: median %.3f\n", name, len(ratios), median(ratios))
		}
	}
}
