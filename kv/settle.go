package kv

import (
	"github.com/onerma/onerma/abi"
)

// settle handles attempt ai once every READ of its phase has completed.
func (c *Client) settle(ai int32, now int64) {
	a := &c.atts[ai]
	if a.probe {
		c.probed(ai, now)
		return
	}
	gi := a.get
	if gi < 0 { // orphan: its GET was answered
		if a.status != abi.StatusOK {
			c.health(a, now)
		}
		c.freeAttempt(ai)
		return
	}
	if a.status != abi.StatusOK {
		c.health(a, now)
		c.failover(gi, ai, a.status, now)
		return
	}
	g := &c.gets[gi]
	key := g.key[:g.klen]
	sink := c.sink.Bytes()[uint64(ai)*c.area : uint64(ai+1)*c.area]
	if a.phase == phaseLookup {
		c.settleLookup(gi, ai, sink, now)
		return
	}
	if a.phase == phaseRecord {
		c.settleRecord(gi, ai, sink[abi.MaxOpBytes:abi.MaxOpBytes+uint64(a.slot.Len)], &a.slot, key, now)
		return
	}
	c.settleBucket(gi, ai, sink, now)
}

// settleRecord goes on from the record rec that slot s points to: the
// value when it checks, else the GET is read again (torn) or handled as
// corrupt.
func (c *Client) settleRecord(gi, ai int32, rec []byte, s *Slot, key []byte, now int64) {
	a := &c.atts[ai]
	val, err := DecodeRecord(rec, s, key)
	switch err {
	case nil:
		c.finish(gi, val, nil, a, now)
	case ErrCorrupt:
		c.corrupt(gi, ai, now)
	default:
		c.retry(gi, ai, now)
	}
}

// settleBucket goes on from the bucket in sink (a bucket READ's, or a
// LOOKUP's miss): a slot holding the key answers; with none, a slot read
// mid-change might have been it (read again), else the key is not here.
func (c *Client) settleBucket(gi, ai int32, sink []byte, now int64) {
	a := &c.atts[ai]
	g := &c.gets[gi]
	key := g.key[:g.klen]
	v := a.v
	unstable, corrupt := false, false
	for w := range int(v.Ways) {
		s, err := DecodeSlot(sink[w*SlotBytes:], v.SlabBytes, v.maxRecord)
		switch {
		case err == ErrUnstable:
			unstable = true
			continue
		case err != nil:
			corrupt = true
			continue
		case !s.Matches(key, g.h):
			continue
		case s.Kind == kindInline:
			c.finish(gi, s.Value, nil, a, now)
			return
		}
		if s.Len > recordLen(MaxKeyBytes, c.cfg.MaxValue) {
			c.finish(gi, nil, ErrValueTooLarge, a, now)
			return
		}
		a.phase, a.slot, a.next, a.pending, a.hedgeNs = phaseRecord, s, 0, true, 0
		c.postPending(ai)
		return
	}
	switch {
	case unstable:
		c.retry(gi, ai, now)
	case corrupt:
		c.corrupt(gi, ai, now)
	default:
		c.finish(gi, nil, ErrNotFound, a, now)
	}
}

// lookupAnswered: a LOOKUP's statuses that answer it (settleLookup goes
// on from them) rather than fail its replica.
func lookupAnswered(st abi.Status) bool {
	switch st {
	case abi.StatusRemoteNotFound, abi.StatusRemoteLookupTooLarge, abi.StatusRemoteLookupBounds,
		abi.StatusBadCommand, abi.StatusRemotePermission:
		return true
	}
	return false
}

// settleLookup goes on from a LOOKUP of the key's hash in its bucket. OK:
// the sink holds the slot the engine matched and, from SlotBytes on, the
// record it points to; both are checked as a READ's would be (the slot's
// sequence and sum, the key; the record's stamp against the slot's, its
// key and sum), and the answer's length must be the slot's record's: a
// slot and a record read while a SET changed them do not pass, and are
// read again. A miss brings the bucket (an inline value, a slot torn
// under the scan, or no key). A record too large for one LOOKUP, a slot
// of another key with the same tag, and a refusal go on with READs.
func (c *Client) settleLookup(gi, ai int32, sink []byte, now int64) {
	a := &c.atts[ai]
	g := &c.gets[gi]
	key := g.key[:g.klen]
	v := a.v
	c.st.Lookups++
	switch a.lkSt {
	case abi.StatusOK:
		s, err := DecodeSlot(sink[:SlotBytes], v.SlabBytes, v.maxRecord)
		switch {
		case err == ErrUnstable:
			c.retry(gi, ai, now)
			return
		case err != nil:
			c.corrupt(gi, ai, now)
			return
		case s.Kind != kindPointer || !s.Matches(key, g.h):
			// (an inline slot whose key bytes are the hash, or a slot
			// changed since the scan): the bucket tells
		case a.lkLen != SlotBytes+s.Len:
			c.retry(gi, ai, now) // the record followed is not the slot's sent
			return
		default:
			if s.Len > recordLen(MaxKeyBytes, c.cfg.MaxValue) {
				c.finish(gi, nil, ErrValueTooLarge, a, now)
				return
			}
			c.settleRecord(gi, ai, sink[SlotBytes:SlotBytes+uint64(s.Len)], &s, key, now)
			return
		}
	case abi.StatusRemoteNotFound:
		if a.lkLen == v.Ways*SlotBytes {
			c.settleBucket(gi, ai, sink, now)
			return
		}
	case abi.StatusRemoteLookupBounds: // a slot torn under the scan
		c.retry(gi, ai, now)
		return
	case abi.StatusBadCommand: // the local engine has no LOOKUP
		c.noLookup = true
	}
	// READs: the bucket, then the record.
	c.st.LookupReads++
	a.phase, a.next, a.pending, a.hedgeNs = phaseBucket, 0, true, 0
	c.postPending(ai)
}

// retry reads the bucket again on the same replica (a race with a SET).
// A GET that raced maxRetries times tries the next replica (the key is
// being rewritten faster than it can be read; the replica is not broken).
func (c *Client) retry(gi, ai int32, now int64) {
	g := &c.gets[gi]
	c.st.Retries++
	g.retries++
	if g.retries%maxRetries == 0 {
		c.st.RetriesExhausted++
		c.failover(gi, ai, abi.StatusOK, now)
		return
	}
	a := &c.atts[ai]
	a.phase, a.next, a.pending, a.hedgeNs = c.firstPhase(a), 0, true, 0
	c.postPending(ai)
}

// corrupt leaves a replica that returned what cannot be a slot or record
// of its server.
func (c *Client) corrupt(gi, ai int32, now int64) {
	c.st.Corrupt++
	c.markDown(c.atts[ai].rep, now)
	c.failover(gi, ai, abi.StatusOK, now)
}

// health updates the replica of a failed attempt: it is avoided for a
// while (unless the failure was our own engine's: DISPATCH_TIMEOUT, or
// the engine gone), and asked for new K_d when its key or regions may
// have changed. A failure under a view the replica has since replaced
// says nothing about the replica now.
func (c *Client) health(a *attempt, now int64) {
	r := a.rep
	if a.v != r.cur {
		return
	}
	switch a.status {
	case abi.StatusDispatchTimeout, abi.StatusEngineGone:
		return
	case abi.StatusRemoteAuthFailure, abi.StatusRemoteRegion, abi.StatusRemoteBounds, abi.StatusRemotePermission:
		r.want()
	}
	c.markDown(r, now)
}

func (c *Client) markDown(r *replica, now int64) {
	if !r.up {
		return
	}
	r.up = false
	r.st.Downs++
	r.backoff = int64(c.cfg.AvoidFor)
	r.downUntil = now + r.backoff
}

// avoid marks a replica down for reads (a SET it did not apply).
func (c *Client) avoid(r *replica, now int64) { c.markDown(r, now) }

// failover ends attempt ai of GET gi, which failed with status (OK: what
// it read was corrupt, or kept changing), and moves the GET to the next
// replica at once, unless another attempt (a hedge) still works for it.
func (c *Client) failover(gi, ai int32, status abi.Status, now int64) {
	g := &c.gets[gi]
	g.detach(ai)
	c.freeAttempt(ai)
	if status != abi.StatusOK {
		c.st.Failovers[status]++
	}
	c.failovers++
	if g.moves < 255 {
		g.moves++
	}
	if g.live > 0 {
		return
	}
	if status == abi.StatusEngineGone {
		c.finish(gi, nil, c.goneErr(), nil, now)
		return
	}
	if !c.launch(gi, now, false) {
		c.finish(gi, nil, ErrUnavailable, nil, now)
	}
}

// goneErr is the portal's error once its engine is gone.
func (c *Client) goneErr() error {
	if err := c.p.Gone(); err != nil {
		return err
	}
	return ErrUnavailable
}

// finish reports GET gi (val aliases the sink: it is copied into the
// GET's dst). Its other attempt, if any, goes on as an orphan until its
// READs complete.
func (c *Client) finish(gi int32, val []byte, err error, winner *attempt, now int64) {
	g := &c.gets[gi]
	switch {
	case err == nil:
		g.val = append(g.dst[:0], val...)
		c.st.Hits++
	case err == ErrNotFound:
		c.st.Misses++
	default:
		c.st.Errors++
	}
	g.err = err
	if winner != nil {
		g.served = int16(winner.rep.i)
		winner.rep.st.Served++
		if winner.hedge {
			c.st.HedgeWins++
		}
		if err == nil {
			for k := range int(g.nreps) {
				c.reps[g.reps[k]].hint(g.h, now)
			}
		}
	}
	for _, ai := range g.atts {
		if ai < 0 {
			continue
		}
		a := &c.atts[ai]
		if a == winner || a.ops == 0 {
			c.freeAttempt(ai)
			continue
		}
		a.get, a.pending = -1, false
		// A hedge answered while this READ still waits: its replica
		// is slow, or dead and failing only at TIMEOUT. stuckDown
		// such answers with no OK READ from it in between avoid it.
		if winner != nil && winner.hedge && a.v == a.rep.cur {
			if a.rep.stuck++; a.rep.stuck >= stuckDown {
				c.markDown(a.rep, now)
			}
		}
	}
	g.atts, g.live = [2]int32{-1, -1}, 0
	g.state = gDone
	c.running--
	if !g.sync {
		c.done = append(c.done, gi)
	}
}

// tick runs the timers: new views, probes of avoided replicas, hints
// waiting too long, and due hedges.
func (c *Client) tick(now int64) {
	if c.refreshed.Load() {
		c.refreshed.Store(false)
		c.takeViews(now)
	}
	for _, r := range c.reps {
		if !r.up && !r.probing && r.cur != nil && now >= r.downUntil && c.spare() {
			ai := c.allocAttempt(r)
			c.atts[ai].probe = true
			r.probing = true
			r.st.Probes++
			c.postPending(ai)
		}
		if r.hints != nil && r.hints.n > 0 && now-r.hintsFrom > int64(c.cfg.HintFlush) {
			r.flushHints()
		}
	}
	if c.hedgeAt != 0 && now >= c.hedgeAt {
		c.hedges(now)
	}
}

// probed takes a probe's outcome: the replica is up again, or avoided
// twice as long.
func (c *Client) probed(ai int32, now int64) {
	a := &c.atts[ai]
	r := a.rep
	r.probing = false
	if a.v == r.cur && !r.up {
		if a.status == abi.StatusOK {
			r.up = true
			r.st.ProbesOK++
		} else {
			r.backoff = min(2*r.backoff, int64(c.cfg.AvoidMax))
			r.downUntil = now + r.backoff
			switch a.status {
			case abi.StatusRemoteAuthFailure, abi.StatusRemoteRegion, abi.StatusRemoteBounds, abi.StatusRemotePermission:
				r.want()
			}
		}
	}
	c.freeAttempt(ai)
}

// hedges sends the due hedges: a second bucket READ, to the next replica,
// for each GET whose only attempt has waited past its replica's p99.
func (c *Client) hedges(now int64) {
	c.hedgeAt = 0
	for gi := range c.gets {
		g := &c.gets[gi]
		if g.state != gActive || g.hedged || g.live != 1 {
			continue
		}
		a := &c.atts[g.atts[0]]
		if a.hedgeNs == 0 {
			continue
		}
		if now < a.hedgeNs {
			if c.hedgeAt == 0 || a.hedgeNs < c.hedgeAt {
				c.hedgeAt = a.hedgeNs
			}
			continue
		}
		a.hedgeNs = 0
		g.hedged = true
		if c.launch(int32(gi), now, true) {
			c.st.Hedges++
		}
	}
}
