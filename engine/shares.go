package engine

import (
	"fmt"
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// The solicitation window shared by tenants (issue 28; docs/tenants.md).
//
// Every tenant present on the core (it has a portal open here) has a
// guaranteed share of the window, g_t = W × w_t / Σ w over the present
// tenants (W: Config.WindowBytes; w: PortalSpec.Weight), but never less
// than ArbitrationBytes (room for one op of any size) nor more than W.
// The sum of the weights changes only when a tenant comes or goes
// (OpenPortal, ClosePortal), and the shares are computed then.
//
// Queued ops wait in a FIFO per tenant and class (the slots' link[byTenant];
// each queued op is also on its class's FIFO of every tenant's ops, in
// the order they were queued, for DISPATCH_TIMEOUT). Each class keeps a
// ring of the tenants that have ops of that class queued. A grant, when
// the window has ArbitrationBytes free, goes in two phases:
//
//  1. To a tenant whose queue head fits in its share (the window its ops
//     in service hold plus the op's debit at most g_t). The classes apply
//     among them as everywhere (classArbiter: high first, one low after
//     HighBurst high grants while a low one waits); among the tenants of
//     one class, deficit round robin by weight in bytes: a tenant's
//     deficit grows by w_t × ArbitrationBytes each time its turn comes
//     round and every grant takes the op's debit off it.
//  2. When no tenant can have a grant within its share: borrowing. A
//     tenant may go beyond g_t (work-conserving: the shares of tenants
//     with nothing queued, or with less than their share in use, go to
//     the others) only with an op to a responsive destination, one that
//     answered an op of this core within Config.Responsive (destTable).
//     The same classes and rounds apply.
//
// So ops to a destination that stops answering hold at most their
// tenant's share, and window that others borrowed comes back to a tenant
// below its share within about a round trip: the next op to complete
// frees it, and phase 1 goes first. A tenant's queue is a FIFO: an op at
// its head to an unresponsive destination keeps the tenant's ops behind
// it from borrowing too (they still get the share).
//
// With a single tenant, g_t is W and phase 1 grants exactly what the
// window allows, in FIFO order by class: the window as before tenants.
// So while at most one tenant is present the tenants' FIFOs and rings are
// not kept at all (initiator.multi false): a grant takes the head of its
// class's FIFO. When a second tenant comes, its FIFOs are built from the
// class FIFOs, which hold every queued op in the order it was queued;
// when it leaves again they are dropped.
//
// Cost per grant: one walk of each class's ring, visiting each tenant at
// most twice (a tenant whose deficit falls short is topped up and moved
// to the back, so it qualifies the next time it is seen); a walk stops
// at the first tenant that qualifies. O(1) with one tenant, and bounded
// by the tenants with ops queued.

// noTenant ends a ring of tenants.
const noTenant = -1

// tenantQ is one tenant's part of the initiator. What a grant reads and
// writes comes first (one cache line); then what shortFirst keeps while
// the core bounds bulk work; the rest changes with portals.
type tenantQ struct {
	q       [abi.NumClass]slotList // its queued ops by class, FIFO (slot.link[byTenant])
	deficit [abi.NumClass]int32    // deficit round robin: bytes it may be granted in its turn
	held    int32                  // window bytes its ops in service hold (orphans excluded)
	share   int32                  // g_t (0: not present)
	quantum int32                  // weight × ArbitrationBytes
	// blockedNs is the latest time a grant passed it over for its share:
	// window was free, its queue head did not fit in its share and could
	// not borrow. An op queued before then waited for its tenant's share
	// (TenantCounters.ShareWaits).
	blockedNs int64
	sq        [abi.NumClass]slotList // its short ops queued behind a bulk op, by class, FIFO (slot.link[byShort])
	bulk      [abi.NumClass]int32    // its bulk ops queued, by class
	run       [abi.NumClass]int32    // short ops granted from behind the bulk op at its queue's head since that queue's latest bulk grant
	// prev and next link it in the ring of its class while it has ops of
	// that class queued (noTenant ends the ring).
	prev, next [abi.NumClass]int32
	weight     int // PortalSpec.Weight of its latest portal
	portals    int // its portals open on the core (op sources included)
}

// tenantRing is the ring of the tenants with ops of one class queued.
type tenantRing struct {
	head, tail int32
	n          int
}

func newTenantQs(n int) []tenantQ {
	tq := make([]tenantQ, n)
	for t := range tq {
		q := &tq[t]
		for cl := range q.q {
			q.q[cl] = slotList{head: -1, tail: -1}
			q.sq[cl] = slotList{head: -1, tail: -1}
			q.prev[cl], q.next[cl] = noTenant, noTenant
		}
		q.blockedNs = math.MinInt64
	}
	return tq
}

// ---- control plane -------------------------------------------------------

// join counts a portal of tenant t, of weight w (1..MaxWeight), opened
// on the core.
func (n *initiator) join(t, w int) {
	q := &n.tq[t]
	q.portals++
	if q.portals == 1 {
		n.sumWeight += w
		n.present++
	} else {
		n.sumWeight += w - q.weight
	}
	q.weight, q.quantum = w, int32(w*ArbitrationBytes)
	n.reshare()
	if n.present > 1 && !n.multi {
		n.buildTenantQueues()
	}
}

// leave counts a portal of tenant t closed.
func (n *initiator) leave(t int) {
	q := &n.tq[t]
	if q.portals <= 0 {
		panic("engine: a tenant left that was not present")
	}
	q.portals--
	if q.portals == 0 {
		n.sumWeight -= q.weight
		n.present--
		q.share = 0
	}
	n.reshare()
	if n.present <= 1 && n.multi {
		n.dropTenantQueues()
	}
}

// buildTenantQueues puts every queued op on its tenant's FIFO of its
// class, in the class FIFOs' order (the order they were queued), as a
// second tenant comes.
func (n *initiator) buildTenantQueues() {
	n.multi = true
	for _, l := range [...]listID{listFIFOHigh, listFIFOLow} {
		for i := n.lists[l].head; i >= 0; i = n.slots[i].link[byList].next {
			n.tpush(i)
		}
	}
}

// dropTenantQueues empties the tenants' FIFOs and rings, as all tenants
// but one have gone: the class FIFOs hold every queued op still.
func (n *initiator) dropTenantQueues() {
	n.multi = false
	for _, l := range [...]listID{listFIFOHigh, listFIFOLow} {
		for i := n.lists[l].head; i >= 0; i = n.slots[i].link[byList].next {
			n.slots[i].link[byTenant] = slotLink{-1, -1}
		}
	}
	for t := range n.tq {
		q := &n.tq[t]
		for cl := range q.q {
			q.q[cl] = slotList{head: -1, tail: -1}
			q.prev[cl], q.next[cl] = noTenant, noTenant
			q.deficit[cl] = 0
		}
	}
	for cl := range n.rings {
		n.rings[cl] = tenantRing{head: noTenant, tail: noTenant}
	}
}

// reshare computes every present tenant's guaranteed share.
func (n *initiator) reshare() {
	W := n.win.size
	for t := range n.tq {
		q := &n.tq[t]
		if q.portals > 0 {
			q.share = int32(min(W, max(ArbitrationBytes, int(int64(W)*int64(q.weight)/int64(n.sumWeight)))))
		}
	}
}

// ---- queues --------------------------------------------------------------

// debitOf is what op s debits from the window in service: a READ or a
// LOOKUP its size (a LOOKUP's answer is at most that), a WRITE or REKEY the 64 bytes of its pull and acknowledgment
// (slot.debit from the post on).
func debitOf(s *slot) uint32 {
	if s.op == abi.OpRead || s.op == abi.OpLookup { // solicits its answer, of at most its length
		return s.length
	}
	return wire.ChunkAlign
}

// tpush appends queued slot i to its tenant's FIFO of its class, and the
// tenant to the class's ring when the FIFO was empty.
func (n *initiator) tpush(i int32) {
	s := &n.slots[i]
	t, cl := int32(s.tenant), s.class
	L := &n.tq[t].q[cl]
	if L.tail < 0 {
		n.ringPush(cl, t)
	}
	n.linkBack(L, i, byTenant)
}

// spush appends queued short op i, queued behind a bulk op of its tenant
// and class, to its tenant's list of such short ops of its class
// (shortFirst). A short op queued while none is waits for no bulk op of
// its queue: those come after it.
func (n *initiator) spush(i int32) {
	s := &n.slots[i]
	s.short = true
	n.linkBack(&n.tq[s.tenant].sq[s.class], i, byShort)
}

// sunlink takes queued short op i off its tenant's list of short ops.
func (n *initiator) sunlink(i int32) {
	s := &n.slots[i]
	s.short = false
	n.linkOut(&n.tq[s.tenant].sq[s.class], i, byShort)
}

// shortBurst is how many grants in a row shortFirst gives short ops
// from behind a bulk op of their tenant and class before that bulk op's
// turn comes.
const shortBurst = 8

// shortFirst is the op that enters service in place of i, the head of
// tenant t's queued ops of class cl: i itself, or, while the core bounds
// bulk work (Config.PollBytes) and i is bulk, the oldest short op of t
// and cl queued behind it, shortBurst times in a row at most. A short op
// then waits for the bulk ops ahead of it in its own application's or
// tenant's queue no more than it waits for another tenant's.
func (n *initiator) shortFirst(i, t int32, cl abi.Class) int32 {
	if s := &n.slots[i]; prio(s.class, s.length) { // a short op at the head goes in its turn
		return i
	}
	q := &n.tq[t]
	if q.sq[cl].n == 0 || q.run[cl] >= shortBurst {
		q.run[cl] = 0
		return i
	}
	q.run[cl]++
	return q.sq[cl].head
}

// auditShort checks the tenants' lists of short ops (shortFirst): with
// the bound set, only queued short ops on them, each on its tenant's list
// of its class, in the order they were queued, and each tenant's count
// of its queued bulk ops; without it, no lists and no counts.
func (n *initiator) auditShort() error {
	want := 0
	bulk := make([][abi.NumClass]int32, len(n.tq))
	for i := range n.slots {
		s := &n.slots[i]
		queued := s.state == slotQueued && (s.list == listFIFOLow || s.list == listFIFOHigh)
		if s.short && (!n.shortq || !queued || !prio(s.class, s.length)) {
			return fmt.Errorf("audit: slot %d (state %d, class %d, %d bytes) on a short list", i, s.state, s.class, s.length)
		}
		if s.short {
			want++
		}
		if n.shortq && queued && !prio(s.class, s.length) {
			bulk[s.tenant][s.class]++
		}
	}
	var all [abi.NumClass]int32
	for t := range n.tq {
		if n.tq[t].bulk != bulk[t] {
			return fmt.Errorf("audit: tenant %d has %v bulk ops queued by class, its count says %v", t, bulk[t], n.tq[t].bulk)
		}
		for cl := range all {
			all[cl] += bulk[t][cl]
		}
	}
	if all != n.bulkQueued {
		return fmt.Errorf("audit: %v bulk ops queued by class, the count says %v", all, n.bulkQueued)
	}
	got := 0
	for t := range n.tq {
		for cl := range n.tq[t].sq {
			L := &n.tq[t].sq[cl]
			k, prev, last := 0, int32(-1), int64(math.MinInt64)
			for i := L.head; i >= 0; i = n.slots[i].link[byShort].next {
				s := &n.slots[i]
				if !s.short || int(s.tenant) != t || int(s.class) != cl || s.link[byShort].prev != prev || s.queuedNs < last || k > len(n.slots) {
					return fmt.Errorf("audit: tenant %d's short list of class %d broken at slot %d", t, cl, i)
				}
				prev, last = i, s.queuedNs
				k++
			}
			if k != L.n || L.tail != prev {
				return fmt.Errorf("audit: tenant %d's short list of class %d counts %d, holds %d", t, cl, L.n, k)
			}
			got += k
		}
	}
	if got != want {
		return fmt.Errorf("audit: %d short ops queued, %d on the lists", want, got)
	}
	return nil
}

// tunlink takes queued slot i off its tenant's FIFO, and the tenant off
// its class's ring when the FIFO is left empty.
func (n *initiator) tunlink(i int32) {
	s := &n.slots[i]
	t, cl := int32(s.tenant), s.class
	q := &n.tq[t]
	n.linkOut(&q.q[cl], i, byTenant)
	if q.q[cl].n == 0 {
		n.ringUnlink(cl, t)
		q.deficit[cl] = 0
	}
}

func (n *initiator) ringPush(cl abi.Class, t int32) {
	r := &n.rings[cl]
	q := &n.tq[t]
	q.prev[cl], q.next[cl] = r.tail, noTenant
	if r.tail >= 0 {
		n.tq[r.tail].next[cl] = t
	} else {
		r.head = t
	}
	r.tail = t
	r.n++
}

func (n *initiator) ringUnlink(cl abi.Class, t int32) {
	r := &n.rings[cl]
	q := &n.tq[t]
	if q.prev[cl] >= 0 {
		n.tq[q.prev[cl]].next[cl] = q.next[cl]
	} else {
		r.head = q.next[cl]
	}
	if q.next[cl] >= 0 {
		n.tq[q.next[cl]].prev[cl] = q.prev[cl]
	} else {
		r.tail = q.prev[cl]
	}
	q.prev[cl], q.next[cl] = noTenant, noTenant
	r.n--
}

// ---- arbitration ---------------------------------------------------------

// responsive reports whether ip answered an op of this core within
// Config.Responsive of now.
func (n *initiator) responsive(ip uint32, now int64) bool {
	last, ok := n.dests.lastAnswer(ip)
	return ok && now-last < n.responsiveNs
}

// turn is the tenant of class cl whose queue head gets the next grant of
// that class in the phase (borrow: phase 2), or noTenant. It walks the
// class's ring from its head: a tenant that does not qualify in the phase
// is passed over where it stands; one that qualifies but whose deficit
// falls short of its head's debit is topped up by its quantum and moved
// to the back of the ring, and the walk goes on; the first that qualifies
// with deficit enough is the one. The quantum is at least any debit, so
// a tenant topped up qualifies when the walk comes round to it again. A
// tenant alone in the ring needs no turns: its deficit is left as it is
// (granted does not charge it either).
func (n *initiator) turn(cl abi.Class, now int64, borrow bool) int32 {
	r := &n.rings[cl]
	t := r.head
	for steps := 2 * r.n; t >= 0 && steps > 0; steps-- {
		q := &n.tq[t]
		s := &n.slots[q.q[cl].head]
		cost := int32(s.debit)
		next := q.next[cl]
		if !borrow && q.held+cost > q.share {
			t = next
			continue
		}
		if borrow && !n.responsive(s.remoteIP, now) {
			q.blockedNs = now
			t = next
			continue
		}
		if q.deficit[cl] >= cost || r.n == 1 {
			return t
		}
		q.deficit[cl] += q.quantum
		if next >= 0 {
			n.ringUnlink(cl, t)
			n.ringPush(cl, t)
			t = next
		}
	}
	return noTenant
}

// pick chooses the next op to enter service (its slot, its tenant, its
// class) and whether it borrows; ok false when no op may enter now. The
// class arbiter records the grant, as the window's FIFOs always did.
func (n *initiator) pick(now int64) (i, t int32, cl abi.Class, borrow, ok bool) {
	if !n.multi { // the class FIFOs' heads, both of the one tenant present
		hi, lo := n.lists[listFIFOHigh].head, n.lists[listFIFOLow].head
		if cl, ok = n.arb.next(hi >= 0, lo >= 0); !ok {
			return 0, 0, cl, false, false
		}
		i = lo
		if cl == abi.ClassHigh {
			i = hi
		}
		t = int32(n.slots[i].tenant)
		if n.shortq {
			i = n.shortFirst(i, t, cl)
		}
		return i, t, cl, false, true
	}
	hi, lo := n.turn(abi.ClassHigh, now, false), n.turn(abi.ClassLow, now, false)
	if hi < 0 && lo < 0 {
		hi, lo = n.turn(abi.ClassHigh, now, true), n.turn(abi.ClassLow, now, true)
		borrow = true
	}
	if cl, ok = n.arb.next(hi >= 0, lo >= 0); !ok {
		return 0, 0, cl, false, false
	}
	t = lo
	if cl == abi.ClassHigh {
		t = hi
	}
	i = n.tq[t].q[cl].head
	if n.shortq {
		i = n.shortFirst(i, t, cl)
	}
	return i, t, cl, borrow, true
}

// atShare reports whether tenant t's queued op i does not fit in the
// tenant's share (what its ops in service hold plus i's debit).
func (n *initiator) atShare(i int32) bool {
	s := &n.slots[i]
	q := &n.tq[s.tenant]
	return q.held+int32(s.debit) > q.share
}

// auditShares checks the tenants' books against the slots (see
// Core.Audit): every queued op on its tenant's FIFO of its class, in
// class-FIFO order; the rings hold exactly the tenants with ops queued;
// each tenant holds the debits of its ops in service (orphans are
// nobody's); the weights of the present tenants add up.
func (n *initiator) auditShares() error {
	held := make([]int, len(n.tq))
	for i := range n.slots {
		s := &n.slots[i]
		if s.state == slotInService && !s.orphan {
			held[s.tenant] += int(s.debit)
		}
	}
	queued, sumW, present := 0, 0, 0
	var inRing [abi.NumClass]int
	for t := range n.tq {
		q := &n.tq[t]
		if int(q.held) != held[t] {
			return fmt.Errorf("audit: tenant %d holds %d window bytes, its ops in service %d", t, q.held, held[t])
		}
		if q.portals > 0 {
			sumW += q.weight
			present++
		} else if q.share != 0 {
			return fmt.Errorf("audit: tenant %d has no portal but a share of %d", t, q.share)
		}
		for cl := range q.q {
			L := &q.q[cl]
			k, prev := 0, int32(-1)
			last := int64(math.MinInt64)
			for i := L.head; i >= 0; i = n.slots[i].link[byTenant].next {
				s := &n.slots[i]
				if s.state != slotQueued || int(s.tenant) != t || int(s.class) != cl || s.link[byTenant].prev != prev || s.queuedNs < last {
					return fmt.Errorf("audit: slot %d (state %d tenant %d class %d) in tenant %d's FIFO of class %d out of place", i, s.state, s.tenant, s.class, t, cl)
				}
				prev, last = i, s.queuedNs
				k++
			}
			if k != L.n || L.tail != prev {
				return fmt.Errorf("audit: tenant %d's FIFO of class %d counts %d, holds %d", t, cl, L.n, k)
			}
			if (k > 0) != (q.prev[cl] >= 0 || q.next[cl] >= 0 || n.rings[cl].head == int32(t)) {
				return fmt.Errorf("audit: tenant %d has %d ops of class %d queued, in its ring: %v", t, k, cl, k == 0)
			}
			if k > 0 {
				inRing[cl]++
			}
			queued += k
		}
	}
	if err := n.auditShort(); err != nil {
		return err
	}
	if sumW != n.sumWeight {
		return fmt.Errorf("audit: present tenants weigh %d, the books say %d", sumW, n.sumWeight)
	}
	classQueued := n.lists[listFIFOLow].n + n.lists[listFIFOHigh].n
	if n.multi != (present > 1) {
		return fmt.Errorf("audit: %d tenants present, tenants' FIFOs kept: %v", present, n.multi)
	}
	if !n.multi && queued != 0 {
		return fmt.Errorf("audit: one tenant present, %d ops on tenants' FIFOs", queued)
	}
	if !n.multi {
		queued = classQueued
	}
	if present != n.present {
		return fmt.Errorf("audit: %d tenants present, the books say %d", present, n.present)
	}
	if queued != n.queued || queued != classQueued {
		return fmt.Errorf("audit: %d ops queued by tenant, books %d, class FIFOs %d", queued, n.queued, classQueued)
	}
	for cl := range n.rings {
		r := &n.rings[cl]
		k, prev := 0, int32(noTenant)
		for t := r.head; t >= 0; t = n.tq[t].next[cl] {
			if n.tq[t].prev[cl] != prev || n.tq[t].q[cl].n == 0 || k > len(n.tq) {
				return fmt.Errorf("audit: ring of class %d broken at tenant %d", cl, t)
			}
			prev = t
			k++
		}
		if k != r.n || k != inRing[cl] || r.tail != prev {
			return fmt.Errorf("audit: ring of class %d holds %d tenants, counts %d, tenants with ops queued %d", cl, k, r.n, inRing[cl])
		}
	}
	return nil
}
