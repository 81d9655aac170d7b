package mb

/*
#cgo CFLAGS: -O2 -DLINUX
#cgo LDFLAGS: -lIPSec_MB
#include <stdlib.h>
#include "mb.h"

// mb_run with the batch's address as an integer and no result (it is in
// the batch, failed): Run, once a burst, then skips cgo's check of
// pointer arguments (cgocheck, a heap lookup: the batch is C memory,
// there is nothing to find) and its wrapper's re-reading of the
// goroutine's stack to store a result.
static inline void mb_run_addr(uintptr_t b, uint32_t n)
{
	mb_run((mb_batch *)b, n);
}
*/
import "C"

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/onerma/onerma/aesni"
)

// ArchEnv names the environment variable that forces ipsec-mb's code path:
// "sse", "avx", "avx2" or "avx512" (unset or "auto": the best the CPU has,
// init_mb_mgr_auto). It is read once, when the first Key or Batch is made;
// a path the CPU cannot run is an error then.
const ArchEnv = "ONERMA_IPSEC_MB_ARCH"

const (
	aadScratch = C.MB_AAD_SCRATCH // bytes of curried-AAD scratch per job
	// pinsPerPinner is how many pins a runtime.Pinner holds without
	// growing its slice (its inline refStore in Go 1.21-1.26). Unpin drops
	// a grown slice, so a Pinner that held more would allocate again on
	// every batch; the batch spreads its pins over several Pinners instead
	// (TestAllocs catches a runtime where this is no longer true).
	pinsPerPinner = 5
	maxPinsPerJob = 3 // out, plaintext and an AAD too long for the scratch
	// MaxCap is the largest batch capacity NewBatch accepts.
	MaxCap = 1 << 16
	// spanMemo is how many recently pinned buffers a batch remembers: a
	// buffer inside one of them (the same region, the same packet) is
	// not pinned again.
	spanMemo = 4
	// MaxRegistered is how many memory ranges a batch can Register: an
	// engine registers every region (rmad allows 1024) besides its mbuf
	// pool and staging buffers.
	MaxRegistered = 4096
)

var _ = [1]struct{}{}[aadScratch-(aesni.MaxAADSize+aesni.NonceSize+15)&^15] // mb.h agrees with aesni

var (
	setupOnce sync.Once
	setupErr  error
)

var archNames = map[string]C.int{
	"": 0, "auto": 0,
	"sse": C.IMB_ARCH_SSE, "avx": C.IMB_ARCH_AVX,
	"avx2": C.IMB_ARCH_AVX2, "avx512": C.IMB_ARCH_AVX512,
}

// setup initializes ipsec-mb once for the process.
func setup() error {
	setupOnce.Do(func() {
		v := os.Getenv(ArchEnv)
		arch, ok := archNames[v]
		if !ok {
			setupErr = fmt.Errorf("mb: %s=%q: want auto, sse, avx, avx2 or avx512", ArchEnv, v)
			return
		}
		switch rc := C.mb_init(arch); {
		case rc == 0:
		case rc == -1:
			setupErr = errors.New("mb: ipsec-mb: cannot allocate its manager")
		case rc == -3:
			setupErr = errors.New("mb: ipsec-mb: self-test failed")
		case rc > 0:
			setupErr = fmt.Errorf("mb: ipsec-mb (arch %q): %s", v, C.GoString(C.mb_strerror(rc)))
		default:
			setupErr = fmt.Errorf("mb: ipsec-mb init failed (%d)", int(rc))
		}
	})
	return setupErr
}

// Arch returns the name of the code path ipsec-mb runs on this CPU ("sse",
// "avx", "avx2" or "avx512"; the last covers VAES and VPCLMULQDQ where the
// CPU has them), initializing the library if nothing has yet.
func Arch() (string, error) {
	if err := setup(); err != nil {
		return "", err
	}
	switch C.mb_arch() {
	case C.IMB_ARCH_NOAESNI:
		return "noaesni", nil
	case C.IMB_ARCH_SSE:
		return "sse", nil
	case C.IMB_ARCH_AVX:
		return "avx", nil
	case C.IMB_ARCH_AVX2:
		return "avx2", nil
	case C.IMB_ARCH_AVX512:
		return "avx512", nil
	}
	return fmt.Sprintf("arch%d", int(C.mb_arch())), nil
}

// Features returns ipsec-mb's feature bits (IMB_FEATURE_*: what the CPU
// offers and the library uses), 0 before initialization.
func Features() uint64 { return uint64(C.mb_features()) }

// Key is an expanded AES-128-GCM key (ipsec-mb's struct gcm_key_data: round
// keys and GHASH powers, 64-byte aligned) in C memory. NewKey allocates and
// expands it (the slow path); Batch methods only read it.
//
// There is no finalizer: the owner frees the C memory with Free, or with
// Release where jobs may still be queued. A Key counts the queued jobs that
// refer to it, so that a cache entry can own one: when the entry is
// evicted or invalidated the cache calls Release, which frees the key at
// once if no job refers to it and otherwise when the Run (or Discard) that
// finishes its last job returns. Set re-expands a key in place (no
// allocation), for a cache that recycles its entries' keys.
//
// A Key belongs to one engine core, like aesni.AEAD: its job count is not
// synchronized. It holds a copy of the raw key (Matches).
type Key struct {
	p        *C.struct_gcm_key_data
	key      aesni.Key
	reserved bool
	release  bool // free once pending drops to 0
	pending  int  // queued jobs that refer to it
}

var errNoMemory = errors.New("mb: cannot allocate C memory")

// NewKey allocates and expands an AES-128-GCM key for k (slow path: one C
// allocation and the key schedule). It fails if ipsec-mb cannot be
// initialized on this machine.
func NewKey(k aesni.Key) (*Key, error) {
	if err := setup(); err != nil {
		return nil, err
	}
	p := C.mb_key_new()
	if p == nil {
		return nil, errNoMemory
	}
	key := &Key{p: p}
	if err := key.expand(k); err != nil {
		C.mb_key_free(p)
		return nil, err
	}
	return key, nil
}

// NewReservedKey expands the well-known reserved key (aesni.ReservedKey);
// only it may SealAuthFailure and OpenAuthFailure.
func NewReservedKey() (*Key, error) {
	k, err := NewKey(aesni.ReservedKey())
	if err != nil {
		return nil, err
	}
	k.reserved = true
	return k, nil
}

func (k *Key) expand(key aesni.Key) error {
	lo := binary.NativeEndian.Uint64(key[0:8])
	hi := binary.NativeEndian.Uint64(key[8:16])
	if rc := C.mb_key_set(k.p, C.uint64_t(lo), C.uint64_t(hi)); rc != 0 {
		return fmt.Errorf("mb: ipsec-mb key expansion: %s", C.GoString(C.mb_strerror(rc)))
	}
	k.key = key
	return nil
}

func (k *Key) live() {
	if k.p == nil {
		panic("mb: key used after Free")
	}
}

// Set re-expands k in place for key (no allocation; the cost of the key
// schedule). k stops being the reserved key. It panics if jobs that refer
// to k are queued: they would run under the new key.
func (k *Key) Set(key aesni.Key) {
	k.live()
	if k.pending > 0 {
		panic("mb: Set of a key with queued jobs")
	}
	if err := k.expand(key); err != nil {
		panic(err) // ipsec-mb refused a valid key: cannot happen
	}
	k.reserved = false
}

// Matches reports whether k was expanded from key (see aesni.AEAD.Matches).
func (k *Key) Matches(key *aesni.Key) bool { return k.p != nil && k.key == *key }

// Reserved reports whether k is the reserved key.
func (k *Key) Reserved() bool { return k.reserved }

// Pending returns how many queued jobs refer to k.
func (k *Key) Pending() int { return k.pending }

// Freed reports whether k's C memory has been freed.
func (k *Key) Freed() bool { return k.p == nil }

// Free zeroes and frees k's C memory now. It panics if jobs that refer to
// k are queued (use Release). Freeing twice does nothing.
func (k *Key) Free() {
	if k.pending > 0 {
		panic("mb: Free of a key with queued jobs (use Release)")
	}
	k.free()
}

// Release frees k now if no queued job refers to it, else when the last
// such job has run (or been discarded). k must not be queued again.
func (k *Key) Release() {
	if k.pending == 0 {
		k.free()
		return
	}
	k.release = true
}

func (k *Key) free() {
	if k.p != nil {
		C.mb_key_free(k.p)
		k.p = nil
	}
	k.key = aesni.Key{}
	k.release = false
}

// span is the address range of a pinned buffer's whole backing array.
type span struct{ lo, hi uintptr }

// Batch queues AES-128-GCM operations and runs them all with one cgo call
// (Run). Its methods mirror aesni.AEAD's, with the key as first argument:
// same buffers, same checks, the same bytes written; instead of an error,
// each returns the job's index, whose result Run reports (Err, OK). An
// open whose input is too short to hold a tag (a length off the wire) is
// queued as a job that fails, so every message gets its answer from Run.
// When the batch is full an Add queues nothing and returns (-1, false):
// Run it first.
//
// Between an Add and the end of Run: the nonce, the AAD (and the request
// IV it is curried with) and a received tag are copied at Add; the
// plaintext or ciphertext and the outputs are used by Run, so those
// buffers must stay valid and untouched until Run returns. They may be C
// memory (DPDK mbufs), mmap'd memory (regions) or Go memory: Go buffers are
// pinned by a runtime.Pinner of the batch (Pin does nothing for other
// memory) from Add until Run returns, so C memory never holds an unpinned
// Go pointer.
//
// Pinning a Go buffer and unpinning it costs tens of nanoseconds, calling
// Pin on other memory about ten (BenchmarkPin); a buffer inside one this
// batch pinned already (the same backing array) is not pinned again, and
// one inside Registered memory is never pinned per job.
//
// The job descriptors, the AAD scratch and the results are C memory
// allocated once by NewBatch; Add and Run allocate nothing. There is no
// finalizer: Free releases the C memory. A Batch dropped with queued jobs
// or registered Go memory, without Discard or Free, still holds pins: the
// runtime reports that as a leaked Pinner (it panics).
//
// A Batch belongs to one goroutine (an engine core); several Batches may
// run at once on different goroutines (ipsec-mb's direct API keeps no
// shared state), each with its own Keys.
type Batch struct {
	c    *C.mb_batch
	jobs []C.mb_job
	aad  [][aadScratch]byte
	ok   []byte
	keys []*Key // key of each queued job (nil for a failed one)
	n    int    // queued jobs (b.c.queued in step)
	ran  int    // jobs of the last Run, whose results are readable

	runs, hookRuns uint64 // Runs (crossings) and runs inside another's crossing (Settle)

	pins  []runtime.Pinner
	npin  int
	spans [spanMemo]span
	nspan int

	// Registered memory, never pinned per job: sorted by start address
	// (regPins in step), looked up by binary search after the range of
	// the last hit.
	regs    []span
	regPins []*runtime.Pinner
	lastReg int
}

// NewBatch allocates a batch of capacity jobs (1..MaxCap) in C memory.
func NewBatch(capacity int) (*Batch, error) {
	if capacity < 1 || capacity > MaxCap {
		panic("mb: batch capacity out of range")
	}
	if err := setup(); err != nil {
		return nil, err
	}
	c := C.mb_batch_new(C.uint32_t(capacity))
	if c == nil {
		return nil, errNoMemory
	}
	return &Batch{
		c:    c,
		jobs: unsafe.Slice(c.jobs, capacity),
		aad:  unsafe.Slice((*[aadScratch]byte)(unsafe.Pointer(c.aad)), capacity),
		ok:   unsafe.Slice((*byte)(unsafe.Pointer(c.ok)), capacity),
		keys: make([]*Key, capacity),
		pins: make([]runtime.Pinner, (maxPinsPerJob*capacity+pinsPerPinner-1)/pinsPerPinner),
	}, nil
}

// Cap returns the capacity fixed by NewBatch.
func (b *Batch) Cap() int { return len(b.jobs) }

// Len returns the number of queued jobs.
func (b *Batch) Len() int { return b.n }

// Full reports whether an Add would fail.
func (b *Batch) Full() bool { return b.n == len(b.jobs) }

func checkNonce(nonce []byte) {
	if len(nonce) != aesni.NonceSize {
		panic("mb: nonce must be 12 bytes")
	}
}

// checkCurry asserts what aesni.AEAD asserts of aad ‖ reqIV.
func checkCurry(aad, reqIV []byte) {
	switch len(reqIV) {
	case 0:
		return
	case aesni.NonceSize:
	default:
		panic("mb: request IV must be 12 bytes or empty")
	}
	if len(aad) > aesni.MaxAADSize {
		panic("mb: aad longer than MaxAADSize")
	}
}

// inexactOverlap is crypto/cipher's rule: buffers may share memory only if
// they start at the same address.
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	xa, ya := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	if xa == ya {
		return false
	}
	return xa < ya+uintptr(len(y)) && ya < xa+uintptr(len(x))
}

// overlap reports whether x and y share any byte.
func overlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	xa, ya := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xa < ya+uintptr(len(y)) && ya < xa+uintptr(len(x))
}

// job starts job b.n for k (nil for a failed job) and returns its index,
// or -1 if the batch is full. Arguments are checked before: nothing after
// this may panic.
func (b *Batch) job(k *Key, kind C.uint32_t) (int, *C.mb_job) {
	if b.c.hook_ran != 0 {
		b.Settle()
	}
	if b.n == len(b.jobs) {
		return -1, nil
	}
	if b.n == 0 {
		b.ran = 0 // a new batch: the last results are gone
	}
	i := b.n
	b.n++
	b.c.queued = C.uint32_t(b.n)
	j := &b.jobs[i]
	j.kind = kind
	j.len = 0
	j.copy_to = nil
	d := b.dummy()
	j.dst, j.src, j.tag, j.aad, j.aad_len = d, d, d, d, 0
	if k != nil {
		j.key = k.p
		k.pending++
	} else {
		j.key = nil
	}
	b.keys[i] = k
	return i, j
}

func (b *Batch) dummy() *C.uint8_t { return &b.c.dummy[0] }

func (b *Batch) usable(k *Key) {
	if b.c == nil {
		panic("mb: batch used after Free")
	}
	k.live()
}

// pin returns p's address for C, pinning p's backing array first if it is
// Go memory (and not already pinned by this batch). An empty p gets a
// valid dummy address.
func (b *Batch) pin(p []byte) *C.uint8_t {
	if len(p) == 0 {
		return b.dummy()
	}
	ptr := unsafe.Pointer(unsafe.SliceData(p))
	lo, hi := uintptr(ptr), uintptr(ptr)+uintptr(len(p))
	if b.registered(lo, hi) {
		return (*C.uint8_t)(ptr)
	}
	m := min(b.nspan, spanMemo)
	for i := 0; i < m; i++ {
		if s := &b.spans[i]; lo >= s.lo && hi <= s.hi {
			// Inside a buffer pinned in this batch: the same Go object
			// (a slice's backing array is one object), or C memory.
			return (*C.uint8_t)(ptr)
		}
	}
	b.pins[b.npin/pinsPerPinner].Pin(ptr)
	b.npin++
	b.spans[b.nspan%spanMemo] = span{lo, lo + uintptr(cap(p))}
	b.nspan++
	return (*C.uint8_t)(ptr)
}

// registered reports whether [lo, hi) lies inside one registered range:
// the last one that held a buffer, or (a scan of up to 8 ranges, else a
// binary search) the one starting at or below lo. Ranges may overlap; with
// more than 8, a buffer in the overlap of two is found through the
// later-starting one when it is inside it, and is otherwise pinned per
// job, which is always safe.
func (b *Batch) registered(lo, hi uintptr) bool {
	n := len(b.regs)
	if n == 0 {
		return false
	}
	if s := &b.regs[b.lastReg]; lo >= s.lo && hi <= s.hi {
		return true
	}
	if n <= 8 { // an engine's usual few: a scan is as fast
		for k := range b.regs {
			if s := &b.regs[k]; lo >= s.lo && hi <= s.hi {
				b.lastReg = k
				return true
			}
		}
		return false
	}
	i, found := b.regIndex(lo)
	if !found { // b.regs[i] starts above lo: the candidate is the one before
		i--
	}
	if i >= 0 && hi <= b.regs[i].hi {
		b.lastReg = i
		return true
	}
	return false
}

// regIndex is where a range starting at lo is, or would go, in b.regs, and
// whether one starts there.
func (b *Batch) regIndex(lo uintptr) (int, bool) {
	return slices.BinarySearchFunc(b.regs, lo, func(s span, lo uintptr) int { return cmp.Compare(s.lo, lo) })
}

// ErrRegistered is returned by Register when MaxRegistered ranges are
// registered already.
var ErrRegistered = errors.New("mb: too many registered memory ranges")

// Register declares mem (its whole backing array, up to cap) as memory
// that jobs may point into without being pinned one by one: where a
// Batch's per-job pinning would cost (each runtime.Pinner.Pin and Unpin
// of a Go buffer costs tens of nanoseconds, a Pin of other memory, which
// does nothing, about ten; see BenchmarkPin), register the long-lived
// memory the jobs use, like the memory that holds an engine's regions or
// its mbuf pool. Go memory is pinned once, here, until Unregister or Free;
// other memory is only recorded, and the caller keeps it mapped while it
// is registered. It is the slow path (it may allocate).
func (b *Batch) Register(mem []byte) error {
	if b.c == nil {
		panic("mb: batch used after Free")
	}
	if cap(mem) == 0 {
		return nil
	}
	if len(b.regs) == MaxRegistered {
		return ErrRegistered
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	p := new(runtime.Pinner)
	p.Pin(base)
	r := span{uintptr(base), uintptr(base) + uintptr(cap(mem))}
	i, _ := b.regIndex(r.lo)
	b.regs = slices.Insert(b.regs, i, r)
	b.regPins = slices.Insert(b.regPins, i, p)
	b.lastReg = 0
	return nil
}

// Unregister undoes the Register of mem (the same slice start). It panics
// if jobs are queued (they may point into it) and returns false if mem was
// not registered.
func (b *Batch) Unregister(mem []byte) bool {
	if b.n > 0 {
		panic("mb: Unregister with queued jobs")
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	i, ok := b.regIndex(lo)
	if !ok {
		return false
	}
	b.regPins[i].Unpin()
	b.regs = slices.Delete(b.regs, i, i+1)
	b.regPins = slices.Delete(b.regPins, i, i+1)
	b.lastReg = 0
	return true
}

// setIV copies the nonce into the job.
func setIV(j *C.mb_job, nonce []byte) {
	copy((*[aesni.NonceSize]byte)(unsafe.Pointer(&j.iv[0]))[:], nonce)
}

// setWant copies the received tag into the job.
func setWant(j *C.mb_job, tag []byte) {
	copy((*[aesni.TagSize]byte)(unsafe.Pointer(&j.want[0]))[:], tag)
}

// setAAD gives job i its additional data aad ‖ reqIV: a copy in the job's
// scratch, or (an AAD longer than the scratch, only possible without
// reqIV) the caller's buffer, pinned.
func (b *Batch) setAAD(i int, j *C.mb_job, aad, reqIV []byte) {
	if len(aad)+len(reqIV) > aadScratch {
		j.aad = b.pin(aad)
		j.aad_len = C.uint64_t(len(aad))
		return
	}
	s := b.aad[i][:]
	n := copy(s, aad)
	n += copy(s[n:], reqIV)
	j.aad = (*C.uint8_t)(unsafe.Pointer(&s[0]))
	j.aad_len = C.uint64_t(n)
}

// SealRequest queues aesni.AEAD.SealRequest: Run writes into tag the GMAC
// of aad under k and nonce.
func (b *Batch) SealRequest(k *Key, tag, nonce, aad []byte) (int, bool) {
	b.usable(k)
	checkNonce(nonce)
	if len(tag) != aesni.TagSize {
		panic("mb: tag must be 16 bytes")
	}
	i, j := b.job(k, C.MB_SEAL)
	if j == nil {
		return -1, false
	}
	setIV(j, nonce)
	b.setAAD(i, j, aad, nil)
	j.tag = b.pin(tag)
	return i, true
}

// OpenRequest queues aesni.AEAD.OpenRequest: the job succeeds if tag is
// the GMAC of aad under k and nonce. Nothing is written.
func (b *Batch) OpenRequest(k *Key, tag, nonce, aad []byte) (int, bool) {
	b.usable(k)
	checkNonce(nonce)
	if len(tag) != aesni.TagSize {
		return b.fail()
	}
	i, j := b.job(k, C.MB_OPEN)
	if j == nil {
		return -1, false
	}
	setIV(j, nonce)
	setWant(j, tag)
	b.setAAD(i, j, aad, nil)
	return i, true
}

// fail queues a job that fails (an open of a message too short).
func (b *Batch) fail() (int, bool) {
	i, j := b.job(nil, C.MB_FAIL)
	return i, j != nil
}

// SealResponse queues aesni.AEAD.SealResponse: Run encrypts plaintext into
// out[:len(plaintext)] and writes the tag to out[len(plaintext):], with
// additional data aad ‖ reqIV. out must be exactly len(plaintext)+16 bytes
// and either not overlap plaintext or start at the same address.
func (b *Batch) SealResponse(k *Key, out, plaintext, nonce, aad, reqIV []byte) (int, bool) {
	b.usable(k)
	checkNonce(nonce)
	n := len(plaintext)
	if len(out) != n+aesni.TagSize {
		panic("mb: out must be len(plaintext)+16 bytes")
	}
	checkCurry(aad, reqIV)
	if inexactOverlap(out, plaintext) {
		panic("mb: invalid buffer overlap")
	}
	i, j := b.job(k, C.MB_SEAL)
	if j == nil {
		return -1, false
	}
	setIV(j, nonce)
	b.setAAD(i, j, aad, reqIV)
	j.len = C.uint64_t(n)
	j.src = b.pin(plaintext)
	j.dst = b.pin(out)
	j.tag = (*C.uint8_t)(unsafe.Add(unsafe.Pointer(j.dst), n))
	return i, true
}

// GatherGap is the most zero bytes SealResponseGather puts between its
// two parts.
const GatherGap = C.MB_GATHER_GAP

// SealResponseGather queues aesni.AEAD.SealResponseGather: Run seals the
// message head ‖ gap zero bytes ‖ plaintext into out (its length plus
// 16), reading head and plaintext where they are (each byte once, by the
// cipher). Both parts must be non-empty, gap below GatherGap, and out
// must overlap neither part.
func (b *Batch) SealResponseGather(k *Key, out, head []byte, gap int, plaintext, nonce, aad, reqIV []byte) (int, bool) {
	b.usable(k)
	checkNonce(nonce)
	n := len(head) + gap + len(plaintext)
	switch {
	case len(head) == 0 || len(plaintext) == 0 || gap < 0 || gap >= GatherGap:
		panic("mb: SealResponseGather wants two non-empty parts and a gap below GatherGap")
	case len(out) != n+aesni.TagSize:
		panic("mb: out must be len(head)+gap+len(plaintext)+16 bytes")
	case overlap(out, head) || overlap(out, plaintext):
		panic("mb: invalid buffer overlap")
	}
	checkCurry(aad, reqIV)
	i, j := b.job(k, C.MB_SEAL_GATHER)
	if j == nil {
		return -1, false
	}
	setIV(j, nonce)
	b.setAAD(i, j, aad, reqIV)
	j.len = C.uint64_t(len(plaintext))
	j.src = b.pin(plaintext)
	j.head = b.pin(head)
	j.head_len = C.uint32_t(len(head))
	j.gap = C.uint32_t(gap)
	j.dst = b.pin(out)
	j.tag = (*C.uint8_t)(unsafe.Add(unsafe.Pointer(j.dst), n))
	return i, true
}

// OpenResponse queues aesni.AEAD.OpenResponse: verify before write. Run
// decrypts in (ciphertext ‖ tag) in place and copies the plaintext to dst
// (len(in)-16 bytes) only if the tag matched; on failure dst is untouched
// and in's ciphertext is zeroed. A forged response never writes dst.
func (b *Batch) OpenResponse(k *Key, dst, in, nonce, aad, reqIV []byte) (int, bool) {
	n, short := b.checkOpen(k, dst, in, nonce, aad, reqIV)
	if short {
		return b.fail()
	}
	i, j := b.openJob(k, C.MB_OPEN_COPY, in, n, nonce, aad, reqIV)
	if j == nil {
		return -1, false
	}
	j.dst = j.src
	if n > 0 {
		j.copy_to = b.pin(dst)
	}
	return i, true
}

// checkOpen makes the caller checks both response opens share (aesni's, in
// its order) and returns the plaintext length; short: in cannot hold a tag
// (the job is queued to fail).
func (b *Batch) checkOpen(k *Key, dst, in, nonce, aad, reqIV []byte) (n int, short bool) {
	b.usable(k)
	checkNonce(nonce)
	if len(in) < aesni.TagSize {
		return 0, true
	}
	n = len(in) - aesni.TagSize
	if len(dst) != n {
		panic("mb: dst must be len(in)-16 bytes")
	}
	checkCurry(aad, reqIV)
	return n, false
}

// openJob queues an open of in (n bytes of ciphertext, then the tag) with
// its IV, expected tag, AAD and source set; the caller sets where the
// plaintext goes. A nil job: the batch is full.
func (b *Batch) openJob(k *Key, kind C.uint32_t, in []byte, n int, nonce, aad, reqIV []byte) (int, *C.mb_job) {
	i, j := b.job(k, kind)
	if j == nil {
		return -1, nil
	}
	setIV(j, nonce)
	setWant(j, in[n:])
	b.setAAD(i, j, aad, reqIV)
	j.len = C.uint64_t(n)
	j.src = b.pin(in[:n])
	return i, j
}

// OpenResponseDirect queues aesni.AEAD.OpenResponseDirect: Run decrypts in
// straight into dst while it authenticates, and zeroes dst if the tag did
// not match. in is only read.
func (b *Batch) OpenResponseDirect(k *Key, dst, in, nonce, aad, reqIV []byte) (int, bool) {
	n, short := b.checkOpen(k, dst, in, nonce, aad, reqIV)
	if short {
		return b.fail()
	}
	if inexactOverlap(dst, in) {
		panic("mb: invalid buffer overlap")
	}
	i, j := b.openJob(k, C.MB_OPEN, in, n, nonce, aad, reqIV)
	if j == nil {
		return -1, false
	}
	j.dst = b.pin(dst)
	return i, true
}

// SealAuthFailure queues aesni.AEAD.SealAuthFailure: the tag of a
// REMOTE_AUTHENTICATION_FAILURE answer, additional data aad ‖ reqIV, under
// the reserved key k.
func (b *Batch) SealAuthFailure(k *Key, tag, nonce, aad, reqIV []byte) (int, bool) {
	b.usable(k)
	if !k.reserved {
		panic("mb: SealAuthFailure needs the reserved key")
	}
	if len(tag) != aesni.TagSize {
		panic("mb: tag must be 16 bytes")
	}
	return b.SealResponse(k, tag, nil, nonce, aad, reqIV)
}

// OpenAuthFailure queues aesni.AEAD.OpenAuthFailure: the job succeeds if
// tag is the tag SealAuthFailure would write. Nothing is written.
func (b *Batch) OpenAuthFailure(k *Key, tag, nonce, aad, reqIV []byte) (int, bool) {
	b.usable(k)
	if !k.reserved {
		panic("mb: OpenAuthFailure needs the reserved key")
	}
	checkNonce(nonce)
	if len(tag) != aesni.TagSize {
		return b.fail()
	}
	checkCurry(aad, reqIV)
	i, j := b.job(k, C.MB_OPEN)
	if j == nil {
		return -1, false
	}
	setIV(j, nonce)
	setWant(j, tag)
	b.setAAD(i, j, aad, reqIV)
	return i, true
}

// Run executes every queued job, in order, with one cgo call, and returns
// how many failed (opens that did not authenticate). Err and OK then tell
// each job's result, until the next Add. The batch is empty again, its Go
// buffers unpinned, and keys Released meanwhile are freed once their last
// job has run.
func (b *Batch) Run() int {
	if b.c != nil && b.c.hook_ran != 0 {
		b.Settle()
	}
	n := b.n
	if n == 0 {
		b.ran = 0
		return 0
	}
	b.runs++
	C.mb_run_addr(C.uintptr_t(uintptr(unsafe.Pointer(b.c))), C.uint32_t(n))
	failed := int(b.c.failed)
	b.done(n)
	b.ran = n
	b.checkLib()
	return failed
}

func (b *Batch) checkLib() {
	if e := b.c.lib_err; e != 0 {
		// Every argument was checked at Add: ipsec-mb refusing one is a
		// bug here. The affected opens failed; a seal wrote nothing.
		panic(fmt.Sprintf("mb: ipsec-mb rejected a job: %s", C.GoString(C.mb_strerror(e))))
	}
}

// Hook is the batch's run as a hook for another cgo library: fn is a C
// function of type void (*)(void *) that runs every job queued in the
// batch (if any) when called with arg, the batch's C memory. A library
// that crosses into C anyway (a port's poll step: dpdk.PortIO.SetPreTx)
// calls it inside its own crossing, on the batch's goroutine, so the
// jobs cost no crossing of their own; after that crossing the caller
// calls Settle. Only the goroutine that owns the batch may make the
// crossing that calls fn; fn and arg stay valid until Free.
func (b *Batch) Hook() (fn, arg unsafe.Pointer) {
	return unsafe.Pointer(C.mb_run_queued), unsafe.Pointer(b.c)
}

// Settle finishes a run the Hook made, as Run does after its own: the
// results become readable (OK, Err, until the next Add), Go buffers are
// unpinned, released keys freed. It returns how many jobs the hook ran (0:
// it did not run since the last Settle or Run). Add and Run settle first
// by themselves; call it after each crossing that may have called the
// hook, so pins and keys are not held longer than needed.
func (b *Batch) Settle() int {
	if b.c == nil {
		return 0
	}
	n := int(b.c.hook_ran)
	if n == 0 {
		return 0
	}
	if n != b.n {
		panic("mb: the hook ran a different number of jobs than were queued")
	}
	b.c.hook_ran = 0
	b.hookRuns++
	b.done(n)
	b.ran = n
	b.checkLib()
	return n
}

// callHook calls fn(arg) in one crossing, as a port's poll step calls a
// hook (for tests: Go cannot call a C function pointer).
func callHook(fn, arg unsafe.Pointer) { C.mb_call_hook((*[0]byte)(fn), arg) }

// Runs is the number of Runs that ran jobs: cgo crossings of this batch.
func (b *Batch) Runs() uint64 { return b.runs }

// HookRuns is the number of runs the Hook made inside another library's
// crossing (counted by Settle).
func (b *Batch) HookRuns() uint64 { return b.hookRuns }

// done forgets n jobs: keys and pins.
func (b *Batch) done(n int) {
	for i, k := range b.keys[:n] {
		if k != nil {
			k.pending--
			if k.pending == 0 && k.release {
				k.free()
			}
			b.keys[i] = nil
		}
	}
	for i := 0; i*pinsPerPinner < b.npin; i++ {
		b.pins[i].Unpin()
	}
	b.npin, b.nspan, b.n = 0, 0, 0
	if b.c != nil {
		b.c.queued = 0
	}
}

// OK reports whether job i of the last Run succeeded (seals always do).
// It panics if i is not a job of the last Run.
func (b *Batch) OK(i int) bool {
	if i < 0 || i >= b.ran {
		panic("mb: no result for this job")
	}
	return b.ok[i] == C.MB_RESULT_OK
}

// Err returns nil if job i of the last Run succeeded and aesni.ErrAuth if
// it failed (the single opaque error of package aesni).
func (b *Batch) Err(i int) error {
	if b.OK(i) {
		return nil
	}
	return aesni.ErrAuth
}

// Discard drops the queued jobs without running them (nothing is written)
// and unpins their buffers.
func (b *Batch) Discard() {
	b.done(b.n)
	b.ran = 0
	if b.c != nil {
		b.c.hook_ran = 0
	}
}

// Free discards the queued jobs and frees the batch's C memory.
func (b *Batch) Free() {
	if b.c == nil {
		return
	}
	b.Discard()
	for _, p := range b.regPins {
		p.Unpin()
	}
	b.regs, b.regPins = nil, nil
	C.mb_batch_free(b.c)
	b.c, b.jobs, b.aad, b.ok = nil, nil, nil, nil
}
