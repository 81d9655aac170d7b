package keyx

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"golang.org/x/sys/unix"
)

// fakeRegion stands in for *portal.Region.
type fakeRegion struct {
	id   abi.RegionID
	size uint64
	perm abi.Perm
	kr   aesni.Key
}

func (r *fakeRegion) ID() abi.RegionID { return r.id }
func (r *fakeRegion) Size() uint64     { return r.size }
func (r *fakeRegion) Perm() abi.Perm   { return r.perm }
func (r *fakeRegion) DeriveKey(ip netip.Addr, pid uint32, op abi.Op) aesni.Key {
	return aesni.DeriveKey(r.kr, ip.As4(), pid, uint8(op))
}

var (
	owner  = netip.MustParseAddr("10.77.0.2")
	reader = netip.MustParseAddr("10.77.0.1")
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
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(l.String(), want) {
			return
		}
	}
	t.Fatalf("server log lacks %q:\n%s", want, l.String())
}

func mustCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustIssue(t *testing.T, ca *CA, name string, server bool) *Credentials {
	t.Helper()
	c, err := ca.IssueClient(name)
	if server {
		c, err = ca.IssueServer(name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testPermits are the tests' readers: each may have READ K_d for the
// address reader on every region.
var testPermits = []Permit{
	{Client: "reader", Addrs: []netip.Prefix{netip.PrefixFrom(reader, 32)}},
	{Client: "child", Addrs: []netip.Prefix{netip.PrefixFrom(reader, 32)}},
	{Client: "pair client", Addrs: []netip.Prefix{netip.PrefixFrom(reader, 32)}},
}

// startServer serves regs with creds to the readers of testPermits and
// returns its address and log.
func startServer(t *testing.T, creds *Credentials, regs ...Region) (string, *logSink, *Server) {
	t.Helper()
	return startServerPermits(t, creds, testPermits, regs...)
}

// startServerPermits serves regs with creds under permits.
func startServerPermits(t *testing.T, creds *Credentials, permits []Permit, regs ...Region) (string, *logSink, *Server) {
	t.Helper()
	log := &logSink{}
	s, err := NewServer(Config{Credentials: creds, Owner: owner, Permits: permits, Logf: log.logf, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regs {
		s.Add(r)
	}
	ap, err := s.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ap.String(), log, s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRoundTrip(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10003, size: 64 << 10, perm: abi.PermRemoteRead, kr: aesni.Key{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	// Granted READ and WRITE: the region's own permissions still
	// refuse WRITE.
	rw := []Permit{{Client: "reader", Ops: Read | Write, Addrs: []netip.Prefix{netip.PrefixFrom(reader, 32)}}}
	addr, log, srv := startServerPermits(t, mustIssue(t, ca, "owner", true), rw, reg)
	cl := mustIssue(t, ca, "reader", false)

	req := Request{Initiator: reader, PID: 4242, Region: reg.id, Op: abi.OpRead}
	g, err := Fetch(ctx(t), addr, cl, req)
	if err != nil {
		t.Fatal(err)
	}
	want := aesni.DeriveKey(reg.kr, reader.As4(), 4242, uint8(abi.OpRead))
	if g.Key != want || g.Region != reg.id || g.Op != abi.OpRead || g.Owner != owner || g.Bytes != reg.size {
		t.Fatalf("grant %v (key ok: %v)", g, g.Key == want)
	}

	// One connection, several requests: refusals that are not malformed
	// leave it usable.
	c, err := Dial(ctx(t), addr, cl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Peer().Subject.CommonName; got != "owner" {
		t.Fatalf("peer %q", got)
	}
	other := req
	other.PID = 4243
	g2, err := c.Fetch(ctx(t), other)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Key == g.Key || g2.Key != aesni.DeriveKey(reg.kr, reader.As4(), 4243, uint8(abi.OpRead)) {
		t.Fatal("K_d of another PID is wrong")
	}
	unknown := req
	unknown.Region = 0x20003
	_, err = c.Fetch(ctx(t), unknown)
	if !errors.Is(err, ErrUnknownRegion) || err.Error() != "keyx: owner refused: unknown region: region 0x20003 is not served here" {
		t.Fatalf("unknown region: %v", err)
	}
	write := req
	write.Op = abi.OpWrite
	_, err = c.Fetch(ctx(t), write)
	if !errors.Is(err, ErrPermission) || !strings.HasSuffix(err.Error(), "region 0x10003 does not allow remote WRITE") {
		t.Fatalf("write on a read-only region: %v", err)
	}

	// A rekey under Update: the next grant uses the new K_r.
	if err := srv.Update(func() error { reg.kr[0] ^= 0xff; return nil }); err != nil {
		t.Fatal(err)
	}
	g3, err := c.Fetch(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Key == g.Key || g3.Key != aesni.DeriveKey(reg.kr, reader.As4(), 4242, uint8(abi.OpRead)) {
		t.Fatal("K_d after rekey is wrong")
	}

	// Authorize narrows who gets what.
	addr2, _, _ := startServer(t, mustIssue(t, ca, "owner2", true), reg)
	s2, _ := NewServer(Config{Credentials: mustIssue(t, ca, "owner3", true), Owner: owner, Permits: testPermits,
		Authorize: func(peer *x509.Certificate, r Request) error {
			if peer.Subject.CommonName != "trusted" {
				return fmt.Errorf("certificate %q may not read", peer.Subject.CommonName)
			}
			return nil
		}})
	s2.Add(reg)
	ap, err := s2.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := Fetch(ctx(t), ap.String(), cl, req); !errors.Is(err, ErrRefused) || !strings.HasSuffix(err.Error(), `certificate "reader" may not read`) {
		t.Fatalf("authorize: %v", err)
	}
	if _, err := Fetch(ctx(t), addr2, cl, req); err != nil {
		t.Fatal(err)
	}

	// No key in any log line or in the Grant's formatting.
	logs := log.String()
	for _, k := range []aesni.Key{g.Key, g2.Key, g3.Key, reg.kr} {
		for _, s := range []string{hex.EncodeToString(k[:]), string(k[:]), fmt.Sprint(k[:]), fmt.Sprint(k)} {
			if strings.Contains(logs, s) {
				t.Fatalf("log holds a key:\n%s", logs)
			}
			for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
				if strings.Contains(fmt.Sprintf(f, g), s) {
					t.Fatalf("Grant formats its key with %s", f)
				}
			}
		}
	}
	if !strings.Contains(logs, `granted READ K_d for region 0x10003 to 10.77.0.1 pid 4242`) {
		t.Fatalf("log:\n%s", logs)
	}
}

func TestClientFromOtherCARefused(t *testing.T) {
	ca, evil := mustCA(t), mustCA(t)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead}
	addr, log, _ := startServer(t, mustIssue(t, ca, "owner", true), reg)
	// The stranger trusts the real CA (it knows the owner's certificate)
	// but its own certificate is from another.
	stranger := mustIssue(t, evil, "stranger", false)
	stranger.ca = ca.cert
	_, err := Fetch(ctx(t), addr, stranger, Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRead})
	if err == nil || !strings.Contains(err.Error(), "keyx: read reply: the owner refused this client's certificate (it must be a client certificate from the owner's CA, not expired): remote error: tls: unknown certificate authority") {
		t.Fatalf("stranger got %v", err)
	}
	log.waitLog(t, "refused: handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority")
	if strings.Contains(log.String(), "granted") {
		t.Fatal(log.String())
	}

	// A certificate from the right CA but for serving (no client-auth
	// usage) is refused too: Dial refuses to use it, and so would the
	// server.
	if _, err := Dial(ctx(t), addr, mustIssue(t, ca, "owner-as-client", true)); err == nil || !strings.Contains(err.Error(), "not a client certificate") {
		t.Fatalf("server certificate as client: %v", err)
	}
	// Bypassing Dial's check does not help: the server requires the
	// client-auth usage.
	sc := mustIssue(t, ca, "owner-as-client", true)
	raw, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{sc.cert},
		RootCAs: sc.pool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	rc := &Conn{c: raw}
	req := Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRead}
	if _, err := rc.Fetch(ctx(t), req); err == nil || !strings.Contains(err.Error(), "the owner refused this client's certificate") {
		t.Fatalf("server certificate used as a client one: %v", err)
	}
	rc.Close()
	log.waitLog(t, "x509: certificate specifies an incompatible key usage")
	if _, err := NewServer(Config{Credentials: mustIssue(t, ca, "reader-as-server", false), Owner: owner, Permits: testPermits}); err == nil || !strings.Contains(err.Error(), "not a server certificate") {
		t.Fatalf("client certificate as server: %v", err)
	}
}

func TestServerFromOtherCARefused(t *testing.T) {
	ca, evil := mustCA(t), mustCA(t)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead}
	// An impostor owner: its certificate is from another CA, though it
	// trusts the real one (so it would accept the reader).
	imp := mustIssue(t, evil, "impostor", true)
	imp.ca = ca.cert
	addr, log, _ := startServer(t, imp, reg)
	_, err := Dial(ctx(t), addr, mustIssue(t, ca, "reader", false))
	if err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
		t.Fatalf("dial to an impostor: %v", err)
	}
	log.waitLog(t, "refused: handshake")
}

func TestMalformedRequests(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead}
	addr, log, _ := startServer(t, mustIssue(t, ca, "owner", true), reg)
	cl := mustIssue(t, ca, "reader", false)
	good := func() []byte {
		var b [requestLen]byte
		r := Request{Initiator: reader, PID: 99, Region: reg.id, Op: abi.OpRead}
		if err := r.marshal(&b); err != nil {
			t.Fatal(err)
		}
		return b[:]
	}
	with := func(f func(b []byte)) []byte { b := good(); f(b); return b }
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "empty request"},
		{"version", with(func(b []byte) { b[0] = 2 }), "version 2, want 1"},
		{"short", good()[:15], "request of 15 bytes, want 16"},
		{"long", append(good(), 0), "request of 17 bytes, want 16"},
		{"reserved", with(func(b []byte) { b[3] = 1 }), "reserved field 0x0001, want 0"},
		{"op 0", with(func(b []byte) { b[1] = 0 }), "op 0 unknown, want 1 (READ), 2 (WRITE), 3 (REKEY) or 4 (LOOKUP)"},
		{"op 9", with(func(b []byte) { b[1] = 9 }), "op 9 unknown, want 1 (READ), 2 (WRITE), 3 (REKEY) or 4 (LOOKUP)"},
		{"initiator 0", with(func(b []byte) { copy(b[4:], []byte{0, 0, 0, 0}) }), "initiator 0.0.0.0 is not a unicast IPv4 address"},
		{"initiator multicast", with(func(b []byte) { copy(b[4:], []byte{224, 0, 0, 1}) }), "initiator 224.0.0.1 is not a unicast IPv4 address"},
		{"initiator broadcast", with(func(b []byte) { copy(b[4:], []byte{255, 255, 255, 255}) }), "initiator 255.255.255.255 is not a unicast IPv4 address"},
		{"pid 0", with(func(b []byte) { binary.BigEndian.PutUint32(b[8:], 0) }), "initiator PID 0"},
		{"region 0", with(func(b []byte) { binary.BigEndian.PutUint32(b[12:], 0) }), "region 0 is never registered"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := Dial(ctx(t), addr, cl)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = conn.exchange(ctx(t), c.body)
			var re *RefusedError
			if !errors.As(err, &re) || re.Code != CodeBadRequest || re.Msg != c.want || !errors.Is(err, ErrBadRequest) {
				t.Fatalf("got %v, want bad request %q", err, c.want)
			}
			// The server hangs up after a malformed request.
			if _, err := conn.exchange(ctx(t), good()); err == nil {
				t.Fatal("connection still served after a malformed request")
			}
		})
	}
	t.Run("frame too long", func(t *testing.T) {
		conn, err := Dial(ctx(t), addr, cl)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		b := make([]byte, 2+1000)
		binary.BigEndian.PutUint16(b, 1000)
		if _, err := conn.c.Write(b); err != nil {
			t.Fatal(err)
		}
		body, err := readFrame(conn.c, conn.in[:], maxFrameLen)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseReply(body); !errors.Is(err, ErrBadRequest) || !strings.HasSuffix(err.Error(), ": request of 1000 bytes, want 16") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		conn, err := Dial(ctx(t), addr, cl)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		b := append([]byte{0, requestLen}, good()[:5]...)
		if _, err := conn.c.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := conn.c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		body, err := readFrame(conn.c, conn.in[:], maxFrameLen)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseReply(body); !errors.Is(err, ErrBadRequest) || !strings.HasSuffix(err.Error(), ": truncated message: 5 of 16 bytes") {
			t.Fatalf("got %v", err)
		}
	})
	// The client refuses to send what the server would refuse.
	if _, err := Fetch(ctx(t), addr, cl, Request{Initiator: netip.MustParseAddr("::1"), PID: 1, Region: 1, Op: abi.OpRead}); err == nil ||
		err.Error() != "keyx: request: initiator ::1 is not a unicast IPv4 address" {
		t.Fatalf("IPv6 initiator: %v", err)
	}
	if strings.Contains(log.String(), "granted") {
		t.Fatal(log.String())
	}
	log.waitLog(t, "bad request: op 9 unknown")
}

func TestReplyParsing(t *testing.T) {
	var b [grantLen]byte
	g := Grant{Region: 5, Op: abi.OpRead, Owner: owner, Bytes: 10, Key: aesni.Key{9}}
	marshalGrant(&b, &g)
	if got, err := parseReply(b[:]); err != nil || got != g {
		t.Fatalf("%v %v", got, err)
	}
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{b[:3], "keyx: reply of 3 bytes, want at least 4"},
		{append([]byte{2}, b[1:]...), "keyx: reply version 2, want 1"},
		{b[:39], "keyx: grant of 39 bytes, want 40"},
		{[]byte{1, 2, 0, 0}, "keyx: refusal (unknown region) with a malformed message of 0 bytes"},
		{[]byte{1, 2, 0, 0, 0xff}, "keyx: refusal (unknown region) with a malformed message of 1 bytes"},
	} {
		if _, err := parseReply(c.b); err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

func TestCredentialsBundle(t *testing.T) {
	ca := mustCA(t)
	c := mustIssue(t, ca, "reader", false)
	data, err := c.marshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseCredentials(bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	if got.Name() != "reader" || !got.CA().Equal(ca.cert) {
		t.Fatal("round trip")
	}
	other, _ := mustIssue(t, ca, "other", false).marshalPEM()
	foreign, _ := mustIssue(t, mustCA(t), "x", false).marshalPEM()
	blocks := func(b []byte) [][]byte { // the three PEM blocks
		var out [][]byte
		s := string(b)
		for len(s) > 0 {
			i := strings.Index(s[1:], "-----BEGIN")
			if i < 0 {
				out = append(out, []byte(s))
				break
			}
			out = append(out, []byte(s[:i+1]))
			s = s[i+1:]
		}
		return out
	}
	d, o, f := blocks(data), blocks(other), blocks(foreign)
	join := func(p ...[]byte) []byte { return bytes.Join(p, nil) }
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{join(d[0], d[1]), "2 PEM blocks, want 3 (CA certificate, certificate, private key)"},
		{join(d[0], d[2], d[1]), `PEM block 2 is "PRIVATE KEY", want "CERTIFICATE"`},
		{join(d[1], d[1], d[2]), "first certificate is not a CA"},
		{join(d[0], f[1], f[2]), "certificate not signed by the CA"},
		{join(d[0], d[1], o[2]), "private key does not match the certificate"},
		{[]byte("junk"), "block 1 is not PEM"},
	} {
		if _, err := parseCredentials(tc.b); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// TestInheritedPipe passes credentials to a child process over a pipe
// (Attach) and has the child fetch a K_d with them.
func TestInheritedPipe(t *testing.T) {
	if os.Getenv("KEYX_TEST_CHILD") != "" {
		return // the child runs TestChild
	}
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead}
	addr, log, _ := startServer(t, mustIssue(t, ca, "owner", true), reg)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestChild$", "-test.v")
	fd, closeAfter, err := Attach(cmd, mustIssue(t, ca, "child", false))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "KEYX_TEST_CHILD="+fmt.Sprint(fd), "KEYX_TEST_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	closeAfter()
	if err != nil || !strings.Contains(string(out), "child: grant region 0x10001 (4096 bytes) on 10.77.0.2, READ K_d") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	log.waitLog(t, `(certificate "child"): granted READ K_d for region 0x10001 to 10.77.0.1 pid`)
	if strings.Contains(strings.Join(cmd.Args, " "), "PRIVATE") {
		t.Fatal("credentials on the command line")
	}

	// A regular file is refused.
	f, err := os.CreateTemp(t.TempDir(), "creds")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd2, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Inherited(fd2); err == nil || !strings.Contains(err.Error(), "is not a pipe or socket") {
		t.Fatalf("regular file: %v", err)
	}
}

func TestChild(t *testing.T) {
	v := os.Getenv("KEYX_TEST_CHILD")
	if v == "" {
		t.Skip("helper of TestInheritedPipe")
	}
	var fd int
	fmt.Sscan(v, &fd)
	creds, err := Inherited(fd)
	if err != nil {
		t.Fatal(err)
	}
	if creds.Name() != "child" {
		t.Fatalf("name %q", creds.Name())
	}
	// The descriptor is consumed.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatal("credentials fd still open")
	}
	g, err := Fetch(ctx(t), os.Getenv("KEYX_TEST_ADDR"), creds, Request{Initiator: reader, PID: uint32(os.Getpid()), Region: 0x10001, Op: abi.OpRead})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("child: grant", g)
}

// A connection idle past the server's timeout is closed with a
// close_notify: the client's next Fetch fails with the end of the
// connection, not a TLS record error, the server logs it as idle rather
// than a bad request, and a new connection works.
func TestIdleConnection(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10003, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{7}}
	log := &logSink{}
	s, err := NewServer(Config{Credentials: mustIssue(t, ca, "owner", true), Owner: owner, Permits: testPermits, Logf: log.logf, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(reg)
	ap, err := s.Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl := mustIssue(t, ca, "reader", false)
	req := Request{Initiator: reader, PID: 4242, Region: reg.id, Op: abi.OpRead}
	c, err := Dial(ctx(t), ap.String(), cl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fetch(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	log.waitLog(t, "idle for 200ms, closed")
	_, err = c.Fetch(ctx(t), req)
	if err == nil || err.Error() != "keyx: server closed the connection without a reply" {
		t.Fatalf("fetch on the idle-closed connection: %v", err)
	}
	if strings.Contains(log.String(), "bad request") {
		t.Fatalf("idle connection logged as a bad request:\n%s", log.String())
	}
	if _, err := Fetch(ctx(t), ap.String(), cl, req); err != nil {
		t.Fatalf("new connection: %v", err)
	}
}

// NewPair's owner credentials serve its readers', and only in those roles.
func TestNewPair(t *testing.T) {
	srv, cli, err := NewPair("pair", time.Hour, "owner.example")
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(t.TempDir(), cli, srv, false); err == nil {
		t.Fatal("WriteDir took the reader's credentials as the owner's")
	}
	reg := &fakeRegion{id: 0x10003, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{9}}
	addr, _, _ := startServer(t, srv, reg)
	req := Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRead}
	g, err := Fetch(ctx(t), addr, cli, req)
	if err != nil || g.Key != aesni.DeriveKey(reg.kr, reader.As4(), 7, uint8(abi.OpRead)) {
		t.Fatalf("fetch with the pair: %v", err)
	}
}
