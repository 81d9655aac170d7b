package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	pat "github.com/onerma/onerma/internal/pattern"
	"github.com/onerma/onerma/internal/rawnet"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
	"github.com/onerma/onerma/wire"
)

// TestHostileDatapath runs issue 28's data-path attacks from a hostile
// tenant, uid 2011, against real engines, beside a victim tenant, uid
// 2012, whose application on engine A keeps hdpVictimOps verified READs
// and WRITEs in flight all along against a region the victim owns on
// engine B: READs of its first half checked against internal/pattern,
// WRITEs into its second half, each read back and checked. Three
// engines (A 10.98.28.1, B .2, C .3) on net_tap ports joined by a Linux
// bridge (testbed.TapLAN); every application is a process of its
// tenant's uid; where an attack needs frames no application can send,
// the test injects them on B's link (an AF_PACKET socket on B's tap: the
// engine receives them as from the wire), sealed with K_d the hostile
// tenant derives from the K_r of its own region on B, for any address.
//
//   - Window: on A, the hostile tenant keeps 128 READs posted to an
//     on-link address that never answers (a static neighbour entry, no
//     host behind it) and 64 high-class READs in flight to its own
//     region on B. Its ops to the dead address hold at most its share
//     of A's window (share_waits, share_dispatch_timeouts on its row);
//     the victim's low-class ops are never delayed to DISPATCH_TIMEOUT,
//     and its row shows no wait for its share.
//   - ServingSide: on B, WRITE requests for the hostile tenant's region
//     forged from A's address (the victim's engine: 96 at once, then a
//     steady stream), and from phantom addresses whose pulls the test
//     answers with one chunk of data, every other one, and never the
//     rest; READ requests from both. The hostile owner's row shows its
//     requests NACKed at its owner's and its sender's bounds and its
//     writes deferred for pull contexts; the victim owner's row shows
//     nothing refused or deferred, and the victim's ops, from the same
//     address A, complete OK, none NACKed.
//   - ReplayWindows: on B, READ requests for the hostile region with A
//     as source and IV address on A's lane, counters 2^40 ahead; requests
//     whose IV names another address than their source (either way
//     round); 16 lanes minted from one address (replay_lanes_per_sender
//     4 on B) and 320 new addresses' lanes. Exactly the forged IVs are
//     counted iv_mismatch, and the lanes beyond the cap
//     replay_lanes_refused, on the hostile owner's row; the hostile
//     owner's own windows are evicted, never the victim owner's, and a
//     victim request captured before is still dropped as a replay when
//     injected again afterwards (no answer).
//   - Neighbors: on A, the hostile tenant's ops cycle through 128 unused
//     on-link addresses. Its ops beyond neighbors_per_tenant incomplete
//     entries end UNREACHABLE at once (neighbor_refused on its row); the
//     victim's first op to engine C, a neighbour A has never resolved,
//     completes OK; A's ARP requests, counted by A and on its link, stay
//     within arp_burst + arp_rate × time (arp_rate 200, burst 32 on A),
//     and some were deferred (arp_rate_limited).
//
// Through all of it the victim loses nothing: every op it posted gets
// exactly one completion, each OK, every byte checked, and its region's
// first half is the owner's pattern at the end. Engines run in backoff
// poll mode with the relaxed timeouts (DISPATCH_TIMEOUT 500 ms, TIMEOUT
// 1 s): the assertions are outcomes and counters, none is timed.
func TestHostileDatapath(t *testing.T) {
	needEngines(t)
	b := newHDPBed(t)
	run := func(name string, fn func(*testing.T)) {
		if !t.Failed() {
			t.Run(name, fn)
		}
	}
	run("Window", b.attackWindow)
	run("ServingSide", b.attackServing)
	run("ReplayWindows", b.attackReplay)
	run("Neighbors", b.attackNeighbors)
	b.finish(t)
}

const (
	hdpHostileUID = 2011
	hdpVictimUID  = 2012
	hdpHostile    = "main uid 2011"
	hdpVictim     = "main uid 2012"

	hdpVictimOps = 12              // the victim's ops in flight
	hdpPhase     = 3 * time.Second // how long each attack runs
	hdpVRegion   = 256 << 10       // the victim's region on B
	hdpHRegion   = 64 << 10        // the hostile tenant's region on B
	hdpCRegion   = 64 << 10        // the victim's region on C
	hdpPID       = 4242            // the PID of the requests the test forges

	// Engine B's serving-side bounds and engine A's ARP bound.
	hdpNackThreshold = 256
	hdpInOwner       = 128
	hdpInSender      = 64
	hdpLanes         = 4
	hdpARPRate       = 200
	hdpARPBurst      = 32
)

var (
	hdpBase   = netip.MustParseAddr("10.98.28.1")
	hdpDead   = netip.MustParseAddr("10.98.28.99")     // a static neighbour of A's: no host behind it
	hdpUnused = netip.MustParseAddr("10.98.28.100")    // the first of 128 on-link addresses nobody has
	hdpMACX   = wire.MAC{0x02, 0x89, 0, 0, 0x1c, 0x66} // the attacker's port on the bridge
)

// hdpPhantom is phantom source address k: on no host; its answers come to
// the attacker's MAC.
func hdpPhantom(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 98, 29 + byte(k>>8), byte(k)})
}

type hdpBed struct {
	lan     *testbed.TapLAN
	a, b, c *testbed.Engine
	ipA     netip.Addr
	macA    wire.MAC
	epB     rawnet.Endpoint
	tapA    string        // A's tap interface
	tapB    *rawnet.Port  // B's link: frames injected here reach B as from the wire
	atk     *rawnet.Port  // the attacker's port on the bridge
	bin     string        // the test binary, where every uid may run it
	procs   []*htProc     // the applications
	victim  *htProc       // the victim's application on A
	vOwner  *htProc       // the victim's regions on B and C
	wApp    *htProc       // the hostile tenant's ops on A (Window)
	nApp    *htProc       // the hostile tenant's ops on A (Neighbors)
	rh      abi.RegionID  // the hostile region on B
	krH     aesni.Key     // its K_r, which the hostile tenant holds
	rv      abi.RegionID  // the victim's region on B
	ctr     atomic.Uint64 // the attacker's IV counters
	tags    atomic.Uint64
	kdMu    sync.Mutex
	kd      map[[5]byte]aesni.Key // K_d the attacker derived, by address and op
	synced  uint64                // the victim's ops completed at its last sync
	started time.Time
}

func newHDPBed(t *testing.T) *hdpBed {
	b := &hdpBed{kd: map[[5]byte]aesni.Key{}, started: time.Now()}
	// The applications must reach the sockets and run the test binary.
	dir, err := os.MkdirTemp("", "onerma-e2e-hdp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	b.bin = filepath.Join(dir, "e2e.test")
	if bs, err := os.ReadFile(self); err != nil || os.WriteFile(b.bin, bs, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	passwd, subuid := filepath.Join(dir, "passwd"), filepath.Join(dir, "subuid")
	os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nhostile:x:2011:2011::/home/hostile:/bin/sh\nvictim:x:2012:2012::/home/victim:/bin/sh\n"), 0o644)
	os.WriteFile(subuid, nil, 0o644)
	ctl := fmt.Sprintf(`"ctl": {"passwd_file": %q, "subuid_file": %q,
    "slot_policy": {"default": 256, "default_class": "low", "rules": [{"uid": %d, "class": "high", "max_slots": 256}]}}`,
		passwd, subuid, hdpHostileUID)
	tag := strconv.Itoa(os.Getpid() % 1000)
	lan, err := testbed.NewTapLAN("hdp"+tag, 3, hdpBase)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("cannot build the bridge:", err)
	}
	b.lan = lan
	t.Cleanup(lan.Close) // after the engines (cleanups run last first)
	deadMAC := fmt.Sprintf("02:4c:%02x:%02x:%02x:%02x", 10, 98, 28, 99)
	configs := []string{
		// A: the dead destination's static entry, the ARP rate bound.
		fmt.Sprintf(`{"engine": {"neighbors": [{"ip": %q, "mac": %q}], "arp_rate": %d, "arp_burst": %d, "resolve_timeout": "500ms"}, %s}`,
			hdpDead, deadMAC, hdpARPRate, hdpARPBurst, ctl),
		// B: a NACK threshold the attacks reach, the bounds below it.
		fmt.Sprintf(`{"engine": {"nack_threshold": %d, "inbound_per_owner": %d, "inbound_per_sender": %d, "replay_lanes_per_sender": %d}, %s}`,
			hdpNackThreshold, hdpInOwner, hdpInSender, hdpLanes, ctl),
		fmt.Sprintf(`{%s}`, ctl),
	}
	var engines []*testbed.Engine
	for i, c := range configs {
		cfg := filepath.Join(dir, fmt.Sprintf("rmad-%d.json", i))
		os.WriteFile(cfg, []byte(c), 0o644)
		o := lan.Options(i, rmadBin, dir)
		o.Extra = append(append(o.Extra, relaxed...), "-config", cfg)
		engines = append(engines, start(t, o))
		if err := lan.Attach(i); err != nil {
			t.Fatal(err)
		}
	}
	b.a, b.b, b.c = engines[0], engines[1], engines[2]
	b.ipA, b.tapA = lan.Hosts[0].Addr, lan.Hosts[0].Iface
	b.macA = hdpMAC(t, lan.Hosts[0].MAC)
	b.epB = rawnet.Endpoint{MAC: hdpMAC(t, lan.Hosts[1].MAC), IP: lan.Hosts[1].Addr, Port: atkPort}

	// The attacker's port: a veth on the bridge, whose far end the
	// attacker's raw socket is bound to.
	vb, vx := "hdp"+tag+"v", "hdp"+tag+"w"
	exec.Command("ip", "link", "del", vb).Run()
	t.Cleanup(func() { exec.Command("ip", "link", "del", vb).Run() })
	for _, s := range [][]string{
		{"ip", "link", "add", vb, "type", "veth", "peer", "name", vx},
		{"ip", "link", "set", vb, "master", lan.Bridge},
		{"sysctl", "-qw", "net.ipv6.conf." + vb + ".disable_ipv6=1"},
		{"sysctl", "-qw", "net.ipv6.conf." + vx + ".disable_ipv6=1"},
		{"ip", "link", "set", vb, "up"},
		{"ip", "link", "set", vx, "up"},
	} {
		if err := atkRun(s...); err != nil {
			t.Fatal(err)
		}
	}
	if b.tapB, err = rawnet.Open(lan.Hosts[1].Iface); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.tapB.Close() })
	if b.atk, err = rawnet.Open(vx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.atk.Close() })

	// The tenants' applications: the owners first.
	hOwner := b.start(t, hdpHostileUID, "owner", "ONERMA_E2E_HDP_REGIONS="+fmt.Sprintf("%s,%d,rw", b.b.Socket, hdpHRegion))
	b.vOwner = b.start(t, hdpVictimUID, "owner", "ONERMA_E2E_HDP_REGIONS="+
		fmt.Sprintf("%s,%d,rw;%s,%d,r", b.b.Socket, hdpVRegion, b.c.Socket, hdpCRegion))
	var krV, krC aesni.Key
	var rc abi.RegionID
	b.rh, b.krH = hdpRegionLine(t, hOwner.line("region"))
	b.rv, krV = hdpRegionLine(t, b.vOwner.line("region"))
	rc, krC = hdpRegionLine(t, b.vOwner.line("region"))
	hOwner.line("ready")
	b.vOwner.line("ready")

	// The attacker's first frame teaches the bridge where its MAC is: a
	// request under a random key, which B answers to it.
	b.tags.Store(0xfeed << 48)
	b.ctr.Store(1 << 30)
	var junk aesni.Key
	binary.LittleEndian.PutUint64(junk[:8], rand.Uint64()|1)
	req := b.request(wire.TypeReadReq, hdpPhantom(1), hdpMACX, hdpPhantom(1), b.ctr.Add(1), b.rh, 0, 64, junk)
	inject(t, b.atk, req)
	if _, err := b.atk.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == tagOf(req) })); err != nil {
		t.Fatal("no answer to the attacker's first request:", err)
	}

	// The victim's application on A, and the hostile tenant's.
	b.victim = b.start(t, hdpVictimUID, "victim", "ONERMA_E2E_HDP_SOCK="+b.a.Socket)
	vAddr, vPID := hdpIdentity(t, b.victim.line("ready"))
	if vAddr != b.ipA {
		t.Fatalf("the victim's identity names %v, not engine A", vAddr)
	}
	kd := func(kr aesni.Key, addr netip.Addr, pid uint32, op abi.Op) string {
		k := aesni.DeriveKey(kr, addr.As4(), pid, uint8(op))
		return hex.EncodeToString(k[:])
	}
	b.victim.send("keys %s %d %d %s %s %s %d %d %s", lan.Hosts[1].Addr, b.rv, hdpVRegion, kd(krV, vAddr, vPID, abi.OpRead), kd(krV, vAddr, vPID, abi.OpWrite),
		lan.Hosts[2].Addr, rc, hdpCRegion, kd(krC, vAddr, vPID, abi.OpRead))
	b.victim.send("go")
	b.wApp = b.start(t, hdpHostileUID, "window", "ONERMA_E2E_HDP_SOCK="+b.a.Socket)
	wAddr, wPID := hdpIdentity(t, b.wApp.line("ready"))
	b.wApp.send("keys %s %d %s %s", lan.Hosts[1].Addr, b.rh, kd(b.krH, wAddr, wPID, abi.OpRead), hdpDead)
	b.nApp = b.start(t, hdpHostileUID, "neighbors", "ONERMA_E2E_HDP_SOCK="+b.a.Socket)
	b.nApp.line("ready")
	b.sync(t, "before the attacks")
	t.Logf("set-up %v: engines A %v, B %v, C %v; the victim (uid %d, PID %d) keeps %d verified ops in flight to B",
		time.Since(b.started).Round(time.Millisecond), b.ipA, lan.Hosts[1].Addr, lan.Hosts[2].Addr, hdpVictimUID, vPID, hdpVictimOps)
	return b
}

func hdpMAC(t *testing.T, s string) wire.MAC {
	t.Helper()
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		t.Fatalf("MAC %q: %v", s, err)
	}
	return wire.MAC(hw)
}

// hdpRegionLine parses "region I ID K_R".
func hdpRegionLine(t *testing.T, f []string) (abi.RegionID, aesni.Key) {
	t.Helper()
	id, err := strconv.ParseUint(f[2], 10, 32)
	kb, err2 := hex.DecodeString(f[3])
	var kr aesni.Key
	if err != nil || err2 != nil || copy(kr[:], kb) != len(kr) {
		t.Fatalf("region line %q", f)
	}
	return abi.RegionID(id), kr
}

// hdpIdentity parses "ready ADDR PID".
func hdpIdentity(t *testing.T, f []string) (netip.Addr, uint32) {
	t.Helper()
	addr, err := netip.ParseAddr(f[1])
	pid, err2 := strconv.ParseUint(f[2], 10, 32)
	if err != nil || err2 != nil {
		t.Fatalf("identity line %q", f)
	}
	return addr, uint32(pid)
}

// start runs the test binary as uid in role (hdpChild).
func (b *hdpBed) start(t *testing.T, uid uint32, role string, env ...string) *htProc {
	t.Helper()
	cmd := exec.Command(b.bin, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "ONERMA_E2E_HDP="+role), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &htProc{t: t, who: fmt.Sprintf("%s, uid %d", role, uid), cmd: cmd, in: in, lines: make(chan string, 256)}
	go func() {
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(h.lines)
				return
			}
			h.lines <- strings.TrimSuffix(l, "\n")
		}
	}()
	t.Cleanup(func() { h.once.Do(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() }) })
	b.procs = append(b.procs, h)
	return h
}

// hdpUntil returns the fields of h's next line beginning with prefix, and
// the "fail" lines it said before it (what went wrong, as it happened);
// lines beginning with a word of skip are passed over.
func hdpUntil(t *testing.T, h *htProc, prefix string, skip ...string) (f []string, fails []string) {
	t.Helper()
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("%s: exited (%v), want %q; failures before: %q", h.who, h.wait(), prefix, fails)
			}
			switch w, _, _ := strings.Cut(l, " "); {
			case w == prefix:
				return strings.Fields(l), fails
			case w == "fail":
				fails = append(fails, l)
			case slices.Contains(skip, w):
			default:
				t.Fatalf("%s: %q, want %q", h.who, l, prefix)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: nothing said for a minute, want %q", h.who, prefix)
		}
	}
}

// sync drains the victim's ops (every one posted has its completion) and
// fails the test if any of them failed.
func (b *hdpBed) sync(t *testing.T, when string) {
	t.Helper()
	b.victim.send("sync")
	f, fails := hdpUntil(t, b.victim, "sync")
	b.checkVictim(t, when, f, fails)
}

// checkVictim checks the victim's report "sync|done POSTED COMPLETED
// READS WRITES FAILS".
func (b *hdpBed) checkVictim(t *testing.T, when string, f []string, fails []string) {
	t.Helper()
	var n [5]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[1+i], 10, 64)
		if err != nil {
			t.Fatalf("the victim's report %q", f)
		}
		n[i] = v
	}
	posted, completed, reads, writes, failed := n[0], n[1], n[2], n[3], n[4]
	if len(fails) > 0 || failed != 0 {
		if len(fails) > 8 {
			fails = append(fails[:8], "...")
		}
		t.Fatalf("%s: %d of the victim's ops failed: %s", when, failed, strings.Join(fails, "; "))
	}
	if posted != completed {
		t.Fatalf("%s: the victim posted %d ops, %d completed", when, posted, completed)
	}
	if completed <= b.synced {
		t.Fatalf("%s: the victim completed no op since its last report (%d in all)", when, completed)
	}
	t.Logf("%s: the victim's ops: %d completed OK since the last report (%d in all: %d verified READs, %d WRITEs read back), each completed once",
		when, completed-b.synced, completed, reads, writes)
	b.synced = completed
}

// ctlStats asks engine e for its stats as the operator (root), on a
// control connection that opens no portal (root takes no share of the
// window).
func ctlStats(t *testing.T, e *testbed.Engine) *ctlmsg.Stats {
	t.Helper()
	c, err := htDial(e.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.uc.Close()
	for try := 0; ; try++ {
		resp, _, err := c.do(`{"v":1,"op":"stats"}`)
		switch {
		case err != nil:
			t.Fatalf("stats of %s: %v", e.Opt.Name, err)
		case resp.Stats != nil:
			return resp.Stats
		case resp.Code != ctlmsg.CodeLimit || try == 100:
			t.Fatalf("stats of %s: %s %s", e.Opt.Name, resp.Code, resp.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// datapath is tenant name's data-path counters in st (zero: none).
func datapath(st *ctlmsg.Stats, name string) ctlmsg.TenantDatapath {
	if ts := tenant(st, name); ts.Datapath != nil {
		return *ts.Datapath
	}
	return ctlmsg.TenantDatapath{}
}

// kdOf is the K_d the hostile tenant derives from its K_r for requests
// of op from addr (PID hdpPID).
func (b *hdpBed) kdOf(addr netip.Addr, op abi.Op) aesni.Key {
	a := addr.As4()
	k := [5]byte{a[0], a[1], a[2], a[3], byte(op)}
	b.kdMu.Lock()
	defer b.kdMu.Unlock()
	kd, ok := b.kd[k]
	if !ok {
		kd = aesni.DeriveKey(b.krH, a, hdpPID, uint8(op))
		b.kd[k] = kd
	}
	return kd
}

// request builds a request of type typ for region rid from src (at
// srcMAC) to B, with IV ivAddr ‖ ctr, sealed with kd.
func (b *hdpBed) request(typ wire.Type, src netip.Addr, srcMAC wire.MAC, ivAddr netip.Addr, ctr uint64, rid abi.RegionID, off uint64, length uint32, kd aesni.Key) []byte {
	tag := b.tags.Add(1)
	f := rawnet.Fields(rawnet.Endpoint{MAC: srcMAC, IP: src, Port: wire.InitiatorPort(uint8(tag), 0)}, b.epB)
	f.Type, f.PID, f.Tag = typ, hdpPID, tag
	f.Region, f.Offset, f.Length = uint32(rid), off, length
	f.IV = rawnet.Nonce(ivAddr, ctr)
	fr := rawnet.Build(&f, 0)
	rawnet.SealRequest(fr, kd)
	return fr
}

// forged is a request of the hostile tenant for its own region from src
// (at srcMAC), IV src ‖ a fresh counter: it authenticates, whatever src.
func (b *hdpBed) forged(typ wire.Type, src netip.Addr, srcMAC wire.MAC, length uint32) []byte {
	op := abi.OpRead
	if typ == wire.TypeWriteReq {
		op = abi.OpWrite
	}
	off := uint64(b.tags.Load()%16) * 4096
	return b.request(typ, src, srcMAC, src, b.ctr.Add(1), b.rh, off, length, b.kdOf(src, op))
}

// attackWindow: a full window of READs to a destination that never answers,
// beside saturating READs to B, from the hostile tenant on the victim's
// engine.
func (b *hdpBed) attackWindow(t *testing.T) {
	s0 := ctlStats(t, b.a)
	b.wApp.send("go")
	time.Sleep(hdpPhase)
	b.sync(t, "beside a full window of the hostile tenant's to a dead destination")
	b.wApp.send("stop")
	f, fails := hdpUntil(t, b.wApp, "done")
	if len(fails) > 0 {
		t.Fatalf("the hostile tenant's ops: %q", fails)
	}
	s1 := ctlStats(t, b.a)
	h0, h1 := datapath(s0, hdpHostile), datapath(s1, hdpHostile)
	v0, v1 := datapath(s0, hdpVictim), datapath(s1, hdpVictim)
	t.Logf("the hostile tenant's ops to the dead destination: %s; to its region on B (high class): %s", f[1], f[2])
	t.Logf("A, the hostile tenant: share %d B, share_waits +%d, share_dispatch_timeouts +%d, borrowed +%d; the victim: share %d B, share_waits +%d, share_dispatch_timeouts +%d",
		h1.WindowShare, h1.ShareWaits-h0.ShareWaits, h1.ShareDispatchTimeouts-h0.ShareDispatchTimeouts, h1.Borrowed-h0.Borrowed,
		v1.WindowShare, v1.ShareWaits-v0.ShareWaits, v1.ShareDispatchTimeouts-v0.ShareDispatchTimeouts)
	if !strings.Contains(f[1], "TIMEOUT:") || strings.Contains(f[1], "OK:") {
		t.Fatalf("the hostile tenant's ops to %v ended %s: want TIMEOUT, never OK", hdpDead, f[1])
	}
	if h1.ShareWaits <= h0.ShareWaits || h1.ShareDispatchTimeouts <= h0.ShareDispatchTimeouts {
		t.Fatalf("the hostile tenant's row on A: share_waits %d → %d, share_dispatch_timeouts %d → %d: want both grown",
			h0.ShareWaits, h1.ShareWaits, h0.ShareDispatchTimeouts, h1.ShareDispatchTimeouts)
	}
	if v1.ShareWaits != v0.ShareWaits || v1.ShareDispatchTimeouts != v0.ShareDispatchTimeouts {
		t.Fatalf("the victim's row on A: share_waits %d → %d, share_dispatch_timeouts %d → %d: want none",
			v0.ShareWaits, v1.ShareWaits, v0.ShareDispatchTimeouts, v1.ShareDispatchTimeouts)
	}
	if got := s1.Completed[abi.StatusDispatchTimeout.String()] - s0.Completed[abi.StatusDispatchTimeout.String()]; got == 0 {
		t.Fatalf("no DISPATCH_TIMEOUT on A: the hostile tenant's ops beyond its share did not wait")
	}
}

// attackServing floods B's inbound queue and holds its pull contexts with
// the hostile tenant's requests for its own region, some forged from the
// victim's engine's address.
func (b *hdpBed) attackServing(t *testing.T) {
	s0 := ctlStats(t, b.b)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var pulls, chunks atomic.Int64
	wg.Add(1)
	go func() { // the phantoms' pulls: every other one answered with one chunk, never the rest
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			fs, _ := b.atk.Capture(50*time.Millisecond, 0, fromEngine(func(f *wire.Fields) bool { return f.Type == wire.TypePullReq }))
			for _, fr := range fs {
				p, _, err := rawnet.Parse(fr.Data)
				if err != nil || pulls.Add(1)%2 == 0 {
					continue
				}
				src := rawnet.Addr(p.DstIP)
				d := rawnet.Fields(rawnet.Endpoint{MAC: hdpMACX, IP: src, Port: p.DstPort},
					rawnet.Endpoint{MAC: p.SrcMAC, IP: rawnet.Addr(p.SrcIP), Port: p.SrcPort})
				d.Type, d.PID, d.Tag, d.Region, d.Length = wire.TypeWriteData, p.PID, p.Tag, p.Region, 64
				ctr := b.ctr.Add(1 + aesni.ResponseSpan(p.Length))
				aesni.PutResponseNonce(d.IV[:], src.As4(), ctr, 0)
				data := rawnet.Build(&d, 64)
				rawnet.SealAnswer(data, b.kdOf(src, abi.OpWrite), make([]byte, 64), p.IV[:])
				if b.tapB.Inject(data) == nil {
					chunks.Add(1)
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// At once: WRITEs forged from the victim's engine's address, beyond
	// that sender's bound; their pulls go to A, which knows no such op.
	var burst [][]byte
	for range 96 {
		burst = append(burst, b.forged(wire.TypeWriteReq, b.ipA, b.macA, 4096))
	}
	inject(t, b.tapB, burst...)
	// Then a stream: WRITEs and READs from 8 phantoms and from A.
	sent := len(burst)
	for end, k := time.Now().Add(hdpPhase), 0; time.Now().Before(end); k++ {
		var fs [][]byte
		for i := range 8 {
			fs = append(fs, b.forged(wire.TypeWriteReq, hdpPhantom(16+(k*8+i)%8), hdpMACX, 4096),
				b.forged(wire.TypeReadReq, hdpPhantom(32+(k*8+i)%16), hdpMACX, 64))
		}
		for range 4 {
			fs = append(fs, b.forged(wire.TypeWriteReq, b.ipA, b.macA, 4096), b.forged(wire.TypeReadReq, b.ipA, b.macA, 64))
		}
		inject(t, b.tapB, fs...)
		sent += len(fs)
		time.Sleep(10 * time.Millisecond)
	}
	b.sync(t, "beside the hostile tenant's flood and slow pulls on B")
	s1 := ctlStats(t, b.b)
	h0, h1 := datapath(s0, hdpHostile), datapath(s1, hdpHostile)
	v0, v1 := datapath(s0, hdpVictim), datapath(s1, hdpVictim)
	t.Logf("B: %d requests forged for the hostile region (NACK threshold %d, bounds %d per owner, %d per sender); %d pulls to phantoms, %d answered with a chunk",
		sent, s1.NackThreshold.Threshold, hdpInOwner, hdpInSender, pulls.Load(), chunks.Load())
	t.Logf("B, the hostile owner: nacked +%d, nacked_owner +%d, nacked_sender +%d, pulls_deferred +%d; req_queue_max %d, pulls_expired +%d, req_expired +%d",
		h1.Nacked-h0.Nacked, h1.NackedOwner-h0.NackedOwner, h1.NackedSender-h0.NackedSender, h1.PullsDeferred-h0.PullsDeferred,
		s1.ReqQueueMax, s1.PullsExpired-s0.PullsExpired, s1.ReqExpired-s0.ReqExpired)
	// The chunks answering the slow pulls authenticate (each pull so
	// answered holds its context until TIMEOUT, never idle).
	if got := s1.RxAuthFailed - s0.RxAuthFailed; chunks.Load() == 0 || got != 0 {
		t.Fatalf("%d pulls answered with a chunk, %d frames failing authentication on B", chunks.Load(), got)
	}
	if h1.NackedOwner <= h0.NackedOwner || h1.NackedSender <= h0.NackedSender || h1.PullsDeferred <= h0.PullsDeferred {
		t.Fatalf("the hostile owner's row on B: %+v → %+v: want nacked_owner, nacked_sender and pulls_deferred grown", h0, h1)
	}
	if v1.Nacked != v0.Nacked || v1.NackedOwner != v0.NackedOwner || v1.NackedSender != v0.NackedSender || v1.PullsDeferred != v0.PullsDeferred {
		t.Fatalf("the victim owner's row on B: %+v → %+v: its readers were refused or deferred", v0, v1)
	}
}

// attackReplay: requests as the victim's engine pushing its lane, forged
// IV addresses, lanes minted from one address and from many.
func (b *hdpBed) attackReplay(t *testing.T) {
	// A request of the victim's, captured on B's link.
	b.tapB.Drain()
	capt, err := b.tapB.Expect(5*time.Second, toEngine(func(f *wire.Fields) bool {
		return f.Type == wire.TypeReadReq && rawnet.Addr(f.SrcIP) == b.ipA && f.Region == uint32(b.rv)
	}))
	if err != nil {
		t.Fatal("a request of the victim's on B's link:", err)
	}
	time.Sleep(200 * time.Millisecond) // answered, completed
	s0 := ctlStats(t, b.b)
	var fs [][]byte
	// A's own address, source and IV, on A's lane: counters far ahead.
	for k := range 32 {
		fs = append(fs, b.request(wire.TypeReadReq, b.ipA, b.macA, b.ipA, 1<<40+uint64(k), b.rh, 0, 64, b.kdOf(b.ipA, abi.OpRead)))
	}
	// IV addresses that are not the source's, both ways round.
	const ivForged = 32
	for range ivForged / 2 {
		p := hdpPhantom(64)
		fs = append(fs, b.request(wire.TypeReadReq, p, hdpMACX, b.ipA, b.ctr.Add(1), b.rh, 0, 64, b.kdOf(p, abi.OpRead)),
			b.request(wire.TypeReadReq, b.ipA, b.macA, p, b.ctr.Add(1), b.rh, 0, 64, b.kdOf(b.ipA, abi.OpRead)))
	}
	// 16 lanes from one address.
	const lanes = 16
	one := hdpPhantom(200)
	for lane := range uint64(lanes) {
		fs = append(fs, b.request(wire.TypeReadReq, one, hdpMACX, one, lane<<58|b.ctr.Add(1), b.rh, 0, 64, b.kdOf(one, abi.OpRead)))
	}
	inject(t, b.tapB, fs...)
	// A lane of each of 320 new addresses: more than the table of windows.
	for k := range 320 {
		p := hdpPhantom(256 + k)
		inject(t, b.tapB, b.request(wire.TypeReadReq, p, hdpMACX, p, b.ctr.Add(1), b.rh, 0, 64, b.kdOf(p, abi.OpRead)))
		if k%32 == 31 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	var s1 *ctlmsg.Stats
	var h0, h1 ctlmsg.TenantDatapath
	h0 = datapath(s0, hdpHostile)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s1 = ctlStats(t, b.b)
		h1 = datapath(s1, hdpHostile)
		if (h1.IVMismatch-h0.IVMismatch >= ivForged && h1.ReplayLanesRefused-h0.ReplayLanesRefused >= lanes-hdpLanes) || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(100 * time.Millisecond)
	s1 = ctlStats(t, b.b)
	h1 = datapath(s1, hdpHostile)
	v0, v1 := datapath(s0, hdpVictim), datapath(s1, hdpVictim)
	t.Logf("B, the hostile owner: iv_mismatch +%d, replay_lanes_refused +%d, replay_evictions +%d; the engine: req_iv_mismatch +%d, replay_evictions +%d",
		h1.IVMismatch-h0.IVMismatch, h1.ReplayLanesRefused-h0.ReplayLanesRefused, h1.ReplayEvictions-h0.ReplayEvictions,
		s1.ReqIVMismatch-s0.ReqIVMismatch, s1.ReplayEvictions-s0.ReplayEvictions)
	if got := h1.IVMismatch - h0.IVMismatch; got != ivForged || s1.ReqIVMismatch-s0.ReqIVMismatch != ivForged {
		t.Fatalf("%d requests with a forged IV address: the hostile owner's iv_mismatch +%d, the engine's +%d", ivForged, got, s1.ReqIVMismatch-s0.ReqIVMismatch)
	}
	if got := h1.ReplayLanesRefused - h0.ReplayLanesRefused; got != lanes-hdpLanes {
		t.Fatalf("%d lanes from one address, at most %d each: %d refused on the hostile owner's row, want %d", lanes, hdpLanes, got, lanes-hdpLanes)
	}
	if h1.ReplayEvictions == h0.ReplayEvictions {
		t.Fatalf("320 new addresses' lanes evicted none of the hostile owner's windows")
	}
	if v1.ReplayEvictions != v0.ReplayEvictions || v1.IVMismatch != v0.IVMismatch || v1.ReplayLanesRefused != v0.ReplayLanesRefused {
		t.Fatalf("the victim owner's row on B: %+v → %+v: its windows were touched", v0, v1)
	}
	// The victim's captured request is still a replay: dropped, no answer.
	cf := parse(t, capt.Data)
	b.tapB.Drain()
	inject(t, b.tapB, capt.Data)
	if got, _ := b.tapB.Capture(500*time.Millisecond, 1, fromEngine(func(f *wire.Fields) bool { return f.Tag == cf.Tag })); len(got) != 0 {
		t.Fatalf("B answered the victim's request injected again after the lanes were minted: %+v", parse(t, got[0].Data))
	}
	if s2 := ctlStats(t, b.b); s2.ReqReplayed == s1.ReqReplayed {
		t.Fatalf("the victim's request injected again: req_replayed stayed %d", s2.ReqReplayed)
	}
	b.sync(t, "after the pushes, the forged IVs and the minted lanes")
}

// attackNeighbors: the hostile tenant's ops cycle through unused on-link
// addresses while the victim's first op to a new neighbour resolves.
func (b *hdpBed) attackNeighbors(t *testing.T) {
	tap, err := rawnet.Open(b.tapA)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	t0 := time.Now() // the ARP requests counted below are sent after it
	tap.Drain()
	var onWire atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // A's ARP requests on its link
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			fs, _ := tap.Capture(50*time.Millisecond, 0, func(fr *rawnet.Frame) bool {
				var m wire.ARP
				return !fr.Out && wire.DecodeARP(fr.Data, &m) == nil && m.Op == wire.ARPRequest
			})
			onWire.Add(int64(len(fs)))
		}
	}()
	s0 := ctlStats(t, b.a)
	b.nApp.send("go")
	time.Sleep(time.Second)
	b.victim.send("newpeer")
	f, fails := hdpUntil(t, b.victim, "newpeer")
	if len(fails) > 0 {
		t.Fatalf("the victim, with the hostile tenant cycling through unused addresses: %q", fails)
	}
	t.Logf("the victim's first READ of C, a new neighbour: OK after %s ns", f[1])
	time.Sleep(time.Until(t0.Add(hdpPhase)))
	b.nApp.send("stop")
	nf, fails := hdpUntil(t, b.nApp, "done")
	if len(fails) > 0 {
		t.Fatalf("the hostile tenant's ops: %q", fails)
	}
	s1 := ctlStats(t, b.a)
	close(stop)
	<-done
	elapsed := time.Since(t0) // and before now
	h0, h1 := datapath(s0, hdpHostile), datapath(s1, hdpHostile)
	v0, v1 := datapath(s0, hdpVictim), datapath(s1, hdpVictim)
	arp := s1.ARPRequests - s0.ARPRequests
	bound := uint64(hdpARPBurst) + uint64(elapsed.Seconds()*hdpARPRate) + 1
	t.Logf("the hostile tenant's ops to %v and the next 127 addresses: %s; neighbor_refused +%d; A's ARP requests in %v: %d (%d seen on its link), %d deferred by the rate bound (bound %d)",
		hdpUnused, nf[1], h1.NeighborRefused-h0.NeighborRefused, elapsed.Round(time.Millisecond), arp, onWire.Load(), s1.ARPRateLimited-s0.ARPRateLimited, bound)
	if h1.NeighborRefused <= h0.NeighborRefused {
		t.Fatalf("the hostile tenant's row on A: neighbor_refused %d → %d, want grown", h0.NeighborRefused, h1.NeighborRefused)
	}
	if v1.NeighborRefused != v0.NeighborRefused {
		t.Fatalf("the victim's row on A: neighbor_refused %d → %d", v0.NeighborRefused, v1.NeighborRefused)
	}
	if arp > bound || uint64(onWire.Load()) > bound {
		t.Fatalf("A sent %d ARP requests (%d seen on its link) in %v: more than arp_burst %d + arp_rate %d/s", arp, onWire.Load(), elapsed, hdpARPBurst, hdpARPRate)
	}
	if s1.ARPRateLimited == s0.ARPRateLimited {
		t.Fatalf("no ARP request of A's deferred by the rate bound (%d sent in %v)", arp, elapsed)
	}
	b.sync(t, "beside the hostile tenant's ops to unused on-link addresses")
}

// finish stops the victim (every op it posted completed once, OK) and
// checks its region; then the applications exit.
func (b *hdpBed) finish(t *testing.T) {
	if b.victim == nil {
		return
	}
	failed := t.Failed() // a subtest's failure may have left replies unread
	b.victim.send("stop")
	f, fails := hdpUntil(t, b.victim, "done", "sync", "newpeer")
	b.checkVictim(t, "at the end", f, fails)
	b.vOwner.send("check 0")
	if f := b.vOwner.line("checked"); f[2] != "-1" {
		t.Fatalf("the victim's region on B: byte %s of its first half is not the owner's pattern", f[2])
	}
	for _, h := range b.procs {
		if failed {
			h.wait()
		} else {
			h.stop()
		}
	}
	t.Logf("%v in all", time.Since(b.started).Round(time.Millisecond))
}

// ---- the applications ----------------------------------------------------

// hdpChild is an application of TestHostileDatapath: the role named by
// ONERMA_E2E_HDP. It reports by lines on stdout ("fail ..." for each
// failure of an op as it happens, "error ..." when it cannot go on) and
// ends when its stdin closes (the victim and the hostile tenant's ops on
// "stop").
func hdpChild() int {
	in := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			in <- sc.Text()
		}
		close(in)
	}()
	sock := os.Getenv("ONERMA_E2E_HDP_SOCK")
	var err error
	switch role := os.Getenv("ONERMA_E2E_HDP"); role {
	case "owner":
		err = hdpOwner(os.Getenv("ONERMA_E2E_HDP_REGIONS"), in)
	case "victim":
		err = hdpVictimApp(sock, in)
	case "window":
		err = hdpWindowApp(sock, in)
	case "neighbors":
		err = hdpNeighborsApp(sock, in)
	default:
		err = fmt.Errorf("no role %q", role)
	}
	if err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

// hdpOwner registers the regions spec names ("SOCKET,SIZE,rw|r;..."),
// each filled with the pattern, and says "region I ID K_R" for each;
// "check I" says "checked I OFF", OFF the first byte of region I's first
// half that is not the pattern (-1: none).
func hdpOwner(spec string, in <-chan string) error {
	var regions []*portal.Region
	for i, r := range strings.Split(spec, ";") {
		f := strings.Split(r, ",")
		size, _ := strconv.ParseUint(f[1], 10, 64)
		perm := abi.PermRemoteRead
		if f[2] == "rw" {
			perm |= abi.PermRemoteWrite
		}
		p, err := portal.DialOptions(f[0], "owner", portal.Options{WaitSpins: -1})
		if err != nil {
			return err
		}
		defer p.Close()
		rg, err := p.RegisterRegion(size, perm)
		if err != nil {
			return err
		}
		pat.Fill(rg.Bytes(), 0)
		kr := rg.Key()
		htSay("region %d %d %s", i, rg.ID(), hex.EncodeToString(kr[:]))
		regions = append(regions, rg)
	}
	htSay("ready")
	for l := range in {
		var i int
		if _, err := fmt.Sscanf(l, "check %d", &i); err != nil || i >= len(regions) {
			return fmt.Errorf("command %q", l)
		}
		bad := -1
		for off, c := range regions[i].Bytes()[:regions[i].Size()/2] {
			if c != pat.At(uint64(off)) {
				bad = off
				break
			}
		}
		htSay("checked %d %d", i, bad)
	}
	return nil
}

// hdpSizes are the victim's op sizes.
var hdpSizes = []uint32{1, 64, 1000, 1409, 4096, 63, 2817, 4095, 128, 4096}

// hdpWritten is the byte the victim's write number gen puts at offset off.
func hdpWritten(off uint64, gen byte) byte { return ^pat.At(off) ^ gen }

// hdpVictimApp is the victim's application: hdpVictimOps slots, each
// going round a READ of the first half of the victim's region on B
// (checked against the pattern), a WRITE into a range of the second half
// of its own, and a READ of that range back (checked against what it
// wrote). Each op's completion is checked: one per op posted, OK, its
// slot and length, its bytes. Commands: "sync" (drain, say "sync POSTED
// COMPLETED READS WRITES FAILS", go on), "newpeer" (one READ of the
// region on C, said "newpeer TOTAL_DELAY_NS" once checked), "stop" (drain,
// say "done ..." likewise, end).
func hdpVictimApp(sock string, in <-chan string) error {
	p, err := portal.DialOptions(sock, "victim", portal.Options{WaitSpins: -1})
	if err != nil {
		return err
	}
	defer p.Close()
	slots, err := p.AllocSlots(hdpVictimOps + 1) // the last: the new neighbour's
	if err != nil {
		return err
	}
	sink, err := p.RegisterRegion(uint64(len(slots))*4096, abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		return err
	}
	src, err := p.RegisterRegion(hdpVictimOps*4096, abi.PermLocalRead|abi.PermLocalWrite)
	if err != nil {
		return err
	}
	id := p.Identity()
	htSay("ready %s %d", id.Addr, id.PID)
	var (
		peerB, peerC           string
		ridB, sizeB, ridC, szC uint64
		krB, kwB, krC          string
	)
	if _, err := fmt.Sscanf(<-in, "keys %s %d %d %s %s %s %d %d %s", &peerB, &ridB, &sizeB, &krB, &kwB, &peerC, &ridC, &szC, &krC); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	key := func(s string) aesni.Key {
		var k aesni.Key
		b, _ := hex.DecodeString(s)
		copy(k[:], b)
		return k
	}
	b, c := netip.MustParseAddr(peerB), netip.MustParseAddr(peerC)
	kr, kw, kc := key(krB), key(kwB), key(krC)
	if err := htWait(in, "go"); err != nil {
		return err
	}
	type vop struct {
		kind   byte // 'r' read, 'w' write, 'b' read back, 'n' the new neighbour's read
		k      int  // its slot's index
		off    uint64
		n      uint32
		gen    byte
		posted time.Time
	}
	var (
		rng                                             = rand.New(rand.NewPCG(uint64(id.PID), 28))
		half                                            = sizeB / 2
		pending                                         = map[uint64]vop{}
		busy                                            = make([]bool, len(slots))
		step                                            = make([]byte, hdpVictimOps) // the next op of each slot
		gen                                             = make([]byte, hdpVictimOps)
		wOff                                            = make([]uint64, hdpVictimOps)
		wN                                              = make([]uint32, hdpVictimOps)
		cookie, posted, completed, reads, writes, fails uint64
		posting                                         = true
		ending                                          string // "sync" or "done": drain, then say it
	)
	fail := func(format string, args ...any) {
		fails++
		htSay("fail "+format, args...)
	}
	post := func(o vop) error {
		cookie++
		op := portal.Op{Slot: slots[o.k], Cookie: cookie, Local: sink, LocalOffset: uint64(o.k) * 4096, Length: o.n,
			Remote: b, RemoteRegion: abi.RegionID(ridB), RemoteOffset: o.off, Key: kr, Type: portal.OpRead}
		switch o.kind {
		case 'w':
			op.Type, op.Key, op.Local = portal.OpWrite, kw, src
			buf := src.Bytes()[o.k*4096 : o.k*4096+int(o.n)]
			for i := range buf {
				buf[i] = hdpWritten(o.off+uint64(i), o.gen)
			}
		case 'n':
			op.Remote, op.RemoteRegion, op.Key = c, abi.RegionID(ridC), kc
		}
		o.posted = time.Now()
		pending[cookie] = o
		busy[o.k] = true
		posted++
		return p.Post(&op)
	}
	next := func(k int) vop {
		switch step[k] {
		case 1:
			gen[k]++
			n := hdpSizes[rng.IntN(len(hdpSizes))]
			wOff[k], wN[k] = half+uint64(k)*8192+uint64(gen[k])*61%4096, n
			return vop{kind: 'w', k: k, off: wOff[k], n: n, gen: gen[k]}
		case 2:
			return vop{kind: 'b', k: k, off: wOff[k], n: wN[k], gen: gen[k]}
		}
		n := hdpSizes[rng.IntN(len(hdpSizes))]
		return vop{kind: 'r', k: k, off: rng.Uint64N(half - uint64(n)), n: n}
	}
	complete := func(cp *abi.Completion) {
		o, ok := pending[cp.Cookie]
		if !ok {
			fail("a completion for cookie %d, which is not outstanding: %+v", cp.Cookie, *cp)
			return
		}
		delete(pending, cp.Cookie)
		busy[o.k] = false
		completed++
		if cp.Status != abi.StatusOK || cp.Length != o.n || cp.Slot != slots[o.k] {
			fail("%c of %d B at %d: %v (%+v)", o.kind, o.n, o.off, cp.Status, *cp)
			if o.k < hdpVictimOps {
				step[o.k] = 0
			}
			return
		}
		got := sink.Bytes()[o.k*4096 : o.k*4096+int(o.n)]
		switch o.kind {
		case 'r', 'n':
			for i, x := range got {
				if x != pat.At(o.off+uint64(i)) {
					fail("%c of %d B at %d: byte %d is %#x, want %#x", o.kind, o.n, o.off, i, x, pat.At(o.off+uint64(i)))
					break
				}
			}
			if o.kind == 'n' {
				htSay("newpeer %d", cp.TotalDelayNs)
				return
			}
			reads++
			step[o.k] = 1
		case 'w':
			writes++
			step[o.k] = 2
		case 'b':
			for i, x := range got {
				if x != hdpWritten(o.off+uint64(i), o.gen) {
					fail("read back of write %d, %d B at %d: byte %d is %#x, want %#x", o.gen, o.n, o.off, i, x, hdpWritten(o.off+uint64(i), o.gen))
					break
				}
			}
			reads++
			step[o.k] = 0
		}
	}
	cpl := make([]abi.Completion, 32)
	for {
		// Every free slot's next op first: a command that came meanwhile
		// finds ops in flight, and a sync or stop drains them.
		if posting {
			for k := range hdpVictimOps {
				if !busy[k] {
					if err := post(next(k)); err != nil {
						return err
					}
				}
			}
		}
		for more := true; more; {
			select {
			case l, ok := <-in:
				switch {
				case !ok || l == "stop":
					posting, ending = false, "done"
					if !ok {
						in = nil
					}
				case l == "sync":
					posting, ending = false, "sync"
				case l == "newpeer":
					if err := post(vop{kind: 'n', k: hdpVictimOps, off: 4096 + 13, n: 4000}); err != nil {
						return err
					}
				default:
					return fmt.Errorf("command %q", l)
				}
			default:
				more = false
			}
		}
		p.Flush()
		if len(pending) == 0 && ending != "" {
			htSay("%s %d %d %d %d %d", ending, posted, completed, reads, writes, fails)
			if ending == "done" {
				return nil
			}
			posting, ending = true, ""
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		n, err := p.Wait(ctx, cpl)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for i := range cpl[:n] {
			complete(&cpl[i])
		}
		for ck, o := range pending {
			if time.Since(o.posted) > 10*time.Second {
				return fmt.Errorf("op %d (%c of %d B at %d) without a completion for 10 s", ck, o.kind, o.n, o.off)
			}
		}
	}
}

// hdpStatuses counts completions by status: "OK:3,TIMEOUT:5".
type hdpStatuses map[abi.Status]int

func (s hdpStatuses) String() string {
	var parts []string
	for st, n := range s {
		parts = append(parts, fmt.Sprintf("%v:%d", st, n))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// hdpKeep keeps ops in flight on every slot of p until stop is closed,
// then waits for the last ones (at most 10 s), and returns their statuses.
// op fills the k-th op; pause, when set, is slept after a batch of
// completions that ended UNREACHABLE at once.
func hdpKeep(p *portal.Portal, slots []abi.SlotID, op func(k int, o *portal.Op), stop <-chan struct{}, pause time.Duration) (hdpStatuses, error) {
	st := hdpStatuses{}
	posted, k := 0, 0
	postOn := func(s abi.SlotID) error {
		o := portal.Op{Slot: s, Cookie: uint64(k)}
		op(k, &o)
		k++
		posted++
		return p.Post(&o)
	}
	for _, s := range slots {
		if err := postOn(s); err != nil {
			return st, err
		}
	}
	p.Flush()
	cpl := make([]abi.Completion, 64)
	stopping := false
	var deadline time.Time
	for posted > 0 {
		if !stopping {
			select {
			case <-stop:
				stopping, deadline = true, time.Now().Add(10*time.Second)
			default:
			}
		}
		if stopping && time.Now().After(deadline) {
			return st, fmt.Errorf("%d ops without a completion 10 s after stop", posted)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		n, err := p.Wait(ctx, cpl)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return st, err
		}
		refused := false
		for _, c := range cpl[:n] {
			posted--
			st[c.Status]++
			refused = refused || c.Status == abi.StatusUnreachable
			if !stopping {
				if err := postOn(c.Slot); err != nil {
					return st, err
				}
			}
		}
		p.Flush()
		if refused && pause > 0 {
			time.Sleep(pause)
		}
	}
	return st, nil
}

// hdpWindowApp is the hostile tenant's Window attack on A: from one
// portal, 128 READs always posted to the dead destination (a region and
// key nobody has); from a high-class portal, 64 READs of its region on B
// in flight. "stop" ends both; it says "done DEAD LIVE", their statuses.
func hdpWindowApp(sock string, in <-chan string) error {
	pd, err := portal.DialOptions(sock, "hostile-dead", portal.Options{WaitSpins: -1})
	if err != nil {
		return err
	}
	defer pd.Close()
	pl, err := portal.DialOptions(sock, "hostile-live", portal.Options{WaitSpins: -1, Class: portal.ClassHigh})
	if err != nil {
		return err
	}
	defer pl.Close()
	sd, err := pd.AllocSlots(128)
	if err != nil {
		return err
	}
	sl, err := pl.AllocSlots(64)
	if err != nil {
		return err
	}
	dsink, err := pd.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		return err
	}
	lsink, err := pl.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		return err
	}
	id := pl.Identity()
	htSay("ready %s %d", id.Addr, id.PID)
	var peer, kdHex, dead string
	var rid uint64
	if _, err := fmt.Sscanf(<-in, "keys %s %d %s %s", &peer, &rid, &kdHex, &dead); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	var kd, junk aesni.Key
	kb, _ := hex.DecodeString(kdHex)
	copy(kd[:], kb)
	junk[0] = 0x28
	b, d := netip.MustParseAddr(peer), netip.MustParseAddr(dead)
	if err := htWait(in, "go"); err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		<-in // "stop", or the end
		close(stop)
	}()
	var deadSt hdpStatuses
	var deadErr error
	wait := make(chan struct{})
	go func() {
		defer close(wait)
		deadSt, deadErr = hdpKeep(pd, sd, func(k int, o *portal.Op) {
			*o = portal.Op{Type: portal.OpRead, Slot: o.Slot, Cookie: o.Cookie, Remote: d, RemoteRegion: abi.MakeRegionID(7, 28),
				RemoteOffset: 0, Key: junk, Local: dsink, Length: 4096}
		}, stop, 0)
	}()
	liveSt, err := hdpKeep(pl, sl, func(k int, o *portal.Op) {
		*o = portal.Op{Type: portal.OpRead, Slot: o.Slot, Cookie: o.Cookie, Remote: b, RemoteRegion: abi.RegionID(rid),
			RemoteOffset: uint64(k%16) * 4096, Key: kd, Local: lsink, Length: 4096}
	}, stop, 0)
	<-wait
	if err != nil {
		return err
	}
	if deadErr != nil {
		return deadErr
	}
	htSay("done %s %s", deadSt, liveSt)
	for range in {
	}
	return nil
}

// hdpNeighborsApp is the hostile tenant's Neighbors attack on A: 24 READs
// always in flight, each to the next of 128 unused on-link addresses.
// "stop" ends it; it says "done STATUSES".
func hdpNeighborsApp(sock string, in <-chan string) error {
	p, err := portal.DialOptions(sock, "hostile-neighbors", portal.Options{WaitSpins: -1})
	if err != nil {
		return err
	}
	defer p.Close()
	slots, err := p.AllocSlots(24)
	if err != nil {
		return err
	}
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		return err
	}
	htSay("ready")
	if err := htWait(in, "go"); err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		<-in
		close(stop)
	}()
	first := hdpUnused.As4()
	var junk aesni.Key
	junk[0] = 0x28
	st, err := hdpKeep(p, slots, func(k int, o *portal.Op) {
		a := first
		a[3] += byte(k % 128)
		*o = portal.Op{Type: portal.OpRead, Slot: o.Slot, Cookie: o.Cookie, Remote: netip.AddrFrom4(a), RemoteRegion: abi.MakeRegionID(7, 28),
			Key: junk, Local: sink, Length: 64}
	}, stop, 2*time.Millisecond)
	if err != nil {
		return err
	}
	htSay("done %s", st)
	for range in {
	}
	return nil
}
