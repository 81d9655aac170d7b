package kvfail

import (
	"slices"
	"time"
)

// Window is the GETs reported in [StartNs, StartNs+width) after the
// failure (negative: before).
type Window struct {
	StartNs        int64
	N              int
	P50, P99, Max  int64 // latency, ns
	Failed         int
	FailedOverGets int // GETs that moved to another replica in it
}

// Windows cuts the samples into windows of width.
func (r *Result) Windows(width time.Duration) []Window {
	if len(r.Samples) == 0 {
		return nil
	}
	w := int64(width)
	first := floorDiv(r.Samples[0].DoneNs, w)
	last := floorDiv(r.Samples[len(r.Samples)-1].DoneNs, w)
	out := make([]Window, last-first+1)
	lats := make([][]int64, len(out))
	prev := r.Samples[0].Failovers
	for _, s := range r.Samples {
		i := floorDiv(s.DoneNs, w) - first
		lats[i] = append(lats[i], s.LatNs)
		if s.Err {
			out[i].Failed++
		}
		if s.Failovers > prev {
			out[i].FailedOverGets++
			prev = s.Failovers
		}
	}
	for i := range out {
		out[i].StartNs = (first + int64(i)) * w
		l := lats[i]
		out[i].N = len(l)
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		out[i].P50 = l[len(l)/2]
		out[i].P99 = l[min(len(l)-1, len(l)*99/100)]
		out[i].Max = l[len(l)-1]
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Summary is what Figure 9 claims, measured.
type Summary struct {
	GetsBefore, GetsAfter int
	Failed                int   // GETs that failed (target 0)
	BaseP50, BaseP99      int64 // latency before the failure, ns
	// FirstFailoverNs: from the failure to the first GET that moved to
	// another replica (-1: none did).
	FirstFailoverNs int64
	// LastFailoverNs: to the last such GET in the measurement.
	LastFailoverNs int64
	// SettleNs: from the failure to the start of the first SettleRun of
	// windows whose p99 stays within SettleFactor × the windows' p99
	// before the failure (their median).
	SettleNs     int64
	WindowP99    int64 // that median
	MaxAfterNs   int64 // the slowest GET after the failure
	SlowAfter    int   // GETs after the failure slower than SettleFactor × BaseP99
	SlowBefore   int   // the same before it (the host's noise)
	WindowWidth  time.Duration
	SettleWindow int // SettleRun
}

const (
	SettleFactor = 2
	SettleRun    = 10
)

// Analyze summarises r with windows of width.
func (r *Result) Analyze(width time.Duration) Summary {
	s := Summary{FirstFailoverNs: -1, LastFailoverNs: -1, WindowWidth: width, SettleWindow: SettleRun}
	var before []int64
	var base uint64
	for _, x := range r.Samples {
		if x.DoneNs < 0 {
			before = append(before, x.LatNs)
			base = x.Failovers
		}
	}
	for _, x := range r.Samples {
		if x.Err {
			s.Failed++
		}
		if x.DoneNs < 0 {
			s.GetsBefore++
			continue
		}
		s.GetsAfter++
		s.MaxAfterNs = max(s.MaxAfterNs, x.LatNs)
		if x.Failovers > base {
			if s.FirstFailoverNs < 0 {
				s.FirstFailoverNs = x.DoneNs
			}
			s.LastFailoverNs = x.DoneNs
			base = x.Failovers
		}
	}
	if len(before) > 0 {
		slices.Sort(before)
		s.BaseP50, s.BaseP99 = before[len(before)/2], before[len(before)*99/100]
	}
	for _, x := range r.Samples {
		if x.LatNs > SettleFactor*s.BaseP99 {
			if x.DoneNs < 0 {
				s.SlowBefore++
			} else {
				s.SlowAfter++
			}
		}
	}
	ws := r.Windows(width)
	var p99s []int64
	for _, w := range ws {
		if w.StartNs+int64(width) <= 0 && w.N > 0 {
			p99s = append(p99s, w.P99)
		}
	}
	if len(p99s) == 0 {
		return s
	}
	slices.Sort(p99s)
	s.WindowP99 = p99s[len(p99s)/2]
	limit := SettleFactor * s.WindowP99
	run := 0
	s.SettleNs = -1
	for _, w := range ws {
		if w.StartNs < 0 {
			continue
		}
		if w.N > 0 && w.P99 <= limit {
			run++
		} else {
			run = 0
		}
		if run == SettleRun {
			s.SettleNs = w.StartNs - int64(SettleRun-1)*int64(width)
			break
		}
	}
	return s
}
