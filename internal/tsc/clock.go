package tsc

import (
	"math/bits"
	"os"
	"strings"
	"sync"
)

// Clock is a monotonic clock in nanoseconds read from the counter: one
// Read and a multiplication, where the kernel's clock (clock_gettime
// through the vDSO) costs a few times that. DPDK's timers do the same
// (rte_get_tsc_cycles against rte_get_tsc_hz).
//
// It follows a reference clock (runner.Monotonic): anchored to it at the
// first Now, then read from the reference itself until Span has passed,
// which gives the counter's rate, and from then on extrapolated from the
// last anchor at that rate and anchored again every Span of counts. The
// rate is measured over all the time since the first anchor, so its error
// shrinks as the clock runs. Between anchors the two clocks part by at
// most the rate's error times Span: about maxSkew just after the rate is
// first measured (each anchor's two reads of the reference lie within
// it), less as the clock runs. At an anchor Now takes the reference's
// value, never going back: a reference behind what Now last returned
// holds it still until it catches up. So a Clock's readings and the
// reference's, on any goroutine, agree to that bound, and a Clock may
// stand in for its reference wherever one goroutine reads it. Each anchor
// reads the reference twice.
//
// A Clock belongs to one goroutine (a poll loop); it is not safe for
// concurrent use.
type Clock struct {
	ref func() int64
	// The anchor, the counter and the reference read together.
	c0 uint64
	t0 int64
	// The first anchor, from which the rate is measured.
	cal  bool
	calC uint64
	calT int64
	// mult is nanoseconds per count in 32.32 fixed point; 0 while the
	// rate is still being measured.
	mult uint64
	span uint64 // counts between anchors; 0 while mult is unknown
	last int64  // the last reading: none is ever earlier
	// Anchors counts the anchors tried (each two reads of the reference).
	Anchors uint64
}

// Span is the time between two anchors of a Clock.
const Span = 10_000_000 // ns

// NewClock returns a Clock that follows ref.
func NewClock(ref func() int64) *Clock { return &Clock{ref: ref} }

// Now returns the clock's nanoseconds: never less than its last reading.
func (k *Clock) Now() int64 {
	d := Read() - k.c0
	if d >= k.span { // span is 0 until the rate is known: anchor each time
		return k.anchor()
	}
	hi, lo := bits.Mul64(d, k.mult)
	t := max(k.t0+int64(hi<<32|lo>>32), k.last) // max: another CPU's counter, a few counts behind
	k.last = t
	return t
}

// maxSkew bounds the time between the two reads of the reference around
// an anchor's counter read: a pair further apart (the thread was
// preempted between them) anchors nothing, and the next Now tries again.
const maxSkew = 1000 // ns

// anchor reads the counter between two reads of the reference and, when
// those are close, anchors there (their midpoint) and measures the rate
// over the time since the first anchor, once Span has passed. It returns
// the reference's reading.
func (k *Clock) anchor() int64 {
	t1 := k.ref()
	c := Read()
	t2 := k.ref()
	k.Anchors++
	t := t2
	if t2-t1 <= maxSkew {
		t = t1 + (t2-t1)/2
		switch {
		case !k.cal:
			k.cal, k.calC, k.calT = true, c, t
		case t-k.calT >= Span && c > k.calC:
			// ns << 32 / counts, in 128 bits: the quotient fits in 64
			// bits while the counter runs faster than a count per 2^32 ns.
			ns := uint64(t - k.calT)
			if hi := ns >> 32; hi < c-k.calC {
				k.mult, _ = bits.Div64(hi, ns<<32, c-k.calC)
				k.span = uint64(Span) << 32 / max(k.mult, 1)
			}
		}
		k.c0, k.t0 = c, max(t, k.last)
	}
	t = max(t, k.last)
	k.last = t
	return t
}

// Stable reports whether a Clock may stand in for the kernel's monotonic
// clock on this machine: Read is the CPU's counter and the kernel keeps
// its own clock on it (its clocksource is "tsc", which it chooses only
// when the counter runs at a constant rate, through idle states, the same
// on every CPU). Elsewhere (kvm-clock, hpet, another architecture) the
// reference should be read itself.
func Stable() bool {
	stableOnce.Do(func() {
		b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
		stable = Native && err == nil && strings.TrimSpace(string(b)) == "tsc"
	})
	return stable
}

var (
	stableOnce sync.Once
	stable     bool
)
