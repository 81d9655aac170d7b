package main

import (
	"slices"
	"strconv"
	"strings"
)

// interleaved runs n rounds of runs, each run once per round: even rounds
// in the order given, odd rounds backwards, so no run is always first and
// a steady drift of the machine's speed favours none of them. Runs of one
// round are seconds apart, where the single rows of a make bench run are
// minutes apart. Each row goes to emit as its run returns it; the first
// error ends the rounds.
func interleaved(n int, emit emitFunc, runs ...func() (Row, error)) error {
	for k := range n {
		for i := range runs {
			run := runs[i]
			if k%2 == 1 {
				run = runs[len(runs)-1-i]
			}
			r, err := run()
			if err != nil {
				return err
			}
			emit(r)
		}
	}
	return nil
}

// interleavedRows is interleaved for runs that each measure several rows
// (one engine started, several tests on it), each run emitting its rows
// as it measures them.
func interleavedRows(n int, emit emitFunc, runs ...func(emitFunc) error) error {
	for k := range n {
		for i := range runs {
			run := runs[i]
			if k%2 == 1 {
				run = runs[len(runs)-1-i]
			}
			if err := run(emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// median returns the median of v (v is left unchanged).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratioList formats the ratios of the rounds, two decimals each, in
// round order.
func ratioList(v []float64) string { return ratioListPrec(v, 2) }

// ratioListPrec is ratioList with prec decimals.
func ratioListPrec(v []float64, prec int) string {
	rs := make([]string, len(v))
	for i, x := range v {
		rs[i] = strconv.FormatFloat(x, 'f', prec, 64)
	}
	return strings.Join(rs, " ")
}
