package sim

import (
	"bytes"
	"math"

	"github.com/onerma/onerma/abi"
)

// Completions: reading them from the rings and checking each against its
// op (status, bounds, delays, the sink's bytes), and the applications'
// memory checks at the end of the run.

func (a *app) harvestAll() {
	for _, p := range a.portals {
		p.harvest()
	}
	for _, f := range a.flows {
		f.harvest()
	}
}

func (p *portal) harvest() {
	s := p.a.s
	for {
		e := p.cpl.Peek()
		if e == nil {
			break
		}
		var c abi.Completion
		c.Decode(e)
		p.cpl.Advance()
		p.a.completions++
		p.complete(&c)
		if s.err != nil {
			break
		}
	}
	p.cpl.Release()
	if p.cpl.Corrupt() {
		s.fail("node %d portal %d: the core wrote an impossible completion-ring producer index", p.a.n.id, p.id)
	}
}

// allowed: the statuses op o may complete with now.
func (s *Sim) allowed(o *op, st abi.Status) bool {
	if o.p.a.n.shut && !o.kind.local() &&
		(st == abi.StatusAborted || (o.write && st == abi.StatusTimeout)) {
		// Core.Shutdown: ABORTED; a WRITE whose data was all sent stays in
		// service and ends OK or TIMEOUT at its deadline (its server may
		// have committed it).
		return true
	}
	netFail := !s.cfg.Strict && (st == abi.StatusTimeout || st == abi.StatusNack || st == abi.StatusDispatchTimeout ||
		(st == abi.StatusUnreachable && !s.cfg.StaticNeighbors))
	// The region was deregistered after posting: the server had
	// authenticated the request and queued it (REMOTE_REGION when it came
	// to serve it), or authenticated it with the key of the region's
	// tombstone (REMOTE_REGION at once), or no longer had the region's
	// key when the request arrived, another region at its index having
	// gone since (REMOTE_AUTHENTICATION_FAILURE).
	// (Not a region its engine's restart killed: the engine that had it
	// never answers again, the new one cannot authenticate the request.)
	dead := o.target != nil && o.target.deadAt <= s.now && st == abi.StatusRemoteRegion && !o.target.gone
	// A REKEY whose region's key changed after it was posted (its owner's
	// Rekey, or another REKEY installed) may have authenticated under the
	// old key and then found it replaced: REMOTE_REGION, its key not
	// installed (engine/pull.go).
	superseded := o.rekey && st == abi.StatusRemoteRegion && o.keyRg != nil && o.keyRg == o.target &&
		o.keyVer < len(o.keyRg.keys)-1
	// REMOTE_AUTHENTICATION_FAILURE: the server could not authenticate
	// the request. Only for a key that cannot open: the kind's own defect,
	// a K_r replaced or removed before the op completed, or a request the
	// fabric damaged. Ops on other regions never see it.
	authFail := st == abi.StatusRemoteAuthFailure && (o.noAuth() || o.reqCorrupt ||
		(o.keyRg != nil && (o.keyRg.deadAt <= s.now || o.keyVer < len(o.keyRg.keys)-1)))
	if o.local != nil && o.local.deadAt <= s.now && (o.kind.usesSlot() || o.kind == kSlotBusy) {
		// The local region was deregistered after posting: the core may
		// have taken the command after that (LOCAL_REGION), or dropped the
		// responses that arrived after that (TIMEOUT); OK is impossible,
		// since completions written before were read before. Bad-slot
		// commands fail on the slot first, except a slot-busy one whose
		// slot's op failed at once on the same dead region (LOCAL_REGION).
		// A WRITE reads its source when pulled: one whose data was all
		// sent before may still be committed (OK).
		if st == abi.StatusLocalRegion || (st == abi.StatusTimeout && !o.kind.local() && o.kind.usesSlot()) {
			return true
		}
		if st == abi.StatusOK && !(o.write && o.committed) {
			return false
		}
	}
	if o.noAuth() && o.kind.remote() {
		// Nothing the server sends but REMOTE_AUTHENTICATION_FAILURE can
		// reach it: no data, no NACK, no remote error.
		return authFail || (!s.cfg.Strict && (st == abi.StatusTimeout || st == abi.StatusDispatchTimeout ||
			(st == abi.StatusUnreachable && !s.cfg.StaticNeighbors)))
	}
	switch o.kind {
	case kValid:
		if o.lookup {
			return lookupAllowed(st) || netFail || dead || authFail
		}
		return st == abi.StatusOK || netFail || dead || authFail || superseded
	case kRemoteBounds, kRemotePerm:
		return st == kindStatus[o.kind] || netFail || dead || authFail
	case kUnreachable:
		return st == abi.StatusUnreachable || (!s.cfg.Strict && st == abi.StatusDispatchTimeout)
	}
	return st == kindStatus[o.kind]
}

// complete checks one completion against the op it names.
func (p *portal) complete(c *abi.Completion) {
	a := p.a
	s := a.s
	o := s.ops[c.Cookie]
	s.digest(0xc01, c.Cookie, uint64(c.Status), uint64(s.now))
	if o == nil {
		s.fail("node %d portal %d: completion {cookie=%#x slot=%d status=%v}: no such op outstanding (second completion, orphan, or invented)",
			a.n.id, p.id, c.Cookie, c.Slot, c.Status)
		return
	}
	s.tracef("node %d completes %s: %v issue=%d total=%d", a.n.id, o, c.Status, c.IssueDelayNs, c.TotalDelayNs)
	e := &a.n.ecfg
	switch {
	case o.p != p:
		s.fail("completion of %s arrived on portal %d", o, p.id)
	case c.Slot != o.cmd.Slot:
		s.fail("completion of %s names slot %d", o, c.Slot)
	case !s.allowed(o, c.Status):
		s.fail("%s completed with %v, want %v", o, c.Status, o.want())
	case c.Status == abi.StatusOK && c.Length != o.cmd.Length && !o.lookup: // (a LOOKUP's: its answer's, checkLookup)
		s.fail("%s completed OK with length %d", o, c.Length)
	case o.kind != kBadOp && c.Op != o.cmd.Op:
		s.fail("%s completed with op %v", o, c.Op)
	case c.IssueDelayNs > c.TotalDelayNs:
		s.fail("%s: issue_delay %d > total_delay %d", o, c.IssueDelayNs, c.TotalDelayNs)
	case int64(c.TotalDelayNs) > s.now-o.postedAt:
		s.fail("%s: total_delay %d longer than the op existed (%d)", o, c.TotalDelayNs, s.now-o.postedAt)
	case c.Status == abi.StatusDispatchTimeout && int64(c.TotalDelayNs) < int64(e.DispatchTimeout):
		s.fail("%s: DISPATCH_TIMEOUT after only %dns (DispatchTimeout %v)", o, c.TotalDelayNs, e.DispatchTimeout)
	case c.Status == abi.StatusTimeout && int64(c.TotalDelayNs-c.IssueDelayNs) < int64(e.Timeout) &&
		!(o.write && o.pullFirst != 0):
		// (A WRITE that was pulled: its deadline became the server's
		// timeout from the pull, earlier or later; checkWriteCompletion.)
		s.fail("%s: TIMEOUT after only %dns in service (Timeout %v)", o, c.TotalDelayNs-c.IssueDelayNs, e.Timeout)
	case c.Status == abi.StatusTimeout && (!o.write || o.pullFirst == 0) && int64(c.TotalDelayNs-c.IssueDelayNs) > int64(e.Timeout)+s.slack():
		// (A WRITE that was pulled: its deadline moved to the server's
		// timeout from the pull, checked in checkWriteCompletion.)
		s.fail("%s: TIMEOUT after %dns in service (Timeout %v): late", o, c.TotalDelayNs-c.IssueDelayNs, e.Timeout)
	case c.Status == abi.StatusDispatchTimeout && s.cfg.StaticNeighbors && int64(c.TotalDelayNs) > int64(e.DispatchTimeout)+s.slack():
		// (With ARP, time spent resolving comes first and adds to it.)
		s.fail("%s: DISPATCH_TIMEOUT after %dns (DispatchTimeout %v): late", o, c.TotalDelayNs, e.DispatchTimeout)
	case s.cfg.OpBoundNs > 0 && c.Status == abi.StatusOK && s.now-o.postedAt > s.cfg.OpBoundNs:
		s.fail("%s completed %v %dns after it was posted, beyond the run's bound of %dns", o, c.Status, s.now-o.postedAt, s.cfg.OpBoundNs)
	case c.Status == abi.StatusUnreachable && o.kind != kUnreachable && int64(c.TotalDelayNs) < int64(e.ResolveTimeout):
		s.fail("%s: UNREACHABLE after %dns although node %d exists and ResolveTimeout is %v (neighbor table refused it?)",
			o, c.TotalDelayNs, s.nodeOfIP(o.cmd.RemoteAddr), e.ResolveTimeout)
	}
	if s.err != nil {
		return
	}
	if o.write {
		s.checkWriteCompletion(o, c)
		if s.err != nil {
			return
		}
	}
	if o.slotIdx >= 0 {
		if o.sink == p.sink {
			p.checkArea(o, c)
		} // else: the area is in a deregistered sink, checked whole at the end
		if o.wsrc != nil && o.wsrc == p.wsrc && s.err == nil {
			p.checkSrcArea(o)
		}
		if s.err != nil {
			return
		}
		p.busy[o.slotIdx] = nil
		p.idle = append(p.idle, o.slotIdx)
	} else {
		p.removeExtra(o)
	}
	delete(s.ops, o.cookie)
	s.releaseSnap(o)
	s.res.ByStatus[c.Status]++
	if o.lookup {
		s.res.LookupStatus[c.Status]++
	}
	if c.Status == abi.StatusRemoteAuthFailure && o.reqCorrupt && !o.noAuth() {
		s.res.AuthFailDamaged++
	}
}

func (p *portal) removeExtra(o *op) {
	last := len(p.extra) - 1
	q := p.extra[last]
	p.extra[o.extraIdx] = q
	q.extraIdx = o.extraIdx
	p.extra[last] = nil
	p.extra = p.extra[:last]
}

// checkArea: after an op on slot k completes, its area holds exactly the
// remote bytes (OK), or only remote bytes and poison (failure: chunks that
// arrived before the failure), and poison everywhere else. Then the area
// is poisoned again for the slot's next op.
func (p *portal) checkArea(o *op, c *abi.Completion) {
	s := p.a.s
	st := c.Status
	base := o.slotIdx * areaBytes
	area := p.sink.mem[base : base+areaBytes]
	lo, hi := 0, 0
	if o.lookup && o.kind == kValid {
		lo = int(o.cmd.LocalOffset) - base
		hi = lo + int(o.cmd.Length)
		p.checkLookup(o, c, area[lo:hi], !s.cfg.StrictFailedSink && p.c.core.Stats().RxAuthFailed > o.rxAuth0)
		if s.err != nil {
			return
		}
	} else if o.kind == kValid && o.target != nil && !o.write { // (a WRITE's sink area stays untouched)
		lo = int(o.cmd.LocalOffset) - base
		hi = lo + int(o.cmd.Length)
		want := s.expect[:hi-lo]
		got := area[lo:hi]
		if st != abi.StatusOK && firstNotPoison(got) < 0 {
			// Nothing landed (the common failure): no need for the data.
		} else if o.target.kind == regDst {
			zeroOK := !s.cfg.StrictFailedSink && p.c.core.Stats().RxAuthFailed > o.rxAuth0
			p.checkReadOfWritten(o, st, got, zeroOK)
			if s.err != nil {
				return
			}
		} else if fillPatternAt(want, o.target.pattern, o.cmd.RemoteOffset); st == abi.StatusOK {
			if !bytes.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				s.fail("corrupted data accepted: %s completed OK but byte %d of its data is %#02x, want %#02x",
					o, i, got[i], want[i])
				return
			}
		} else {
			// The core opens a response chunk straight into the sink and
			// zeroes it when the tag does not match (OpenResponseDirect):
			// after an answer failed authentication on this node, a failed
			// op may also hold zeros where no genuine chunk came.
			zeroOK := !s.cfg.StrictFailedSink && p.c.core.Stats().RxAuthFailed > o.rxAuth0
			zeroed := false
			for i, b := range got {
				if b == want[i] || b == poison {
					continue
				}
				if b == 0 && zeroOK {
					zeroed = true
					continue
				}
				s.fail("%s failed with %v but byte %d of its sink is %#02x (neither its data %#02x nor untouched)",
					o, st, i, b, want[i])
				return
			}
			if zeroed {
				s.res.ZeroedSinks++
			}
		}
	}
	if i := firstNotPoison(area[:lo]); i >= 0 {
		s.fail("%s: byte %d of its slot's area, before the op's range [%d,%d), was written (%#02x)", o, i, lo, hi, area[i])
		return
	}
	if i := firstNotPoison(area[hi:]); i >= 0 {
		s.fail("%s: byte %d of its slot's area, after the op's range [%d,%d), was written (%#02x)", o, hi+i, lo, hi, area[hi+i])
		return
	}
	fill(area, poison)
}

// areaPoisoned: an idle slot's area must be untouched (a late response of
// a completed op must never land).
func (p *portal) areaPoisoned(k int, when string) bool {
	s := p.a.s
	area := p.sink.mem[k*areaBytes : (k+1)*areaBytes]
	if i := firstNotPoison(area); i >= 0 {
		s.fail("node %d portal %d: area of idle slot %d written at byte %d (%#02x) %s: a late response landed after its op completed",
			p.a.n.id, p.id, p.slots[k], i, area[i], when)
		return false
	}
	area = p.wsrc.mem[k*areaBytes : (k+1)*areaBytes]
	if i := firstNotPoison(area); i >= 0 {
		s.fail("node %d portal %d: source area of idle slot %d written at byte %d (%#02x) %s", p.a.n.id, p.id, p.slots[k], i, area[i], when)
		return false
	}
	return true
}

// checkAtEnd: no memory written where it must not be, no completion on a
// closed portal's ring.
func (a *app) checkAtEnd() {
	s := a.s
	for _, p := range a.portals {
		for k := range p.slots {
			if !p.areaPoisoned(k, "at the end") {
				return
			}
		}
		if i := firstNotPoison(p.sink.mem[len(p.slots)*areaBytes:]); i >= 0 {
			s.fail("node %d portal %d: scratch area (target of commands that must never run) written at %d", a.n.id, p.id, i)
			return
		}
		if i := firstNotPoison(p.wsrc.mem[len(p.slots)*areaBytes:]); i >= 0 {
			s.fail("node %d portal %d: scratch area of the write source written at %d", a.n.id, p.id, i)
			return
		}
	}
	for _, rg := range s.regions {
		if rg.node != a.n.id || rg.deadAt != math.MaxInt64 {
			continue
		}
		switch rg.kind {
		case regSrc:
			if !checkPattern(rg.mem, rg.pattern) {
				s.fail("node %d: remote-readable region %#x was written", a.n.id, uint32(rg.id))
				return
			}
		case regDst:
			if i := firstDiff(rg.mem, rg.shadow); i >= 0 {
				s.fail("node %d: byte %d of remote-writable region %#x is %#02x at the end, the model says %#02x",
					a.n.id, i, uint32(rg.id), rg.mem[i], rg.shadow[i])
				return
			}
		}
	}
	for _, rg := range a.deadSinks {
		if i := firstNotPoison(rg.mem); i >= 0 {
			s.fail("node %d: deregistered sink %#x written at %d after DeregisterRegion returned", a.n.id, uint32(rg.id), i)
			return
		}
	}
	for _, p := range a.closed {
		if v := p.cpl.Available(); v != 0 {
			s.fail("node %d: %d completions written on portal %d after it was closed", a.n.id, v, p.id)
			return
		}
		if i := firstNotPoison(p.sink.mem); i >= 0 {
			s.fail("node %d: sink of closed portal %d written at %d after close", a.n.id, p.id, i)
			return
		}
		if i := firstNotPoison(p.wsrc.mem); i >= 0 {
			s.fail("node %d: write source of closed portal %d written at %d after close", a.n.id, p.id, i)
			return
		}
	}
}
