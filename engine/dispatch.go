package engine

import (
	"encoding/binary"
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/wire"
)

// The receive walk: a frame from the port (Receive, ReceiveBurst) or the
// self-loop (runLoop) is dispatched by its type to one side of the core
// (prepare): ARP to arp, requests and WRITE data to the responder, answers,
// READ chunks and pulls to the initiator, and every other IPv4 frame (ICMP,
// options, fragments, TTL 0, malformed) to icmp. The side looks up what the
// frame names and fills an rxWork; the open (aesni, or the open batch)
// authenticates it, writing a chunk's data straight into its region or
// staging buffer; finish hands the result back to the side, which applies
// it. Sides never call back into the Core.
//
// Opens (the receive side of paper §4.2): every received message is split
// in three: prepare (decode, checks, the lookups of its op, slot or pull
// and of its AEAD; nothing changes but drop counters), the open, and
// finish (everything the authenticated message does: complete an op,
// queue a request, accept a pull, commit a WRITE, answer). Receive, the
// self-loop and, with CryptoGo, ReceiveBurst run the three in a row per
// frame, the open being the aesni.AEAD method.
//
// With CryptoIPsecMB, ReceiveBurst prepares the frames of a burst one by
// one and queues each open in the core's open batch (openBatch: an
// aesni/mb Batch of its own, apart from the seals': a Batch's results are
// readable only until its next Add, and finish queues seals; the seal
// batch also runs at any Tx hook, while the opens must run exactly once
// per burst). Then one Run (one cgo call) opens them all, and finish runs
// per frame, in order, with each job's result: the same counters,
// completions and frames as frame-by-frame processing, in the same order
// (the IV lane, the tx buffers and the NACK threshold are taken in
// finish).
//
// The rules that keep that promise (endBurst runs what is queued, i.e.
// "ends the batch", before the frame that would break them, which is then
// prepared again against the new state):
//   - Two frames for one destination: a READ's chunk or a WRITE's staging
//     chunk whose units are pending (slot.pending, pullCtx.pending), or an
//     answer or a pull for a slot with anything pending (pendingOf).
//     Without it a forged copy next to the genuine chunk would zero
//     (OpenResponseDirect on failure) what the genuine one wrote, or a
//     duplicate be counted as data twice.
//   - A frame whose finish changes what a later prepare looks up: a
//     completion frees a slot (only after all of its units arrived, so no
//     other chunk of it can be pending; an answer or pull makes the slot
//     all-pending), a commit ends a pull (likewise), a remote REKEY's data
//     installs a key that later requests are checked against: that one
//     runs alone (endBurst before it, a synchronous open: rekeyData), as
//     does a frame whose AEAD has left its cache (no mb.Key). finish
//     re-validates the slot (state, seq) and the pull (used, gen) all the
//     same.
//   - ARP and ICMP run after endBurst (their answers, and the frames ARP
//     releases, go out after those of the frames before them).
//
// A forged response is opened only into its own op's destination range
// (the chunk's units, which nothing else queued may touch), and
// OpenResponseDirect zeroes that range on failure, as aesni does.
//
// What is not ordered: a WRITE committed by finish into a region range
// that a later READ chunk of the same burst was decrypted into (two ops
// racing on the same bytes) ends with the commit's data, where
// frame-by-frame processing would leave the READ's.

// openBurst is how many opens ReceiveBurst queues before it runs them:
// an rx burst (32) with room.
const openBurst = 64

type openKind uint8

const (
	openFail        openKind = iota // no key for a request: fails, nothing to open
	openRequest                     // a request's GMAC (aesni.AEAD.OpenRequest)
	openVerify                      // a payload-free answer or pull (OpenResponse)
	openDirect                      // a data chunk into its destination (OpenResponseDirect)
	openAuthFailure                 // REMOTE_AUTHENTICATION_FAILURE (the reserved key)
)

type rxThen uint8

const (
	thenRequest rxThen = iota // finishRequest
	thenAnswer                // finishAnswer
	thenPull                  // finishPull
	thenChunk                 // finishChunk
	thenData                  // finishData
)

// rxWork is one received frame between prepare and finish.
type rxWork struct {
	f     wire.Fields
	frame []byte
	open  openKind
	then  rxThen
	op    abi.Op      // a request's
	owner uint16      // a request's region's owner tenant (when it has a key)
	oGen  uint16      // and that tenant index's generation (tenantGens)
	epoch uint64      // a request's: the key epoch of the K_r a was derived from
	a     *aesni.AEAD // the key it opens with (not for openAuthFailure)
	in    []byte      // the tag, or sealed payload ‖ tag (openDirect)
	dst   []byte      // openDirect's destination
	curry []byte      // the request or pull IV curried into the AAD
	idx   int32       // slot (answers) or pull (WRITE data)
	seq   uint32      // the slot's seq or the pull's gen, re-checked by finish
	bits  uint64      // a chunk's units
	st    abi.Status  // an answer's status
	job   int         // its open in the batch; -1: fails
}

// openNow opens w at once, with package aesni, and reports success;
// reserved is the reserved key's AEAD.
func openNow(w *rxWork, reserved *aesni.AEAD) bool {
	nonce, aad := wire.IV(w.frame), wire.AAD(w.frame)
	switch w.open {
	case openRequest:
		return w.a.OpenRequest(w.in, nonce, aad) == nil
	case openVerify:
		return w.a.OpenResponse(nil, w.in, nonce, aad, w.curry) == nil
	case openDirect:
		return w.a.OpenResponseDirect(w.dst, w.in, nonce, aad, w.curry) == nil
	case openAuthFailure:
		return reserved.OpenAuthFailure(w.in, nonce, aad, w.curry) == nil
	}
	return false
}

// Receive processes one received frame at time now (ns, monotonic). The
// frame is borrowed for the call only.
func (c *Core) Receive(now int64, frame []byte) {
	c.stats.RxFrames++
	c.receive(now, frame)
}

// ReceiveBurst processes received frames in order at time now, like
// Receive on each (the frames are borrowed for the call). With
// CryptoIPsecMB their opens run as one batch (see above).
//
// While priority work is in progress on a core with Config.PollBytes set
// (bulk.go), a burst that holds both short frames and bulk chunks is
// taken in two passes instead: the short frames first, each prepared,
// opened (package aesni: no cgo call) and finished at once, in order; then
// the completions they made are published; then the bulk chunks, in order,
// as a burst of their own (one open batch with CryptoIPsecMB). Every
// chunk of one op is in the same pass (bulkFrame), and so are all the
// requests, answers and pulls; what differs from frame-by-frame order is
// only that a burst's short frames go before its bulk chunks.
func (c *Core) ReceiveBurst(now int64, frames [][]byte) {
	if !c.bulk.on(now) {
		c.burst(now, frames)
		return
	}
	for len(frames) > 0 {
		k := min(len(frames), len(c.rxBulk))
		c.receivePasses(now, frames[:k])
		frames = frames[k:]
	}
}

// receivePasses is ReceiveBurst's two passes over at most len(c.rxBulk)
// frames.
func (c *Core) receivePasses(now int64, frames [][]byte) {
	nb := 0
	for _, f := range frames {
		if bulkFrame(f) {
			c.rxBulk[nb] = f
			nb++
		}
	}
	if nb == 0 || nb == len(frames) {
		c.burst(now, frames)
		clear(c.rxBulk[:nb])
		return
	}
	c.stats.RxSplit++
	s := c.stg
	for _, f := range frames {
		if bulkFrame(f) {
			continue
		}
		c.stats.RxFrames++
		if s != nil {
			c.receiveStaged(now, f, s)
		} else {
			c.receive(now, f)
		}
	}
	if pt := c.portals; len(pt.dirty) > 0 {
		if s != nil {
			s.Enter(stage.Completion)
		}
		pt.publish(now)
	}
	if s != nil {
		s.Enter(stage.Receive)
	}
	c.burst(now, c.rxBulk[:nb])
	clear(c.rxBulk[:nb])
}

// bulkFrame reports whether frame is a bulk chunk (ReceiveBurst's second
// pass): READ or WRITE data of more than ShortBytes, or at an offset past
// 0 (a later chunk of an op longer than ShortBytes: every chunk of an op
// is in the pass of its first). It reads the frame's fields where
// wire.Decode would find them; anything else is short, and prepare
// decides what it is.
func bulkFrame(f []byte) bool {
	const h = wire.EthLen + wire.IPv4Len + wire.UDPLen
	if len(f) < wire.PayloadOffset || wire.EtherType(f) != wire.EtherTypeIPv4 || f[wire.EthLen] != 0x45 {
		return false
	}
	if t := wire.Type(f[h+1]); t != wire.TypeReadResp && t != wire.TypeWriteData && t != wire.TypeLookupResp {
		return false
	}
	return binary.BigEndian.Uint32(f[h+20:h+24]) > ShortBytes || binary.BigEndian.Uint64(f[h+24:h+32]) != 0
}

// receiveEach is ReceiveBurst without an open batch (CryptoGo).
func (c *Core) receiveEach(now int64, frames [][]byte) {
	if s := c.stg; s != nil {
		c.receiveEachStaged(now, frames, s)
		return
	}
	for _, f := range frames {
		c.Receive(now, f)
	}
}

// receiveBatched is ReceiveBurst with the open batch (CryptoIPsecMB).
func (c *Core) receiveBatched(now int64, frames [][]byte) {
	c.stats.RxFrames += uint64(len(frames))
	for _, f := range frames {
		if wire.EtherType(f) == wire.EtherTypeARP || wire.IPv4Protocol(f) == wire.ProtoICMP {
			c.endBurst(now)
			c.receiveAgain()
			c.receive(now, f)
			continue
		}
		c.burstFrame(now, f)
	}
	c.endBurst(now)
}

// receive dispatches one frame and, unless it was handled already or
// dropped, opens and finishes it.
func (c *Core) receive(now int64, frame []byte) {
	w := &c.rxw
	if c.prepare(now, frame, w) {
		c.finish(now, w, openNow(w, c.reserved))
	}
}

// prepare does everything a received frame needs before its open: decode,
// checks, and the lookups of its side (its op, slot or pull, and its
// AEAD); it fills w and returns true when the frame is to be opened (then
// finish), false when it was handled already (ARP, ICMP) or dropped
// (counted). For a frame it returns true for, it changes nothing but
// counters, so that the frame can be prepared again (see ReceiveBurst);
// ARP and ICMP, which answer at once, reach it in a burst only after
// endBurst.
func (c *Core) prepare(now int64, frame []byte, w *rxWork) bool {
	switch wire.EtherType(frame) {
	case wire.EtherTypeARP:
		if ip, mac, ok := c.arp.receive(now, frame); ok {
			c.ini.resolved(now, ip, mac)
		}
		return false
	case wire.EtherTypeIPv4:
	default:
		c.stats.RxDropped++
		return false
	}
	f := &w.f
	payload, err := wire.Decode(frame, f)
	if err != nil { // ICMP, or IPv4 the engine does not take: counted there
		c.icmp.receive(now, frame)
		return false
	}
	if f.DstMAC != c.out.mac || f.DstIP != c.out.ip {
		c.stats.RxDropped++
		return false
	}
	w.frame = frame
	switch f.Type {
	case wire.TypeReadReq, wire.TypeWriteReq, wire.TypeRekeyReq, wire.TypeLookupReq:
		if f.DstPort != c.out.udp || (f.Type == wire.TypeRekeyReq && f.Length != aesni.KeySize) || c.closing {
			c.stats.RxDropped++
			return false
		}
		return c.srv.prepRequest(frame, w)
	case wire.TypeWriteData:
		if f.DstPort != c.out.port {
			c.stats.RxDropped++
			return false
		}
		return c.srv.prepWriteData(frame, payload, w)
	case wire.TypeReadResp, wire.TypeLookupResp, wire.TypeNack, wire.TypeError, wire.TypeAck, wire.TypePullReq:
		if !c.out.ownsPort(f.DstPort) { // another core's initiator port, or none
			c.stats.RxDropped++
			return false
		}
		return c.ini.prepResponse(frame, len(payload), w)
	}
	return false
}

// finish hands an opened frame (ok: it authenticated) to its side.
func (c *Core) finish(now int64, w *rxWork, ok bool) {
	switch w.then {
	case thenRequest:
		c.srv.finishRequest(now, w, ok)
	case thenAnswer:
		c.ini.finishAnswer(now, w, ok)
	case thenPull:
		c.ini.finishPull(now, w, ok)
	case thenChunk:
		c.ini.finishChunk(now, w, ok)
	case thenData:
		c.srv.finishData(now, w, ok)
	}
}

// burstFrame prepares frame and queues its open, or, where the rules
// above say so, ends the batch first.
func (c *Core) burstFrame(now int64, frame []byte) {
	if c.rxn == len(c.rxq) {
		c.endBurst(now)
		c.receiveAgain()
	}
	w := &c.rxq[c.rxn]
	if !c.prepare(now, frame, w) {
		return
	}
	p, bits := c.pendingOf(w)
	if (p == nil || *p&bits == 0) && !c.srv.rekeyData(w) && c.opens.queue(w) {
		if p != nil {
			*p |= bits
		}
		c.rxn++
		return
	}
	c.endBurst(now)
	c.receiveAgain()
	w = &c.rxq[0]
	if !c.prepare(now, frame, w) { // the state it was prepared against may have changed
		return
	}
	if !c.srv.rekeyData(w) && c.opens.queue(w) {
		if p, bits := c.pendingOf(w); p != nil {
			*p |= bits
		}
		c.rxn++
		return
	}
	if s := c.stg; s != nil { // opened alone, then back to receiving
		s.Enter(stage.Open)
		ok := openNow(w, c.reserved)
		s.Enter(stage.Protocol)
		c.finish(now, w, ok)
		s.Enter(stage.Receive)
		return
	}
	c.finish(now, w, openNow(w, c.reserved))
}

// pendingOf is the pending-opens word of w's destination (its slot or
// pull) and the bits w covers in it: a chunk's units, or every bit for an
// answer or a pull, which conflict with anything pending on their slot.
// nil for requests, whose finish touches no destination a later frame
// of the burst may open into.
func (c *Core) pendingOf(w *rxWork) (*uint64, uint64) {
	switch w.then {
	case thenAnswer, thenPull:
		return &c.ini.slots[w.idx].pending, math.MaxUint64
	case thenChunk:
		return &c.ini.slots[w.idx].pending, w.bits
	case thenData:
		return &c.srv.pulls[w.idx].pending, w.bits
	}
	return nil, 0
}

// endBurst runs the queued opens (one cgo call) and finishes their frames
// in order.
func (c *Core) endBurst(now int64) {
	n := c.rxn
	if n == 0 {
		return
	}
	s := c.stg
	if s != nil {
		s.Enter(stage.Open)
	}
	c.opens.runOpens()
	if s != nil {
		s.Enter(stage.Protocol)
	}
	c.rxn = 0
	for k := range n {
		w := &c.rxq[k]
		if p, bits := c.pendingOf(w); p != nil {
			*p &^= bits
		}
		c.finish(now, w, w.job >= 0 && c.opens.ok(w.job))
		w.frame, w.in, w.dst, w.curry, w.a = nil, nil, nil, nil, nil
	}
}

// receiveAgain goes back to receiving (stage Receive) after a batch
// ended in mid-burst (endBurst left the finishes in Protocol).
func (c *Core) receiveAgain() {
	if s := c.stg; s != nil && s.Current() != stage.Receive {
		s.Enter(stage.Receive)
	}
}

// runLoop receives the frames the engine sent to itself, in order. Frames
// that processing adds are handled too, up to one ring's worth per call.
func (c *Core) runLoop(now int64) int {
	if s := c.stg; s != nil && c.out.loop.len() > 0 {
		return c.runLoopStaged(now, s)
	}
	n := 0
	l := &c.out.loop
	for l.len() > 0 && n < len(l.buf) {
		f := l.front()
		c.receive(now, f.b[:f.n]) // may push; never overwrites the front
		l.pop()
		n++
	}
	return n
}
