// Package rawnet captures and injects raw Ethernet frames on a Linux
// interface through an AF_PACKET socket, and builds, seals and opens OneRMA
// frames, for tests that attack real engines from the network (e2e).
//
// A Port is one SOCK_RAW socket bound to one interface for every protocol
// (ETH_P_ALL). It sees frames in both directions: received by the host on
// that interface (Frame.Out false) and sent by the host through it
// (Frame.Out true), except the frames it injects itself. On a tap interface
// of a DPDK net_tap port the directions are reversed from the engine's
// point of view: Out frames go to the engine, the others come from it.
//
// Nothing here is safe for concurrent use on one Port, except that Inject
// may run concurrently with Capture.
package rawnet

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Frame is one captured frame.
type Frame struct {
	Data []byte
	// Out: the host sent the frame through the interface (PACKET_OUTGOING);
	// otherwise it arrived on the interface.
	Out bool
	At  time.Time
}

// Port is a raw AF_PACKET socket bound to one interface.
type Port struct {
	Name    string
	Index   int
	MAC     net.HardwareAddr
	fd      int
	buf     []byte
	closed  bool
	ifaceMT int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Open binds a raw socket to iface in the current network namespace.
func Open(iface string) (*Port, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("rawnet: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("rawnet: socket: %w", err)
	}
	// Room for bursts the test reads late (captures run after the fact).
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rawnet: bind %s: %w", iface, err)
	}
	return &Port{Name: iface, Index: ifi.Index, MAC: ifi.HardwareAddr, fd: fd, buf: make([]byte, 1<<16), ifaceMT: ifi.MTU}, nil
}

// OpenNS is Open inside the network namespace ns (a name under
// /var/run/netns). The socket stays bound to that namespace's interface;
// the calling goroutine's namespace is not changed.
func OpenNS(ns, iface string) (*Port, error) {
	if ns == "" {
		return Open(iface)
	}
	type res struct {
		p   *Port
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// Never unlocked: the thread, now in another namespace, ends with
		// the goroutine.
		runtime.LockOSThread()
		nsfd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{nil, fmt.Errorf("rawnet: %w", err)}
			return
		}
		defer unix.Close(nsfd)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, fmt.Errorf("rawnet: setns %s: %w", ns, err)}
			return
		}
		p, err := Open(iface)
		ch <- res{p, err}
	}()
	r := <-ch
	return r.p, r.err
}

// Close closes the socket.
func (p *Port) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	return unix.Close(p.fd)
}

// Inject sends one frame (Ethernet header first, no FCS) out of the
// interface. The kernel refuses frames shorter than an Ethernet header and
// longer than the interface MTU plus the header (EMSGSIZE).
func (p *Port) Inject(frame []byte) error {
	for {
		err := unix.Sendto(p.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: p.Index, Halen: 6})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN):
			time.Sleep(50 * time.Microsecond) // the device queue is full: back off
		case errors.Is(err, unix.EINTR):
		default:
			return fmt.Errorf("rawnet: inject %d bytes on %s: %w", len(frame), p.Name, err)
		}
	}
}

// recv returns the next frame, waiting until deadline (false: none came).
func (p *Port) recv(deadline time.Time) (Frame, bool, error) {
	for {
		n, from, err := unix.Recvfrom(p.fd, p.buf, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if err == nil {
			if n > len(p.buf) {
				continue // larger than any frame we build: not ours to judge
			}
			f := Frame{Data: append([]byte(nil), p.buf[:n]...), At: time.Now()}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				f.Out = true
			}
			return f, true, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return Frame{}, false, fmt.Errorf("rawnet: recv on %s: %w", p.Name, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Frame{}, false, nil
		}
		ms := int(left / time.Millisecond)
		if ms == 0 {
			ms = 1
		}
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, ms); err != nil && !errors.Is(err, unix.EINTR) {
			return Frame{}, false, fmt.Errorf("rawnet: poll on %s: %w", p.Name, err)
		}
	}
}

// Capture returns the frames that match keep (nil: all), read from the
// socket's queue and then as they arrive, until n have matched (n <= 0:
// no limit) or timeout has passed. Frames that do not match are consumed.
// Frames queued before the call are included: call Drain first to see
// only what follows.
func (p *Port) Capture(timeout time.Duration, n int, keep func(*Frame) bool) ([]Frame, error) {
	deadline := time.Now().Add(timeout)
	var out []Frame
	for n <= 0 || len(out) < n {
		f, ok, err := p.recv(deadline)
		if err != nil {
			return out, err
		}
		if !ok {
			break
		}
		if keep == nil || keep(&f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// Expect returns the first frame matching keep within timeout.
func (p *Port) Expect(timeout time.Duration, keep func(*Frame) bool) (Frame, error) {
	fs, err := p.Capture(timeout, 1, keep)
	if err != nil {
		return Frame{}, err
	}
	if len(fs) == 0 {
		return Frame{}, fmt.Errorf("rawnet: no matching frame on %s within %v", p.Name, timeout)
	}
	return fs[0], nil
}

// Drain discards every frame queued on the socket and returns how many.
func (p *Port) Drain() int {
	n := 0
	for {
		_, _, err := unix.Recvfrom(p.fd, p.buf, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return n
		}
		n++
	}
}

// Stats returns the socket's counters since the previous call: frames
// queued to it and frames it dropped for lack of room (PACKET_STATISTICS).
func (p *Port) Stats() (packets, drops uint32, err error) {
	st, err := unix.GetsockoptTpacketStats(p.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0, 0, err
	}
	return st.Packets, st.Drops, nil
}

// MTU is the interface's MTU when the port was opened: Inject refuses
// frames longer than MTU + 14.
func (p *Port) MTU() int { return p.ifaceMT }
