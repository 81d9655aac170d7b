package e2e

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/readall"
	"github.com/onerma/onerma/internal/testbed"
)

// needImages skips outside CI, and fails in CI, where engines cannot run
// or the container images are not there: make test builds them (make
// image) and passes their names and podman's configuration in the
// environment (scripts/image.sh --env). It returns the engine's image and
// the applications' (the e2e target: the same plus e2e/ctrapp).
func needImages(t *testing.T) (engine, app string) {
	t.Helper()
	needEngines(t)
	engine, app = os.Getenv("ONERMA_IMAGE"), os.Getenv("ONERMA_E2E_IMAGE")
	if why := testbed.ContainerReady(engine, app); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("required container test cannot run in CI: %s", why)
		}
		t.Skip(why)
	}
	return engine, app
}

// privileges is the least a containerised rmad needs, by port type: the
// capabilities it keeps (every other one dropped) and the devices it gets
// (README, Containers). Every container also gets the control socket
// directory and hugetlbfs as bind mounts, and for af_packet, AF_XDP and
// net_tap the network namespace holding the interface.
var privileges = map[string]struct{ caps, devices []string }{
	"memif":     {},
	"net_tap":   {caps: []string{"NET_ADMIN"}, devices: []string{"/dev/net/tun"}},
	"af_packet": {caps: []string{"NET_RAW", "NET_ADMIN"}},
	"af_xdp":    {caps: []string{"NET_RAW", "NET_ADMIN", "IPC_LOCK", "SYS_ADMIN"}},
}

// inContainer runs engine o in a container of image with the least
// privileges of its port type.
func inContainer(o testbed.Options, image, port string) testbed.Options {
	p := privileges[port]
	o.Container = &testbed.Container{Image: image, CapAdd: p.caps, Devices: p.devices}
	return o
}

// seeded is the byte at offset off of a region holding ctrapp's pattern
// seed (seed 0 is pattern).
func seeded(seed, off uint64) byte { return pattern(off) + byte(seed*31) }

// ctrApp is e2e/ctrapp in a container of its own, as uid 1000 with no
// capability, whose only mount of the host is one tenant's control socket
// directory (no hugetlbfs: its shared memory comes from the engine as
// memfds), driven line by line.
type ctrApp struct {
	t     *testing.T
	c     *testbed.Container
	in    io.WriteCloser
	lines chan string
	addr  netip.Addr // its engine's
	id    uint32     // the identity its engine gave it
	pid   int        // in its own PID namespace
}

func startCtrApp(t *testing.T, image, name, sockDir string) *ctrApp {
	t.Helper()
	c := &testbed.Container{Image: image, Name: name, User: "1000:1000", Entrypoint: "/usr/local/bin/ctrapp",
		Binds: []string{sockDir + ":/run/onerma:ro"}, Interactive: true}
	cmd := c.Command("-name", name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &ctrApp{t: t, c: c, in: in, lines: make(chan string, 4)}
	go func() {
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(a.lines)
				return
			}
			a.lines <- strings.TrimSpace(l)
		}
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil && !t.Failed() {
				t.Errorf("%s: %v\n%s", name, err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not exit after its input closed", name)
			c.Remove()
			<-done
		}
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	var addr string
	if l := a.line(); func() error { _, err := fmt.Sscanf(l, "identity %s %d %d", &addr, &a.id, &a.pid); return err }() != nil {
		t.Fatalf("%s: %q\n%s", name, l, stderr.String())
	}
	a.addr = netip.MustParseAddr(addr)
	return a
}

func (a *ctrApp) line() string {
	a.t.Helper()
	select {
	case l, ok := <-a.lines:
		if !ok {
			a.t.Fatalf("%s exited", a.c.Name)
		}
		return l
	case <-time.After(60 * time.Second):
		a.t.Fatalf("%s said nothing for 60 s", a.c.Name)
	}
	return ""
}

// ask sends one request and returns the answer.
func (a *ctrApp) ask(format string, args ...any) string {
	a.t.Helper()
	fmt.Fprintf(a.in, format+"\n", args...)
	return a.line()
}

// own registers a region of size bytes holding pattern seed.
func (a *ctrApp) own(size, seed uint64) (abi.RegionID, bool) {
	a.t.Helper()
	var (
		id   uint32
		kind string
	)
	if l := a.ask("own %d %d", size, seed); func() error { _, err := fmt.Sscanf(l, "region %d %s", &id, &kind); return err }() != nil {
		a.t.Fatalf("%s: own: %q", a.c.Name, l)
	}
	return abi.RegionID(id), kind == "huge"
}

// key is the K_d of region for the process id of the engine at addr.
func (a *ctrApp) key(region abi.RegionID, addr netip.Addr, id uint32, op string) string {
	a.t.Helper()
	k, ok := strings.CutPrefix(a.ask("key %d %s %d %s", region, addr, id, op), "key ")
	if !ok {
		a.t.Fatalf("%s: no key", a.c.Name)
	}
	return k
}

// tenant returns the tenant named name of the stats.
func tenant(st *ctlmsg.Stats, name string) ctlmsg.TenantStats {
	for _, ts := range st.Tenants {
		if ts.Name == name {
			return ts
		}
	}
	return ctlmsg.TenantStats{}
}

// TestContainers runs two engines and two applications, each in a
// container of its own (podman, runc): engine A on af_packet and engine B
// on AF_XDP, on the two ends of a veth pair between network namespaces,
// each with its port type's least privileges; applications app1 and app2,
// uid 1000 without capabilities, each mounting nothing of the host but one
// control socket directory of engine A, read-only: tenants t1 and t2 of
// their own.
// The test process owns a region on engine B.
//
// Across containers, every byte checked: app2 reads app1's region and
// writes into it (one engine, two tenants); app1 reads the test's region
// on engine B and writes into it (across the wire); the test reads app1's.
// Identities hold across PID namespaces: each application is PID 1 in its
// own, the engine gives each an identity of its own (so do rmactl
// processes in the same containers), and app1's K_d does not authenticate
// app2's reads. Quotas hold: app2 registering regions until refused gets
// its tenant's memory quota and the refusal naming it, while t1's usage is
// untouched and app1 still registers and reads; app2's exit gives back
// what t2 held.
func TestContainers(t *testing.T) {
	image, appImage := needImages(t)
	v, err := testbed.NewVethPair(fmt.Sprintf("ocx%d", os.Getpid()%1000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	dir, err := os.MkdirTemp("", "onerma-e2e-ctr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	t1, t2 := filepath.Join(dirA, "t1"), filepath.Join(dirA, "t2")
	for _, d := range []string{dir, dirA, dirB, t1, t2} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const quotaT2 = 32 << 20
	cfg := filepath.Join(dirA, "rmad.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"ctl": {"sockets": [
		{"path": %q, "mode": "0666", "name": "t1", "slot_policy": {"default": 64}, "quota": {"memory_bytes": %d}},
		{"path": %q, "mode": "0666", "name": "t2", "slot_policy": {"default": 64}, "quota": {"memory_bytes": %d}}]}}`,
		filepath.Join(t1, "rmad.sock"), 256<<20, filepath.Join(t2, "rmad.sock"), quotaT2)), 0o644)
	oa := inContainer(testbed.AFPacket("", dirA, "e2e-ca", ipA.String(), v.NSA, v.IfA), image, "af_packet")
	ob := inContainer(testbed.AFXDP("", dirB, "e2e-cb", ipB.String(), v.NSB, v.IfB), image, "af_xdp")
	oa.Extra = append(append([]string(nil), relaxed...), "-config", cfg)
	ob.Extra = relaxed
	a, b := start(t, oa), start(t, ob)
	adm, owner := dial(t, a, "admin"), dial(t, b, "owner")

	app1 := startCtrApp(t, appImage, "onerma-e2e-app1", t1)
	app2 := startCtrApp(t, appImage, "onerma-e2e-app2", t2)
	for _, app := range []*ctrApp{app1, app2} {
		if app.pid != 1 || app.addr != ipA || app.id < ctl.FirstIdentity {
			t.Fatalf("%s: PID %d in its namespace, engine %s, identity %d (want PID 1, %s, >= %d)", app.c.Name, app.pid, app.addr, app.id, ipA, ctl.FirstIdentity)
		}
	}
	if app1.id == app2.id {
		t.Fatalf("app1 and app2 share identity %d", app1.id)
	}
	// rmactl, a process of its own in each container: an identity of its own.
	ids := map[uint32]string{app1.id: "app1", app2.id: "app2"}
	for _, app := range []*ctrApp{app1, app2} {
		out, err := app.c.Exec("rmactl", "-socket", ctlmsg.DefaultSocket, "identity")
		var n uint32
		if _, serr := fmt.Sscanf(out[strings.Index(out, "pid "):], "pid %d", &n); err != nil || serr != nil {
			t.Fatalf("rmactl identity in %s: %v %v\n%s", app.c.Name, err, serr, out)
		}
		if who, dup := ids[n]; dup || n < ctl.FirstIdentity {
			t.Fatalf("rmactl in %s: identity %d (already %s's)", app.c.Name, n, who)
		}
		ids[n] = "rmactl in " + app.c.Name
	}

	// One engine, two tenants: app2 reads app1's region and writes into it.
	const size = 2 << 20 // a whole huge page
	r1, huge := app1.own(size, 1)
	if free, mounted := testbed.HugepagesFree(); mounted && free >= 64 && !huge {
		t.Errorf("app1's region is not on huge pages (%d free): the engine's memfds should bring them into its container", free)
	}
	kr2, kw2 := app1.key(r1, ipA, app2.id, "read"), app1.key(r1, ipA, app2.id, "write")
	for _, c := range []struct{ off, n uint64 }{{0, 1}, {4095, 2}, {1000, 64 << 10}, {size - 1<<20, 1 << 20}} {
		if got := app2.ask("read %s %d %d %d %s 1", ipA, r1, c.off, c.n, kr2); got != "ok" {
			t.Fatalf("app2 reading app1's region, %d B at %d: %s", c.n, c.off, got)
		}
	}
	if got := app2.ask("write %s %d %d %d %s 2", ipA, r1, 8192, 100<<10, kw2); got != "ok" {
		t.Fatalf("app2 writing app1's region: %s", got)
	}
	if got := app1.ask("check %d %d %d 2", r1, 8192, 100<<10); got != "ok" {
		t.Fatalf("app1's region after app2's write: %s", got)
	}
	// app1's K_d is app1's: app2 presenting it is refused.
	if got := app2.ask("read %s %d 0 64 %s 1", ipA, r1, app1.key(r1, ipA, app1.id, "read")); got != abi.StatusRemoteAuthFailure.String() {
		t.Fatalf("app2 reading with app1's K_d: %s, want %s", got, abi.StatusRemoteAuthFailure)
	}

	// Across the wire: app1 reads and writes the test's region on engine
	// B; the test reads app1's.
	rb := ownerRegion(t, owner, size, abi.PermRemoteRead|abi.PermRemoteWrite)
	krb, kwb := rb.DeriveKey(ipA, app1.id, abi.OpRead), rb.DeriveKey(ipA, app1.id, abi.OpWrite)
	if got := app1.ask("read %s %d 0 %d %x 0", ipB, rb.ID(), 1<<20, krb[:]); got != "ok" {
		t.Fatalf("app1 reading engine B's region: %s", got)
	}
	if got := app1.ask("write %s %d 4096 %d %x 3", ipB, rb.ID(), 64<<10, kwb[:]); got != "ok" {
		t.Fatalf("app1 writing engine B's region: %s", got)
	}
	for i, c := range rb.Bytes()[4096 : 4096+64<<10] {
		if want := seeded(3, 4096+uint64(i)); c != want {
			t.Fatalf("engine B's region after app1's write: byte %d is %#x, want %#x", 4096+i, c, want)
		}
	}
	slots, err := owner.AllocSlots(8)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := owner.RegisterRegion(size, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var kd aesni.Key
	if b, err := hex.DecodeString(app1.key(r1, ipB, owner.Identity().PID, "read")); err != nil || copy(kd[:], b) != len(kd) {
		t.Fatalf("app1's key for the test: %x %v", b, err)
	}
	if _, err := readall.Chunked(owner, slots, ipA, r1, kd, sink, size, 10*time.Second); err != nil {
		t.Fatalf("the test reading app1's region from engine B: %v", err)
	}
	for i, c := range sink.Bytes() {
		want := seeded(1, uint64(i))
		if i >= 8192 && i < 8192+100<<10 {
			want = seeded(2, uint64(i)) // app2's write
		}
		if c != want {
			t.Fatalf("app1's region read from engine B: byte %d is %#x, want %#x", i, c, want)
		}
	}

	// Quotas: app2 takes what t2 may hold, and no more; t1 is untouched.
	before, err := adm.Stats()
	if err != nil {
		t.Fatal(err)
	}
	use1 := tenant(before, "t1")
	const hogRegion = 4 << 20
	var (
		n            int
		quota, msg   string
		refusedAfter = app2.ask("hog %d", hogRegion)
	)
	if f := strings.SplitN(refusedAfter, " ", 4); len(f) == 4 && f[0] == "refused" {
		fmt.Sscan(f[1], &n)
		quota, msg = f[2], f[3]
	} else {
		t.Fatalf("app2 registering until refused: %q", refusedAfter)
	}
	wantMsg := fmt.Sprintf("memory_bytes quota of %d bytes (32.0 MiB) (socket t2)", quotaT2)
	if quota != ctlmsg.QuotaMemoryBytes || !strings.Contains(msg, `tenant "t2" holds`) || !strings.Contains(msg, wantMsg) {
		t.Fatalf("app2's refusal: quota %q: %s (want %s, %q)", quota, msg, ctlmsg.QuotaMemoryBytes, wantMsg)
	}
	mid, err := adm.Stats()
	if err != nil {
		t.Fatal(err)
	}
	use2 := tenant(mid, "t2")
	t.Logf("app2 registered %d regions of %d MiB, then: %s; t2 holds %d MiB of its %d MiB", n, hogRegion>>20, msg, use2.MemoryBytes>>20, use2.Quota.MemoryBytes>>20)
	if use2.Conns != 1 || use2.MemoryBytes > quotaT2 || use2.MemoryBytes+hogRegion <= quotaT2 || use2.Quota.MemoryBytes != quotaT2 || n == 0 {
		t.Fatalf("t2 after app2's hog: %+v", use2)
	}
	if got := tenant(mid, "t1"); got.TenantUsage != use1.TenantUsage || got.Conns != 1 || got.Socket != filepath.Join(t1, "rmad.sock") {
		t.Fatalf("t1 changed while app2 hogged t2: %+v, was %+v", got, use1)
	}
	if r, _ := app1.own(hogRegion, 4); r == 0 {
		t.Fatal("app1 cannot register a region beside app2's full tenant")
	}
	if got := app2.ask("read %s %d 0 8192 %s 1", ipA, r1, kr2); got != "ok" {
		t.Fatalf("app2 reading app1's region at its quota: %s", got)
	}
	if got := app2.ask("release"); got != fmt.Sprintf("released %d", n) {
		t.Fatalf("app2 releasing: %q", got)
	}

	// app2 gone: everything t2 held comes back.
	app2.in.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := adm.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if tenant(st, "t2").Name == "" && tenant(st, "t1").Conns == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenants after app2 exited: %+v", st.Tenants)
		}
	}
}

// TestImage: the runtime image holds what rmad and the tools load and no
// build tool: every shared library of the binaries and of DPDK's drivers
// resolves, no -dev package, no compiler; its entrypoint is rmad, run as
// root, and the control sockets and the IV state are volumes. The
// applications' image runs as uid 65532.
func TestImage(t *testing.T) {
	image, appImage := needImages(t)
	out, err := testbed.Podman("image", "inspect", "--format", "{{json .Config.Entrypoint}} {{json .Config.Volumes}} {{.Config.User}}", image).CombinedOutput()
	if want := `["/usr/local/bin/rmad"] {"/run/onerma":{},"/var/lib/onerma":{}} root`; err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("entrypoint, volumes and user: %q %v, want %q", out, err, want)
	}
	// The applications' image (the e2e image is built on it) runs as a
	// user that is not root, and says so numerically (runAsNonRoot).
	out, err = testbed.Podman("run", "--rm", "--network", "none", "--entrypoint", "id", appImage, "-u").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "65532" {
		t.Fatalf("the application image's user: %q %v, want uid 65532", out, err)
	}
	// One line per file and library that does not resolve, per -dev
	// package, per compiler; then the count of files checked.
	const script = `n=0
for f in /usr/local/bin/rmad /usr/local/bin/rmactl /usr/local/bin/rmaperf /usr/local/bin/rmatop /usr/lib/*/dpdk/pmds-*/*.so.*; do
	ldd "$f" 2>/dev/null | sed -n "s|^|$f: |; /not found/p"; n=$((n+1))
done
dpkg-query -W -f '${Package}\n' | grep -- '-dev$'
for c in gcc cc go clang; do command -v $c; done
echo "checked $n"`
	out, err = testbed.Podman("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", script).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var n int
	if _, serr := fmt.Sscanf(lines[len(lines)-1], "checked %d", &n); err != nil || serr != nil || len(lines) != 1 || n < 12 {
		t.Fatalf("the runtime image: %v\n%s", err, out)
	}
	t.Logf("%d binaries and DPDK drivers, every library resolved; no -dev package, no compiler", n)
}

// TestContainerPrivileges: rmad in a container runs on each port type
// with exactly the privileges README lists for it (privileges), and fails
// to start without any one of them. With them: two engines over memif
// (no capability, no device) serve verified READs; an engine on net_tap
// answers ping from its network namespace's kernel; engines on af_packet
// and AF_XDP start (TestContainers moves data over both).
func TestContainerPrivileges(t *testing.T) {
	image, _ := needImages(t)
	if _, err := exec.LookPath("ping"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("ping (iputils-ping) not found:", err)
	}
	dir := t.TempDir()
	v, err := testbed.NewVethPair(fmt.Sprintf("ocp%d", os.Getpid()%1000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	ma, mb := testbed.MemifPair("", dir, "e2e-pm", "e2e-pm2", ipA.String(), ipB.String())
	tap := testbed.Tap("", dir, "e2e-pt", ipA.String(), "ocptap", "")
	tap.Extra, tap.NetNS = nil, v.NSA // the tap's own MAC, in the container's namespace
	ports := []struct {
		port string
		opt  testbed.Options
	}{
		{"memif", ma},
		{"net_tap", tap},
		{"af_packet", testbed.AFPacket("", dir, "e2e-pp", ipA.String(), v.NSA, v.IfA)},
		{"af_xdp", testbed.AFXDP("", dir, "e2e-px", ipB.String(), v.NSB, v.IfB)},
	}
	for _, p := range ports {
		t.Run(p.port, func(t *testing.T) {
			o := inContainer(p.opt, image, p.port)
			o.Extra = append(o.Extra, relaxed...)
			e := start(t, o)
			switch p.port {
			case "memif":
				ob := inContainer(mb, image, p.port)
				ob.Extra = relaxed
				b := start(t, ob)
				pb := dial(t, b, "owner")
				verifiedReads(t, dial(t, e, "reader"), ipB, ownerRegion(t, pb, 64<<10, abi.PermRemoteRead))
			case "net_tap":
				if err := testbed.AddAddr(v.NSA, "ocptap", "10.98.0.9/24"); err != nil {
					t.Fatal(err)
				}
				if err := exec.Command("ip", "-n", v.NSA, "link", "set", "ocptap", "up").Run(); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("ip", "netns", "exec", v.NSA, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-W", "2", ipA.String()).CombinedOutput(); err != nil {
					t.Fatalf("ping the engine on net_tap from its namespace: %v\n%s", err, out)
				}
			}
			if err := e.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			// One privilege fewer: the engine does not start.
			priv := privileges[p.port]
			for i := range len(priv.caps) + len(priv.devices) {
				less := o
				c := *o.Container
				c.CapAdd, c.Devices = without(priv.caps, i), without(priv.devices, i-len(priv.caps))
				less.Container = &c
				if e, err := testbed.Start(less); err == nil {
					e.Stop(10 * time.Second)
					t.Errorf("%s: started with capabilities %v and devices %v", p.port, c.CapAdd, c.Devices)
				} else {
					t.Logf("without %s: %s", append(priv.caps, priv.devices...)[i], why(err))
				}
			}
		})
	}
}

// without returns s less its element i (s itself when i is out of range).
func without(s []string, i int) []string {
	if i < 0 || i >= len(s) {
		return s
	}
	return append(append([]string(nil), s[:i]...), s[i+1:]...)
}

// why picks from a failed start's log the lines that say why: the
// drivers' complaints and rmad's own error.
func why(err error) string {
	var out []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.Contains(l, "(): ") || strings.Contains(l, `"rmad failed"`) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, " | ")
}
