package kvload

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// An open-loop client must send each request at its arrival time to
// within microseconds: its latency counts from then, so a late wake-up
// is charged to the system measured. time.Sleep cannot: the runtime
// sleeps in epoll_pwait, whose timeout is in milliseconds, and a 20 µs
// sleep lasts about 1 ms on an idle machine. A nanosleep would hold the
// goroutine's P through the syscall, and with one client per connection
// sleeping they would starve the clients that have work. The pacer arms
// a timerfd (an hrtimer, no slack) and reads it through the runtime's
// network poller, so the goroutine parks and its P runs others; the
// poller wakes it late, by tens of µs on a virtual machine. So it asks
// to wake a margin early, learns the margin from its own wake-ups, and
// spins on the clock for the rest.
//
// Spinning takes a CPU from the system measured, which on a small
// machine shares the CPUs with the clients, and the more so the higher
// the load (free clients wait less than a margin, all spin). So a run's
// pacers share a spin budget, spinShare of one CPU over the run: past
// it a pacer sleeps to the arrival itself and wakes late. Result.Lag
// shows what that costs.

// Bounds of the pacer's early-wake margin, and its spin budget.
const (
	initMarginNs = 25_000
	minMarginNs  = 2_000
	maxMarginNs  = 200_000
	// spareNs is how much earlier than the expected oversleep the
	// pacer asks to wake: the spin that follows is its price.
	spareNs = 3_000
	// spinShare of one CPU, and spinGraceNs at the start, is what a
	// run's pacers may spend spinning in all.
	spinShare   = 0.05
	spinGraceNs = 1_000_000
)

// spinBudget is the CPU time a run's pacers have spent spinning.
type spinBudget struct{ spentNs atomic.Int64 }

// allow says whether a pacer may spin at now (an offset of the run).
func (b *spinBudget) allow(now time.Duration) bool {
	return float64(b.spentNs.Load()) < spinShare*float64(now)+spinGraceNs
}

// pacer waits until an offset of a run's clock.
type pacer struct {
	fd       int
	f        *os.File // fd, read through the network poller
	marginNs int64    // wake this much early
	budget   *spinBudget
}

// newPacer returns a pacer with a timer of its own, spinning on budget;
// Close releases it.
func newPacer(budget *spinBudget) (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	return &pacer{fd: fd, f: os.NewFile(uintptr(fd), "pacer-timerfd"), marginNs: initMarginNs, budget: budget}, nil
}

func (p *pacer) Close() error { return p.f.Close() }

// until returns once t0+at is past: it sleeps to a margin before it and
// spins the rest while the spin budget lasts, else sleeps to it.
func (p *pacer) until(t0 time.Time, at time.Duration) error {
	var buf [8]byte // the timer's expiration count
	for {
		now := time.Since(t0)
		rem := int64(at - now)
		if rem <= 0 {
			return nil
		}
		spin := p.budget.allow(now)
		if spin && rem <= p.marginNs {
			for time.Since(t0) < at {
			}
			p.budget.spentNs.Add(int64(time.Since(t0) - now))
			return nil
		}
		want := rem
		if spin {
			want -= p.marginNs
		}
		its := unix.ItimerSpec{Value: unix.NsecToTimespec(want)}
		if err := unix.TimerfdSettime(p.fd, 0, &its, nil); err != nil {
			return os.NewSyscallError("timerfd_settime", err)
		}
		if _, err := p.f.Read(buf[:]); err != nil {
			return err
		}
		// A moving average of the oversleep (1/8 of each new one),
		// each counted at most twice the margin: a wake-up the machine
		// delayed by milliseconds says nothing of the next one.
		over := min(int64(time.Since(t0)-now)-want, 2*p.marginNs)
		p.marginNs = min(max(p.marginNs+(over+spareNs-p.marginNs)/8, minMarginNs), maxMarginNs)
	}
}
