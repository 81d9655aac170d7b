package engine

import (
	"fmt"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// The serving side's queues, served by region owner (issue 28;
// docs/tenants.md).
//
// A request waits in the inbound queue of its class, and a WRITE or
// REKEY then in the pull queue of its class, for a pull context. Were
// each queue one FIFO, the requests of one region owner (inbound.owner:
// the tenant of the region a request names) would be served only after
// every request queued before them, whatever owner's: an owner flooding
// its own regions (its bounds allow it half the NACK threshold) would
// make every other owner's readers wait behind its whole backlog. So each
// queue (fairQueue) is a FIFO per owner and a ring of the owners with
// requests queued, and the owners take turns by deficit round robin in
// bytes, weighted by the owner's weight (the PortalSpec.Weight of its
// latest portal on the engine: tenantGens.weightOf):
//
//   - A request costs its length rounded up to wire.ChunkAlign (a READ
//     the data it streams, a WRITE or REKEY the data its pull brings;
//     64 bytes at least): an owner of 4 KB reads gets the bytes an owner
//     of 64 B reads gets, not 64 times as many.
//   - The owner at the head of the ring is served while its deficit
//     covers its next request's cost; when it does not, the owner's
//     deficit grows by its quantum (weight × ArbitrationBytes, at least
//     any request's cost) and it moves to the back of the ring.
//   - An owner with nothing queued in the queue whose request arrives
//     joins the ring at its front, behind the other owners that joined so
//     and were not served yet, with one quantum of deficit: a request of
//     an owner whose queue was empty is served before the backlogged
//     owners' next turns (the sparse flows of FQ-CoDel, RFC 8290 §4.1).
//     Its owner gains at most one quantum by it each time its queue
//     empties, so a backlogged owner still gets its weight's share.
//   - An owner's deficit is forgotten when its queue empties. While one
//     owner alone has requests queued, it is served FIFO with no turns
//     and no deficit kept: the single-tenant path as before owners. When
//     another joins, the one that was alone begins a turn (a quantum).
//
// The classes keep their meaning (classArbiter, LowAfterHigh): a queue is
// one class's. A READ partly streamed (out of tx buffers) stays at the
// head of its owner's FIFO and resumes before any other request of its
// class (responder.resume). The pull queues' owners take turns the same
// way, among the requests that their owner's and sender's bounds of pulls
// allow (responder.pullReady).
//
// Storage: the requests queued in all four queues are entries of one
// fixed pool (inboundPool), linked through inbound.next; a WRITE moves
// from the inbound queue to the pull queue by relinking. The pool holds
// what the queues can: NackThreshold requests in each class's inbound
// queue (the NACK threshold counts every owner's) and InboundQueue in
// each class's pull queue. An owner's FIFO is in arrival order, so its
// head is its oldest request: DISPATCH of expired requests and the
// serving side's deadlines look at the owners' heads only. (While the
// core bounds bulk work, an inbound queue's short requests go ahead of
// their owner's bulk ones, placeShort: there the head may be younger,
// and the short requests ahead are served in the next Poll.)

// noEntry ends a list of pool entries.
const noEntry = -1

// inboundPool is the entries of a core's queued requests, each queued
// in one fairQueue or free (on a LIFO list through inbound.next).
type inboundPool struct {
	e     []inbound
	free  int32 // the first free entry (noEntry: none)
	nfree int
}

func newInboundPool(n int) inboundPool {
	p := inboundPool{e: make([]inbound, n)}
	p.reset()
	return p
}

// reset frees every entry.
func (p *inboundPool) reset() {
	p.free, p.nfree = noEntry, len(p.e)
	for i := len(p.e) - 1; i >= 0; i-- {
		p.e[i].next = p.free
		p.free = int32(i)
	}
}

// get takes a free entry. The queues' bounds leave one free for every
// request they admit: none free is a bug.
func (p *inboundPool) get() int32 {
	i := p.free
	if i == noEntry {
		panic("engine: inbound pool exhausted")
	}
	p.free = p.e[i].next
	p.nfree--
	return i
}

// put frees entry i (out of every queue).
func (p *inboundPool) put(i int32) {
	p.e[i].next = p.free
	p.free = i
	p.nfree++
}

// costOf is what serving request e takes from its owner's deficit: its
// length rounded up to wire.ChunkAlign, from 64 bytes to MaxOpBytes (a
// longer one is refused REMOTE_BOUNDS when served).
func costOf(e *inbound) int32 {
	n := min(max(e.length, 1), abi.MaxOpBytes)
	return int32((n + wire.ChunkAlign - 1) &^ (wire.ChunkAlign - 1))
}

// ownerFIFO is one owner's part of a fairQueue.
type ownerFIFO struct {
	head, tail int32 // its requests, oldest first (noEntry: none)
	n          int32
	deficit    int32 // bytes it may be served in its turn
	prev, next int32 // in the ring while it has requests queued (noTenant ends it)
	// skipTo (pull queues) is its last request found blocked by a bound of
	// pulls, when the queue's memo epoch was skipAt: those up to it wait
	// (responder.ownerReady); noEntry: none known.
	skipTo int32
	skipAt uint64
	// With shortFirst (inbound queues while the core bounds bulk work):
	// lead is, while bulk requests are queued, the last short request
	// ahead of them, after which the next goes (noEntry: at the head, or
	// after a READ partly streamed there); bulk counts its bulk requests
	// queued, and run the short ones placed ahead since one of them was
	// served.
	lead int32
	bulk int32
	run  int32
}

// fairQueue is one class's queue of requests (inbound or pull): a FIFO
// per owner, linked through the pool's entries, and the ring of owners
// with requests queued.
type fairQueue struct {
	n          int   // requests queued, every owner's
	head, tail int32 // the ring (noTenant: empty)
	owners     int   // owners in the ring
	// fresh is the last owner of the ring's front part, the owners that
	// joined with their queue empty and have not moved to the back since
	// (noTenant: none).
	fresh int32
	o     []ownerFIFO // by owner tenant
	w     *tenantGens // the owners' weights
	// shortFirst: a short request (priority work, bulk.go's prio) queued
	// behind bulk requests of its owner goes ahead of them (placeShort).
	shortFirst bool
}

func newFairQueue(owners int, w *tenantGens) fairQueue {
	q := fairQueue{o: make([]ownerFIFO, owners), w: w}
	q.reset()
	return q
}

// reset empties the queue (its entries are the pool's to free).
func (q *fairQueue) reset() {
	q.n, q.head, q.tail, q.owners, q.fresh = 0, noTenant, noTenant, 0, noTenant
	for t := range q.o {
		q.o[t] = ownerFIFO{head: noEntry, tail: noEntry, prev: noTenant, next: noTenant, skipTo: noEntry, lead: noEntry}
	}
}

// len is the number of requests queued.
func (q *fairQueue) len() int { return q.n }

// quantum is what owner t's deficit grows by in a turn.
func (q *fairQueue) quantum(t int32) int32 { return q.w.weightOf(t) * ArbitrationBytes }

// push appends entry i of e to the FIFO of its owner t (e[i].owner,
// passed apart: the entry may have just been written whole).
func (q *fairQueue) push(e []inbound, i int32, t uint16) {
	o := &q.o[t]
	e[i].next = noEntry
	if q.shortFirst {
		if !prio(e[i].class, e[i].length) {
			if o.bulk == 0 { // every request queued is short: the next short one goes after them
				o.lead = o.tail
			}
			o.bulk++
		} else if o.bulk > 0 && q.placeShort(e, i, o) {
			return
		}
	}
	if o.tail < 0 {
		q.first(i, int32(t))
		return
	}
	e[o.tail].next = i
	o.tail = i
	o.n++
	q.n++
}

// placeShort is push's shortFirst for short request i, with bulk
// requests of its owner queued: it places i ahead of them, behind the
// short ones placed so before it and behind a READ partly streamed at
// the head, shortBurst times in a row at most before one of the bulk
// requests is served, and reports whether it did (if not, push appends
// it). A short request then waits at a serving core for its owner's bulk
// requests ahead of it no more than for another owner's, whose turns let
// it pass, and a READ of 64 bytes beside a transfer of its own region is
// served in the Poll that receives it, not behind the transfer's chunks
// queued there. An owner's FIFO is then in arrival order in its bulk
// requests only (a short one may pass short ones appended behind bulk
// requests when the run was over): its head may be younger than requests
// behind it, which a Poll reaches soon (the short ones ahead are served
// in the Poll after they arrive), and an expired one is still dropped as
// it comes to the head. A short WRITE or REKEY keeps its place: the pull
// queue it moves to is in arrival order.
func (q *fairQueue) placeShort(e []inbound, i int32, o *ownerFIFO) bool {
	if op := e[i].op; op == abi.OpWrite || op == abi.OpRekey || o.run >= shortBurst {
		return false
	}
	o.run++
	after := o.lead
	if after < 0 && e[o.head].sent > 0 { // a READ partly streamed goes on first (responder.resume)
		after = o.head
	}
	if after < 0 {
		e[i].next = o.head
		o.head = i
	} else {
		e[i].next = e[after].next
		e[after].next = i
		if o.tail == after {
			o.tail = i
		}
	}
	o.lead = i
	o.n++
	q.n++
	return true
}

// served updates owner o's shortFirst books for its request h, after
// prev in its FIFO (noEntry: h is its head), taken out of the queue.
func (o *ownerFIFO) served(e []inbound, h, prev int32) {
	if h == o.lead {
		o.lead = prev
	}
	if !prio(e[h].class, e[h].length) {
		o.bulk--
		o.run = 0
	}
}

// first puts entry i in owner t's FIFO, empty, and the owner in the
// ring.
func (q *fairQueue) first(i, t int32) {
	o := &q.o[t]
	o.head, o.tail, o.n = i, i, 1
	q.n++
	q.join(t)
}

// pop takes the head of owner t's FIFO out of the queue and returns it.
func (q *fairQueue) pop(e []inbound, t int32) int32 {
	o := &q.o[t]
	i := o.head
	if q.shortFirst {
		o.served(e, i, noEntry)
	}
	o.head = e[i].next
	o.n--
	q.n--
	if o.n == 0 {
		q.emptied(t)
	} else if o.skipTo == i {
		o.skipTo = noEntry
	}
	return i
}

// emptied takes owner t, its FIFO emptied, out of the ring.
func (q *fairQueue) emptied(t int32) {
	o := &q.o[t]
	o.head, o.tail = noEntry, noEntry
	q.unlink(t)
	o.deficit, o.skipTo = 0, noEntry
	o.lead, o.bulk, o.run = noEntry, 0, 0
}

// remove takes entry i, after prev in its owner t's FIFO (noEntry: i is
// its head), out of the queue.
func (q *fairQueue) remove(e []inbound, t, prev, i int32) {
	o := &q.o[t]
	next := e[i].next
	if prev >= 0 {
		e[prev].next = next
	} else {
		o.head = next
	}
	if next < 0 {
		o.tail = prev
	}
	if o.skipTo == i { // those before it were blocked, and are
		o.skipTo = prev
	}
	if q.shortFirst {
		o.served(e, i, prev)
	}
	o.n--
	q.n--
	if o.n == 0 {
		q.emptied(t)
	}
}

// join puts owner t, its FIFO no longer empty, in the ring: behind the
// owners that joined so before it and were not served since, with a
// quantum of deficit; alone, it needs none. An owner that was alone took
// no turns: its turn begins as t joins, with a quantum.
func (q *fairQueue) join(t int32) {
	o := &q.o[t]
	q.owners++
	if q.owners == 1 {
		o.prev, o.next = noTenant, noTenant
		q.head, q.tail = t, t
		return
	}
	if q.owners == 2 {
		q.o[q.head].deficit = q.quantum(q.head)
	}
	o.deficit = q.quantum(t)
	o.prev = q.fresh
	if q.fresh >= 0 {
		o.next = q.o[q.fresh].next
		q.o[q.fresh].next = t
	} else {
		o.next = q.head
		q.head = t
	}
	if o.next >= 0 {
		q.o[o.next].prev = t
	} else {
		q.tail = t
	}
	q.fresh = t
}

// unlink takes owner t out of the ring.
func (q *fairQueue) unlink(t int32) {
	o := &q.o[t]
	if q.fresh == t { // the front part is the ring's first owners: those before t stay in it
		q.fresh = o.prev
	}
	if o.prev >= 0 {
		q.o[o.prev].next = o.next
	} else {
		q.head = o.next
	}
	if o.next >= 0 {
		q.o[o.next].prev = o.prev
	} else {
		q.tail = o.prev
	}
	o.prev, o.next = noTenant, noTenant
	q.owners--
}

// toBack moves owner t to the back of the ring, its deficit topped up
// by its quantum: its turn is over.
func (q *fairQueue) toBack(t int32) {
	o := &q.o[t]
	o.deficit += q.quantum(t)
	q.unlink(t)
	q.owners++
	o.prev, o.next = q.tail, noTenant
	if q.tail >= 0 {
		q.o[q.tail].next = t
	} else {
		q.head = t
	}
	q.tail = t
}

// turn is the owner whose head is served next; the queue must not be
// empty. The ring's head is served while its deficit covers its head's
// cost; when it does not, it goes to the back with its quantum, which
// covers any request: the walk ends within one round.
func (q *fairQueue) turn(e []inbound) int32 {
	t := q.head
	if q.owners == 1 { // alone: no turns (serve asks only with others)
		return t
	}
	for {
		o := &q.o[t]
		if o.deficit >= costOf(&e[o.head]) {
			return t
		}
		q.toBack(t)
		t = q.head
	}
}

// charge takes cost off owner t's deficit for a request of its served.
// An owner alone is not charged (it takes no turns): callers charge only
// while q.owners > 1.
func (q *fairQueue) charge(t, cost int32) { q.o[t].deficit -= cost }

// audit checks the queue's books against its entries: each owner's FIFO
// whole, in arrival order, of its own requests; the ring holding exactly
// the owners with requests queued; the counts. seen marks the pool's
// entries queued (seen[i] == mark), so that no entry is in two places;
// it returns the entries it holds.
func (q *fairQueue) audit(name string, e []inbound, seen []uint32, mark uint32) (int, error) {
	total, inRing := 0, 0
	for t := range q.o {
		o := &q.o[t]
		k, prev, skip := int32(0), int32(noEntry), o.skipTo == noEntry
		last := int64(-1 << 63)
		bulk, ahead := int32(0), o.lead >= 0 // ahead: up to the lead, short requests (or a READ partly streamed at the head)
		for i := o.head; i >= 0; i = e[i].next {
			if seen[i] == mark {
				return 0, fmt.Errorf("audit: %s: entry %d queued twice (owner %d)", name, i, t)
			}
			seen[i] = mark
			short := q.shortFirst && prio(e[i].class, e[i].length) // shortFirst: the bulk requests in arrival order
			if int(e[i].owner) != t || (!short && e[i].arrival < last) {
				return 0, fmt.Errorf("audit: %s: entry %d (owner %d, arrival %d) out of place in owner %d's FIFO", name, i, e[i].owner, e[i].arrival, t)
			}
			if ahead && !short && !(i == o.head && e[i].sent > 0) {
				return 0, fmt.Errorf("audit: %s: bulk entry %d ahead of owner %d's lead %d", name, i, t, o.lead)
			}
			if !short {
				last = e[i].arrival
				bulk++
			}
			ahead = ahead && i != o.lead
			skip = skip || i == o.skipTo
			prev = i
			k++
		}
		if k != o.n || o.tail != prev || !skip || ahead {
			return 0, fmt.Errorf("audit: %s: owner %d's FIFO counts %d, holds %d (tail %d, last %d; skip %d in it: %v; lead %d)", name, t, o.n, k, o.tail, prev, o.skipTo, skip, o.lead)
		}
		if q.shortFirst && (bulk != o.bulk || o.run > shortBurst) {
			return 0, fmt.Errorf("audit: %s: owner %d queues %d bulk requests, counts %d (run %d)", name, t, bulk, o.bulk, o.run)
		}
		if !q.shortFirst && (o.lead != noEntry || o.bulk != 0 || o.run != 0) {
			return 0, fmt.Errorf("audit: %s: owner %d keeps shortFirst books (lead %d, bulk %d, run %d) without it", name, t, o.lead, o.bulk, o.run)
		}
		in := o.prev != noTenant || o.next != noTenant || q.head == int32(t)
		if (k > 0) != in || (k == 0 && o.deficit != 0) {
			return 0, fmt.Errorf("audit: %s: owner %d has %d requests queued, deficit %d, in the ring: %v", name, t, k, o.deficit, in)
		}
		if k > 0 {
			inRing++
		}
		total += int(k)
	}
	k, prev, fresh := 0, int32(noTenant), q.fresh < 0
	for t := q.head; t >= 0; t = q.o[t].next {
		if q.o[t].prev != prev || q.o[t].n == 0 || k > len(q.o) {
			return 0, fmt.Errorf("audit: %s: ring broken at owner %d", name, t)
		}
		fresh = fresh || t == q.fresh
		prev = t
		k++
	}
	if k != q.owners || k != inRing || q.tail != prev || !fresh || total != q.n {
		return 0, fmt.Errorf("audit: %s: ring holds %d owners (tail %d, fresh %d in it: %v), counts %d, owners with requests %d; %d requests, counts %d",
			name, k, q.tail, q.fresh, fresh, q.owners, inRing, total, q.n)
	}
	return total, nil
}
