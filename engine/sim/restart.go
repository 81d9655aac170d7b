package sim

import (
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// Engine restarts (Faults.EngineRestarts; see doc.go, "Engine restarts").
//
// At a random time of the posting phase a node's engine dies and a new
// one starts, as rmad killed and restarted: every core of the node is
// replaced by a fresh engine.Core of the node's engine config, with
// nothing of the old engine's state (regions, portals, slots, key cache,
// replay tables, sender state, neighbours but the static ones), but the
// node's IV source, which a real engine reopens from its state file: its
// counters only move up, so the other nodes' replay windows must accept
// the new engine's frames. The old cores are never called again. The new
// engine's slots start above the old engine's (engine.Config.SlotBase),
// so no request of the new engine carries the tag of an old one: the
// simulator names requests by initiator and tag.
//
// The application sees its engine go as the portal library does: every
// op in flight on its portals completes once, ENGINE_GONE (a WRITE or
// REKEY may still be committed by its server, like an orphan's), and the
// portals are closed (their memory must never be written again). A moment
// later it redials: a new portal for each, its regions registered again
// with new ids (which may equal the old engine's) and new keys, their
// contents copied over (the pattern, the remote-writable region's bytes,
// an index's buckets and its slab; the index's model goes on from its
// last state). The region directory lists the new regions for the other
// nodes only from when each learns of them (within Faults.KeyDelayNs);
// until then it lists the old ones, and ops posted to them are stale:
// the new engine has no K_r they were derived from, so they must end
// REMOTE_AUTHENTICATION_FAILURE (or a network failure), never OK, never
// served from a region that took the old id. Every answer but
// REMOTE_AUTHENTICATION_FAILURE a node sends to an op aimed at a region
// of its engine before the current one fails the run (checkServedEpoch).

// portalImage is what the application of a restarted node keeps of a
// portal to open it again: its regions and copies of their contents.
type portalImage struct {
	src, sink, wdst *region
	srcMem, dstMem  []byte
	lk              *lookupModel
	idxMem, slabMem []byte
}

// restart: node n's engine dies and a new one starts.
func (n *node) restart() {
	s := n.s
	a := n.app
	s.tracef("node %d: the engine dies and restarts", n.id)
	s.res.Restarts++
	a.harvestAll() // the completions the old engine wrote before it went
	if s.err != nil {
		return
	}
	for _, p := range a.portals {
		a.images = append(a.images, a.goneImage(p))
	}
	a.portals = nil
	for _, c := range n.cores {
		for f := c.rx.pop(); f != nil; f = c.rx.pop() {
			s.pool.put(f)
		}
		for f := c.hand.pop(); f != nil; f = c.hand.pop() {
			s.pool.put(f)
		}
	}
	old := n.cores
	for _, c := range old {
		s.res.Retired = append(s.res.Retired, c.core.Stats())
	}
	ec := n.tmpl
	ec.SlotBase = old[0].cfg.SlotBase + abi.SlotID(len(old)*old[0].cfg.Slots) + 1000
	if err := n.newCores(ec, len(old)); err != nil {
		s.fail("node %d: restarting the engine: %v", n.id, err)
		return
	}
	j := 0
	for i, c := range s.cores {
		if c.n == n {
			s.cores[i] = n.cores[j]
			j++
		}
	}
	n.epoch++
	n.commits, n.remoteRekeys, n.obsolete, n.audited = 0, 0, 0, 0
	n.owner = make(map[abi.RegionID]*simCore)
	a.rekeys, a.completions, a.deadIDs = 0, 0, nil
	a.slotOwner = make(map[abi.SlotID]slotRef)
	n.afterCall("a restart")
	for _, c := range n.cores {
		c.reschedule()
	}
	s.schedule(s.now+s.faultRng.Int64N(200_000), evRedial, n.id, int64(n.epoch), nil)
}

// goneImage: portal p's engine went away. Its ops in flight complete
// ENGINE_GONE, it is closed and its regions killed; the returned image
// keeps what the application needs to open it again.
func (a *app) goneImage(p *portal) *portalImage {
	s := a.s
	for k, o := range p.busy {
		if o != nil {
			s.engineGone(o)
			p.busy[k] = nil
		}
	}
	for _, o := range p.extra {
		s.engineGone(o)
	}
	p.extra = nil
	img := &portalImage{src: p.src, sink: p.sink, wdst: p.wdst, lk: p.lk,
		srcMem: append([]byte(nil), p.src.mem...), dstMem: append([]byte(nil), p.wdst.mem...)}
	rgs := []*region{p.src, p.sink, p.wdst, p.wsrc}
	if p.lk != nil {
		img.idxMem = append([]byte(nil), p.lk.idx.mem...)
		img.slabMem = append([]byte(nil), p.lk.slab.mem...)
		rgs = append(rgs, p.lk.idx, p.lk.slab)
	}
	p.closed = true
	for _, rg := range rgs {
		a.kill(rg)
		rg.gone = true
	}
	for _, rg := range []*region{p.src, p.sink, p.wdst, p.lk.idxOrNil()} {
		if rg == nil {
			continue
		}
		// Until it learns of the new region, every other node's directory
		// lists this one.
		rg.staleUntil = make([]int64, len(s.nodes))
		for i := range rg.staleUntil {
			rg.staleUntil[i] = math.MaxInt64
		}
		rg.staleUntil[a.n.id] = s.now
	}
	a.closed = append(a.closed, p)
	return img
}

// engineGone completes op o ENGINE_GONE, as the portal library does for
// every op in flight when its engine goes away.
func (s *Sim) engineGone(o *op) {
	st := abi.StatusEngineGone
	s.digest(0xc01, o.cookie, uint64(st), uint64(s.now))
	s.tracef("node %d completes %s: %v (its engine went away)", o.p.a.n.id, o, st)
	delete(s.ops, o.cookie)
	s.releaseSnap(o)
	s.res.ByStatus[st]++
	switch {
	case o.lookup:
		s.res.LookupStatus[st]++
	case o.rekey:
		s.res.RekeyStatus[st]++
	case o.write:
		s.res.WriteStatus[st]++
	}
	// A WRITE or REKEY may have been committed, or may be yet within its
	// server's TIMEOUT: from now on it is an orphan's.
	o.orphan = true
}

// redial: the restarted node's application opens its portals again on
// the engine of restart epoch (a later restart's redial opens them, if
// the engine restarted again meanwhile).
func (a *app) redial(epoch int) {
	s := a.s
	if epoch != a.n.epoch {
		return
	}
	imgs := a.images
	a.images = nil
	for _, img := range imgs {
		p, err := a.openPortalFrom(img)
		if err != nil {
			s.fail("node %d: redialling after its engine restarted: %v", a.n.id, err)
			return
		}
		s.publish(img.src, p.src)
		s.publish(img.sink, p.sink)
		s.publish(img.wdst, p.wdst)
		if img.lk != nil {
			s.publish(img.lk.idx, p.lk.idx)
		}
		s.tracef("node %d redials: portal %d (src %#x, sink %#x, dst %#x)", a.n.id, p.id, uint32(p.src.id), uint32(p.sink.id), uint32(p.wdst.id))
	}
	a.n.kickAll()
}

// publish puts region nu, which replaces old after its engine restarted,
// in the directory: node i lists it from when it learns of it (the owner
// at once, the others within Faults.KeyDelayNs), and old until then.
func (s *Sim) publish(old, nu *region) {
	nu.visible = make([]int64, len(s.nodes))
	for i := range nu.visible {
		nu.visible[i] = s.now
		if d := s.cfg.Faults.KeyDelayNs; i != nu.node && d > 0 {
			nu.visible[i] += s.faultRng.Int64N(d + 1)
		}
	}
	old.staleUntil = nu.visible
}

// listed: node i's directory lists rg now: a live region it has learnt
// of, or a region of an engine that restarted whose successor it has not
// learnt of yet.
func (rg *region) listed(i int, now int64) bool {
	if rg.deadAt == math.MaxInt64 {
		return rg.visible == nil || rg.visible[i] <= now
	}
	return rg.gone && rg.staleUntil != nil && rg.staleUntil[i] > now
}

// idxOrNil is m's index (nil: no model).
func (m *lookupModel) idxOrNil() *region {
	if m == nil {
		return nil
	}
	return m.idx
}

// registerFrom registers portal p's regions again from img: the pattern
// and remote-writable regions and the index and slab with the contents
// they had, a new sink and write source.
func (a *app) registerFrom(p *portal, img *portalImage) error {
	var err error
	if p.src, err = a.registerCopy(p, img.src, img.srcMem, nil); err != nil {
		return err
	}
	if p.sink, err = a.register(p, alignedBytes((len(p.slots)+1)*areaBytes), abi.PermLocalWrite, regSink); err != nil {
		return err
	}
	if p.wdst, err = a.registerCopy(p, img.wdst, img.dstMem, nil); err != nil {
		return err
	}
	if p.wsrc, err = a.register(p, alignedBytes((len(p.slots)+1)*areaBytes), abi.PermLocalRead, regWsrc); err != nil {
		return err
	}
	if img.lk == nil {
		return nil
	}
	old := img.lk
	m := &lookupModel{areaFree: old.areaFree}
	if m.slab, err = a.registerCopy(p, old.slab, img.slabMem, nil); err != nil {
		return err
	}
	lay := simLayout
	lay.Linked = m.slab.id
	if m.idx, err = a.registerCopy(p, old.idx, img.idxMem, &lay); err != nil {
		return err
	}
	for b := range m.buckets {
		h := old.buckets[b]
		m.buckets[b] = []bucketState{{from: a.s.now, to: math.MaxInt64, b: h[len(h)-1].b}}
	}
	p.lk = m
	return nil
}

// registerCopy registers a region like old (its kind, permissions and
// pattern) holding content.
func (a *app) registerCopy(p *portal, old *region, content []byte, lay *abi.BucketLayout) (*region, error) {
	mem := alignedBytes(len(content))
	copy(mem, content)
	return a.registerWith(p, mem, old.perm, old.kind, lay, old)
}

// checkServedEpoch: node n sent an answer (h) to a request: unless it is
// REMOTE_AUTHENTICATION_FAILURE, the request must not name a region of an
// engine of n before the current one (the new engine has none of the
// old keys: it cannot have authenticated the request).
func (s *Sim) checkServedEpoch(n *node, h *wire.Fields) {
	switch h.Type {
	case wire.TypeReadResp, wire.TypeLookupResp, wire.TypeNack, wire.TypeAck, wire.TypePullReq:
	case wire.TypeError:
		if abi.Status(h.Status) == abi.StatusRemoteAuthFailure {
			return
		}
	default:
		return
	}
	ini := s.nodeOfIP(h.DstIP)
	if ini < 0 {
		return
	}
	o := s.reqOps[reqRef{ini, h.Tag}]
	if o == nil || o.target == nil || o.target.node != n.id || o.target.epoch == n.epoch {
		return
	}
	s.fail("node %d (engine restarted %d times) answered %s with a frame of type %d (status %v): it names region %#x of the engine before (restart %d)",
		n.id, n.epoch, o, h.Type, abi.Status(h.Status), uint32(o.target.id), o.target.epoch)
}

// sawRequest records the op whose request node n sent (checkServedEpoch).
func (s *Sim) sawRequest(n *node, h *wire.Fields) {
	if ref, ok := n.app.slotOwner[abi.SlotID(h.Tag>>32)]; ok && !ref.p.closed {
		if o := ref.p.busy[ref.k]; o != nil {
			s.reqOps[reqRef{n.id, h.Tag}] = o
		}
	}
}
