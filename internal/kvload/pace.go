package kvload

import (
	"os"
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
// poller wakes it 15-40 µs late on a virtual machine. So it asks to
// wake a margin early, learns the margin from its own wake-ups, and
// spins on the clock for the rest (Result.Lag shows what remains).

// Bounds of the pacer's early-wake margin.
const (
	initMarginNs = 25_000
	minMarginNs  = 2_000
	maxMarginNs  = 200_000
	// spareNs is how much earlier than the expected oversleep the
	// pacer asks to wake: the spin that follows is its price.
	spareNs = 3_000
)

// pacer waits until an offset of a run's clock.
type pacer struct {
	fd       int
	f        *os.File // fd, read through the network poller
	marginNs int64    // wake this much early
}

// newPacer returns a pacer with a timer of its own; Close releases it.
func newPacer() (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	return &pacer{fd: fd, f: os.NewFile(uintptr(fd), "pacer-timerfd"), marginNs: initMarginNs}, nil
}

func (p *pacer) Close() error { return p.f.Close() }

// until returns once t0+at is past, sleeping when it is more than the
// margin away.
func (p *pacer) until(t0 time.Time, at time.Duration) error {
	var buf [8]byte // the timer's expiration count
	for {
		rem := int64(at - time.Since(t0))
		if rem <= 0 {
			return nil
		}
		if rem <= p.marginNs {
			for time.Since(t0) < at {
			}
			return nil
		}
		want := rem - p.marginNs
		its := unix.ItimerSpec{Value: unix.NsecToTimespec(want)}
		start := time.Since(t0)
		if err := unix.TimerfdSettime(p.fd, 0, &its, nil); err != nil {
			return os.NewSyscallError("timerfd_settime", err)
		}
		if _, err := p.f.Read(buf[:]); err != nil {
			return err
		}
		over := int64(time.Since(t0)-start) - want
		// A moving average of the oversleep (1/8 of each new one).
		p.marginNs = min(max(p.marginNs+(over+spareNs-p.marginNs)/8, minMarginNs), maxMarginNs)
	}
}
