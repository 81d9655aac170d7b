package engine

import (
	"fmt"
	"unsafe"

	"github.com/onerma/onerma/aesni"
)

// TxHook is implemented by a Tx that can run a function right before
// frames it was handed with Send leave it: before a burst is transmitted,
// before a sent frame becomes visible to a receiver, before a frame is
// copied (a fault injector's delayed or duplicated frames). With
// Config.Crypto = CryptoIPsecMB the core seals lazily: a frame handed to
// Send may still have its ciphertext and tag to be written, by the core's
// batch, and New installs the function that writes them with
// SetBeforeTx. A Tx that wraps another passes the hook on.
type TxHook interface {
	SetBeforeTx(f func())
}

// TxCHook is implemented by a Tx whose transmissions cross into C (the
// DPDK port's poll step, one crossing per burst) and that can run a C
// function right before it transmits, inside that same crossing: fn, a C
// function of type void (*)(void *), called with arg (C memory), on the
// core's goroutine; after every crossing that may have called fn the Tx
// calls settle (Go). With Config.Crypto = CryptoIPsecMB, New gives it the
// seal batch's run (aesni/mb Batch.Hook and Settle) instead of a TxHook,
// so the seals of a burst are computed in the crossing that sends it:
// one crossing for seal and transmit. The core stays free of cgo: it only
// passes the two pointers on. SetCBeforeTx(nil, nil, nil) removes them.
type TxCHook interface {
	SetCBeforeTx(fn, arg unsafe.Pointer, settle func())
}

// TxMemory is implemented by a Tx whose buffers all lie in a few
// long-lived ranges of memory (a preallocated pool of Go memory, a DPDK
// mempool in several memzones). With CryptoIPsecMB, New registers every
// range with the core's batch (aesni/mb Batch.Register): Go memory is
// then pinned once instead of per seal (tens of nanoseconds a buffer),
// and no buffer is looked up for pinning. The ranges must not overlap and
// must stay valid as long as the core.
type TxMemory interface {
	TxMemory() [][]byte
}

// sealer computes the seals of the send side (paper §4.2). New chooses
// the implementation once, from Config.Crypto: goSealer (crypto/cipher,
// each seal at once) or mbCrypto (ipsec-mb: each seal queued in a batch,
// with the same buffers: the frame in the tx buffer, the plaintext read
// from region memory when the batch runs, so data still moves once, fused
// with the cipher).
//
// run runs what is queued. It must run before a frame is copied or
// transmitted (the Tx's hook, or inside the Tx's crossing: TxCHook),
// before region memory can go (regionView: a core's part of a
// deregistration, its quiescent point; Shutdown), and at the end of
// every Poll unless the Tx's crossing runs it. Between a seal and the
// run, the frame's buffer and the plaintext stay put: the core never
// rewrites a buffer it handed to Send, and a frame it does not send (the
// self-loop copies it as it is emitted, or drops it) is sealed at once,
// by crypto/cipher, never queued (sender.sealFor): the self-loop costs no
// cgo call.
// register and unregister tell a batching backend about long-lived
// memory (regions, the Tx's buffers) so it pins it once.
//
// Batching pays once a burst holds several seals: on the loopback engine
// ipsec-mb gives more READs a second than crypto/cipher at 64 B and at
// 4 KB, while at one op in flight a batch holds one seal, pays a cgo
// crossing for it, and 64 B latency is a little higher
// (bench/RESULTS.md, loopback rows; `rmabench -only loopback -crypto go`
// against rmad's default).
//
// endPoll is the end of Poll: it runs what is queued unless the Tx's
// crossing runs it (TxCHook), which it then does before any frame leaves.
// crossings counts the backend's own cgo calls, inTx its batches run
// inside the Tx's crossings (PathCounters).
type sealer interface {
	sealRequest(a *aesni.AEAD, tag, nonce, aad []byte)
	sealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte)
	// sealResponseGather seals head ‖ gap zeros ‖ plaintext into out
	// (aesni.AEAD.SealResponseGather); gap < mb.GatherGap (gatherGap).
	sealResponseGather(a *aesni.AEAD, out, head []byte, gap int, plaintext, nonce, aad, reqIV []byte)
	sealAuthFailure(tag, nonce, aad, reqIV []byte)
	run()
	endPoll()
	register(mem []byte)
	unregister(mem []byte)
	crossings() (own, inTx uint64)
}

// openBatch queues the opens of a received burst (CryptoIPsecMB; see
// dispatch.go): queue adds w's open and returns false when w must be
// opened alone, with aesni; runOpens opens everything queued with one
// call; ok reports a job's result until the next queue.
type openBatch interface {
	queue(w *rxWork) bool
	runOpens()
	ok(job int) bool
}

// batchCrypto is a backend that batches both seals and opens (ipsec-mb).
// hookTx gives tx its seal batch's run when tx implements TxCHook (and
// reports whether it did).
type batchCrypto interface {
	sealer
	openBatch
	hookTx(tx Tx) bool
}

// goSealer seals with crypto/cipher (package aesni), one message at a
// time, at once.
type goSealer struct {
	reserved *aesni.AEAD // the reserved key (REMOTE_AUTHENTICATION_FAILURE)
}

func (g goSealer) sealRequest(a *aesni.AEAD, tag, nonce, aad []byte) {
	a.SealRequest(tag, nonce, aad)
}

func (g goSealer) sealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte) {
	a.SealResponse(out, plaintext, nonce, aad, reqIV)
}

func (g goSealer) sealResponseGather(a *aesni.AEAD, out, head []byte, gap int, plaintext, nonce, aad, reqIV []byte) {
	a.SealResponseGather(out, head, gap, plaintext, nonce, aad, reqIV)
}

func (g goSealer) sealAuthFailure(tag, nonce, aad, reqIV []byte) {
	g.reserved.SealAuthFailure(tag, nonce, aad, reqIV)
}

func (goSealer) run()                          {}
func (goSealer) endPoll()                      {}
func (goSealer) register(mem []byte)           {}
func (goSealer) unregister(mem []byte)         {}
func (goSealer) crossings() (own, inTx uint64) { return 0, 0 }

// setupCrypto installs cfg.Crypto's backend: the sealer, and for
// CryptoIPsecMB the open batch of ReceiveBurst, the Tx's hook (TxCHook,
// else TxHook) and its memory.
func setupCrypto(c *Core, tx Tx) error {
	c.out.now = goSealer{reserved: c.reserved}
	if c.cfg.Crypto != CryptoIPsecMB {
		c.out.seal = c.out.now
		c.burst = c.receiveEach
		return nil
	}
	h, ok := tx.(TxHook)
	if _, cok := tx.(TxCHook); !ok && !cok {
		return fmt.Errorf("%w: Crypto %q seals after Send and needs a Tx that implements engine.TxHook or engine.TxCHook; %T does neither", ErrConfig, c.cfg.Crypto, tx)
	}
	m, err := newMBCrypto(c)
	if err != nil {
		return fmt.Errorf("%w: Crypto %q: %v", ErrConfig, c.cfg.Crypto, err)
	}
	c.out.seal, c.opens, c.burst = m, m, c.receiveBatched
	c.regions.track = true // its batches pin registered memory: keep them in step with the table
	if !m.hookTx(tx) {
		h.SetBeforeTx(m.run)
	}
	if tm, ok := tx.(TxMemory); ok {
		for _, r := range tm.TxMemory() {
			m.register(r)
		}
	}
	return nil
}
