package sim

import (
	"encoding/binary"
	"math"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port"
	"github.com/onerma/onerma/wire"
)

// A node's cores. A node is an engine of Config.Cores polling cores (an
// engine.Group; one by default), each a simCore with its own virtual CPU,
// rx queue and Tx. A frame that reaches the node's NIC lands on the rx
// queue of one core: the one a hash of its addresses and UDP ports picks
// (RSS), or, with probability Net.RxRandom, any (the kernel moved the
// flow). The core that takes it from its queue steers it (engine.Steer,
// through the port.Steering the ports share) and hands it to the core
// that owns it through that core's bounded hand-over ring
// (NetStats.HandedOver; a full ring drops it, HandoverDrops), ARP to
// every core, the rest it processes itself. A one-core node does none of
// it: it takes every frame itself, exactly as before nodes had cores.

// simCore is one core of a node: its engine.Core and what the driver
// keeps of it.
type simCore struct {
	n     *node
	idx   int
	core  *engine.Core
	cfg   engine.Config // its own: CoreID, SlotBase
	tx    nodeTx
	rx    frameRing                       // its rx queue
	hand  frameRing                       // frames other cores of the node handed to it
	steer port.Steering[*frame, *simCore] // to the node's other cores: Hand, HandOthers

	busyUntil int64 // virtual CPU: the core is busy until then
	stalled   int64 // stall time the core has not been told of (Core.Stalled at its next step)
	next      int64 // when the driver runs this core next (MaxInt64: idle)
	kick      bool  // run as soon as the core is free (rx, new commands, work left)
	idleRuns  int   // consecutive runs that did nothing

	txSent  uint64 // frames the core sent
	txBytes uint64 // bytes of those frames (Cost.TxBytePs)
	rxFed   uint64 // frames handed to Receive
	last    engine.Stats
	portals int // the application's portals open on it
}

// frameRing is a bounded FIFO of frames.
type frameRing struct {
	buf     []*frame
	head, n int
}

func newFrameRing(n int) frameRing { return frameRing{buf: make([]*frame, n)} }

func (r *frameRing) push(f *frame) bool {
	if r.n == len(r.buf) {
		return false
	}
	r.buf[(r.head+r.n)%len(r.buf)] = f
	r.n++
	return true
}

func (r *frameRing) pop() *frame {
	if r.n == 0 {
		return nil
	}
	f := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return f
}

// rxCore is the core whose rx queue frame f lands on.
func (n *node) rxCore(f *frame) *simCore {
	if len(n.cores) == 1 {
		return n.cores[0]
	}
	s := n.s
	if p := s.cfg.Net.RxRandom; p > 0 && s.mcRng.Float64() < p {
		return n.cores[s.mcRng.IntN(len(n.cores))]
	}
	b := f.buf[:f.n]
	h := uint64(n.id) * 0x9e3779b97f4a7c15
	if wire.EtherType(b) == wire.EtherTypeIPv4 && len(b) >= wire.EthLen+wire.IPv4Len+wire.UDPLen {
		h ^= binary.BigEndian.Uint64(b[wire.EthLen+12:]) // source and destination address
		h = h*0xbf58476d1ce4e5b9 ^ uint64(binary.BigEndian.Uint32(b[wire.EthLen+wire.IPv4Len:]))
	}
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return n.cores[h%uint64(len(n.cores))]
}

// step is one iteration of the core's poll loop at s.now: a burst of
// received frames (those handed to it first), one Poll, completions
// harvested by the applications, and every invariant checked. The step
// costs virtual CPU time.
func (c *simCore) step() {
	n := c.n
	s := n.s
	now := s.now
	c.kick = false
	txBefore, txBytesBefore := c.txSent, c.txBytes
	if c.stalled > 0 { // as engine/runner does on its first iteration after a gap
		c.core.Stalled(c.stalled)
		n.afterCallOn(c, "Stalled")
		c.stalled = 0
	}
	rxCount := 0
	for rxCount < rxBurst {
		f, own := c.hand.pop(), true
		if f == nil {
			if f, own = c.rx.pop(), false; f == nil {
				break
			}
		}
		rxCount++
		if s.traceOn {
			s.tracef("node %d core %d rx %s", n.id, c.idx, describe(f.buf[:f.n]))
		}
		if !own && len(n.cores) > 1 && !s.cfg.noHandOver && c.handOver(f) {
			continue
		}
		c.receive(f.buf[:f.n])
		c.rxFed++
		s.pool.put(f)
	}
	work := c.core.Poll(now)
	n.app.harvestAll()
	n.afterCallOn(c, "Poll")
	if fr := s.cfg.flows; fr != nil && fr.shares != nil && c == fr.shares.client && s.err == nil {
		fr.shares.afterStep()
	}
	txCount := int64(c.txSent - txBefore)
	cost := s.costOf(n)
	c.busyUntil = now + cost.PollNs + int64(rxCount)*cost.RxFrameNs + txCount*cost.TxFrameNs +
		(int64(c.txBytes-txBytesBefore)*cost.TxBytePs+999)/1000
	if work > 0 || rxCount > 0 || txCount > 0 {
		c.kick = true
		c.idleRuns = 0
	} else {
		c.idleRuns++
		if c.idleRuns > 100_000 {
			s.fail("node %d core %d: Poll keeps returning 0 while NextDeadline()=%d <= now (timer never cleared)",
				n.id, c.idx, c.core.NextDeadline()-s.t0)
		}
	}
	s.digest(0x57e9, uint64(n.id)|uint64(c.idx)<<32, uint64(work), uint64(rxCount), uint64(txCount))
	c.reschedule()
}

// handOver steers frame f, taken from c's rx queue, and hands it to the
// core that owns it; false when c is to process it itself (it owns it,
// or it is ARP: every other core gets a copy and c keeps it).
func (c *simCore) handOver(f *frame) bool {
	return !c.steer.Deliver(f.buf[:f.n], f)
}

// Hand gives f to core j of the node (c's port.Handover).
func (c *simCore) Hand(j int, f *frame) { c.give(c.n.cores[j], f) }

// HandOthers gives every other core of the node a copy of f.
func (c *simCore) HandOthers(f *frame) {
	for _, d := range c.n.cores {
		if d != c {
			c.give(d, c.n.s.pool.clone(f))
		}
	}
}

// give hands f to core d (its hand-over ring; full: dropped).
func (c *simCore) give(d *simCore, f *frame) {
	s := c.n.s
	if !d.hand.push(f) {
		s.res.Net.HandoverDrops++
		s.pool.put(f)
		return
	}
	s.res.Net.HandedOver++
	d.reschedule()
}

// receive hands one frame to the core: pulls and answers through the
// checks of the WRITEs they concern (write.go).
func (c *simCore) receive(b []byte) {
	s := c.n.s
	switch oneRMAType(b) {
	case wire.TypePullReq:
		s.receivePull(c, b)
	case wire.TypeError, wire.TypeNack:
		s.receiveAnswer(c, b)
	default:
		if h := s.hostile; h != nil && c.n == h.srv {
			h.sawRequest(c, b)
		}
		c.core.Receive(s.now, b)
	}
}

// reschedule computes when the driver runs this core next.
func (c *simCore) reschedule() {
	s := c.n.s
	if c.rx.n > 0 || c.hand.n > 0 || c.kick {
		c.next = max(s.now, c.busyUntil)
		return
	}
	d := c.core.NextDeadline()
	if d == math.MaxInt64 {
		c.next = math.MaxInt64
		return
	}
	c.next = max(d, c.busyUntil, s.now)
}

// kickAll runs every core of the node as soon as it is free (the
// application published commands, a script changed something).
func (n *node) kickAll() {
	for _, c := range n.cores {
		c.kick = true
		c.reschedule()
	}
}

// pickCore is the core a new portal of the application is bound to: the
// one with the fewest portals (the lowest first), or, as an application
// may ask for one, any (half of the time on a node of several cores).
func (n *node) pickCore() *simCore {
	if len(n.cores) == 1 {
		return n.cores[0]
	}
	s := n.s
	if s.mcRng.IntN(2) == 0 {
		return n.cores[s.mcRng.IntN(len(n.cores))]
	}
	best := n.cores[0]
	for _, c := range n.cores[1:] {
		if c.portals < best.portals {
			best = c
		}
	}
	return best
}

// rxPending reports frames waiting in any of the node's rings.
func (n *node) rxPending() bool {
	for _, c := range n.cores {
		if c.rx.n > 0 || c.hand.n > 0 {
			return true
		}
	}
	return false
}
