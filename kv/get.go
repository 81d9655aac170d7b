package kv

import (
	"context"
	"time"

	"github.com/onerma/onerma/portal"
)

// A GET (getOp) is what the caller started; an attempt is one try of it
// on one replica: the READ of the key's bucket and, when the slot found
// points to a slab record, the READs of the record (one per 4 KB). An
// attempt owns a slice of the sink region (area bytes) until every READ it
// posted has completed, also after its GET was answered by another
// attempt (it is then an orphan): the engine writes into the slice until
// the completion. Every op's cookie names its attempt and the attempt's
// generation.

const (
	gFree = iota
	gActive
	gDone
)

const (
	phaseBucket = iota
	phaseRecord
	// phaseLookup: one LOOKUP of the key's hash in its bucket
	// (IndexLayout), asking for the bucket when no slot has the hash: the
	// slot and its record at once, or the bucket.
	phaseLookup
)

// maxRetries bounds the READs one GET does again on one replica after
// reading a slot or record in the middle of a change; then it moves on to
// the next replica.
const maxRetries = 32

// maxRounds is how many times a GET tries each replica before it fails
// with ErrUnavailable.
const maxRounds = 2

// stuckDown is how many GETs a hedge must answer while their READ to a
// replica still waits, with no OK READ from that replica in between,
// before the replica is avoided as a failed one is: a dead engine is
// avoided after a few hedges rather than after TIMEOUT, and a replica
// that is merely slow now and then keeps answering in between.
const stuckDown = 3

type getOp struct {
	state   uint8
	sync    bool // Get: not reported through PollGets
	hedged  bool
	nreps   uint8
	tried   uint8 // bit k: reps[k] was tried in this round
	rounds  uint8 // rounds over the replicas done
	live    uint8 // attempts working for it
	retries uint16
	moves   uint8 // replicas it left after a failure
	served  int16 // the server that answered (-1: none)
	klen    uint8
	reps    [MaxReplicas]uint8
	atts    [2]int32
	h       uint64
	tag     uint64
	dst     []byte
	val     []byte
	err     error
	key     [MaxKeyBytes]byte
}

type attempt struct {
	gen     uint32
	get     int32 // its GET; -1: none (free or orphaned)
	probe   bool
	hedge   bool
	pending bool // has READs to post when a slot frees
	queued  bool // in Client.waiting
	phase   uint8
	ops     int32 // READs posted and not completed
	next    uint32
	status  portal.Status // the first failure of the phase (OK: none)
	rep     *replica
	v       *view
	hedgeNs int64 // when to hedge (0: never)
	slot    Slot  // phaseRecord: the pointer being followed
	// phaseLookup: the LOOKUP's status and answer length (a miss, a
	// record too large and a refusal are answers, not failures).
	lkSt  portal.Status
	lkLen uint32
}

func cookie(ai int32, gen uint32) uint64 { return uint64(ai)<<32 | uint64(gen) }

// StartGet starts reading key; the value is appended to dst[:0] and handed
// to PollGets' or WaitGets' fn with tag. The key is copied; dst belongs to
// the GET until it is reported. It fails with ErrBusy when MaxInFlight
// GETs are outstanding. Nothing is allocated.
func (c *Client) StartGet(key, dst []byte, tag uint64) error {
	_, err := c.start(key, dst, tag, false)
	return err
}

// Get reads key and returns its value appended to dst[:0], or
// ErrNotFound. Asynchronous GETs may be outstanding: those that finish
// meanwhile are reported by the next PollGets or WaitGets.
func (c *Client) Get(key, dst []byte) ([]byte, error) {
	gi, err := c.start(key, dst, 0, true)
	if err != nil {
		return nil, err
	}
	g := &c.gets[gi]
	for g.state != gDone {
		c.wait()
	}
	val, err := g.val, g.err
	c.reported = [2]int{int(g.served), int(g.moves)}
	c.freeGet(gi)
	return val, err
}

// Reported tells, inside PollGets' or WaitGets' fn (or after Get), which
// server answered the GET being reported (an index into
// ClientConfig.Servers; -1 when none did) and how many replicas the GET
// left after a failed READ before that one.
func (c *Client) Reported() (server, failovers int) { return c.reported[0], c.reported[1] }

// PollGets completes what the engine has finished, without blocking,
// and reports every finished GET to fn (which may start new ones). It
// returns how many it reported.
func (c *Client) PollGets(fn func(tag uint64, val []byte, err error)) int {
	c.pollOnce()
	return c.deliver(fn)
}

// WaitGets is PollGets that waits for at least one GET to finish when
// some are outstanding: it polls, spinning while a hedge may be due,
// else sleeping on the engine's completion doorbell. With nothing
// outstanding it returns 0 at once. The error is the portal's once its
// engine is gone.
func (c *Client) WaitGets(fn func(tag uint64, val []byte, err error)) (int, error) {
	for {
		if n := c.deliver(fn); n > 0 || c.active == 0 {
			return n, nil
		}
		if err := c.wait(); err != nil {
			return c.deliver(fn), err
		}
	}
}

// Outstanding is the number of GETs started and not yet reported.
func (c *Client) Outstanding() int { return c.active }

func (c *Client) deliver(fn func(tag uint64, val []byte, err error)) int {
	n := 0
	for len(c.done) > 0 {
		gi := popFront(&c.done)
		g := &c.gets[gi]
		tag, val, err := g.tag, g.val, g.err
		c.reported = [2]int{int(g.served), int(g.moves)}
		c.freeGet(gi)
		fn(tag, val, err)
		n++
	}
	return n
}

func (c *Client) start(key, dst []byte, tag uint64, sync bool) (int32, error) {
	switch {
	case c.closed:
		return -1, portal.ErrClosed
	case len(key) == 0 || len(key) > MaxKeyBytes:
		return -1, ErrKey
	case len(c.freeG) == 0 || len(c.freeA) == 0:
		return -1, ErrBusy
	}
	if err := c.p.Gone(); err != nil {
		return -1, err
	}
	gi := c.freeG[len(c.freeG)-1]
	c.freeG = c.freeG[:len(c.freeG)-1]
	g := &c.gets[gi]
	h := KeyHash(key)
	*g = getOp{state: gActive, sync: sync, klen: uint8(len(key)), h: h, tag: tag, dst: dst, atts: [2]int32{-1, -1}, served: -1}
	copy(g.key[:], key)
	g.nreps = uint8(c.ring.replicas(h, c.cfg.Replicas, &g.reps))
	c.active++
	c.running++
	c.st.Gets++
	now := c.now()
	if c.refreshed.Load() {
		c.refreshed.Store(false)
		c.takeViews(now)
	}
	if !c.launch(gi, now, false) {
		c.finish(gi, nil, ErrUnavailable, nil, now)
	}
	c.p.Flush()
	return gi, nil
}

func (c *Client) freeGet(gi int32) {
	g := &c.gets[gi]
	g.state, g.dst, g.val, g.err = gFree, nil, nil, nil
	c.freeG = append(c.freeG, gi)
	c.active--
}

// choose picks the replica (index into g.reps) to try next: the first
// untried one that is up, else the untried one avoided the shortest,
// else -1.
func (c *Client) choose(g *getOp) int {
	best := -1
	for k := range int(g.nreps) {
		r := c.reps[g.reps[k]]
		if g.tried&(1<<k) != 0 || r.cur == nil {
			continue
		}
		if r.up {
			return k
		}
		if best < 0 || r.downUntil < c.reps[g.reps[best]].downUntil {
			best = k
		}
	}
	return best
}

// launch starts an attempt of GET gi on the next replica; false when no
// replica is left or no attempt is free.
func (c *Client) launch(gi int32, now int64, hedge bool) bool {
	g := &c.gets[gi]
	k := c.choose(g)
	if k < 0 && !hedge && g.rounds+1 < maxRounds {
		// Every replica failed once: go round again (a TIMEOUT on an
		// overloaded host, a K_d fetched since), then give up.
		g.rounds++
		g.tried = 0
		k = c.choose(g)
	}
	if k < 0 || len(c.freeA) == 0 || hedge && !c.spare() {
		return false
	}
	ai := c.allocAttempt(c.reps[g.reps[k]])
	a := &c.atts[ai]
	a.get, a.hedge = gi, hedge
	a.phase = c.firstPhase(a)
	g.tried |= 1 << k
	g.live++
	if g.atts[0] < 0 {
		g.atts[0] = ai
	} else {
		g.atts[1] = ai
	}
	if c.cfg.Hedge && !hedge && !g.hedged {
		a.hedgeNs = now + max(int64(c.cfg.HedgeMin), a.rep.p99)
		if c.hedgeAt == 0 || a.hedgeNs < c.hedgeAt {
			c.hedgeAt = a.hedgeNs
		}
	}
	c.postPending(ai)
	return true
}

// spare reports whether an attempt may go to a hedge or a probe: the
// pool keeps one free for each GET not running now (finished GETs not
// yet reported included: once reported, their place may start a GET),
// since a hedge's loser holds its attempt until its READ completes (up to
// TIMEOUT); so StartGet fails with ErrBusy only at MaxInFlight. A GET
// that finishes frees at least one attempt as it stops running.
func (c *Client) spare() bool { return len(c.freeA) > c.cfg.MaxInFlight-c.running }

func (c *Client) allocAttempt(r *replica) int32 {
	ai := c.freeA[len(c.freeA)-1]
	c.freeA = c.freeA[:len(c.freeA)-1]
	a := &c.atts[ai]
	*a = attempt{gen: a.gen + 1, get: -1, queued: a.queued, rep: r, v: r.cur, pending: true}
	return ai
}

func (c *Client) freeAttempt(ai int32) {
	a := &c.atts[ai]
	a.get, a.pending, a.rep, a.v = -1, false, nil, nil
	c.freeA = append(c.freeA, ai)
}

// detach removes attempt ai from its GET's list.
func (g *getOp) detach(ai int32) {
	if g.atts[0] == ai {
		g.atts[0], g.atts[1] = g.atts[1], -1
	} else if g.atts[1] == ai {
		g.atts[1] = -1
	}
	g.live--
}

// postPending posts what attempt ai has left to post in its phase: the
// bucket READ, or the record's READs of up to 4 KB each. Without a free
// slot (or room in the command ring) it queues the attempt for resume.
func (c *Client) postPending(ai int32) {
	a := &c.atts[ai]
	v := a.v
	sink := uint64(ai) * c.area
	for a.pending {
		var (
			region uint32
			off    uint64
			key    *portal.Key
			dst    uint64
			n      uint32
			typ    = portal.OpRead
			tag    uint64
		)
		switch {
		case a.probe:
			region, off, key, dst, n = v.IndexRegion, 0, &v.idxKey, sink, SlotBytes
		case a.phase == phaseLookup:
			b := a.bucket(c)
			region, off, key, dst, n = v.IndexRegion, b*uint64(v.Ways)*SlotBytes, &v.lkKey, sink, portal.MaxOpBytes
			typ, tag = portal.OpLookup, c.gets[a.get].h
		case a.phase == phaseBucket:
			b := a.bucket(c)
			region, off, key, dst, n = v.IndexRegion, b*uint64(v.Ways)*SlotBytes, &v.idxKey, sink, v.Ways*SlotBytes
		default:
			n = min(portal.MaxOpBytes, a.slot.Len-a.next)
			region, off, key, dst = v.SlabRegion, a.slot.Off+uint64(a.next), &v.slabKey, sink+portal.MaxOpBytes+uint64(a.next)
		}
		s, ok := c.p.Slot()
		if !ok {
			c.enqueue(ai)
			return
		}
		err := c.p.Post(&portal.Op{
			Type: typ, Slot: s, Cookie: cookie(ai, a.gen),
			Remote: v.Owner, RemoteRegion: portal.RegionID(region), RemoteOffset: off, Key: *key,
			Local: c.sink, LocalOffset: dst, Length: n, Tag: tag, LookupBucket: typ == portal.OpLookup,
		})
		if err != nil {
			c.p.Release(s)
			if err == portal.ErrRingFull {
				c.p.Flush()
				c.enqueue(ai)
				return
			}
			// The portal is closed or its engine gone: nothing will be
			// posted again; fail the attempt as the engine would.
			a.pending = false
			if a.status == portal.StatusOK {
				a.status = portal.StatusEngineGone
			}
			if a.ops == 0 {
				c.settle(ai, c.now())
			}
			return
		}
		a.ops++
		if a.probe || a.phase == phaseBucket || a.phase == phaseLookup {
			a.pending = false
		} else if a.next += n; a.next == a.slot.Len {
			a.pending = false
		}
	}
}

// firstPhase is how an attempt starts reading: a LOOKUP when its view's
// index takes them, the local engine has not refused one, and the key's
// value may be in a record; else the bucket's READ. A key whose every
// value this client reads (MaxValue) fits in its slot is held inline:
// its LOOKUP would only bring back the bucket (its slot has no tag to
// match), a bucket READ's answer at the cost of a scan.
func (c *Client) firstPhase(a *attempt) uint8 {
	if a.v.lookup && !c.noLookup && !a.probe && int(c.gets[a.get].klen)+c.cfg.MaxValue > MaxInline {
		return phaseLookup
	}
	return phaseBucket
}

// bucket is the key's bucket on the attempt's replica.
func (a *attempt) bucket(c *Client) uint64 {
	return c.gets[a.get].h & (a.v.Buckets - 1)
}

func (c *Client) enqueue(ai int32) {
	if a := &c.atts[ai]; !a.queued {
		a.queued = true
		c.waiting = append(c.waiting, ai)
	}
}

// resume posts for queued attempts while slots last.
func (c *Client) resume() {
	for len(c.waiting) > 0 && c.p.FreeSlots() > 0 {
		ai := c.waiting[0]
		copy(c.waiting, c.waiting[1:])
		c.waiting = c.waiting[:len(c.waiting)-1]
		a := &c.atts[ai]
		a.queued = false
		if a.pending {
			c.postPending(ai)
		}
	}
}

// pollOnce takes the completions the engine has written, then runs the
// timers (views, probes, hints, hedges) and publishes what was posted.
func (c *Client) pollOnce() (int, error) {
	n, err := c.p.Poll(c.cpl[:])
	c.process(n, err)
	return n, err
}

func (c *Client) process(n int, err error) {
	now := c.now()
	for i := range n {
		c.complete(&c.cpl[i], now)
	}
	if err != nil { // the engine gone, the portal closed or its rings corrupt: nothing more will complete
		c.abandon(err, now)
	}
	c.resume()
	c.tick(now)
	c.p.Flush()
}

// abandon finishes every GET still outstanding with err: the portal can
// deliver no more completions (its engine is gone, or it was closed).
func (c *Client) abandon(err error, now int64) {
	for gi := range c.gets {
		if c.gets[gi].state == gActive {
			c.finish(int32(gi), nil, err, nil, now)
		}
	}
}

// wait makes progress once: a poll, and when it found nothing, a sleep
// until the engine completes an op (portal.Wait: a spin, then the
// completion doorbell) or, when a hedge is pending, until it is due.
// The sleep's resolution is the doorbell's, a millisecond: a hedge due
// while the client sleeps is sent up to that late (one due while
// completions arrive is sent on time).
func (c *Client) wait() error {
	n, err := c.pollOnce()
	if n > 0 || err != nil || len(c.done) > 0 {
		return err
	}
	var ctx context.Context = context.Background()
	if c.hedgeAt != 0 {
		c.due.at = c.t0.Add(time.Duration(c.hedgeAt))
		ctx = &c.due
	}
	n, err = c.p.Wait(ctx, c.cpl[:])
	if err == context.DeadlineExceeded {
		err = nil
	}
	c.process(n, err)
	return err
}

// dueCtx is a context that ends at a time and can be set again: Wait's
// deadline without allocating a context per wait. It has no Done channel
// (portal.Wait reads only Err and Deadline).
type dueCtx struct{ at time.Time }

func (d *dueCtx) Deadline() (time.Time, bool) { return d.at, true }
func (d *dueCtx) Done() <-chan struct{}       { return nil }
func (d *dueCtx) Value(any) any               { return nil }
func (d *dueCtx) Err() error {
	if time.Now().Before(d.at) {
		return nil
	}
	return context.DeadlineExceeded
}

// complete takes one completion.
func (c *Client) complete(cp *portal.Completion, now int64) {
	c.p.Release(cp.Slot)
	ai := int32(cp.Cookie >> 32)
	if ai < 0 || int(ai) >= len(c.atts) || c.atts[ai].gen != uint32(cp.Cookie) || c.atts[ai].ops == 0 {
		panic("kv: a completion names no READ in flight")
	}
	a := &c.atts[ai]
	a.ops--
	r := a.rep
	r.st.Reads++
	st := cp.Status
	if a.phase == phaseLookup {
		a.lkSt, a.lkLen = st, cp.Length
		if lookupAnswered(st) { // settleLookup goes on from it
			st = portal.StatusOK
		}
	}
	if st == portal.StatusOK {
		r.stuck = 0
		if a.phase == phaseBucket || a.phase == phaseLookup {
			r.noteLatency(cp.TotalDelayNs, &c.scratch)
		}
	} else {
		r.st.Failed++
		if a.status == portal.StatusOK {
			a.status = st
		}
		a.pending = false // post nothing more for a failed phase
	}
	if a.ops == 0 && !a.pending {
		c.settle(ai, now)
	}
}
