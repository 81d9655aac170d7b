package engine

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// mcEngine is an engine of several cores under test, each core with its
// own testTx.
type mcEngine struct {
	g   *Group
	txs []*testTx
	ip  uint32
	mac wire.MAC
}

func newMCEngine(t testing.TB, cfg Config, cores int) *mcEngine {
	t.Helper()
	e := &mcEngine{ip: ip4(cfg.LocalIP.As4()), mac: cfg.LocalMAC}
	txs := make([]Tx, cores)
	for i := range txs {
		tx := newTestTx(512)
		e.txs = append(e.txs, tx)
		txs[i] = tx
	}
	g, err := NewGroup(cfg, txs)
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	return e
}

// audit checks every core of e and the shared table.
func (e *mcEngine) audit(t testing.TB) {
	t.Helper()
	for i := range e.g.Len() {
		if err := e.g.Core(i).Audit(); err != nil {
			t.Fatalf("core %d: %v", i, err)
		}
	}
	if err := e.g.Audit(); err != nil {
		t.Fatal(err)
	}
}

// mcNet is a switch between multi-core engines whose ports cannot steer:
// a frame reaches a random rx core of its destination engine, which hands
// it to the core Steer names (every core for ARP).
type mcNet struct {
	es     []*mcEngine
	rng    *rand.Rand
	now    int64
	handed int // frames handed from their rx core to another
	// tap, if set, sees every frame (a copy) before it is delivered.
	tap func(dst *mcEngine, f []byte)
	// rxCore, if set, picks the rx core instead of the random draw.
	rxCore func(dst *mcEngine, f []byte) int
}

func newMCNet(es ...*mcEngine) *mcNet {
	return &mcNet{es: es, rng: rand.New(rand.NewPCG(7, 8)), now: 1000}
}

// deliver hands frame f, which arrived at engine e's port, to its cores.
func (n *mcNet) deliver(e *mcEngine, f []byte) {
	cores := e.g.Len()
	rx := n.rng.IntN(cores)
	if n.rxCore != nil {
		rx = n.rxCore(e, f)
	}
	switch c := Steer(f, e.g.Core(0).cfg.UDPPort, cores); c {
	case SteerAll:
		for i := range cores {
			if i != rx {
				n.handed++
			}
			e.g.Core(i).Receive(n.now, f)
		}
	case SteerLocal:
		e.g.Core(rx).Receive(n.now, f)
	default:
		if c != rx {
			n.handed++
		}
		e.g.Core(c).Receive(n.now, f)
	}
}

// step polls every core, moves what each sent, and returns the work done.
func (n *mcNet) step() int {
	w := 0
	for _, e := range n.es {
		for i := range e.g.Len() {
			w += e.g.Core(i).Poll(n.now)
		}
	}
	for _, src := range n.es {
		for _, tx := range src.txs {
			for _, f := range tx.take() {
				w++
				dst := wire.MAC(f[0:6])
				for _, e := range n.es {
					if e != src && (dst == e.mac || dst == wire.Broadcast) {
						if n.tap != nil {
							n.tap(e, f)
						}
						n.deliver(e, f)
					}
				}
			}
		}
	}
	n.now += 1000
	return w
}

func (n *mcNet) run(t testing.TB) {
	t.Helper()
	for k := 0; k < 200; k++ {
		if n.step() == 0 {
			for _, e := range n.es {
				e.audit(t)
			}
			return
		}
	}
	t.Fatal("the engines never went quiet")
}

// mcConfigs are two engines' configs for a multi-core test, resolving
// each other by ARP.
func mcConfigs() (Config, Config) {
	ca, cb := pairConfigs(testCrypto)
	return ca, cb
}

// laneAddr is an address 10.0.0.x (x >= 3) whose sender lanes 0 ..
// lanes-1 the steering of an engine of cores cores sends to the cores
// want names, lane by lane.
func laneAddr(t testing.TB, cores int, want ...int) netip.Addr {
	for x := 3; x < 255; x++ {
		a := [4]byte{10, 0, 0, byte(x)}
		ok := true
		for tag, w := range want {
			f := steerFrame(wire.TypeReadReq, wire.InitiatorPort(0, uint16(tag)), 4792, a, uint64(tag)<<ivTagShift|1)
			ok = ok && Steer(f, 4792, cores) == w
		}
		if ok {
			return netip.AddrFrom4(a)
		}
	}
	t.Fatalf("no address's lanes land on cores %v of %d", want, cores)
	return netip.Addr{}
}

// READs and WRITEs both ways between two engines of two and three cores,
// from portals on every core, over a switch that lands frames on random
// rx cores: every op completes OK with the right bytes, each core audits
// clean, and frames were handed between cores.
func TestGroupReadWrite(t *testing.T) {
	ca, cb := mcConfigs()
	a, b := newMCEngine(t, ca, 2), newMCEngine(t, cb, 3)
	net := newMCNet(a, b)
	type side struct {
		e    *mcEngine
		apps []*testApp
		mem  [][]byte // each app's region: [0,32K) source, [32K,48K) READ sink, [64K,128K) WRITE targets
		rid  []abi.RegionID
	}
	sides := []*side{{e: a}, {e: b}}
	for si, s := range sides {
		for i := range s.e.g.Len() {
			c := s.e.g.Core(i)
			app := openApp(t, c, abi.ClassLow, 16)
			mem := make([]byte, 128<<10)
			pattern(mem[:32<<10], byte(16*si+i))
			rid, err := c.RegisterRegion(app.id, mem, abi.PermAll, testKr)
			if err != nil {
				t.Fatal(err)
			}
			s.apps, s.mem, s.rid = append(s.apps, app), append(s.mem, mem), append(s.rid, rid)
		}
	}
	if a.g.Core(1).cfg.SlotBase != abi.SlotID(ca.Slots) || sides[0].apps[1].slots[0] < abi.SlotID(ca.Slots) {
		t.Fatalf("core 1's slots: base %d, first %d", a.g.Core(1).cfg.SlotBase, sides[0].apps[1].slots[0])
	}
	for si, s := range sides {
		peer := sides[1-si]
		for i, app := range s.apps {
			for k := range 8 { // reads of every region of the peer, then writes into them
				j := k % len(peer.apps)
				cmd := readCmd(app.slots[k], peer.e.ip, peer.rid[j], uint64(k)*4096, s.rid[i], 32<<10+uint64(k)*4096, 4096, uint64(k))
				if k >= 4 { // each writer its own range of the target
					cmd.Op, cmd.RemoteOffset, cmd.LocalOffset = abi.OpWrite, 64<<10+uint64(i)*16<<10+uint64(k-4)*4096, uint64(k)*4096
				}
				app.post(t, cmd)
			}
		}
	}
	net.run(t)
	for si, s := range sides {
		peer := sides[1-si]
		for i, app := range s.apps {
			got := app.completions()
			if len(got) != 8 {
				t.Fatalf("engine %d core %d: %d completions, want 8", si, i, len(got))
			}
			for _, c := range got {
				k := int(c.Cookie)
				j := k % len(peer.apps)
				if c.Status != abi.StatusOK {
					t.Fatalf("engine %d core %d op %d: %v", si, i, k, c.Status)
				}
				if k < 4 && !bytes.Equal(s.mem[i][32<<10+k*4096:][:4096], peer.mem[j][k*4096:][:4096]) {
					t.Fatalf("engine %d core %d: READ %d read wrong bytes", si, i, k)
				}
				if k >= 4 && !bytes.Equal(peer.mem[j][64<<10+i*16<<10+(k-4)*4096:][:4096], s.mem[i][k*4096:][:4096]) {
					t.Fatalf("engine %d core %d: WRITE %d wrote wrong bytes", si, i, k)
				}
			}
		}
	}
	if net.handed == 0 {
		t.Fatal("no frame was handed between cores")
	}
	// Every core of b served requests or not, but every request of one
	// sender lane was served by one core: the windows are per lane.
	for i := range b.g.Len() {
		if st := b.g.Core(i).Stats(); st.ReqReplayed != 0 || st.RxAuthFailed != 0 || st.RxDropped != 0 {
			t.Fatalf("b core %d: %+v", i, st)
		}
	}
}

// A request replayed to another rx queue is still caught: the replay
// window of its sender lane lives on the one core Steer sends the lane to.
func TestGroupReplayAcrossRxCores(t *testing.T) {
	ca, cb := mcConfigs()
	a, b := newMCEngine(t, ca, 2), newMCEngine(t, cb, 2)
	net := newMCNet(a, b)
	srv := openApp(t, b.g.Core(0), abi.ClassLow, 0)
	src := make([]byte, 8192)
	pattern(src, 3)
	rs, _ := b.g.Core(0).RegisterRegion(srv.id, src, abi.PermRemoteRead, testKr)
	var reqs [][]byte
	net.tap = func(dst *mcEngine, f []byte) {
		if dst == b && wire.EtherType(f) == wire.EtherTypeIPv4 && f[wire.EthLen+wire.IPv4Len+wire.UDPLen+1] == byte(wire.TypeReadReq) {
			reqs = append(reqs, append([]byte(nil), f...))
		}
	}
	for i := range a.g.Len() {
		c := a.g.Core(i)
		app := openApp(t, c, abi.ClassLow, 4)
		rd, _ := c.RegisterRegion(app.id, make([]byte, 8192), abi.PermAll, testKr)
		for k := range 4 {
			app.post(t, readCmd(app.slots[k], b.ip, rs, uint64(k)*64, rd, uint64(k)*64, 64, uint64(k)))
		}
	}
	net.run(t)
	if len(reqs) != 8 {
		t.Fatalf("%d requests seen, want 8", len(reqs))
	}
	served := func() (n, replayed uint64) {
		for i := range b.g.Len() {
			st := b.g.Core(i).Stats()
			n, replayed = n+st.ReqServed, replayed+st.ReqReplayed
		}
		return
	}
	if n, r := served(); n != 8 || r != 0 {
		t.Fatalf("served %d, replayed %d", n, r)
	}
	// Each captured request again, landing on every rx core in turn.
	for rx := range b.g.Len() {
		net.rxCore = func(*mcEngine, []byte) int { return rx }
		for _, f := range reqs {
			net.deliver(b, f)
		}
	}
	if n, r := served(); n != 8 || r != 16 {
		t.Fatalf("after 16 replays: served %d, replayed %d", n, r)
	}
	for i := range b.g.Len() {
		if b.g.Core(i).srv.inq[abi.ClassLow].len() != 0 {
			t.Fatalf("core %d queued a replay", i)
		}
	}
}

// The windows of one sender's lanes are apart: a lane far ahead does not
// make another lane's counters look old.
func TestReplayWindowPerLane(t *testing.T) {
	tb := testReplayTable(4)
	addr := ipOf("10.0.0.9")
	lane := func(tag, ctr uint64) uint64 { return tag<<ivTagShift | ctr }
	if !tb.fresh(addr, lane(1, 1<<30)) {
		t.Fatal("lane 1")
	}
	for _, ctr := range []uint64{5, 6, 4} {
		if !tb.fresh(addr, lane(0, ctr)) {
			t.Fatalf("lane 0 counter %d refused after lane 1 moved far ahead", ctr)
		}
	}
	if tb.fresh(addr, lane(0, 5)) || tb.fresh(addr, lane(1, 1<<30)) {
		t.Fatal("a replay accepted")
	}
	if tb.fresh(addr, lane(1, 7)) {
		t.Fatal("lane 1: a counter a window below its highest accepted")
	}
	if tb.n != 2 {
		t.Fatalf("%d windows, want 2", tb.n)
	}
}

// A region registered by a portal of core 0 is served by every core; a
// rekey is in force at once on every core (no Poll between), a
// deregistration too; the other cores are quiescent for it only once
// they have polled.
func TestGroupRegionAcrossCores(t *testing.T) {
	ca, cb := mcConfigs()
	ca.LocalIP = laneAddr(t, 4, 2) // a's one lane is served by b's core 2
	a, b := newMCEngine(t, ca, 1), newMCEngine(t, cb, 4)
	net := newMCNet(a, b)
	c0 := b.g.Core(0)
	owner := openApp(t, c0, abi.ClassLow, 0)
	src := make([]byte, 8192)
	pattern(src, 9)
	rs, err := c0.RegisterRegion(owner.id, src, abi.PermRemoteRead, testKr)
	if err != nil {
		t.Fatal(err)
	}
	app := openApp(t, a.g.Core(0), abi.ClassLow, 4)
	rd, _ := a.g.Core(0).RegisterRegion(app.id, make([]byte, 8192), abi.PermAll, testKr)
	// The one lane of a lands on one core of b: find it.
	lane := -1
	net.tap = func(dst *mcEngine, f []byte) {
		if dst == b && f[wire.EthLen+wire.IPv4Len+wire.UDPLen+1] == byte(wire.TypeReadReq) {
			lane = Steer(f, cb.UDPPort, 4)
		}
	}
	read := func(k int, want abi.Status) {
		t.Helper()
		app.post(t, readCmd(app.slots[k], b.ip, rs, 0, rd, 0, 4096, uint64(k)))
		net.run(t)
		got := app.completions()
		if len(got) != 1 || got[0].Status != want {
			t.Fatalf("read %d: %+v, want %v", k, got, want)
		}
	}
	read(0, abi.StatusOK)
	if lane != 2 {
		t.Fatalf("a's lane lands on core %d, want 2", lane)
	}
	server := b.g.Core(lane)
	if st := server.Stats(); st.ReqServed != 1 {
		t.Fatalf("core %d served %d", lane, st.ReqServed)
	}
	// Rekey on core 0: the serving core's cached K_d of the old key are
	// no good from now on, before it has polled.
	newKr := testKr
	newKr[0] ^= 1
	if err := c0.Rekey(owner.id, rs, newKr); err != nil {
		t.Fatal(err)
	}
	if err := server.Rekey(owner.id, rs, newKr); err == nil {
		t.Fatal("another core rekeyed a region it does not own")
	}
	read(1, abi.StatusRemoteAuthFailure)
	// Deregistration on core 0: gone for every core at once; the others
	// quiesce at their next Poll.
	v0 := b.g.Version()
	if err := c0.DeregisterRegion(owner.id, rs); err != nil {
		t.Fatal(err)
	}
	v := b.g.Version()
	if v == v0 || b.g.Quiesced(v) || !b.g.CoreQuiesced(0, v) {
		t.Fatalf("version %d -> %d, quiesced %v (core 0 %v): the others have not polled", v0, v, b.g.Quiesced(v), b.g.CoreQuiesced(0, v))
	}
	if server.regions.lookup(rs) != nil {
		t.Fatal("the serving core still finds the region")
	}
	for i := range b.g.Len() {
		b.g.Core(i).Poll(net.now)
	}
	if !b.g.Quiesced(v) {
		t.Fatal("not quiesced after every core polled")
	}
	read(2, abi.StatusRemoteAuthFailure) // no region: no key
	b.audit(t)
}

// A portal whose application corrupts its rings is reclaimed by its core
// at once: its regions leave the engine's table for every core, and the
// indices stay held until the control plane closes the portal.
func TestGroupCorruptRingsTakeRegionsAway(t *testing.T) {
	_, cb := mcConfigs()
	b := newMCEngine(t, cb, 2)
	c1 := b.g.Core(1)
	cmdMem := aligned(abi.RingBytes(16, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(16, abi.CompletionSize))
	id, err := c1.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: 16, CplRing: cplMem, CplCap: 16, MaxSlots: 4})
	if err != nil {
		t.Fatal(err)
	}
	rid, err := c1.RegisterRegion(id, make([]byte, 4096), abi.PermAll, testKr)
	if err != nil {
		t.Fatal(err)
	}
	v0 := b.g.Version()
	cmdMem[0] = 200 // producer index 200 ahead of consumer 0 with capacity 16
	c1.Poll(1)
	if st := c1.Stats(); st.RingsCorrupt != 1 {
		t.Fatalf("RingsCorrupt %d", st.RingsCorrupt)
	}
	if b.g.Core(0).regions.lookup(rid) != nil || b.g.Version() == v0 {
		t.Fatal("core 0 still finds the region of the closed portal")
	}
	if !b.g.regions.held[rid.Index()] {
		t.Fatal("the index was freed before the portal was closed")
	}
	b.audit(t)
	if err := c1.ClosePortal(id); err != nil {
		t.Fatal(err)
	}
	if b.g.regions.held[rid.Index()] {
		t.Fatal("the index is still held after ClosePortal")
	}
	b.audit(t)
}

func TestNewGroupConfig(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	tx := func(n int) []Tx {
		out := make([]Tx, n)
		for i := range out {
			out[i] = newTestTx(4)
		}
		return out
	}
	if _, err := NewGroup(cfg, nil); err == nil {
		t.Fatal("no cores accepted")
	}
	if _, err := NewGroup(cfg, tx(wire.MaxCores+1)); err == nil {
		t.Fatal("65 cores accepted")
	}
	bad := cfg
	bad.CoreID = 1
	if _, err := NewGroup(bad, tx(2)); err == nil {
		t.Fatal("CoreID 1 accepted")
	}
	bad = cfg
	bad.Slots, bad.SlotBase = 1<<20, 1<<31-1<<20
	if _, err := NewGroup(bad, tx(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewGroup(bad, tx(2)); err == nil {
		t.Fatal("slots past 2^31 accepted")
	}
	g, err := NewGroup(cfg, tx(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c := g.Core(i).Config()
		if c.CoreID != uint16(i) || c.SlotBase != abi.SlotID(i*cfg.Slots) || c.WindowBytes != cfg.WindowBytes || c.Slots != cfg.Slots {
			t.Fatalf("core %d: CoreID %d SlotBase %d window %d slots %d", i, c.CoreID, c.SlotBase, c.WindowBytes, c.Slots)
		}
		if g.Core(i).out.tag != uint64(i)<<ivTagShift {
			t.Fatalf("core %d: lane tag %#x", i, g.Core(i).out.tag)
		}
	}
}

// IV counters stay unique when an engine restarts with another number of
// cores: they all come from the one persisted source, and the lane tags
// only set bits the source's counters never reach.
func TestIVLanesAcrossRestarts(t *testing.T) {
	path := t.TempDir() + "/iv.state"
	seen := map[uint64]bool{}
	for run, cores := range []int{2, 1, 3, 2} {
		src, err := aesni.OpenIVSource(aesni.IVConfig{Path: path, Block: 1 << 20, Span: 1 << 8})
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig("10.0.0.1", 1)
		cfg.IV = src
		e := newMCEngine(t, cfg, cores)
		for i := range cores {
			o := e.g.Core(i).out
			for k := range 300 {
				var ctr uint64
				var ok bool
				if k%3 == 0 {
					ctr, ok = o.counters(65)
				} else {
					ctr, ok = o.counter()
				}
				if !ok || seen[ctr] || ctr>>ivTagShift != uint64(i) {
					t.Fatalf("run %d core %d: counter %#x (ok %v, seen %v)", run, i, ctr, ok, seen[ctr])
				}
				seen[ctr] = true
			}
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
