package keyx

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// newAuthority keeps a new CA in a new directory with its server and
// default client, as `rmactl creds DIR` does.
func newAuthority(t *testing.T) (*Authority, string) {
	t.Helper()
	ca, err := NewCA("kept CA", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	short, err := ca.ValidFor(7 * 24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := short.IssueServer("onerma-server")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := short.IssueClient(DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	a, err := CreateAuthority(dir, "", ca, srv, cli, false)
	if err != nil {
		t.Fatal(err)
	}
	return a, dir
}

// TestAuthority: a CA kept in a directory issues clients one at a time,
// with their own names, addresses and lifetimes, and revokes them by name
// or serial; each step is visible in its files.
func TestAuthority(t *testing.T) {
	a, dir := newAuthority(t)
	for name, mode := range map[string]fs.FileMode{"": fs.ModeDir | 0o700, CAFile: 0o600, CAKeyFile: 0o600, ServerFile: 0o600,
		ClientFile: 0o600, RevocationFile: 0o600, IssuedDir: fs.ModeDir | 0o700} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode() != mode {
			t.Errorf("%s: %v %v, want %v", name, st.Mode(), err, mode)
		}
	}
	// A second run refuses, naming every file it would replace.
	ca2, _ := NewCA("another", time.Hour)
	s2, _ := ca2.IssueServer("s")
	c2, _ := ca2.IssueClient("c")
	_, err := CreateAuthority(dir, "", ca2, s2, c2, false)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "ca.pem, server.pem, client.pem, crl.pem, issued, ca-key.pem: file already exists; refusing to replace credentials") {
		t.Fatalf("second CreateAuthority: %v", err)
	}

	b, err := OpenAuthority(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if !b.CA().Certificate().Equal(a.CA().Certificate()) {
		t.Fatal("opened another CA")
	}
	alice, err := b.IssueClient("alice", time.Hour, netip.MustParseAddr("10.77.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(alice.Certificate().NotAfter); d > time.Hour || d < 59*time.Minute {
		t.Fatalf("alice valid for %v, asked for 1h", d)
	}
	if ips := alice.Certificate().IPAddresses; len(ips) != 1 || !ips[0].Equal(net.IPv4(10, 77, 0, 1)) {
		t.Fatalf("alice's addresses %v", ips)
	}
	if _, err := b.IssueClient("bob", 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	// A lifetime beyond the CA's ends with the CA.
	long, err := b.IssueClient("alice", 365*24*time.Hour)
	if err != nil || !long.Certificate().NotAfter.Equal(b.CA().Certificate().NotAfter) {
		t.Fatalf("long-lived alice: %v", err)
	}
	issued, err := b.Issued()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ic := range issued {
		names = append(names, ic.Cert.Subject.CommonName)
	}
	if got := strings.Join(names, " "); got != "onerma-server onerma-client alice bob alice" {
		t.Fatalf("issued %q", got)
	}

	// Revoked by name: both of alice's certificates.
	revoked, err := b.Revoke("alice", nil)
	if err != nil || len(revoked) != 2 {
		t.Fatalf("revoke alice: %d, %v", len(revoked), err)
	}
	if _, err := b.Revoke("alice", nil); err == nil || !strings.Contains(err.Error(), `no client certificate issued to "alice" from `+dir+" is left to revoke") {
		t.Fatalf("alice again: %v", err)
	}
	if _, err := b.Revoke("nobody", nil); err == nil {
		t.Fatal("revoked a name never issued")
	}
	srvSerial := issued[0].Cert.SerialNumber
	if _, err := b.Revoke("", srvSerial); err == nil || !strings.Contains(err.Error(), "is a server certificate: readers do not check revocation") {
		t.Fatalf("revoke the server: %v", err)
	}
	if _, err := b.Revoke("", big.NewInt(12345)); err == nil || !strings.Contains(err.Error(), "no certificate of serial 0x3039 was issued from") {
		t.Fatalf("revoke an unknown serial: %v", err)
	}
	if _, err := b.Revoke("", revoked[0].SerialNumber); err == nil || !strings.Contains(err.Error(), "was revoked already") {
		t.Fatalf("revoke a revoked serial: %v", err)
	}
	// By serial: bob.
	if r, err := b.Revoke("", issued[3].Cert.SerialNumber); err != nil || r[0].Subject.CommonName != "bob" {
		t.Fatalf("revoke bob by serial: %v", err)
	}
	rl, err := readRevocationList(filepath.Join(dir, RevocationFile), a.CA().Certificate())
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.RevokedCertificateEntries) != 3 || rl.Number.Int64() != 3 || !rl.NextUpdate.Equal(a.CA().Certificate().NotAfter) {
		t.Fatalf("revocation list: %d entries, number %v, next update %v", len(rl.RevokedCertificateEntries), rl.Number, rl.NextUpdate)
	}
	issued, _ = b.Issued()
	for _, ic := range issued {
		if want := ic.Cert.Subject.CommonName == "alice" || ic.Cert.Subject.CommonName == "bob"; want != !ic.Revoked.IsZero() {
			t.Errorf("%s revoked at %v", ic.Cert.Subject.CommonName, ic.Revoked)
		}
	}
}

func TestOpenAuthorityRefuses(t *testing.T) {
	_, dir := newAuthority(t)
	key := filepath.Join(dir, CAKeyFile)
	os.Chmod(key, 0o640)
	if _, err := OpenAuthority(dir, ""); err == nil || !strings.Contains(err.Error(), "ca-key.pem: mode 0640 lets group or others read or write it") {
		t.Fatalf("key mode 0640: %v", err)
	}
	os.Chmod(key, 0o600)
	// Another CA's key.
	_, other := newAuthority(t)
	if _, err := OpenAuthority(dir, filepath.Join(other, CAKeyFile)); err == nil || !strings.Contains(err.Error(), "is not the key of the CA in") {
		t.Fatalf("another CA's key: %v", err)
	}
	empty := t.TempDir()
	os.Chmod(empty, 0o700)
	if _, err := OpenAuthority(empty, ""); err == nil || !strings.Contains(err.Error(), "ca.pem: no such file") {
		t.Fatalf("empty directory: %v", err)
	}
	// A directory that kept no key (WriteDir alone, as before).
	os.Remove(key)
	if _, err := OpenAuthority(dir, ""); err == nil || !strings.Contains(err.Error(), "holds no kept CA; -ca-key names a key kept elsewhere") {
		t.Fatalf("no key: %v", err)
	}
}

// An operator's own key (SEC 1, as openssl ecparam -genkey writes it),
// kept outside the directory, signs the CA and stays where it is.
func TestAuthorityOperatorKey(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(k)
	keyPath := filepath.Join(t.TempDir(), "my-ca.key")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(keyPath)
	key, err := LoadCAKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCAWithKey("operator CA", time.Hour, key)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.IssueServer("s")
	cli, _ := ca.IssueClient("c")
	dir := filepath.Join(t.TempDir(), "creds")
	if _, err := CreateAuthority(dir, keyPath, ca, srv, cli, false); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Fatal("the operator's key file changed")
	}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a key in the directory too: %v", err)
	}
	a, err := OpenAuthority(dir, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.IssueClient("d", time.Minute); err != nil {
		t.Fatal(err)
	}
	// Another key than the CA's is refused.
	other, _ := NewCA("x", time.Hour)
	os2, _ := other.IssueServer("s")
	oc2, _ := other.IssueClient("c")
	if _, err := CreateAuthority(filepath.Join(t.TempDir(), "c2"), keyPath, other, os2, oc2, false); err == nil || !strings.Contains(err.Error(), "is not the key of CA") {
		t.Fatalf("mismatched operator key: %v", err)
	}
}

// TestRevokedClientRefused: a client the CA revokes is refused by an
// owner serving from the directory (LoadServer reads its revocation
// list), on the connection it holds open and on new ones, with a
// refusal that says so; other clients are served. A revocation list that
// cannot be trusted refuses every client until it is fixed.
func TestRevokedClientRefused(t *testing.T) {
	a, dir := newAuthority(t)
	creds, err := LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	if creds.RevocationPath() != filepath.Join(dir, RevocationFile) {
		t.Fatalf("revocation list %q", creds.RevocationPath())
	}
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{3}}
	addr, log, _ := startServerPermits(t, creds, []Permit{{Client: "alice"}, {Client: "bob"}}, reg)
	alice, err := a.IssueClient("alice", time.Hour, reader)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := a.IssueClient("bob", time.Hour, reader)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Initiator: reader, PID: 5, Region: reg.id, Op: abi.OpRead}
	c, err := Dial(ctx(t), addr, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fetch(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke("alice", nil); err != nil {
		t.Fatal(err)
	}
	want := `certificate "alice" (serial ` + "0x" + alice.Certificate().SerialNumber.Text(16) + ") was revoked by the CA at "
	_, err = c.Fetch(ctx(t), req)
	if !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), "keyx: owner refused: certificate revoked: "+want) {
		t.Fatalf("open connection after the revocation: %v", err)
	}
	if _, err := c.Fetch(ctx(t), req); err == nil || err.Error() != "keyx: fetch on a failed connection" {
		t.Fatalf("the connection after the revocation: %v", err)
	}
	if _, err := Fetch(ctx(t), addr, alice, req); !errors.Is(err, ErrRevoked) {
		t.Fatalf("new connection: %v", err)
	}
	if _, err := Fetch(ctx(t), addr, bob, req); err != nil {
		t.Fatalf("bob: %v", err)
	}
	log.waitLog(t, `(certificate "alice"): refused: `+want)

	// The handshake of ServerTLS refuses alice too (for services that
	// use it as it is).
	tc, err := creds.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, tc, alice); err == nil {
		t.Fatal("ServerTLS completed a handshake with a revoked client")
	}
	if err := handshake(t, tc, bob); err != nil {
		t.Fatalf("ServerTLS and bob: %v", err)
	}

	// A list the CA did not sign, an older one and a removed one refuse
	// everyone.
	crl := filepath.Join(dir, RevocationFile)
	good, _ := os.ReadFile(crl)
	older := func() []byte {
		_, d2 := newAuthority(t)
		b, _ := os.ReadFile(filepath.Join(d2, RevocationFile))
		return b
	}()
	first := a.writeRevocationsAt(t, nil, big.NewInt(1))
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"foreign", older, "is not signed by the CA"},
		{"junk", []byte("junk"), `want one PEM block of type "X509 CRL"`},
		{"older", first, "number 1 is older than number 2 read before"},
		{"removed", nil, "was removed after it was read: refusing every client until it is back"},
	} {
		os.Remove(crl)
		if c.data != nil {
			os.WriteFile(crl, c.data, 0o600)
		}
		_, err := Fetch(ctx(t), addr, bob, req)
		if !errors.Is(err, &RefusedError{Code: CodeInternal}) || !strings.HasSuffix(err.Error(), "the owner cannot read its revocation list") {
			t.Errorf("%s list: bob got %v", c.name, err)
		}
		log.waitLog(t, c.want)
		if err := creds.CheckClient(bob.Certificate()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s list: CheckClient %v", c.name, err)
		}
	}
	os.Remove(crl)
	os.WriteFile(crl, good, 0o600)
	if _, err := Fetch(ctx(t), addr, bob, req); err != nil {
		t.Fatalf("bob with the list restored: %v", err)
	}
	// A directory that never had a list revokes nothing.
	plain := mustIssue(t, mustCA(t), "owner", true).WithRevocationFile(filepath.Join(t.TempDir(), RevocationFile))
	if err := plain.CheckClient(bob.Certificate()); err != nil {
		t.Fatalf("no list: %v", err)
	}
}

// writeRevocationsAt returns a revocation list of a's with entries and
// number, signed by a's CA, without writing it.
func (a *Authority) writeRevocationsAt(t *testing.T, entries []x509.RevocationListEntry, number *big.Int) []byte {
	t.Helper()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: number, ThisUpdate: time.Now(),
		NextUpdate: a.ca.cert.NotAfter, RevokedCertificateEntries: entries}, a.ca.cert, a.ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemCRL, Bytes: der})
}

// handshake runs a TLS handshake between a server of tc and a client of
// cli, and a first read (TLS 1.3 reports the server's verdict on the
// client's certificate there); it returns the client's error.
func handshake(t *testing.T, tc *tls.Config, cli *Credentials) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s := tls.Server(c, tc)
		if s.Handshake() == nil {
			s.Write([]byte{1})
		}
		s.Close()
	}()
	cc, err := cli.ClientTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", ln.Addr().String(), cc)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// An expired revocation list refuses every client.
func TestRevocationListExpired(t *testing.T) {
	a, dir := newAuthority(t)
	r := newRevocations(filepath.Join(dir, RevocationFile), a.CA().Certificate())
	cli, _ := a.IssueClient("x", time.Hour)
	if err := r.check(cli.Certificate(), time.Now()); err != nil {
		t.Fatal(err)
	}
	later := a.CA().Certificate().NotAfter.Add(time.Second)
	if err := r.check(cli.Certificate(), later); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("past NextUpdate: %v", err)
	}
}
