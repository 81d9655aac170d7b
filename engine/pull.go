package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// WRITE is a request to read (paper §5.1, Figure 7), in four hops:
//
//	① initiator → server  TypeWriteReq   region, offset, length; GMAC under K_d(WRITE)
//	② server → initiator  TypePullReq    when the server's own window allows; carries the
//	                                     server's IV (its entropy), a pull handle and the
//	                                     server's timeout; sealed under K_d, curried with ①'s IV
//	③ initiator → server  TypeWriteData  the data, chunk by chunk, sealed straight from the
//	                                     source region under K_d, curried with ②'s IV
//	④ server → initiator  TypeAck        after commit; under K_d, curried with ②'s IV
//
// The data lands in a staging buffer of the pull context and is copied to
// the region only when every chunk has arrived and authenticated before
// the pull's deadline: a failed WRITE leaves the region untouched. The
// initiator, on ②, moves its own deadline to the server's timeout counted
// from ②'s arrival, which is later than the server's deadline counted
// from ②'s departure: the initiator always times out last, so no write
// reported failed can change remote memory afterwards. Replaying ① makes
// the server pull again, under a fresh IV, from an initiator that no
// longer has the op (its answer is stale and dropped): a new request that
// finds no context or window free reclaims such pulls, once no chunk has
// answered them for PullIdleTimeout (pullRoom); replayed data or
// acknowledgments are curried with an IV the server never reuses, so they
// fail authentication: replays mutate nothing.
//
// A remote REKEY (paper §5.2) takes the same four hops: its data is the new
// region key K_r (16 bytes, sealed under K_d(REKEY), so never in clear),
// and its commit installs that key instead of copying into the region; its
// acknowledgment is sealed under the old key's K_d. A REKEY reported failed
// therefore never takes effect afterwards.
//
// A REKEY installs only under the key its request authenticated with: the
// request records the region's key epoch (inbound.epoch, then
// pullCtx.epoch), and the commit installs the new K_r only while that
// epoch is still the region's (regionTable.setKey, a compare-and-swap
// against every core). A local Rekey by the owner, or another REKEY,
// publishes a new epoch and so cancels every REKEY asked under the key it
// replaced, queued or pulled, on any core: each is answered REMOTE_REGION
// (Stats.RekeysSuperseded), at ② when it was not pulled yet (curried with
// ①'s IV), else when its key arrives (curried with ②'s IV), and its key
// is never installed. A pulled one is answered then, not at the Rekey: an
// answer curried with ②'s IV authenticates only at an initiator that has
// ②, which its data proves and nothing before it does (② may still be on
// its way, or lost); an initiator whose data does not arrive times out.

// maxPullTimeout bounds the timeout a serving engine may ask an initiator
// to adopt (Config.Validate bounds Timeout by the same second).
const maxPullTimeout = int64(time.Second)

// pullCtx is one WRITE being served.
type pullCtx struct {
	used       bool
	op         abi.Op // OpWrite or OpRekey
	gen        uint16
	idle       bool  // on plist[pullsIdle]: no chunk has authenticated yet
	prev, next int32 // in its deadline-ordered list (plist)
	peer             // the initiator: ② and ④ go to the op's port, ③ comes from it
	region     abi.RegionID
	offset     uint64
	length     uint32
	arrived    uint64
	want       uint64
	pending    uint64 // ReceiveBurst: units whose open is queued
	deadline   int64  // ② + Timeout: abandoned, uncommitted, when it passes
	idleBy     int64  // ② + pullIdle: while idle, reclaimable from then on
	aead       *aesni.AEAD
	pullIV     [aesni.NonceSize]byte // ②'s IV: curried into ③ and ④
	owner      uint16                // its region's owner tenant (bounds.go)
	sender     int32                 // its initiator's entry in the senders table
	epoch      uint64                // a REKEY's: the key epoch it installs under (inbound.epoch)
}

// pullList is a doubly linked list of pull contexts (by index; -1 ends it).
type pullList struct{ head, tail int32 }

// The two pull lists (responder.plist).
const (
	pullsIdle = 0 // awaiting the first chunk (in ② order)
	pullsData = 1 // receiving data
)

type pullOutcome uint8

const (
	pullStarted  pullOutcome = iota // ② sent
	pullAnswered                    // refused with an error status (sent, or dropped without IV)
	pullWait                        // no window, context or tx buffer: try again later
)

func (r *responder) pullHandle(idx int32) uint32 { return uint32(r.pulls[idx].gen)<<16 | uint32(idx) }

func (r *responder) pullBuffer(idx int32) []byte {
	o := (int(idx) - 1) * abi.MaxOpBytes
	return r.pullBuf[o : o+abi.MaxOpBytes : o+abi.MaxOpBytes]
}

// startPull serves the WRITE request at the head of the inbound queue:
// checks it, then, once a pull context and ArbitrationBytes of this
// core's window are free, debits the window by the write's length and
// sends ②.
func (r *responder) startPull(now int64, e *inbound) pullOutcome {
	if st := r.checkRequest(e); st != abi.StatusOK {
		if !r.reply(&e.peer, wire.TypeError, st, e.aead, &e.iv) {
			return pullWait
		}
		r.st.ReqErrors++
		if e.op == abi.OpRekey && st == abi.StatusRemoteRegion && r.regions.lookup(abi.RegionID(e.region)) != nil {
			r.st.RekeysSuperseded++ // live, under another key than its request's (checkRequest)
		}
		return pullAnswered
	}
	if !r.pullRoom(now) {
		return pullWait
	}
	o := r.out
	b := o.buffer()
	if b == nil {
		return pullWait
	}
	ctr, ok := o.counter()
	if !ok {
		return pullAnswered // cannot be sealed: the initiator times out, nothing changes
	}
	idx := int32(r.freePull[len(r.freePull)-1])
	r.freePull = r.freePull[:len(r.freePull)-1]
	p := &r.pulls[idx]
	p.gen++
	*p = pullCtx{
		used: true, op: e.op, gen: p.gen, idle: true, prev: -1, next: -1, peer: e.peer,
		region: abi.RegionID(e.region), offset: e.offset, length: e.length,
		want: unitMask(e.length), deadline: now + r.timeout, idleBy: now + r.pullIdle, aead: e.aead,
		owner: e.owner, sender: e.sender, epoch: e.epoch,
	}
	r.bounds.pulled(e.owner, e.sender)
	aesni.PutNonce(p.pullIV[:], o.ipb, ctr)
	r.win.debit(int(e.length))
	r.pullInsert(pullsIdle, idx)

	f := &o.hdr
	f.DstMAC, f.SrcMAC = e.mac, o.mac
	f.SrcIP, f.DstIP = o.ip, e.ip
	f.SrcPort, f.DstPort = o.port, e.port // the data comes back to this core
	f.DSCP = o.dscp[e.class]
	f.Type, f.Status, f.Flags, f.Aux = wire.TypePullReq, 0, 0, 0
	f.PID, f.Tag, f.Region = e.pid, e.tag, r.pullHandle(idx)
	f.Length, f.Offset = e.length, uint64(r.timeout)
	f.IV = p.pullIV
	n := wire.Encode(b, f, 0)
	o.sealFor(b).sealResponse(e.aead, wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), e.iv[:])
	o.emit(b, n)
	return pullStarted
}

// prepWriteData prepares one chunk of a WRITE being served, to be opened
// into its staging buffer; when the last one has authenticated, before the
// pull's deadline, finishData commits the data to the region and
// acknowledges.
func (r *responder) prepWriteData(frame, payload []byte, w *rxWork) bool {
	f := &w.f
	idx := int32(f.Region & 0xffff)
	if idx == 0 || int(idx) >= len(r.pulls) {
		r.st.RxStale++
		return false
	}
	p := &r.pulls[idx]
	if !p.used || p.gen != uint16(f.Region>>16) || p.ip != f.SrcIP || p.port != f.SrcPort || p.tag != f.Tag || p.pid != f.PID {
		r.st.RxStale++ // an ended pull (late, duplicate or replayed data), or not its initiator
		return false
	}
	off, n := f.Offset, uint64(len(payload))
	bits, ok := chunkBits(off, n, p.length)
	if !ok {
		r.st.RxDropped++
		return false
	}
	if p.arrived&bits != 0 {
		r.st.RxDuplicate++
		return false
	}
	w.open, w.then, w.a = openDirect, thenData, p.aead
	w.idx, w.seq, w.bits = idx, uint32(p.gen), bits
	w.dst, w.in, w.curry = r.pullBuffer(idx)[off:off+n], wire.Sealed(frame, len(payload)), p.pullIV[:]
	return true
}

// rekeyData reports whether w is a remote REKEY's data: its commit
// changes the keys later frames are checked against, so ReceiveBurst
// opens and finishes it alone.
func (r *responder) rekeyData(w *rxWork) bool {
	return w.then == thenData && r.pulls[w.idx].op == abi.OpRekey
}

func (r *responder) finishData(now int64, w *rxWork, ok bool) {
	idx, bits := w.idx, w.bits
	p := &r.pulls[idx]
	if !p.used || uint32(p.gen) != w.seq { // ended by an earlier frame of the burst
		r.st.RxStale++
		return
	}
	if !ok {
		r.st.RxAuthFailed++
		return
	}
	buf := r.pullBuffer(idx)
	if now >= p.deadline {
		return // too late: expirePulls abandons it, uncommitted
	}
	p.arrived |= bits
	if p.arrived != p.want {
		if p.idle { // its initiator answers: no longer reclaimable
			r.pullUnlink(idx)
			p.idle = false
			r.pullInsert(pullsData, idx)
		}
		return // more to come
	}
	if r.out.buffer() == nil { // ④ must be sendable: commit only with a frame for it
		p.arrived &^= bits // its chunk is dropped as if lost; the write times out uncommitted
		return
	}
	rg := r.regions.lookup(p.region)
	st := abi.StatusOK
	switch {
	case rg == nil: // deregistered while the data was in flight
		st = abi.StatusRemoteRegion
	case p.op == abi.OpRekey:
		switch r.installKey(p.region, aesni.Key(buf[:aesni.KeySize]), p.epoch) {
		case keyInstalled:
			r.st.RemoteRekeys++
		case keySuperseded: // rekeyed since its request authenticated: its key never lands
			st = abi.StatusRemoteRegion
			r.st.RekeysSuperseded++
		default: // deregistered by its owner's core meanwhile
			st = abi.StatusRemoteRegion
		}
		clear(buf[:aesni.KeySize])
	case p.offset > uint64(len(rg.mem)) || uint64(len(rg.mem))-p.offset < uint64(p.length):
		st = abi.StatusRemoteBounds // cannot happen: regions never shrink; kept for safety
	default:
		copy(rg.mem[p.offset:p.offset+uint64(p.length)], buf[:p.length])
		r.st.WritesCommitted++
	}
	t := wire.TypeAck
	if st != abi.StatusOK {
		t = wire.TypeError
		r.st.ReqErrors++
	}
	r.reply(&p.peer, t, st, p.aead, &p.pullIV)
	r.endPull(idx)
}

// expirePulls abandons, uncommitted, pulls whose data did not all arrive
// within TIMEOUT of ②. Nothing is sent: the initiator times out later.
func (r *responder) expirePulls(now int64) int {
	n := 0
	for k := range r.plist {
		for h := r.plist[k].head; h >= 0 && r.pulls[h].deadline <= now; h = r.plist[k].head {
			r.endPull(h)
			r.st.PullsExpired++
			n++
		}
	}
	return n
}

// endPull frees pull context idx and refunds its window.
func (r *responder) endPull(idx int32) {
	p := &r.pulls[idx]
	r.win.refund(int(p.length))
	r.pullUnlink(idx)
	p.used, p.aead = false, nil
	r.freePull = append(r.freePull, uint16(idx))
	r.bounds.unpull(p.owner, p.sender)
	r.pullGen++ // write requests blocked by a bound may start now (pullReady)
}

// pullRoom reports whether a pull context and ArbitrationBytes of window
// are free for a new pull. When not, it first reclaims, uncommitted, the
// oldest pulls no chunk has answered within pullIdle of their ②: a write
// request replayed after its op ended is pulled from an initiator that no
// longer answers, and would otherwise hold a context and window until
// TIMEOUT while genuine requests wait. Without such pressure an idle
// pull keeps its whole TIMEOUT (an initiator may be descheduled for
// milliseconds on a shared CPU). Reclaiming early is safe: nothing is
// committed, and the initiator, whose deadline ② reset, times out after.
func (r *responder) pullRoom(now int64) bool {
	for {
		if len(r.freePull) > 0 && r.win.room() {
			return true
		}
		h := r.plist[pullsIdle].head
		if h < 0 || r.pulls[h].idleBy > now {
			return false
		}
		r.endPull(h)
		r.st.PullsExpired++
	}
}

// pullOn is the list pull idx is on.
func (r *responder) pullOn(idx int32) *pullList {
	if r.pulls[idx].idle {
		return &r.plist[pullsIdle]
	}
	return &r.plist[pullsData]
}

// pullUnlink takes pull idx off its list.
func (r *responder) pullUnlink(idx int32) {
	p, l := &r.pulls[idx], r.pullOn(idx)
	if p.prev >= 0 {
		r.pulls[p.prev].next = p.next
	} else {
		l.head = p.next
	}
	if p.next >= 0 {
		r.pulls[p.next].prev = p.prev
	} else {
		l.tail = p.prev
	}
	p.prev, p.next = -1, -1
}

// pullInsert puts pull idx on list k in deadline order, searching from
// the tail: a new pull's deadline is the latest (now + Timeout), and a
// pull moving to pullsData passes only the pulls started after it whose
// first chunk came first.
func (r *responder) pullInsert(k int, idx int32) {
	p, l := &r.pulls[idx], &r.plist[k]
	after := l.tail
	for after >= 0 && r.pulls[after].deadline > p.deadline {
		after = r.pulls[after].prev
	}
	p.prev = after
	if after >= 0 {
		p.next = r.pulls[after].next
		r.pulls[after].next = idx
	} else {
		p.next = l.head
		l.head = idx
	}
	if p.next >= 0 {
		r.pulls[p.next].prev = idx
	} else {
		l.tail = idx
	}
}

// auditPulls checks the pull contexts (free pool, list, deadlines) and
// returns the window they hold.
func (r *responder) auditPulls() (int, error) {
	used, debit, onList := 0, 0, 0
	for i := 1; i < len(r.pulls); i++ {
		if r.pulls[i].used {
			used++
			debit += int(r.pulls[i].length)
		}
	}
	for k, l := range r.plist {
		last := int64(math.MinInt64)
		prev := int32(-1)
		for i := l.head; i >= 0; i = r.pulls[i].next {
			p := &r.pulls[i]
			if !p.used || p.prev != prev || p.deadline < last || p.idle != (k == pullsIdle) || p.idleBy > p.deadline {
				return 0, fmt.Errorf("audit: pull list %d broken at %d", k, i)
			}
			last, prev = p.deadline, i
			if onList++; onList > len(r.pulls) {
				return 0, fmt.Errorf("audit: pull list loops")
			}
		}
		if prev != l.tail {
			return 0, fmt.Errorf("audit: pull list %d: tail %d, last %d", k, l.tail, prev)
		}
	}
	if onList != used || used+len(r.freePull) != len(r.pulls)-1 {
		return 0, fmt.Errorf("audit: pulls: %d used, %d listed, %d free of %d", used, onList, len(r.freePull), len(r.pulls)-1)
	}
	return debit, nil
}

// chunkBits checks that a chunk of n bytes at offset off can belong to an
// op of length bytes (aligned, inside, only the last one short) and
// returns the arrival-bitmap bits it covers (one per 64 bytes).
func chunkBits(off, n uint64, length uint32) (uint64, bool) {
	if off%wire.ChunkAlign != 0 || n == 0 || off >= uint64(length) || n > uint64(length)-off ||
		(off+n != uint64(length) && n%wire.ChunkAlign != 0) {
		return 0, false
	}
	first, last := off/wire.ChunkAlign, (off+n+wire.ChunkAlign-1)/wire.ChunkAlign
	if last-first == 64 {
		return math.MaxUint64, true
	}
	return (1<<(last-first) - 1) << first, true
}

// unitMask is the arrival bitmap of a complete op of length bytes.
func unitMask(length uint32) uint64 {
	units := (length + wire.ChunkAlign - 1) / wire.ChunkAlign
	if units == 64 {
		return math.MaxUint64
	}
	return 1<<units - 1
}
