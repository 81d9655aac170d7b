package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port"
	"github.com/onerma/onerma/wire"
)

// reqRef names a request the fabric saw: its sender and tag.
type reqRef struct {
	node int
	tag  uint64
}

// frame is a sim-owned copy of a frame in the fabric.
type frame struct {
	buf []byte // len == pool size (fabric MTU + Ethernet header)
	n   int
	src int
	// op: the cookie of the op whose request this is (0: not a request,
	// or its op unknown); the fabric marks the op when it damages a copy.
	op uint64
}

// framePool recycles frame buffers: after warm-up a run allocates nothing
// per frame. Buffers are scribbled on release so a core that keeps a
// received frame past Receive reads garbage and fails loudly.
type framePool struct {
	size  int
	free  []*frame
	inUse int
}

func (p *framePool) get() *frame {
	p.inUse++
	if n := len(p.free); n > 0 {
		f := p.free[n-1]
		p.free = p.free[:n-1]
		return f
	}
	return &frame{buf: make([]byte, p.size)}
}

func (p *framePool) put(f *frame) {
	p.inUse--
	b := f.buf[:f.n]
	for i := range b {
		b[i] = 0xdb
	}
	f.n, f.op = 0, 0
	p.free = append(p.free, f)
}

func (p *framePool) clone(f *frame) *frame {
	g := p.get()
	g.n = copy(g.buf, f.buf[:f.n])
	g.src, g.op = f.src, f.op
	return g
}

// node is one engine (its cores: core.go), its NIC model and its
// application.
type node struct {
	s     *Sim
	id    int
	ip    netip.Addr
	ip4   uint32
	mac   wire.MAC
	g     *engine.Group
	cores []*simCore
	ecfg  engine.Config // the engine's config (core 0's): timeouts, table sizes
	app   *app

	shut     bool  // Core.Shutdown was called
	linkDown int   // > 0: link down (nested flaps)
	upFree   int64 // uplink busy until
	downFree int64 // switch egress towards this node busy until

	commits uint64 // WRITE commits seen (④ sent): Stats.WritesCommitted
	// remoteRekeys: REKEY installs seen (④ sent): Stats.RemoteRekeys
	// (Stats.Rekeys counts them too, with the application's Core.Rekey).
	remoteRekeys uint64
	// obsolete: genuine answers to a WRITE request (①) that reached the
	// core after it accepted the op's pull (a duplicated request answered
	// NACK or an error): curried with ①'s IV, they no longer authenticate.
	obsolete uint64
	// ivs: every IV counter the node's cores sent a frame with (Appendix
	// A: a counter is never used twice, whatever the key or core).
	ivs map[uint64]struct{}
	// audited: the region table version whose books were last audited.
	audited uint64
	// owner: the core of the portal that registered each region (nodes
	// of several cores).
	owner map[abi.RegionID]*simCore
	// tmpl: the engine config the node's engine was built from (a
	// restarted engine is built from it again); epoch: how many times
	// the engine restarted (restart.go).
	tmpl  engine.Config
	epoch int
}

func newNode(s *Sim, i int) *node {
	n := &node{s: s, id: i, ivs: make(map[uint64]struct{}), owner: make(map[abi.RegionID]*simCore)}
	n.ip = netip.AddrFrom4([4]byte{10, 0, byte((i + 1) >> 8), byte(i + 1)})
	n.ip4 = ip4(n.ip)
	n.mac = wire.MAC{0x02, 0, 0, 0, byte((i + 1) >> 8), byte(i + 1)}
	return n
}

// newCores builds the node's engine of k cores from ec and its simCores.
func (n *node) newCores(ec engine.Config, k int) error {
	s := n.s
	n.cores = make([]*simCore, k)
	txs := make([]engine.Tx, k)
	for i := range n.cores {
		c := &simCore{n: n, idx: i, rx: newFrameRing(s.cfg.Net.RxQueueFrames), next: math.MaxInt64}
		if k > 1 {
			c.hand = newFrameRing(s.cfg.Net.RxQueueFrames)
		}
		c.tx = nodeTx{s: s, c: c, buf: make([]byte, engine.MaxFrameBytes)}
		n.cores[i], txs[i] = c, &c.tx
	}
	g, err := engine.NewGroup(ec, txs)
	if err != nil {
		return err
	}
	n.g = g
	for i, c := range n.cores {
		c.core = g.Core(i)
		c.cfg = c.core.Config()
		c.steer = port.NewSteering(i, k, c.cfg.UDPPort, c)
	}
	n.ecfg = n.cores[0].cfg
	return nil
}

// nodeOfMAC maps the simulator's MAC scheme back to a node index (-1: none).
func (s *Sim) nodeOfMAC(m []byte) int {
	if m[0] != 0x02 || m[1] != 0 || m[2] != 0 || m[3] != 0 {
		return -1
	}
	i := int(m[4])<<8 | int(m[5]) - 1
	if i < 0 || i >= len(s.nodes) {
		return -1
	}
	return i
}

func (s *Sim) nodeOfIP(ip uint32) int {
	if ip>>16 != 10<<8 {
		return -1
	}
	i := int(ip&0xffff) - 1
	if i < 0 || i >= len(s.nodes) {
		return -1
	}
	return i
}

// nodeTx is the engine.Tx of one core: one scratch buffer lent to the
// core; Send copies the frame into a sim-owned buffer and hands it to the
// fabric.
type nodeTx struct {
	s    *Sim
	c    *simCore
	buf  []byte
	lent bool
}

var _ engine.Tx = (*nodeTx)(nil)

func (t *nodeTx) Buffer() []byte {
	if !t.lent {
		if p := t.s.cfg.Net.TxNoBuffer; p > 0 && t.s.netRng.Float64() < p {
			t.s.res.Net.TxNoBuffer++
			return nil
		}
		t.lent = true
	}
	return t.buf
}

func (t *nodeTx) Send(n int) {
	if !t.lent {
		t.s.fail("node %d core %d: Tx.Send(%d) without a buffer from Tx.Buffer", t.c.n.id, t.c.idx, n)
		return
	}
	t.lent = false
	if n < 0 || n > len(t.buf) {
		t.s.fail("node %d core %d: Tx.Send(%d) outside the buffer", t.c.n.id, t.c.idx, n)
		return
	}
	t.s.send(t.c, t.buf[:n])
	// The core must not touch the buffer after Send; scribble it so any
	// reuse without Buffer shows up as garbage on the wire.
	b := t.buf[:n]
	for i := range b {
		b[i] = 0xee
	}
}

// checkTx: every frame a core emits is well formed, from its own
// addresses, within the MTU, addressed to the right MAC, and (OneRMA)
// carries a nonce of its own address and a counter its node never used
// before, tagged with the core's id (its IV lane).
// The fabric checks structure only: it holds no keys, so whether a frame
// is authentic is the receiving core's business (AES-GCM), and a damaged
// byte that got through shows in the applications' data checks. It
// decodes OneRMA frames into f.
func (s *Sim) checkTx(c *simCore, b []byte, f *wire.Fields) bool {
	n := c.n
	if len(b) < wire.MinFrame {
		s.fail("node %d sent a %d-byte frame (minimum %d)", n.id, len(b), wire.MinFrame)
		return false
	}
	if len(b)-wire.EthLen > s.cfg.MTU {
		s.fail("node %d sent a %d-byte frame, above its MTU %d", n.id, len(b), s.cfg.MTU)
		return false
	}
	if [6]byte(b[6:12]) != n.mac {
		s.fail("node %d sent a frame from MAC %x", n.id, b[6:12])
		return false
	}
	switch wire.EtherType(b) {
	case wire.EtherTypeARP:
		var a wire.ARP
		if err := wire.DecodeARP(b, &a); err != nil {
			s.fail("node %d sent a malformed ARP frame: %v", n.id, err)
			return false
		}
		if a.SenderIP != n.ip4 || a.SenderMAC != n.mac {
			s.fail("node %d sent ARP claiming %08x is at %x", n.id, a.SenderIP, a.SenderMAC)
			return false
		}
		if a.Op == wire.ARPRequest && a.EthDst != wire.Broadcast {
			s.fail("node %d sent an ARP request to %x (not broadcast)", n.id, a.EthDst)
			return false
		}
	case wire.EtherTypeIPv4:
		if _, err := wire.Decode(b, f); err != nil {
			s.fail("node %d sent a malformed OneRMA frame: %v", n.id, err)
			return false
		}
		if err := wire.CheckIPv4Checksum(b); err != nil {
			s.fail("node %d sent a frame with a bad IPv4 header checksum: %v", n.id, err)
			return false
		}
		addr, ctr := aesni.NonceCounter(f.IV[:])
		if addr != n.ip.As4() || ctr == 0 {
			s.fail("node %d sent a %v frame with nonce %x: want its address %v and a counter > 0", n.id, f.Type, f.IV, n.ip)
			return false
		}
		if _, dup := n.ivs[ctr]; dup {
			s.fail("node %d sent a %v frame with IV counter %d, which it used before (nonce reuse)", n.id, f.Type, ctr)
			return false
		}
		if tag := ctr >> 58; tag != uint64(c.cfg.CoreID) {
			s.fail("node %d core %d sent a %v frame with IV counter %#x: its lane tag is %d", n.id, c.idx, f.Type, ctr, tag)
			return false
		}
		n.ivs[ctr] = struct{}{}
		if f.SrcIP != n.ip4 {
			s.fail("node %d sent a frame from IP %08x", n.id, f.SrcIP)
			return false
		}
		if f.Type == wire.TypeError && abi.Status(f.Status) == abi.StatusRemoteAuthFailure && s.res.Net.Corrupted > 0 {
			// The answer to a request that failed authentication goes to
			// the addresses the request claimed: when the fabric damaged
			// its source IP, to a node's MAC (the Ethernet header is never
			// damaged) but an IP nobody has, or another node's.
			if s.nodeOfMAC(f.DstMAC[:]) < 0 {
				s.fail("node %d sent REMOTE_AUTHENTICATION_FAILURE to MAC %x, which no node has", n.id, f.DstMAC)
				return false
			}
			if d := s.nodeOfIP(f.DstIP); d < 0 || f.DstMAC != s.nodes[d].mac {
				s.res.Net.Misaddressed++
			}
		} else if d := s.nodeOfIP(f.DstIP); d < 0 && s.hostile != nil && isPhantom(f.DstIP) {
			// An answer to a request the attacker forged from a
			// phantom source goes to the MAC it came from, the attacker's.
			if f.DstMAC != hostileMAC {
				s.fail("node %d sent a %v frame to the attacker's phantom %08x at MAC %x", n.id, f.Type, f.DstIP, f.DstMAC)
				return false
			}
		} else if d < 0 {
			s.fail("node %d sent a %v frame to %08x, which no node has: it never resolved", n.id, f.Type, f.DstIP)
			return false
		} else if f.DstMAC != s.nodes[d].mac {
			s.fail("node %d sent a frame for node %d to MAC %x, want %x", n.id, d, f.DstMAC, s.nodes[d].mac)
			return false
		}
	default:
		s.fail("node %d sent a frame of EtherType %#04x", n.id, wire.EtherType(b))
		return false
	}
	return true
}

func (s *Sim) serNs(nbytes int) int64 {
	bps := s.cfg.Net.BitsPerSec
	if bps <= 0 {
		return 0
	}
	return (int64(nbytes+20)*8*1_000_000_000 + bps - 1) / bps // + preamble and gap
}

func (s *Sim) queueNs(nbytes int) int64 {
	if nbytes <= 0 {
		return math.MaxInt64
	}
	return s.serNs(nbytes)
}

// send: a core emitted a frame at s.now.
func (s *Sim) send(c *simCore, b []byte) {
	n := c.n
	var h wire.Fields
	if !s.checkTx(c, b, &h) {
		return
	}
	c.txSent++
	c.txBytes += uint64(len(b))
	s.res.Net.Sent++
	s.digest(0x5e4d, uint64(n.id), uint64(len(b)), binary.LittleEndian.Uint64(b[len(b)-8:]))
	if s.traceOn {
		s.tracef("node %d tx %s", n.id, describe(b))
	}
	if wire.EtherType(b) == wire.EtherTypeIPv4 {
		if h.Type == wire.TypeReadResp {
			s.sawReadData(c, &h)
		}
		switch h.Type {
		case wire.TypeReadReq:
			if fr := s.cfg.flows; fr != nil && fr.shares != nil {
				fr.shares.sawRequest(n, &h)
			}
		case wire.TypeWriteReq, wire.TypeRekeyReq:
			s.sawWriteRequest(n, &h)
		case wire.TypePullReq:
			s.sawPullSent(&h)
		case wire.TypeAck:
			s.sawCommit(n, &h)
		}
		if s.reqOps != nil {
			switch h.Type {
			case wire.TypeReadReq, wire.TypeWriteReq, wire.TypeRekeyReq, wire.TypeLookupReq:
				s.sawRequest(n, &h)
			default:
				s.checkServedEpoch(n, &h)
			}
		}
		if s.hostile != nil && n == s.hostile.srv {
			s.hostile.sawAnswer(c, &h)
		}
		if s.err != nil {
			return
		}
	}
	if n.linkDown > 0 {
		s.res.Net.LinkDrops++
		return
	}
	start := max(s.now, n.upFree)
	if s.cfg.Net.BitsPerSec > 0 && start-s.now > s.queueNs(s.cfg.Net.UpQueueBytes) {
		s.res.Net.UpQueueDrops++
		return
	}
	n.upFree = start + s.serNs(len(b))
	f := s.pool.get()
	f.n = copy(f.buf, b)
	f.src = n.id
	if (h.Type == wire.TypeReadReq || h.Type == wire.TypeWriteReq || h.Type == wire.TypeRekeyReq) && wire.EtherType(b) == wire.EtherTypeIPv4 {
		// The core sends a request when its op enters service, inside
		// Poll: the slot's op is the one the app posted last on it.
		if ref, ok := n.app.slotOwner[abi.SlotID(h.Tag>>32)]; ok && !ref.p.closed {
			if o := ref.p.busy[ref.k]; o != nil {
				f.op = o.cookie
			}
		}
		if s.reqIVs != nil {
			s.reqIVs[reqRef{n.id, h.Tag}] = h.IV
		}
	}
	s.schedule(n.upFree+s.cfg.Net.LatencyNs, evSwitch, n.id, 0, f)
}

// sawReadData: core c sent a chunk of READ data. Every chunk of one
// request's answer has a counter of one range (base + offset/64), so two
// bases for one op (initiator and tag) mean its request was served twice:
// a duplicate got past the serving core's replay window, on whichever
// core it landed (unless the server forgot the sender lane's window to
// make room, or keeps none).
func (s *Sim) sawReadData(c *simCore, h *wire.Fields) {
	n := c.n
	if o, ok := n.owner[abi.RegionID(h.Region)]; ok && o != c {
		s.res.CrossCore++
	}
	_, ctr := aesni.NonceCounter(h.IV[:])
	base := ctr - h.Offset/wire.ChunkAlign
	key := reqRef{s.nodeOfIP(h.DstIP), h.Tag}
	first, seen := s.served[key]
	if !seen {
		s.served[key] = servedBy{n.id, base}
		return
	}
	if first == (servedBy{n.id, base}) || n.ecfg.ReplayPeers == 0 {
		return
	}
	for _, k := range n.cores {
		if k.last.ReplayEvictions > 0 {
			return
		}
	}
	s.fail("node %d core %d served the READ request of node %d tag %#x a second time (counters from %#x, first from %#x by node %d): a replayed request got through",
		n.id, c.idx, key.node, h.Tag, base, first.base, first.node)
}

// servedBy is the node that answered a READ and its answer's counter base.
type servedBy struct {
	node int
	base uint64
}

// atSwitch forwards a frame: broadcast to every other node, unicast by
// destination MAC (unknown destinations and hairpins are dropped).
func (s *Sim) atSwitch(f *frame) {
	dst := f.buf[0:6]
	if [6]byte(dst) == wire.Broadcast {
		s.res.Net.Broadcast++
		for _, m := range s.nodes {
			if m.id != f.src {
				s.forward(m, s.pool.clone(f))
			}
		}
		s.pool.put(f)
		return
	}
	d := s.nodeOfMAC(dst)
	switch {
	case d < 0 && s.hostile != nil && [6]byte(dst) == hostileMAC:
		s.hostile.receive(f)
	case d < 0:
		s.res.Net.UnknownDst++
		s.pool.put(f)
	case d == f.src && !s.cfg.Net.Hairpin:
		s.res.Net.Hairpins++
		s.pool.put(f)
	default:
		s.forward(s.nodes[d], f)
	}
}

// forward applies the per-copy faults and queues the copy on d's downlink.
func (s *Sim) forward(d *node, f *frame) {
	nc := &s.cfg.Net
	r := s.netRng
	if d.linkDown > 0 {
		s.res.Net.LinkDrops++
		s.pool.put(f)
		return
	}
	if nc.Drop > 0 && r.Float64() < nc.Drop {
		s.res.Net.Dropped++
		s.tracef("drop to %d: %s", d.id, describe(f.buf[:f.n]))
		s.pool.put(f)
		return
	}
	if nc.Dup > 0 && r.Float64() < nc.Dup {
		s.res.Net.Duplicated++
		g := s.pool.clone(f)
		s.downlink(d, g, r.Int64N(nc.ReorderNs+1))
	}
	s.downlink(d, f, 0)
}

func (s *Sim) downlink(d *node, f *frame, extra int64) {
	nc := &s.cfg.Net
	r := s.netRng
	if nc.Corrupt > 0 && r.Float64() < nc.Corrupt && s.corrupt(f) {
		s.res.Net.Corrupted++
		if o := s.ops[f.op]; o != nil && f.op != 0 {
			o.reqCorrupt = true
		}
	}
	if nc.Forge > 0 && r.Float64() < nc.Forge {
		s.forge(f)
	}
	if nc.ForgeWrites > 0 && r.Float64() < nc.ForgeWrites {
		s.forgeWrite(f)
	}
	if s.cfg.netHook != nil {
		s.cfg.netHook(s, d, f)
	}
	start := max(s.now, d.downFree)
	if nc.BitsPerSec > 0 && start-s.now > s.queueNs(nc.DownQueueBytes) {
		s.res.Net.DownQueueDrops++
		s.pool.put(f)
		return
	}
	d.downFree = start + s.serNs(f.n)
	t := d.downFree + nc.LatencyNs + extra
	if nc.JitterNs > 0 {
		t += r.Int64N(nc.JitterNs)
	}
	if nc.Reorder > 0 && r.Float64() < nc.Reorder {
		s.res.Net.Reordered++
		t += r.Int64N(nc.ReorderNs + 1)
	}
	if nc.Straggle > 0 && r.Float64() < nc.Straggle {
		s.res.Net.Straggled++
		t += nc.StraggleNs/2 + r.Int64N(nc.StraggleNs+1)
	}
	s.schedule(t, evDeliver, d.id, 0, f)
}

// corrupt damages an IPv4 frame beyond its Ethernet header: 1-3 flipped
// bits, or one burst of up to 4 bytes. The receiving core must reject it:
// every byte it uses is in the AES-GCM tag's coverage (IPv4 addresses, UDP
// header, OneRMA header, payload, the tag itself) or checked by Decode
// (IPv4 version, lengths, fragments, protocol); what is left (TOS, ID,
// TTL, IPv4 and UDP checksums) it ignores. ARP frames and Ethernet
// headers are left alone: on a real link the FCS protects them, and ARP
// has no integrity check of its own.
func (s *Sim) corrupt(f *frame) bool {
	if f.n <= wire.PayloadOffset || wire.EtherType(f.buf[:f.n]) != wire.EtherTypeIPv4 {
		return false
	}
	r := s.netRng
	b := f.buf[wire.EthLen:f.n]
	switch r.IntN(3) {
	case 0: // bits anywhere
		for k := 1 + r.IntN(3); k > 0; k-- {
			i := r.IntN(len(b) * 8)
			b[i/8] ^= 1 << (i % 8)
		}
	case 1: // a burst
		i := r.IntN(len(b))
		for k := 1 + r.IntN(4); k > 0 && i < len(b); k-- {
			b[i] ^= byte(1 + r.IntN(255))
			i++
		}
	case 2: // one bit of the OneRMA header, payload or trailer
		p := f.buf[wire.EthLen+wire.IPv4Len+wire.UDPLen : f.n]
		i := r.IntN(len(p) * 8)
		p[i/8] ^= 1 << (i % 8)
	}
	return true
}

// forge alters one payload byte of a read response and reseals it, as
// only a holder of the K_d could: the simulator knows every K_r, and the
// IV of every request sent (the answer curries it).
func (s *Sim) forge(f *frame) {
	var h wire.Fields
	b := f.buf[:f.n]
	p, err := wire.Decode(b, &h)
	if err != nil || h.Type != wire.TypeReadResp || len(p) == 0 {
		return
	}
	ini, srv := s.nodeOfIP(h.DstIP), s.nodeOfIP(h.SrcIP)
	iv, ok := s.reqIVs[reqRef{ini, h.Tag}]
	if ini < 0 || srv < 0 || !ok {
		return
	}
	for _, rg := range s.regions {
		if rg.node != srv || uint32(rg.id) != h.Region {
			continue
		}
		for v := len(rg.keys) - 1; v >= 0; v-- {
			a, err := aesni.NewAEAD(rg.keys[v].d.Derive(s.nodes[ini].ip.As4(), h.PID, uint8(abi.OpRead)))
			if err != nil {
				panic(err)
			}
			pt := make([]byte, len(p))
			if a.OpenResponseDirect(pt, wire.Sealed(b, len(p)), wire.IV(b), wire.AAD(b), iv[:]) != nil {
				continue
			}
			pt[s.netRng.IntN(len(pt))] ^= 0x10
			a.SealResponse(wire.Sealed(b, len(p)), pt, wire.IV(b), wire.AAD(b), iv[:])
			s.res.Net.Forged++
			return
		}
	}
}

// deliver: a frame reaches n's NIC, which puts it on a core's rx queue.
func (n *node) deliver(f *frame) {
	s := n.s
	if n.linkDown > 0 {
		s.res.Net.LinkDrops++
		s.pool.put(f)
		return
	}
	c := n.rxCore(f)
	if !c.rx.push(f) {
		s.res.Net.RxOverflow++
		s.pool.put(f)
		return
	}
	s.res.Net.Delivered++
	c.reschedule()
}

// rxBurst is how many frames the core takes per step (l2fwd MAX_PKT_BURST).
const rxBurst = 32

// costOf is node n's CPU cost model: Config.Cost unless overridden.
func (s *Sim) costOf(n *node) *CostConfig {
	if n.id < len(s.cfg.costs) && s.cfg.costs[n.id] != (CostConfig{}) {
		return &s.cfg.costs[n.id]
	}
	return &s.cfg.Cost
}

// describe renders a frame for traces (slow; only with tracing on).
func describe(b []byte) string {
	switch wire.EtherType(b) {
	case wire.EtherTypeARP:
		var a wire.ARP
		if wire.DecodeARP(b, &a) != nil {
			return "ARP(bad)"
		}
		return fmt.Sprintf("ARP op=%d %08x->%08x", a.Op, a.SenderIP, a.TargetIP)
	case wire.EtherTypeIPv4:
		var f wire.Fields
		p, err := wire.Decode(b, &f)
		if err != nil {
			return fmt.Sprintf("IPv4(%v)", err)
		}
		_, ctr := aesni.NonceCounter(f.IV[:])
		return fmt.Sprintf("type=%d st=%d %08x:%d->%08x:%d pid=%d tag=%x reg=%x len=%d off=%d plen=%d iv=%d",
			f.Type, f.Status, f.SrcIP, f.SrcPort, f.DstIP, f.DstPort, f.PID, f.Tag, f.Region, f.Length, f.Offset, len(p), ctr)
	}
	return fmt.Sprintf("ethertype %#04x len %d", wire.EtherType(b), len(b))
}
