package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/internal/benchrow"
)

// TestRmaperfCredsDir runs rmaperf's two sides as a person runs them on
// two hosts, here on two engines of one machine over memif: `rmactl creds
// -host HOST DIR` on the server's side; `rmaperf server -creds DIR
// -listen HOST:0` on engine A; a second directory holding a copy of
// client.pem alone (what is carried to the client's host); `rmaperf
// read_bw -server HOST:PORT -creds DIR2 -verify` on engine B, which reads
// and checks every byte. HOST is 127.0.0.2, a loopback address only the
// certificate's -host names. Then clients with a client.pem of another
// `rmactl creds` run, or one other users may read, are refused with the
// reason and get no K_d.
func TestRmaperfCredsDir(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	for _, bin := range []string{rmactlBin, rmaperfBin} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v (make build)", err)
		}
	}
	const host = "127.0.0.2"
	srvDir := filepath.Join(t.TempDir(), "creds")
	if out, err := exec.Command(rmactlBin, "creds", "-host", host, srvDir).CombinedOutput(); err != nil {
		t.Fatalf("rmactl creds: %v\n%s", err, out)
	}
	cliDir := credsClientCopy(t, srvDir)

	srv := exec.Command(rmaperfBin, "server", "-socket", a.Socket, "-creds", srvDir, "-listen", host+":0", "-v")
	var srvErr perfLog
	srv.Stderr = &srvErr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		if err := srv.Wait(); err != nil {
			t.Errorf("rmaperf server: %v\n%s", err, srvErr.String())
		}
	})
	// "rmaperf server: region 0x10001 (1048576 bytes) on 10.98.0.1, K_d served over TLS 1.3 on 127.0.0.2:PORT"
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var region, kx string
	select {
	case l := <-lines:
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "region" || !strings.Contains(l, "on "+ipA.String()+",") {
			t.Fatalf("rmaperf server said %q\n%s", l, srvErr.String())
		}
		region, kx = f[3], f[len(f)-1]
	case <-time.After(30 * time.Second):
		t.Fatalf("rmaperf server not ready after 30 s\n%s", srvErr.String())
	}
	if !strings.HasPrefix(kx, host+":") {
		t.Fatalf("key service on %s, asked for %s", kx, host)
	}
	if l := <-lines; !strings.Contains(l, "HOST one of the certificate's names: localhost, 127.0.0.1, ::1, 127.0.0.2") {
		t.Fatalf("second line %q", l)
	}

	client := func(dir string) (*exec.Cmd, []byte, error) {
		c := exec.Command(rmaperfBin, "read_bw", "-socket", b.Socket, "-server", kx, "-region", region, "-creds", dir,
			"-s", "4096", "-O", "8", "-D", "500ms", "-warmup", "100ms", "-verify", "-json")
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		return c, append(out, stderr.Bytes()...), err
	}
	_, out, err := client(cliDir)
	if err != nil {
		t.Fatalf("rmaperf read_bw: %v\n%s\nserver:\n%s", err, out, srvErr.String())
	}
	var row benchrow.Row
	if err := json.Unmarshal(bytes.SplitN(out, []byte("\n"), 2)[0], &row); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if row.Ops == 0 || row.Errors != 0 {
		t.Fatalf("read_bw over the key exchange: %d verified reads, %d errors (%s)", row.Ops, row.Errors, row.Note)
	}
	t.Logf("read_bw 4 KB across engines with K_d from rmaperf server -creds: %.0f ops/s, every byte verified", row.OpsPerSec)
	waitPerfLog(t, &srvErr, `(certificate "onerma-client"): granted READ K_d for region `+region)

	// A client.pem of another rmactl creds run: the client refuses the
	// server's certificate (not from its CA).
	otherDir := filepath.Join(t.TempDir(), "creds")
	if out, err := exec.Command(rmactlBin, "creds", otherDir).CombinedOutput(); err != nil {
		t.Fatalf("rmactl creds: %v\n%s", err, out)
	}
	_, out, err = client(credsClientCopy(t, otherDir))
	if err == nil || !strings.Contains(string(out), "the server's certificate is not from the CA of these credentials") {
		t.Fatalf("client of another CA: %v\n%s", err, out)
	}
	// The server saw a handshake fail, and granted nothing more.
	waitPerfLog(t, &srvErr, "refused: handshake")
	if n := strings.Count(srvErr.String(), "granted"); n != 1 {
		t.Fatalf("%d grants, want 1:\n%s", n, srvErr.String())
	}

	// client.pem readable by others: refused before anything is sent.
	os.Chmod(filepath.Join(cliDir, "client.pem"), 0o644)
	_, out, err = client(cliDir)
	if err == nil || !strings.Contains(string(out), "client.pem: mode 0644 lets group or others read or write it; want 0600") {
		t.Fatalf("client.pem mode 0644: %v\n%s", err, out)
	}
	for _, s := range []string{srvErr.String(), string(out)} {
		if strings.Contains(s, "PRIVATE KEY") {
			t.Fatalf("key material in output:\n%s", s)
		}
	}
}

// credsClientCopy makes what a person carries to a client host: a new
// directory (mode 0700) with a copy of dir's client.pem (mode 0600) alone.
func credsClientCopy(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "client.pem"))
	if err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "client-host")
	if err := os.Mkdir(to, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, "client.pem"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// waitPerfLog waits until the log holds want.
func waitPerfLog(t *testing.T, log *perfLog, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(log.String(), want) {
			return
		}
	}
	t.Fatalf("log lacks %q:\n%s", want, log.String())
}

// perfLog is an io.Writer a child process's output goes to while the
// test reads it.
type perfLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *perfLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *perfLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRmakvGrantsCredsDir runs rmakv's two sides with clients of one CA
// kept by `rmactl creds DIR`, the server on engine A and the clients on
// engine B: the default client (granted READ and WRITE, as `rmakv server`
// grants it with no -grant) updates; a client issued read-only (`rmactl
// creds issue -name ro -ip B`, `-grant ro=read`) reads and is refused
// SETs; a client issued for another engine's address is refused the K_d
// of B's; once `rmactl creds revoke -name ro` has run, ro is refused.
func TestRmakvGrantsCredsDir(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	for _, bin := range []string{rmactlBin, rmakvBin} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v (make build)", err)
		}
	}
	dir := filepath.Join(t.TempDir(), "creds")
	rmactl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(rmactlBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rmactl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	rmactl("creds", dir)
	roDir, elsewhereDir := filepath.Join(t.TempDir(), "ro"), filepath.Join(t.TempDir(), "elsewhere")
	rmactl("creds", "issue", "-creds", dir, "-name", "ro", "-ip", ipB.String(), "-out", roDir)
	rmactl("creds", "issue", "-creds", dir, "-name", "elsewhere", "-ip", "10.98.0.9", "-out", elsewhereDir)

	srv := exec.Command(rmakvBin, "server", "-socket", a.Socket, "-creds", dir, "-listen", "127.0.0.1:0",
		"-grant", "onerma-client=read+write@any", "-grant", "ro=read", "-grant", "elsewhere=read",
		"-buckets", "1024", "-slab", "4194304")
	var srvErr perfLog
	srv.Stderr = &srvErr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		for sc.Scan() {
		}
	}()
	// "rmakv: serving rpc ADDR keyx ADDR engine ADDR"
	var rpc string
	select {
	case l := <-first:
		f := strings.Fields(l)
		if len(f) < 4 || f[1] != "serving" {
			t.Fatalf("rmakv server said %q\n%s", l, srvErr.String())
		}
		rpc = f[3]
	case <-time.After(30 * time.Second):
		t.Fatalf("rmakv server not serving after 30 s\n%s", srvErr.String())
	}
	waitPerfLog(t, &srvErr, "permits (-grant): onerma-client=read+write@any ro=read elsewhere=read")

	kv := func(creds string, args ...string) (string, error) {
		c := exec.Command(rmakvBin, append([]string{args[0], "-socket", b.Socket, "-creds", creds, "-servers", rpc}, args[1:]...)...)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	fails := func(out string, err error, want string) {
		t.Helper()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, want) {
			t.Fatalf("%v\n%s\nwant %q\nserver:\n%s", err, out, want, srvErr.String())
		}
	}
	if out, err := kv(credsClientCopy(t, dir), "set", "k", "v1"); err != nil {
		t.Fatalf("default client's SET: %v\n%s\nserver:\n%s", err, out, srvErr.String())
	}
	if out, err := kv(roDir, "get", "k"); err != nil || out != "v1\n" {
		t.Fatalf("read-only GET: %v %q\nserver:\n%s", err, out, srvErr.String())
	}
	out, err := kv(roDir, "set", "k", "v2")
	fails(out, err, `certificate "ro" may not update (SET): it is granted READ only`)
	out, err = kv(elsewhereDir, "get", "k")
	fails(out, err, `keyx: owner refused: address not granted: initiator `+ipB.String()+` is not an address of certificate "elsewhere" (it names 10.98.0.9)`)
	if out, err := kv(roDir, "get", "k"); err != nil || out != "v1\n" {
		t.Fatalf("GET after the refused SET: %v %q", err, out)
	}

	rmactl("creds", "revoke", "-creds", dir, "-name", "ro")
	out, err = kv(roDir, "get", "k")
	fails(out, err, `certificate "ro" (serial 0x`)
	if !strings.Contains(out, "was revoked by the CA at") {
		t.Fatalf("revoked GET: %s", out)
	}
	if out, err := kv(credsClientCopy(t, dir), "get", "k"); err != nil || out != "v1\n" {
		t.Fatalf("default client after the revocation: %v %q", err, out)
	}
	if strings.Contains(srvErr.String(), "PRIVATE KEY") {
		t.Fatalf("key material in the server's output:\n%s", srvErr.String())
	}
}
