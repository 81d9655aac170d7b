package engine

import (
	"cmp"
	"net/netip"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// testKr is the region key of every region the tests register; testPID
// the PID every test portal stamps.
var testKr = aesni.Key{0x6b, 0x72, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}

const testPID = 4242

// testCrypto is the seal backend of testConfig: ONERMA_TEST_CRYPTO runs
// the whole suite with "ipsec-mb" (default "go").
var testCrypto = cmp.Or(os.Getenv("ONERMA_TEST_CRYPTO"), CryptoGo)

// testTx is a fixed pool of frame buffers and a FIFO of sent frames.
type testTx struct {
	mem   []byte // every buffer
	bufs  [][]byte
	free  []int
	q     []int // sent buffers in order
	qlen  []int
	cur   int
	limit int    // max queued frames (0: pool size)
	hook  func() // TxHook: runs before queued frames are read
	burst [][]byte
}

// rxBurst is the most frames deliverTo hands to one ReceiveBurst: the
// runner's rx burst.
const rxBurst = 32

// TxMemory implements TxMemory.
func (t *testTx) TxMemory() [][]byte { return [][]byte{t.mem} }

// SetBeforeTx implements TxHook.
func (t *testTx) SetBeforeTx(f func()) { t.hook = f }

func (t *testTx) beforeTx() {
	if t.hook != nil {
		t.hook()
	}
}

func newTestTx(n int) *testTx {
	t := &testTx{cur: -1, mem: make([]byte, n*MaxFrameBytes)}
	for i := 0; i < n; i++ {
		t.bufs = append(t.bufs, t.mem[i*MaxFrameBytes:(i+1)*MaxFrameBytes:(i+1)*MaxFrameBytes])
		t.free = append(t.free, i)
	}
	t.burst = make([][]byte, 0, rxBurst)
	t.q = make([]int, 0, n)
	t.qlen = make([]int, 0, n)
	return t
}

func (t *testTx) Buffer() []byte {
	if t.cur < 0 {
		if len(t.free) == 0 || (t.limit > 0 && len(t.q) >= t.limit) {
			return nil
		}
		t.cur = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
	}
	return t.bufs[t.cur]
}

func (t *testTx) Send(n int) {
	t.q = append(t.q, t.cur)
	t.qlen = append(t.qlen, n)
	t.cur = -1
}

// take removes and returns (copies of) all queued frames.
func (t *testTx) take() [][]byte {
	t.beforeTx()
	var out [][]byte
	for k, i := range t.q {
		out = append(out, append([]byte(nil), t.bufs[i][:t.qlen[k]]...))
		t.free = append(t.free, i)
	}
	t.q, t.qlen = t.q[:0], t.qlen[:0]
	return out
}

// deliverTo hands every queued frame to dst without copying, in bursts
// of up to rxBurst frames (ReceiveBurst), as the runner does.
// Frames the receiver sends while receiving (WRITE data on a pull, an
// acknowledgment on commit) are queued for the next call.
func (t *testTx) deliverTo(now int64, dst *Core) int {
	t.beforeTx()
	n := len(t.q)
	for k := 0; k < n; k += rxBurst {
		b := t.burst[:0]
		for _, i := range t.q[k:min(k+rxBurst, n)] {
			b = append(b, t.bufs[i])
		}
		for j := range b {
			b[j] = b[j][:t.qlen[k+j]]
		}
		dst.ReceiveBurst(now, b)
	}
	t.free = append(t.free, t.q[:n]...)
	m := copy(t.q, t.q[n:])
	copy(t.qlen, t.qlen[n:])
	t.q, t.qlen = t.q[:m], t.qlen[:m]
	return n
}

func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

// testApp is an application attached to a core through real abi rings.
type testApp struct {
	ip    [4]byte // its engine's address: part of its K_d
	id    PortalID
	cmd   *abi.Producer
	cpl   *abi.Consumer
	slots []abi.SlotID
}

func openApp(t testing.TB, c *Core, class abi.Class, slots int) *testApp {
	t.Helper()
	return openTenantApp(t, c, 0, class, slots)
}

// openTenantApp is openApp for a portal of tenant (PortalSpec.Tenant):
// the regions it registers are that tenant's.
func openTenantApp(t testing.TB, c *Core, tenant int, class abi.Class, slots int) *testApp {
	t.Helper()
	return openWeightedApp(t, c, tenant, 0, class, slots)
}

// openWeightedApp is openTenantApp for a portal of weight
// (PortalSpec.Weight).
func openWeightedApp(t testing.TB, c *Core, tenant, weight int, class abi.Class, slots int) *testApp {
	t.Helper()
	const cmdCap, cplCap = 256, 512
	cmdMem := aligned(abi.RingBytes(cmdCap, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(cplCap, abi.CompletionSize))
	id, err := c.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: cmdCap, CplRing: cplMem, CplCap: cplCap, Class: class, MaxSlots: slots, PID: testPID, Tenant: tenant, Weight: weight})
	if err != nil {
		t.Fatal(err)
	}
	a := &testApp{id: id, ip: c.out.ipb}
	a.cmd, _ = abi.NewProducer(cmdMem, cmdCap, abi.CommandSize)
	a.cpl, _ = abi.NewConsumer(cplMem, cplCap, abi.CompletionSize)
	if slots > 0 {
		a.slots, err = c.AllocSlots(id, slots)
		if err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// keyed fills in the command's K_d for testKr when it has none, as the
// owner of the remote region would hand it to this app.
func (a *testApp) keyed(cmd *abi.Command) *abi.Command {
	if cmd.Key == ([16]byte{}) {
		cmd.Key = aesni.DeriveKey(testKr, a.ip, testPID, uint8(cmd.Op))
	}
	return cmd
}

func (a *testApp) post(t testing.TB, cmd *abi.Command) {
	b := a.cmd.Reserve()
	if b == nil {
		t.Fatal("command ring full")
	}
	a.keyed(cmd).Encode(b)
	a.cmd.Commit()
	a.cmd.Publish()
}

func (a *testApp) completions() []abi.Completion {
	var out []abi.Completion
	for e := a.cpl.Peek(); e != nil; e = a.cpl.Peek() {
		var c abi.Completion
		c.Decode(e)
		out = append(out, c)
		a.cpl.Advance()
	}
	a.cpl.Release()
	return out
}

func testConfig(ip string, mac byte) Config {
	cfg := DefaultConfig()
	cfg.LocalIP = netip.MustParseAddr(ip)
	cfg.LocalMAC = wire.MAC{2, 0, 0, 0, 0, mac}
	cfg.Slots = 64
	cfg.Regions = 16
	cfg.Portals = 4
	cfg.InboundQueue = 64
	cfg.NackThreshold = 48
	cfg.Timeout = time.Millisecond
	cfg.DispatchTimeout = 200 * time.Microsecond
	cfg.ResolveTimeout = 2 * time.Millisecond
	cfg.ARPRetry = 500 * time.Microsecond
	cfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	cfg.CacheSeed = 1
	cfg.Crypto = testCrypto
	return cfg
}

func newCore(t testing.TB, cfg Config, tx Tx) *Core {
	t.Helper()
	c, err := New(cfg, tx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// selfApp is a core of cfg with a test Tx of 64 frames, a low-class
// application on it with slots slots, and its region of 8 KB (every
// permission), which the application's ops read and write on the same
// core.
func selfApp(t testing.TB, cfg Config, slots int) (*Core, *testTx, *testApp, abi.RegionID) {
	t.Helper()
	tx := newTestTx(64)
	c := newCore(t, cfg, tx)
	app := openApp(t, c, abi.ClassLow, slots)
	r, err := c.RegisterRegion(app.id, make([]byte, 8192), abi.PermAll, testKr)
	if err != nil {
		t.Fatal(err)
	}
	return c, tx, app, r
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

func ipOf(s string) uint32 { return ip4(netip.MustParseAddr(s).As4()) }

// pair is two cores wired back to back.
type pair struct {
	a, b   *Core
	ta, tb *testTx
	now    int64
}

// pairConfigs are the test configs of a pair's engines a (10.0.0.1) and b
// (10.0.0.2), both on seal backend crypto.
func pairConfigs(crypto string) (Config, Config) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	ca.Crypto, cb.Crypto = crypto, crypto
	return ca, cb
}

func newPair(t testing.TB, ca, cb Config) *pair {
	p := &pair{ta: newTestTx(512), tb: newTestTx(512), now: 1000}
	p.a = newCore(t, ca, p.ta)
	p.b = newCore(t, cb, p.tb)
	return p
}

// run moves frames both ways and polls until nothing happens.
func (p *pair) run() {
	for k := 0; k < 100; k++ {
		w := p.a.Poll(p.now) + p.b.Poll(p.now)
		w += p.ta.deliverTo(p.now, p.b) + p.tb.deliverTo(p.now, p.a)
		p.now += 1000
		if w == 0 {
			return
		}
	}
}

// editRegion publishes region rid of c's engine again, changed by edit (a
// test's shortcut: the control plane has no call that changes a region's
// permissions).
func editRegion(c *Core, rid abi.RegionID, edit func(r *region)) {
	t := c.regions.t
	old := t.lookup(rid)
	r := *old
	edit(&r)
	if !t.r[rid.Index()].CompareAndSwap(old, &r) {
		panic("editRegion: the region changed meanwhile")
	}
}

// forgedRequest is a request of type typ to core c, as anyone holding K_d
// kd of region rid for source address src and testPID would seal it: its
// IV is ivAddr ‖ ctr (ctr carries the lane tag in its top bits), its
// source port the initiator port of core 0 with entropy tag.
func forgedRequest(c *Core, typ wire.Type, src, ivAddr [4]byte, ctr uint64, rid abi.RegionID, kd aesni.Key, length uint32, tag uint64) []byte {
	b := make([]byte, MaxFrameBytes)
	f := wire.Fields{
		DstMAC: c.out.mac, SrcMAC: wire.MAC{2, 0, src[0], src[1], src[2], src[3]},
		SrcIP: ip4(src), DstIP: c.out.ip,
		SrcPort: wire.InitiatorPort(uint8(tag), 0), DstPort: c.out.udp,
		Type: typ, PID: testPID, Tag: tag, Region: uint32(rid), Length: length,
	}
	aesni.PutNonce(f.IV[:], ivAddr, ctr)
	n := wire.Encode(b, &f, 0)
	a, err := aesni.NewAEAD(kd)
	if err != nil {
		panic(err)
	}
	a.SealRequest(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b))
	return b[:n]
}
