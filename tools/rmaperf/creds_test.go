package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onerma/onerma/keyx"
)

// credsDir writes a server and a client credential as `rmactl creds`
// does.
func credsDir(t *testing.T) string {
	t.Helper()
	ca, err := keyx.NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer("onerma-server")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.IssueClient("onerma-client")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	if err := keyx.WriteDir(dir, srv, cli, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadCreds(t *testing.T) {
	dir := credsDir(t)
	if c, err := loadCreds(dir, -1, true); err != nil || c.Name() != "onerma-server" {
		t.Fatalf("server: %v %v", c, err)
	}
	if c, err := loadCreds(dir, -1, false); err != nil || c.Name() != "onerma-client" {
		t.Fatalf("client: %v %v", c, err)
	}
	for _, c := range []struct {
		dir    string
		fd     int
		server bool
		want   string
	}{
		{dir, 3, false, "-creds and -creds-fd: give one"},
		{"", -1, true, "the key service needs TLS credentials: -creds DIR (written by rmactl creds DIR) or -creds-fd FD"},
		{"", -1, false, "-server needs TLS credentials: -creds DIR (DIR/client.pem, copied from the DIR rmactl creds wrote) or -creds-fd FD"},
		{t.TempDir(), -1, false, "client.pem: no such file or directory"},
		{"", 1, false, "keyx: credentials fd 1: want an inherited descriptor (3 or more)"},
	} {
		if _, err := loadCreds(c.dir, c.fd, c.server); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v", c, err)
		}
	}
}

// TestClientRefusesCredsBeforeEngine runs rmaperf clients whose
// credentials are unusable: each exits 1 with the reason, before it asks
// an engine for anything (there is none at -socket).
func TestClientRefusesCredsBeforeEngine(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rmaperf")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	open := credsDir(t)
	os.Chmod(filepath.Join(open, keyx.ClientFile), 0o644)
	serverOnly := credsDir(t)
	os.Rename(filepath.Join(serverOnly, keyx.ServerFile), filepath.Join(serverOnly, keyx.ClientFile))
	noCtl := filepath.Join(t.TempDir(), "none.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"read_bw", "-socket", noCtl, "-server", "127.0.0.1:1", "-region", "0x10001", "-creds", open},
			"client.pem: mode 0644 lets group or others read or write it; want 0600"},
		{[]string{"read_lat", "-socket", noCtl, "-server", "127.0.0.1:1", "-region", "0x10001", "-creds", serverOnly},
			`client.pem: certificate "onerma-server" is not a client certificate`},
		{[]string{"server", "-socket", noCtl, "-creds", serverOnly},
			"keyx: credentials: open " + filepath.Join(serverOnly, "server.pem") + ": no such file or directory"},
		{[]string{"server", "-socket", noCtl}, "the key service needs TLS credentials"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%q: %v\n%s\nwant %q", c.args, err, out, c.want)
		}
		if strings.Contains(string(out), "portal") || strings.Contains(string(out), noCtl) {
			t.Errorf("%q: reached the engine:\n%s", c.args, out)
		}
	}
}
