package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/internal/benchrow"
)

// TestCKeyxRmaperfServer: a C reader fetches its key from `rmaperf server`
// over keyx (libonerma's client against package keyx's Server), run as a
// person runs the two sides: `rmactl creds -host HOST DIR`, `rmaperf
// server -creds DIR` on engine A, `onerma-perf -server HOST:PORT -region
// ID -creds DIR2` on engine B with a copy of client.pem alone. Its READs
// are verified byte for byte and its WRITEs complete OK with the K_d the
// server granted. Then every refusal reaches C with its reason: a client
// granted READ only asking for WRITE (not granted), one issued for another
// engine's address (address not granted), a region the server does not
// serve (unknown region), a revoked client (certificate revoked), a
// client.pem of another CA (the server's certificate is not from its CA),
// a client.pem others may read, and server credentials used as a client's.
// Each refused run exits 1 naming the library's error and, for an owner's
// refusal, the owner's own words, and prints no key material.
func TestCKeyxRmaperfServer(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	for _, bin := range []string{rmactlBin, rmaperfBin} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v (make build)", err)
		}
	}
	perf := cBin(t, "onerma-perf")
	rmactl := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(rmactlBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("rmactl %q: %v\n%s", args, err, out)
		}
	}
	const host = "127.0.0.2"
	dir := filepath.Join(t.TempDir(), "creds")
	rmactl("creds", "-host", host, dir)
	roDir, elsewhereDir := filepath.Join(t.TempDir(), "ro"), filepath.Join(t.TempDir(), "elsewhere")
	rmactl("creds", "issue", "-creds", dir, "-name", "ro", "-ip", ipB.String(), "-out", roDir)
	rmactl("creds", "issue", "-creds", dir, "-name", "elsewhere", "-ip", "10.98.0.9", "-out", elsewhereDir)

	srv := exec.Command(rmaperfBin, "server", "-socket", a.Socket, "-creds", dir, "-listen", host+":0", "-v",
		"-grant", "onerma-client=read+write@any", "-grant", "ro=read", "-grant", "elsewhere=read")
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
	// "rmaperf server: region 0x10001 (1048576 bytes) on 10.98.0.1, K_d served over TLS 1.3 on 127.0.0.2:PORT"
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		for sc.Scan() {
		}
	}()
	var region, kx string
	select {
	case l := <-first:
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "region" || !strings.Contains(l, "on "+ipA.String()+",") {
			t.Fatalf("rmaperf server said %q\n%s", l, srvErr.String())
		}
		region, kx = f[3], f[len(f)-1]
	case <-time.After(30 * time.Second):
		t.Fatalf("rmaperf server not ready after 30 s\n%s", srvErr.String())
	}

	perfRun := func(test, creds string, extra ...string) (string, error) {
		args := append([]string{test, "-socket", b.Socket, "-server", kx, "-region", region, "-creds", creds,
			"-D", "300ms", "-warmup", "100ms", "-json", "-setup", "e2e"}, extra...)
		out, err := exec.Command(perf, args...).CombinedOutput()
		if strings.Contains(string(out), "PRIVATE KEY") {
			t.Fatalf("onerma-perf printed key material:\n%s", out)
		}
		return string(out), err
	}
	row := func(out string, err error, test string) benchrow.Row {
		t.Helper()
		if err != nil {
			t.Fatalf("onerma-perf %s: %v\n%s\nserver:\n%s", test, err, out, srvErr.String())
		}
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		var r benchrow.Row
		if err := dec.Decode(&r); err != nil || dec.More() {
			t.Fatalf("onerma-perf %s: its row %q: %v", test, out, err)
		}
		if r.System != "onerma-c" || r.Test != test || r.Ops == 0 || r.Errors != 0 {
			t.Fatalf("onerma-perf %s over keyx: %d ops, %d errors (%s)", test, r.Ops, r.Errors, r.Note)
		}
		return r
	}
	refused := func(out string, err error, want ...string) {
		t.Helper()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("%v, want exit status 1:\n%s\nserver:\n%s", err, out, srvErr.String())
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("the refusal lacks %q:\n%s\nserver:\n%s", w, out, srvErr.String())
			}
		}
	}

	// The default client: READs verified.
	client := credsClientCopy(t, dir)
	out, err := perfRun("read_bw", client, "-s", "4096", "-O", "8", "-verify")
	r := row(out, err, "read_bw")
	waitPerfLog(t, &srvErr, `(certificate "onerma-client"): granted READ K_d for region `+region)
	t.Logf("onerma-perf read_bw 4 KB across engines with its K_d from rmaperf server over keyx: %.0f ops/s, every byte verified", r.OpsPerSec)

	// A client granted READ only: reads, and is refused WRITE.
	out, err = perfRun("read_lat", roDir, "-s", "64", "-verify")
	row(out, err, "read_lat")
	out, err = perfRun("write_bw", roDir, "-s", "64")
	refused(out, err, "key exchange with "+kx+": the owner refused: not granted",
		`certificate "ro" is not granted WRITE on region `+region)
	// Its certificate names another engine's address.
	out, err = perfRun("read_bw", elsewhereDir, "-s", "64")
	refused(out, err, "the owner refused: address not granted",
		`initiator `+ipB.String()+` is not an address of certificate "elsewhere" (it names 10.98.0.9)`)
	// A region the server does not serve.
	raw, err := exec.Command(perf, "read_bw", "-socket", b.Socket, "-server", kx, "-region", "0x7777", "-creds", client).CombinedOutput()
	refused(string(raw), err, "the owner refused: unknown region", "region 0x7777 is not served here")
	// Revoked: refused at its next request.
	rmactl("creds", "revoke", "-creds", dir, "-name", "ro")
	out, err = perfRun("read_bw", roDir, "-s", "64")
	refused(out, err, "the owner refused: certificate revoked", `certificate "ro" (serial 0x`, "was revoked by the CA at")
	out, err = perfRun("read_bw", client, "-s", "64", "-verify")
	row(out, err, "read_bw")

	// WRITEs, last: they change the bytes the reads above verified.
	out, err = perfRun("write_lat", client, "-s", "1409")
	row(out, err, "write_lat")
	waitPerfLog(t, &srvErr, `(certificate "onerma-client"): granted WRITE K_d for region `+region)

	// This process's credentials, refused before anything is sent.
	otherDir := filepath.Join(t.TempDir(), "other")
	rmactl("creds", otherDir)
	out, err = perfRun("read_bw", credsClientCopy(t, otherDir), "-s", "64")
	refused(out, err, "the owner's certificate failed verification",
		"the server's certificate is not from the CA of these credentials")
	waitPerfLog(t, &srvErr, "refused: handshake")
	loose := credsClientCopy(t, dir)
	os.Chmod(filepath.Join(loose, "client.pem"), 0o644)
	out, err = perfRun("read_bw", loose, "-s", "64")
	refused(out, err, "keyx credentials file unsafe", "client.pem: mode 0644 lets group or others read or write it; want 0600")
	role := filepath.Join(t.TempDir(), "role")
	os.Mkdir(role, 0o700)
	data, err := os.ReadFile(filepath.Join(dir, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(role, "client.pem"), data, 0o600)
	out, err = perfRun("read_bw", role, "-s", "64")
	refused(out, err, "keyx credentials of the wrong role", "is not a client certificate")

	if n := strings.Count(srvErr.String(), "granted READ K_d") + strings.Count(srvErr.String(), "granted WRITE K_d"); n != 4 {
		t.Fatalf("%d grants, want 4:\n%s", n, srvErr.String())
	}
	if bytes.Contains([]byte(srvErr.String()), []byte("PRIVATE KEY")) {
		t.Fatalf("key material in the server's output:\n%s", srvErr.String())
	}
}
