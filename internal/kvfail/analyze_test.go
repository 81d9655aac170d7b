package kvfail

import (
	"testing"
	"time"
)

// steady returns GETs of latency lat reported every 10 µs in [from, to).
func steady(from, to, lat time.Duration) []Sample {
	var out []Sample
	for t := from; t < to; t += 10 * time.Microsecond {
		out = append(out, Sample{DoneNs: int64(t), LatNs: int64(lat)})
	}
	return out
}

// A failure the client sees 500 µs after it (the first GET that failed
// over), then 300 µs of GETs four times slower, then the old latency,
// and one slow GET 5 ms later (the host's noise): settled 800 µs after
// the failure, 300 µs after the first failover, with windows of 100 µs;
// a window of 1 ms looks 20 ms ahead and counts the noise too.
func TestAnalyzeSettle(t *testing.T) {
	us := time.Microsecond
	r := &Result{}
	r.Samples = append(r.Samples, steady(-20*time.Millisecond, 0, 100*us)...)
	r.Samples = append(r.Samples, steady(0, 500*us, 100*us)...)
	r.Samples = append(r.Samples, Sample{DoneNs: int64(500 * us), LatNs: int64(600 * us), Moved: 1})
	r.Samples = append(r.Samples, steady(510*us, 800*us, 400*us)...)
	r.Samples = append(r.Samples, steady(800*us, 5*time.Millisecond, 100*us)...)
	r.Samples = append(r.Samples, Sample{DoneNs: int64(5 * time.Millisecond), LatNs: int64(900 * us)})
	r.Samples = append(r.Samples, steady(5*time.Millisecond+10*us, 30*time.Millisecond, 100*us)...)

	for _, tc := range []struct {
		width             time.Duration
		settle, fromFirst time.Duration
	}{
		{100 * us, 800 * us, 300 * us},
		{time.Millisecond, 6 * time.Millisecond, 5500 * us},
	} {
		s := r.Analyze(tc.width, 10*time.Millisecond)
		if s.FirstFailoverNs != int64(500*us) || s.LastFailoverNs != int64(500*us) || s.Failed != 0 {
			t.Errorf("width %v: failovers %v to %v, %d failed; want 500µs, none failed", tc.width,
				time.Duration(s.FirstFailoverNs), time.Duration(s.LastFailoverNs), s.Failed)
		}
		if s.SettleNs != int64(tc.settle) || s.SettleFromFirstNs != int64(tc.fromFirst) {
			t.Errorf("width %v: settled %v after the failure, %v after the first failover; want %v, %v", tc.width,
				time.Duration(s.SettleNs), time.Duration(s.SettleFromFirstNs), tc.settle, tc.fromFirst)
		}
		if s.BaseP99 != int64(100*us) || s.AfterP50 != int64(100*us) {
			t.Errorf("width %v: p99 before %v, p50 after %v; want 100µs", tc.width, time.Duration(s.BaseP99), time.Duration(s.AfterP50))
		}
	}
}
