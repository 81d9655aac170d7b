package dpdkport_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/runner"
)

// groupNode is an engine of several cores on the queues of one port, each
// core driven by its own runner.
type groupNode struct {
	q  *dpdkport.Queues
	g  *engine.Group
	rs []*runner.Runner
}

// startGroup starts an engine of cores cores on the started port called
// name (set up with that many queues).
func startGroup(t *testing.T, name string, cores int, cfg engine.Config) *groupNode {
	t.Helper()
	_, pool := dpdktest.PortQueues(t, name, uint16(cores), dpdktest.Mbufs, dpdktest.DataRoom)
	q, err := dpdkport.NewQueues(name, pool, cores, cfg.UDPPort, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	g, err := engine.NewGroup(cfg, q.Txs())
	if err != nil {
		q.Close()
		t.Fatal(err)
	}
	n := &groupNode{q: q, g: g}
	t.Cleanup(func() { n.stop(t) })
	for i := range cores {
		rcfg := runner.DefaultConfig()
		rcfg.ThreadStart, rcfg.ThreadExit = dpdkport.ThreadHooks()
		r, err := runner.New(g.Core(i), q.Ports[i], rcfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		n.rs = append(n.rs, r)
	}
	return n
}

// stop stops every core's runner, audits the cores and the shared region
// table, and closes the queues (every mbuf back to the pool).
func (n *groupNode) stop(t *testing.T) {
	t.Helper()
	if n.q == nil {
		return
	}
	for i, r := range n.rs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatalf("core %d: %v", i, err)
		}
	}
	for i := range n.rs {
		c := n.g.Core(i)
		if err := c.Audit(); err != nil {
			t.Errorf("core %d audit: %v", i, err)
		}
		if s := c.Stats(); s.WindowInUse != 0 || s.OpsInFlight != 0 {
			t.Errorf("core %d: window %d bytes, %d ops in flight after stop", i, s.WindowInUse, s.OpsInFlight)
		}
	}
	if err := n.g.Audit(); err != nil {
		t.Errorf("region table audit: %v", err)
	}
	n.q.Close()
	n.q = nil
}

// portStats reads each core's port counters on its goroutine.
func (n *groupNode) portStats(t *testing.T) []dpdkport.Stats {
	t.Helper()
	out := make([]dpdkport.Stats, len(n.rs))
	for i, r := range n.rs {
		if err := r.Exec(func(*engine.Core) { out[i] = n.q.Ports[i].Stats() }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGroupsHandOver: two engines of two cores each, over a pair of ports
// of two queues each that cannot steer (what one sends on its queue q the
// other receives on its queue q, as over memif). A portal on each core of
// each engine READs and WRITEs the regions of both portals of the other
// engine, at once: every answer reaches the core that sent the request,
// every WRITE's data the core serving it, though the rx queue is the
// sender's queue number, not the core Steer names. The hand-over counters
// of each engine balance (what its cores handed out, they took in).
func TestGroupsHandOver(t *testing.T) {
	dpdktest.RingPairQueues(t, "hoA", "hoB", 2)
	cfgA, cfgB := e2eConfig("10.0.0.1", 0xa), e2eConfig("10.0.0.2", 0xb)
	na := startGroup(t, "net_ring_hoA", 2, cfgA)
	nb := startGroup(t, "net_ring_hoB", 2, cfgB)

	const size = 64 << 10
	type side struct {
		apps [2]*app
		src  [2][]byte
		ip   uint32
	}
	mk := func(n *groupNode, cfg engine.Config, seed byte) *side {
		s := &side{ip: ipU32(cfg.LocalIP)}
		for i := range 2 {
			s.src[i] = make([]byte, size)
			pattern(s.src[i], seed+byte(i))
			s.apps[i] = openAppOn(t, n.rs[i], cfg.LocalIP.As4(), 32, s.src[i], make([]byte, size))
		}
		return s
	}
	a, b := mk(na, cfgA, 0xa0), mk(nb, cfgB, 0xb0)

	// Each portal: 8 READs of 4 KB from each remote portal's region
	// (into its own sink), then 4 WRITEs of 4 KB of its sink to each
	// remote region, at offsets its own. All four portals at once.
	const op = 4096
	for _, pair := range [][2]*side{{a, b}, {b, a}} {
		me, peer := pair[0], pair[1]
		for _, ap := range me.apps {
			for j := range 2 {
				for k := range 8 {
					off := uint64(j*8+k) * op
					ap.post(t, &abi.Command{Op: abi.OpRead, Slot: ap.slots[j*8+k], Cookie: uint64(j*8 + k),
						RemoteAddr: peer.ip, RemoteRegion: peer.apps[j].src, RemoteOffset: off,
						LocalRegion: ap.dst, LocalOffset: off, Length: op})
				}
			}
			ap.cmd.Publish()
		}
	}
	for _, pair := range [][2]*side{{a, b}, {b, a}} {
		me, peer := pair[0], pair[1]
		for i, ap := range me.apps {
			for _, c := range ap.wait(t, 16) {
				if c.Status != abi.StatusOK || c.Length != op {
					t.Fatalf("READ completion on core %d: %+v", i, c)
				}
			}
			dst := ap.dstMem
			for j := range 2 {
				if !bytes.Equal(dst[j*8*op:(j+1)*8*op], peer.src[j][j*8*op:(j+1)*8*op]) {
					t.Fatalf("core %d: READ data from the peer's portal %d differs", i, j)
				}
			}
		}
	}
	// WRITEs: portal i writes its sink's first 16 KB to the peer's
	// regions at 32 KB + (i*4+k)*4 KB.
	for _, pair := range [][2]*side{{a, b}, {b, a}} {
		me, peer := pair[0], pair[1]
		for i, ap := range me.apps {
			for j := range 2 {
				for k := range 4 {
					ap.post(t, &abi.Command{Op: abi.OpWrite, Slot: ap.slots[j*4+k], Cookie: uint64(j*4 + k),
						RemoteAddr: peer.ip, RemoteRegion: peer.apps[j].src, RemoteOffset: 32<<10 + uint64(i*4+k)*op,
						LocalRegion: ap.dst, LocalOffset: uint64(k) * op, Length: op})
				}
			}
			ap.cmd.Publish()
		}
	}
	for _, pair := range [][2]*side{{a, b}, {b, a}} {
		me, peer := pair[0], pair[1]
		for i, ap := range me.apps {
			for _, c := range ap.wait(t, 8) {
				if c.Status != abi.StatusOK || c.Length != op {
					t.Fatalf("WRITE completion on core %d: %+v", i, c)
				}
			}
			for j := range 2 {
				got := peer.src[j][32<<10+i*4*op : 32<<10+(i+1)*4*op]
				if !bytes.Equal(got, ap.dstMem[:4*op]) {
					t.Fatalf("core %d's WRITEs to the peer's portal %d: data differs", i, j)
				}
			}
		}
	}
	for name, n := range map[string]*groupNode{"A": na, "B": nb} {
		ps := n.portStats(t)
		var out, in, full uint64
		for i, s := range ps {
			t.Logf("engine %s core %d: rx %d, handed out %d, in %d, full %d", name, i, s.RxFrames, s.HandedOut, s.HandedIn, s.HandOverFull)
			out, in, full = out+s.HandedOut, in+s.HandedIn, full+s.HandOverFull
		}
		if out == 0 || out != in || full != 0 {
			t.Errorf("engine %s: %d handed out, %d in, %d lost: want some, balanced, none lost", name, out, in, full)
		}
	}
	na.stop(t)
	nb.stop(t)
}
