package ctl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

var engineIP = netip.MustParseAddr("10.9.0.1")

type env struct {
	srv  *ctl.Server
	drv  *loopDriver
	sock string // the first socket's path
	cfg  ctl.Config
}

// engineConfig is the loopback core's config, with a volatile IV source.
func engineConfig() engine.Config {
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	return ecfg
}

// keyHex is a region key in its control-socket form.
const keyHex = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"

// kd is the derived key the owner of r hands reader for READs.
func kd(r *portal.Region, reader *portal.Portal) aesni.Key {
	id := reader.Identity()
	return r.DeriveKey(id.Addr, id.PID, abi.OpRead)
}

func setup(t *testing.T, mutate func(*ctl.Config)) *env {
	return setupLog(t, mutate, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
}

func setupLog(t *testing.T, mutate func(*ctl.Config), log zerolog.Logger) *env {
	t.Helper()
	return setupCores(t, 1, nil, mutate, log)
}

// setupCores starts an engine of cores cores (edit, if set, changes its
// config) and its control server; mode, if given, is the loops' poll
// mode (default Backoff; one for every core, or one per core).
func setupCores(t testing.TB, cores int, edit func(*engine.Config), mutate func(*ctl.Config), log zerolog.Logger, mode ...runner.Mode) *env {
	t.Helper()
	ecfg := engineConfig()
	ecfg.LocalIP = engineIP
	ecfg.Slots = 128
	ecfg.Regions = 64
	ecfg.Portals = 8
	ecfg.Timeout = 200 * time.Millisecond
	ecfg.DispatchTimeout = 50 * time.Millisecond
	ecfg.ResolveTimeout = 50 * time.Millisecond
	if edit != nil {
		edit(&ecfg)
	}
	drv, err := newLoopDrivers(ecfg, cores, mode...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ctl.DefaultConfig()
	cfg.Sockets[0].Path = filepath.Join(t.TempDir(), "rmad.sock")
	cfg.Sockets[0].Policy.Default = 16
	cfg.CmdCap, cfg.CplCap = 64, 128
	// Every test runs as one uid, one tenant: the portal, slot and
	// region quotas bound only the tests of quotas, and no room is kept
	// for tenants to come (the tests of pools set their own).
	cfg.Quota.Portals, cfg.Quota.Slots, cfg.Quota.Regions = ctl.Pct(100), ctl.Pct(100), ctl.Pct(100)
	cfg.ReserveTenants = 0
	// Tests open several tenants on this small engine: each is
	// guaranteed a share of it that several fit.
	cfg.Guarantee.Portals, cfg.Guarantee.Slots, cfg.Guarantee.Regions = ctl.Count(1), ctl.Count(16), ctl.Count(4)
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := ctl.Listen(cfg, drv.g, drv.execs(), log)
	if err != nil {
		drv.Stop()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	e := &env{srv: srv, drv: drv, sock: cfg.Sockets[0].Path, cfg: cfg}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; !errors.Is(err, ctl.ErrClosed) {
			t.Errorf("Serve returned %v", err)
		}
		for _, sc := range cfg.Sockets {
			if _, err := os.Lstat(sc.Path); !os.IsNotExist(err) {
				t.Errorf("socket file left behind: %v", err)
			}
		}
		e.audit(t)
		drv.Stop()
	})
	return e
}

func (e *env) stats(t *testing.T) engine.Stats {
	t.Helper()
	var st engine.Stats
	if err := e.drv.Exec(func(c *engine.Core) { st = c.Stats() }); err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) audit(t testing.TB) {
	t.Helper()
	for i, r := range e.drv.runners {
		var err error
		r.Exec(func(c *engine.Core) { err = c.Audit() })
		if err != nil {
			t.Errorf("engine audit, core %d: %v", i, err)
		}
	}
	if err := e.drv.g.Audit(); err != nil {
		t.Errorf("engine audit: %v", err)
	}
	if err := e.srv.Audit(); err != nil {
		t.Errorf("pools audit: %v", err)
	}
}

func dial(t testing.TB, e *env, name string) *portal.Portal {
	t.Helper()
	p, err := portal.Dial(e.sock, name)
	if err != nil {
		t.Fatalf("Dial %s: %v", name, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func waitOne(t *testing.T, p *portal.Portal) abi.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out [1]abi.Completion
	if _, err := p.Wait(ctx, out[:]); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return out[0]
}

func TestOpenAndIdentity(t *testing.T) {
	e := setup(t, nil)
	p := dial(t, e, "ident")
	id := p.Identity()
	// The first process this engine sees gets the first identity: not
	// its PID.
	want := portal.Identity{Addr: engineIP, PID: ctl.FirstIdentity, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Name: "ident",
		Tenant: fmt.Sprintf("main uid %d", os.Getuid())}
	if id != want {
		t.Fatalf("Identity (-want +got)\n-%+v\n+%+v", want, id)
	}
	if l := p.Layout(); l.CmdCap != 64 || l.CplCap != 128 {
		t.Errorf("layout %+v, want the server's default caps 64/128", l)
	}
	if p.MaxSlots() != 16 {
		t.Errorf("MaxSlots = %d, want 16", p.MaxSlots())
	}
	if p.Class() != abi.ClassLow {
		t.Errorf("Class = %d, want ClassLow", p.Class())
	}
	q, err := portal.DialOptions(e.sock, "opts", portal.Options{CmdCap: 8, CplCap: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if l := q.Layout(); l.CmdCap != 8 || l.CplCap != 16 {
		t.Errorf("layout %+v, want 8/16", l)
	}
	if _, err := portal.DialOptions(e.sock, "opts", portal.Options{Class: 2}); err == nil || !strings.Contains(err.Error(), "Options.Class = 2") {
		t.Errorf("Dial with class 2: %v", err)
	}
	if _, err := portal.Dial(e.sock, "bad name"); err == nil {
		t.Error("Dial accepted a name with a space")
	}
}

func TestSlotCap(t *testing.T) {
	uid := uint32(os.Getuid())
	other := uid + 1
	e := setup(t, func(c *ctl.Config) {
		c.Sockets = append(c.Sockets,
			ctl.SocketConfig{Path: c.Sockets[0].Path + ".big", Mode: 0o600, Name: "big", Tenant: ctl.TenantByUID, Policy: ctl.AppPolicy{Rules: []ctl.AppRule{
				{UID: &other, MaxSlots: 100}, // not us: must not apply
				{UID: &uid, MaxSlots: 24},
			}}},
			ctl.SocketConfig{Path: c.Sockets[0].Path + ".none", Mode: 0o600, Name: "none", Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 0}})
	})
	p := dial(t, e, "small")
	if _, err := p.AllocSlots(10); err != nil {
		t.Fatal(err)
	}
	_, err := p.AllocSlots(7)
	if !errors.Is(err, portal.ErrSlotCap) {
		t.Fatalf("over the cap: %v, want ErrSlotCap", err)
	}
	wantMsg := fmt.Sprintf(`portal "small" (identity %d, uid %d, tenant "main uid %d") holds 10 slots and asks for 7 more; its cap is 16 (the slot policy default)`, p.Identity().PID, uid, uid)
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("error %q\nwant it to contain %q", err, wantMsg)
	}
	if _, err := p.AllocSlots(6); err != nil {
		t.Fatalf("up to the cap: %v", err)
	}
	if p.Slots() != 16 || p.FreeSlots() != 16 {
		t.Errorf("Slots %d FreeSlots %d", p.Slots(), p.FreeSlots())
	}

	// The same name on another socket: that socket's policy.
	big, err := portal.Dial(e.cfg.Sockets[1].Path, "small")
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if big.MaxSlots() != 24 {
		t.Fatalf("rule for our uid: MaxSlots %d, want 24", big.MaxSlots())
	}
	if _, err := big.AllocSlots(25); !errors.Is(err, portal.ErrSlotCap) || !strings.Contains(err.Error(), `slot policy rule 1 (uid=`+fmt.Sprint(uid)+`)`) {
		t.Fatalf("error %v does not name the rule", err)
	}
	if _, err := portal.Dial(e.cfg.Sockets[2].Path, "small"); !errors.Is(err, portal.ErrSlotCap) || !strings.Contains(err.Error(), "the slot policy default of socket none gives uid") {
		t.Fatalf("open with a zero cap: %v", err)
	}
	if got := e.stats(t).SlotsInUse; got != 16 {
		t.Fatalf("SlotsInUse = %d, want 16", got)
	}
}

// TestClassPolicy: the engine's policy, not the application, decides
// which class of service an application may use (paper §4.3), beside its
// slot cap: by the socket it came through and its uid, never by the name
// it gives itself.
func TestClassPolicy(t *testing.T) {
	uid := uint32(os.Getuid())
	other := uid + 1
	var logBuf syncBuffer
	e := setupLog(t, func(c *ctl.Config) {
		c.Sockets[0].Policy.Rules = []ctl.AppRule{
			{UID: &other, Class: "high", MaxSlots: 100}, // not us: must not apply
			{UID: &uid, Class: "high", MaxSlots: 4},
		}
		c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + ".pod", Mode: 0o600, Name: "pod",
			Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 12, DefaultClass: "low"}})
	}, zerolog.New(&logBuf).Level(zerolog.InfoLevel))
	pod := e.cfg.Sockets[1].Path
	high := portal.Options{Class: abi.ClassHigh}

	lat, err := portal.DialOptions(e.sock, "lat", high)
	if err != nil {
		t.Fatalf("lat asking high under a high rule: %v", err)
	}
	defer lat.Close()
	if lat.Class() != abi.ClassHigh || lat.MaxSlots() != 4 {
		t.Fatalf("lat: class %d, %d slots; want high, 4", lat.Class(), lat.MaxSlots())
	}
	me := lat.Identity().PID
	_, err = lat.AllocSlots(5)
	wantMsg := fmt.Sprintf(`portal: engine: alloc_slots: portal "lat" (identity %d, uid %d, tenant "main uid %d") holds 0 slots and asks for 5 more; its cap is 4 (slot policy rule 1 (uid=%d))`,
		me, uid, uid, uid)
	if !errors.Is(err, portal.ErrSlotCap) || err.Error() != wantMsg {
		t.Fatalf("lat over its cap: %v\nwant ErrSlotCap: %s", err, wantMsg)
	}
	if _, err := lat.AllocSlots(4); err != nil {
		t.Fatalf("lat up to its cap: %v", err)
	}

	// A rule granting high permits it, it does not impose it.
	lazy := dial(t, e, "bulk")
	if lazy.Class() != abi.ClassLow || lazy.MaxSlots() != 4 {
		t.Fatalf("bulk asking nothing: class %d, %d slots; want low, 4", lazy.Class(), lazy.MaxSlots())
	}

	// The same name through the pod's socket gets the pod's policy.
	_, err = portal.DialOptions(pod, "lat", high)
	wantMsg = fmt.Sprintf(`portal: engine: open: portal "lat" (identity %d, uid %d) asks for class high, but the slot policy default of socket pod grants it class low and 12 slots`,
		me, uid)
	if !errors.Is(err, portal.ErrClass) || errors.Is(err, portal.ErrSlotCap) || err.Error() != wantMsg {
		t.Fatalf("lat asking high through the pod's socket: %v\nwant ErrClass: %s", err, wantMsg)
	}
	podLat, err := portal.Dial(pod, "lat")
	if err != nil {
		t.Fatal(err)
	}
	defer podLat.Close()
	if podLat.Class() != abi.ClassLow || podLat.MaxSlots() != 12 || podLat.Identity().Tenant != "pod" || podLat.Identity().PID != me {
		t.Fatalf("lat through the pod's socket: class %d, %d slots, %+v; want low, 12, tenant pod, identity %d", podLat.Class(), podLat.MaxSlots(), podLat.Identity(), me)
	}
	if _, err := podLat.AllocSlots(8); err != nil {
		t.Fatal(err)
	}
	_, err = podLat.AllocSlots(5)
	wantMsg = fmt.Sprintf(`portal: engine: alloc_slots: portal "lat" (identity %d, uid %d, tenant "pod") holds 8 slots and asks for 5 more; its cap is 12 (the slot policy default)`,
		me, uid)
	if !errors.Is(err, portal.ErrSlotCap) || err.Error() != wantMsg {
		t.Fatalf("pod's lat over its cap: %v\nwant ErrSlotCap: %s", err, wantMsg)
	}
	if got := e.stats(t).SlotsInUse; got != 12 {
		t.Fatalf("SlotsInUse = %d, want 12", got)
	}
	// The operator sees what each portal was granted, and by which rule.
	wantLog := fmt.Sprintf(`"name":"lat","tenant":"main uid %d","identity":%d,"os_pid":%d,"uid":%d,`, uid, me, os.Getpid(), uid)
	wantGrant := fmt.Sprintf(`"class":"high","max_class":"high","max_slots":4,"granted_by":"slot policy rule 1 (uid=%d)"`, uid)
	found := false
	for _, line := range strings.Split(logBuf.String(), "\n") {
		if strings.Contains(line, `"message":"portal opened"`) && strings.Contains(line, wantLog) && strings.Contains(line, wantGrant) {
			found = true
		}
	}
	if !found {
		t.Errorf("no portal opened event with %s and %s in\n%s", wantLog, wantGrant, logBuf.String())
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
}

func TestReadLoopback(t *testing.T) {
	e := setup(t, nil)
	srv := dial(t, e, "server")
	src, err := srv.RegisterRegion(64<<10, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fill(src.Bytes(), 0x5a)

	cli := dial(t, e, "client")
	if _, err := cli.AllocSlots(8); err != nil {
		t.Fatal(err)
	}
	sink, err := cli.RegisterRegion(64<<10, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if sink.ID() == src.ID() || sink.Size() != 64<<10 || len(sink.Bytes()) != 64<<10 {
		t.Fatalf("regions %#x %#x size %d", sink.ID(), src.ID(), sink.Size())
	}

	type op struct {
		remOff, locOff uint64
		length         uint32
	}
	ops := []op{{0, 0, 4096}, {4096, 8192, 1}, {100, 20000, 1500}, {60000, 40000, 4096}, {7, 50009, 3333}, {65536 - 64, 60000, 64}}
	out := make([]abi.Completion, 8)
	// Post all, publish with one Flush.
	for i, o := range ops {
		s, ok := cli.Slot()
		if !ok {
			t.Fatal("no free slot")
		}
		if err := cli.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(i),
			Remote: engineIP, RemoteRegion: src.ID(), RemoteOffset: o.remOff, Key: kd(src, cli),
			Local: sink, LocalOffset: o.locOff, Length: o.length,
		}); err != nil {
			t.Fatal(err)
		}
	}
	cli.Flush()
	got := map[uint64]abi.Completion{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(got) < len(ops) {
		n, err := cli.Wait(ctx, out)
		if err != nil {
			t.Fatalf("Wait with %d of %d completions: %v", len(got), len(ops), err)
		}
		for _, c := range out[:n] {
			got[c.Cookie] = c
			if err := cli.Release(c.Slot); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, o := range ops {
		c := got[uint64(i)]
		if c.Status != abi.StatusOK || c.Op != abi.OpRead || c.Length != o.length {
			t.Errorf("op %d: completion %+v", i, c)
			continue
		}
		if !bytes.Equal(sink.Bytes()[o.locOff:o.locOff+uint64(o.length)], src.Bytes()[o.remOff:o.remOff+uint64(o.length)]) {
			t.Errorf("op %d: data differs", i)
		}
	}
	// The convenience call posts and flushes.
	s, _ := cli.Slot()
	fill(src.Bytes()[:64], 0xee)
	if err := cli.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 99,
		Remote: engineIP, RemoteRegion: src.ID(), Key: kd(src, cli),
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, cli); c.Status != abi.StatusOK || c.Cookie != 99 || !bytes.Equal(sink.Bytes()[:64], src.Bytes()[:64]) {
		t.Fatalf("Submit: %+v", c)
	}
	cli.Release(s)
	st, err := cli.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Completed["OK"] < uint64(len(ops)+1) || st.SlotsInUse != 8 {
		t.Fatalf("stats %+v", st)
	}
}

func TestForeignRegionTouchesNothing(t *testing.T) {
	e := setup(t, nil)
	victim := dial(t, e, "victim")
	vr, err := victim.RegisterRegion(8192, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	fill(vr.Bytes(), 0x11)
	before := append([]byte(nil), vr.Bytes()...)

	att := dial(t, e, "attacker")
	slots, err := att.AllocSlots(4)
	if err != nil {
		t.Fatal(err)
	}
	src, err := att.RegisterRegion(8192, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	fill(src.Bytes(), 0x77)
	// Post refuses another portal's *Region; a raw command naming the
	// victim's region id must be refused by the engine.
	cmd := abi.Command{Op: abi.OpRead, Slot: slots[0], Cookie: 1, RemoteAddr: 0x0a090001,
		RemoteRegion: src.ID(), LocalRegion: vr.ID(), Length: 4096}
	if err := att.PostCommand(&cmd); err != nil {
		t.Fatal(err)
	}
	// A slot this portal does not own is refused too.
	cmd2 := cmd
	cmd2.Slot, cmd2.Cookie, cmd2.LocalRegion = 100000, 2, src.ID()
	if err := att.PostCommand(&cmd2); err != nil {
		t.Fatal(err)
	}
	att.Flush()
	got := map[uint64]abi.Status{}
	for len(got) < 2 {
		c := waitOne(t, att)
		got[c.Cookie] = c.Status
	}
	if got[1] != abi.StatusLocalRegion || got[2] != abi.StatusBadSlot {
		t.Fatalf("statuses %v, want cookie 1 LOCAL_REGION, cookie 2 BAD_SLOT", got)
	}
	time.Sleep(10 * time.Millisecond)
	if !bytes.Equal(vr.Bytes(), before) {
		t.Fatal("the victim's region changed")
	}
	// Deregistering the victim's region from the attacker's portal fails
	// without saying whether it exists.
	_, err = rawRoundTrip(t, e.sock, "stats-only", fmt.Sprintf(`{"v":1,"op":"deregister_region","region":%d}`, vr.ID()))
	if err == nil || !strings.Contains(err.Error(), "no portal open") {
		t.Fatalf("deregister without a portal: %v", err)
	}
}

func TestRingFullReturnsAtOnce(t *testing.T) {
	e := setup(t, nil)
	p, err := portal.DialOptions(e.sock, "full", portal.Options{CmdCap: 4, CplCap: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.AllocSlots(8); err != nil {
		t.Fatal(err)
	}
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite|abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the core so it cannot drain the ring.
	hold, held := make(chan struct{}), make(chan struct{})
	go e.drv.Exec(func(*engine.Core) { close(held); <-hold })
	<-held
	for i := range 4 {
		s, _ := p.Slot()
		if err := p.Submit(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(i),
			Remote: engineIP, RemoteRegion: sink.ID(), Key: kd(sink, p),
			Local: sink, Length: 64,
		}); err != nil {
			close(hold)
			t.Fatalf("post %d: %v", i, err)
		}
	}
	s, _ := p.Slot()
	start := time.Now()
	err = p.Post(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 4,
		Remote: engineIP, RemoteRegion: sink.ID(), Key: kd(sink, p),
		Local: sink, Length: 64,
	})
	close(hold)
	if !errors.Is(err, portal.ErrRingFull) {
		t.Fatalf("fifth post: %v, want ErrRingFull", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("ErrRingFull took %v", d)
	}
	for range 4 {
		if c := waitOne(t, p); c.Status != abi.StatusOK {
			t.Fatalf("completion %+v", c)
		}
	}
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 4,
		Remote: engineIP, RemoteRegion: sink.ID(), Key: kd(sink, p),
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatalf("post after the engine drained: %v", err)
	}
	if c := waitOne(t, p); c.Status != abi.StatusOK || c.Cookie != 4 {
		t.Fatalf("completion %+v", c)
	}
}

func TestDeregisterRegion(t *testing.T) {
	e := setup(t, nil)
	p := dial(t, e, "dereg")
	slots, _ := p.AllocSlots(2)
	r, err := p.RegisterRegion(4096, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	id := r.ID()
	if err := p.DeregisterRegion(r); err != nil {
		t.Fatal(err)
	}
	if r.Bytes() != nil {
		t.Error("Bytes after deregistration")
	}
	if err := p.DeregisterRegion(r); !errors.Is(err, portal.ErrRegion) {
		t.Errorf("second deregistration: %v", err)
	}
	if err := p.Post(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 1,
		Remote: engineIP, RemoteRegion: id, Key: kd(r, p),
		Local: r, Length: 64,
	}); !errors.Is(err, portal.ErrRegion) {
		t.Errorf("Post into a deregistered region: %v", err)
	}
	// The stale id, sent raw, is refused by the engine.
	r2, err := p.RegisterRegion(4096, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.PostCommand(&abi.Command{Op: abi.OpRead, Slot: slots[0], Cookie: 5, RemoteAddr: 0x0a090001,
		RemoteRegion: r2.ID(), LocalRegion: id, Length: 64}); err != nil {
		t.Fatal(err)
	}
	p.Flush()
	if c := waitOne(t, p); c.Status != abi.StatusLocalRegion {
		t.Fatalf("stale local region: %+v", c)
	}
}

// shmMaps counts this process's mappings of engine memfds.
func shmMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("memfd:onerma-"))
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestCloseWithoutCleanupReclaims(t *testing.T) {
	e := setup(t, nil)
	fds, maps := openFDs(t), shmMaps(t)
	p := dial(t, e, "sloppy")
	slots, _ := p.AllocSlots(12)
	var rs []*portal.Region
	for range 3 {
		r, err := p.RegisterRegion(16<<10, abi.PermAll)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	// Ops in flight towards an address nobody answers.
	for i := range 4 {
		if err := p.Post(&portal.Op{
			Type: portal.OpRead, Slot: slots[i], Cookie: uint64(i),
			Remote: netip.MustParseAddr("10.9.0.99"), RemoteRegion: 1, Key: kd(rs[0], p),
			Local: rs[0], Length: 64,
		}); err != nil {
			t.Fatal(err)
		}
	}
	p.Flush()
	if got := e.stats(t).SlotsInUse; got != 12 {
		t.Fatalf("SlotsInUse = %d, want 12", got)
	}
	rs1Key := rs[1].Key()
	p.Close()
	enginetest.Eventually(t, "slots reclaimed", func() bool { return e.stats(t).SlotsInUse == 0 })
	enginetest.Eventually(t, "connection gone", func() bool { return e.srv.Conns() == 0 })
	enginetest.Eventually(t, "no ops in flight", func() bool { return e.stats(t).OpsInFlight == 0 })
	if got := shmMaps(t); got != maps {
		t.Errorf("%d engine memfd mappings remain (had %d)", got, maps)
	}
	if got := openFDs(t); got != fds {
		t.Errorf("%d fds open, had %d", got, fds)
	}
	// The region ids are dead: a new portal cannot name them.
	q := dial(t, e, "next")
	qs, _ := q.AllocSlots(1)
	qr, _ := q.RegisterRegion(4096, abi.PermAll)
	// A key derived from the reclaimed region's K_r: the engine keeps
	// the region's tombstone, so the request authenticates and is told
	// the region is gone; with any other key it cannot authenticate.
	stale := aesni.DeriveKey(rs1Key, q.Identity().Addr.As4(), q.Identity().PID, uint8(abi.OpRead))
	q.Submit(&portal.Op{
		Type: portal.OpRead, Slot: qs[0], Cookie: 1,
		Remote: engineIP, RemoteRegion: rs[1].ID(), Key: stale,
		Local: qr, Length: 64,
	})
	if c := waitOne(t, q); c.Status != abi.StatusRemoteRegion {
		t.Fatalf("READ of a reclaimed region with its key: %+v", c)
	}
	other := aesni.DeriveKey(aesni.Key{1}, q.Identity().Addr.As4(), q.Identity().PID, uint8(abi.OpRead))
	q.Submit(&portal.Op{
		Type: portal.OpRead, Slot: qs[0], Cookie: 2,
		Remote: engineIP, RemoteRegion: rs[1].ID(), Key: other,
		Local: qr, Length: 64,
	})
	if c := waitOne(t, q); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("READ of a reclaimed region with another key: %+v", c)
	}
}

// TestHelperChild is the application of TestKilledChildReclaims.
func TestHelperChild(t *testing.T) {
	sock := os.Getenv("ONERMA_CTL_CHILD_SOCKET")
	if sock == "" {
		t.Skip("helper process for TestKilledChildReclaims")
	}
	p, err := portal.Dial(sock, "child")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	slots, err := p.AllocSlots(10)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	r, err := p.RegisterRegion(1<<20, abi.PermAll)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := range 3 {
		p.Post(&portal.Op{
			Type: portal.OpRead, Slot: slots[i], Cookie: uint64(i),
			Remote: netip.MustParseAddr("10.9.0.99"), RemoteRegion: 1, Key: r.DeriveKey(p.Identity().Addr, p.Identity().PID, abi.OpRead),
			Local: r, Length: 4096,
		})
	}
	p.Flush()
	fmt.Printf("ready %d %#x\n", p.Identity().PID, r.ID())
	select {}
}

func TestKilledChildReclaims(t *testing.T) {
	e := setup(t, nil)
	maps := shmMaps(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperChild$", "-test.v")
	cmd.Env = append(os.Environ(), "ONERMA_CTL_CHILD_SOCKET="+e.sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var pid uint32
	var region uint32
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "ready %d %v", &pid, &region); err == nil {
			break
		}
		if strings.HasPrefix(sc.Text(), "error") {
			t.Fatal(sc.Text())
		}
	}
	if pid < ctl.FirstIdentity {
		t.Fatalf("child reported engine-stamped identity %d, below the first identity %d", pid, ctl.FirstIdentity)
	}
	if got := e.stats(t).SlotsInUse; got != 10 {
		t.Fatalf("SlotsInUse = %d, want 10", got)
	}
	if got := shmMaps(t); got <= maps {
		t.Fatalf("the engine maps no child memory (%d)", got)
	}
	cmd.Process.Signal(unix.SIGKILL)
	cmd.Wait()
	enginetest.Eventually(t, "slots reclaimed", func() bool { return e.stats(t).SlotsInUse == 0 })
	enginetest.Eventually(t, "connection gone", func() bool { return e.srv.Conns() == 0 })
	enginetest.Eventually(t, "memory unmapped", func() bool { return shmMaps(t) == maps })
}

// rawRoundTrip sends one datagram on a fresh connection (after opening a
// portal named name unless name is "stats-only") and returns the decoded
// response, or the engine's error.
func rawRoundTrip(t *testing.T, sock, name, req string) (ctlmsg.Response, error) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return rawSend(t, c, []byte(req), nil)
}

func rawSend(t *testing.T, c *net.UnixConn, req, oob []byte) (ctlmsg.Response, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.WriteMsgUnix(req, oob, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, ctlmsg.MaxResponseBytes)
	rob := make([]byte, 64)
	n, oobn, _, _, err := c.ReadMsgUnix(buf, rob)
	if err != nil {
		t.Fatal(err)
	}
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(rob[:oobn])
		for i := range msgs {
			fds, _ := unix.ParseUnixRights(&msgs[i])
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
	resp, err := ctlmsg.DecodeResponse(buf[:n])
	if err != nil {
		t.Fatalf("undecodable response %q: %v", buf[:n], err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("%s: %s", resp.Code, resp.Error)
	}
	return resp, nil
}

func TestBadClientsGetPreciseErrors(t *testing.T) {
	e := setup(t, func(c *ctl.Config) {
		c.MaxRegionBytes = 1 << 20
		c.MaxPortalBytes = 2 << 20
		c.MaxRegionsPerPortal = 3
	})
	good := dial(t, e, "bystander")
	gs, _ := good.AllocSlots(1)
	gr, _ := good.RegisterRegion(4096, abi.PermAll)

	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: e.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := rawSend(t, c, []byte(`{"v":1,"op":"stats"}`), nil); err != nil {
		t.Fatal(err) // also makes sure the server has accepted c
	}
	fds := openFDs(t)
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	tests := []rawCase{
		{"garbage", `hello`, nil, ctlmsg.CodeBadRequest, "not JSON"},
		{"unknown key", `{"v":1,"op":"stats","rootme":1}`, nil, ctlmsg.CodeBadRequest, `unknown key "rootme"`},
		{"too large", `{"v":1,"op":"stats"}` + strings.Repeat(" ", ctlmsg.MaxRequestBytes), nil, ctlmsg.CodeTooLarge, "longer than 4096"},
		{"fd passing", `{"v":1,"op":"stats"}`, unix.UnixRights(int(f.Fd())), ctlmsg.CodeFDs, "1 file descriptors, now closed"},
		{"alloc before open", `{"v":1,"op":"alloc_slots","n":1}`, nil, ctlmsg.CodeState, "no portal open"},
		{"open", `{"v":1,"op":"open","name":"bad"}`, nil, "", ""},
		{"alloc before attach", `{"v":1,"op":"alloc_slots","n":1}`, nil, ctlmsg.CodeState, `portal "bad" (identity`},
		{"attach", `{"v":1,"op":"attach"}`, nil, "", ""},
		{"attach again", `{"v":1,"op":"attach"}`, nil, ctlmsg.CodeState, "is attached already"},
		{"second open", `{"v":1,"op":"open","name":"bad2"}`, nil, ctlmsg.CodeState, "already holds portal \"bad\""},
		{"foreign region", fmt.Sprintf(`{"v":1,"op":"deregister_region","region":%d}`, gr.ID()), nil, ctlmsg.CodeNoRegion, "is not registered by portal \"bad\""},
		{"region too big", `{"v":1,"op":"create_region","size":1048577}`, nil, ctlmsg.CodeLimit, "exceeds the engine's region limit of 1048576 bytes"},
		{"region without key", `{"v":1,"op":"register_region","memory":1,"perm":1}`, nil, ctlmsg.CodeBadRequest, `needs key "key"`},
		{"register before create", `{"v":1,"op":"register_region","memory":1,"perm":1,"key":"` + keyHex + `"}`, nil, ctlmsg.CodeState, "send create_region first"},
		{"create", `{"v":1,"op":"create_region","size":8192}`, nil, "", ""},
		{"register another", `{"v":1,"op":"register_region","memory":2,"perm":1,"key":"` + keyHex + `"}`, nil, ctlmsg.CodeState, "memory 2 is not the memory"},
		// The engine is charged for nothing the application did not fault in.
		{"register unfaulted", `{"v":1,"op":"register_region","memory":1,"perm":1,"key":"` + keyHex + `"}`, nil, ctlmsg.CodeBadRequest,
			"not resident: page at offset 0: map the memory and fault every page in before registering it"},
		{"register again", `{"v":1,"op":"register_region","memory":1,"perm":1,"key":"` + keyHex + `"}`, nil, ctlmsg.CodeState, "send create_region first"},
		{"foreign rekey", fmt.Sprintf(`{"v":1,"op":"rekey","region":%d,"key":"%s"}`, gr.ID(), keyHex), nil, ctlmsg.CodeNoRegion, "is not registered by portal \"bad\""},
		{"alloc over cap", `{"v":1,"op":"alloc_slots","n":17}`, nil, ctlmsg.CodeSlotCap, "holds 0 slots and asks for 17 more; its cap is 16"},
		{"identity", `{"v":1,"op":"identity"}`, nil, "", ""},
	}
	rawCases(t, c, tests)
	f.Close()
	if got := openFDs(t); got != fds {
		t.Errorf("the engine kept a passed fd: %d open, had %d", got, fds)
	}
	// Two regions of 1 MB fill the portal's 2 MB.
	rawRegion(t, c, 1<<20, abi.PermAll)
	rawRegion(t, c, 1<<20, abi.PermAll)
	if _, _, err := rawCreate(t, c, 1); err == nil || !strings.Contains(err.Error(), "holds 2097152 region bytes; 1 more would exceed the limit of 2097152 per portal") {
		t.Errorf("beyond the portal's bytes: %v", err)
	}
	// The bystander never noticed.
	good.Submit(&portal.Op{
		Type: portal.OpRead, Slot: gs[0], Cookie: 7,
		Remote: engineIP, RemoteRegion: gr.ID(), Key: kd(gr, good),
		Local: gr, LocalOffset: 64, Length: 64,
	})
	if cpl := waitOne(t, good); cpl.Status != abi.StatusOK {
		t.Fatalf("bystander: %+v", cpl)
	}
	// Three regions per portal.
	bp := dial(t, e, "regions")
	for i := range 4 {
		_, err := bp.RegisterRegion(4096, abi.PermAll)
		if i < 3 && err != nil {
			t.Fatal(err)
		}
		if i == 3 && (!errors.Is(err, portal.ErrLimit) || !strings.Contains(err.Error(), "already holds 3 regions")) {
			t.Fatalf("fourth region: %v", err)
		}
	}
}

// moderate: refused before attach and before doorbell (state), and for
// what the core cannot honour (bad_request), each error precise.
func TestModerateErrors(t *testing.T) {
	// The request's bound is the core's: ctlmsg sits below engine and
	// names it apart.
	if got := time.Duration(ctlmsg.MaxModerationUs) * time.Microsecond; got != engine.MaxModerationPeriod {
		t.Fatalf("ctlmsg.MaxModerationUs is %v, engine.MaxModerationPeriod %v", got, engine.MaxModerationPeriod)
	}
	e := setup(t, nil)
	rawCases(t, rawDial(t, e.sock), []rawCase{
		{"before open", `{"v":1,"op":"moderate","count":4,"period_us":50}`, nil, ctlmsg.CodeState, "no portal open"},
		{"open", `{"v":1,"op":"open","name":"mod"}`, nil, "", ""},
		{"before attach", `{"v":1,"op":"moderate","count":4,"period_us":50}`, nil, ctlmsg.CodeState, "is not attached"},
		{"attach", `{"v":1,"op":"attach"}`, nil, "", ""},
		{"before doorbell", `{"v":1,"op":"moderate","count":4,"period_us":50}`, nil, ctlmsg.CodeState, "has no doorbell (send doorbell first)"},
		{"doorbell", `{"v":1,"op":"doorbell"}`, nil, "", ""},
		{"without period", `{"v":1,"op":"moderate","count":4,"period_us":0}`, nil, ctlmsg.CodeBadRequest, "count 4 needs a period"},
		{"over the ring", `{"v":1,"op":"moderate","count":65536,"period_us":50}`, nil, ctlmsg.CodeBadRequest, "the completion ring's capacity"},
		{"period too long", `{"v":1,"op":"moderate","count":4,"period_us":1001}`, nil, ctlmsg.CodeBadRequest, `key "period_us": 1001 out of range [0, 1000]`},
		{"moderate", `{"v":1,"op":"moderate","count":4,"period_us":50}`, nil, "", ""},
		{"undo", `{"v":1,"op":"moderate","count":1,"period_us":0}`, nil, "", ""},
	})
}

// rawCase is one raw request on a control connection: it succeeds (code
// ""), or fails with code and an error containing msg.
type rawCase struct {
	name, req string
	oob       []byte
	code      ctlmsg.Code
	msg       string
}

// rawCases sends the cases in order on c and checks each answer.
func rawCases(t *testing.T, c *net.UnixConn, cases []rawCase) {
	t.Helper()
	for _, tt := range cases {
		resp, err := rawSend(t, c, []byte(tt.req), tt.oob)
		if tt.code == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil || resp.Code != tt.code || !strings.Contains(resp.Error, tt.msg) {
			t.Errorf("%s: got %v (code %q), want code %q containing %q", tt.name, err, resp.Code, tt.code, tt.msg)
		}
	}
}

func TestServerCloseReclaimsEverything(t *testing.T) {
	e := setup(t, nil)
	maps := shmMaps(t)
	p := dial(t, e, "stays")
	p.AllocSlots(5)
	p.RegisterRegion(4096, abi.PermAll)
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.stats(t).SlotsInUse; got != 0 {
		t.Fatalf("SlotsInUse after Close = %d", got)
	}
	if _, err := p.AllocSlots(1); err == nil {
		t.Fatal("portal still served after server Close")
	}
	p.Close()
	if got := shmMaps(t); got != maps {
		t.Fatalf("%d engine mappings remain, had %d", got, maps)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rmad.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves a dead socket file, like a crashed engine
	drv, err := newLoopDriver(engineConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Stop()
	cfg := ctl.DefaultConfig()
	cfg.Sockets[0].Path = path
	s, err := ctl.Listen(cfg, drv.g, drv.execs(), zerolog.Nop())
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	if _, err := ctl.Listen(cfg, drv.g, drv.execs(), zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "another engine is listening") {
		t.Fatalf("second engine on a live socket: %v", err)
	}
	s.Close()
	os.WriteFile(path, nil, 0o600)
	if _, err := ctl.Listen(cfg, drv.g, drv.execs(), zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file at the socket path: %v", err)
	}
}

func TestHugetlbSharedMemory(t *testing.T) {
	e := setup(t, nil)
	p := dial(t, e, "huge")
	slots, _ := p.AllocSlots(1)
	r, err := p.RegisterRegion(2<<20, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Hugetlb() {
		t.Skip("no free 2 MB huge pages: regions fall back to plain memfds (covered elsewhere)")
	}
	if !p.Hugetlb() {
		t.Error("region got huge pages but the portal segment did not")
	}
	if len(r.Bytes()) != 2<<20 {
		t.Fatalf("region of %d bytes", len(r.Bytes()))
	}
	fill(r.Bytes()[1<<20:1<<20+4096], 0x42)
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 1,
		Remote: engineIP, RemoteRegion: r.ID(), RemoteOffset: 1 << 20, Key: kd(r, p),
		Local: r, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, p); c.Status != abi.StatusOK || !bytes.Equal(r.Bytes()[:4096], r.Bytes()[1<<20:1<<20+4096]) {
		t.Fatalf("READ within a huge page region: %+v", c)
	}
	// A size that is not a whole number of huge pages gets a plain memfd.
	small, err := p.RegisterRegion(4096, abi.PermAll)
	if err != nil || small.Hugetlb() {
		t.Fatalf("4 KB region: hugetlb %v, %v", small != nil && small.Hugetlb(), err)
	}
}

// TestCorruptRingsIsolated: an application that writes an impossible ring
// index gets its portal closed by the core; the core may then give the same
// portal id to the next application. The first connection's later requests
// and its reclaim must not touch the newcomer's portal.
func TestCorruptRingsIsolated(t *testing.T) {
	e := setup(t, nil)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: e.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seg, l, _ := rawOpen(t, c, "corrupt")
	// A region registered before the corruption, to rekey after it.
	reg, _ := rawRegion(t, c, 4096, abi.PermAll)
	// The command ring's producer index jumps far past its capacity.
	binary.LittleEndian.PutUint32(seg[l.CmdOff:], l.CmdCap*3+5)
	enginetest.Eventually(t, "the core to close the corrupt portal", func() bool { return e.stats(t).RingsCorrupt == 1 })

	victim := dial(t, e, "victim")
	if _, err := victim.AllocSlots(4); err != nil {
		t.Fatal(err)
	}
	vr, err := victim.RegisterRegion(4096, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	if got := victim.Layout().Portal; got != l.Portal {
		t.Logf("the core did not reuse portal id %d (got %d): isolation still checked", l.Portal, got)
	}
	mem, _, err := rawCreate(t, c, 4096) // the memory is the connection's, the portal's is gone
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{
		`{"v":1,"op":"alloc_slots","n":1}`,
		fmt.Sprintf(`{"v":1,"op":"register_region","memory":%d,"perm":31,"key":"%s"}`, mem, keyHex),
		fmt.Sprintf(`{"v":1,"op":"rekey","region":%d,"key":"%s"}`, reg.Region, keyHex),
	} {
		r, err := rawSend(t, c, []byte(req), nil)
		if err == nil || r.Code != ctlmsg.CodeState || !strings.Contains(r.Error, "impossible ring indices") {
			t.Errorf("%s on a core-closed portal: %v", req, err)
		}
	}
	c.Close()
	enginetest.Eventually(t, "the corrupt connection to go", func() bool { return e.srv.Conns() == 1 })
	if got := e.stats(t).SlotsInUse; got != 4 {
		t.Fatalf("SlotsInUse = %d, want the victim's 4", got)
	}
	s, _ := victim.Slot()
	if err := victim.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 1,
		Remote: engineIP, RemoteRegion: vr.ID(), Key: kd(vr, victim),
		Local: vr, LocalOffset: 64, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if cpl := waitOne(t, victim); cpl.Status != abi.StatusOK {
		t.Fatalf("victim after the corrupt portal's reclaim: %+v", cpl)
	}
}

// readWith reads 64 bytes of src into sink at sinkOff with key k and
// returns the completion.
func readWith(t *testing.T, cli *portal.Portal, src *portal.Region, k aesni.Key, sink *portal.Region, sinkOff uint64) abi.Completion {
	t.Helper()
	s, ok := cli.Slot()
	if !ok {
		t.Fatal("no free slot")
	}
	if err := cli.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: sinkOff,
		Remote: engineIP, RemoteRegion: src.ID(), Key: k,
		Local: sink, LocalOffset: sinkOff, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	c := waitOne(t, cli)
	cli.Release(c.Slot)
	return c
}

// TestWrongKeyRefused: a K_d derived for another PID, another address or
// from another region's key is refused with REMOTE_AUTHENTICATION_FAILURE
// and writes nothing; the right one reads.
func TestWrongKeyRefused(t *testing.T) {
	e := setup(t, nil)
	own := dial(t, e, "owner")
	kr := aesni.Key{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	src, err := own.RegisterRegionKey(4096, abi.PermRemoteRead, kr)
	if err != nil {
		t.Fatal(err)
	}
	if src.Key() != kr {
		t.Fatal("Key() is not the registered key")
	}
	other, err := own.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if other.Key() == (aesni.Key{}) || other.Key() == kr {
		t.Fatal("RegisterRegion did not draw a fresh key")
	}
	fill(src.Bytes(), 0x3c)
	cli := dial(t, e, "reader")
	cli.AllocSlots(2)
	sink, _ := cli.RegisterRegion(4096, abi.PermLocalWrite)
	id := cli.Identity()
	base := e.stats(t)
	for name, k := range map[string]aesni.Key{
		"other pid":    src.DeriveKey(id.Addr, id.PID+1, abi.OpRead),
		"other addr":   src.DeriveKey(netip.MustParseAddr("10.9.0.2"), id.PID, abi.OpRead),
		"other op":     src.DeriveKey(id.Addr, id.PID, abi.OpWrite),
		"other region": other.DeriveKey(id.Addr, id.PID, abi.OpRead),
		"K_r itself":   kr,
	} {
		if c := readWith(t, cli, src, k, sink, 0); c.Status != abi.StatusRemoteAuthFailure {
			t.Errorf("%s: %+v, want REMOTE_AUTHENTICATION_FAILURE", name, c)
		}
	}
	if !bytes.Equal(sink.Bytes(), make([]byte, 4096)) {
		t.Fatal("a refused read wrote the sink")
	}
	st := e.stats(t)
	if got := st.ReqAuthFailed - base.ReqAuthFailed; got != 5 {
		t.Errorf("ReqAuthFailed +%d, want +5", got)
	}
	if c := readWith(t, cli, src, kd(src, cli), sink, 0); c.Status != abi.StatusOK || !bytes.Equal(sink.Bytes()[:64], src.Bytes()[:64]) {
		t.Fatalf("right key: %+v", c)
	}
	if _, err := own.RegisterRegionKey(4096, abi.PermAll, aesni.Key{}); !errors.Is(err, portal.ErrZeroKey) {
		t.Errorf("zero key registered: %v", err)
	}
}

// TestRekey: after a local rekey, keys derived from the old K_r fail and
// keys from the new one read; the owner's other region is untouched.
func TestRekey(t *testing.T) {
	e := setup(t, nil)
	own := dial(t, e, "owner")
	src, _ := own.RegisterRegion(4096, abi.PermRemoteRead)
	keep, _ := own.RegisterRegion(4096, abi.PermRemoteRead)
	fill(src.Bytes(), 1)
	fill(keep.Bytes(), 2)
	cli := dial(t, e, "reader")
	cli.AllocSlots(2)
	sink, _ := cli.RegisterRegion(8192, abi.PermLocalWrite)
	oldKd, keepKd := kd(src, cli), kd(keep, cli)
	if c := readWith(t, cli, src, oldKd, sink, 0); c.Status != abi.StatusOK {
		t.Fatalf("before rekey: %+v", c)
	}
	base := e.stats(t)
	nk := aesni.Key{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xbb}
	if err := own.Rekey(src, nk); err != nil {
		t.Fatal(err)
	}
	if src.Key() != nk {
		t.Fatal("Key() after Rekey is not the new key")
	}
	if c := readWith(t, cli, src, oldKd, sink, 0); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("old K_d after rekey: %+v", c)
	}
	newKd := kd(src, cli)
	if newKd == oldKd {
		t.Fatal("K_d did not change")
	}
	if c := readWith(t, cli, src, newKd, sink, 0); c.Status != abi.StatusOK || !bytes.Equal(sink.Bytes()[:64], src.Bytes()[:64]) {
		t.Fatalf("new K_d: %+v", c)
	}
	if c := readWith(t, cli, keep, keepKd, sink, 4096); c.Status != abi.StatusOK || !bytes.Equal(sink.Bytes()[4096:4096+64], keep.Bytes()[:64]) {
		t.Fatalf("the other region after rekey: %+v", c)
	}
	if st := e.stats(t); st.Rekeys-base.Rekeys != 1 || st.ReqAuthFailed-base.ReqAuthFailed != 1 {
		t.Errorf("Rekeys +%d ReqAuthFailed +%d, want +1 +1", st.Rekeys-base.Rekeys, st.ReqAuthFailed-base.ReqAuthFailed)
	}
	// Refusals.
	if err := own.Rekey(src, aesni.Key{}); !errors.Is(err, portal.ErrZeroKey) || src.Key() != nk {
		t.Errorf("zero key: %v", err)
	}
	if err := cli.Rekey(src, nk); !errors.Is(err, portal.ErrRegion) {
		t.Errorf("another portal's region: %v", err)
	}
	if err := own.DeregisterRegion(keep); err != nil {
		t.Fatal(err)
	}
	if err := own.Rekey(keep, nk); !errors.Is(err, portal.ErrRegion) {
		t.Errorf("deregistered region: %v", err)
	}
	// Raw: a region this connection's portal does not hold.
	if _, err := rawRoundTrip(t, e.sock, "x", fmt.Sprintf(`{"v":1,"op":"rekey","region":%d,"key":"%s"}`, src.ID(), keyHex)); err == nil ||
		!strings.Contains(err.Error(), "no portal open") {
		t.Errorf("rekey without a portal: %v", err)
	}
}

// syncBuffer is a log sink shared by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKeysNeverLogged: with logging at its most verbose, neither register,
// rekey, nor any refused request carrying a key puts the key (or any 8
// hex digits of it) in the log or in the error a client gets.
func TestKeysNeverLogged(t *testing.T) {
	var logBuf syncBuffer
	e := setupLog(t, nil, zerolog.New(&logBuf).Level(zerolog.TraceLevel))
	own := dial(t, e, "owner")
	kr := aesni.Key{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0} // keyHex
	r, err := own.RegisterRegionKey(4096, abi.PermAll, kr)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Rekey(r, kr); err != nil {
		t.Fatal(err)
	}
	var errs []string
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: e.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, req := range []string{
		`{"v":1,"op":"rekey","region":1,"key":"` + keyHex + `"}`, // before open
		`{"v":1,"op":"open","name":"prober"}`,
		`{"v":1,"op":"rekey","region":` + fmt.Sprint(uint32(r.ID())) + `,"key":"` + keyHex + `"}`, // foreign
		`{"v":1,"op":"rekey","region":1,"key":"` + strings.ToUpper(keyHex) + `"}`,
		`{"v":1,"op":"rekey","region":1,"key":"` + keyHex[:31] + `"}`,
		`{"v":1,"op":"rekey","region":1,"key":"` + keyHex + `0"}`,
		`{"v":1,"op":"rekey","region":1,"key":"` + keyHex + `","key":"` + keyHex + `"}`,
		`{"v":1,"op":"stats","key":"` + keyHex + `"}`,
		`{"v":1,"op":"register_region","size":1099511627777,"perm":1,"key":"` + keyHex + `"}`,
		`{"v":1,"op":"register_region","size":64,"perm":0,"key":"` + keyHex + `"}`,
		`{"v":1,"op":"register_region","size":64,"perm":1,"key":"` + keyHex + `"`,
		`{"v":1,"op":"register_region","size":64,"perm":1,"key":"` + keyHex + `"}` + strings.Repeat(" ", ctlmsg.MaxRequestBytes),
		`{"v":1,"op":"register_region","size":64,"perm":1,"key":"` + keyHex + `"} trailing`,
	} {
		if _, err := rawSend(t, c, []byte(req), nil); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) != 12 {
		t.Errorf("%d refusals, want 12: %q", len(errs), errs)
	}
	own.Close()
	c.Close()
	enginetest.Eventually(t, "connections gone", func() bool { return e.srv.Conns() == 0 })
	logged := logBuf.String()
	if !strings.Contains(logged, "region rekeyed") || !strings.Contains(logged, "rekey") {
		t.Errorf("the log does not show the requests at all:\n%s", logged)
	}
	for _, text := range append(errs, logged) {
		low := strings.ToLower(text)
		for i := 0; i+8 <= len(keyHex); i++ {
			if strings.Contains(low, keyHex[i:i+8]) {
				t.Fatalf("key digits %s at %d shown in:\n%s", keyHex[i:i+8], i, text)
			}
		}
	}
}
