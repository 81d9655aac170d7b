// Package tsc reads the CPU's time-stamp counter, the cycle counter of
// the cost accounting (engine/stage): rmad -selftest -profile injects
// Read into the cores, runners and ports it builds, which read no clock
// themselves. On amd64 Read is RDTSC (Go assembly, a few dozen cycles);
// elsewhere it is the monotonic clock in nanoseconds (Native false).
//
// The counter's rate is measured against the monotonic clock (Since: over
// the run it times, Calibrate: for a while of its own), not read from the
// kernel: it assumes a constant rate, the same on every CPU (constant_tsc
// and nonstop_tsc in /proc/cpuinfo).
package tsc

import "time"

// Ref is the counter and the monotonic clock read together.
type Ref struct {
	c uint64
	t time.Time
}

// Now reads both.
func Now() Ref { return Ref{c: Read(), t: time.Now()} }

// Hz is the counter's rate between r and now (counts per second of the
// monotonic clock); 0 if no time has passed. Its error is about the
// microsecond the two reads take over the time between them.
func (r Ref) Hz() float64 {
	c, t := Read(), time.Now()
	d := t.Sub(r.t)
	if d <= 0 {
		return 0
	}
	return float64(c-r.c) / d.Seconds()
}

// Calibrate measures the counter's rate over d.
func Calibrate(d time.Duration) float64 {
	r := Now()
	time.Sleep(d)
	return r.Hz()
}
