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
	for _, s := range r.Samples {
		i := floorDiv(s.DoneNs, w) - first
		lats[i] = append(lats[i], s.LatNs)
		if s.Err {
			out[i].Failed++
		}
		if s.Moved > 0 {
			out[i].FailedOverGets++
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
	BaseP50, BaseP99      int64 // latency of the GETs before the failure, ns
	// FirstFailoverNs and LastFailoverNs: from the failure to the report
	// of the first and the last GET that moved to another replica after a
	// failed READ within burst of it (Analyze; -1: none did).
	// LateFailovers counts those later: READs that failed for other
	// reasons (a TIMEOUT of an overloaded host).
	FirstFailoverNs, LastFailoverNs int64
	LateFailovers                   int
	// SettleNs: from the failure to the end of the last window whose p99
	// is above SettleFactor × WindowP99 (the median p99 of the windows
	// before the failure), looking up to SettleWindows windows past the
	// last failover; 0 when no window was. After it, AfterP50 and
	// AfterP99 are those of every later GET. SettleFromFirstNs is the
	// same from the first failover (when the client first saw the
	// failure; 0 when latency had settled by then, -1 without a
	// failover): the time the failure is detected (its engine noticing a
	// dead process, a TIMEOUT) is not the client's settling.
	SettleNs           int64
	SettleFromFirstNs  int64
	WindowP99          int64
	AfterP50, AfterP99 int64
	MaxAfterNs         int64 // the slowest GET after the failure
	// SlowAfter, SlowBefore: GETs slower than SettleFactor × BaseP99
	// after the failure, and before it (the host's own noise).
	SlowAfter, SlowBefore int
}

const (
	SettleFactor  = 2
	SettleWindows = 20
)

// Analyze summarises r with windows of width, taking the GETs that
// failed over within burst of the failure as the ones it caused (its
// READs fail within a round trip, or at TIMEOUT moved by the host's
// stalls).
func (r *Result) Analyze(width, burst time.Duration) Summary {
	s := Summary{FirstFailoverNs: -1, LastFailoverNs: -1}
	var before []int64
	for _, x := range r.Samples {
		if x.DoneNs < 0 {
			before = append(before, x.LatNs)
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
		switch {
		case x.Moved == 0:
		case x.DoneNs > int64(burst):
			s.LateFailovers++
		default:
			if s.FirstFailoverNs < 0 {
				s.FirstFailoverNs = x.DoneNs
			}
			s.LastFailoverNs = x.DoneNs
		}
	}
	s.BaseP50, s.BaseP99 = quantiles(before)
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
	if len(p99s) > 0 {
		slices.Sort(p99s)
		s.WindowP99 = p99s[len(p99s)/2]
	}
	horizon := max(s.LastFailoverNs, 0) + SettleWindows*int64(width)
	for _, w := range ws {
		if w.StartNs >= 0 && w.StartNs < horizon && w.N > 0 && w.P99 > SettleFactor*s.WindowP99 {
			s.SettleNs = w.StartNs + int64(width)
		}
	}
	s.SettleFromFirstNs = -1
	if s.FirstFailoverNs >= 0 {
		s.SettleFromFirstNs = max(s.SettleNs-s.FirstFailoverNs, 0)
	}
	var after []int64
	for _, x := range r.Samples {
		if x.DoneNs >= s.SettleNs {
			after = append(after, x.LatNs)
		}
	}
	s.AfterP50, s.AfterP99 = quantiles(after)
	return s
}

// quantiles are the p50 and p99 of lat (sorted in place).
func quantiles(lat []int64) (p50, p99 int64) {
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}
