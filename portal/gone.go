package portal

import (
	"context"
	"errors"
	"fmt"
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
// without costing the data path or the control path anything: it holds a
// second descriptor of the control connection, watched for a hang-up
// alone (EPOLLRDHUP) by an epoll instance of its own, and sleeps in the
// runtime's network poller on that instance, which becomes readable only
// when the engine hangs up or the connection fails; then it looks (poll(2)
// with no timeout) whether the engine hung up. Replies to control
// requests do not wake it: the poller's registration of the connection
// itself would report every datagram, and each reply would wake a second
// goroutine, and with it another thread, beside the one reading it. A
// hang-up is seen within the poller's wake-up, microseconds. Close closes
// the epoll instance, which ends the goroutine; the goroutine closes its
// descriptor of the connection.
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
	ep, err := hangupPoller(dup)
	if err != nil {
		unix.Close(dup)
		return fmt.Errorf("watching the control connection: %w", err)
	}
	wrc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		unix.Close(dup)
		return err
	}
	p.watchConn, p.watchDone = ep, make(chan struct{})
	go p.watch(wrc, dup)
	return nil
}

// hangupPoller returns an epoll instance that reports sock's hang-up
// (and its errors: epoll reports EPOLLHUP and EPOLLERR always), as an
// *os.File registered with the runtime's poller.
func hangupPoller(sock int) (*os.File, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP, Fd: int32(sock)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sock, &ev); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, err
	}
	f := os.NewFile(uintptr(ep), "onerma-control-hangup") // non-blocking: the runtime's poller takes it
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("the runtime's poller does not take an epoll instance: %w", err)
	}
	return f, nil
}

func (p *Portal) watch(rc syscall.RawConn, sock int) {
	defer close(p.watchDone)
	defer unix.Close(sock)
	var why error
	if err := rc.Read(func(uintptr) bool {
		why = hungUp(sock)
		return why != nil
	}); err != nil {
		return // Close closed the epoll instance
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
