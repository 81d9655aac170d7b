package engine

import (
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// Opens (the receive side of paper §4.2). Every received message is split
// in three: prepare (decode, checks, the lookups of its op, slot or pull
// and of its AEAD; nothing changes but drop counters), the open, and
// finish (everything the authenticated message does: complete an op,
// queue a request, accept a pull, commit a WRITE, answer). Receive, the
// self-loop and, with CryptoGo, ReceiveBurst run the three in a row per
// frame, the open being the aesni.AEAD method.
//
// With CryptoIPsecMB, ReceiveBurst prepares the frames of a burst one by
// one and queues each open in the core's open batch (an aesni/mb Batch of
// its own, apart from the seals': a Batch's results are readable only
// until its next Add, and finish queues seals; the seal batch also runs
// at any Tx hook, while the opens must run exactly once per burst). Then
// one Run (one cgo call) opens them all, and finish runs per frame, in
// order, with each job's result: the same counters, completions and frames
// as frame-by-frame processing, in the same order (the IV lane, the tx
// buffers and the NACK threshold are taken in finish).
//
// The rules that keep that promise (endBurst runs what is queued, i.e.
// "ends the batch", before the frame that would break them, which is then
// prepared again against the new state):
//   - Two frames for one destination: a READ's chunk or a WRITE's staging
//     chunk whose units are pending (slot.pending, pullCtx.pending), or an
//     answer or a pull for a slot with anything pending. Without it a
//     forged copy next to the genuine chunk would zero (OpenResponseDirect
//     on failure) what the genuine one wrote, or a duplicate be counted as
//     data twice.
//   - A frame whose finish changes what a later prepare looks up: a
//     completion frees a slot (only after all of its units arrived, so no
//     other chunk of it can be pending; an answer or pull makes the slot
//     all-pending), a commit ends a pull (likewise), a remote REKEY's data
//     installs a key that later requests are checked against: that one
//     runs alone (endBurst before it, a synchronous open), as does a frame
//     whose AEAD has left its cache (no mb.Key). finish re-validates the
//     slot (state, seq) and the pull (used, gen) all the same.
//   - ARP runs after endBurst (its answers and the frames it releases go
//     out after those of the frames before it).
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

// openNow opens w at once, with package aesni, and reports success.
func (c *Core) openNow(w *rxWork) bool {
	nonce, aad := wire.IV(w.frame), wire.AAD(w.frame)
	switch w.open {
	case openRequest:
		return w.a.OpenRequest(w.in, nonce, aad) == nil
	case openVerify:
		return w.a.OpenResponse(nil, w.in, nonce, aad, w.curry) == nil
	case openDirect:
		return w.a.OpenResponseDirect(w.dst, w.in, nonce, aad, w.curry) == nil
	case openAuthFailure:
		return c.reserved.OpenAuthFailure(w.in, nonce, aad, w.curry) == nil
	}
	return false
}

// finish applies an opened frame (ok: it authenticated).
func (c *Core) finish(now int64, w *rxWork, ok bool) {
	switch w.then {
	case thenRequest:
		c.finishRequest(now, w, ok)
	case thenAnswer:
		c.finishAnswer(now, w, ok)
	case thenPull:
		c.finishPull(now, w, ok)
	case thenChunk:
		c.finishChunk(now, w, ok)
	case thenData:
		c.finishData(now, w, ok)
	}
}

// ReceiveBurst processes received frames in order at time now, like
// Receive on each (the frames are borrowed for the call). With
// CryptoIPsecMB their opens run as one batch (see above).
func (c *Core) ReceiveBurst(now int64, frames [][]byte) {
	if c.mb == nil {
		for _, f := range frames {
			c.Receive(now, f)
		}
		return
	}
	c.stats.RxFrames += uint64(len(frames))
	for _, f := range frames {
		if wire.EtherType(f) == wire.EtherTypeARP {
			c.endBurst(now)
			c.receiveARP(now, f)
			continue
		}
		c.burstFrame(now, f)
	}
	c.endBurst(now)
}

// burstFrame prepares frame and queues its open, or, where the rules
// above say so, ends the batch first.
func (c *Core) burstFrame(now int64, frame []byte) {
	if c.rxn == len(c.rxq) {
		c.endBurst(now)
	}
	w := &c.rxq[c.rxn]
	if !c.prepare(now, frame, w) {
		return
	}
	if !c.conflicts(w) && !c.alone(w) && c.mbQueueOpen(w) {
		c.markPending(w)
		c.rxn++
		return
	}
	c.endBurst(now)
	w = &c.rxq[0]
	if !c.prepare(now, frame, w) { // the state it was prepared against may have changed
		return
	}
	if !c.alone(w) && c.mbQueueOpen(w) {
		c.markPending(w)
		c.rxn++
		return
	}
	c.finish(now, w, c.openNow(w))
}

// alone reports whether w must be opened and finished on its own: a
// remote REKEY's data (its commit changes keys later frames are checked
// against). A frame whose AEAD has no mb.Key any more is refused by
// mbQueueOpen.
func (c *Core) alone(w *rxWork) bool {
	return w.then == thenData && c.pulls[w.idx].op == abi.OpRekey
}

// conflicts reports whether w's destination or state has an open pending.
func (c *Core) conflicts(w *rxWork) bool {
	switch w.then {
	case thenAnswer, thenPull:
		return c.slots[w.idx].pending != 0
	case thenChunk:
		return c.slots[w.idx].pending&w.bits != 0
	case thenData:
		return c.pulls[w.idx].pending&w.bits != 0
	}
	return false
}

func (c *Core) markPending(w *rxWork) {
	switch w.then {
	case thenAnswer, thenPull:
		c.slots[w.idx].pending = math.MaxUint64
	case thenChunk:
		c.slots[w.idx].pending |= w.bits
	case thenData:
		c.pulls[w.idx].pending |= w.bits
	}
}

func (c *Core) clearPending(w *rxWork) {
	switch w.then {
	case thenAnswer, thenPull:
		c.slots[w.idx].pending = 0
	case thenChunk:
		c.slots[w.idx].pending &^= w.bits
	case thenData:
		c.pulls[w.idx].pending &^= w.bits
	}
}

// endBurst runs the queued opens (one cgo call) and finishes their frames
// in order.
func (c *Core) endBurst(now int64) {
	n := c.rxn
	if n == 0 {
		return
	}
	c.mbRunOpens()
	c.rxn = 0
	for k := range n {
		w := &c.rxq[k]
		c.clearPending(w)
		c.finish(now, w, w.job >= 0 && c.mbOpenOK(w.job))
		w.frame, w.in, w.dst, w.curry, w.a = nil, nil, nil, nil, nil
	}
}
