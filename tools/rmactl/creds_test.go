package main

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/keyx"
)

// pemBlocks decodes every PEM block of path.
func pemBlocks(t *testing.T, path string) []*pem.Block {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*pem.Block
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			if len(bytes.TrimSpace(rest)) != 0 {
				t.Fatalf("%s: trailing bytes that are not PEM", path)
			}
			return out
		}
		out = append(out, b)
	}
}

func parseCert(t *testing.T, b *pem.Block) *x509.Certificate {
	t.Helper()
	if b.Type != "CERTIFICATE" {
		t.Fatalf("block %q, want CERTIFICATE", b.Type)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCreds runs `rmactl creds` in process and checks what it wrote with
// crypto/x509 alone: modes, chains, usages, names and lifetimes.
func TestCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	var out, errOut bytes.Buffer
	// Flags before and after DIR; -host repeated and comma-separated.
	if err := creds([]string{"-host", "hosta.example", dir, "-host", "10.1.2.3,hostb", "-valid", "48h", "-ca-valid", "720h"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %04o, want 0700", st.Mode().Perm())
	}
	for _, n := range []string{"ca.pem", "ca-key.pem", "server.pem", "client.pem", "crl.pem", "issued"} {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]os.FileMode{false: 0o600, true: 0o700}[st.IsDir()]; st.Mode().Perm() != want {
			t.Fatalf("%s mode %04o, want %04o", n, st.Mode().Perm(), want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 6 {
		t.Fatalf("%d files, want 6", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "issued")); len(ents) != 2 {
		t.Fatalf("issued/ holds %d certificates, want the server's and the client's", len(ents))
	}

	caBlocks := pemBlocks(t, filepath.Join(dir, "ca.pem"))
	if len(caBlocks) != 1 {
		t.Fatalf("ca.pem has %d blocks, want the CA certificate alone", len(caBlocks))
	}
	ca := parseCert(t, caBlocks[0])
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatal("ca.pem is not a CA certificate")
	}
	if d := time.Until(ca.NotAfter); d < 719*time.Hour || d > 720*time.Hour {
		t.Fatalf("CA valid for %v more, asked for 720h", d)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	// bundle checks a file: CA certificate, leaf, the leaf's private key.
	bundle := func(name string) *x509.Certificate {
		b := pemBlocks(t, filepath.Join(dir, name))
		if len(b) != 3 || b[2].Type != "PRIVATE KEY" {
			t.Fatalf("%s: want CA certificate, certificate, private key", name)
		}
		if !parseCert(t, b[0]).Equal(ca) {
			t.Fatalf("%s: its CA certificate is not ca.pem's", name)
		}
		leaf := parseCert(t, b[1])
		key, err := x509.ParsePKCS8PrivateKey(b[2].Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if signer, ok := key.(crypto.Signer); !ok || !leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(signer.Public()) {
			t.Fatalf("%s: the private key is not the certificate's", name)
		}
		return leaf
	}
	srv, cli := bundle("server.pem"), bundle("client.pem")
	for _, c := range []*x509.Certificate{srv, cli} {
		if d := time.Until(c.NotAfter); d < 47*time.Hour || d > 48*time.Hour {
			t.Fatalf("%s valid for %v more, asked for 48h", c.Subject.CommonName, d)
		}
	}
	// The CA's key is kept, and is the CA's.
	kb := pemBlocks(t, filepath.Join(dir, "ca-key.pem"))
	caKey, err := x509.ParsePKCS8PrivateKey(kb[0].Bytes)
	if err != nil || !ca.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(caKey.(crypto.Signer).Public()) {
		t.Fatalf("ca-key.pem is not the CA's key: %v", err)
	}

	// The server certificate chains to the CA for server auth and names
	// loopback plus every -host; it is no client certificate.
	for _, host := range []string{"hosta.example", "hostb", "10.1.2.3", "localhost", "127.0.0.1", "::1"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "hostc"}); err == nil {
		t.Error("server certificate valid for a host not asked for")
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("server certificate usable as a client certificate")
	}
	// The client certificate chains to the CA for client auth only.
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate usable as a server certificate")
	}
	if len(cli.DNSNames)+len(cli.IPAddresses) != 0 {
		t.Errorf("client certificate names %v %v", cli.DNSNames, cli.IPAddresses)
	}

	// It says which file goes where, and prints no key.
	s := out.String()
	for _, want := range []string{"server.pem the server's: keep it on the server's host (rmaperf server -creds DIR); it names localhost, hosta.example, hostb, 127.0.0.1, ::1, 10.1.2.3",
		`client.pem the clients' ("onerma-client"; rmaperf and rmakv servers grant it READ and WRITE unless -grant says otherwise): copy it`,
		"CA key     the CA's private key (ca-key.pem): whoever reads it can issue clients", "crl.pem    the CA's revocation list"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s+errOut.String(), "PRIVATE") || strings.Contains(s, "BEGIN") {
		t.Fatalf("key material in the output:\n%s", s)
	}

	// The files work as a pair through keyx (as rmaperf uses them).
	if _, err := keyx.LoadServer(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := keyx.LoadClient(dir); err != nil {
		t.Fatal(err)
	}

	// A second run refuses to replace them; -force does.
	before, _ := os.ReadFile(filepath.Join(dir, "client.pem"))
	err = creds([]string{dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "ca.pem, server.pem, client.pem, crl.pem, issued, ca-key.pem: file already exists; refusing to replace credentials (-force replaces them)") {
		t.Fatalf("second run: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "client.pem")); !bytes.Equal(before, after) {
		t.Fatal("a refused run changed client.pem")
	}
	if err := creds([]string{"-force", dir}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "client.pem")); bytes.Equal(before, after) {
		t.Fatal("-force did not replace client.pem")
	}
}

func TestCredsRefuses(t *testing.T) {
	open := t.TempDir()
	os.Chmod(open, 0o755)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "creds: no directory given"},
		{[]string{"-host", "0.0.0.0", filepath.Join(t.TempDir(), "c")}, `host 0.0.0.0 is not an address a reader can dial`},
		{[]string{"-host", "bad_name", filepath.Join(t.TempDir(), "c")}, `host "bad_name": label "bad_name": not an IP address, nor a DNS name`},
		{[]string{"-valid", "-1h", filepath.Join(t.TempDir(), "c")}, "creds: -valid -1h0m0s: want a positive duration"},
		{[]string{"-valid", "48h", "-ca-valid", "24h", filepath.Join(t.TempDir(), "c")}, "creds: -ca-valid 24h0m0s: want at least -valid (48h0m0s)"},
		{[]string{filepath.Join(t.TempDir(), "c"), "extra"}, `creds: unexpected "extra" after the directory`},
		{[]string{open}, "directory mode 0755 lets group or others in; want 0700 (chmod 700 " + open + ", or name a new directory)"},
	} {
		var out, errOut bytes.Buffer
		if err := creds(c.args, &out, &errOut); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.args, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%q: output on failure: %s", c.args, out.String())
		}
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Fatal("wrote into a directory it refused")
	}
}

// TestCredsBinary runs the built command: exit status, and nothing but
// the directory on its command line.
func TestCredsBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rmactl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	out, err := exec.Command(bin, "creds", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "wrote "+dir) {
		t.Fatalf("output:\n%s", out)
	}
	// The server certificate names loopback by default: a reader on the
	// same host dials it there.
	srv, err := keyx.LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !srv.Certificate().IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("names %v", srv.Certificate().IPAddresses)
	}
	out, err = exec.Command(bin, "creds", dir).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "rmactl: keyx: write "+dir) {
		t.Fatalf("second run: %v\n%s", err, out)
	}
}

// TestCredsIssueRevoke: the CA kept by `rmactl creds DIR` issues clients
// one at a time (their names, addresses and lifetimes), lists them, and
// revokes them by name or serial; servers loading DIR refuse the revoked.
func TestCredsIssueRevoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := creds(args, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	if out, err := run(dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := run("issue", "-creds", dir, "-name", "alice", "-ip", "10.1.2.20,10.1.2.21", "-valid", "2h")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	aliceDir := filepath.Join(dir, "clients", "alice")
	alice, err := keyx.LoadClient(aliceDir)
	if err != nil {
		t.Fatal(err)
	}
	c := alice.Certificate()
	if c.Subject.CommonName != "alice" || len(c.IPAddresses) != 2 || !c.IPAddresses[1].Equal(net.IPv4(10, 1, 2, 21)) {
		t.Fatalf("alice's certificate: %q %v", c.Subject.CommonName, c.IPAddresses)
	}
	if d := time.Until(c.NotAfter); d > 2*time.Hour || d < 119*time.Minute {
		t.Fatalf("alice valid for %v, asked for 2h", d)
	}
	if st, _ := os.Stat(aliceDir); st.Mode().Perm() != 0o700 {
		t.Fatalf("%s mode %04o", aliceDir, st.Mode().Perm())
	}
	for _, want := range []string{`issued "alice": serial 0x` + c.SerialNumber.Text(16), "engine addresses 10.1.2.20, 10.1.2.21",
		"owners grant it by name: rmaperf server -grant alice=read"} {
		if !strings.Contains(out, want) {
			t.Errorf("issue output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PRIVATE") {
		t.Fatalf("key material in the output:\n%s", out)
	}
	// Again into the same directory: refused; elsewhere: a second
	// certificate for alice.
	if out, err := run("issue", "-creds", dir, "-name", "alice"); err == nil || !strings.Contains(err.Error(), "client.pem: file already exists; refusing to replace credentials (-force replaces it)") {
		t.Fatalf("issue over alice's: %v\n%s", err, out)
	}
	if out, err := run("issue", "-creds", dir, "-name", "alice", "-out", filepath.Join(t.TempDir(), "a2")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := run("issue", "-creds", dir, "-name", "bob"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	bob, err := keyx.LoadClient(filepath.Join(dir, "clients", "bob"))
	if err != nil {
		t.Fatal(err)
	}

	list := func() string {
		t.Helper()
		out, err := run("list", "-creds", dir)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	l := list()
	for _, want := range []string{"SERIAL", "onerma-server  server", "onerma-client  client", "alice          client", "10.1.2.20,10.1.2.21 ", "bob            client"} {
		if !strings.Contains(l, want) {
			t.Errorf("list lacks %q:\n%s", want, l)
		}
	}
	if n := strings.Count(l, "\n"); n != 6 {
		t.Errorf("list of %d lines, want a header and 5:\n%s", n, l)
	}

	// Revoke alice by name (both certificates), onerma-client by serial.
	out, err = run("revoke", "-creds", dir, "-name", "alice")
	if err != nil || strings.Count(out, `revoked "alice"`) != 2 || !strings.Contains(out, "crl.pem updated: servers reading") {
		t.Fatalf("revoke alice: %v\n%s", err, out)
	}
	srv, err := keyx.LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	var re *keyx.RevokedError
	if err := srv.CheckClient(alice.Certificate()); !errors.As(err, &re) {
		t.Fatalf("a server loading DIR takes alice: %v", err)
	}
	if err := srv.CheckClient(bob.Certificate()); err != nil {
		t.Fatalf("bob: %v", err)
	}
	def, err := keyx.LoadClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run("revoke", "-creds", dir, "-serial", fmt.Sprintf("%#x", def.Certificate().SerialNumber)); err != nil || !strings.Contains(out, `revoked "onerma-client"`) {
		t.Fatalf("revoke by serial: %v\n%s", err, out)
	}
	if err := srv.CheckClient(def.Certificate()); !errors.As(err, &re) {
		t.Fatalf("onerma-client after its revocation: %v", err)
	}
	if l := list(); strings.Count(l, "revoked ") != 3 {
		t.Fatalf("list after the revocations:\n%s", l)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"issue", "-name", "x"}, "creds issue: -creds DIR is required"},
		{[]string{"issue", "-creds", dir, "-name", "a/b"}, `creds issue: -name "a/b": want 1 to 64 letters`},
		{[]string{"issue", "-creds", dir, "-name", ""}, `creds issue: -name "": want`},
		{[]string{"issue", "-creds", dir, "-name", "x", "-ip", "hostx"}, `creds issue: -ip "hostx": want an IPv4 address`},
		{[]string{"issue", "-creds", dir, "-name", "x", "-ip", "::1"}, `address ::1 is not a unicast IPv4 address`},
		{[]string{"issue", "-creds", dir, "-name", "x", "-valid", "0s"}, "creds issue: -valid 0s: want a positive duration"},
		{[]string{"revoke", "-creds", dir}, "creds revoke: give -name NAME or -serial N, one of the two"},
		{[]string{"revoke", "-creds", dir, "-name", "bob", "-serial", "5"}, "one of the two"},
		{[]string{"revoke", "-creds", dir, "-serial", "zz"}, `creds revoke: -serial "zz": want a positive number`},
		{[]string{"revoke", "-creds", dir, "-name", "alice"}, `no client certificate issued to "alice" from ` + dir + " is left to revoke"},
		{[]string{"list"}, "creds list: -creds DIR is required"},
	} {
		if out, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v\n%s\nwant %q", c.args, err, out, c.want)
		}
	}
}

// TestCredsCAKeyElsewhere: -ca-key keeps the CA's key outside DIR; issue
// needs it, and an existing key file (the operator's) is used as it is.
func TestCredsCAKeyElsewhere(t *testing.T) {
	keyDir := t.TempDir()
	os.Chmod(keyDir, 0o700)
	key := filepath.Join(keyDir, "ca.key")
	dir := filepath.Join(t.TempDir(), "creds")
	var out, errOut bytes.Buffer
	if err := creds([]string{"-ca-key", key, dir}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); !os.IsNotExist(err) {
		t.Fatalf("a key in DIR too: %v", err)
	}
	if !strings.Contains(out.String(), "the CA's private key ("+key+")") {
		t.Fatalf("output:\n%s", out.String())
	}
	if err := creds([]string{"issue", "-creds", dir, "-name", "x"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "holds no kept CA; -ca-key names a key kept elsewhere") {
		t.Fatalf("issue without -ca-key: %v", err)
	}
	if err := creds([]string{"issue", "-creds", dir, "-name", "x", "-ca-key", key}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	// A second directory from the same key: the same CA key, another
	// certificate.
	before, _ := os.ReadFile(key)
	dir2 := filepath.Join(t.TempDir(), "creds")
	if err := creds([]string{"-ca-key", key, dir2}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(key); !bytes.Equal(before, after) {
		t.Fatal("an existing -ca-key was rewritten")
	}
	c1, _ := keyx.LoadClient(dir)
	c2, _ := keyx.LoadClient(dir2)
	if !c1.CA().PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(c2.CA().PublicKey) {
		t.Fatal("the two CAs have different keys")
	}
}
