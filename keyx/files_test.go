package keyx

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// writeCreds makes a CA and writes a server (naming hosts) and a client
// credential into a new directory under t's temporary one.
func writeCreds(t *testing.T, hosts ...string) string {
	t.Helper()
	ca := mustCA(t)
	srv, err := ca.IssueServer("owner", hosts...)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	if err := WriteDir(dir, srv, mustIssue(t, ca, "reader", false), false); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestWriteDirAndLoad(t *testing.T) {
	dir := writeCreds(t, "hosta.example", "10.9.8.7")
	if m := mode(t, dir); m != 0o700 {
		t.Fatalf("directory mode %04o, want 0700", m)
	}
	files := map[string][]byte{}
	for _, n := range []string{CAFile, ServerFile, ClientFile} {
		p := filepath.Join(dir, n)
		if m := mode(t, p); m != 0o600 {
			t.Fatalf("%s mode %04o, want 0600", n, m)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[n] = b
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("%d entries in the directory, want 3 (no temporary file left)", len(ents))
	}
	if bytes.Count(files[CAFile], []byte("BEGIN")) != 1 || bytes.Contains(files[CAFile], []byte("PRIVATE")) {
		t.Fatalf("ca.pem:\n%s", files[CAFile])
	}
	srv, err := LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := LoadClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Name() != "owner" || cli.Name() != "reader" || !srv.CA().Equal(cli.CA()) {
		t.Fatalf("loaded %v and %v", srv, cli)
	}
	if err := srv.Certificate().VerifyHostname("hosta.example"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Certificate().VerifyHostname("10.9.8.7"); err != nil {
		t.Fatal(err)
	}
	// Formatting credentials shows no key.
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(f, srv); s != `keyx credentials "owner" from CA "test CA"` {
			t.Fatalf("%s formats as %q", f, s)
		}
	}

	// The loaded pair exchanges a key, the reader dialing by name.
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead, kr: aesni.Key{7}}
	addr, _, _ := startServer(t, srv, reg)
	_, port, _ := net.SplitHostPort(addr)
	g, err := Fetch(ctx(t), net.JoinHostPort("localhost", port), cli, Request{Initiator: reader, PID: 9, Region: reg.id, Op: abi.OpRead})
	if err != nil {
		t.Fatal(err)
	}
	if g.Key != aesni.DeriveKey(reg.kr, reader.As4(), 9, uint8(abi.OpRead)) {
		t.Fatal("wrong K_d")
	}

	// Existing files are kept unless replace is set.
	ca := mustCA(t)
	srv2, cli2 := mustIssue(t, ca, "owner2", true), mustIssue(t, ca, "reader2", false)
	err = WriteDir(dir, srv2, cli2, false)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "ca.pem, server.pem, client.pem: file already exists; refusing to replace credentials") {
		t.Fatalf("second write: %v", err)
	}
	for n, b := range files {
		if got, _ := os.ReadFile(filepath.Join(dir, n)); !bytes.Equal(got, b) {
			t.Fatalf("%s changed by a refused write", n)
		}
	}
	// One file left is enough to refuse.
	os.Remove(filepath.Join(dir, CAFile))
	os.Remove(filepath.Join(dir, ClientFile))
	if err := WriteDir(dir, srv2, cli2, false); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), ": server.pem: file already exists") {
		t.Fatalf("write over server.pem: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a refused write wrote ca.pem")
	}
	if err := WriteDir(dir, srv2, cli2, true); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadClient(dir); err != nil || c.Name() != "reader2" {
		t.Fatalf("after replace: %v %v", c, err)
	}
	if m := mode(t, filepath.Join(dir, ServerFile)); m != 0o600 {
		t.Fatalf("replaced server.pem mode %04o", m)
	}

	// Mismatched pairs and roles are refused before anything is written.
	other := filepath.Join(t.TempDir(), "other")
	for _, c := range []struct {
		srv, cli *Credentials
		want     string
	}{
		{srv2, mustIssue(t, mustCA(t), "x", false), `server credentials are from CA "test CA", client credentials from another`},
		{cli2, cli2, `server credentials: certificate "reader2" is not a server certificate`},
		{srv2, srv2, `client credentials: certificate "owner2" is not a client certificate`},
	} {
		if err := WriteDir(other, c.srv, c.cli, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	if _, err := os.Stat(other); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a refused write created its directory")
	}
}

func TestWriteDirRefusesOpenDirectory(t *testing.T) {
	ca := mustCA(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	err := WriteDir(dir, mustIssue(t, ca, "s", true), mustIssue(t, ca, "c", false), false)
	if err == nil || !strings.Contains(err.Error(), "directory mode 0755 lets group or others in; want 0700") {
		t.Fatalf("got %v", err)
	}
	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o600)
	if err := WriteDir(f, mustIssue(t, ca, "s", true), mustIssue(t, ca, "c", false), false); err == nil || !strings.HasSuffix(err.Error(), "not a directory") {
		t.Fatalf("got %v", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, dir string) // breaks a freshly written dir
		load  func(string) (*Credentials, error)
		want  string
	}{
		{"client file readable by others", func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, ClientFile), 0o644)
		}, LoadClient, "client.pem: mode 0644 lets group or others read or write it; want 0600 (chmod 600 "},
		{"server file writable by group", func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, ServerFile), 0o620)
		}, LoadServer, "server.pem: mode 0620 lets group or others read or write it"},
		{"directory writable by others", func(t *testing.T, dir string) {
			os.Chmod(dir, 0o777)
		}, LoadClient, "is writable by group or others (mode 0777): they could replace the credentials; want 0700"},
		{"server file as client", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, ServerFile), filepath.Join(dir, ClientFile))
		}, LoadClient, `client.pem: certificate "owner" is not a client certificate (no client-auth usage`},
		{"client file as server", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, ClientFile), filepath.Join(dir, ServerFile))
		}, LoadServer, `server.pem: certificate "reader" is not a server certificate (no server-auth usage`},
		{"missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ClientFile))
		}, LoadClient, "client.pem: no such file or directory"},
		{"directory, not a file", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ClientFile))
			os.Mkdir(filepath.Join(dir, ClientFile), 0o700)
		}, LoadClient, "client.pem: not a regular file"},
		{"truncated", func(t *testing.T, dir string) {
			p := filepath.Join(dir, ClientFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o600)
		}, LoadClient, "client.pem: block 2 is not PEM"},
		{"another user's", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			os.Chown(filepath.Join(dir, ClientFile), 65534, 65534)
		}, LoadClient, "client.pem: owned by uid 65534, not by this user (uid 0) or root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeCreds(t)
			c.setup(t, dir)
			if _, err := c.load(dir); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestLoadExpired(t *testing.T) {
	ca, err := NewCA("short", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "c")
	if err := WriteDir(dir, mustIssue(t, ca, "s", true), mustIssue(t, ca, "c", false), false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := LoadClient(dir); err == nil || !strings.Contains(err.Error(), `client.pem: CA certificate "short" expired at `) {
		t.Fatalf("got %v", err)
	}
	if _, err := NewCA("x", -time.Second); err == nil || err.Error() != "keyx: CA: lifetime -1s is negative" {
		t.Fatalf("negative lifetime: %v", err)
	}
}

// Two directories from two `rmactl creds` runs do not mix: the reader
// refuses the owner, and the owner the reader, each saying why.
func TestLoadedFromAnotherCA(t *testing.T) {
	a, b := writeCreds(t), writeCreds(t)
	srvA, _ := LoadServer(a)
	cliB, _ := LoadClient(b)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead}
	addr, log, _ := startServer(t, srvA, reg)
	_, err := Fetch(ctx(t), addr, cliB, Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRead})
	if err == nil || !strings.Contains(err.Error(), `the server's certificate is not from the CA of these credentials ("test CA"): the owner's and the readers' credentials must come from one CA: tls: failed to verify certificate: x509: certificate signed by unknown authority`) {
		t.Fatalf("got %v", err)
	}
	log.waitLog(t, "refused: handshake")
	if strings.Contains(log.String(), "granted") {
		t.Fatal(log.String())
	}
}

func TestServerNames(t *testing.T) {
	ca := mustCA(t)
	reg := &fakeRegion{id: 0x10001, size: 4096, perm: abi.PermRemoteRead}
	req := Request{Initiator: reader, PID: 7, Region: reg.id, Op: abi.OpRead}
	cli := mustIssue(t, ca, "reader", false)
	// 127.0.0.2 is loopback too, but only a certificate naming it is
	// accepted there.
	for _, hosts := range [][]string{{"127.0.0.2"}, nil} {
		srv, err := ca.IssueServer("owner", hosts...)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewServer(Config{Credentials: srv, Owner: owner, Permits: testPermits})
		if err != nil {
			t.Fatal(err)
		}
		s.Add(reg)
		ap, err := s.Start("127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Fetch(ctx(t), ap.String(), cli, req)
		s.Close()
		switch {
		case hosts != nil && err != nil:
			t.Fatalf("certificate naming 127.0.0.2: %v", err)
		case hosts == nil && (err == nil || !strings.Contains(err.Error(), "the server's certificate does not name 127.0.0.2 (it names localhost, 127.0.0.1, ::1): dial a name it holds, or issue the server's credentials for 127.0.0.2")):
			t.Fatalf("certificate without 127.0.0.2: %v", err)
		}
	}
	for _, c := range []struct{ host, want string }{
		{"0.0.0.0", "host 0.0.0.0 is not an address a reader can dial"},
		{"a b", `host "a b": label "a b": not an IP address, nor a DNS name`},
		{"*.example", `label "*": not an IP address, nor a DNS name`},
		{"-x.example", `label "-x": not an IP address`},
		{"x..example", `label "": not an IP address`},
		{"", `host "": not an IP address, nor a DNS name`},
	} {
		if _, err := ca.IssueServer("s", c.host); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("host %q: got %v, want %q", c.host, err, c.want)
		}
	}
	if _, err := ca.IssueServer("s", make([]string, 17)...); err == nil || !strings.Contains(err.Error(), "17 hosts, want at most 16") {
		t.Fatalf("too many hosts: %v", err)
	}
}
