package rawnet

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

var (
	ini = Endpoint{MAC: wire.MAC{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("10.9.0.1"), Port: 4792}
	srv = Endpoint{MAC: wire.MAC{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr("10.9.0.2"), Port: 4792}
)

func request(kd aesni.Key) []byte {
	f := Fields(ini, srv)
	f.Type, f.PID, f.Tag, f.Region, f.Length, f.Offset = wire.TypeReadReq, 77, 5<<32|9, 0x10001, 4096, 128
	f.IV = Nonce(ini.IP, 42)
	b := Build(&f, 0)
	SealRequest(b, kd)
	return b
}

func TestRequestAndAnswers(t *testing.T) {
	kr := aesni.Key{1, 2, 3}
	kd := aesni.DeriveKey(kr, ini.IP.As4(), 77, uint8(wire.TypeReadReq))
	req := request(kd)
	if len(req) != wire.Overhead {
		t.Fatalf("request of %d bytes", len(req))
	}
	f, p, err := Parse(req)
	if err != nil || len(p) != 0 || f.PID != 77 || Addr(f.DstIP) != srv.IP || f.IV != Nonce(ini.IP, 42) {
		t.Fatalf("%+v %v", f, err)
	}
	if err := OpenRequest(req, kd); err != nil {
		t.Fatal(err)
	}
	if OpenRequest(req, aesni.Key{9}) == nil {
		t.Fatal("opened under another key")
	}
	// A rewritten header keeps the old tag, which no longer verifies.
	re, err := Rewrite(req, func(f *wire.Fields) { f.PID = 78 })
	if err != nil {
		t.Fatal(err)
	}
	if g, _, _ := Parse(re); g.PID != 78 || !bytes.Equal(wire.Trailer(re, 0), wire.Trailer(req, 0)) {
		t.Fatalf("rewrite: %+v", g)
	}
	if OpenRequest(re, kd) == nil {
		t.Fatal("a rewritten request verified")
	}
	same, _ := Rewrite(req, func(*wire.Fields) {})
	if !bytes.Equal(same, req) {
		t.Fatal("an identity rewrite changed the frame")
	}

	// A data answer: sealed under K_d with the request IV curried.
	data := bytes.Repeat([]byte("secret!"), 100)
	af := Fields(srv, ini)
	af.Type, af.Tag, af.Length, af.Offset, af.IV = wire.TypeReadResp, f.Tag, uint32(len(data)), 0, Nonce(srv.IP, 7)
	ans := Build(&af, len(data))
	SealAnswer(ans, kd, data, f.IV[:])
	if PayloadLen(ans) != len(data) || bytes.Contains(ans, data[:16]) {
		t.Fatal("plaintext on the wire")
	}
	if _, _, err := Parse(ans); err != nil {
		t.Fatal(err)
	}
	got, err := OpenAnswer(ans, kd, f.IV[:])
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("open: %v", err)
	}
	other := f.IV
	other[11]++
	if _, err := OpenAnswer(ans, kd, other[:]); err == nil {
		t.Fatal("opened with another request IV")
	}

	// REMOTE_AUTHENTICATION_FAILURE under the reserved key.
	ef := Fields(srv, ini)
	ef.Type, ef.Status, ef.Tag, ef.IV = wire.TypeError, 1, f.Tag, Nonce(srv.IP, 8)
	e := Build(&ef, 0)
	SealAuthFailure(e, f.IV[:])
	if err := OpenAuthFailure(e, f.IV[:]); err != nil {
		t.Fatal(err)
	}
	if OpenAuthFailure(e, other[:]) == nil || OpenAuthFailure(e[:50], f.IV[:]) == nil {
		t.Fatal("auth failure opened for another request or truncated")
	}
	if _, err := OpenAnswer(e, kd, f.IV[:]); err == nil {
		t.Fatal("auth failure opened under K_d")
	}
	e[20] ^= 1 // IPv4 fragment field: not in the AAD, still opens
	if OpenAuthFailure(e, f.IV[:]) != nil {
		t.Fatal("a byte outside the AAD broke the tag")
	}
	FixIPv4Checksum(e)
	if wire.Checksum(e[wire.EthLen:wire.EthLen+wire.IPv4Len]) != 0 {
		t.Fatal("checksum not fixed")
	}
}

// Inject and capture across a veth pair in the current namespace (root).
func TestInjectCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root in CI")
		}
		t.Skip("needs root")
	}
	a, b := fmt.Sprintf("rnta%d", os.Getpid()%10000), fmt.Sprintf("rntb%d", os.Getpid()%10000)
	exec.Command("ip", "link", "del", a).Run()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("ip", "link", "del", a).Run()
	for _, i := range []string{a, b} {
		exec.Command("sysctl", "-qw", "net.ipv6.conf."+i+".disable_ipv6=1").Run()
		if out, err := exec.Command("ip", "link", "set", i, "up").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	pa, err := Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	pb, err := Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	time.Sleep(50 * time.Millisecond)
	pa.Drain()
	pb.Drain()
	req := request(aesni.Key{7})
	for k := 0; k < 10; k++ {
		req[wire.IVOffset+11] = byte(k)
		if err := pa.Inject(req); err != nil {
			t.Fatal(err)
		}
	}
	isOurs := func(f *Frame) bool {
		g, _, err := Parse(f.Data)
		return err == nil && g.PID == 77
	}
	in, err := pb.Capture(2*time.Second, 10, isOurs)
	if err != nil || len(in) != 10 {
		t.Fatalf("captured %d of 10 on the peer: %v", len(in), err)
	}
	for k, f := range in {
		if f.Out || f.Data[wire.IVOffset+11] != byte(k) || len(f.Data) != len(req) {
			t.Fatalf("frame %d: out %v, %d bytes", k, f.Out, len(f.Data))
		}
	}
	// The injecting socket does not see its own frames; another socket on
	// the same interface sees them as outgoing.
	if own, _ := pa.Capture(100*time.Millisecond, 0, isOurs); len(own) != 0 {
		t.Fatalf("the injecting socket captured %d of its own frames", len(own))
	}
	pa2, err := Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer pa2.Close()
	if err := pa.Inject(req); err != nil {
		t.Fatal(err)
	}
	if f, err := pa2.Expect(2*time.Second, isOurs); err != nil || !f.Out {
		t.Fatalf("second socket: out %v, %v", f.Out, err)
	}
	if err := pa.Inject(make([]byte, 3)); err == nil {
		t.Fatal("a 3-byte frame was accepted")
	}
	if err := pa.Inject(make([]byte, pa.MTU()+wire.EthLen+1)); err == nil {
		t.Fatal("a frame over the MTU was accepted")
	}
	if pk, _, err := pb.Stats(); err != nil || pk < 10 {
		t.Fatalf("stats: %d packets, %v", pk, err)
	}
}
