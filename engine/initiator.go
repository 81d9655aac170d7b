package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

type slotState uint8

const (
	slotFree      slotState = iota // in the core's free pool
	slotIdle                       // owned by a portal, no op
	slotQueued                     // op waiting in an arbiter FIFO for window
	slotResolving                  // op waiting for its next hop's MAC (ARP)
	slotInService                  // op granted window, request sent
)

// slot is one CST entry: one in-flight op (paper §4.3).
type slot struct {
	state  slotState
	list   listID
	class  abi.Class
	orphan bool // its portal closed while the op was in service
	op     abi.Op
	portal PortalID
	tenant uint16 // its portal's (PortalSpec.Tenant)
	// link threads the slot through up to three lists (lists.go):
	// link[byList] through the list it is on (its class's FIFO of all
	// tenants' ops, resolving, in service); link[byTenant], a queued op,
	// through its tenant's FIFO of its class (shares.go); link[byShort],
	// a queued short op, through its tenant's list of short ops of its
	// class while the core bounds bulk work (shortq, bulk.go), which
	// short says it is on.
	link     [numLinks]slotLink
	short    bool
	seq      uint32 // bumped per op: stale responses never match
	remoteIP uint32
	hop      uint32   // the next hop toward remoteIP (route.go): whose MAC ARP resolves
	mac      wire.MAC // the next hop's
	port     uint16   // the op's initiator port (sender.opPort): its frames leave from it, its answers come to it
	chunk    uint16   // most data per frame toward remoteIP (its route's MTU): a WRITE's chunk size
	remReg   uint32
	length   uint32
	debit    uint32 // window it solicits in service (debitOf, set at the post)
	remOff   uint64
	locReg   abi.RegionID
	locOff   uint64
	cookie   uint64
	postNs   int64 // seen by the engine: issue_delay and total_delay count from here
	queuedNs int64 // entered its arbiter FIFO: DISPATCH_TIMEOUT counts from here
	issueNs  int64
	deadline int64
	arrived  uint64 // one bit per 64-byte unit of the op
	want     uint64
	pending  uint64                // ReceiveBurst: units whose open is queued (all ones: an answer or pull)
	aead     *aesni.AEAD           // K_d of the command: seals the request, opens the answers
	ck       aesni.CacheKey        // what aead was looked up for: the next op on this slot may reuse it
	iv       [aesni.NonceSize]byte // the request's IV, curried into every answer
	newKey   aesni.Key             // REKEY: the new K_r, read from the local region at post
	// WRITE (paper §5.1): once the serving engine's pull (②) arrived, its
	// answers are curried with the pull's IV (the server's entropy), the
	// data goes to its core's port under its pull handle, and the deadline
	// is the server's timeout counted from the pull's arrival.
	pulled     bool
	pullPort   uint16
	pullHandle uint32
	pullIV     [aesni.NonceSize]byte
	sent       uint32 // data bytes sent so far
	dataBase   uint64 // first IV counter of the data chunks
	inSendq    bool   // on the send queue (see pushSend)
	// LOOKUP: the tag and FlagLookupBucket of the command; once its first
	// chunk authenticated, the answer's length, status (OK, or
	// REMOTE_NOT_FOUND: the bucket) and nonce base, which every other
	// chunk must share (chunks of two services of one request, when it
	// was duplicated, never mix).
	lkTag    uint64
	lkBucket bool
	lkTotal  uint32
	lkSt     abi.Status
	lkBase   uint64
}

// initiator is the side of a core that runs the applications' ops: the
// command slot table (CST) and its lists (the two class FIFOs of queued
// ops, in the order they were queued, and each tenant's FIFOs of its own;
// the ops waiting for ARP, the ops in service ordered by deadline), the
// arbiter that grants them window by tenant share and class (shares.go),
// their timers, the answers and READ chunks that complete them, and for
// WRITEs the pull they answer with their data (initiator_rx.go).
type initiator struct {
	slotBase        abi.SlotID
	dispatchTimeout int64
	timeout         int64
	resolveTimeout  int64
	arpRetry        int64

	slots    []slot
	free     []int32 // stack of free slot indices
	lists    [numLists]slotList
	inflight int // ops posted and not completed (orphans included)
	arb      classArbiter
	// The window's shares (shares.go): each tenant's queues and share,
	// the rings of tenants with ops queued by class, the sum of the
	// present tenants' weights, the ops queued; and when each destination
	// last answered (dests.go).
	tq        []tenantQ // by PortalSpec.Tenant
	rings     [abi.NumClass]tenantRing
	sumWeight int
	present   int  // tenants with a portal on the core
	multi     bool // more than one: the tenants' FIFOs and rings are kept
	queued    int
	// shortq: the core bounds bulk work (Config.PollBytes), and keeps
	// each tenant's short ops queued behind its bulk ops on lists of their
	// own (shortFirst); bulkQueued counts every tenant's queued bulk ops by
	// class.
	shortq       bool
	bulkQueued   [abi.NumClass]int32
	dests        *destTable
	responsiveNs int64
	// sendq holds the slots of WRITEs whose data could not all be sent
	// when their pull arrived (see pushSend).
	sendq       ring[int32]
	nextARPScan int64
	// keys caches prepared AEADs for the K_d of commands, apart from the
	// serving side's, so that a wrong key in a command can never stand in
	// for the serving side's derivation.
	keys    *aesni.Cache
	scratch []byte // MaxOpBytes: an orphan's data is authenticated here

	out     *sender
	win     *window
	bulk    *bulkBound
	regions *regionView
	portals *portalTable
	routes  *routeTable
	nbr     *nbrTable
	arp     *arp
	st      *Stats
	tst     []TenantCounters // by PortalSpec.Tenant
}

func newInitiator(cfg *Config, keys *aesni.Cache, parts *Core) *initiator {
	n := &initiator{
		slotBase:        cfg.SlotBase,
		dispatchTimeout: int64(cfg.DispatchTimeout),
		timeout:         int64(cfg.Timeout),
		resolveTimeout:  int64(cfg.ResolveTimeout),
		arpRetry:        int64(cfg.ARPRetry),
		slots:           make([]slot, cfg.Slots),
		free:            make([]int32, 0, cfg.Slots),
		arb:             classArbiter{burst: cfg.HighBurst},
		tq:              newTenantQs(cfg.Tenants),
		shortq:          cfg.PollBytes > 0,
		dests:           newDestTable(cfg.Destinations),
		responsiveNs:    int64(cfg.Responsive),
		sendq:           newRing[int32](cfg.Slots),
		keys:            keys,
		scratch:         make([]byte, abi.MaxOpBytes),
		out:             parts.out,
		win:             parts.win,
		bulk:            parts.bulk,
		regions:         parts.regions,
		portals:         parts.portals,
		routes:          parts.routes,
		nbr:             parts.nbr,
		arp:             parts.arp,
		st:              &parts.stats,
		tst:             parts.tstats,
	}
	if n.responsiveNs == 0 {
		n.responsiveNs = int64(cfg.Timeout) / 4
	}
	for i := range n.rings {
		n.rings[i] = tenantRing{head: noTenant, tail: noTenant}
	}
	for i := cfg.Slots - 1; i >= 0; i-- {
		n.slots[i].link = [numLinks]slotLink{{-1, -1}, {-1, -1}, {-1, -1}}
		n.free = append(n.free, int32(i))
	}
	for i := range n.lists {
		n.lists[i] = slotList{head: -1, tail: -1}
	}
	return n
}

func fifoOf(cl abi.Class) listID {
	if cl == abi.ClassHigh {
		return listFIFOHigh
	}
	return listFIFOLow
}

// ---- control plane -------------------------------------------------------

// alloc gives n more slots to portal id, all or nothing, within its cap.
func (n *initiator) alloc(id PortalID, p *portal, k int) ([]abi.SlotID, error) {
	if k < 1 || p.slots+k > p.maxSlots {
		return nil, fmt.Errorf("%w: holds %d, asks %d more, cap %d", ErrSlotCap, p.slots, k, p.maxSlots)
	}
	if k > len(n.free) {
		return nil, fmt.Errorf("%w: asks %d, %d free", ErrNoSlots, k, len(n.free))
	}
	out := make([]abi.SlotID, k)
	for j := range out {
		i := n.free[len(n.free)-1]
		n.free = n.free[:len(n.free)-1]
		s := &n.slots[i]
		s.state, s.portal, s.orphan = slotIdle, id, false
		out[j] = n.slotBase + abi.SlotID(i)
	}
	p.slots += k
	return out, nil
}

// reclaim takes back portal id's slots: idle ones are freed, queued ones
// dropped (no completion), ops in service orphaned (they free their slot
// and window when they finish).
func (n *initiator) reclaim(id PortalID) {
	for i := range n.slots {
		s := &n.slots[i]
		if s.portal != id || s.state == slotFree || s.orphan {
			continue
		}
		switch s.state {
		case slotIdle:
			n.freeSlot(int32(i))
		case slotQueued, slotResolving:
			resolving := s.state == slotResolving
			n.unlink(int32(i))
			n.inflight--
			n.unprio(s)
			n.st.Orphaned++
			n.freeSlot(int32(i))
			if resolving { // its next hop's entry, if no other op waits for it, and its tenant's charge go too
				n.forgetIfUnwanted(s.hop)
			}
		case slotInService:
			s.orphan = true
			n.tq[s.tenant].held -= int32(s.debit) // an orphan is no tenant's: its window is nobody's share
		}
	}
}

// unprio uncounts op s, which left flight, from the priority work
// (bulk.go).
func (n *initiator) unprio(s *slot) {
	if prio(s.class, s.length) {
		n.bulk.ini--
	}
}

func (n *initiator) freeSlot(i int32) {
	s := &n.slots[i]
	s.state, s.orphan, s.op = slotFree, false, 0
	n.free = append(n.free, i)
}

// ---- posting -------------------------------------------------------------

// post validates one command and queues its op. Every failure completes at
// once with a precise status and touches nothing.
func (n *initiator) post(now int64, id PortalID, p *portal, cmd *abi.Command, malformed bool) {
	idx := int64(cmd.Slot) - int64(n.slotBase)
	if idx < 0 || idx >= int64(len(n.slots)) || n.slots[idx].state != slotIdle ||
		n.slots[idx].portal != id || n.slots[idx].orphan {
		n.portals.fail(now, id, p, cmd, abi.StatusBadSlot)
		return
	}
	st := n.validate(id, cmd, malformed)
	if st != abi.StatusOK {
		n.portals.fail(now, id, p, cmd, st)
		return
	}
	s := &n.slots[idx]
	ck := aesni.CacheKey{Region: uint32(cmd.RemoteRegion), PID: p.pid, Op: uint8(cmd.Op)}
	binary.BigEndian.PutUint32(ck.Peer[:], cmd.RemoteAddr)
	a := s.aead // the slot's previous op, very often to the same region with the same key
	if a == nil || s.ck != ck || !a.Matches((*aesni.Key)(&cmd.Key)) {
		a = n.keys.Get(ck)
	}
	if a == nil || !a.Matches((*aesni.Key)(&cmd.Key)) {
		var err error
		if a, err = n.keys.Put(ck, aesni.Key(cmd.Key)); err != nil {
			n.portals.fail(now, id, p, cmd, abi.StatusBadCommand)
			return
		}
	}
	s.aead, s.ck = a, ck
	s.op, s.class, s.cookie, s.tenant = cmd.Op, p.class, cmd.Cookie, p.tenant
	s.remoteIP, s.remReg, s.remOff = cmd.RemoteAddr, uint32(cmd.RemoteRegion), cmd.RemoteOffset
	s.locReg, s.locOff, s.length = cmd.LocalRegion, cmd.LocalOffset, cmd.Length
	s.debit = debitOf(s)       // what it will solicit in service: its share is checked against it
	if cmd.Op == abi.OpRekey { // the key is taken now: the app may reuse its buffer at once
		r := n.regions.lookup(cmd.LocalRegion)
		s.newKey = aesni.Key(r.mem[cmd.LocalOffset : cmd.LocalOffset+aesni.KeySize])
	}
	s.seq++
	s.postNs, s.issueNs, s.deadline = now, 0, 0
	s.arrived = 0
	s.pulled, s.sent = false, 0
	s.want = unitMask(cmd.Length)
	s.lkTag, s.lkBucket, s.lkTotal, s.lkSt, s.lkBase = cmd.Tag, cmd.Flags&abi.FlagLookupBucket != 0, 0, 0, 0
	if cmd.Op == abi.OpLookup { // known from its first chunk (finishChunk)
		s.want = 0
	}
	p.pending++
	n.inflight++
	if prio(s.class, s.length) {
		n.bulk.ini++
		n.bulk.saw(now, s.class)
	}
	n.tst[p.tenant].Posted++
	if cmd.RemoteAddr == n.out.ip {
		s.hop, s.mac, s.chunk = n.out.ip, n.out.mac, uint16(n.out.maxPayload)
		n.enqueue(now, int32(idx))
		return
	}
	rt := n.routes.lookup(cmd.RemoteAddr)
	if rt == nil { // nowhere to send it: no ARP, no wait
		n.st.NoRoute++
		s.state = slotQueued // complete() expects an op state
		n.complete(now, int32(idx), abi.StatusUnreachable)
		return
	}
	s.hop, s.chunk = rt.nextHop(cmd.RemoteAddr), uint16(rt.maxPayload)
	e := n.nbr.lookup(s.hop, false)
	if e == nil { // a new neighbor: an on-link destination's entry is charged to the op's tenant
		charge := -1
		if s.hop == cmd.RemoteAddr {
			charge = int(p.tenant)
		}
		var over bool
		if e, over = n.nbr.add(s.hop, charge); e == nil {
			if over {
				n.st.NeighborRefused++
				n.tst[p.tenant].NeighborRefused++
			} else {
				n.st.NeighborTableFull++
			}
			s.state = slotQueued
			n.complete(now, int32(idx), abi.StatusUnreachable)
			return
		}
	}
	if !n.arp.usable(now, e) { // wait for the next hop's MAC
		s.state = slotResolving
		n.pushBack(listResolving, int32(idx))
		if n.arp.due(now, e) {
			n.arp.request(now, e, e.asked)
		}
		if n.lists[listResolving].n == 1 {
			n.nextARPScan = now + n.arpRetry
		}
		return
	}
	s.mac = e.mac
	n.enqueue(now, int32(idx))
}

// enqueue puts a resolved op at the tail of its class FIFO and of its
// tenant's FIFO of the class. Each is ordered by queuedNs, so
// DISPATCH_TIMEOUT is checked at the class FIFOs' heads only.
func (n *initiator) enqueue(now int64, i int32) {
	s := &n.slots[i]
	s.state = slotQueued
	s.queuedNs = now
	n.pushBack(fifoOf(s.class), i)
	n.queued++
	if n.multi {
		n.tpush(i)
	}
	if n.shortq {
		if !prio(s.class, s.length) {
			n.bulkQueued[s.class]++
			n.tq[s.tenant].bulk[s.class]++
		} else if n.bulkQueued[s.class] > 0 && n.tq[s.tenant].bulk[s.class] > 0 { // behind a bulk op of its queue
			n.spush(i)
		}
	}
}

func (n *initiator) validate(id PortalID, cmd *abi.Command, malformed bool) abi.Status {
	if malformed || (cmd.Op != abi.OpRead && cmd.Op != abi.OpWrite && cmd.Op != abi.OpRekey && cmd.Op != abi.OpLookup) {
		return abi.StatusBadCommand
	}
	if cmd.Length == 0 || (cmd.Op == abi.OpRekey && cmd.Length != aesni.KeySize) {
		return abi.StatusBadCommand
	}
	if cmd.Op == abi.OpLookup && cmd.RemoteOffset > math.MaxUint32 { // the command's layout has a u32 for it
		return abi.StatusBadCommand
	}
	if cmd.Length > abi.MaxOpBytes {
		return abi.StatusTooLarge
	}
	r := n.regions.lookup(cmd.LocalRegion)
	if r == nil || !n.regions.mine(r, id) {
		return abi.StatusLocalRegion
	}
	if cmd.LocalOffset > uint64(len(r.mem)) || uint64(len(r.mem))-cmd.LocalOffset < uint64(cmd.Length) {
		return abi.StatusLocalBounds
	}
	// A READ and a LOOKUP write their sink; a WRITE and a REKEY read
	// their source.
	sink := cmd.Op == abi.OpRead || cmd.Op == abi.OpLookup
	if (sink && r.perm&abi.PermLocalWrite == 0) || (!sink && r.perm&abi.PermLocalRead == 0) {
		return abi.StatusLocalPermission
	}
	a := cmd.RemoteAddr
	if a == 0 || a == math.MaxUint32 || a>>28 == 0xe { // unspecified, broadcast, multicast
		return abi.StatusUnreachable
	}
	return abi.StatusOK
}

// resolved moves every op whose next hop is ip into its arbiter FIFO.
func (n *initiator) resolved(now int64, ip uint32, mac wire.MAC) {
	for i := n.lists[listResolving].head; i >= 0; {
		s := &n.slots[i]
		next := s.link[byList].next
		if s.hop == ip {
			n.unlink(i)
			s.mac = mac
			n.enqueue(now, i)
		}
		i = next
	}
}

// forgetIfUnwanted drops an unresolved neighbor entry once no op waits
// for it.
func (n *initiator) forgetIfUnwanted(ip uint32) {
	for i := n.lists[listResolving].head; i >= 0; i = n.slots[i].link[byList].next {
		if n.slots[i].hop == ip {
			return
		}
	}
	n.nbr.forget(ip)
}

// ---- service -------------------------------------------------------------

// arbitrate grants window to queued ops (paper §4.3), by tenant share and
// class (shares.go): the high class first, the low class after HighBurst
// consecutive high grants; tenants below their share first, then
// borrowing, only toward destinations that answer.
func (n *initiator) arbitrate(now int64) int {
	k := 0
	for n.queued > 0 && n.win.room() {
		arb := n.arb
		i, t, cl, borrow, ok := n.pick(now)
		if !ok {
			return k
		}
		s := &n.slots[i]
		if (s.op == abi.OpRead || s.op == abi.OpLookup) && !n.bulk.take(now, bulkGrant, cl, s.length, false) { // the next Poll grants it
			n.arb = arb
			return k
		}
		b := n.out.buffer()
		if b == nil {
			return k
		}
		q := &n.tq[t]
		debit := int32(s.debit) // set at the post (debitOf)
		if n.rings[cl].n > 1 {  // turns are taken: the grant is charged to its tenant's
			q.deficit[cl] -= debit
		}
		if q.blockedNs >= s.queuedNs {
			n.tst[t].ShareWaits++
		}
		if borrow {
			ts := &n.tst[t]
			ts.Borrowed++
			ts.BorrowedBytes += uint64(debit)
		}
		n.unlink(i)
		s.state = slotInService
		q.held += debit
		n.win.debit(int(debit))
		s.issueNs = now
		if s.issueNs == 0 { // 0 means "never issued"
			s.issueNs = 1
		}
		s.deadline = now + n.timeout
		n.insertInService(i) // not always the tail: a pulled WRITE may have adopted a longer timeout
		n.st.EnteredSvc++
		if !n.sendRequest(b, i) { // no IV counter: the op cannot be sealed
			n.complete(now, i, abi.StatusAborted)
		}
		k++
	}
	return k
}

// sendRequest seals and sends the request of op i: the header (with a
// fresh IV: our address ‖ our counter) is authenticated under the
// command's K_d, and the IV is kept in the slot to curry the answers.
func (n *initiator) sendRequest(b []byte, i int32) bool {
	s := &n.slots[i]
	ctr, ok := n.out.counter()
	if !ok {
		return false
	}
	o := n.out
	aesni.PutNonce(s.iv[:], o.ipb, ctr)
	s.port = o.opPort(i, s.seq)
	f := &o.hdr
	f.DstMAC, f.SrcMAC = s.mac, o.mac
	f.SrcIP, f.DstIP = o.ip, s.remoteIP
	f.SrcPort, f.DstPort = s.port, o.udp
	f.DSCP = o.dscp[s.class]
	f.Type, f.Status, f.Flags, f.Aux = wire.TypeReadReq, 0, 0, 0
	if s.class == abi.ClassHigh { // the serving engine queues it ahead of low-class requests
		f.Flags = wire.FlagHigh
	}
	f.PID = n.portals.p[s.portal].pid
	f.Tag = uint64(n.slotBase+abi.SlotID(i))<<32 | uint64(s.seq)
	f.Region, f.Length, f.Offset = s.remReg, s.length, s.remOff
	f.IV = s.iv
	switch s.op { // a WRITE and a REKEY are requests to read: their data is pulled
	case abi.OpWrite:
		f.Type = wire.TypeWriteReq
	case abi.OpRekey:
		f.Type = wire.TypeRekeyReq
	case abi.OpLookup: // the tag where the offset goes, the bucket's offset in aux
		f.Type, f.Offset, f.Aux = wire.TypeLookupReq, s.lkTag, uint32(s.remOff)
		if s.lkBucket {
			f.Flags |= wire.FlagBucket
		}
	}
	fl := wire.Encode(b, f, 0)
	o.sealFor(b).sealRequest(s.aead, wire.Trailer(b, 0), wire.IV(b), wire.AAD(b))
	o.emit(b, fl)
	o.highOut = o.highOut || s.class == abi.ClassHigh
	return true
}

// complete finishes the op in slot i: refunds its window, takes it off its
// list, writes its completion (unless orphaned) and frees or idles the slot.
func (n *initiator) complete(now int64, i int32, st abi.Status) {
	s := &n.slots[i]
	if s.state == slotInService {
		n.win.refund(int(s.debit))
		if !s.orphan { // an orphan's debit left its tenant's books when it was orphaned
			n.tq[s.tenant].held -= int32(s.debit)
		}
	}
	n.unlink(i)
	n.inflight--
	n.unprio(s)
	if s.orphan { // no completion is written for it: counted apart
		n.st.Orphaned++
		n.freeSlot(i)
		return
	}
	n.portals.count(s.op, st)
	p := &n.portals.p[s.portal]
	p.pending--
	s.state = slotIdle
	var issue int64
	if s.issueNs != 0 {
		issue = s.issueNs - s.postNs
	}
	k := uint32(0)
	switch {
	case s.op == abi.OpLookup: // its answer's length, when it all arrived (OK, or the bucket)
		if s.want != 0 && s.arrived == s.want && (st == abi.StatusOK || st == abi.StatusRemoteNotFound) {
			k = s.lkTotal
		}
	case st == abi.StatusOK:
		k = s.length
	}
	n.portals.complete(now, s.portal, p, &abi.Completion{
		Cookie: s.cookie, Slot: n.slotBase + abi.SlotID(i), Status: st, Op: s.op,
		IssueDelayNs: clampNs(issue), TotalDelayNs: clampNs(now - s.postNs), Length: k,
	})
}

// ---- timers --------------------------------------------------------------

// expire fires TIMEOUT, DISPATCH_TIMEOUT and UNREACHABLE, and retries ARP.
func (n *initiator) expire(now int64) int {
	k := 0
	for i := n.lists[listInService].head; i >= 0 && n.slots[i].deadline <= now; i = n.lists[listInService].head {
		n.complete(now, i, abi.StatusTimeout)
		k++
	}
	for _, l := range [...]listID{listFIFOHigh, listFIFOLow} {
		for i := n.lists[l].head; i >= 0 && now-n.slots[i].queuedNs >= n.dispatchTimeout; i = n.lists[l].head {
			s := &n.slots[i]
			ts := &n.tst[s.tenant]
			if n.tq[s.tenant].blockedNs >= s.queuedNs {
				ts.ShareWaits++
			}
			if n.atShare(i) {
				ts.ShareDispatchTimeouts++
			}
			n.complete(now, i, abi.StatusDispatchTimeout)
			k++
		}
	}
	for i := n.lists[listResolving].head; i >= 0 && now-n.slots[i].postNs >= n.resolveTimeout; i = n.lists[listResolving].head {
		ip := n.slots[i].hop
		n.complete(now, i, abi.StatusUnreachable)
		n.forgetIfUnwanted(ip)
		k++
	}
	if n.lists[listResolving].n > 0 && now >= n.nextARPScan {
		n.nextARPScan = now + n.arpRetry
		for i := n.lists[listResolving].head; i >= 0; i = n.slots[i].link[byList].next {
			e := n.nbr.lookup(n.slots[i].hop, false)
			if e != nil && e.state == nbrIncomplete && n.arp.due(now, e) {
				n.arp.request(now, e, e.asked)
				k++
			}
		}
	}
	return k
}

// stalled moves the deadlines of this core's own ops by gap (see
// Core.Stalled).
func (n *initiator) stalled(gap int64) {
	for i := n.lists[listInService].head; i >= 0; i = n.slots[i].link[byList].next {
		n.slots[i].deadline += gap // every one: the list stays in deadline order
	}
	for _, l := range [...]listID{listFIFOHigh, listFIFOLow} {
		for i := n.lists[l].head; i >= 0; i = n.slots[i].link[byList].next {
			n.slots[i].queuedNs += gap
		}
	}
	for t := range n.tq {
		if n.tq[t].blockedNs != math.MinInt64 {
			n.tq[t].blockedNs += gap
		}
	}
	n.dests.stalled(gap)
}

// nextDeadline is the earliest timer of the initiator (math.MaxInt64:
// none).
func (n *initiator) nextDeadline() int64 {
	d := int64(math.MaxInt64)
	if i := n.lists[listInService].head; i >= 0 {
		d = min(d, n.slots[i].deadline)
	}
	for _, l := range [...]listID{listFIFOLow, listFIFOHigh} {
		if i := n.lists[l].head; i >= 0 {
			d = min(d, n.slots[i].queuedNs+n.dispatchTimeout)
		}
	}
	if i := n.lists[listResolving].head; i >= 0 {
		d = min(d, n.slots[i].postNs+n.resolveTimeout, n.nextARPScan)
	}
	return d
}

// shutdown completes every op ABORTED but a WRITE or REKEY whose data was
// all sent to another engine (see Core.Shutdown), and empties the send
// queue.
func (n *initiator) shutdown(now int64) {
	for l := listFIFOLow; l < numLists; l++ {
		for i := n.lists[l].head; i >= 0; {
			s := &n.slots[i]
			next := s.link[byList].next
			if !(l == listInService && s.op != abi.OpRead && s.pulled && s.sent == s.length && s.remoteIP != n.out.ip) {
				n.complete(now, i, abi.StatusAborted)
			}
			i = next
		}
	}
	for n.sendq.len() > 0 {
		n.slots[*n.sendq.front()].inSendq = false
		n.sendq.pop()
	}
}

// audit checks the slots against their lists and portals and returns the
// window the ops in service hold (see Core.Audit).
func (n *initiator) audit() (int, error) {
	debit, inflight, free, prios := 0, 0, 0, 0
	held := make([]int, len(n.portals.p))
	pend := make([]int, len(n.portals.p))
	var onList [numLists]int
	for i := range n.slots {
		s := &n.slots[i]
		want := listNone
		switch s.state {
		case slotFree:
			free++
		case slotQueued:
			want = fifoOf(s.class)
		case slotResolving:
			want = listResolving
		case slotInService:
			want = listInService
			debit += int(s.debit)
		}
		if s.list != want {
			return 0, fmt.Errorf("audit: slot %d state %d on list %d, want %d", i, s.state, s.list, want)
		}
		onList[s.list]++
		if s.state >= slotQueued {
			inflight++
			if prio(s.class, s.length) {
				prios++
			}
		}
		if s.state != slotFree && !s.orphan {
			if !n.portals.p[s.portal].used {
				return 0, fmt.Errorf("audit: slot %d owned by closed portal %d", i, s.portal)
			}
			held[s.portal]++
			if s.state >= slotQueued {
				pend[s.portal]++
			}
		}
		if s.orphan && s.state != slotInService {
			return 0, fmt.Errorf("audit: orphan slot %d in state %d", i, s.state)
		}
	}
	for l := listFIFOLow; l < numLists; l++ {
		if onList[l] != n.lists[l].n {
			return 0, fmt.Errorf("audit: list %d counts %d, slots say %d", l, n.lists[l].n, onList[l])
		}
	}
	if err := n.auditShares(); err != nil {
		return 0, err
	}
	if inflight != n.inflight {
		return 0, fmt.Errorf("audit: in flight %d, slots say %d", n.inflight, inflight)
	}
	if prios != n.bulk.ini {
		return 0, fmt.Errorf("audit: %d priority ops in flight, slots say %d", n.bulk.ini, prios)
	}
	if free != len(n.free) {
		return 0, fmt.Errorf("audit: free pool %d, free slots %d", len(n.free), free)
	}
	for i := range n.portals.p {
		p := &n.portals.p[i]
		if !p.used {
			continue
		}
		if p.slots != held[i] || p.pending != pend[i] {
			return 0, fmt.Errorf("audit: portal %d holds %d slots (table %d), owed %d completions (table %d)", i, p.slots, held[i], p.pending, pend[i])
		}
	}
	return debit, nil
}
