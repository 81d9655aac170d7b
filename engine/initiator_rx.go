package engine

import (
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// The initiator's receive side: the answers to its ops (NACK, errors, a
// WRITE's acknowledgment), READ chunks, a WRITE's pull (②) and the data
// it sends in reply (③). Each prep method looks a frame up and fills its
// rxWork (dispatch.go), changing nothing but drop counters; each finish
// method applies the frame once it was opened.

// respSlot finds the op a response answers, or -1 (stale or foreign): its
// slot's op in service, from the op's peer, to the op's port.
func (n *initiator) respSlot(f *wire.Fields) int32 {
	idx := int64(f.Tag>>32) - int64(n.slotBase)
	if idx < 0 || idx >= int64(len(n.slots)) {
		return -1
	}
	s := &n.slots[idx]
	if s.state != slotInService || s.seq != uint32(f.Tag) || s.remoteIP != f.SrcIP || s.port != f.DstPort {
		return -1
	}
	return int32(idx)
}

// prepResponse prepares an answer to one of our ops: authenticated (by
// finish) against the op's K_d and its request's IV (curried). Answers
// that fail authentication are dropped and counted: the op still
// completes, by a genuine answer or by TIMEOUT.
func (n *initiator) prepResponse(frame []byte, plen int, w *rxWork) bool {
	f := &w.f
	i := n.respSlot(f)
	if i < 0 {
		n.st.RxStale++
		return false
	}
	s := &n.slots[i]
	if !answerFits(f.Type, s.op) {
		n.st.RxDropped++ // data for a WRITE, an Ack or a pull for a READ or LOOKUP, the other op's data
		return false
	}
	w.idx, w.seq, w.a = i, s.seq, s.aead
	// A WRITE's (or REKEY's) answers after its pull are curried with the
	// pull's IV: an answer to the request itself (NACK, error) no longer
	// authenticates once the serving side may commit.
	w.curry = s.iv[:]
	if s.pulled {
		w.curry = s.pullIV[:]
	}
	switch f.Type {
	case wire.TypePullReq:
		return n.prepPull(frame, w)
	case wire.TypeNack, wire.TypeError, wire.TypeAck:
		if f.Type == wire.TypeAck && !s.pulled {
			n.st.RxDropped++ // acknowledged only after the data was pulled
			return false
		}
		// After the pull the serving engine answers only with an Ack or
		// an error under K_d: it has authenticated the request and its
		// queue has taken it. A NACK or REMOTE_AUTHENTICATION_FAILURE
		// then is forged (the latter's reserved key is public, and the
		// pull's IV it would be curried with is in clear): accepting it
		// would report a failure for a write that may still commit.
		if s.pulled && (f.Type == wire.TypeNack || abi.Status(f.Status) == abi.StatusRemoteAuthFailure) {
			n.st.RxDropped++
			return false
		}
		st := abi.StatusNack
		if f.Type == wire.TypeAck {
			st = abi.StatusOK
		}
		if f.Type == wire.TypeError {
			st = abi.Status(f.Status)
			last := abi.StatusRemotePermission
			if s.op == abi.OpLookup {
				last = abi.StatusRemoteLookupTooLarge
			}
			if st != abi.StatusRemoteAuthFailure && (st < abi.StatusRemoteRegion || st > last) {
				n.st.RxDropped++
				return false
			}
		}
		w.open, w.then, w.st, w.in = openVerify, thenAnswer, st, wire.Trailer(frame, 0)
		if st == abi.StatusRemoteAuthFailure { // sealed with the reserved key
			w.open = openAuthFailure
		}
		return true
	}
	off, k := f.Offset, uint64(plen)
	var bits uint64
	ok := true
	if s.op == abi.OpLookup {
		bits, ok = n.lookupBits(f, off, k, s)
	} else {
		bits, ok = chunkBits(off, k, s.length)
	}
	if !ok {
		n.st.RxDropped++
		return false
	}
	if s.arrived&bits != 0 {
		n.st.RxDuplicate++
		return false
	}
	// Opened straight from the packet into the sink, in one pass fused
	// with the cipher. A forged chunk leaves zeros in a range that has not
	// arrived yet (its genuine chunk overwrites them); ranges that arrived
	// are never touched again (the bitmap check above), nor ranges whose
	// open is pending in a burst (ReceiveBurst).
	if s.orphan { // its data has nowhere to go, but it still finishes
		w.dst = n.scratch[:k]
	} else {
		r := n.regions.lookup(s.locReg)
		if r == nil { // the sink was deregistered: drop the data, the op times out
			n.st.RxStale++
			return false
		}
		w.dst = r.mem[s.locOff+off : s.locOff+off+k]
	}
	w.open, w.then, w.bits = openDirect, thenChunk, bits
	w.in, w.curry = wire.Sealed(frame, plen), s.iv[:]
	return true
}

// answerFits reports whether a message of type t may answer an op of
// type op: a NACK or an error any; data only the op whose data it is (a
// READ's, a LOOKUP's); an acknowledgment or a pull only a WRITE or REKEY.
func answerFits(t wire.Type, op abi.Op) bool {
	switch {
	case t == wire.TypeNack || t == wire.TypeError:
		return true
	case op == abi.OpRead:
		return t == wire.TypeReadResp
	case op == abi.OpLookup:
		return t == wire.TypeLookupResp
	}
	return t != wire.TypeReadResp && t != wire.TypeLookupResp
}

// slotStill reports whether w's op still holds its slot: always, unless
// an earlier frame of the same burst ended it (ReceiveBurst keeps such
// frames apart; this is the re-validation behind that rule).
func (n *initiator) slotStill(w *rxWork) bool {
	s := &n.slots[w.idx]
	if s.state != slotInService || s.seq != w.seq {
		n.st.RxStale++
		return false
	}
	return true
}

// finishAnswer completes op w.idx with a payload-free answer's status.
func (n *initiator) finishAnswer(now int64, w *rxWork, ok bool) {
	if !n.slotStill(w) {
		return
	}
	if !ok {
		n.st.RxAuthFailed++
		return
	}
	n.dests.answered(n.slots[w.idx].remoteIP, now)
	n.complete(now, w.idx, w.st)
}

// finishChunk records a READ's chunk, opened into its sink, and completes
// the op with its last one.
func (n *initiator) finishChunk(now int64, w *rxWork, ok bool) {
	if !n.slotStill(w) {
		return
	}
	if !ok {
		n.st.RxAuthFailed++
		return
	}
	s := &n.slots[w.idx]
	if s.op == abi.OpLookup && !n.lookupFirst(w, s) {
		return
	}
	n.dests.answered(s.remoteIP, now)
	s.arrived |= w.bits
	if s.arrived == s.want {
		st := abi.StatusOK
		if s.op == abi.OpLookup {
			st = s.lkSt
		}
		n.complete(now, w.idx, st)
	}
}

// lookupBits checks a chunk of LOOKUP s's answer (prepResponse): at a
// multiple of 64 inside an answer that fits the sink, with a status of
// an answer (OK, or REMOTE_NOT_FOUND with the bucket), and of the same
// answer as the chunks that arrived (length, status, nonce base). Its
// length need not be a multiple of 64 when it ends the answer's first
// part (the entry), which the initiator cannot tell apart: the bits are
// of the 64-byte units it touches, and the units it leaves short are the
// padding before the target.
func (n *initiator) lookupBits(f *wire.Fields, off, k uint64, s *slot) (uint64, bool) {
	total := f.Aux
	if st := abi.Status(f.Status); st != abi.StatusOK && st != abi.StatusRemoteNotFound {
		return 0, false
	}
	if total == 0 || total > s.length || off%wire.ChunkAlign != 0 || k == 0 || off >= uint64(total) || k > uint64(total)-off {
		return 0, false
	}
	if s.lkTotal != 0 && (total != s.lkTotal || abi.Status(f.Status) != s.lkSt || lookupBase(f) != s.lkBase) {
		return 0, false
	}
	first, last := off/wire.ChunkAlign, (off+k+wire.ChunkAlign-1)/wire.ChunkAlign
	if last-first == 64 {
		return math.MaxUint64, true
	}
	return (1<<(last-first) - 1) << first, true
}

// lookupBase is the nonce base of a lookup answer's chunk: its counter
// less its offset's units (aesni.PutResponseNonce).
func lookupBase(f *wire.Fields) uint64 {
	_, ctr := aesni.NonceCounter(f.IV[:])
	return ctr - f.Offset/wire.ChunkAlign
}

// lookupFirst takes the answer's length, status and nonce base from the
// first authenticated chunk of LOOKUP s, and checks the later ones
// against them (chunks prepared in one burst before the first finished);
// false drops the chunk.
func (n *initiator) lookupFirst(w *rxWork, s *slot) bool {
	f := &w.f
	if s.lkTotal == 0 {
		s.lkTotal, s.lkSt, s.lkBase = f.Aux, abi.Status(f.Status), lookupBase(f)
		s.want = unitMask(f.Aux)
		return true
	}
	if f.Aux != s.lkTotal || abi.Status(f.Status) != s.lkSt || lookupBase(f) != s.lkBase {
		n.st.RxDropped++
		return false
	}
	return true
}

// prepPull prepares ② for WRITE op w.idx: authenticated under the op's
// K_d with the write request's IV curried in, it is accepted once
// (finishPull); the op's deadline becomes the server's timeout from now,
// and the data is sent.
func (n *initiator) prepPull(frame []byte, w *rxWork) bool {
	f := &w.f
	s := &n.slots[w.idx]
	if s.pulled || f.Length != s.length || int64(f.Offset) > maxPullTimeout || f.Region == 0 {
		n.st.RxDropped++ // a second pull (replayed write request, duplicate), or nonsense
		return false
	}
	w.open, w.then, w.in, w.curry = openVerify, thenPull, wire.Trailer(frame, 0), s.iv[:]
	return true
}

func (n *initiator) finishPull(now int64, w *rxWork, ok bool) {
	if !n.slotStill(w) {
		return
	}
	if !ok {
		n.st.RxAuthFailed++
		return
	}
	f, i := &w.f, w.idx
	s := &n.slots[i]
	n.dests.answered(s.remoteIP, now)
	s.pulled = true
	s.pullIV = f.IV
	s.pullPort, s.pullHandle = f.SrcPort, f.Region
	s.sent, s.dataBase = 0, 0
	n.unlink(i)
	s.deadline = now + int64(f.Offset)
	n.insertInService(i)
	if s.orphan { // its source is gone: send nothing, the server commits nothing
		n.complete(now, i, abi.StatusAborted)
		return
	}
	// Held back by the bulk bound, or bulk behind WRITEs it held back
	// (they go first: in pull order), its data is sent by sendData.
	if (n.sendq.len() > 0 && !prio(s.class, s.length) && n.bulk.on(now)) || !n.bulk.take(now, bulkData, s.class, s.length, now-s.issueNs >= n.timeout/bulkAgeDiv) || !n.sendChunks(now, i) {
		n.pushSend(i)
	}
}

// pushSend queues slot i for sendData. A slot is queued at most once (an
// entry outlives its op when the op ends first; it then serves the slot's
// next op, or nothing), so the queue never holds more than Slots entries.
func (n *initiator) pushSend(i int32) {
	s := &n.slots[i]
	if s.inSendq {
		return
	}
	s.inSendq = true
	*n.sendq.push() = i
}

// sendData resumes WRITEs whose data could not all be sent when their pull
// arrived (no tx buffer, or the bulk bound held it back), in pull order; a
// WRITE the bulk bound holds back again goes to the back, so that the
// priority WRITEs behind it are sent.
func (n *initiator) sendData(now int64) int {
	k := 0
	for m := n.sendq.len(); m > 0; m-- {
		i := *n.sendq.front()
		s := &n.slots[i]
		if s.state == slotInService && s.op != abi.OpRead && s.pulled && s.sent < s.length {
			if s.sent == 0 && !n.bulk.take(now, bulkData, s.class, s.length, now-s.issueNs >= n.timeout/bulkAgeDiv) { // the next Poll sends it
				n.sendq.pop()
				*n.sendq.push() = i
				continue
			}
			if !n.sendChunks(now, i) {
				return k
			}
			k++
		}
		s.inSendq = false
		n.sendq.pop()
	}
	return k
}

// sendChunks sends the rest of WRITE op i's data, each chunk sealed
// straight from the source region into the frame (one pass, fused with
// the cipher), curried with the pull's IV. It returns false when it ran
// out of tx buffers (call again later). An op whose source region is gone
// fails at once with LOCAL_REGION: its data is incomplete at the server,
// which therefore commits nothing.
func (n *initiator) sendChunks(now int64, i int32) bool {
	s := &n.slots[i]
	if s.orphan {
		n.complete(now, i, abi.StatusAborted)
		return true
	}
	var src []byte
	if s.op == abi.OpRekey {
		src = s.newKey[:] // taken from the local region when the command was posted
	} else if r := n.regions.lookup(s.locReg); r != nil {
		src = r.mem[s.locOff : s.locOff+uint64(s.length)]
	} else {
		n.complete(now, i, abi.StatusLocalRegion)
		return true
	}
	o := n.out
	if s.dataBase == 0 {
		base, ok := o.counters(aesni.ResponseSpan(s.length))
		if !ok {
			n.complete(now, i, abi.StatusAborted) // nothing sent: nothing can be committed
			return true
		}
		s.dataBase = base
	}
	f := &o.hdr
	f.DstMAC, f.SrcMAC = s.mac, o.mac
	f.SrcIP, f.DstIP = o.ip, s.remoteIP
	f.SrcPort, f.DstPort = s.port, s.pullPort // from the op's port: the server checks it against ①'s
	f.DSCP = o.dscp[s.class]
	f.Type, f.Status, f.Flags, f.Aux = wire.TypeWriteData, 0, 0, 0
	f.PID = n.portals.p[s.portal].pid
	f.Tag = uint64(n.slotBase+abi.SlotID(i))<<32 | uint64(s.seq)
	f.Region = s.pullHandle
	return o.stream(s.aead, src, int(s.chunk), &s.sent, 0, s.dataBase, s.pullIV[:])
}
