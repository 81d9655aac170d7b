package sim

import (
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// Bad commands: a valid command made into one with exactly one thing
// wrong, each with its precise expected status.

// mutate makes a valid command into one with exactly the defect its kind
// names.
func (p *portal) mutate(o *op, c *abi.Command) {
	a := p.a
	s := a.s
	r := s.appRng
	tgt := o.target
	if o.rekey {
		switch o.kind {
		case kTooLarge: // a REKEY of any length but 16 is BAD_COMMAND (before TOO_LARGE)
			o.kind = kZeroLen
			c.Length = [...]uint32{0, 1, aesni.KeySize - 1, aesni.KeySize + 1, abi.MaxOpBytes + 1}[r.IntN(5)]
			return
		case kRemoteBounds: // a REKEY's offset means nothing: stays valid
			o.kind = kValid
			c.RemoteOffset = math.MaxUint64 - uint64(r.IntN(1<<20))
			return
		case kRemotePerm: // a region without PermRemoteRekey
			sk := a.pickRegion(false, func(rg *region) bool { return rg.perm&abi.PermRemoteRekey == 0 })
			if sk == nil {
				o.kind = kValid
				return
			}
			o.target = sk
			c.RemoteAddr = s.nodes[sk.node].ip4
			c.RemoteRegion = sk.id
			c.RemoteOffset = uint64(r.IntN(len(sk.mem)))
			return
		}
	}
	switch o.kind {
	case kLocalBounds:
		sz := uint64(len(o.local.mem))
		switch r.IntN(3) {
		case 0:
			c.LocalOffset = sz - uint64(c.Length) + 1 + uint64(r.IntN(64))
		case 1:
			c.LocalOffset = sz + uint64(r.IntN(1<<20))
		default:
			c.LocalOffset = math.MaxUint64 - uint64(r.IntN(int(c.Length))) // offset+length wraps
		}
	case kLocalRegion:
		c.LocalRegion = a.foreignLocalRegion(p, o.local)
		o.local = nil
	case kLocalPerm:
		// A READ needs a sink it may write, a WRITE a source it may read.
		lr := p.src
		if o.write {
			lr = p.sink
		}
		c.LocalRegion = lr.id
		o.local = lr
		c.LocalOffset = uint64(r.IntN(max(1, len(lr.mem)-int(c.Length)+1)))
		if int(c.Length) > len(lr.mem) {
			c.LocalOffset = 0
			c.Length = uint32(len(lr.mem))
		}
	case kTooLarge:
		switch r.IntN(3) {
		case 0:
			c.Length = abi.MaxOpBytes + 1
		case 1:
			c.Length = abi.MaxOpBytes + 1 + uint32(r.IntN(1<<16))
		default:
			c.Length = math.MaxUint32
		}
	case kZeroLen:
		c.Length = 0
	case kBadOp:
		c.Op = [...]abi.Op{0, 5, 9, 0x7f, 0xff}[r.IntN(5)] // 4 is LOOKUP
	case kSlotNotOurs:
		c.Slot = p.slotNotOurs()
	case kSlotRange:
		lo, cnt := p.c.cfg.SlotBase, abi.SlotID(p.c.cfg.Slots)
		switch {
		case lo > 0 && r.IntN(2) == 0:
			c.Slot = abi.SlotID(r.IntN(int(lo)))
		case r.IntN(3) == 0:
			c.Slot = math.MaxUint32 - abi.SlotID(r.IntN(4))
		default:
			c.Slot = lo + cnt + abi.SlotID(r.IntN(1000))
		}
	case kSlotBusy:
		if len(p.fresh) == 0 {
			c.Slot = p.slotNotOurs()
			o.kind = kSlotNotOurs
		} else {
			c.Slot = p.slots[p.fresh[r.IntN(len(p.fresh))]]
		}
	case kUnreachable:
		// 10.0.250.x: no node has it; nobody answers its ARP requests.
		c.RemoteAddr = 10<<24 | 250<<8 | uint32(1+r.IntN(200))
		o.target = nil
	case kRemoteRegion:
		c.RemoteRegion = a.staleRemote(tgt)
		c.RemoteOffset = 0
		o.target = nil
	case kRemoteBounds:
		sz := uint64(len(tgt.mem))
		switch r.IntN(3) {
		case 0:
			c.RemoteOffset = sz - uint64(c.Length) + 1 + uint64(r.IntN(64))
		case 1:
			c.RemoteOffset = sz + uint64(r.IntN(1<<20))
		default:
			c.RemoteOffset = math.MaxUint64 - uint64(r.IntN(int(c.Length)))
		}
	case kRemotePerm:
		// A READ of a sink (no remote access); a WRITE of a sink or of a
		// pattern region (remote-readable only).
		var sk *region
		if o.write {
			sk = a.pickRegion(false, func(rg *region) bool { return rg.kind == regSink || rg.kind == regSrc })
		} else {
			sk = a.pickTarget(true)
		}
		if sk == nil {
			o.kind = kValid // no sink to aim at: stays a valid op
			return
		}
		o.target = sk
		c.RemoteAddr = s.nodes[sk.node].ip4
		c.RemoteRegion = sk.id
		c.RemoteOffset = uint64(r.IntN(len(sk.mem) - int(c.Length) + 1))
	}
}

// foreignLocalRegion: a region id this portal may not use as its sink: a
// region of another portal of this core, one deregistered earlier (stale
// generation), or an index beyond the table.
func (a *app) foreignLocalRegion(p *portal, own *region) abi.RegionID {
	r := a.s.appRng
	var cands []abi.RegionID
	for _, q := range a.portals {
		if q != p {
			cands = append(cands, q.sink.id, q.wsrc.id) // usable, just not ours
		}
	}
	cands = append(cands, a.deadIDs...)
	if len(cands) > 0 && r.IntN(4) != 0 {
		return cands[r.IntN(len(cands))]
	}
	switch r.IntN(3) {
	case 0:
		return abi.MakeRegionID(uint16(a.n.ecfg.Regions+r.IntN(100)), 1)
	case 1:
		return 0
	default: // our own sink's (or source's) index with another generation
		id := own.id
		return abi.MakeRegionID(id.Index(), id.Gen()+1+uint16(r.IntN(100)))
	}
}

// staleRemote: a region id on tgt's node that does not name a live region.
func (a *app) staleRemote(tgt *region) abi.RegionID {
	s := a.s
	r := s.appRng
	var cands []abi.RegionID
	ep := s.nodes[tgt.node].epoch // (the ids of an engine before a restart may be live again)
	for _, rg := range s.regions {
		if rg.node == tgt.node && rg.epoch == ep && rg.deadAt != math.MaxInt64 {
			cands = append(cands, rg.id)
		}
	}
	if len(cands) > 0 && r.IntN(3) != 0 {
		// A dead id whose entry may since hold a new region: the
		// generation must keep them apart.
		id := cands[r.IntN(len(cands))]
		for _, rg := range s.regions {
			if rg.node == tgt.node && rg.epoch == ep && rg.id == id && rg.deadAt == math.MaxInt64 {
				panic("sim: dead region id reused")
			}
		}
		return id
	}
	switch r.IntN(3) {
	case 0:
		return abi.MakeRegionID(uint16(s.nodes[tgt.node].ecfg.Regions+r.IntN(100)), 1)
	case 1:
		return 0
	default:
		return abi.MakeRegionID(tgt.id.Index(), tgt.id.Gen()+1+uint16(r.IntN(100)))
	}
}

// slotNotOurs: a slot of the core's partition this portal does not hold.
func (p *portal) slotNotOurs() abi.SlotID {
	a := p.a
	r := a.s.appRng
	e := &p.c.cfg
	for range 64 {
		sl := e.SlotBase + abi.SlotID(r.IntN(e.Slots))
		ours := false
		for _, v := range p.slots {
			if v == sl {
				ours = true
				break
			}
		}
		if !ours {
			return sl
		}
	}
	return e.SlotBase + abi.SlotID(e.Slots) // out of range: still not ours
}
