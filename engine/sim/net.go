package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// frame is a sim-owned copy of a frame in the fabric.
type frame struct {
	buf []byte // len == pool size (fabric MTU + Ethernet header)
	n   int
	src int
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
	f.n = 0
	p.free = append(p.free, f)
}

func (p *framePool) clone(f *frame) *frame {
	g := p.get()
	g.n = copy(g.buf, f.buf[:f.n])
	g.src = f.src
	return g
}

// node is one engine (one Core), its NIC model and its application.
type node struct {
	s    *Sim
	id   int
	ip   netip.Addr
	ip4  uint32
	mac  wire.MAC
	core *engine.Core
	ecfg engine.Config
	tx   nodeTx
	app  *app

	rx     []*frame // rx ring (fixed capacity)
	rxHead int
	rxLen  int

	busyUntil int64 // virtual CPU: the core is busy until then
	next      int64 // when the driver runs this core next (MaxInt64: idle)
	kick      bool  // run as soon as the core is free (rx, new commands, work left)
	idleRuns  int   // consecutive runs that did nothing
	linkDown  int   // > 0: link down (nested flaps)
	upFree    int64 // uplink busy until
	downFree  int64 // switch egress towards this node busy until

	txSent uint64 // frames the core sent
	rxFed  uint64 // frames handed to Receive
	last   engine.Stats
}

func newNode(s *Sim, i int) *node {
	n := &node{s: s, id: i}
	n.ip = netip.AddrFrom4([4]byte{10, 0, byte((i + 1) >> 8), byte(i + 1)})
	n.ip4 = ip4(n.ip)
	n.mac = wire.MAC{0x02, 0, 0, 0, byte((i + 1) >> 8), byte(i + 1)}
	n.rx = make([]*frame, s.cfg.Net.RxQueueFrames)
	n.tx = nodeTx{s: s, n: n, buf: make([]byte, engine.MaxFrameBytes)}
	return n
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

// nodeTx is the engine.Tx of one node: one scratch buffer lent to the
// core; Send copies the frame into a sim-owned buffer and hands it to the
// fabric.
type nodeTx struct {
	s    *Sim
	n    *node
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
		t.s.fail("node %d: Tx.Send(%d) without a buffer from Tx.Buffer", t.n.id, n)
		return
	}
	t.lent = false
	if n < 0 || n > len(t.buf) {
		t.s.fail("node %d: Tx.Send(%d) outside the buffer", t.n.id, n)
		return
	}
	t.s.send(t.n, t.buf[:n])
	// The core must not touch the buffer after Send; scribble it so any
	// reuse without Buffer shows up as garbage on the wire.
	b := t.buf[:n]
	for i := range b {
		b[i] = 0xee
	}
}

// checkTx: every frame a core emits is well formed, from its own
// addresses, within the MTU, and addressed to the right MAC.
func (s *Sim) checkTx(n *node, b []byte) bool {
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
		var f wire.Fields
		p, err := wire.Decode(b, &f)
		if err == nil {
			err = wire.CheckICRC(b, len(p))
		}
		if err != nil {
			s.fail("node %d sent a malformed OneRMA frame: %v", n.id, err)
			return false
		}
		if f.SrcIP != n.ip4 {
			s.fail("node %d sent a frame from IP %08x", n.id, f.SrcIP)
			return false
		}
		if d := s.nodeOfIP(f.DstIP); d < 0 {
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
func (s *Sim) send(n *node, b []byte) {
	if !s.checkTx(n, b) {
		return
	}
	n.txSent++
	s.res.Net.Sent++
	s.digest(0x5e4d, uint64(n.id), uint64(len(b)), binary.LittleEndian.Uint64(b[len(b)-8:]))
	if s.traceOn {
		s.tracef("node %d tx %s", n.id, describe(b))
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
	s.schedule(n.upFree+s.cfg.Net.LatencyNs, evSwitch, n.id, 0, f)
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
	}
	if nc.Forge > 0 && r.Float64() < nc.Forge {
		s.forge(f)
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

// corrupt damages an IPv4 frame beyond its Ethernet header in a way the
// receiver must detect: 1-3 flipped bits, or one burst of up to 4 bytes
// (CRC-32C detects every burst of at most 32 bits and every error of at
// most 3 bits at these lengths; the IPv4 checksum covers its header).
// ARP frames and Ethernet headers are left alone: on a real link the FCS
// protects them, and ARP has no integrity check of its own.
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

// forge alters one payload byte of a read response and reseals it.
func (s *Sim) forge(f *frame) {
	var h wire.Fields
	p, err := wire.Decode(f.buf[:f.n], &h)
	if err != nil || h.Type != wire.TypeReadResp || len(p) == 0 {
		return
	}
	p[s.netRng.IntN(len(p))] ^= 0x10
	wire.SealICRC(f.buf[:f.n], len(p))
}

// deliver: a frame reaches n's NIC.
func (n *node) deliver(f *frame) {
	s := n.s
	if n.linkDown > 0 {
		s.res.Net.LinkDrops++
		s.pool.put(f)
		return
	}
	if n.rxLen == len(n.rx) {
		s.res.Net.RxOverflow++
		s.pool.put(f)
		return
	}
	n.rx[(n.rxHead+n.rxLen)%len(n.rx)] = f
	n.rxLen++
	s.res.Net.Delivered++
	n.reschedule()
}

// rxBurst is how many frames the core takes per step (l2fwd MAX_PKT_BURST).
const rxBurst = 32

// step is one iteration of the core's poll loop at s.now: a burst of
// received frames, one Poll, completions harvested by the applications,
// and every invariant checked. The step costs virtual CPU time.
func (n *node) step() {
	s := n.s
	now := s.now
	n.kick = false
	txBefore := n.txSent
	rxCount := 0
	for n.rxLen > 0 && rxCount < rxBurst {
		f := n.rx[n.rxHead]
		n.rx[n.rxHead] = nil
		n.rxHead = (n.rxHead + 1) % len(n.rx)
		n.rxLen--
		if s.traceOn {
			s.tracef("node %d rx %s", n.id, describe(f.buf[:f.n]))
		}
		n.core.Receive(now, f.buf[:f.n])
		n.rxFed++
		s.pool.put(f)
		rxCount++
	}
	work := n.core.Poll(now)
	n.app.harvestAll()
	n.afterCall("Poll")
	txCount := int64(n.txSent - txBefore)
	c := &s.cfg.Cost
	n.busyUntil = now + c.PollNs + int64(rxCount)*c.RxFrameNs + txCount*c.TxFrameNs
	if work > 0 || rxCount > 0 || txCount > 0 {
		n.kick = true
		n.idleRuns = 0
	} else {
		n.idleRuns++
		if n.idleRuns > 100_000 {
			s.fail("node %d: Poll keeps returning 0 while NextDeadline()=%d <= now (timer never cleared)",
				n.id, n.core.NextDeadline()-s.t0)
		}
	}
	s.digest(0x57e9, uint64(n.id), uint64(work), uint64(rxCount), uint64(txCount))
	n.reschedule()
}

// reschedule computes when the driver runs this core next.
func (n *node) reschedule() {
	s := n.s
	if n.rxLen > 0 || n.kick {
		n.next = max(s.now, n.busyUntil)
		return
	}
	d := n.core.NextDeadline()
	if d == math.MaxInt64 {
		n.next = math.MaxInt64
		return
	}
	n.next = max(d, n.busyUntil, s.now)
}

// afterCall checks the core after any call into it.
func (n *node) afterCall(what string) {
	s := n.s
	if s.err != nil {
		return
	}
	if err := n.core.Audit(); err != nil {
		s.fail("node %d: Audit after %s: %v", n.id, what, err)
		return
	}
	st := n.core.Stats()
	switch {
	case st.WindowInUse > uint64(n.ecfg.WindowBytes):
		s.fail("node %d: WindowInUse %d > WindowBytes %d", n.id, st.WindowInUse, n.ecfg.WindowBytes)
	case st.SlotsInUse > uint64(n.ecfg.Slots):
		s.fail("node %d: SlotsInUse %d > Slots %d", n.id, st.SlotsInUse, n.ecfg.Slots)
	case st.OpsInFlight != uint64(n.core.InFlight()):
		s.fail("node %d: Stats.OpsInFlight %d != InFlight() %d", n.id, st.OpsInFlight, n.core.InFlight())
	case st.TxFrames != n.txSent:
		s.fail("node %d: Stats.TxFrames %d, but the core sent %d frames", n.id, st.TxFrames, n.txSent)
	case st.RxFrames != n.rxFed:
		s.fail("node %d: Stats.RxFrames %d, but Receive was called %d times", n.id, st.RxFrames, n.rxFed)
	case st.Posted < n.last.Posted || st.EnteredSvc < n.last.EnteredSvc || st.ReqServed < n.last.ReqServed:
		s.fail("node %d: a counter went backwards: %+v -> %+v", n.id, n.last, st)
	}
	var done uint64
	for _, v := range st.Completed {
		done += v
	}
	// Completed counts exactly the completions written (orphans apart).
	if done != n.app.completions {
		s.fail("node %d: Stats.Completed sums to %d, the applications read %d completions (Orphaned %d)",
			n.id, done, n.app.completions, st.Orphaned)
	}
	n.last = st
}

// checkQuiet: after the drain, nothing is held.
func (n *node) checkQuiet(when string) {
	s := n.s
	st := n.core.Stats()
	if st.WindowInUse != 0 || st.OpsInFlight != 0 || n.core.InFlight() != 0 {
		s.fail("node %d %s: WindowInUse=%d OpsInFlight=%d InFlight()=%d, want 0 (leak)",
			n.id, when, st.WindowInUse, st.OpsInFlight, n.core.InFlight())
		return
	}
	if want := n.app.slotsHeld(); st.SlotsInUse != want {
		s.fail("node %d %s: SlotsInUse=%d, the live portals hold %d (leak)", n.id, when, st.SlotsInUse, want)
		return
	}
	if err := n.core.Audit(); err != nil {
		s.fail("node %d %s: Audit: %v", n.id, when, err)
	}
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
		icrc := "ok"
		if wire.CheckICRC(b, len(p)) != nil {
			icrc = "BAD"
		}
		return fmt.Sprintf("type=%d st=%d %08x:%d->%08x:%d tag=%x reg=%x len=%d off=%d icrc=%s",
			f.Type, f.Status, f.SrcIP, f.SrcPort, f.DstIP, f.DstPort, f.Tag, f.Region, f.Length, f.Offset, icrc)
	}
	return fmt.Sprintf("ethertype %#04x len %d", wire.EtherType(b), len(b))
}
