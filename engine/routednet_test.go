package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// routedNet is cores on Ethernet segments joined by one router, as a
// Linux host with ip_forward on and proxy ARP off joins subnets: the
// router answers ARP for its own address on each segment (with its
// segment MAC, which a test may change), forwards IPv4 frames sent to
// its MAC by destination address (rewriting both MACs), and delivers
// frames between cores of one segment by MAC; broadcasts reach every
// other core of the segment. Every frame a core sends is logged.
type routedNet struct {
	nodes    []*rnNode
	rtr      []rnPort // the router's port on each segment
	now      int64
	log      []rnFrame
	inbox    [][][]byte // per node: frames to receive on the next step
	noARP    bool       // the router ignores ARP (a dead or silent gateway)
	unrouted int        // frames the router could not forward (no core has the address)
}

// rnPort is the router's interface on one segment.
type rnPort struct {
	ip  uint32
	mac wire.MAC
}

type rnNode struct {
	c   *Core
	tx  *testTx
	seg int
}

// rnFrame is one frame a core sent, as seen on its segment.
type rnFrame struct {
	from int
	b    []byte
}

// rnSegments are the test topology's two subnets: 10.1.0.0/24 and
// 10.2.0.0/24, the router at .1 on each.
var rnSegments = [...]netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("10.2.0.0/24")}

func newRoutedNet() *routedNet {
	return &routedNet{
		rtr: []rnPort{
			{ipOf("10.1.0.1"), wire.MAC{2, 0xee, 0, 0, 1, 1}},
			{ipOf("10.2.0.1"), wire.MAC{2, 0xee, 0, 0, 2, 1}},
		},
		now: 1000,
	}
}

// routedConfig is the test config of an engine at ip (in one of
// rnSegments, /24) whose gateway is the router.
func routedConfig(ip string, mac byte) Config {
	cfg := testConfig(ip, mac)
	a := netip.MustParseAddr(ip)
	for _, s := range rnSegments {
		if s.Contains(a) {
			cfg.Subnet = netip.PrefixFrom(a, s.Bits())
			cfg.Gateway = s.Addr().Next()
		}
	}
	cfg.NeighborReachable = 20 * time.Millisecond
	return cfg
}

// add attaches a core with cfg to the segment of its address.
func (n *routedNet) add(t testing.TB, cfg Config) *Core {
	t.Helper()
	seg := -1
	for k, s := range rnSegments {
		if s.Contains(cfg.LocalIP) {
			seg = k
		}
	}
	if seg < 0 {
		t.Fatalf("%v is on no segment", cfg.LocalIP)
	}
	tx := newTestTx(512)
	c := newCore(t, cfg, tx)
	n.nodes = append(n.nodes, &rnNode{c: c, tx: tx, seg: seg})
	n.inbox = append(n.inbox, nil)
	return c
}

// step polls every core once, carries what they sent, and hands every
// core what reached it. It returns the work done.
func (n *routedNet) step() int {
	w := 0
	for i, nd := range n.nodes {
		w += nd.c.Poll(n.now)
		for _, fr := range nd.tx.take() {
			n.log = append(n.log, rnFrame{from: i, b: fr})
			n.carry(i, fr)
			w++
		}
	}
	for i, nd := range n.nodes {
		in := n.inbox[i]
		n.inbox[i] = nil
		for _, fr := range in {
			nd.c.Receive(n.now, fr)
		}
	}
	return w
}

// run steps until nothing happens, 1 µs a step.
func (n *routedNet) run() {
	for k := 0; k < 200; k++ {
		w := n.step()
		n.now += 1000
		if w == 0 {
			return
		}
	}
}

// carry moves one frame node from sent.
func (n *routedNet) carry(from int, fr []byte) {
	seg := n.nodes[from].seg
	dst := wire.MAC(fr[0:6])
	if wire.EtherType(fr) == wire.EtherTypeARP {
		var a wire.ARP
		if wire.DecodeARP(fr, &a) != nil {
			return
		}
		if a.Op == wire.ARPRequest && a.TargetIP == n.rtr[seg].ip && a.SenderIP != a.TargetIP {
			if !n.noARP {
				n.inbox[from] = append(n.inbox[from], n.arpFromRouter(seg, wire.ARPReply, a.SenderMAC, a.SenderIP))
			}
			return
		}
	}
	if dst == n.rtr[seg].mac && wire.EtherType(fr) == wire.EtherTypeIPv4 {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			return
		}
		for i, nd := range n.nodes {
			if nd.c.out.ip == f.DstIP {
				out := append([]byte(nil), fr...)
				copy(out[0:6], nd.c.out.mac[:])
				copy(out[6:12], n.rtr[nd.seg].mac[:])
				n.inbox[i] = append(n.inbox[i], out)
				return
			}
		}
		n.unrouted++
		return
	}
	for i, nd := range n.nodes {
		if i != from && nd.seg == seg && (dst == wire.Broadcast || dst == nd.c.out.mac) {
			n.inbox[i] = append(n.inbox[i], append([]byte(nil), fr...))
		}
	}
}

// arpFromRouter is an ARP packet of op from the router's port on seg to
// (mac, ip); a gratuitous one when ip is the router's own address.
func (n *routedNet) arpFromRouter(seg int, op uint16, mac wire.MAC, ip uint32) []byte {
	b := make([]byte, wire.MinFrame)
	r := n.rtr[seg]
	wire.EncodeARP(b, &wire.ARP{Op: op, SenderMAC: r.mac, SenderIP: r.ip, TargetMAC: mac, TargetIP: ip, EthDst: mac, EthSrc: r.mac})
	return b
}

// since returns the frames logged from index k on, decoded: ARP
// requests' target addresses and the OneRMA frames' fields and payload
// lengths, each with its sender.
func (n *routedNet) since(k int) (arps []wire.ARP, ip []rnIPv4) {
	for _, l := range n.log[k:] {
		if wire.EtherType(l.b) == wire.EtherTypeARP {
			var a wire.ARP
			if wire.DecodeARP(l.b, &a) == nil {
				arps = append(arps, a)
			}
			continue
		}
		var f wire.Fields
		if p, err := wire.Decode(l.b, &f); err == nil {
			ip = append(ip, rnIPv4{from: l.from, f: f, plen: len(p)})
		}
	}
	return arps, ip
}

type rnIPv4 struct {
	from int
	f    wire.Fields
	plen int
}

// rnApp is an application on a routed core with a region the others
// may read and write, and a region of its own to read into and write
// from. Op k uses offset k*4096 of both.
type rnApp struct {
	*testApp
	c          *Core
	local, pub abi.RegionID
	lmem, pmem []byte
}

func openRNApp(t testing.TB, c *Core, class abi.Class) *rnApp {
	t.Helper()
	a := &rnApp{testApp: openApp(t, c, class, 16), c: c, lmem: make([]byte, 16*4096), pmem: make([]byte, 16*4096)}
	pattern(a.pmem, byte(c.out.ip))
	pattern(a.lmem, 0x77)
	var err error
	if a.local, err = c.RegisterRegion(a.id, a.lmem, abi.PermAll, testKr); err != nil {
		t.Fatal(err)
	}
	if a.pub, err = c.RegisterRegion(a.id, a.pmem, abi.PermAll, testKr); err != nil {
		t.Fatal(err)
	}
	return a
}

// op posts op (READ or WRITE) of n bytes of peer's public region on
// slot k; cookie k.
func (a *rnApp) op(t testing.TB, op abi.Op, k int, peer *rnApp, n uint32) {
	t.Helper()
	off := uint64(k) * 4096
	cmd := readCmd(a.slots[k], peer.c.out.ip, peer.pub, off, a.local, off, n, uint64(k))
	cmd.Op = op
	a.post(t, cmd)
}

// same reports whether op k's n bytes are alike on both sides (after a
// READ or a WRITE).
func (a *rnApp) same(k int, peer *rnApp, n int) bool {
	off := k * 4096
	return string(a.lmem[off:off+n]) == string(peer.pmem[off:off+n])
}

// done runs the net and expects one completion of status want per op
// posted since the last call.
func (a *rnApp) done(t testing.TB, n *routedNet, ops int, want abi.Status) []abi.Completion {
	t.Helper()
	n.run()
	got := a.completions()
	if len(got) != ops {
		t.Fatalf("want %d completions, got %+v", ops, got)
	}
	for _, c := range got {
		if c.Status != want {
			t.Fatalf("want %v, got %+v", want, got)
		}
	}
	return got
}
