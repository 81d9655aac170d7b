package tsc

import (
	"testing"
	"time"
)

// TestRead: the counter never goes back on one thread, and runs at a
// plausible rate (the fallback at exactly 1 GHz: nanoseconds).
func TestRead(t *testing.T) {
	prev := Read()
	for range 100000 {
		c := Read()
		if c < prev {
			t.Fatalf("counter went back: %d after %d", c, prev)
		}
		prev = c
	}
	hz := Calibrate(20 * time.Millisecond)
	if hz < 1e8 || hz > 1e11 {
		t.Fatalf("rate %.0f Hz: not a cycle counter's", hz)
	}
	if !Native && (hz < 0.9e9 || hz > 1.1e9) {
		t.Fatalf("fallback rate %.0f Hz, want about 1 GHz", hz)
	}
}

func BenchmarkRead(b *testing.B) {
	var s uint64
	for b.Loop() {
		s += Read()
	}
	_ = s
}
