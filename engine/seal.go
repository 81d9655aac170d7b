package engine

import (
	"fmt"

	"github.com/onerma/onerma/aesni"
)

// TxHook is implemented by a Tx that can run a function right before
// frames it was handed with Send leave it: before a burst is transmitted,
// before a sent frame becomes visible to a receiver, before a frame is
// copied (a fault injector's delayed or duplicated frames). With
// Config.Crypto = CryptoIPsecMB the core seals lazily: a frame handed to
// Send may still have its ciphertext and tag to be written, by the core's
// batch, and New installs the function that writes them (runSeals) with
// SetBeforeTx. A Tx that wraps another passes the hook on.
type TxHook interface {
	SetBeforeTx(f func())
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

// Seals (the send side of paper §4.2). With CryptoGo every call below is
// the aesni.AEAD method, at once; with CryptoIPsecMB (c.mb != nil) the
// seal is queued in the core's aesni/mb Batch, with the same buffers: the
// frame in the tx buffer, the plaintext read from region memory when the
// batch runs (data still moves once, fused with the cipher). runSeals
// runs the batch; it must run before a frame is copied or transmitted
// (emit's self-loop, the Tx's hook), before region memory can go
// (dropRegion, Shutdown), and at the end of every Poll. Between a seal and
// the run, the frame's buffer and the plaintext must stay put: the core
// never rewrites a buffer it handed to Send, and a frame it did not send
// (emit's self-loop and its overflow) runs the batch first.
//
// Measured (2-vCPU VM, ipsec-mb's avx512 path; one run each, the machine
// is shared): in-core BenchmarkReadLoopback4096 2.31-2.55 µs/op with "go",
// 1.81-2.45 with "ipsec-mb" (3s run: 1.94; the rest is now mostly the
// opens, still crypto/cipher); rmabench loopback (rmad, net_ring
// hairpin, -D 3s) read_bw 64 B 1.18-1.52 M ops/s "go" vs 1.63-1.73 M
// "ipsec-mb", 4 KB 268-381 k vs 493-497 k ops/s; at depth 1 a batch
// holds one seal and 64 B read_lat p50 is 1.91-2.16 µs "go" vs 2.32-2.35
// "ipsec-mb" (a cgo crossing per seal), 4 KB 3.86-5.22 vs 3.41-3.44.
//
// The opens are batched per received burst by ReceiveBurst, in a batch of
// their own (open.go).

func (c *Core) sealRequest(a *aesni.AEAD, tag, nonce, aad []byte) {
	if c.mb != nil {
		c.mbSealRequest(a, tag, nonce, aad)
		return
	}
	a.SealRequest(tag, nonce, aad)
}

func (c *Core) sealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte) {
	if c.mb != nil {
		c.mbSealResponse(a, out, plaintext, nonce, aad, reqIV)
		return
	}
	a.SealResponse(out, plaintext, nonce, aad, reqIV)
}

func (c *Core) sealAuthFailure(tag, nonce, aad, reqIV []byte) {
	if c.mb != nil {
		c.mbSealAuthFailure(tag, nonce, aad, reqIV)
		return
	}
	c.reserved.SealAuthFailure(tag, nonce, aad, reqIV)
}

// runSeals runs every queued seal (nothing with CryptoGo).
func (c *Core) runSeals() {
	if c.mb != nil {
		c.mbRun()
	}
}

// setupCrypto prepares the backend of cfg.Crypto: for CryptoIPsecMB the
// batch, the reserved key, the caches' remove hooks and the Tx's hook.
func (c *Core) setupCrypto(tx Tx) error {
	if c.cfg.Crypto != CryptoIPsecMB {
		return nil
	}
	h, ok := tx.(TxHook)
	if !ok {
		return fmt.Errorf("%w: Crypto %q seals after Send and needs a Tx that implements engine.TxHook; %T does not", ErrConfig, c.cfg.Crypto, tx)
	}
	if err := c.mbSetup(); err != nil {
		return fmt.Errorf("%w: Crypto %q: %v", ErrConfig, c.cfg.Crypto, err)
	}
	h.SetBeforeTx(c.runSeals)
	if m, ok := tx.(TxMemory); ok {
		for _, r := range m.TxMemory() {
			c.mbRegister(r)
		}
	}
	return nil
}
