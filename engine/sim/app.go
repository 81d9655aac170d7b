package sim

import (
	"fmt"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
)

// Applications: one per node, with its portals: opening them as the
// portal library does, the posting tick, a crash, and closing them at the
// end.

// app is one node's application: a few portals, each with its own rings,
// slots, a remote-readable region and a sink region.
type app struct {
	s           *Sim
	n           *node
	client      bool
	portals     []*portal // open
	closed      []*portal // closed by a crash
	serial      int
	completions uint64         // completions read from every ring on this node
	deadSinks   []*region      // sinks and write sources replaced while in use (must stay untouched)
	deadIDs     []abi.RegionID // this node's deregistered region ids (stale)
	rekeys      uint64         // successful Core.Rekey calls (Stats.Rekeys)
	// slotOwner: which portal holds a slot of this core, and at which
	// index (the fabric maps a request's tag back to its op).
	slotOwner map[abi.SlotID]slotRef
	// flows: this node's portals of the congestion experiments' flow
	// applications and object servers (flow.go).
	flows []*flowPortal
	// images: the portals to open again once the node's engine has
	// restarted (restart.go).
	images []*portalImage
}

type slotRef struct {
	p *portal
	k int
}

type portal struct {
	a      *app
	c      *simCore        // the core that serves it
	id     engine.PortalID // its id on that core
	pid    uint32          // the PID the portal was opened with (part of its K_d)
	serial int
	seg    []byte
	lay    abi.Layout
	cmd    *abi.Producer // the app produces commands
	cpl    *abi.Consumer // the app consumes completions
	class  abi.Class
	slots  []abi.SlotID
	busy   []*op // by slot index
	idle   []int // idle slot indices (stack)
	extra  []*op // outstanding ops without an own slot
	src    *region
	sink   *region
	wdst   *region      // remote-writable (and readable): target of other nodes' writes
	wsrc   *region      // source of this portal's writes: one area per slot, like the sink
	lk     *lookupModel // its index and slab (App.LookupFrac; nil: none)
	closed bool
	// ops posted in the current tick holding a slot for at least an RTT
	// (targets of slot-busy commands).
	fresh []int
}

func newApp(s *Sim, n *node) *app {
	a := &app{s: s, n: n, client: true, slotOwner: make(map[abi.SlotID]slotRef)}
	if c := s.cfg.App.Clients; c != nil {
		a.client = false
		for _, v := range c {
			if v == n.id {
				a.client = true
			}
		}
	}
	return a
}

// openPortal does what the portal library does for an application: lay
// out a segment, attach the rings, open the portal on the core, get slots,
// register a remote-readable region (filled with its pattern) and a sink.
func (a *app) openPortal() (*portal, error) { return a.openPortalFrom(nil) }

// openPortalFrom opens a portal; img: with the regions and contents of a
// portal of the engine before a restart (nil: new ones).
func (a *app) openPortalFrom(img *portalImage) (*portal, error) {
	s, n := a.s, a.n
	cfg := &s.cfg.App
	r := s.appRng
	slots := cfg.SlotsPerPortal
	// The completion ring holds every completion the core could write
	// before the app reads: one per slot, plus bad-slot commands.
	cplCap := nextPow2(uint32(slots) + cfg.CmdCap)
	lay, err := abi.NewLayout(0, cfg.CmdCap, cplCap)
	if err != nil {
		return nil, err
	}
	p := &portal{a: a, serial: a.serial, seg: alignedBytes(int(lay.Size))}
	a.serial++
	if r.Float64() < cfg.HighClass {
		p.class = abi.ClassHigh
	}
	spec := engine.PortalSpec{
		CmdRing:  lay.CmdRing(p.seg),
		CmdCap:   lay.CmdCap,
		CplRing:  lay.CplRing(p.seg),
		CplCap:   lay.CplCap,
		Class:    p.class,
		MaxSlots: slots,
		PID:      1000 + uint32(n.id)*100 + uint32(p.serial),
		Tenant:   cfg.Tenant,
	}
	if s.cfg.tenantPerPortal {
		spec.Tenant = p.serial % n.ecfg.Tenants
	}
	p.c = n.pickCore()
	core := p.c.core
	id, err := core.OpenPortal(spec)
	if err != nil {
		return nil, fmt.Errorf("OpenPortal on core %d: %w", p.c.idx, err)
	}
	p.c.portals++
	p.id = id
	p.pid = spec.PID
	lay.Portal = uint32(id)
	lay.Encode(p.seg)
	p.lay = lay
	if p.cmd, err = abi.NewProducer(lay.CmdRing(p.seg), lay.CmdCap, abi.CommandSize); err != nil {
		return nil, err
	}
	if p.cpl, err = abi.NewConsumer(lay.CplRing(p.seg), lay.CplCap, abi.CompletionSize); err != nil {
		return nil, err
	}
	// Slots: in two allocations (the engine adds to a portal's holding),
	// then one beyond the cap, which must be refused.
	first := 1 + r.IntN(slots)
	for _, k := range []int{first, slots - first} {
		if k == 0 {
			continue
		}
		ids, err := core.AllocSlots(id, k)
		if err != nil {
			return nil, fmt.Errorf("AllocSlots(%d): %w", k, err)
		}
		if len(ids) != k {
			return nil, fmt.Errorf("AllocSlots(%d) returned %d slots", k, len(ids))
		}
		p.slots = append(p.slots, ids...)
	}
	if _, err := core.AllocSlots(id, 1); err == nil {
		s.fail("node %d: AllocSlots beyond the portal's cap of %d succeeded", n.id, slots)
	}
	seen := make(map[abi.SlotID]bool, len(p.slots))
	lo, hi := p.c.cfg.SlotBase, p.c.cfg.SlotBase+abi.SlotID(p.c.cfg.Slots)
	for _, sl := range p.slots {
		if sl < lo || sl >= hi || seen[sl] {
			s.fail("node %d core %d: AllocSlots gave slot %d (partition [%d,%d), duplicate=%v)", n.id, p.c.idx, sl, lo, hi, seen[sl])
		}
		seen[sl] = true
	}
	for _, q := range a.portals {
		for _, sl := range q.slots {
			if seen[sl] {
				s.fail("node %d: slot %d given to portals %d and %d", n.id, sl, q.id, id)
			}
		}
	}
	for k, sl := range p.slots {
		a.slotOwner[sl] = slotRef{p, k}
	}
	p.busy = make([]*op, len(p.slots))
	for i := len(p.slots) - 1; i >= 0; i-- {
		p.idle = append(p.idle, i)
	}
	// Regions.
	if img != nil {
		if err := a.registerFrom(p, img); err != nil {
			return nil, err
		}
	} else {
		size := cfg.SrcMinBytes + r.IntN(cfg.SrcMaxBytes-cfg.SrcMinBytes+1)
		if p.src, err = a.register(p, alignedBytes(size), abi.PermRemoteRead|abi.PermLocalRead, regSrc); err != nil {
			return nil, err
		}
		if p.sink, err = a.register(p, alignedBytes((len(p.slots)+1)*areaBytes), abi.PermLocalWrite, regSink); err != nil {
			return nil, err
		}
		dsize := cfg.DstMinBytes + r.IntN(cfg.DstMaxBytes-cfg.DstMinBytes+1)
		if p.wdst, err = a.register(p, alignedBytes(dsize), abi.PermRemoteWrite|abi.PermRemoteRead, regDst); err != nil {
			return nil, err
		}
		if p.wsrc, err = a.register(p, alignedBytes((len(p.slots)+1)*areaBytes), abi.PermLocalRead, regWsrc); err != nil {
			return nil, err
		}
		if cfg.LookupFrac > 0 {
			if err := a.registerLookup(p); err != nil {
				return nil, err
			}
		}
	}
	a.portals = append(a.portals, p)
	n.afterCall("OpenPortal")
	s.tracef("node %d core %d opens portal %d (%d slots, class %d, src %#x %dB, sink %#x, dst %#x %dB, wsrc %#x)", n.id, p.c.idx, id, len(p.slots),
		p.class, uint32(p.src.id), len(p.src.mem), uint32(p.sink.id), uint32(p.wdst.id), len(p.wdst.mem), uint32(p.wsrc.id))
	return p, nil
}

// tick: the application posts a burst of ops on each portal.
func (a *app) tick() {
	s := a.s
	cfg := &s.cfg.App
	if s.now >= s.postEnd {
		return
	}
	for _, p := range a.portals {
		p.fresh = p.fresh[:0]
		if cfg.LookupFrac > 0 {
			p.updateLookup()
		}
		k := 1 + s.appRng.IntN(cfg.BurstMax)
		if cfg.FillSlots {
			k = len(p.idle) + 1
		}
		for i := 0; i < k; i++ {
			if !p.post() {
				break
			}
		}
		p.cmd.Publish()
		if p.cmd.Corrupt() {
			s.fail("node %d portal %d: the core wrote an impossible command-ring consumer index", a.n.id, p.id)
		}
	}
	a.n.kickAll()
	next := s.now + 1 + s.appRng.Int64N(2*cfg.TickNs)
	if next < s.postEnd {
		s.schedule(next, evAppTick, a.n.id, 0, nil)
	}
}

// crash: the application dies. Its portal is closed with ops in flight;
// those become orphans and must never complete or touch its memory.
func (a *app) crash() {
	s := a.s
	if len(a.portals) == 0 {
		return
	}
	i := s.faultRng.IntN(len(a.portals))
	p := a.portals[i]
	s.tracef("node %d: application of portal %d crashes", a.n.id, p.id)
	if err := p.c.core.ClosePortal(p.id); err != nil {
		s.fail("node %d: ClosePortal(%d): %v", a.n.id, p.id, err)
		return
	}
	p.c.portals--
	for k, o := range p.busy {
		if o != nil {
			delete(s.ops, o.cookie)
			s.releaseSnap(o)
			o.orphan = true // a WRITE whose data was all sent may still commit
			s.res.Orphaned++
			p.busy[k] = nil
		}
	}
	for _, o := range p.extra {
		delete(s.ops, o.cookie)
		o.orphan = true
		s.res.Orphaned++
	}
	p.extra = nil
	p.closed = true
	a.kill(p.src)
	a.kill(p.sink)
	a.kill(p.wdst)
	a.kill(p.wsrc)
	if p.lk != nil {
		a.kill(p.lk.idx)
		a.kill(p.lk.slab)
	}
	a.portals = append(a.portals[:i], a.portals[i+1:]...)
	a.closed = append(a.closed, p)
	// A zombie thread of the dead app still posts: the core must ignore
	// the closed portal's ring.
	if e := p.cmd.Reserve(); e != nil {
		c := abi.Command{Op: abi.OpRead, Slot: p.slots[0], Cookie: 0xdead, Length: 64, LocalRegion: p.sink.id,
			RemoteAddr: a.n.ip4, RemoteRegion: p.src.id}
		c.Encode(e)
		p.cmd.Commit()
		p.cmd.Publish()
	}
	a.n.kickAll()
	a.n.afterCall("ClosePortal")
	if _, err := p.c.core.AllocSlots(p.id, 1); err == nil {
		// The id may have been reused already only if we reopened; we
		// have not, so the closed portal must be gone.
		s.fail("node %d: AllocSlots on closed portal %d succeeded", a.n.id, p.id)
	}
}

func (a *app) slotsHeld() uint64 {
	var v uint64
	for _, p := range a.portals {
		v += uint64(len(p.slots))
	}
	for _, f := range a.flows {
		if !f.closed {
			v += uint64(len(f.slots))
		}
	}
	return v
}

func (a *app) closeAll() {
	s := a.s
	for _, p := range a.portals {
		if err := p.c.core.ClosePortal(p.id); err != nil {
			s.fail("node %d: ClosePortal(%d) at the end: %v", a.n.id, p.id, err)
			return
		}
		p.c.portals--
		if err := p.c.core.ClosePortal(p.id); err == nil {
			s.fail("node %d: ClosePortal(%d) twice succeeded", a.n.id, p.id)
			return
		}
		a.kill(p.src)
		a.kill(p.sink)
		a.kill(p.wdst)
		a.kill(p.wsrc)
		if p.lk != nil {
			a.kill(p.lk.idx)
			a.kill(p.lk.slab)
		}
		p.closed = true
		a.closed = append(a.closed, p)
	}
	a.portals = nil
	for _, f := range a.flows {
		f.close()
		if s.err != nil {
			return
		}
	}
}
