package sim

import (
	"fmt"
	"math"

	"github.com/onerma/onerma/abi"
)

// Regions: what each is for, registration, deregistration, and the churn
// fault (a portal replaces one of its regions while ops on it are in
// flight).

// regKind is what a region is for.
type regKind uint8

const (
	regSrc  regKind = iota // remote-readable, a fixed pattern: target of reads
	regSink                // local-write: sink of the portal's reads (poison outside live ops)
	regDst                 // remote-writable and remote-readable: target of writes, read too
	regWsrc                // local-read: source of the portal's writes (poison outside live ops)
	regIdx                 // an index of buckets for LOOKUPs (lookup.go), linked to the portal's slab
	regSlab                // local-read: the records an index's entries point to
)

// region is a registered region as the application (and, for
// remote-readable ones, every other application: the directory) knows it.
type region struct {
	node    int
	p       *portal
	id      abi.RegionID
	mem     []byte
	perm    abi.Perm
	kind    regKind
	pattern uint64 // regSrc: mem[i] == patByte(pattern, i); regDst: its initial content
	sink    bool   // kind == regSink
	deadAt  int64  // deregistered (or its portal closed) at; MaxInt64 while live
	// regDst: the model of its memory (the initial pattern, then every
	// commit the simulator saw, in order) and the commits themselves.
	shadow  []byte
	commits []commitRec
	// keys: every K_r the region had, oldest first; the owner's core
	// holds the last one.
	keys []keyVersion
	// epoch: how many times its node's engine had restarted when it was
	// registered. gone: killed by a restart of that engine. A region that
	// replaces a gone one after the restart is listed in node i's
	// directory from visible[i] on, and the gone one until then
	// (staleUntil); nil: every node at once (restart.go).
	epoch      int
	gone       bool
	visible    []int64
	staleUntil []int64
}

func (a *app) register(p *portal, mem []byte, perm abi.Perm, kind regKind) (*region, error) {
	return a.registerWith(p, mem, perm, kind, nil, nil)
}

// registerIndex registers an index of buckets laid out as lay.
func (a *app) registerIndex(p *portal, mem []byte, lay abi.BucketLayout) (*region, error) {
	return a.registerWith(p, mem, abi.PermRemoteLookup, regIdx, &lay, nil)
}

// registerWith registers mem as a region of portal p; from: the region of
// the engine before a restart whose contents mem holds (nil: a new one,
// filled as its kind says).
func (a *app) registerWith(p *portal, mem []byte, perm abi.Perm, kind regKind, lay *abi.BucketLayout, from *region) (*region, error) {
	s := a.s
	rg := &region{node: a.n.id, p: p, mem: mem, perm: perm, kind: kind, sink: kind == regSink, deadAt: math.MaxInt64, epoch: a.n.epoch}
	switch {
	case from != nil:
		rg.pattern = from.pattern
		if kind == regDst {
			rg.shadow = append([]byte(nil), mem...)
		}
	case kind == regIdx, kind == regSlab: // empty buckets; records are written by the owner's updates
	case kind == regSink, kind == regWsrc:
		fill(mem, poison)
	default:
		s.patternID++
		rg.pattern = s.patternID<<8 | uint64(a.n.id)
		fillPattern(mem, rg.pattern)
		if s.cfg.App.RekeyFrac > 0 && s.patternID&1 == 0 {
			// Every other remote-accessible region allows remote REKEYs
			// (by pattern id: no draw from the app's stream; a new
			// portal's pattern and remote-writable regions take
			// consecutive ids, so one of them allows them).
			perm |= abi.PermRemoteRekey
			rg.perm = perm
		}
		if kind == regDst {
			rg.shadow = append([]byte(nil), mem...)
		}
	}
	kr := s.newKey()
	if from != nil && s.cfg.restartKeepsKeys {
		kr = from.keys[len(from.keys)-1].kr
	}
	var id abi.RegionID
	var err error
	if lay != nil {
		id, err = p.c.core.RegisterLookupRegion(p.id, mem, perm, kr, *lay)
	} else {
		id, err = p.c.core.RegisterRegion(p.id, mem, perm, kr)
	}
	if err != nil {
		return nil, fmt.Errorf("RegisterRegion(%d bytes): %w", len(mem), err)
	}
	if id == 0 {
		s.fail("node %d: RegisterRegion returned region id 0", a.n.id)
	}
	for _, old := range s.regions {
		if old.node == a.n.id && old.epoch == rg.epoch && old.id == id {
			s.fail("node %d: RegisterRegion reused region id %#x (generation not bumped)", a.n.id, uint32(id))
		}
	}
	rg.id = id
	if len(a.n.cores) > 1 {
		a.n.owner[id] = p.c
	}
	s.addKey(rg, kr, 0) // a new region's key is known everywhere at once (the directory)
	s.regions = append(s.regions, rg)
	return rg, nil
}

// kill marks a region dead and scribbles its memory as the allocator would
// after free: a core that still reads it serves wrong bytes (caught by the
// data check) and one that writes a sink is caught by the poison check.
func (a *app) kill(rg *region) {
	s := a.s
	rg.deadAt = s.now
	a.deadIDs = append(a.deadIDs, rg.id)
	if rg.kind == regSink || rg.kind == regWsrc {
		fill(rg.mem, poison)
	} else {
		s.patternID++
		fillPattern(rg.mem, s.patternID<<8|0xff)
	}
}

// churn: a portal replaces one of its regions (remote-readable, sink,
// remote-writable or write source) while ops use it: the new region has a
// new id, maybe the same table entry with a new generation.
func (a *app) churn() {
	s := a.s
	if len(a.portals) == 0 {
		return
	}
	if at, wait := a.churnWait(); wait {
		s.schedule(at, evChurn, a.n.id, 0, nil)
		return
	}
	p := a.portals[s.faultRng.IntN(len(a.portals))]
	switch s.faultRng.IntN(4) {
	case 0:
		a.churnSink(p)
		return
	case 1:
		a.churnDst(p)
		return
	case 2:
		a.churnWsrc(p)
		return
	}
	cfg := &s.cfg.App
	a.replace(p, &p.src, regionChurn{
		name: "region", label: "", desc: "", twice: true,
		perm: abi.PermRemoteRead | abi.PermLocalRead, kind: regSrc,
		size: func(*region) int { return cfg.SrcMinBytes + s.appRng.IntN(cfg.SrcMaxBytes-cfg.SrcMinBytes+1) },
	})
}

// churnWait reports whether the churn must wait until the node's cores
// have taken the commands published so far, and until when: a slot-busy
// command names a slot whose op was posted in the same tick, and a
// region replaced before the core takes that op would fail it locally,
// freeing the slot, so that the slot-busy command would run for real.
func (a *app) churnWait() (int64, bool) {
	for _, p := range a.portals {
		if p.cmd.Free() == p.cmd.Capacity() {
			continue
		}
		for _, o := range p.extra {
			if o.kind == kSlotBusy {
				at := a.s.now + 1
				for _, c := range a.n.cores {
					at = max(at, c.busyUntil+1)
				}
				return at, true
			}
		}
	}
	return 0, false
}

// regionChurn describes how replace swaps one of a portal's regions.
type regionChurn struct {
	name, label, desc string // the trace's name, the label in a failed deregistration, the failed re-registration's
	twice             bool   // check that a second DeregisterRegion fails
	dead              bool   // keep the old memory to check nothing writes it after (sinks, write sources)
	perm              abi.Perm
	kind              regKind
	size              func(old *region) int // the new region's size, drawn after the old one is killed
}

// replace deregisters *slot while ops use it and registers a new region
// in its place, as c says.
func (a *app) replace(p *portal, slot **region, c regionChurn) {
	s := a.s
	old := *slot
	if err := p.c.core.DeregisterRegion(p.id, old.id); err != nil {
		s.fail("node %d: DeregisterRegion(%s%#x): %v", a.n.id, c.label, uint32(old.id), err)
		return
	}
	if c.twice {
		if err := p.c.core.DeregisterRegion(p.id, old.id); err == nil {
			s.fail("node %d: DeregisterRegion(%#x) twice succeeded", a.n.id, uint32(old.id))
			return
		}
	}
	a.kill(old)
	if c.dead {
		a.deadSinks = append(a.deadSinks, old)
	}
	rg, err := a.register(p, alignedBytes(c.size(old)), c.perm, c.kind)
	if err != nil {
		s.fail("node %d: re-registering%s: %v", a.n.id, c.desc, err)
		return
	}
	*slot = rg
	s.tracef("node %d portal %d: %s %#x replaced by %#x", a.n.id, p.id, c.name, uint32(old.id), uint32(rg.id))
	a.n.afterCall("RegisterRegion")
}

// churnSink replaces a portal's sink while reads into it are in flight:
// once DeregisterRegion returns, the core must never write the old memory
// (it is poisoned and checked at the end), and ops still in flight into it
// cannot complete OK.
func (a *app) churnSink(p *portal) {
	a.replace(p, &p.sink, regionChurn{
		name: "sink", label: "sink ", desc: " a sink", dead: true,
		perm: abi.PermLocalWrite, kind: regSink,
		size: func(old *region) int { return len(old.mem) },
	})
}

// churnDst deregisters a portal's remote-writable region while writes to
// it (and reads of it) are in flight, and registers a new one: a write not
// committed by then must fail (REMOTE_REGION when its data arrives, or
// REMOTE_AUTHENTICATION_FAILURE when its request does) and change nothing
// (the old memory is scribbled: a commit into it would show).
func (a *app) churnDst(p *portal) {
	s := a.s
	cfg := &s.cfg.App
	a.replace(p, &p.wdst, regionChurn{
		name: "dst", label: "dst ", desc: " a remote-writable region",
		perm: abi.PermRemoteWrite | abi.PermRemoteRead, kind: regDst,
		size: func(*region) int { return cfg.DstMinBytes + s.appRng.IntN(cfg.DstMaxBytes-cfg.DstMinBytes+1) },
	})
}

// churnWsrc replaces a portal's write source while writes from it are in
// flight: a write not pulled by then fails LOCAL_REGION (its data cannot
// be sent: the server commits nothing); one whose data was all sent may
// still commit. The old memory is poisoned: data sent from it afterwards
// would fail the commit check.
func (a *app) churnWsrc(p *portal) {
	a.replace(p, &p.wsrc, regionChurn{
		name: "wsrc", label: "wsrc ", desc: " a write source", dead: true,
		perm: abi.PermLocalRead, kind: regWsrc,
		size: func(old *region) int { return len(old.mem) },
	})
}
