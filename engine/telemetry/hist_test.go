package telemetry

import "testing"

func TestHistQuantiles(t *testing.T) {
	var h Hist
	for v := uint64(1); v <= 100000; v++ {
		h.Add(v)
	}
	for _, tc := range []struct {
		q    float64
		want uint64
	}{{0.5, 50000}, {0.99, 99000}, {0.999, 99900}, {1, 100000}} {
		got := h.Quantile(tc.q)
		if d := float64(got) - float64(tc.want); d > 0.02*float64(tc.want) || d < -0.02*float64(tc.want) {
			t.Errorf("q%.3f = %d, want %d ±2%%", tc.q, got, tc.want)
		}
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		if b := bucketOf(v); lowOf(b) > v || lowOf(b+1) <= v {
			t.Fatalf("v %d in bucket %d [%d,%d)", v, b, lowOf(b), lowOf(b+1))
		}
	}
	var m Hist
	m.Add(0)
	m.Merge(&h)
	if m.N() != h.N()+1 || m.Max() != 100000 || m.Quantile(0) != 0 {
		t.Errorf("merged: n %d max %d q0 %d", m.N(), m.Max(), m.Quantile(0))
	}
}
