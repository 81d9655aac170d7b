package tsc

import (
	"testing"
	"time"
)

var refEpoch = time.Now()

// monotonic is a reference as runner.Monotonic is: the monotonic clock's
// nanoseconds since the package was loaded, plus a second.
func monotonic() int64 { return int64(time.Since(refEpoch)) + int64(time.Second) }

// TestClockFollowsReference: every reading lies between the reference's
// readings just before and just after it (within a bound far above the
// rate's error over a Span), none goes back, and once the rate is known
// the clock reads the reference only at an anchor per Span (plus any
// anchor tried again because the thread lost its CPU between the two
// reads of the reference).
func TestClockFollowsReference(t *testing.T) {
	const bound = 50_000 // ns
	k := NewClock(monotonic)
	var prev int64
	reads := 0
	calibrated := false
	var anchorsAt uint64
	var calibratedAt int64
	for start := monotonic(); monotonic()-start < 4*Span; {
		r1 := monotonic()
		v := k.Now()
		r2 := monotonic()
		reads++
		if v < prev {
			t.Fatalf("read %d: %d after %d: the clock went back", reads, v, prev)
		}
		if v < r1-bound || v > r2+bound {
			t.Fatalf("read %d: %d, the reference read %d before and %d after", reads, v, r1, r2)
		}
		prev = v
		if !calibrated && k.mult != 0 {
			calibrated, anchorsAt, calibratedAt = true, k.Anchors, r2
		}
	}
	if !calibrated {
		t.Fatalf("the rate was never measured (%d reads, %d anchors)", reads, k.Anchors)
	}
	elapsed := monotonic() - calibratedAt
	if extra, most := k.Anchors-anchorsAt, uint64(elapsed/Span)+20; extra > most {
		t.Fatalf("%d anchors in the %d ns after the rate was measured: want at most %d", extra, elapsed, most)
	}
	if hz := 1e9 * float64(uint64(1)<<32) / float64(k.mult); hz < 1e8 || hz > 1e11 {
		t.Fatalf("measured rate %.0f Hz: not a counter's", hz)
	}
}

// TestClockNeverBack: a reference that runs backwards holds the clock
// still; it never goes back.
func TestClockNeverBack(t *testing.T) {
	v := int64(10 * time.Second)
	k := NewClock(func() int64 { v -= 100; return v })
	prev := k.Now()
	for range 10000 {
		if n := k.Now(); n < prev {
			t.Fatalf("%d after %d", n, prev)
		}
	}
}

// TestClockSkewedPairs: a pair of reference reads further apart than
// maxSkew (the thread lost its CPU between them) anchors nothing, so the
// rate is never measured from one; the clock still returns the
// reference's time.
func TestClockSkewedPairs(t *testing.T) {
	v := int64(time.Second)
	k := NewClock(func() int64 { v += 2 * maxSkew; return v })
	for range 1000 {
		if n := k.Now(); n != v {
			t.Fatalf("Now %d, the reference's last reading %d", n, v)
		}
	}
	if k.cal || k.mult != 0 {
		t.Fatalf("anchored on skewed pairs: calibration %v, rate %d", k.cal, k.mult)
	}
	if k.Anchors != 1000 {
		t.Fatalf("%d anchors tried in 1000 reads, want each", k.Anchors)
	}
}

func BenchmarkClockNow(b *testing.B) {
	k := NewClock(monotonic)
	for start := monotonic(); monotonic()-start < 2*Span; {
		k.Now() // past the rate's measurement
	}
	var s int64
	for b.Loop() {
		s += k.Now()
	}
	_ = s
}
