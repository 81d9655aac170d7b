package sim

import (
	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// Posting: the random workload's choice of op, target and length, and
// the command the application writes for it.

// pickKind draws what the next op tests.
func (p *portal) pickKind() opKind {
	r := p.a.s.appRng
	cfg := &p.a.s.cfg.App
	switch x := r.Float64(); {
	case x < cfg.WrongKeyRate:
		return kKeyRandom + opKind(r.IntN(int(kKeyOp-kKeyRandom)+1))
	case x < cfg.WrongKeyRate+cfg.BadRate:
		return opKind(1 + r.IntN(int(kRemotePerm)))
	}
	return kValid
}

// pickTarget draws a live remote-readable region (a pattern region or a
// remote-writable one) on a server node (wantSink: a sink, which allows
// no remote access).
func (a *app) pickTarget(wantSink bool) *region {
	s := a.s
	self := !wantSink && s.cfg.App.SelfReads > 0 && s.appRng.Float64() < s.cfg.App.SelfReads
	if wantSink {
		return a.pickRegion(self, func(rg *region) bool { return rg.kind == regSink })
	}
	return a.pickRegion(self, func(rg *region) bool { return rg.kind == regSrc || rg.kind == regDst })
}

// pickRegion draws a live region that match accepts, of this node (self)
// or of a server node other than this one.
func (a *app) pickRegion(self bool, match func(*region) bool) *region {
	s := a.s
	var cands []*region
	for _, rg := range s.regions {
		if !rg.listed(a.n.id, s.now) || !match(rg) || (rg.node == a.n.id) != self || (!self && !a.isServer(rg.node)) {
			continue
		}
		cands = append(cands, rg)
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[s.appRng.IntN(len(cands))]
}

func (a *app) isServer(node int) bool {
	sv := a.s.cfg.App.Servers
	if sv == nil {
		return true
	}
	for _, v := range sv {
		if v == node {
			return true
		}
	}
	return false
}

// pickLength: mostly full 4 KB ops, some tiny, some odd sizes.
func pickLength(r interface{ IntN(int) int }, max int) uint32 {
	var l int
	switch r.IntN(4) {
	case 0:
		l = abi.MaxOpBytes
	case 1:
		l = 1 + r.IntN(64)
	default:
		l = 1 + r.IntN(abi.MaxOpBytes)
	}
	if l > max {
		l = 1 + r.IntN(max)
	}
	return uint32(l)
}

// post builds and writes one random command; false when the ring or the
// slots are exhausted.
func (p *portal) post() bool {
	a := p.a
	r := a.s.appRng
	if f := a.s.cfg.App.LookupFrac; f > 0 && r.Float64() < f {
		return p.postLookup()
	}
	if f := a.s.cfg.App.RekeyFrac; f > 0 && r.Float64() < f {
		if tgt := a.pickRegion(false, func(rg *region) bool { return rg.perm&abi.PermRemoteRekey != 0 }); tgt != nil {
			// A REKEY ignores the remote offset: any will do.
			roff := uint64(r.IntN(len(tgt.mem)))
			if r.IntN(4) == 0 {
				roff = r.Uint64()
			}
			kind := p.pickKind()
			if kind == kValid && r.IntN(6) == 0 {
				kind = kRemotePerm // a region without PermRemoteRekey: REMOTE_PERMISSION
			}
			return p.postOpType(abi.OpRekey, kind, tgt, aesni.KeySize, roff, p.mutate)
		}
	}
	write := r.Float64() < a.s.cfg.App.WriteFrac
	kind := p.pickKind()
	var tgt *region
	if write { // never to its own node (the core loops those frames inside: no ④ to see)
		tgt = a.pickRegion(false, func(rg *region) bool { return rg.kind == regDst })
	} else {
		tgt = a.pickTarget(false)
	}
	if tgt == nil && kind != kUnreachable {
		return false // no server yet (all crashed?); try later
	}
	var length uint32
	var roff uint64
	if tgt != nil {
		length = pickLength(r, len(tgt.mem))
		roff = uint64(r.IntN(len(tgt.mem) - int(length) + 1))
	} else {
		length = pickLength(r, abi.MaxOpBytes)
	}
	if write {
		return p.postOpType(abi.OpWrite, kind, tgt, length, roff, p.mutate)
	}
	return p.postOp(kind, tgt, length, roff, p.mutate)
}

// postOp writes one command: a READ of length bytes at roff of tgt into
// the op's own sink area (or the scratch area for ops without an own
// slot), then mutate (if any) introduces the kind's defect. It records the
// op with its deadline. False when the ring or the slots are exhausted.
func (p *portal) postOp(kind opKind, tgt *region, length uint32, roff uint64, mutate func(*op, *abi.Command)) bool {
	return p.postOpType(abi.OpRead, kind, tgt, length, roff, mutate)
}

// postOpType is postOp for a READ or a WRITE. A WRITE of length bytes
// from the op's own area of the portal's write source (where its data,
// stamped with a pattern id of its own, is staged first) to roff of tgt.
func (p *portal) postOpType(opc abi.Op, kind opKind, tgt *region, length uint32, roff uint64, mutate func(*op, *abi.Command)) bool {
	a := p.a
	s := a.s
	n := a.n
	r := s.appRng
	entry := p.cmd.Reserve()
	if entry == nil {
		return false
	}
	if kind.usesSlot() && len(p.idle) == 0 {
		return false
	}
	rekey := opc == abi.OpRekey
	write := opc == abi.OpWrite || rekey
	local := p.sink
	if write {
		local = p.wsrc
	}
	o := &op{kind: kind, p: p, slotIdx: -1, postedAt: s.now, target: tgt, sink: p.sink, local: local, rxAuth0: p.c.last.RxAuthFailed, write: write, rekey: rekey}
	s.cookieCtr++
	o.cookie = mix64(s.cookieCtr ^ s.cfg.Seed<<20)
	c := &o.cmd
	c.Op = opc
	c.Cookie = o.cookie
	c.LocalRegion = local.id
	c.Length = length
	if tgt != nil {
		c.RemoteAddr = s.nodes[tgt.node].ip4
		c.RemoteRegion = tgt.id
		c.RemoteOffset = roff
	}
	// Local side: the slot's own area, or the scratch area.
	var area int
	if kind.usesSlot() {
		k := p.idle[len(p.idle)-1]
		if !p.areaPoisoned(k, "before posting on it") {
			return false
		}
		p.idle = p.idle[:len(p.idle)-1]
		p.busy[k] = o
		o.slotIdx = k
		c.Slot = p.slots[k]
		area = k * areaBytes
	} else {
		area = len(p.slots) * areaBytes
		p.extra = append(p.extra, o)
		o.extraIdx = len(p.extra) - 1
	}
	c.LocalOffset = uint64(area + r.IntN(areaBytes-int(min(length, abi.MaxOpBytes))+1))
	if rekey {
		o.newKr = s.newKey()
		if o.slotIdx >= 0 {
			// Stage the new K_r: the core copies it when it takes the command.
			o.wsrc = p.wsrc
			o.fillLo = int(c.LocalOffset) - area
			o.fillHi = o.fillLo + aesni.KeySize
			copy(p.wsrc.mem[area+o.fillLo:area+o.fillHi], o.newKr[:])
		}
	} else if write {
		o.stamp = s.nextStamp()
		if o.slotIdx >= 0 {
			// Stage the data: what the target's range must hold once committed.
			o.wsrc = p.wsrc
			o.fillLo = int(c.LocalOffset) - area
			o.fillHi = o.fillLo + int(min(length, abi.MaxOpBytes))
			o.fillOff = roff
			stampBytes(p.wsrc.mem[area+o.fillLo:area+o.fillHi], o.stamp, roff)
		}
	}
	if mutate != nil {
		mutate(o, c)
	}
	p.key(o, tgt)
	if !write && o.kind == kValid && o.target != nil && o.target.kind == regDst {
		s.snapshot(o)
	}
	// Ops that hold their slot for at least a round trip are targets of
	// slot-busy commands later in this tick.
	if o.slotIdx >= 0 && c.RemoteAddr != n.ip4 && o.kind.remote() {
		p.fresh = append(p.fresh, o.slotIdx)
	}
	c.Encode(entry)
	p.cmd.Commit()

	// Bound: local errors at the next Poll; the rest within
	// DISPATCH_TIMEOUT + TIMEOUT (+ resolution when ARP is involved).
	e := &n.ecfg
	wait := max(s.now, p.c.busyUntil) - s.now
	bound := wait + s.slack()
	switch {
	case o.kind.local():
	case o.kind == kUnreachable:
		bound += int64(e.ResolveTimeout + e.ARPRetry + e.DispatchTimeout)
	default:
		bound += int64(e.DispatchTimeout + e.Timeout)
		if write { // on its pull, the initiator adopts the server's timeout from then
			bound += s.maxTimeout
		}
		if !s.cfg.StaticNeighbors {
			bound += int64(e.ResolveTimeout + e.ARPRetry)
		}
	}
	o.deadline = s.now + bound
	s.ops[o.cookie] = o
	s.deadlines.push(deadline{t: o.deadline, cookie: o.cookie})
	s.res.Posted++
	s.res.ByKind[o.kind]++
	if rekey {
		s.res.RekeyOps++
		s.res.RekeyKinds[o.kind]++
	} else if write {
		s.res.Writes++
		s.res.WriteKinds[o.kind]++
	} else if o.lookup {
		s.res.Lookups++
	}
	if o.kind != kValid {
		s.res.Bad++
	}
	s.digest(0x9057, o.cookie, uint64(o.kind))
	s.tracef("node %d posts %s", n.id, o)
	return true
}
