package portal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrEngineGone: the engine went away (it exited, was killed or
// restarted). errors.Is matches every *EngineGoneError against it, and
// every error that wraps one (an Executor's transfers, control requests).
var ErrEngineGone = errors.New("portal: the engine is gone")

// EngineGoneError says when the portal noticed that its engine went away
// and what it saw. The portal is unusable from then on: Post and control
// requests return it, Poll and Wait return it once they have handed out
// every completion due (see Poll), and Redial opens a new portal.
type EngineGoneError struct {
	At  time.Time // when the portal noticed
	Err error     // what it saw on the control connection
}

func (e *EngineGoneError) Error() string { return "portal: the engine is gone: " + e.Err.Error() }

// Unwrap returns what the portal saw.
func (e *EngineGoneError) Unwrap() error { return e.Err }

// Is matches ErrEngineGone.
func (e *EngineGoneError) Is(target error) bool { return target == ErrEngineGone }

// errHangUp is what a control connection the engine closed shows: an
// engine that exits, is killed or restarts closes it (the kernel does it
// for a dead process), and an engine that shuts down closes it once it
// has reclaimed the portal.
var errHangUp = errors.New("the engine closed the control connection")

// Gone reports the engine's departure (an *EngineGoneError), or nil while
// the portal knows of none. Any goroutine may call it.
func (p *Portal) Gone() error {
	if g := p.gone.Load(); g != nil {
		return g
	}
	return nil
}

// markGone records that the engine went away (the first cause wins) and
// rings the completion doorbell, so that a Wait or an Executor asleep on
// it wakes up and reports it. It returns the recorded error. The watcher
// and roundTrip call it; Close waits for the watcher and holds mu, so the
// doorbell's descriptor is open while they write it.
func (p *Portal) markGone(cause error) *EngineGoneError {
	g := &EngineGoneError{At: time.Now(), Err: cause}
	if !p.gone.CompareAndSwap(nil, g) {
		return p.gone.Load()
	}
	if p.arm != nil {
		one := [8]byte{1}
		unix.Write(p.bellFD, one[:])
	}
	return g
}

// startWatch starts the goroutine that notices the engine going away
// without costing the data path anything: it holds a second descriptor of
// the control connection and sleeps in the runtime's network poller until
// the connection becomes readable, then looks (poll(2) with no timeout)
// whether the engine hung up. Replies to control requests wake it too
// (roundTrip reads them on the first descriptor); a hang-up is seen within
// the poller's wake-up, microseconds. Close closes the second descriptor,
// which ends the goroutine.
func (p *Portal) startWatch() error {
	rc, err := p.conn.SyscallConn()
	if err != nil {
		return err
	}
	dup, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return err
	}
	if derr != nil {
		return fmt.Errorf("dup of the control connection: %w", derr)
	}
	f := os.NewFile(uintptr(dup), "onerma-control")
	c, err := net.FileConn(f) // its own descriptor, registered with the poller
	f.Close()
	if err != nil {
		return fmt.Errorf("watching the control connection: %w", err)
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		c.Close()
		return fmt.Errorf("watching the control connection: %T has no descriptor", c)
	}
	wrc, err := sc.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	p.watchConn, p.watchDone = c, make(chan struct{})
	go p.watch(wrc)
	return nil
}

func (p *Portal) watch(rc syscall.RawConn) {
	defer close(p.watchDone)
	var why error
	if err := rc.Read(func(fd uintptr) bool {
		why = hungUp(int(fd))
		return why != nil
	}); err != nil {
		return // Close closed the watcher's descriptor
	}
	p.markGone(why)
}

// hungUp returns what ended the connection fd, or nil while it is open.
func hungUp(fd int) error {
	pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(pfd[:], 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll(2) on the control connection: %w", err)
		}
		if n == 0 || pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) == 0 {
			return nil
		}
		break
	}
	if e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
		return fmt.Errorf("%w: %w", errHangUp, unix.Errno(e))
	}
	return errHangUp
}

// Redial opens a new portal on the same control socket, with the same
// name and Options, for an application whose engine went away (Poll, Wait
// or a control request returned an error matching ErrEngineGone). While
// nothing answers on the socket (the engine is restarting: the socket is
// missing or refuses, or an engine still shutting down answers), it
// retries every few milliseconds, up to 100 ms apart, until ctx ends; any
// other failure is returned at once.
//
// The new portal starts empty: the application allocates its slots and
// registers its regions again, and hands their new ids (and the K_d
// derived from them) to its peers; its identity may have changed too
// (Identity). The old portal's regions stay mapped until its Close, so
// their contents can be copied into the new ones first; Close it then
// (an engine that still runs charges the tenant for that memory until
// every mapping of it is gone):
//
//	n, err := p.Wait(ctx, cpl)
//	// ... handle cpl[:n]: the ops in flight end with portal.StatusEngineGone
//	if errors.Is(err, portal.ErrEngineGone) {
//		np, err := p.Redial(ctx)
//		if err != nil { ... }
//		nr, err := np.RegisterRegionKey(r.Size(), r.Perm(), r.Key())
//		copy(nr.Bytes(), r.Bytes())
//		p.Close()
//		p, r = np, nr
//	}
func (p *Portal) Redial(ctx context.Context) (*Portal, error) {
	wait := time.Millisecond
	for {
		np, err := DialOptions(p.path, p.name, p.opt)
		if err == nil {
			return np, nil
		}
		if !engineAbsent(err) {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("portal: redial %s: %w (last: %w)", p.path, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// engineAbsent reports whether a Dial error means that no engine serves
// the socket now (one may soon).
func engineAbsent(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ECONNRESET) ||
		errors.Is(err, unix.EPIPE) || errors.Is(err, ErrEngineGone) || errors.Is(err, ErrUnavailable)
}
