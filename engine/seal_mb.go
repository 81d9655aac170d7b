//go:build cgo && linux && amd64

package engine

import (
	"runtime"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/aesni/mb"
	"github.com/onerma/onerma/wire"
)

const mbBuilt = true

// mbBatchCap is the seals queued before the batch runs by itself: a tx
// burst (32) with room for the chunks of a few WRITEs.
const mbBatchCap = 64

// mbSealer is a core's CryptoIPsecMB state: its batch and its reserved
// key. The mb.Key of a cached AEAD rides on it (AEAD.Ext), built on its
// first seal; when the AEAD leaves its cache (eviction, rekey,
// deregistration) mbForget Releases the key (mb frees it once its queued
// jobs have run) and marks the AEAD with mbGone: someone may still hold
// it (a slot, a queued request), and its seals then take the Go path, so
// that no mb.Key outlives its cache entry.
type mbSealer struct {
	batch    *mb.Batch
	opens    *mb.Batch // ReceiveBurst's opens (open.go), apart from the seals
	reserved *mb.Key
	ini, srv *aesni.Cache // the core's: purged (keys released) when the core is collected
}

// free releases everything of s: the batch (queued seals discarded,
// registered memory unpinned), the keys of the cached AEADs, the reserved
// key. It runs as the Core's cleanup: a Core has no Close, and a batch
// collected with memory still pinned would make the runtime panic (a
// leaked runtime.Pinner).
func (s *mbSealer) free() {
	s.batch.Free()
	s.opens.Free()
	s.ini.Purge()
	s.srv.Purge()
	s.reserved.Free()
}

type mbGone struct{}

func (c *Core) mbSetup() error {
	b, err := mb.NewBatch(mbBatchCap)
	if err != nil {
		return err
	}
	o, err := mb.NewBatch(openBurst)
	if err != nil {
		b.Free()
		return err
	}
	r, err := mb.NewReservedKey()
	if err != nil {
		b.Free()
		o.Free()
		return err
	}
	c.mb = &mbSealer{batch: b, opens: o, reserved: r, ini: c.ini, srv: c.srv}
	_ = o.Register(c.pullBuf) // WRITE data is opened into the staging buffers
	c.ini.SetOnRemove(mbForget)
	c.srv.SetOnRemove(mbForget)
	runtime.AddCleanup(c, (*mbSealer).free, c.mb)
	return nil
}

func mbForget(a *aesni.AEAD) {
	if k, ok := a.Ext().(*mb.Key); ok {
		k.Release()
	}
	a.SetExt(mbGone{})
}

// mbKey is a's mb.Key, built on first use (slow path: allocation), or nil
// when a has left its cache (or the key could not be built): seal with a.
func mbKey(a *aesni.AEAD) *mb.Key {
	switch x := a.Ext().(type) {
	case *mb.Key:
		return x
	case nil:
		return mbNewKey(a)
	}
	return nil
}

func mbNewKey(a *aesni.AEAD) *mb.Key {
	k, err := mb.NewKey(a.Key())
	if err != nil {
		a.SetExt(mbGone{})
		return nil
	}
	a.SetExt(k)
	return k
}

// mbBatch is the batch with room for one more job.
func (c *Core) mbBatch() *mb.Batch {
	b := c.mb.batch
	if b.Full() {
		b.Run()
	}
	return b
}

func (c *Core) mbSealRequest(a *aesni.AEAD, tag, nonce, aad []byte) {
	k := mbKey(a)
	if k == nil {
		a.SealRequest(tag, nonce, aad)
		return
	}
	c.mbBatch().SealRequest(k, tag, nonce, aad)
}

func (c *Core) mbSealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte) {
	k := mbKey(a)
	if k == nil {
		a.SealResponse(out, plaintext, nonce, aad, reqIV)
		return
	}
	c.mbBatch().SealResponse(k, out, plaintext, nonce, aad, reqIV)
}

func (c *Core) mbSealAuthFailure(tag, nonce, aad, reqIV []byte) {
	c.mbBatch().SealAuthFailure(c.mb.reserved, tag, nonce, aad, reqIV)
}

func (c *Core) mbRun() {
	if b := c.mb.batch; b.Len() > 0 {
		b.Run() // seals never fail
	}
}

// mbRegister registers long-lived memory that seals read or write (the
// Tx's buffers, a region) with the batch, so that its buffers are not
// pinned per seal; when the batch's ranges are all taken, seals in mem
// are pinned one by one, as before.
func (c *Core) mbRegister(mem []byte) {
	_ = c.mb.batch.Register(mem) // only ErrRegistered: fine, see above
	_ = c.mb.opens.Register(mem)
}

// mbUnregister undoes mbRegister (nothing if mem was not registered);
// the batch must be empty (runSeals).
func (c *Core) mbUnregister(mem []byte) {
	c.mb.batch.Unregister(mem)
	c.mb.opens.Unregister(mem)
}

// mbQueueOpen queues w's open in the open batch (w.job), or returns false
// when its AEAD has no mb.Key any more (left its cache): open it with
// aesni. The batch has room (ReceiveBurst keeps at most openBurst).
func (c *Core) mbQueueOpen(w *rxWork) bool {
	b := c.mb.opens
	nonce, aad := wire.IV(w.frame), wire.AAD(w.frame)
	var k *mb.Key
	if w.open == openAuthFailure {
		k = c.mb.reserved
	} else if w.open != openFail {
		if k = mbKey(w.a); k == nil {
			return false
		}
	}
	switch w.open {
	case openFail:
		w.job = -1
		return true
	case openRequest:
		w.job, _ = b.OpenRequest(k, w.in, nonce, aad)
	case openVerify:
		w.job, _ = b.OpenResponse(k, nil, w.in, nonce, aad, w.curry)
	case openDirect:
		w.job, _ = b.OpenResponseDirect(k, w.dst, w.in, nonce, aad, w.curry)
	case openAuthFailure:
		w.job, _ = b.OpenAuthFailure(k, w.in, nonce, aad, w.curry)
	}
	return true
}

// mbRunOpens runs the open batch.
func (c *Core) mbRunOpens() { c.mb.opens.Run() }

// mbOpenOK reports whether open job i of the last run authenticated.
func (c *Core) mbOpenOK(i int) bool { return c.mb.opens.OK(i) }

// MBArch reports the code path ipsec-mb uses on this CPU (sse, avx, avx2,
// avx512), for the daemon's start-up log.
func MBArch() (string, error) { return mb.Arch() }
