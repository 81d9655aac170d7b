//go:build cgo && linux && amd64

package engine

import (
	"runtime"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/aesni/mb"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/wire"
)

const mbBuilt = true

// mbBatchCap is the seals queued before the batch runs by itself: a tx
// burst (32) with room for the chunks of a few WRITEs.
const mbBatchCap = 64

// mbCrypto is the CryptoIPsecMB backend of a core: the sealer and the open
// batch, each an aesni/mb Batch (apart: a Batch's results are readable
// only until its next Add, and finishing the opened frames queues seals),
// and the reserved key. The mb.Key of a cached AEAD rides on it
// (AEAD.Ext), built on its first use; when the AEAD leaves its cache
// (eviction, rekey, deregistration) mbForget Releases the key (mb frees it
// once its queued jobs have run) and marks the AEAD with mbGone: someone
// may still hold it (a slot, a queued request), and its seals then take
// the Go path, so that no mb.Key outlives its cache entry.
//
// With a Tx that implements TxCHook (hookTx) the seal batch runs inside
// the Tx's crossing that transmits the frames (fused): Poll leaves it
// queued (endPoll), and everything else that must see the seals done (a
// full batch, a region's removal, Shutdown) still runs it itself; the
// self-loop's frames are sealed at once (sender.sealFor).
type mbCrypto struct {
	batch    *mb.Batch
	opens    *mb.Batch
	reserved *mb.Key
	ini, srv *aesni.Cache // the core's: purged (keys released) when the core is collected
	fused    bool         // the Tx's crossing runs the seal batch (hookTx)
	unhook   func()       // removes the hook from the Tx (free)
	// stg: its core's cost accounting (Core.SetStages; nil: none): each
	// run of the seal batch it makes itself is a section of stage Seal
	// (the runs inside the Tx's crossing are charged by the Tx, which
	// measures them: dpdkport).
	stg *stage.Stages
}

func (m *mbCrypto) setStages(s *stage.Stages) { m.stg = s }

// runSeals runs the seal batch (seals never fail), in stage Seal when
// the core has stages.
func (m *mbCrypto) runSeals() {
	if s := m.stg; s != nil {
		prev := s.Enter(stage.Seal)
		m.batch.Run()
		s.Enter(prev)
		return
	}
	m.batch.Run()
}

type mbGone struct{}

// newMBCrypto builds c's backend: the batches, the reserved key, the
// caches' remove hooks, and the cleanup that frees them with the core.
func newMBCrypto(c *Core) (batchCrypto, error) {
	b, err := mb.NewBatch(mbBatchCap)
	if err != nil {
		return nil, err
	}
	o, err := mb.NewBatch(openBurst)
	if err != nil {
		b.Free()
		return nil, err
	}
	r, err := mb.NewReservedKey()
	if err != nil {
		b.Free()
		o.Free()
		return nil, err
	}
	m := &mbCrypto{batch: b, opens: o, reserved: r, ini: c.ini.keys, srv: c.srv.keys}
	_ = o.Register(c.srv.pullBuf) // WRITE data is opened into the staging buffers
	m.ini.SetOnRemove(mbForget)
	m.srv.SetOnRemove(mbForget)
	// A Core has no Close, and a batch collected with memory still pinned
	// would make the runtime panic (a leaked runtime.Pinner).
	runtime.AddCleanup(c, (*mbCrypto).free, m)
	return m, nil
}

// free releases everything of m: the batches (queued seals discarded,
// registered memory unpinned), the keys of the cached AEADs, the reserved
// key.
func (m *mbCrypto) free() {
	if m.unhook != nil {
		m.unhook() // the Tx must not call a freed batch's hook
	}
	m.batch.Free()
	m.opens.Free()
	m.ini.Purge()
	m.srv.Purge()
	m.reserved.Free()
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

// room is the seal batch with room for one more job.
func (m *mbCrypto) room() *mb.Batch {
	if m.batch.Full() {
		m.runSeals()
	}
	return m.batch
}

func (m *mbCrypto) sealRequest(a *aesni.AEAD, tag, nonce, aad []byte) {
	k := mbKey(a)
	if k == nil {
		a.SealRequest(tag, nonce, aad)
		return
	}
	m.room().SealRequest(k, tag, nonce, aad)
}

func (m *mbCrypto) sealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte) {
	k := mbKey(a)
	if k == nil {
		a.SealResponse(out, plaintext, nonce, aad, reqIV)
		return
	}
	m.room().SealResponse(k, out, plaintext, nonce, aad, reqIV)
}

func (m *mbCrypto) sealResponseGather(a *aesni.AEAD, out, head []byte, gap int, plaintext, nonce, aad, reqIV []byte) {
	k := mbKey(a)
	if k == nil {
		a.SealResponseGather(out, head, gap, plaintext, nonce, aad, reqIV)
		return
	}
	m.room().SealResponseGather(k, out, head, gap, plaintext, nonce, aad, reqIV)
}

func (m *mbCrypto) sealAuthFailure(tag, nonce, aad, reqIV []byte) {
	m.room().SealAuthFailure(m.reserved, tag, nonce, aad, reqIV)
}

func (m *mbCrypto) run() {
	if m.batch.Len() > 0 {
		m.runSeals()
	}
}

func (m *mbCrypto) endPoll() {
	if !m.fused {
		m.run()
	}
}

// hookTx gives tx the seal batch's run when tx can call it inside its
// own crossing (TxCHook).
func (m *mbCrypto) hookTx(tx Tx) bool {
	h, ok := tx.(TxCHook)
	if !ok {
		return false
	}
	fn, arg := m.batch.Hook()
	h.SetCBeforeTx(fn, arg, m.settle)
	m.fused = true
	m.unhook = func() { h.SetCBeforeTx(nil, nil, nil) }
	return true
}

// settle finishes a run the Tx's crossing made (TxCHook).
func (m *mbCrypto) settle() { m.batch.Settle() }

func (m *mbCrypto) crossings() (own, inTx uint64) {
	return m.batch.Runs() + m.opens.Runs(), m.batch.HookRuns()
}

// register registers long-lived memory that seals and opens read or write
// (the Tx's buffers, a region) with both batches, so that its buffers are
// not pinned per job; when a batch's ranges are all taken, jobs in mem
// are pinned one by one.
func (m *mbCrypto) register(mem []byte) {
	_ = m.batch.Register(mem) // only ErrRegistered: fine, see above
	_ = m.opens.Register(mem)
}

// unregister undoes register (nothing if mem was not registered); the
// seal batch must be empty (run).
func (m *mbCrypto) unregister(mem []byte) {
	m.batch.Unregister(mem)
	m.opens.Unregister(mem)
}

// queue queues w's open in the open batch (w.job), or returns false when
// its AEAD has no mb.Key any more (left its cache): open it with aesni.
// The batch has room (ReceiveBurst keeps at most openBurst).
func (m *mbCrypto) queue(w *rxWork) bool {
	b := m.opens
	nonce, aad := wire.IV(w.frame), wire.AAD(w.frame)
	var k *mb.Key
	if w.open == openAuthFailure {
		k = m.reserved
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

func (m *mbCrypto) runOpens()       { m.opens.Run() }
func (m *mbCrypto) ok(job int) bool { return m.opens.OK(job) }

// MBArch reports the code path ipsec-mb uses on this CPU (sse, avx, avx2,
// avx512), for the daemon's start-up log.
func MBArch() (string, error) { return mb.Arch() }
