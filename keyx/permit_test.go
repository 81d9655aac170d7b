package keyx

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

func mustClient(t *testing.T, ca *CA, name string, addrs ...string) *Credentials {
	t.Helper()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	c, err := ca.IssueClient(name, as...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// TestUngrantedClientRefused: a client certificate from the owner's CA
// that no Permit names gets no K_d, for any region (served or not) and
// op, and learns nothing of the regions served.
func TestUngrantedClientRefused(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead | abi.PermRemoteWrite | abi.PermRemoteRekey}
	addr, log, _ := startServerPermits(t, mustIssue(t, ca, "owner", true), []Permit{{Client: "alice", Ops: Read | Write | Rekey}}, reg)
	mallory := mustClient(t, ca, "mallory", reader.String())
	c, err := Dial(ctx(t), addr, mallory)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, region := range []abi.RegionID{reg.id, 0x20001} {
		for _, op := range []abi.Op{abi.OpRead, abi.OpWrite, abi.OpRekey} {
			_, err := c.Fetch(ctx(t), Request{Initiator: reader, PID: 7, Region: region, Op: op})
			want := `keyx: owner refused: not granted: certificate "mallory" is granted nothing by this owner`
			if !errors.Is(err, ErrNotGranted) || err.Error() != want {
				t.Fatalf("region %#x %v: %v, want %q", uint32(region), op, err, want)
			}
		}
	}
	// alice, granted everything on every region, is served: the
	// refusals were mallory's alone.
	if _, err := Fetch(ctx(t), addr, mustClient(t, ca, "alice", reader.String()), Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRekey}); err != nil {
		t.Fatal(err)
	}
	log.waitLog(t, `(certificate "mallory"): refused READ K_d for region 0x10001 to 10.77.0.1 pid 7: certificate "mallory" is granted nothing`)
	log.waitLog(t, `(certificate "alice"): granted REKEY K_d`)
	if n := strings.Count(log.String(), "granted REKEY"); n != 1 || strings.Contains(log.String(), `"mallory"): granted`) {
		t.Fatalf("log:\n%s", log.String())
	}
}

// TestGrantOtherClientsAddressRefused: a client asks only for the K_d of
// its certificate's addresses, or of those the owner granted it; a K_d
// for another client's address is refused, even when its permit covers
// the region and op.
func TestGrantOtherClientsAddressRefused(t *testing.T) {
	ca := mustCA(t)
	kr := aesni.Key{5}
	regA := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead | abi.PermRemoteWrite, kr: kr}
	regB := &fakeRegion{id: 0x10002, size: 4096, perm: abi.PermRemoteRead | abi.PermRemoteWrite, kr: kr}
	permits := []Permit{
		{Client: "alice"},
		{Client: "bob"},
		// carol's certificate names no address: the owner's map gives
		// her a /30 for READ, and WRITE on region B with no address of
		// its own.
		{Client: "carol", Addrs: prefixes("10.77.0.0/30")},
		{Client: "carol", Ops: Write, Regions: []abi.RegionID{regB.id}},
	}
	addr, log, _ := startServerPermits(t, mustIssue(t, ca, "owner", true), permits, regA, regB)
	alice := mustClient(t, ca, "alice", "10.77.0.1")
	bob := mustClient(t, ca, "bob", "10.77.0.5", "10.77.0.6")
	carol := mustClient(t, ca, "carol")
	for _, c := range []struct {
		who   *Credentials
		ip    string
		op    abi.Op
		reg   abi.RegionID
		code  Code
		wantE string
	}{
		{alice, "10.77.0.1", abi.OpRead, regA.id, CodeOK, ""},
		{bob, "10.77.0.5", abi.OpRead, regA.id, CodeOK, ""},
		{bob, "10.77.0.6", abi.OpRead, regB.id, CodeOK, ""},
		{bob, "10.77.0.1", abi.OpRead, regA.id, CodeAddress,
			`initiator 10.77.0.1 is not an address of certificate "bob" (it names 10.77.0.5, 10.77.0.6) nor one the owner granted it`},
		{alice, "10.77.0.5", abi.OpRead, regB.id, CodeAddress,
			`initiator 10.77.0.5 is not an address of certificate "alice" (it names 10.77.0.1) nor one the owner granted it`},
		{carol, "10.77.0.1", abi.OpRead, regA.id, CodeOK, ""},
		{carol, "10.77.0.3", abi.OpRead, regB.id, CodeOK, ""},
		{carol, "10.77.0.5", abi.OpRead, regA.id, CodeAddress,
			`initiator 10.77.0.5 is not an address of certificate "carol" (it names no address) nor one the owner granted it`},
		// The /30 comes with carol's READ permit, not her WRITE one.
		{carol, "10.77.0.1", abi.OpWrite, regB.id, CodeAddress,
			`initiator 10.77.0.1 is not an address of certificate "carol" (it names no address) nor one the owner granted it`},
		{carol, "10.77.0.1", abi.OpWrite, regA.id, CodeNotGranted,
			`certificate "carol" is not granted WRITE on region 0x10001 (granted: READ)`},
		// A permit that names no ops grants READ alone.
		{alice, "10.77.0.1", abi.OpWrite, regA.id, CodeNotGranted,
			`certificate "alice" is not granted WRITE on region 0x10001 (granted: READ)`},
	} {
		req := Request{Initiator: netip.MustParseAddr(c.ip), PID: 9, Region: c.reg, Op: c.op}
		g, err := Fetch(ctx(t), addr, c.who, req)
		if c.code == CodeOK {
			if err != nil || g.Key != aesni.DeriveKey(kr, req.Initiator.As4(), 9, uint8(c.op)) {
				t.Errorf("%s %v for %s on %#x: %v", c.who.Name(), c.op, c.ip, uint32(c.reg), err)
			}
			continue
		}
		var re *RefusedError
		if !errors.As(err, &re) || re.Code != c.code || re.Msg != c.wantE {
			t.Errorf("%s %v for %s on %#x: %v, want %v %q", c.who.Name(), c.op, c.ip, uint32(c.reg), err, c.code, c.wantE)
		}
	}
	log.waitLog(t, `(certificate "bob"): refused READ K_d for region 0x10001 to 10.77.0.1 pid 9: initiator 10.77.0.1 is not an address`)
}

// TestPermitsRegionsAndOps: a permit covers its regions and ops only;
// the region's own permissions still apply; SetPermits changes what an
// open connection is granted.
func TestPermitsRegionsAndOps(t *testing.T) {
	ca := mustCA(t)
	regA := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead | abi.PermRemoteRekey}
	regB := &fakeRegion{id: 0x10002, size: 4096, perm: abi.PermRemoteRead}
	permits := []Permit{{Client: "dave", Ops: Read | Rekey, Regions: []abi.RegionID{regA.id}, Addrs: []netip.Prefix{AnyAddress}}}
	addr, _, srv := startServerPermits(t, mustIssue(t, ca, "owner", true), permits, regA, regB)
	c, err := Dial(ctx(t), addr, mustClient(t, ca, "dave"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fetch := func(op abi.Op, reg abi.RegionID, ip string) error {
		_, err := c.Fetch(ctx(t), Request{Initiator: netip.MustParseAddr(ip), PID: 3, Region: reg, Op: op})
		return err
	}
	if err := fetch(abi.OpRead, regA.id, "192.0.2.44"); err != nil {
		t.Fatalf("READ on A for any address: %v", err)
	}
	if err := fetch(abi.OpRekey, regA.id, "10.1.1.1"); err != nil {
		t.Fatalf("REKEY on A: %v", err)
	}
	if err := fetch(abi.OpWrite, regA.id, "10.1.1.1"); !errors.Is(err, ErrNotGranted) || !strings.HasSuffix(err.Error(), "not granted WRITE on region 0x10001 (granted: READ+REKEY)") {
		t.Fatalf("WRITE on A: %v", err)
	}
	if err := fetch(abi.OpRead, regB.id, "10.1.1.1"); !errors.Is(err, ErrNotGranted) || !strings.HasSuffix(err.Error(), "not granted READ on region 0x10002 (granted: none)") {
		t.Fatalf("READ on B: %v", err)
	}
	// Granted everywhere, REKEY on B is still refused by the region.
	if err := srv.SetPermits([]Permit{{Client: "dave", Ops: Read | Rekey, Addrs: []netip.Prefix{AnyAddress}}}); err != nil {
		t.Fatal(err)
	}
	if err := fetch(abi.OpRead, regB.id, "10.1.1.1"); err != nil {
		t.Fatalf("READ on B after SetPermits: %v", err)
	}
	if err := fetch(abi.OpRekey, regB.id, "10.1.1.1"); !errors.Is(err, ErrPermission) {
		t.Fatalf("REKEY on B: %v", err)
	}
	// Taken away, on the open connection.
	if err := srv.SetPermits([]Permit{{Client: "erin"}}); err != nil {
		t.Fatal(err)
	}
	if err := fetch(abi.OpRead, regA.id, "10.1.1.1"); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("READ after the permit went: %v", err)
	}
	if err := srv.SetPermits(nil); err == nil {
		t.Fatal("SetPermits(nil) accepted")
	}
}

// LOOKUP K_d: granted by a permit's Lookup, for a region with
// PermRemoteLookup only; READ does not stand for it.
func TestPermitsLookup(t *testing.T) {
	ca := mustCA(t)
	idx := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteLookup}
	plain := &fakeRegion{id: 0x10002, size: 4096, perm: abi.PermRemoteRead}
	permits := []Permit{{Client: "dave", Ops: Read | Lookup, Addrs: []netip.Prefix{AnyAddress}}, {Client: "erin", Addrs: []netip.Prefix{AnyAddress}}}
	addr, _, _ := startServerPermits(t, mustIssue(t, ca, "owner", true), permits, idx, plain)
	fetch := func(who string, op abi.Op, reg *fakeRegion) (Grant, error) {
		c, err := Dial(ctx(t), addr, mustClient(t, ca, who))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.Fetch(ctx(t), Request{Initiator: netip.MustParseAddr("10.1.1.1"), PID: 3, Region: reg.id, Op: op})
	}
	g, err := fetch("dave", abi.OpLookup, idx)
	if err != nil || g.Op != abi.OpLookup || g.Key != aesni.DeriveKey(idx.kr, [4]byte{10, 1, 1, 1}, 3, uint8(abi.OpLookup)) {
		t.Fatalf("LOOKUP on the index: %+v %v", g, err)
	}
	if _, err := fetch("dave", abi.OpLookup, plain); !errors.Is(err, ErrPermission) {
		t.Fatalf("LOOKUP on a region without PermRemoteLookup: %v", err)
	}
	if _, err := fetch("erin", abi.OpLookup, idx); !errors.Is(err, ErrNotGranted) || !strings.Contains(err.Error(), "not granted LOOKUP") {
		t.Fatalf("LOOKUP granted READ only: %v", err)
	}
}

func TestNewServerPermits(t *testing.T) {
	ca := mustCA(t)
	creds := mustIssue(t, ca, "owner", true)
	for _, c := range []struct {
		permits []Permit
		want    string
	}{
		{nil, "keyx: server: no permits: name the clients that may have K_d (Config.Permits)"},
		{[]Permit{{}}, `keyx: server: permit 0 (""): no client name`},
		{[]Permit{{Client: "a"}, {Client: "b", Ops: 16}}, `keyx: server: permit 1 ("b"): ops 0x10 unknown`},
		{[]Permit{{Client: "a", Regions: []abi.RegionID{}}}, `permit 0 ("a"): an empty region list (nil means every region)`},
		{[]Permit{{Client: "a", Regions: []abi.RegionID{0}}}, `permit 0 ("a"): region 0 is never registered`},
		{[]Permit{{Client: "a", Addrs: prefixes("fd00::/64")}}, `permit 0 ("a"): address fd00::/64 is not an IPv4 address or prefix`},
	} {
		if _, err := NewServer(Config{Credentials: creds, Owner: owner, Permits: c.permits}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.permits, err, c.want)
		}
	}
	// The server keeps its own copy of the permits.
	p := []Permit{{Client: "a", Regions: []abi.RegionID{0x10001}}}
	s, err := NewServer(Config{Credentials: creds, Owner: owner, Permits: p})
	if err != nil {
		t.Fatal(err)
	}
	p[0].Regions[0] = 0x10002
	if !s.pol.byClient["a"][0].covers(0x10001, abi.OpRead) {
		t.Fatal("the server's permit changed with the caller's slice")
	}
}

func TestParsePermit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Permit
		out  string
	}{
		{"alice", Permit{Client: "alice"}, "alice=read"},
		{"bob=read+write", Permit{Client: "bob", Ops: Read | Write}, "bob=read+write"},
		{"bob=READ+Rekey", Permit{Client: "bob", Ops: Read | Rekey}, "bob=read+rekey"},
		{"rmaperf client=read+write@any", Permit{Client: "rmaperf client", Ops: Read | Write, Addrs: []netip.Prefix{AnyAddress}}, "rmaperf client=read+write@any"},
		{"c@10.0.0.7+10.1.0.9/16", Permit{Client: "c", Addrs: prefixes("10.0.0.7/32", "10.1.0.0/16")}, "c=read@10.0.0.7+10.1.0.0/16"},
	} {
		got, err := ParsePermit(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %+v %v, want %+v", c.in, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.out {
			t.Errorf("%q: String %q, want %q", c.in, s, c.out)
		}
		if again, err := ParsePermit(got.String()); err != nil || !reflect.DeepEqual(again.String(), c.out) {
			t.Errorf("%q: String does not parse back: %+v %v", c.in, again, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", `permit "": no client name`},
		{"=read", `permit "=read": no client name`},
		{"a=", `permit "a=": op "" unknown, want read, write, rekey or lookup (joined by +)`},
		{"a=read+delete", `op "delete" unknown`},
		{"a@", `permit "a@": address "": want an IPv4 address, a prefix (10.0.0.0/24) or any`},
		{"a@host", `address "host": want`},
		{"a@::1", `permit "a@::1": address ::1/128 is not an IPv4 address or prefix`},
	} {
		if _, err := ParsePermit(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.in, err, c.want)
		}
	}
	if s := (Read | Write | Rekey).String(); s != "READ+WRITE+REKEY" {
		t.Fatal(s)
	}
	if o, err := ParseOps("read+LOOKUP"); err != nil || o != Read|Lookup || o.String() != "READ+LOOKUP" {
		t.Fatalf("%v %v", o, err)
	}
}

// A refusal message longer than the protocol allows is cut at a rune's
// start, so that the reader can still read it.
func TestRefusalCutAtRune(t *testing.T) {
	var b [maxFrameLen]byte
	msg := strings.Repeat("é", maxMsgLen) // 2 bytes each
	n := marshalRefusal(b[:], CodeNotGranted, "a"+msg)
	if _, err := parseReply(b[:n]); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("cut refusal: %v", err)
	}
}

// DirPermit grants the client of a credentials directory, whatever its
// name, for any address; DefaultClient when there is none.
func TestDirPermit(t *testing.T) {
	srv, cli, err := NewPair("tool", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	if err := WriteDir(dir, srv, cli, false); err != nil {
		t.Fatal(err)
	}
	p, err := DirPermit(dir, Read|Write)
	if err != nil || p.String() != "tool client=read+write@any" {
		t.Fatalf("%v %v", p, err)
	}
	for _, d := range []string{"", t.TempDir()} {
		if p, err := DirPermit(d, Read); err != nil || p.String() != "onerma-client=read@any" {
			t.Fatalf("%q: %v %v", d, p, err)
		}
	}
	os.Chmod(filepath.Join(dir, ClientFile), 0o644)
	if _, err := DirPermit(dir, Read); err == nil || !strings.Contains(err.Error(), "mode 0644 lets group or others read or write it; want 0600") {
		t.Fatalf("client.pem mode 0644: %v", err)
	}
}
