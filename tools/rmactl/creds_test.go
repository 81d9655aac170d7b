package main

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
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
// crypto/x509 alone: modes, chains, usages and names.
func TestCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	var out, errOut bytes.Buffer
	// Flags before and after DIR; -host repeated and comma-separated.
	if err := creds([]string{"-host", "hosta.example", dir, "-host", "10.1.2.3,hostb", "-valid", "48h"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %04o, want 0700", st.Mode().Perm())
	}
	for _, n := range []string{"ca.pem", "server.pem", "client.pem"} {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %04o, want 0600", n, st.Mode().Perm())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("%d files, want 3", len(ents))
	}

	caBlocks := pemBlocks(t, filepath.Join(dir, "ca.pem"))
	if len(caBlocks) != 1 {
		t.Fatalf("ca.pem has %d blocks, want the CA certificate alone", len(caBlocks))
	}
	ca := parseCert(t, caBlocks[0])
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatal("ca.pem is not a CA certificate")
	}
	if d := time.Until(ca.NotAfter); d < 47*time.Hour || d > 48*time.Hour {
		t.Fatalf("CA valid for %v more, asked for 48h", d)
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
		"client.pem the clients': copy it", "its private key was never stored"} {
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
	if err == nil || !strings.Contains(err.Error(), "ca.pem, server.pem, client.pem: file already exists; refusing to replace credentials (-force replaces them)") {
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
