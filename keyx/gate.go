package keyx

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// ConnLimits bound the connections a TLS service accepts (the key
// exchange's Server; kv's update RPC), so that clients that connect and
// never authenticate, or authenticate and go quiet, cannot take every
// descriptor or goroutine of the process. Zero fields take the defaults
// noted; a negative one is refused.
type ConnLimits struct {
	// MaxConns bounds the connections held at once, authenticated or not
	// (default 1024). One beyond it is closed as soon as it is accepted.
	MaxConns int
	// MaxConnsPerHost bounds those of one client address, an IPv6
	// client's /64 (default 256): one host alone cannot take MaxConns.
	MaxConnsPerHost int
	// MaxHandshakes bounds those still in their TLS handshake (default
	// 128), each for at most the service's handshake timeout: a flood of
	// connections that never authenticate holds no more, and the other
	// MaxConns − MaxHandshakes places stay with clients that did.
	MaxHandshakes int
}

// Defaults of ConnLimits.
const (
	DefaultMaxConns        = 1024
	DefaultMaxConnsPerHost = 256
	DefaultMaxHandshakes   = 128
)

// withDefaults fills the zero fields and checks the others.
func (l ConnLimits) withDefaults() (ConnLimits, error) {
	for _, f := range []struct {
		v   *int
		def int
	}{{&l.MaxConns, DefaultMaxConns}, {&l.MaxConnsPerHost, DefaultMaxConnsPerHost}, {&l.MaxHandshakes, DefaultMaxHandshakes}} {
		if *f.v < 0 {
			return l, fmt.Errorf("connection limits %+v: negative", l)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return l, nil
}

// The accept loop's backoff after a temporary error, as net/http's
// Server.Serve: the first wait, doubled after each error in a row up to
// the last; a connection accepted starts over.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptBackoff is the wait after a temporary accept error that followed
// a wait of prev (0: the first error since a connection was accepted).
func acceptBackoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return acceptBackoffMin
	}
	return min(2*prev, acceptBackoffMax)
}

// temporaryAcceptError says whether the accept error err is a condition
// that passes (the process or the system out of descriptors or memory, a
// connection that failed while it waited in the queue), after which the
// listener still works, rather than a closed or broken listener.
func temporaryAcceptError(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// accept(2) reports errors pending on the new connection as its own
	// and says to retry on them (Linux's man page); EMFILE, ENFILE,
	// ENOBUFS and ENOMEM pass when descriptors or memory are freed.
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM,
		syscall.ENETDOWN, syscall.ENOPROTOOPT, syscall.EHOSTDOWN, syscall.ENONET, syscall.EHOSTUNREACH,
		syscall.EOPNOTSUPP, syscall.ENETUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	// A listener of another kind says so itself (net/http's test).
	var te interface{ Temporary() bool }
	return errors.As(err, &te) && te.Temporary()
}

// A Gate is the accept loop of a TLS service: it retries temporary
// accept errors with a backoff, admits connections within its ConnLimits
// and bounds each handshake. Its methods are safe for concurrent use.
type Gate struct {
	lim       ConnLimits
	handshake time.Duration
	logf      func(format string, args ...any)
	name      string

	mu         sync.Mutex
	conns      int
	handshakes int
	hosts      map[netip.Addr]int // connections held by client address (IPv6: its /64)

	acceptLog logLimiter
	refuseLog [3]logLimiter // by limit: MaxConns, MaxHandshakes, MaxConnsPerHost
}

// NewGate returns a gate admitting connections within lim, each given
// handshake (> 0) to complete its TLS handshake. logf, if set, gets the
// accept errors and refusals, at most a line a second of each (name
// begins them, e.g. "keyx").
func NewGate(name string, lim ConnLimits, handshake time.Duration, logf func(format string, args ...any)) (*Gate, error) {
	lim, err := lim.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if handshake <= 0 {
		return nil, fmt.Errorf("%s: handshake timeout %v, want > 0", name, handshake)
	}
	return &Gate{lim: lim, handshake: handshake, logf: logf, name: name, hosts: map[netip.Addr]int{}}, nil
}

// Limits are the gate's limits, defaults filled in.
func (g *Gate) Limits() ConnLimits { return g.lim }

// Accept returns the next connection of ln within the gate's limits. A
// connection beyond them is closed at once and Accept goes on. On a
// temporary accept error (EMFILE, ENFILE, ...: temporaryAcceptError) it
// waits, 5 ms doubling to 1 s while the errors go on, and tries again;
// it returns a permanent error (ln closed) as it is, and net.ErrClosed
// once done is closed (done also cuts a wait short).
func (g *Gate) Accept(ln net.Listener, done <-chan struct{}) (*AdmittedConn, error) {
	var wait time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-done:
				return nil, net.ErrClosed
			default:
			}
			if !temporaryAcceptError(err) {
				return nil, err
			}
			wait = acceptBackoff(wait)
			g.acceptLog.logf(g.logf, "%s: accept: %v; retrying in %v", g.name, err, wait)
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return nil, net.ErrClosed
			case <-t.C:
			}
			continue
		}
		wait = 0
		if ac := g.admit(c); ac != nil {
			return ac, nil
		}
	}
}

// admit takes places for c, or closes it and returns nil when the gate
// is full for it.
func (g *Gate) admit(c net.Conn) *AdmittedConn {
	host := hostKey(c.RemoteAddr())
	g.mu.Lock()
	why, limit := "", 0
	switch {
	case g.conns >= g.lim.MaxConns:
		why, limit = fmt.Sprintf("%d connections held (MaxConns)", g.conns), 0
	case g.handshakes >= g.lim.MaxHandshakes:
		why, limit = fmt.Sprintf("%d handshakes under way (MaxHandshakes)", g.handshakes), 1
	case host.IsValid() && g.hosts[host] >= g.lim.MaxConnsPerHost:
		why, limit = fmt.Sprintf("%d connections held from %v (MaxConnsPerHost)", g.hosts[host], host), 2
	}
	if why == "" {
		g.conns++
		g.handshakes++
		if host.IsValid() {
			g.hosts[host]++
		}
	}
	g.mu.Unlock()
	if why != "" {
		c.Close()
		g.refuseLog[limit].logf(g.logf, "%s: %s: refused: %s", g.name, c.RemoteAddr(), why)
		return nil
	}
	ac := &AdmittedConn{Conn: c, g: g, host: host}
	ac.handshaking = true
	return ac
}

// Held is the connections the gate holds places for now, and of them
// those still in their handshake.
func (g *Gate) Held() (conns, handshakes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conns, g.handshakes
}

// hostKey is the address whose connections MaxConnsPerHost bounds: an
// IPv4 address, an IPv6 address's /64 (one host may hold a whole one);
// invalid for a connection that is not IP.
func hostKey(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// An AdmittedConn is a connection a Gate admitted: it holds its places in
// the gate's limits until Close (a TLS connection over it closes it).
type AdmittedConn struct {
	net.Conn
	g           *Gate
	host        netip.Addr
	mu          sync.Mutex
	handshaking bool // holds a place among the handshakes
	closed      bool
}

// Handshake runs the server side of the TLS handshake with config tc,
// within the gate's handshake timeout, and gives back c's place among the
// handshakes. The connection returned has no deadline set.
func (c *AdmittedConn) Handshake(tc *tls.Config) (*tls.Conn, error) {
	tlc := tls.Server(c, tc)
	c.SetDeadline(time.Now().Add(c.g.handshake))
	err := tlc.Handshake()
	c.handshaken()
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return tlc, nil
}

// handshaken gives back c's place among the handshakes.
func (c *AdmittedConn) handshaken() {
	c.mu.Lock()
	was := c.handshaking
	c.handshaking = false
	c.mu.Unlock()
	if was {
		c.g.mu.Lock()
		c.g.handshakes--
		c.g.mu.Unlock()
	}
}

// Close closes the connection and gives back its places; only the first
// call does.
func (c *AdmittedConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.Conn.Close()
	}
	c.closed = true
	c.mu.Unlock()
	err := c.Conn.Close()
	c.handshaken()
	g := c.g
	g.mu.Lock()
	g.conns--
	if c.host.IsValid() {
		if g.hosts[c.host]--; g.hosts[c.host] == 0 {
			delete(g.hosts, c.host)
		}
	}
	g.mu.Unlock()
	return err
}

// logLimiter passes at most one line a second, saying how many it held
// back since the last: a flood of failed accepts or refused connections
// costs a line a second.
type logLimiter struct {
	mu   sync.Mutex
	last time.Time
	held int
}

func (l *logLimiter) logf(logf func(string, ...any), format string, args ...any) {
	if logf == nil {
		return
	}
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		l.held++
		l.mu.Unlock()
		return
	}
	held := l.held
	l.last, l.held = now, 0
	l.mu.Unlock()
	if held > 0 {
		format += " (and %d more like it since the last line)"
		args = append(args, held)
	}
	logf(format, args...)
}
