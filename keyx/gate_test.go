package keyx

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/flood"
)

func TestAcceptBackoff(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 10; {
		d = acceptBackoff(d)
		got = append(got, d)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backoff (-want +got):\n-%v\n+%v", want, got)
	}
}

func TestTemporaryAcceptError(t *testing.T) {
	op := func(err error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", err)}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{op(syscall.EMFILE), true},
		{op(syscall.ENFILE), true},
		{op(syscall.ENOBUFS), true},
		{op(syscall.ENOMEM), true},
		{op(syscall.ECONNABORTED), true},
		{op(syscall.EPROTO), true},
		{tempErr{}, true},
		{op(net.ErrClosed), false},
		{net.ErrClosed, false},
		{op(syscall.EBADF), false},
		{op(syscall.EINVAL), false},
		{errors.New("listener broken"), false},
	} {
		if got := temporaryAcceptError(c.err); got != c.want {
			t.Errorf("temporaryAcceptError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// tempErr is a listener's own temporary error.
type tempErr struct{}

func (tempErr) Error() string   { return "try again" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

// failingListener returns errs[i] from its i-th Accept (nil: the next
// connection of the real listener) and records when each Accept was
// called.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	errs  []error
	calls []time.Time
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	var err error
	if len(l.errs) > 0 {
		err, l.errs = l.errs[0], l.errs[1:]
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return l.Listener.Accept()
}

func (l *failingListener) callTimes() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.calls...)
}

// Serve goes on through temporary accept errors, waiting 5 ms doubling
// to 1 s while they go on and starting over after a connection; it
// returns a permanent error, and nil after Close.
func TestServeSurvivesTemporaryErrors(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10004, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{4}}
	log := &logSink{}
	s, err := NewServer(Config{Credentials: mustIssue(t, ca, "owner", true), Owner: owner, Permits: testPermits, Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(reg)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	enfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ENFILE)}
	// Eight errors in a row (waits of 5 ms to 640 ms), a connection, one
	// more error (a wait of 5 ms again), a connection.
	ln := &failingListener{Listener: tcp, errs: []error{emfile, enfile, tempErr{}, emfile, emfile, emfile, emfile, emfile, nil, emfile}}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	cl := mustIssue(t, ca, "reader", false)
	req := Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRead}
	for i := range 2 {
		if _, err := Fetch(ctx(t), tcp.Addr().String(), cl, req); err != nil {
			t.Fatalf("fetch %d after accept errors: %v", i, err)
		}
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned on a temporary error: %v", err)
	default:
	}
	log.waitLog(t, "keyx: accept: accept tcp: accept4: too many open files; retrying in 5ms")
	calls := ln.callTimes()
	if len(calls) < 11 {
		t.Fatalf("%d accepts, want at least 11", len(calls))
	}
	if d := calls[8].Sub(calls[0]); d < 1275*time.Millisecond {
		t.Errorf("eight errors in a row waited %v, want at least 5+10+...+640 ms", d)
	}
	if d := calls[10].Sub(calls[9]); d > 500*time.Millisecond {
		t.Errorf("the first error after a connection waited %v: the backoff did not start over", d)
	}
	if n := strings.Count(log.String(), "retrying in"); n > 2 {
		t.Errorf("%d accept error lines in 1.3 s, want at most 2 (a line a second):\n%s", n, log.String())
	}
	s.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}

	// A permanent error ends Serve with it.
	s2, err := NewServer(Config{Credentials: mustIssue(t, ca, "owner", true), Owner: owner, Permits: testPermits})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	broken := errors.New("listener broken")
	if err := s2.Serve(&failingListener{Listener: tcp, errs: []error{broken}}); !errors.Is(err, broken) {
		t.Fatalf("Serve on a broken listener: %v", err)
	}
}

// TestEMFILEFlood: while a child process holds connections that never
// authenticate, the key exchange runs out of descriptors (accept fails
// with EMFILE); once they are gone it serves a genuine client again, at
// the same limit, and Serve never returned.
func TestEMFILEFlood(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10005, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{5}}
	log := &logSink{}
	s, err := NewServer(Config{Credentials: mustIssue(t, ca, "owner", true), Owner: owner, Permits: testPermits, Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	cl := mustIssue(t, ca, "reader", false)
	req := Request{Initiator: reader, PID: 8, Region: reg.id, Op: abi.OpRead}

	f := flood.Start(t, ln.Addr().String(), 200)
	flood.LowerFileLimit(t, 16)
	if held := f.Go(t); held < 100 {
		t.Fatalf("the flood holds %d connections", held)
	}
	log.waitLog(t, "too many open files")
	f.Stop()
	if _, err := Fetch(ctx(t), ln.Addr().String(), cl, req); err != nil {
		t.Fatalf("fetch after the flood: %v\n%s", err, log.String())
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
}

// TestSlowConnections: a connection that never completes its handshake,
// and one that begins a request and never finishes it, are closed after
// the server's Timeout.
func TestSlowConnections(t *testing.T) {
	ca := mustCA(t)
	log := &logSink{}
	const timeout = 300 * time.Millisecond
	s, err := NewServer(Config{Credentials: mustIssue(t, ca, "owner", true), Owner: owner, Permits: testPermits, Logf: log.logf, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ap, err := s.Start("")
	if err != nil {
		t.Fatal(err)
	}
	// No handshake.
	raw, err := net.Dial("tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	closedWithin(t, "a connection with no handshake", raw, timeout)
	log.waitLog(t, "refused: handshake")

	// Half a request: one byte of its length.
	c, err := Dial(ctx(t), ap.String(), mustIssue(t, ca, "reader", false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.c.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, "a connection with half a request", c.c, timeout)
	log.waitLog(t, "bad request: truncated frame length")
}

// closedWithin fails unless c's peer closes it after at least most of
// timeout and within a few seconds.
func closedWithin(t *testing.T, what string, c net.Conn, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(timeout + 5*time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open %v later", what, time.Since(start))
	}
	if d := time.Since(start); d < timeout*3/4 {
		t.Fatalf("%s: closed after %v, before the timeout %v", what, d, timeout)
	}
}

// TestConnLimits: connections beyond a server's limits (all held,
// per client address, in their handshake) are closed as they are
// accepted, and the places come back when connections close.
func TestConnLimits(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10006, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{6}}
	log := &logSink{}
	s, err := NewServer(Config{Credentials: mustIssue(t, ca, "owner", true), Owner: owner, Permits: testPermits, Logf: log.logf,
		Timeout: 5 * time.Second, Conns: ConnLimits{MaxConns: 5, MaxConnsPerHost: 3, MaxHandshakes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(reg)
	ap, err := s.Start("")
	if err != nil {
		t.Fatal(err)
	}
	cl := mustIssue(t, ca, "reader", false)
	req := Request{Initiator: reader, PID: 9, Region: reg.id, Op: abi.OpRead}
	from := func(local string) (*Conn, error) {
		tc, err := cl.ClientTLS("127.0.0.1")
		if err != nil {
			return nil, err
		}
		d := tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}, Config: tc}
		raw, err := d.DialContext(ctx(t), "tcp", ap.String())
		if err != nil {
			return nil, err
		}
		c := &Conn{c: raw.(*tls.Conn)}
		if _, err := c.Fetch(ctx(t), req); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	// Handshakes: two connections that never begin one hold both places;
	// a third connection, even a genuine client's, is closed at once.
	var raws []net.Conn
	for range 2 {
		r, err := net.Dial("tcp", ap.String())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		raws = append(raws, r)
	}
	waitHeld(t, s.gate, 2, 2)
	if c, err := from("127.0.0.1"); err == nil {
		c.Close()
		t.Fatal("a handshake beyond MaxHandshakes was served")
	}
	log.waitLog(t, "refused: 2 handshakes under way (MaxHandshakes)")
	for _, r := range raws {
		r.Close()
	}
	waitHeld(t, s.gate, 0, 0)

	// Per host: three clients of 127.0.0.1 hold its places, a fourth is
	// refused; 127.0.0.2 is another host and is served.
	var held []*Conn
	for i := range 3 {
		c, err := from("127.0.0.1")
		if err != nil {
			t.Fatalf("client %d of 127.0.0.1: %v", i, err)
		}
		defer c.Close()
		held = append(held, c)
	}
	if c, err := from("127.0.0.1"); err == nil {
		c.Close()
		t.Fatal("a fourth client of 127.0.0.1 was served (MaxConnsPerHost 3)")
	}
	log.waitLog(t, "connections held from 127.0.0.1 (MaxConnsPerHost)")
	for i := range 2 {
		c, err := from("127.0.0.2")
		if err != nil {
			t.Fatalf("client %d of 127.0.0.2: %v", i, err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// In all: five held, a sixth of a third host refused.
	if c, err := from("127.0.0.3"); err == nil {
		c.Close()
		t.Fatal("a sixth connection was served (MaxConns 5)")
	}
	log.waitLog(t, "refused: 5 connections held (MaxConns)")
	held[0].Close()
	waitHeld(t, s.gate, 4, 0)
	c, err := from("127.0.0.3")
	if err != nil {
		t.Fatalf("a client once a place came back: %v", err)
	}
	c.Close()
}

// waitHeld waits until g holds conns connections, handshakes of them in
// their handshake.
func waitHeld(t *testing.T, g *Gate, conns, handshakes int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c, h := g.Held(); c == conns && h == handshakes {
			return
		}
	}
	c, h := g.Held()
	t.Fatalf("gate holds %d connections, %d in their handshake; want %d, %d", c, h, conns, handshakes)
}
