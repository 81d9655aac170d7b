package opgen

import (
	"cmp"
	"net/netip"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// testKr is the region key of the regions the tests' applications
// register.
var testKr = aesni.Key{0x6b, 0x72, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}

// testCrypto is the seal backend of testConfig: ONERMA_TEST_CRYPTO runs
// the tests with "ipsec-mb" (default "go"), as it does the engine's.
var testCrypto = cmp.Or(os.Getenv("ONERMA_TEST_CRYPTO"), engine.CryptoGo)

// testConfig is a small engine's config with short timers.
func testConfig(ip string, mac byte) engine.Config {
	cfg := engine.DefaultConfig()
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

// testTx is a fixed pool of frame buffers and a FIFO of sent frames.
type testTx struct {
	mem   []byte
	bufs  [][]byte
	free  []int
	q     []int // sent buffers in order
	qlen  []int
	cur   int
	hook  func() // TxHook: runs before queued frames are read
	burst [][]byte
}

// rxBurst is the most frames deliverTo hands to one ReceiveBurst: the
// runner's rx burst.
const rxBurst = 32

var (
	_ engine.TxHook   = (*testTx)(nil)
	_ engine.TxMemory = (*testTx)(nil)
)

func newTestTx(n int) *testTx {
	t := &testTx{cur: -1, mem: make([]byte, n*engine.MaxFrameBytes)}
	for i := range n {
		t.bufs = append(t.bufs, t.mem[i*engine.MaxFrameBytes:(i+1)*engine.MaxFrameBytes:(i+1)*engine.MaxFrameBytes])
		t.free = append(t.free, i)
	}
	t.burst = make([][]byte, 0, rxBurst)
	t.q = make([]int, 0, n)
	t.qlen = make([]int, 0, n)
	return t
}

func (t *testTx) TxMemory() [][]byte   { return [][]byte{t.mem} }
func (t *testTx) SetBeforeTx(f func()) { t.hook = f }

func (t *testTx) beforeTx() {
	if t.hook != nil {
		t.hook()
	}
}

func (t *testTx) Buffer() []byte {
	if t.cur < 0 {
		if len(t.free) == 0 {
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
// of up to rxBurst frames (ReceiveBurst), as the runner does. Frames the
// receiver sends while receiving are queued for the next call.
func (t *testTx) deliverTo(now int64, dst *engine.Core) int {
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

// group is an engine of cores cores, each over its own testTx.
func group(t testing.TB, cfg engine.Config, cores int) (*engine.Group, []*testTx) {
	t.Helper()
	var txs []*testTx
	var etxs []engine.Tx
	for range cores {
		tx := newTestTx(512)
		txs, etxs = append(txs, tx), append(etxs, tx)
	}
	g, err := engine.NewGroup(cfg, etxs)
	if err != nil {
		t.Fatal(err)
	}
	return g, txs
}

// pair is two engines of one core wired back to back.
type pair struct {
	a, b   *engine.Core
	ta, tb *testTx
	now    int64
}

// oneCore is an engine of one core over tx, as a Group (New's argument).
func oneCore(t testing.TB, cfg engine.Config, tx engine.Tx) (*engine.Group, *engine.Core) {
	t.Helper()
	g, err := engine.NewGroup(cfg, []engine.Tx{tx})
	if err != nil {
		t.Fatal(err)
	}
	return g, g.Core(0)
}

// aligned is n bytes at a 64-byte boundary, as the rings want them.
func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

// openPortal opens an application's portal on c (its rings in memory of
// the test's), as a region's owner.
func openPortal(t testing.TB, c *engine.Core) engine.PortalID {
	t.Helper()
	const ringCap = 64
	id, err := c.OpenPortal(engine.PortalSpec{
		CmdRing: aligned(abi.RingBytes(ringCap, abi.CommandSize)), CmdCap: ringCap,
		CplRing: aligned(abi.RingBytes(ringCap, abi.CompletionSize)), CplCap: ringCap,
		Class: abi.ClassLow, PID: 4242,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// nopSource is an op source that posts nothing.
type nopSource struct{}

func (nopSource) Poll(int64) int                  { return 0 }
func (nopSource) Completed(int64, abi.Completion) {}

// assertGone fails the test unless c holds nothing of an op source: no
// slot, no op, a source can be attached again, and every portal table
// entry can be opened.
func assertGone(t testing.TB, c *engine.Core) {
	t.Helper()
	if s := c.Stats(); s.SlotsInUse != 0 || s.OpsInFlight != 0 {
		t.Fatalf("%d slots, %d ops left", s.SlotsInUse, s.OpsInFlight)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
	p, err := c.AttachSource(nopSource{}, 1)
	if err != nil {
		t.Fatalf("attaching a source again: %v", err)
	}
	p.Detach()
	var ids []engine.PortalID
	for range c.Config().Portals {
		ids = append(ids, openPortal(t, c))
	}
	for _, id := range ids {
		if err := c.ClosePortal(id); err != nil {
			t.Fatal(err)
		}
	}
}
