package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/frontdoor"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// The C library (libonerma) against real engines over memif: its example
// programs (examples/c) as a reader beside a Go owner and as an owner
// beside a Go reader, driven line by line on their stdin, every byte
// checked; a wrong key, a rekey seen from C, and the engine SIGKILLed
// under a C reader with ops in flight.

var (
	cBinOnce sync.Once
	cBinDir  string
	cBinErr  error
)

// cBin is the path of a C example or of onerma-perf: in ONERMA_BIN (make
// build copies them there), else built here with make -C libonerma
// examples tools.
func cBin(t *testing.T, name string) string {
	t.Helper()
	cBinOnce.Do(func() {
		if dir := os.Getenv("ONERMA_BIN"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				cBinDir = dir
				return
			}
		}
		root, err := frontdoor.Root()
		if err != nil {
			cBinErr = err
			return
		}
		out, err := exec.Command("make", "-s", "-C", filepath.Join(root, "libonerma"), "examples", "tools").CombinedOutput()
		if err != nil {
			cBinErr = fmt.Errorf("make -C libonerma examples tools: %v\n%s", err, out)
			return
		}
		cBinDir = filepath.Join(root, "libonerma", "build")
	})
	if cBinErr != nil {
		t.Fatal(cBinErr)
	}
	if cBinDir != os.Getenv("ONERMA_BIN") {
		if name == "onerma-perf" {
			return filepath.Join(cBinDir, "tools", name)
		}
		return filepath.Join(cBinDir, "examples", name)
	}
	return filepath.Join(cBinDir, name)
}

// cProc is a C example process driven by lines.
type cProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startC(t *testing.T, name string, args ...string) *cProc {
	t.Helper()
	return startCmd(t, exec.Command(cBin(t, name), args...))
}

// startCmd starts cmd (a C program, or podman running one) driven by lines.
func startCmd(t *testing.T, cmd *exec.Cmd) *cProc {
	t.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &cProc{t: t, cmd: cmd, in: in, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// line reads the next line the process prints.
func (c *cProc) line(within time.Duration) string {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("%s exited", filepath.Base(c.cmd.Path))
		}
		return l
	case <-time.After(within):
		c.t.Fatalf("%s printed nothing within %v", filepath.Base(c.cmd.Path), within)
	}
	return ""
}

// ask sends one command and returns the fields of the answer's line.
func (c *cProc) ask(format string, args ...any) []string {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		c.t.Fatal(err)
	}
	return strings.Fields(c.line(15 * time.Second))
}

// identityOf parses "identity ADDR PID".
func identityOf(t *testing.T, f []string) (string, uint32) {
	t.Helper()
	if len(f) != 3 || f[0] != "identity" {
		t.Fatalf("identity line %q", f)
	}
	pid, err := strconv.ParseUint(f[2], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return f[1], uint32(pid)
}

func hexKey(t *testing.T, s string) aesni.Key {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != aesni.KeySize {
		t.Fatalf("key %q: %v", s, err)
	}
	return aesni.Key(b)
}

// cRead asks the C reader for one READ and checks status and bytes.
func cRead(t *testing.T, c *cProc, off uint64, n int, want abi.Status) {
	t.Helper()
	f := c.ask("read %d %d", off, n)
	if len(f) < 4 || f[0] != "read" || f[1] != want.String() {
		t.Fatalf("read %d B at %d: %q, want %s", n, off, f, want)
	}
	if want != abi.StatusOK {
		return
	}
	issue, _ := strconv.ParseUint(f[2], 10, 32)
	total, _ := strconv.ParseUint(f[3], 10, 32)
	if total == 0 || issue > total || len(f) != 5 {
		t.Fatalf("read %d B at %d: delays %q", n, off, f)
	}
	got, _ := hex.DecodeString(f[4])
	if len(got) != n {
		t.Fatalf("read %d B at %d: %d bytes back", n, off, len(got))
	}
	for i, b := range got {
		if b != pattern(off+uint64(i)) {
			t.Fatalf("read %d B at %d: byte %d is %#x, want %#x", n, off, i, b, pattern(off+uint64(i)))
		}
	}
}

// A Go owner and a C reader: READs of 1 B to 4 KB checked byte for byte, a
// batch of 16 under one doorbell, WRITEs read back (and seen by the
// owner), a wrong key refused, and a rekey seen from C.
func TestCReaderGoOwner(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	owner := dial(t, b, "go-owner")
	const size = 256 << 10
	r := ownerRegion(t, owner, size, abi.PermRemoteRead|abi.PermRemoteWrite)
	rd := startC(t, "onerma-c-reader", "-socket", a.Socket, "-remote", ipB.String(), "-region", strconv.Itoa(int(r.ID())))
	addr, pid := identityOf(t, strings.Fields(rd.line(10*time.Second)))
	ia, err := parseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	kdR, kdW := r.DeriveKey(ia, pid, abi.OpRead), r.DeriveKey(ia, pid, abi.OpWrite)
	if f := rd.ask("key %x %x", kdR[:], kdW[:]); len(f) != 2 || f[1] != "ok" {
		t.Fatalf("key: %q", f)
	}
	for k, n := range []int{1, 63, 64, 65, 1000, 1408, 1409, 4095, 4096} {
		cRead(t, rd, uint64(k*7919+13), n, abi.StatusOK)
	}
	if f := rd.ask("burst 16 4096"); len(f) != 2 || f[1] != "16" {
		t.Fatalf("burst: %q", f)
	}

	// WRITEs: read back by the C reader, and seen in the owner's memory.
	for k, n := range []int{1, 64, 1409, 4096} {
		off := uint64(100000 + k*8192)
		data := make([]byte, n)
		rand.Read(data)
		if f := rd.ask("write %d %x", off, data); len(f) != 2 || f[1] != "OK" {
			t.Fatalf("write %d B: %q", n, f)
		}
		if f := strings.Fields(rd.line(15 * time.Second)); len(f) != 3 || f[1] != "OK" || f[2] != "match" {
			t.Fatalf("write %d B read back: %q", n, f)
		}
		if got := r.Bytes()[off : off+uint64(n)]; string(got) != string(data) {
			t.Fatalf("write %d B at %d: the owner's region differs", n, off)
		}
	}

	// A wrong key: REMOTE_AUTHENTICATION_FAILURE, never data.
	var wrong aesni.Key
	rand.Read(wrong[:])
	rd.ask("key %x %x", wrong[:], wrong[:])
	cRead(t, rd, 0, 64, abi.StatusRemoteAuthFailure)
	if f := rd.ask("write 0 00ff"); len(f) != 2 || f[1] != abi.StatusRemoteAuthFailure.String() {
		t.Fatalf("write with a wrong key: %q", f)
	}
	rd.line(15 * time.Second) // its read-back, with the same wrong key

	// A rekey seen from C: the old K_d fails at once, the new one works.
	rd.ask("key %x %x", kdR[:], kdW[:])
	cRead(t, rd, 64, 64, abi.StatusOK)
	var kr aesni.Key
	rand.Read(kr[:])
	if err := owner.Rekey(r, kr); err != nil {
		t.Fatal(err)
	}
	cRead(t, rd, 64, 64, abi.StatusRemoteAuthFailure)
	kdR, kdW = r.DeriveKey(ia, pid, abi.OpRead), r.DeriveKey(ia, pid, abi.OpWrite)
	rd.ask("key %x %x", kdR[:], kdW[:])
	cRead(t, rd, 64, 64, abi.StatusOK)
}

// A C owner and a Go reader (and the C++ example beside the owner): the K_d the C owner derives (onerma_derive_kd)
// authenticates at the Go reader's engine; READs checked, WRITEs read back
// and seen in the C owner's memory, a key of the wrong op type refused, and
// a rekey by the C owner.
func TestCOwnerGoReader(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	own := startC(t, "onerma-c-owner", "-socket", b.Socket, "-size", strconv.Itoa(64<<10))
	f := strings.Fields(own.line(10 * time.Second))
	if len(f) != 4 || f[0] != "region" || f[1] != ipB.String() {
		t.Fatalf("owner: %q", f)
	}
	rid, _ := strconv.ParseUint(f[2], 10, 32)
	// The C++ example dials the same engine beside the C owner.
	out, err := exec.Command(cBin(t, "onerma-cxx-hello"), b.Socket).CombinedOutput()
	if hf := strings.Fields(string(out)); err != nil || len(hf) != 8 || hf[0] != "identity" || hf[1] != ipB.String() || hf[7] != "success" {
		t.Fatalf("onerma-cxx-hello: %v: %s", err, out)
	}
	reader := dial(t, a, "go-reader")
	id := reader.Identity()
	keys := func() (rd, wr, rk aesni.Key) {
		f := own.ask("kd %s %d", id.Addr, id.PID)
		if len(f) != 4 || f[0] != "kd" {
			t.Fatalf("kd: %q", f)
		}
		return hexKey(t, f[1]), hexKey(t, f[2]), hexKey(t, f[3])
	}
	kdR, kdW, _ := keys()
	slots, err := reader.AllocSlots(2)
	if err != nil {
		t.Fatal(err)
	}
	local, err := reader.RegisterRegion(16<<10, abi.PermLocalRead|abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	op := func(typ abi.Op, key aesni.Key, roff, loff uint64, n uint32) abi.Completion {
		t.Helper()
		if err := reader.Submit(&portal.Op{Type: typ, Slot: slots[0], Cookie: roff,
			Remote: ipB, RemoteRegion: abi.RegionID(rid), RemoteOffset: roff, Key: key,
			Local: local, LocalOffset: loff, Length: n}); err != nil {
			t.Fatal(err)
		}
		return waitOne(t, reader, 5*time.Second)
	}
	for k, n := range []uint32{1, 64, 1409, 4096} {
		off := uint64(k*4099 + 7)
		if c := op(abi.OpRead, kdR, off, 0, n); c.Status != abi.StatusOK || c.Length != n {
			t.Fatalf("read %d B: %+v", n, c)
		}
		for i, b := range local.Bytes()[:n] {
			if b != pattern(off+uint64(i)) {
				t.Fatalf("read %d B at %d: byte %d differs", n, off, i)
			}
		}
	}
	// A WRITE, read back by the Go reader and dumped by the C owner.
	data := local.Bytes()[8192 : 8192+3000]
	rand.Read(data)
	if c := op(abi.OpWrite, kdW, 5000, 8192, 3000); c.Status != abi.StatusOK {
		t.Fatalf("write: %+v", c)
	}
	if c := op(abi.OpRead, kdR, 5000, 0, 3000); c.Status != abi.StatusOK || string(local.Bytes()[:3000]) != string(data) {
		t.Fatalf("write read back: %+v", c)
	}
	if f := own.ask("dump 5000 3000"); len(f) != 2 || f[1] != hex.EncodeToString(data) {
		t.Fatalf("the C owner's region after the write: %.80q", f)
	}
	// The WRITE key does not read.
	if c := op(abi.OpRead, kdW, 0, 0, 64); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("read with the WRITE K_d: %+v", c)
	}
	// The C owner rekeys: the old K_d fails, the new one reads.
	if f := own.ask("rekey"); len(f) != 1 || f[0] != "rekeyed" {
		t.Fatalf("rekey: %q", f)
	}
	if c := op(abi.OpRead, kdR, 0, 0, 64); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("read with the old K_d after the rekey: %+v", c)
	}
	kdR, _, _ = keys()
	if c := op(abi.OpRead, kdR, 0, 0, 64); c.Status != abi.StatusOK || local.Bytes()[0] != pattern(0) {
		t.Fatalf("read with the new K_d: %+v", c)
	}
}

// The engine SIGKILLed under a C reader with reads in flight: every op
// completes ENGINE_GONE exactly once, within portal's bound of the
// control connection closing; once the engine is back, onerma_redial
// reads again.
func TestCReaderEngineKilled(t *testing.T) {
	needEngines(t)
	dir := t.TempDir()
	oa, ob := testbed.MemifPair(rmadBin, dir, "e2e-ca", "e2e-cb", ipA.String(), ipB.String())
	oa.Extra = relaxed
	ob.Extra = append([]string{"-resolve-timeout", "10s"}, relaxed...)
	a, b := start(t, oa), start(t, ob)
	owner := dial(t, a, "go-owner")
	r := ownerRegion(t, owner, 64<<10, abi.PermRemoteRead)
	rd := startC(t, "onerma-c-reader", "-socket", b.Socket, "-remote", ipA.String(), "-region", strconv.Itoa(int(r.ID())))
	setKeys := func(f []string) {
		addr, pid := identityOf(t, f)
		ia, err := parseAddr(addr)
		if err != nil {
			t.Fatal(err)
		}
		kd := r.DeriveKey(ia, pid, abi.OpRead)
		rd.ask("key %x %x", kd[:], kd[:])
	}
	setKeys(strings.Fields(rd.line(10 * time.Second)))
	cRead(t, rd, 0, 4096, abi.StatusOK)

	// Reads of an address nobody answers wait for ARP (10 s): in flight
	// when the engine dies.
	const n = 8
	if f := rd.ask("hang 10.98.0.99 %d", n); len(f) != 2 || f[0] != "posted" {
		t.Fatalf("hang: %q", f)
	}
	raw, err := net.Dial("unixpacket", b.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	closed := make(chan int64, 1)
	go func() {
		var buf [64]byte
		raw.Read(buf[:])
		closed <- monoNs()
	}()
	time.Sleep(20 * time.Millisecond) // the reader asleep on its doorbell
	b.Kill()
	seen := map[uint64]bool{}
	var goneAt int64
	for goneAt == 0 {
		f := strings.Fields(rd.line(15 * time.Second))
		switch {
		case len(f) == 4 && f[0] == "cpl":
			cookie, _ := strconv.ParseUint(f[1], 10, 64)
			if f[3] != abi.StatusEngineGone.String() || cookie >= n || seen[cookie] {
				t.Fatalf("completion %q (seen %v)", f, seen)
			}
			seen[cookie] = true
		case len(f) == 2 && f[0] == "gone":
			goneAt, _ = strconv.ParseInt(f[1], 10, 64)
		default:
			t.Fatalf("after the kill: %q", f)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d ENGINE_GONE completions for %d ops in flight", len(seen), n)
	}
	closedAt := <-closed
	t.Logf("connection closed to the C reader's wait returning ENGINE_GONE: %v", time.Duration(goneAt-closedAt))
	// portal's bound (TestEngineKilledAppNotified): 100 ms after the close.
	if d := time.Duration(goneAt - closedAt); d > 100*time.Millisecond {
		t.Errorf("the C reader reported the dead engine %v after its control connection closed", d)
	}

	// The engine restarts on the same socket; the reader redials.
	start(t, ob)
	setKeys(rd.ask("redial"))
	cRead(t, rd, 4096, 4096, abi.StatusOK)
}

func parseAddr(s string) (netip.Addr, error) { return netip.ParseAddr(s) }

func monoNs() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// TestCApplication: the first program of docs/c.md ("Using OneRMA from
// C", the block internal/frontdoor checks is examples/c/hello.c), built as
// the document says, against libonerma installed under a prefix of its
// own and found by pkg-config, and run against an engine: it reads its own
// region through the engine with the K_d it derived.
func TestCApplication(t *testing.T) {
	needEngines(t)
	root, err := frontdoor.Root()
	if err != nil {
		t.Fatal(err)
	}
	prefix, app := t.TempDir(), filepath.Join(t.TempDir(), "hello")
	if err := frontdoor.BuildCApp(root, prefix, app); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(prefix, "lib")
	env := append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	ldd := exec.Command("ldd", app)
	ldd.Env = env
	if out, err := ldd.CombinedOutput(); err != nil || !strings.Contains(string(out), filepath.Join(lib, "libonerma.so.0")) {
		t.Fatalf("the application is not linked against the installed libonerma.so.0: %v\n%s", err, out)
	}
	o := testbed.Loopback(rmadBin, t.TempDir(), "e2e-chello", "10.98.6.2")
	o.Extra = relaxed
	e := start(t, o)
	cmd := exec.Command(app, e.Socket)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !regexp.MustCompile(`^OK [0-9]+ ns "hello from C"\n$`).Match(out) {
		t.Fatalf("docs/c.md's application: %v\n%s", err, out)
	}
	t.Logf("docs/c.md's application printed: %s", strings.TrimSpace(string(out)))
}

// TestCPerf: onerma-perf, rmaperf's tests in C, on a loopback engine:
// each test with every byte verified, its -json row decoding strictly
// into benchrow.Row (the fields rmaperf's has, and no other), no errors,
// cpu_ns_per_op in it and in rmaperf's row of the same test; its flag
// errors name the flag.
func TestCPerf(t *testing.T) {
	needEngines(t)
	o := testbed.Loopback(rmadBin, t.TempDir(), "e2e-cperf", "10.98.6.1")
	o.Extra = relaxed
	e := start(t, o)
	perf := cBin(t, "onerma-perf")
	for _, c := range []struct {
		bin, test, system string
		size, depth       int
	}{
		{perf, "read_bw", "onerma-c", 64, 8}, {perf, "read_bw", "onerma-c", 4096, 16},
		{perf, "write_bw", "onerma-c", 1409, 8}, {perf, "read_lat", "onerma-c", 1, 1},
		{perf, "write_lat", "onerma-c", 4096, 1}, {rmaperfBin, "read_bw", "onerma", 64, 8},
	} {
		args := []string{c.test, "-socket", e.Socket, "-self", "-s", strconv.Itoa(c.size), "-O", strconv.Itoa(c.depth),
			"-D", "300ms", "-warmup", "100ms", "-verify", "-json", "-setup", "e2e"}
		cmd := exec.Command(c.bin, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(c.bin), strings.Join(args, " "), err, out)
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.DisallowUnknownFields()
		var r benchrow.Row
		if err := dec.Decode(&r); err != nil || dec.More() {
			t.Fatalf("%s %s: its row %q: %v", filepath.Base(c.bin), c.test, out, err)
		}
		if r.System != c.system || r.Setup != "e2e" || r.Test != c.test || r.Size != c.size || r.Outstanding != c.depth || r.Cores != 1 ||
			r.Errors != 0 || r.Ops == 0 || r.OpsPerSec <= 0 || r.MBPerSec <= 0 || r.P50us <= 0 || r.P99us == nil || *r.P99us < r.P50us ||
			r.P999us == nil || r.Seconds <= 0 || r.CPUNsPerOp == nil || *r.CPUNsPerOp <= 0 {
			t.Fatalf("%s %s: row %s", filepath.Base(c.bin), c.test, out)
		}
		t.Logf("%s %s %d B O=%d: %.0f ops/s, p50 %.2f us, %.0f CPU ns per op", filepath.Base(c.bin), c.test, c.size, c.depth, r.OpsPerSec, r.P50us, *r.CPUNsPerOp)
	}
	for _, c := range []struct{ args, want string }{
		{"-self -s 5000", "-s 5000: want 1..4096"},
		{"-self -O 0", "-O 0: want 1..65536"},
		{"-server 127.0.0.1:18515", "-server needs -region (the id the server printed)"},
		{"-server 127.0.0.1:18515 -region 0x10001", "-server needs TLS credentials: -creds DIR"},
		{"-creds-fd 3", "-creds-fd: credentials from a launcher's descriptor (keyx.Attach) are Go's"},
		{"-self -class mid", `-class "mid": want low or high`},
		{"-self -D soon", `invalid value "soon" for flag -D`},
		{"-s 64", "need -server or -self"},
	} {
		out, err := exec.Command(perf, append([]string{"read_bw", "-socket", e.Socket}, strings.Fields(c.args)...)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("onerma-perf read_bw %s: %v, want exit status 2 and %q:\n%s", c.args, err, c.want, out)
		}
	}
	if out, err := exec.Command(perf, "read_bw", "-h").CombinedOutput(); err != nil || !strings.Contains(string(out), "examples:\n  onerma-perf read_bw") {
		t.Errorf("onerma-perf read_bw -h: %v\n%s", err, out)
	}
}

// TestCInContainer: a C application built and run where there is no Go:
// in the image of make image's c-sdk stage (Debian, a C compiler,
// pkg-config, libssl-dev, libjansson-dev and libonerma installed by its
// make install PREFIX=/usr/local, no Go), examples/c/reader.c is built with
// cc $(pkg-config --cflags --libs onerma), linked against
// /usr/local/lib/libonerma.so.0, and run as an application mounting
// nothing of the host but its engine's socket directory: READs of a Go
// owner's region on the other engine of a memif wire checked byte for
// byte, a WRITE read back and seen in the owner's memory.
func TestCInContainer(t *testing.T) {
	needImages(t)
	image := os.Getenv("ONERMA_C_IMAGE")
	if why := testbed.ContainerReady(image); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("required container test cannot run in CI: %s", why)
		}
		t.Skip(why)
	}
	a, b := memifPair(t, nil, nil)
	owner := dial(t, b, "go-owner")
	r := ownerRegion(t, owner, 64<<10, abi.PermRemoteRead|abi.PermRemoteWrite)
	// What the image has, then the build as docs/c.md shows it, then the
	// reader on engine A's socket.
	const script = `set -e
if command -v go >/dev/null || [ -e /usr/local/go ]; then echo "go is installed"; exit 1; fi
echo "pkg-config $(pkg-config --cflags --libs onerma)"
cc -o /tmp/reader /usr/local/share/onerma/examples/c/reader.c $(pkg-config --cflags --libs onerma)
echo "linked $(ldd /tmp/reader | awk '/libonerma/ {print $3}')"
exec /tmp/reader "$@"`
	c := &testbed.Container{Image: image, Name: "onerma-e2e-cread", Entrypoint: "sh", Interactive: true,
		Binds: []string{filepath.Dir(a.Socket) + ":/run/onerma"}}
	rd := startCmd(t, c.Command("-c", script, "reader", "-socket", "/run/onerma/"+filepath.Base(a.Socket),
		"-remote", ipB.String(), "-region", strconv.Itoa(int(r.ID()))))
	t.Cleanup(c.Remove)
	pc := strings.TrimSpace(rd.line(60 * time.Second))
	if pc != "pkg-config -I/usr/local/include -L/usr/local/lib -lonerma" {
		t.Fatalf("in the image: %q", pc)
	}
	linked := rd.line(60 * time.Second)
	if linked != "linked /usr/local/lib/libonerma.so.0" {
		t.Fatalf("the reader built in the image: %q", linked)
	}
	t.Logf("in %s, no Go: %s; the reader %s", image, pc, linked)
	addr, pid := identityOf(t, strings.Fields(rd.line(10*time.Second)))
	ia, err := parseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	kdR, kdW := r.DeriveKey(ia, pid, abi.OpRead), r.DeriveKey(ia, pid, abi.OpWrite)
	if f := rd.ask("key %x %x", kdR[:], kdW[:]); len(f) != 2 || f[1] != "ok" {
		t.Fatalf("key: %q", f)
	}
	for k, n := range []int{1, 64, 1409, 4096} {
		cRead(t, rd, uint64(k*4099+5), n, abi.StatusOK)
	}
	data := make([]byte, 3000)
	rand.Read(data)
	if f := rd.ask("write %d %x", 20000, data); len(f) != 2 || f[1] != "OK" {
		t.Fatalf("write: %q", f)
	}
	if f := strings.Fields(rd.line(15 * time.Second)); len(f) != 3 || f[1] != "OK" || f[2] != "match" {
		t.Fatalf("write read back: %q", f)
	}
	if got := r.Bytes()[20000 : 20000+len(data)]; string(got) != string(data) {
		t.Fatal("the owner's region after the C reader's write differs")
	}
}
