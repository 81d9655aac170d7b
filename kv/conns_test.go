package kv_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/internal/flood"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// waitLog waits until a log line contains want.
func (l *logSink) waitLog(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(l.String(), want) {
			return
		}
	}
	t.Fatalf("server log lacks %q:\n%s", want, l.String())
}

// TestServeThroughEMFILE: while a child process holds connections to the
// update RPC that never authenticate, the server runs out of descriptors
// (accept fails with EMFILE); once they are gone it accepts a genuine
// client's new connection at the same limit, applies its SET, and Serve
// never returned.
func TestServeThroughEMFILE(t *testing.T) {
	log := &logSink{}
	cl := newCluster(t, 1, kv.ServerConfig{Logf: log.logf})
	c := cl.dial(kv.ClientConfig{})
	if err := c.Set([]byte("before"), []byte("flood")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get([]byte("before"), nil); err != nil {
		t.Fatal(err)
	}

	f := flood.Start(t, cl.servers[0].Addr().String(), 200)
	flood.LowerFileLimit(t, 24)
	if held := f.Go(t); held < 100 {
		t.Fatalf("the flood holds %d connections", held)
	}
	log.waitLog(t, "kv: accept: accept tcp 127.0.0.1")
	log.waitLog(t, "too many open files; retrying in")
	f.Stop()

	if _, err := c.ServerStats(0); err != nil { // a connection of its own
		t.Fatalf("a new RPC connection after the flood: %v\n%s", err, log.String())
	}
	if err := c.Set([]byte("after"), []byte("flood")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get([]byte("after"), nil); err != nil || string(v) != "flood" {
		t.Fatalf("get after the flood: %q %v", v, err)
	}
	select {
	case err := <-cl.served:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
}

// TestRPCSlowAndIdleConnections: an RPC connection that never completes
// its handshake, one that sends no request within IdleTimeout, and one
// that begins a request and does not finish it within RequestTimeout are
// closed; a client whose update connection the server closed as idle
// dials again and its next SET is applied.
func TestRPCSlowAndIdleConnections(t *testing.T) {
	log := &logSink{}
	const timeout = 300 * time.Millisecond
	cl := newCluster(t, 1, kv.ServerConfig{Logf: log.logf,
		HandshakeTimeout: timeout, IdleTimeout: timeout, RequestTimeout: timeout})
	addr := cl.servers[0].Addr().String()

	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	closedWithin(t, "a connection with no handshake", raw, timeout)
	log.waitLog(t, "refused: handshake")

	tc, err := cl.client.ClientTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	idle, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	closedWithin(t, "a connection with no request", idle, timeout)
	log.waitLog(t, fmt.Sprintf("idle for %v, closed", timeout))

	slow, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte{0, 0}); err != nil { // half a length
		t.Fatal(err)
	}
	closedWithin(t, "a connection with half a request", slow, timeout)
	log.waitLog(t, "i/o timeout")

	c := cl.dial(kv.ClientConfig{})
	for i := range 3 {
		key, val := fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)
		if err := c.Set(key, val); err != nil {
			t.Fatalf("set %d (the update connection idle past the server's timeout before it): %v", i, err)
		}
		if got, err := c.Get(key, nil); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get %d: %q %v", i, got, err)
		}
		time.Sleep(2 * timeout)
	}
	if n := strings.Count(log.String(), "idle for"); n < 3 {
		t.Fatalf("the server closed %d idle connections, want the client's too:\n%s", n, log.String())
	}
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

// TestRPCConnLimits: the RPC and the key exchange each hold at most
// MaxConnsPerHost connections of one address; one more is closed as it
// is accepted, long before any timeout.
func TestRPCConnLimits(t *testing.T) {
	log := &logSink{}
	cl := newCluster(t, 1, kv.ServerConfig{Logf: log.logf, Conns: keyx.ConnLimits{MaxConnsPerHost: 2}})
	s := cl.servers[0]
	for _, addr := range []string{s.Addr().String(), s.KeyxAddr().String()} {
		for range 2 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("%s: a third connection of 127.0.0.1: %v, want closed at once", addr, err)
		}
	}
	log.waitLog(t, "kv: 127.0.0.1:")
	log.waitLog(t, "keyx: 127.0.0.1:")
	if n := strings.Count(log.String(), "refused: 2 connections held from 127.0.0.1 (MaxConnsPerHost)"); n != 2 {
		t.Fatalf("%d refusals logged, want one by the RPC and one by the key exchange:\n%s", n, log.String())
	}
}
