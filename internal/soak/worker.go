package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/onerma/onerma/portal"
)

// sizes are the raw ops' sizes.
var sizes = [...]uint32{64, 1024, 4096}

// What a raw op is for.
const (
	kindRead     = iota // READ of a block the owner wrote
	kindReadBack        // READ of a lane block, after a WRITE to it
	kindWrite           // WRITE of a lane block
	nKinds
)

var kindNames = [nKinds]string{"READ", "READ back", "WRITE"}

// opCounts are a worker's ops by kind and size: posted, completed (by
// status) and verified.
type opCounts struct {
	Posted    [nKinds][len(sizes)]uint64
	Done      [nKinds][len(sizes)][64]uint64
	Verified  [nKinds][len(sizes)]uint64
	Explained [nWindowKinds]uint64 // failures explained, by window kind
}

func (c *opCounts) add(o *opCounts) {
	for k := range nKinds {
		for s := range sizes {
			c.Posted[k][s] += o.Posted[k][s]
			c.Verified[k][s] += o.Verified[k][s]
			for st := range 64 {
				c.Done[k][s][st] += o.Done[k][s][st]
			}
		}
	}
	for k := range c.Explained {
		c.Explained[k] += o.Explained[k]
	}
}

// slotState is one slot of a raw worker: it cycles WRITE a size to its
// lane block of that size, READ it back, READ a block the owner wrote,
// then the next size, and tracks its lane blocks' generations.
type slotState struct {
	t, lane int // target engine, slot within the lane
	slot    portal.SlotID
	step    int // kindWrite, kindReadBack, kindRead: what it posts next
	size    int // index into sizes
	// Lane block z holds generation gen[z], or, after a WRITE that may
	// or may not have been committed (TIMEOUT, ENGINE_GONE), gen[z] or
	// alt[z].
	gen, alt [len(sizes)]uint64
	amb      [len(sizes)]bool
	static   int       // the owner's block of the kindRead in flight
	readyAt  time.Time // not before (a retry's backoff)
	// The op in flight.
	busy   bool
	cookie uint64
	posted time.Time
	keyAt  time.Time
}

// worker is the raw-op application on engine i: laneSlots slots toward
// each other engine, each with its own 4 KB of local memory (sink and
// source), driven by one goroutine that posts, waits on the completion
// doorbell and verifies every completion.
type worker struct {
	s     *soak
	i     int
	p     *portal.Portal
	local *portal.Region
	ring  *keyring
	sl    []slotState
	cpl   [64]portal.Completion
	seq   uint64
	rng   *rand.Rand

	inflight int
	// Pacing (token bucket): rate ops a second, at most a burst of one
	// op per slot.
	rate   float64
	tokens float64
	last   time.Time

	St         opCounts
	Reconnects int
}

func newWorker(s *soak, i int, rate float64) (*worker, error) {
	w := &worker{s: s, i: i, ring: newKeyring(s.creds, s.owners, roleData), rng: rand.New(rand.NewPCG(uint64(i), 7)), rate: rate}
	for t := range engines {
		if t == i {
			continue
		}
		for l := range laneSlots {
			w.sl = append(w.sl, slotState{t: t, lane: l, step: kindWrite, size: l % len(sizes)})
		}
	}
	p, err := portal.DialOptions(s.bed.socket(i), fmt.Sprintf("soak-raw%d", i+1), portal.Options{WaitSpins: -1})
	if err != nil {
		return nil, err
	}
	if err := w.attach(p); err != nil {
		p.Close()
		return nil, err
	}
	return w, nil
}

// attach takes slots and local memory on a new portal.
func (w *worker) attach(p *portal.Portal) error {
	slots, err := p.AllocSlots(len(w.sl))
	if err != nil {
		return err
	}
	local, err := p.RegisterRegion(uint64(len(w.sl))*blockBytes, portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		return err
	}
	w.p, w.local = p, local
	for k := range w.sl {
		w.sl[k].slot = slots[k]
	}
	return nil
}

// run drives the worker until the soak stops and every lane block
// written has been read back, or ctx (the hard deadline) ends.
func (w *worker) run(ctx context.Context) error {
	defer w.ring.close()
	w.last = time.Now()
	for {
		now := time.Now()
		stopping := w.s.stopping.Load()
		pending := false
		nap := 20 * time.Millisecond // the longest wait for a completion between two looks
		if w.rate > 0 {
			w.tokens = min(float64(len(w.sl)), w.tokens+w.rate*now.Sub(w.last).Seconds())
			w.last = now
			if w.tokens < 1 {
				nap = min(nap, max(time.Millisecond, time.Duration((1-w.tokens)/w.rate*float64(time.Second))))
			}
		}
		for k := range w.sl {
			sl := &w.sl[k]
			if sl.busy || stopping && sl.step != kindReadBack {
				continue
			}
			pending = true
			if now.Before(sl.readyAt) || w.rate > 0 && w.tokens < 1 {
				continue
			}
			w.tokens--
			if err := w.post(k, now); err != nil {
				if errors.Is(err, portal.ErrEngineGone) {
					break
				}
				return err
			}
		}
		w.p.Flush()
		if !pending && w.inflight == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("raw worker on engine %d: %d ops in flight at the deadline: %w", w.i+1, w.inflight, err)
		}
		if w.inflight == 0 && w.p.Gone() == nil {
			time.Sleep(min(nap, 5*time.Millisecond)) // every slot waits for a retry or a token
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, nap)
		n, err := w.p.Wait(wctx, w.cpl[:])
		cancel()
		for _, c := range w.cpl[:n] {
			if err := w.complete(&c); err != nil {
				return err
			}
		}
		switch {
		case err == nil || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		case errors.Is(err, portal.ErrEngineGone):
			if err := w.reconnect(ctx); err != nil {
				return err
			}
		default:
			return fmt.Errorf("raw worker on engine %d: %w", w.i+1, err)
		}
	}
}

// post posts slot k's next op.
func (w *worker) post(k int, now time.Time) error {
	sl := &w.sl[k]
	ks, err := w.ring.get(sl.t, w.p.Identity())
	if ks == nil {
		if err != nil && w.ring.Failed%50 == 1 {
			w.s.logf("engine %d: %v (retrying)", w.i+1, err)
		}
		sl.readyAt = now.Add(20 * time.Millisecond)
		return nil
	}
	size := sizes[sl.size]
	loff := uint64(k) * blockBytes
	buf := w.local.Bytes()[loff : loff+uint64(size)]
	w.seq++
	cookie := w.seq<<8 | uint64(k)
	z := sl.size
	lane := uint64(laneBlock(w.i, sl.lane, z)) * blockBytes
	switch sl.step {
	case kindWrite:
		fillBlock(buf, blockTag(sl.t, laneBlock(w.i, sl.lane, z)), max(sl.gen[z], sl.alt[z])+1)
		err = w.p.Post(&portal.Op{
			Type: portal.OpWrite, Slot: sl.slot, Cookie: cookie,
			Remote: ks.addr, RemoteRegion: ks.id, RemoteOffset: lane, Key: ks.write,
			Local: w.local, LocalOffset: loff, Length: size,
		})
	case kindReadBack:
		err = w.p.Post(&portal.Op{
			Type: portal.OpRead, Slot: sl.slot, Cookie: cookie,
			Remote: ks.addr, RemoteRegion: ks.id, RemoteOffset: lane, Key: ks.read,
			Local: w.local, LocalOffset: loff, Length: size,
		})
	case kindRead:
		sl.static = w.rng.IntN(staticBlocks)
		err = w.p.Post(&portal.Op{
			Type: portal.OpRead, Slot: sl.slot, Cookie: cookie,
			Remote: ks.addr, RemoteRegion: ks.id, RemoteOffset: uint64(sl.static) * blockBytes, Key: ks.read,
			Local: w.local, LocalOffset: loff, Length: size,
		})
	}
	if err != nil {
		return err
	}
	sl.busy, sl.cookie, sl.posted, sl.keyAt = true, cookie, now, ks.at
	w.inflight++
	w.St.Posted[sl.step][sl.size]++
	return nil
}

// complete checks completion c: exactly one per op posted, and every OK
// one verified; a failure must be explained by a fault window.
func (w *worker) complete(c *portal.Completion) error {
	k := int(c.Cookie & 0xff)
	if k >= len(w.sl) || !w.sl[k].busy || w.sl[k].cookie != c.Cookie || w.sl[k].slot != c.Slot {
		w.s.errs.add("engine %d: a completion for no op in flight: %+v", w.i+1, *c)
		return nil
	}
	sl := &w.sl[k]
	now := time.Now()
	sl.busy = false
	w.inflight--
	kind, si := sl.step, sl.size
	size := sizes[si]
	w.St.Done[kind][si][c.Status&63]++
	desc := func() string {
		return fmt.Sprintf("engine %d: %s of %d B to engine %d (lane slot %d)", w.i+1, kindNames[kind], size, sl.t+1, sl.lane)
	}
	if c.Status != portal.StatusOK {
		span := opSpan{initiator: w.i, target: sl.t, region: roleData, posted: sl.posted, done: now, keyAt: sl.keyAt}
		w.s.faults.judgeLater(span, c.Status, &w.St.Explained, func() string {
			return fmt.Sprintf("%s posted at %v: %v after %v, outside every fault window that could explain it",
				desc(), w.s.since(sl.posted), c.Status, now.Sub(sl.posted).Round(time.Millisecond))
		}, &w.s.errs)
		switch c.Status {
		case portal.StatusRemoteAuthFailure:
			w.ring.stale(sl.t, sl.keyAt)
		case portal.StatusTimeout, portal.StatusEngineGone:
			if kind == kindWrite { // may have been committed
				sl.alt[si], sl.amb[si] = max(sl.gen[si], sl.alt[si])+1, true
			}
		}
		if kind == kindWrite {
			sl.step = kindReadBack
		}
		sl.readyAt = now.Add(10 * time.Millisecond)
		return nil
	}
	loff := uint64(k) * blockBytes
	buf := w.local.Bytes()[loff : loff+uint64(size)]
	block := laneBlock(w.i, sl.lane, si)
	switch kind {
	case kindWrite:
		sl.step = kindReadBack
		if err := w.s.owners[sl.t].holds(roleData, uint64(block)*blockBytes, buf); err != nil {
			w.s.errs.add("%s completed OK: %v", desc(), err)
			sl.amb[si], sl.alt[si] = true, max(sl.gen[si], sl.alt[si])+1 // what it holds is unknown
			return nil
		}
		sl.gen[si], sl.amb[si] = max(sl.gen[si], sl.alt[si])+1, false
	case kindReadBack:
		gens := []uint64{sl.gen[si]}
		if sl.amb[si] {
			gens = append(gens, sl.alt[si])
		}
		g, err := checkBlock(buf, blockTag(sl.t, block), gens...)
		if err != nil {
			// Counted once; the slot writes the block again.
			w.s.errs.add("%s completed OK with the wrong bytes: %v", desc(), err)
			sl.step = kindWrite
			return nil
		}
		sl.gen[si], sl.amb[si] = g, false
		sl.step = kindRead
	case kindRead:
		sl.step = kindWrite
		sl.size = (sl.size + 1) % len(sizes)
		if _, err := checkBlock(buf, blockTag(sl.t, sl.static), 0); err != nil {
			w.s.errs.add("%s of the owner's block %d completed OK with the wrong bytes: %v", desc(), sl.static, err)
			return nil
		}
	}
	w.St.Verified[kind][si]++
	w.s.verified.Add(1)
	return nil
}

// reconnect follows engine i to its next incarnation: every op in flight
// has completed (ENGINE_GONE for what the engine never answered), so the
// old portal is closed and a new one dialled as soon as the engine
// answers; its slots and memory are taken anew and every K_d fetched
// again (the identity may have changed). Posting resumes once a WRITE the
// dead engine had sent can no longer be committed (the serving engine's
// TIMEOUT after its pull).
func (w *worker) reconnect(ctx context.Context) error {
	if w.inflight != 0 {
		w.s.errs.add("engine %d: its portal reported the engine gone with %d raw ops still owed a completion", w.i+1, w.inflight)
	}
	var g *portal.EngineGoneError
	errors.As(w.p.Gone(), &g)
	np, err := w.p.Redial(ctx)
	if err != nil {
		return fmt.Errorf("raw worker on engine %d: %w", w.i+1, err)
	}
	w.p.Close()
	if err := w.attach(np); err != nil {
		np.Close()
		return fmt.Errorf("raw worker on engine %d: after redial: %w", w.i+1, err)
	}
	for k := range w.sl {
		w.sl[k].busy = false
	}
	w.inflight = 0
	w.ring.forget()
	w.Reconnects++
	if g != nil {
		time.Sleep(time.Until(g.At.Add(2 * engineTimeout)))
	}
	w.s.reconnected(w.i)
	return nil
}
