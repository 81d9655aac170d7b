package kvload

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// An open-loop client must send each request at its arrival time to
// within microseconds: its latency counts from then, so a late wake-up
// is charged to the system measured. time.Sleep cannot: the runtime
// sleeps in epoll_pwait, whose timeout is in milliseconds, and a 20 µs
// sleep lasts about 1 ms on an idle machine. A nanosleep on a thread
// whose timer slack is 1 ns (the kernel's default slack is 50 µs) wakes
// 15-40 µs late on a virtual machine; the pacer asks to wake a margin
// early, learns the margin from its own wake-ups, and spins on the
// clock for the rest, so it neither burns a CPU while waiting nor wakes
// late (Result.Lag shows what remains).

// lockPacing pins the calling goroutine to its thread and sets the
// thread's timer slack to 1 ns, for pacer.until. The thread ends with
// the goroutine (it is never unlocked).
func lockPacing() {
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // best effort: a larger slack only wakes later
}

// Bounds of the pacer's early-wake margin.
const (
	minMarginNs = 2_000
	maxMarginNs = 200_000
	// spareNs is how much earlier than the expected oversleep the
	// pacer asks to wake: the spin that follows is its price.
	spareNs = 3_000
)

// pacer waits until an offset of a run's clock.
type pacer struct {
	marginNs int64 // wake this much early (0: not learnt yet)
}

// until returns once t0+at is past, sleeping when it is more than the
// margin away.
func (p *pacer) until(t0 time.Time, at time.Duration) {
	if p.marginNs == 0 {
		p.marginNs = 25_000
	}
	for {
		rem := int64(at - time.Since(t0))
		if rem <= 0 {
			return
		}
		if rem <= p.marginNs {
			for time.Since(t0) < at {
			}
			return
		}
		want := rem - p.marginNs
		ts := unix.NsecToTimespec(want)
		start := time.Since(t0)
		if unix.Nanosleep(&ts, nil) != nil {
			continue // a signal woke it: no oversleep to learn from
		}
		over := int64(time.Since(t0)-start) - want
		// A moving average of the oversleep (1/8 of each new one).
		p.marginNs = min(max(p.marginNs+(over+spareNs-p.marginNs)/8, minMarginNs), maxMarginNs)
	}
}
