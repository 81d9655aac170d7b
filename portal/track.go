package portal

import "github.com/onerma/onerma/abi"

// The portal keeps a record of every op posted through Post and not yet
// seen completed, so that when the engine goes away it can report each of
// them failed, exactly once, with StatusEngineGone: the engine will
// never write their completions.
//
// A slot the portal owns has one record, found through the owned map (a
// lookup Slot and Release make too). A post naming a slot the portal does
// not own, or one that already has an op posted (the engine answers both
// with BAD_SLOT at once, unless the earlier op's completion is merely
// unread), is recorded in stray instead. The engine completes such a post
// as soon as it takes it from the command ring, having reserved room in
// the completion ring first, so stray never holds more than CmdCap +
// CplCap records; its capacity is that, allocated at open.
//
// A completion removes the record of its slot and cookie (the owned
// slot's first, then a stray one): two posts with the same slot and
// cookie are interchangeable, so whichever record goes, what remains is
// right. An Executor posts on its own (it records its ops itself) and
// polls without this bookkeeping.

// pendingOp is one op posted and not seen completed.
type pendingOp struct {
	cookie uint64
	slot   abi.SlotID
	op     abi.Op
	live   bool
}

// record notes cmd as posted. It returns false, recording nothing, only
// when stray is full, which a well-behaved engine never lets happen.
func (p *Portal) record(cmd *abi.Command) bool {
	op := pendingOp{cookie: cmd.Cookie, slot: cmd.Slot, op: cmd.Op, live: true}
	if i, ok := p.owned[cmd.Slot]; ok && !p.pending[i].live {
		p.pending[i] = op
		return true
	}
	if len(p.stray) == cap(p.stray) {
		return false
	}
	p.stray = append(p.stray, op) // within its capacity: no allocation
	return true
}

// settle removes the record of the op c completes.
func (p *Portal) settle(c *abi.Completion) {
	if i, ok := p.owned[c.Slot]; ok && p.pending[i].live && p.pending[i].cookie == c.Cookie {
		p.pending[i].live = false
		return
	}
	for k := range p.stray {
		if s := &p.stray[k]; s.slot == c.Slot && s.cookie == c.Cookie {
			last := len(p.stray) - 1
			*s = p.stray[last]
			p.stray = p.stray[:last]
			return
		}
	}
	// Not posted through Post (an Executor's op, reported by an engine
	// that completes it after the Executor closed): nothing to settle.
}

// synthesize writes a StatusEngineGone completion into out for each
// recorded op, removing its record, and returns how many it wrote. Only
// Poll calls it, once the engine is gone and its completion ring drained.
func (p *Portal) synthesize(out []abi.Completion) int {
	n := 0
	for ; n < len(out) && p.synthAt < len(p.pending); p.synthAt++ {
		if r := &p.pending[p.synthAt]; r.live {
			r.live = false
			out[n] = abi.Completion{Cookie: r.cookie, Slot: r.slot, Status: abi.StatusEngineGone, Op: r.op}
			n++
		}
	}
	for ; n < len(out) && len(p.stray) > 0; n++ {
		r := p.stray[len(p.stray)-1]
		p.stray = p.stray[:len(p.stray)-1]
		out[n] = abi.Completion{Cookie: r.cookie, Slot: r.slot, Status: abi.StatusEngineGone, Op: r.op}
	}
	return n
}

// Posted reports ops posted (Post, Submit, PostCommand) whose completion
// Poll or Wait has not yet returned. It scans the owned slots: for
// diagnostics and tests, not for the data path.
func (p *Portal) Posted() int {
	n := len(p.stray)
	for i := range p.pending {
		if p.pending[i].live {
			n++
		}
	}
	return n
}
