package dpdkport_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/wire"
)

// aligned returns n bytes of Go memory aligned to a cache line (abi rings
// require it).
func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

// app is the application side of a portal: it produces Commands and
// consumes Completions through rings in plain Go memory.
type app struct {
	ip    [4]byte // its engine's address: part of its K_d
	id    engine.PortalID
	cmd   *abi.Producer
	cpl   *abi.Consumer
	slots []abi.SlotID
	src   abi.RegionID // remote-readable source
	dst   abi.RegionID // local sink of READs (and source of WRITEs)

	dstMem []byte // dst's memory
}

// testKr is the region key of every region these tests register; testPID
// the PID their portals stamp.
var testKr = aesni.Key{0x64, 0x70, 0x64, 0x6b}

const testPID = 4242

// engineNode is one engine: a dpdkport, a core and its runner.
type engineNode struct {
	port *dpdkport.Port
	core *engine.Core
	r    *runner.Runner
}

func startEngine(t testing.TB, portName string, cfg engine.Config) *engineNode {
	return startEngineMode(t, portName, cfg, runner.Backoff)
}

func startEngineMode(t testing.TB, portName string, cfg engine.Config, mode runner.Mode) *engineNode {
	t.Helper()
	return startEngineStages(t, portName, cfg, mode, nil)
}

// startEngineStages is startEngineMode with the core, the port and the
// loop marking their stages on s (nil: none), as rmad -selftest -profile
// wires them.
func startEngineStages(t testing.TB, portName string, cfg engine.Config, mode runner.Mode, s *stage.Stages) *engineNode {
	t.Helper()
	_, pool := dpdktest.Port(t, portName)
	pcfg := dpdkport.DefaultConfig()
	pcfg.FrameBytes = 14 + cfg.MTU
	port, err := dpdkport.New(portName, pool, 0, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	core, err := engine.New(cfg, port)
	if err != nil {
		t.Fatal(err)
	}
	core.SetStages(s)
	port.SetStages(s)
	rcfg := runner.DefaultConfig()
	rcfg.Mode, rcfg.Stages = mode, s
	rcfg.ThreadStart, rcfg.ThreadExit = dpdkport.ThreadHooks()
	r, err := runner.New(core, port, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	n := &engineNode{port: port, core: core, r: r}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop stops the runner, audits the core's resources and returns every
// mbuf to the pool.
func (n *engineNode) stop(t testing.TB) {
	t.Helper()
	select {
	case <-n.r.Done():
		return // already stopped and audited
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The loop has exited (Done is closed): the core is ours now.
	if err := n.core.Audit(); err != nil {
		t.Errorf("audit: %v", err)
	}
	if s := n.core.Stats(); s.WindowInUse != 0 || s.OpsInFlight != 0 {
		t.Errorf("resources not returned: window %d bytes, %d ops in flight", s.WindowInUse, s.OpsInFlight)
	}
	n.port.Close()
}

// openApp opens a portal on n with slots slots and registers src (remote
// readable and writable) and dst (local sink and WRITE source) for it,
// all through runner.Exec.
func openApp(t testing.TB, n *engineNode, slots int, src, dst []byte) *app {
	t.Helper()
	return openAppOn(t, n.r, n.core.Config().LocalIP.As4(), slots, src, dst)
}

// openAppOn is openApp on the core r drives (of an engine at address ip).
func openAppOn(t testing.TB, r *runner.Runner, ip [4]byte, slots int, src, dst []byte) *app {
	t.Helper()
	return openAppFlag(t, r, ip, slots, src, dst, nil)
}

// openAppFlag is openAppOn for a portal whose segment's summary flag word
// is flag (engine.PortalSpec.SummaryFlag; nil: none).
func openAppFlag(t testing.TB, r *runner.Runner, ip [4]byte, slots int, src, dst, flag []byte) *app {
	t.Helper()
	const cmdCap, cplCap = 256, 256
	cmdMem := aligned(abi.RingBytes(cmdCap, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(cplCap, abi.CompletionSize))
	a := &app{ip: ip, dstMem: dst}
	var err error
	if a.cmd, err = abi.NewProducer(cmdMem, cmdCap, abi.CommandSize); err != nil {
		t.Fatal(err)
	}
	if a.cpl, err = abi.NewConsumer(cplMem, cplCap, abi.CompletionSize); err != nil {
		t.Fatal(err)
	}
	exErr := r.Exec(func(c *engine.Core) {
		if a.id, err = c.OpenPortal(engine.PortalSpec{
			CmdRing: cmdMem, CmdCap: cmdCap, CplRing: cplMem, CplCap: cplCap,
			Class: abi.ClassLow, MaxSlots: slots, PID: testPID, SummaryFlag: flag,
		}); err != nil {
			return
		}
		if a.slots, err = c.AllocSlots(a.id, slots); err != nil {
			return
		}
		if src != nil {
			if a.src, err = c.RegisterRegion(a.id, src, abi.PermRemoteRead|abi.PermRemoteWrite|abi.PermLocalRead, testKr); err != nil {
				return
			}
		}
		a.dst, err = c.RegisterRegion(a.id, dst, abi.PermLocalWrite|abi.PermLocalRead, testKr)
	})
	if exErr != nil {
		t.Fatal(exErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *app) post(t testing.TB, cmd *abi.Command) {
	t.Helper()
	b := a.cmd.Reserve()
	if b == nil {
		t.Fatal("command ring full")
	}
	if cmd.Key == ([16]byte{}) { // K_d, as the owner of the remote region hands it out
		cmd.Key = aesni.DeriveKey(testKr, a.ip, testPID, uint8(cmd.Op))
	}
	cmd.Encode(b)
	a.cmd.Commit()
}

// wait publishes posted commands and collects n completions (5 s at most).
func (a *app) wait(t testing.TB, n int) []abi.Completion {
	t.Helper()
	a.cmd.Publish()
	var out []abi.Completion
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < n {
		e := a.cpl.Peek()
		if e == nil {
			a.cpl.Release()
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after 5 s: %+v", len(out), n, out)
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		var c abi.Completion
		c.Decode(e)
		a.cpl.Advance()
		out = append(out, c)
	}
	a.cpl.Release()
	return out
}

// e2eConfig is a small core with timeouts generous enough for a shared,
// loaded 2-CPU machine (go test runs packages in parallel): these tests
// check function, and a loop preempted for tens of milliseconds must not
// turn into DISPATCH_TIMEOUT or TIMEOUT.
func e2eConfig(ip string, mac byte) engine.Config {
	c := engine.DefaultConfig()
	c.LocalIP, c.LocalMAC = netip.MustParseAddr(ip), wire.MAC{0x02, 0, 0, 0, 0, mac}
	c.Slots, c.Regions, c.Portals = 64, 16, 4
	c.Timeout, c.DispatchTimeout, c.ResolveTimeout = time.Second, 500*time.Millisecond, time.Second
	c.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	return c
}

func ipU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

// TestReadLoopbackEndToEnd: one engine core on a net_ring loopback port
// reads from a region it registered itself. The request goes to its own
// IP, leaves through the tx queue, comes back through the rx queue, is
// served, and the responses take the same way back and land in the sink.
func TestReadLoopbackEndToEnd(t *testing.T) {
	dpdktest.Require(t)
	cfg := e2eConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true // through the port, not the core's own loop
	n := startEngine(t, ringE2E, cfg)

	src := make([]byte, 64<<10)
	pattern(src, 0x5a)
	dst := make([]byte, 64<<10)
	a := openApp(t, n, 64, src, dst)
	me := ipU32(cfg.LocalIP)
	read := func(slot abi.SlotID, roff, loff uint64, size uint32, cookie uint64) *abi.Command {
		return &abi.Command{Op: abi.OpRead, Slot: slot, Cookie: cookie, RemoteAddr: me, RemoteRegion: a.src,
			RemoteOffset: roff, LocalRegion: a.dst, LocalOffset: loff, Length: size}
	}

	// One op at a time, sizes across the chunk boundaries (MTU 1500).
	for _, tc := range []struct {
		size       uint32
		roff, loff uint64
	}{{1, 0, 0}, {63, 3, 5}, {64, 64, 128}, {1408, 13, 4099}, {1409, 777, 1}, {2817, 3, 9}, {4096, 60000, 61439}} {
		clear(dst)
		a.post(t, read(a.slots[0], tc.roff, tc.loff, tc.size, uint64(tc.size)))
		got := a.wait(t, 1)
		if c := got[0]; c.Status != abi.StatusOK || c.Cookie != uint64(tc.size) || c.Length != tc.size || c.Slot != a.slots[0] {
			t.Fatalf("size %d: completion %+v", tc.size, c)
		}
		if !bytes.Equal(dst[tc.loff:tc.loff+uint64(tc.size)], src[tc.roff:tc.roff+uint64(tc.size)]) {
			t.Fatalf("size %d: data mismatch", tc.size)
		}
	}

	// Every slot at once: 64 x 1 KB, completing out of order.
	clear(dst)
	for i, s := range a.slots {
		a.post(t, read(s, uint64(i)*1024, uint64(i)*1024, 1024, uint64(i)))
	}
	seen := make(map[uint64]bool)
	for _, c := range a.wait(t, len(a.slots)) {
		if c.Status != abi.StatusOK || c.Length != 1024 || seen[c.Cookie] {
			t.Fatalf("completion %+v", c)
		}
		seen[c.Cookie] = true
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("pipelined reads: data mismatch")
	}

	// A read past the end of the source region fails remotely, precisely.
	a.post(t, read(a.slots[0], uint64(len(src))-10, 0, 100, 7))
	if c := a.wait(t, 1)[0]; c.Status != abi.StatusRemoteBounds {
		t.Errorf("out-of-bounds read: %v, want REMOTE_BOUNDS", c.Status)
	}

	var ps dpdkport.Stats
	var cs engine.Stats
	if err := n.r.Exec(func(c *engine.Core) { ps, cs = n.port.Stats(), c.Stats() }); err != nil {
		t.Fatal(err)
	}
	t.Logf("port %+v", ps)
	t.Logf("core: posted %d, served %d, rx %d, tx %d, rx dropped %d", cs.Posted, cs.ReqServed, cs.RxFrames, cs.TxFrames, cs.RxDropped)
	if ps.TxDropped != 0 || ps.TxFrames == 0 || ps.RxFrames != ps.TxFrames {
		t.Errorf("port stats %+v: every frame sent should come back", ps)
	}
	n.stop(t)
}

// TestReadTwoEngines: two engines, each on its own port of a net_ring pair
// (frames sent by one arrive at the other), resolve each other with ARP and
// read each other's regions at the same time. Connection-free: no setup
// between them beyond knowing the other's IP and region id.
func TestReadTwoEngines(t *testing.T) {
	dpdktest.RingPair(t, pairA, pairB)
	cfgA, cfgB := e2eConfig("10.0.0.1", 0xa), e2eConfig("10.0.0.2", 0xb)
	na := startEngine(t, "net_ring_"+pairA, cfgA)
	nb := startEngine(t, "net_ring_"+pairB, cfgB)

	srcA, srcB := make([]byte, 64<<10), make([]byte, 64<<10)
	pattern(srcA, 0xa)
	pattern(srcB, 0xb)
	dstA, dstB := make([]byte, 64<<10), make([]byte, 64<<10)
	appA := openApp(t, na, 64, srcA, dstA)
	appB := openApp(t, nb, 64, srcB, dstB)

	// Each app reads all of the other engine's source region in 4 KB ops,
	// 16 at a time, both directions at once.
	type side struct {
		app      *app
		peerIP   uint32
		peerSrc  abi.RegionID
		dst, src []byte
	}
	sides := []side{
		{appA, ipU32(cfgB.LocalIP), appB.src, dstA, srcB},
		{appB, ipU32(cfgA.LocalIP), appA.src, dstB, srcA},
	}
	const opBytes, window = 4096, 16
	for round := 0; round < (64<<10)/opBytes/window; round++ {
		for _, s := range sides {
			for i := range window {
				k := round*window + i
				s.app.post(t, &abi.Command{Op: abi.OpRead, Slot: s.app.slots[i], Cookie: uint64(k),
					RemoteAddr: s.peerIP, RemoteRegion: s.peerSrc, RemoteOffset: uint64(k * opBytes),
					LocalRegion: s.app.dst, LocalOffset: uint64(k * opBytes), Length: opBytes})
			}
			s.app.cmd.Publish()
		}
		for _, s := range sides {
			for _, c := range s.app.wait(t, window) {
				if c.Status != abi.StatusOK || c.Length != opBytes {
					t.Fatalf("completion %+v", c)
				}
			}
		}
	}
	for i, s := range sides {
		if !bytes.Equal(s.dst, s.src) {
			t.Fatalf("side %d: data mismatch", i)
		}
	}
	for _, n := range []*engineNode{na, nb} {
		var cs engine.Stats
		if err := n.r.Exec(func(c *engine.Core) { cs = c.Stats() }); err != nil {
			t.Fatal(err)
		}
		t.Logf("core: posted %d, served %d, ARP req %d rep %d, rx %d, tx %d, rx dropped %d",
			cs.Posted, cs.ReqServed, cs.ARPRequests, cs.ARPReplies, cs.RxFrames, cs.TxFrames, cs.RxDropped)
		if cs.ReqServed != 16 {
			t.Errorf("served %d requests, want 16", cs.ReqServed)
		}
	}
	na.stop(t)
	nb.stop(t)
}

// BenchmarkRead: READs of one engine from its own region over net_ring
// loopback, the runner busy-polling on its own thread, 32 ops in flight.
// One op is one READ; the benchmark goroutine is the application.
func BenchmarkRead(b *testing.B) {
	cfg := e2eConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true // the ring reflects: the port's I/O is part of each op
	n := startEngineMode(b, ringE2EB, cfg, runner.Busy)
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	a := openApp(b, n, 32, src, dst)
	me := ipU32(cfg.LocalIP)
	kd := aesni.DeriveKey(testKr, a.ip, testPID, uint8(abi.OpRead))
	for _, size := range []uint32{64, 1024, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			free := append([]abi.SlotID(nil), a.slots...)
			posted, done := 0, 0
			var off uint64
			for done < b.N {
				for posted < b.N && len(free) > 0 {
					s := free[len(free)-1]
					free = free[:len(free)-1]
					e := a.cmd.Reserve()
					cmd := abi.Command{Op: abi.OpRead, Slot: s, RemoteAddr: me, RemoteRegion: a.src,
						RemoteOffset: off, LocalRegion: a.dst, LocalOffset: off, Length: size, Key: kd}
					cmd.Encode(e)
					a.cmd.Commit()
					off = (off + uint64(size)) % uint64(len(src)-4096)
					posted++
				}
				a.cmd.Publish()
				for e := a.cpl.Peek(); e != nil; e = a.cpl.Peek() {
					var c abi.Completion
					c.Decode(e)
					a.cpl.Advance()
					if c.Status != abi.StatusOK {
						b.Fatalf("completion %+v", c)
					}
					free = append(free, c.Slot)
					done++
				}
				a.cpl.Release()
			}
			b.StopTimer()
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/sec, "ops/s")
			b.ReportMetric(float64(b.N)*float64(size)/sec/1e9, "GB/s")
		})
	}
	n.stop(b)
}
