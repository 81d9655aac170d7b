package portal

import (
	"github.com/onerma/onerma/abi"
)

// Short-first precedence (ExecutorConfig.ShortFirst) is enforced here, in
// issueOne; its bookkeeping is where transfers start and end and where ops
// are posted and complete: absorbLocked counts short transfers in
// (shortActive) and times their starts (shortStarted), maybeFinish counts
// them out and starts the hold (shortUntil, shortHold), and issueOne,
// complete and die move longInflight.

// shortHoldGaps: the hold after a short transfer lasts this many mean
// gaps between short transfers' starts (within ShortHold..ShortHoldMax);
// at four, a Poisson stream of short transfers finds the hold still on
// for 98 % of them (1 - e^-4).
const shortHoldGaps = 4

// shortStarted records that a short transfer started at now: the mean gap
// between starts moves an eighth of the way to this one.
func (e *Executor) shortStarted(now int64) {
	if e.shortLast > 0 {
		g := now - e.shortLast
		if e.shortGap == 0 {
			e.shortGap = g
		} else {
			e.shortGap += (g - e.shortGap) / 8
		}
	}
	e.shortLast = now
}

// shortHold is how long the long transfers stay capped once no short one
// is in progress (ExecutorConfig.ShortHoldMax).
func (e *Executor) shortHold() int64 {
	lo, hi := int64(e.cfg.ShortHold), int64(e.cfg.ShortHoldMax)
	return max(lo, min(shortHoldGaps*e.shortGap, hi))
}

// issue posts ops round-robin over the active transfers, one per
// transfer per turn, while windows, pacers, slots and the ring allow. It
// returns how many it posted and leaves in e.timer the earliest time a
// pacer or a backoff lets a blocked transfer go on.
func (e *Executor) issue(now int64) int {
	e.timer = noTimer
	e.ringFull = false
	n, posted := len(e.active), 0
	for idle := 0; idle < n && !e.ringFull; {
		if e.rr >= n {
			e.rr = 0
		}
		t := e.active[e.rr]
		e.rr++
		if e.issueOne(now, t) {
			posted++
			idle = 0
		} else {
			idle++
		}
	}
	return posted
}

// issueOne posts one op of t (a retry whose backoff is over, else its
// next chunk) if the windows, the short-first cap (ExecutorConfig.
// ShortFirst), t's pacer, a free slot and the ring allow; it reports
// whether it did.
func (e *Executor) issueOne(now int64, t *transfer) bool {
	if t.stopped || (t.nretry == 0 && t.issued == t.length) {
		return false
	}
	ps := t.peer
	// The local window bounds every op in flight, whatever its remote
	// engine (local congestion is this engine's); the remote one bounds
	// the ops to one engine and direction (MaxInFlight: the smaller).
	if ps.inflight >= e.ctl.MaxInFlight(ps.key) || e.inflight >= max(1, int(e.ctl.Local())) {
		return false
	}
	if !t.short && e.cfg.ShortFirst >= 0 && e.longInflight >= e.cfg.ShortFirst && (e.shortActive > 0 || now < e.shortUntil) {
		if e.shortActive == 0 {
			e.timer = min(e.timer, e.shortUntil) // the hold ends
		}
		return false
	}
	if w := ps.pacer.Wait(now); w > 0 {
		e.timer = min(e.timer, now+w)
		return false
	}
	// A retry whose backoff is over goes first.
	idx, prev := int32(-1), int32(-1)
	for i := t.retryHead; i >= 0; prev, i = i, e.ops[i].next {
		if at := e.ops[i].readyAt; at > now {
			e.timer = min(e.timer, at)
			continue
		}
		idx = i
		break
	}
	if idx < 0 && (t.issued == t.length || len(e.freeOps) == 0) {
		return false
	}
	b := e.p.cmd.Reserve()
	if b == nil {
		e.ringFull = true
		return false
	}
	var o *op
	if idx >= 0 {
		o = &e.ops[idx]
		if prev < 0 {
			t.retryHead = o.next
		} else {
			e.ops[prev].next = o.next
		}
		if t.retryTail == idx {
			t.retryTail = prev
		}
		o.next = -1
		t.nretry--
		e.st.retries.Add(1)
	} else {
		idx = e.freeOps[len(e.freeOps)-1]
		e.freeOps = e.freeOps[:len(e.freeOps)-1]
		o = &e.ops[idx]
		o.t, o.off = t, t.issued
		o.length = uint32(min(e.chunk, t.length-t.issued))
		o.attempts, o.timeouts, o.congest = 0, 0, 0
		t.issued += uint64(o.length)
	}
	o.gen++
	o.attempts++
	o.posted = true
	cmd := abi.Command{
		Op:           t.op,
		Slot:         o.slot,
		Cookie:       uint64(o.gen)<<32 | uint64(uint32(idx)),
		RemoteAddr:   t.key.Peer,
		RemoteRegion: t.region,
		RemoteOffset: t.remoteOff + o.off,
		LocalRegion:  t.local.id,
		Length:       o.length,
		LocalOffset:  t.localOff + o.off,
		Key:          t.kd,
	}
	cmd.Encode(b)
	e.p.cmd.Commit()
	ps.inflight++
	t.inflight++
	e.inflight++
	if !t.short {
		e.longInflight++
	}
	ps.pacer.Issued(now, e.ctl.Gap(ps.key, int(o.length)))
	e.st.ops.Add(1)
	return true
}
