package mb

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/onerma/onerma/aesni"
	"golang.org/x/sys/unix"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustKey(t testing.TB, k aesni.Key) *Key {
	t.Helper()
	key, err := NewKey(k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(key.Release)
	return key
}

func mustReserved(t testing.TB) *Key {
	t.Helper()
	key, err := NewReservedKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(key.Release)
	return key
}

func mustBatch(t testing.TB, n int) *Batch {
	t.Helper()
	b, err := NewBatch(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Free)
	return b
}

func mustAEAD(t testing.TB, k aesni.Key) *aesni.AEAD {
	t.Helper()
	a, err := aesni.NewAEAD(k)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustReservedAEAD(t testing.TB) *aesni.AEAD {
	t.Helper()
	a, err := aesni.NewReservedAEAD()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// mem hands out buffers of one kind: Go heap, or an mmap'd arena (memory
// the Go runtime does not manage, like a DPDK mbuf or a region).
type mem struct {
	name  string
	arena []byte
	off   int
}

func goMem() *mem { return &mem{name: "go"} }

func mmapMem(t testing.TB, size int) *mem {
	t.Helper()
	a, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(a) })
	return &mem{name: "mmap", arena: a}
}

// alloc returns n bytes holding a copy of init (or zeros). The arena is a
// ring, much larger than what one batch and one test case hold at once.
func (m *mem) alloc(n int, init []byte) []byte {
	var b []byte
	if m.arena == nil {
		b = make([]byte, n)
	} else {
		if m.off+n > len(m.arena) {
			m.off = 0
		}
		b = m.arena[m.off : m.off+n : m.off+n]
		m.off += (n + 63) &^ 63
		clear(b)
	}
	copy(b, init)
	return b
}

// runner queues jobs into a batch, runs it when full, and checks each
// job's result against what aesni said.
type runner struct {
	t      testing.TB
	b      *Batch
	m      *mem
	checks []func(err error)
	idx    []int
	jobs   int
}

func newRunner(t testing.TB, b *Batch, m *mem) *runner { return &runner{t: t, b: b, m: m} }

// queue adds a job (add calls one Batch method) and the check of its
// result; a full batch is run first.
func (r *runner) queue(add func() (int, bool), check func(err error)) {
	i, ok := add()
	if !ok {
		if !r.b.Full() {
			r.t.Fatal("Add refused a job in a batch that is not full")
		}
		r.flush()
		if i, ok = add(); !ok {
			r.t.Fatal("Add refused a job in an empty batch")
		}
	}
	if i != len(r.idx) {
		r.t.Fatalf("job index %d, want %d", i, len(r.idx))
	}
	r.idx = append(r.idx, i)
	r.checks = append(r.checks, check)
	r.jobs++
}

func (r *runner) flush() {
	r.t.Helper()
	failed := r.b.Run()
	if r.b.Len() != 0 {
		r.t.Fatal("batch not empty after Run")
	}
	nf := 0
	for k, i := range r.idx {
		if !r.b.OK(i) {
			nf++
		}
		r.checks[k](r.b.Err(i))
	}
	if nf != failed {
		r.t.Fatalf("Run reported %d failures, results say %d", failed, nf)
	}
	r.idx, r.checks = r.idx[:0], r.checks[:0]
}

// keyPair is one key as both backends hold it.
type keyPair struct {
	mb  *Key
	ref *aesni.AEAD
}

func newKeyPairs(t testing.TB, r *rand.Rand, n int) []keyPair {
	ks := make([]keyPair, n)
	for i := range ks {
		k := aesni.Key(randBytes(r, aesni.KeySize))
		ks[i] = keyPair{mustKey(t, k), mustAEAD(t, k)}
	}
	return ks
}

func flipByte(r *rand.Rand, b []byte) {
	b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
}

// respCase queues, for one response message, every response method in
// both directions, plus a forgery, and checks them against aesni.
func respCase(r *runner, rng *rand.Rand, kp keyPair, n, aadLen int, curried bool) {
	t, m := r.t, r.m
	p := randBytes(rng, n)
	nonce := randBytes(rng, aesni.NonceSize)
	aad := randBytes(rng, aadLen)
	var reqIV []byte
	if curried {
		reqIV = randBytes(rng, aesni.NonceSize)
	}
	want := make([]byte, n+aesni.TagSize)
	kp.ref.SealResponse(want, p, nonce, aad, reqIV)
	where := fmt.Sprintf("n=%d aad=%d curried=%v mem=%s", n, aadLen, curried, m.name)

	// mb seals; aesni opens what mb sealed.
	src, out := m.alloc(n, p), m.alloc(n+aesni.TagSize, nil)
	r.queue(func() (int, bool) { return r.b.SealResponse(kp.mb, out, src, nonce, aad, reqIV) }, func(err error) {
		if err != nil {
			t.Fatalf("%s: SealResponse failed: %v", where, err)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("%s: SealResponse differs from aesni\n got %x\nwant %x", where, out, want)
		}
		got := make([]byte, n)
		if err := kp.ref.OpenResponseDirect(got, out, nonce, aad, reqIV); err != nil || !bytes.Equal(got, p) {
			t.Fatalf("%s: aesni cannot open mb's seal: %v", where, err)
		}
	})
	// In place (out starts where the plaintext is).
	inplace := m.alloc(n+aesni.TagSize, p)
	r.queue(func() (int, bool) {
		return r.b.SealResponse(kp.mb, inplace, inplace[:n], nonce, aad, reqIV)
	}, func(err error) {
		if err != nil || !bytes.Equal(inplace, want) {
			t.Fatalf("%s: in-place SealResponse differs: %v", where, err)
		}
	})

	// Gathered: the message split into a head, gap zeros and the rest,
	// from two places (n > 0: both parts non-empty).
	if n > 1 {
		h := 1 + rng.IntN(n-1)
		gap := min(rng.IntN(GatherGap), n-h-1)
		p := bytes.Clone(p)
		clear(p[h : h+gap]) // the message the gap makes
		want := make([]byte, n+aesni.TagSize)
		kp.ref.SealResponse(want, p, nonce, aad, reqIV)
		ref := make([]byte, n+aesni.TagSize)
		kp.ref.SealResponseGather(ref, p[:h], gap, p[h+gap:], nonce, aad, reqIV)
		if !bytes.Equal(ref, want) {
			t.Fatalf("%s head=%d gap=%d: aesni's SealResponseGather differs from SealResponse", where, h, gap)
		}
		head, tail, gout := m.alloc(h, p[:h]), m.alloc(n-h-gap, p[h+gap:]), m.alloc(n+aesni.TagSize, nil)
		r.queue(func() (int, bool) {
			return r.b.SealResponseGather(kp.mb, gout, head, gap, tail, nonce, aad, reqIV)
		}, func(err error) {
			if err != nil || !bytes.Equal(gout, want) {
				t.Fatalf("%s head=%d gap=%d: SealResponseGather differs from aesni: %v", where, h, gap, err)
			}
		})
	}

	// mb opens what aesni sealed: verify-before-write, then direct.
	in1, dst1 := m.alloc(n+aesni.TagSize, want), m.alloc(n, nil)
	r.queue(func() (int, bool) { return r.b.OpenResponse(kp.mb, dst1, in1, nonce, aad, reqIV) }, func(err error) {
		if err != nil || !bytes.Equal(dst1, p) {
			t.Fatalf("%s: OpenResponse: %v", where, err)
		}
		// aesni leaves the plaintext in the packet: so must mb.
		ref := bytes.Clone(want)
		if kp.ref.OpenResponse(make([]byte, n), ref, nonce, aad, reqIV) != nil || !bytes.Equal(in1, ref) {
			t.Fatalf("%s: OpenResponse left in different from aesni", where)
		}
	})
	in2, dst2 := m.alloc(n+aesni.TagSize, want), m.alloc(n, nil)
	r.queue(func() (int, bool) { return r.b.OpenResponseDirect(kp.mb, dst2, in2, nonce, aad, reqIV) }, func(err error) {
		if err != nil || !bytes.Equal(dst2, p) {
			t.Fatalf("%s: OpenResponseDirect: %v", where, err)
		}
		if !bytes.Equal(in2, want) {
			t.Fatalf("%s: OpenResponseDirect wrote in", where)
		}
	})

	// A forgery: one byte of ciphertext ‖ tag, aad, nonce or reqIV.
	bad := m.alloc(n+aesni.TagSize, want)
	badAAD, badNonce, badIV := bytes.Clone(aad), bytes.Clone(nonce), bytes.Clone(reqIV)
	fields := [][]byte{bad, badNonce}
	if len(badAAD) > 0 {
		fields = append(fields, badAAD)
	}
	if len(badIV) > 0 {
		fields = append(fields, badIV)
	}
	flipByte(rng, fields[rng.IntN(len(fields))])
	refIn := bytes.Clone(bad)
	if kp.ref.OpenResponse(make([]byte, n), refIn, badNonce, badAAD, badIV) != aesni.ErrAuth {
		t.Fatalf("%s: aesni accepted a forgery", where)
	}
	canary := bytes.Repeat([]byte{0xa5}, n)
	bad1, dst3 := m.alloc(n+aesni.TagSize, bad), m.alloc(n, canary)
	r.queue(func() (int, bool) { return r.b.OpenResponse(kp.mb, dst3, bad1, badNonce, badAAD, badIV) }, func(err error) {
		if err != aesni.ErrAuth {
			t.Fatalf("%s: OpenResponse accepted a forgery: %v", where, err)
		}
		if !bytes.Equal(dst3, canary) {
			t.Fatalf("%s: failed OpenResponse wrote dst", where)
		}
		if !bytes.Equal(bad1, refIn) {
			t.Fatalf("%s: failed OpenResponse left in different from aesni", where)
		}
	})
	bad2, dst4 := m.alloc(n+aesni.TagSize, bad), m.alloc(n, canary)
	r.queue(func() (int, bool) { return r.b.OpenResponseDirect(kp.mb, dst4, bad2, badNonce, badAAD, badIV) }, func(err error) {
		if err != aesni.ErrAuth {
			t.Fatalf("%s: OpenResponseDirect accepted a forgery: %v", where, err)
		}
		if !bytes.Equal(dst4, make([]byte, n)) {
			t.Fatalf("%s: failed OpenResponseDirect left data in dst", where)
		}
		if !bytes.Equal(bad2, bad) {
			t.Fatalf("%s: OpenResponseDirect wrote in", where)
		}
	})
}

// reqCase does the same for a request (GMAC) with an AAD of aadLen bytes.
func reqCase(r *runner, rng *rand.Rand, kp keyPair, aadLen int) {
	t, m := r.t, r.m
	nonce := randBytes(rng, aesni.NonceSize)
	aad := m.alloc(aadLen, randBytes(rng, aadLen))
	want := make([]byte, aesni.TagSize)
	kp.ref.SealRequest(want, nonce, aad)
	where := fmt.Sprintf("request aad=%d mem=%s", aadLen, m.name)

	tag := m.alloc(aesni.TagSize, nil)
	r.queue(func() (int, bool) { return r.b.SealRequest(kp.mb, tag, nonce, aad) }, func(err error) {
		if err != nil || !bytes.Equal(tag, want) {
			t.Fatalf("%s: SealRequest differs from aesni: %v\n got %x\nwant %x", where, err, tag, want)
		}
		if kp.ref.OpenRequest(tag, nonce, aad) != nil {
			t.Fatalf("%s: aesni cannot open mb's request", where)
		}
	})
	r.queue(func() (int, bool) { return r.b.OpenRequest(kp.mb, want, nonce, aad) }, func(err error) {
		if err != nil {
			t.Fatalf("%s: OpenRequest: %v", where, err)
		}
	})
	badTag, badNonce, badAAD := bytes.Clone(want), bytes.Clone(nonce), bytes.Clone(aad)
	fields := [][]byte{badTag, badNonce}
	if aadLen > 0 {
		fields = append(fields, badAAD)
	}
	flipByte(rng, fields[rng.IntN(len(fields))])
	if kp.ref.OpenRequest(badTag, badNonce, badAAD) != aesni.ErrAuth {
		t.Fatalf("%s: aesni accepted a forgery", where)
	}
	r.queue(func() (int, bool) { return r.b.OpenRequest(kp.mb, badTag, badNonce, badAAD) }, func(err error) {
		if err != aesni.ErrAuth {
			t.Fatalf("%s: OpenRequest accepted a forgery: %v", where, err)
		}
	})
}

// authFailureCase: REMOTE_AUTHENTICATION_FAILURE answers, reserved key.
func authFailureCase(r *runner, rng *rand.Rand, res *Key, ref *aesni.AEAD, aadLen int) {
	t := r.t
	nonce := randBytes(rng, aesni.NonceSize)
	aad := randBytes(rng, aadLen)
	reqIV := randBytes(rng, aesni.NonceSize)
	want := make([]byte, aesni.TagSize)
	ref.SealAuthFailure(want, nonce, aad, reqIV)
	where := fmt.Sprintf("auth failure aad=%d", aadLen)

	tag := r.m.alloc(aesni.TagSize, nil)
	r.queue(func() (int, bool) { return r.b.SealAuthFailure(res, tag, nonce, aad, reqIV) }, func(err error) {
		if err != nil || !bytes.Equal(tag, want) {
			t.Fatalf("%s: SealAuthFailure differs from aesni: %v", where, err)
		}
		if ref.OpenAuthFailure(tag, nonce, aad, reqIV) != nil {
			t.Fatalf("%s: aesni cannot open mb's answer", where)
		}
	})
	r.queue(func() (int, bool) { return r.b.OpenAuthFailure(res, want, nonce, aad, reqIV) }, func(err error) {
		if err != nil {
			t.Fatalf("%s: OpenAuthFailure: %v", where, err)
		}
	})
	badIV := bytes.Clone(reqIV)
	flipByte(rng, badIV)
	r.queue(func() (int, bool) { return r.b.OpenAuthFailure(res, want, nonce, aad, badIV) }, func(err error) {
		if err != aesni.ErrAuth {
			t.Fatalf("%s: OpenAuthFailure accepted another request's IV: %v", where, err)
		}
	})
}

// testSizes: every size up to 300, then random sizes up to 4096 (and
// 4096 itself).
func testSizes(rng *rand.Rand) []int {
	var s []int
	for n := 0; n <= 300; n++ {
		s = append(s, n)
	}
	for range 150 {
		s = append(s, 301+rng.IntN(4096-301))
	}
	return append(s, 4095, 4096)
}

// memKinds are the buffers the tests run with: Go heap buffers (each
// pinned by the batch), mmap'd ones (Pin does nothing), and both as one
// registered arena (never pinned per job).
func memKinds(t testing.TB) []struct {
	m        *mem
	register bool
} {
	goArena := &mem{name: "go-registered", arena: make([]byte, 16<<20)}
	mm := mmapMem(t, 16<<20)
	mm.name = "mmap-registered"
	return []struct {
		m        *mem
		register bool
	}{
		{goMem(), false},
		{mmapMem(t, 16<<20), false},
		{goArena, true},
		{mm, true},
	}
}

// TestEquivalence runs every method against aesni.AEAD, in mixed batches
// (random keys, kinds and sizes interleaved), with every kind of buffer.
func TestEquivalence(t *testing.T) {
	arch, err := Arch()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ipsec-mb %s, features %#x", arch, Features())
	for _, mk := range memKinds(t) {
		m := mk.m
		t.Run(m.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(m.name))))
			keys := newKeyPairs(t, rng, 5)
			res, resRef := mustReserved(t), mustReservedAEAD(t)
			b := mustBatch(t, 64)
			if mk.register {
				if err := b.Register(m.arena); err != nil {
					t.Fatal(err)
				}
			}
			r := newRunner(t, b, m)
			for i, n := range testSizes(rng) {
				kp := keys[rng.IntN(len(keys))]
				respCase(r, rng, kp, n, i%(aesni.MaxAADSize+1), i%2 == 1)
				if i%3 == 0 {
					// Requests: any AAD length, longer than the scratch too.
					reqCase(r, rng, keys[rng.IntN(len(keys))], (i*7)%301)
				}
				if i%5 == 0 {
					authFailureCase(r, rng, res, resRef, i%(aesni.MaxAADSize+1))
				}
			}
			r.flush()
			t.Logf("%d jobs", r.jobs)
		})
	}
}

// TestKnownAnswers: test cases 1-3 of McGrew and Viega, "The Galois/Counter
// Mode of Operation (GCM)", Appendix B, typed in from the specification.
func TestKnownAnswers(t *testing.T) {
	vectors := []struct{ key, iv, p, c, tag string }{
		{"00000000000000000000000000000000", "000000000000000000000000", "", "",
			"58e2fccefa7e3061367f1d57a4e7455a"},
		{"00000000000000000000000000000000", "000000000000000000000000",
			"00000000000000000000000000000000", "0388dace60b6a392f328c2b971b2fe78",
			"ab6e47d42cec13bdf53a67b21257bddf"},
		{"feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
			"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72" +
				"1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
			"42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e" +
				"21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
			"4d5c2af327cd64a62cf35abd2ba6fab4"},
	}
	b := mustBatch(t, 4)
	outs := make([][]byte, len(vectors))
	for i, v := range vectors {
		k := mustKey(t, aesni.Key(unhex(t, v.key)))
		p := unhex(t, v.p)
		outs[i] = make([]byte, len(p)+aesni.TagSize)
		b.SealResponse(k, outs[i], p, unhex(t, v.iv), nil, nil)
	}
	if b.Run() != 0 {
		t.Fatal("a seal failed")
	}
	for i, v := range vectors {
		if want := v.c + v.tag; hex.EncodeToString(outs[i]) != want {
			t.Errorf("TC%d: got %x want %s", i+1, outs[i], want)
		}
	}
}

// TestTamper flips every byte of ciphertext, tag, aad, nonce and request IV
// of a few messages, one forgery per job: every open fails, OpenResponse
// never writes dst and clears the packet's ciphertext like aesni,
// OpenResponseDirect zeroes dst; the untouched message still opens.
func TestTamper(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	kp := newKeyPairs(t, rng, 1)[0]
	res, resRef := mustReserved(t), mustReservedAEAD(t)
	m := goMem()
	r := newRunner(t, mustBatch(t, 32), m)
	for _, n := range []int{0, 1, 15, 16, 17, 64, 100} {
		p := randBytes(rng, n)
		nonce, aad, reqIV := randBytes(rng, 12), randBytes(rng, 64), randBytes(rng, 12)
		sealed := make([]byte, n+aesni.TagSize)
		kp.ref.SealResponse(sealed, p, nonce, aad, reqIV)
		canary := bytes.Repeat([]byte{0x3c}, n)
		forge := func(what string, i int, in, nonce, aad, reqIV []byte) {
			dst := m.alloc(n, canary)
			r.queue(func() (int, bool) { return r.b.OpenResponse(kp.mb, dst, in, nonce, aad, reqIV) }, func(err error) {
				if err != aesni.ErrAuth || !bytes.Equal(dst, canary) || !bytes.Equal(in[:n], make([]byte, n)) {
					t.Fatalf("n=%d %s byte %d: OpenResponse: err %v, dst or in wrong", n, what, i, err)
				}
			})
			in2 := bytes.Clone(in)
			dst2 := m.alloc(n, canary)
			r.queue(func() (int, bool) { return r.b.OpenResponseDirect(kp.mb, dst2, in2, nonce, aad, reqIV) }, func(err error) {
				if err != aesni.ErrAuth || !bytes.Equal(dst2, make([]byte, n)) {
					t.Fatalf("n=%d %s byte %d: OpenResponseDirect: err %v, dst not zeroed", n, what, i, err)
				}
			})
		}
		for i := range sealed {
			bad := bytes.Clone(sealed)
			bad[i] ^= 0x80 >> (i % 8)
			forge("ciphertext‖tag", i, bad, nonce, aad, reqIV)
		}
		for i := range aad {
			bad := bytes.Clone(aad)
			bad[i] ^= 1 << (i % 8)
			forge("aad", i, bytes.Clone(sealed), nonce, bad, reqIV)
		}
		for i := range nonce {
			bad := bytes.Clone(nonce)
			bad[i] ^= 1 << (i % 8)
			forge("nonce", i, bytes.Clone(sealed), bad, aad, reqIV)
		}
		for i := range reqIV {
			bad := bytes.Clone(reqIV)
			bad[i] ^= 1 << (i % 8)
			forge("reqIV", i, bytes.Clone(sealed), nonce, aad, bad)
		}
		forge("reqIV dropped", 0, bytes.Clone(sealed), nonce, aad, nil)
		good, dst := bytes.Clone(sealed), m.alloc(n, nil)
		r.queue(func() (int, bool) { return r.b.OpenResponse(kp.mb, dst, good, nonce, aad, reqIV) }, func(err error) {
			if err != nil || !bytes.Equal(dst, p) {
				t.Fatalf("n=%d: the untouched message does not open: %v", n, err)
			}
		})
	}

	// Requests and authentication failure answers.
	nonce, aad, reqIV := randBytes(rng, 12), randBytes(rng, 64), randBytes(rng, 12)
	tag, afTag := make([]byte, 16), make([]byte, 16)
	kp.ref.SealRequest(tag, nonce, aad)
	resRef.SealAuthFailure(afTag, nonce, aad, reqIV)
	for fi, field := range [][]byte{tag, nonce, aad, afTag, reqIV} {
		for i := range field {
			field[i] ^= 1
			t2, n2, a2, af2, iv2 := bytes.Clone(tag), bytes.Clone(nonce), bytes.Clone(aad), bytes.Clone(afTag), bytes.Clone(reqIV)
			field[i] ^= 1
			if fi <= 2 {
				r.queue(func() (int, bool) { return r.b.OpenRequest(kp.mb, t2, n2, a2) }, func(err error) {
					if err != aesni.ErrAuth {
						t.Fatalf("OpenRequest accepted field %d byte %d flipped", fi, i)
					}
				})
			}
			if fi >= 1 {
				r.queue(func() (int, bool) { return r.b.OpenAuthFailure(res, af2, n2, a2, iv2) }, func(err error) {
					if err != aesni.ErrAuth {
						t.Fatalf("OpenAuthFailure accepted field %d byte %d flipped", fi, i)
					}
				})
			}
		}
	}
	r.queue(func() (int, bool) { return r.b.OpenRequest(kp.mb, tag, nonce, aad) }, func(err error) {
		if err != nil {
			t.Fatal("untouched request does not open")
		}
	})
	r.queue(func() (int, bool) { return r.b.OpenAuthFailure(res, afTag, nonce, aad, reqIV) }, func(err error) {
		if err != nil {
			t.Fatal("untouched auth failure answer does not open")
		}
	})
	// A message under another key fails too.
	other := newKeyPairs(t, rng, 1)[0]
	r.queue(func() (int, bool) { return r.b.OpenRequest(other.mb, tag, nonce, aad) }, func(err error) {
		if err != aesni.ErrAuth {
			t.Fatal("OpenRequest accepted a request under another key")
		}
	})
	r.flush()
	t.Logf("%d forgeries and controls", r.jobs)
}

// TestWireLengths: an open whose input cannot hold a tag fails at Run,
// writes nothing, and takes a job like any other; aesni agrees.
func TestWireLengths(t *testing.T) {
	kp := newKeyPairs(t, rand.New(rand.NewPCG(3, 3)), 1)[0]
	res := mustReserved(t)
	b := mustBatch(t, 8)
	nonce, aad := make([]byte, 12), make([]byte, 64)
	short := make([]byte, 15)
	dst := []byte{}
	canary := bytes.Repeat([]byte{7}, 15)
	copy(short, canary)
	if kp.ref.OpenResponse(dst, short, nonce, aad, nil) != aesni.ErrAuth ||
		kp.ref.OpenRequest(short, nonce, aad) != aesni.ErrAuth {
		t.Fatal("aesni accepted a short message")
	}
	var idx []int
	for _, add := range []func() (int, bool){
		func() (int, bool) { return b.OpenRequest(kp.mb, short, nonce, aad) },
		func() (int, bool) { return b.OpenRequest(kp.mb, make([]byte, 17), nonce, aad) },
		func() (int, bool) { return b.OpenResponse(kp.mb, dst, short, nonce, aad, nil) },
		// A bad reqIV is not even looked at when the input is short (as in aesni).
		func() (int, bool) { return b.OpenResponseDirect(kp.mb, dst, short[:3], nonce, aad, []byte{1}) },
		func() (int, bool) { return b.OpenAuthFailure(res, short, nonce, aad, nil) },
	} {
		i, ok := add()
		if !ok {
			t.Fatal("Add refused")
		}
		idx = append(idx, i)
	}
	if kp.mb.Pending() != 0 {
		t.Fatal("a failed job holds its key")
	}
	if f := b.Run(); f != len(idx) {
		t.Fatalf("Run: %d failures, want %d", f, len(idx))
	}
	for _, i := range idx {
		if b.OK(i) || b.Err(i) != aesni.ErrAuth {
			t.Fatalf("job %d succeeded", i)
		}
	}
	if !bytes.Equal(short, canary) {
		t.Fatal("a failed job wrote its input")
	}
}

// TestFullBatch: a full batch refuses the next Add without side effects;
// Run empties it; indexes start again at 0.
func TestFullBatch(t *testing.T) {
	kp := newKeyPairs(t, rand.New(rand.NewPCG(4, 4)), 1)[0]
	const capacity = 8
	b := mustBatch(t, capacity)
	if b.Cap() != capacity {
		t.Fatalf("Cap %d", b.Cap())
	}
	nonce, aad := make([]byte, 12), make([]byte, 64)
	tags := make([][]byte, capacity+1)
	for i := range tags {
		tags[i] = make([]byte, 16)
		nonce[11] = byte(i)
		j, ok := b.SealRequest(kp.mb, tags[i], nonce, aad)
		if i < capacity {
			if !ok || j != i {
				t.Fatalf("Add %d: (%d, %v)", i, j, ok)
			}
			continue
		}
		if ok || j != -1 || !b.Full() || b.Len() != capacity || kp.mb.Pending() != capacity {
			t.Fatalf("Add to a full batch: (%d, %v), len %d, pending %d", j, ok, b.Len(), kp.mb.Pending())
		}
	}
	if b.Run() != 0 || b.Len() != 0 || kp.mb.Pending() != 0 {
		t.Fatal("Run")
	}
	for i := range capacity {
		nonce[11] = byte(i)
		want := make([]byte, 16)
		kp.ref.SealRequest(want, nonce, aad)
		if !b.OK(i) || !bytes.Equal(tags[i], want) {
			t.Fatalf("job %d", i)
		}
	}
	if !bytes.Equal(tags[capacity], make([]byte, 16)) {
		t.Fatal("the refused job wrote its tag")
	}
	mustPanic(t, "result of a job that was not run", func() { b.OK(capacity) })
	if j, ok := b.SealRequest(kp.mb, tags[0], nonce, aad); !ok || j != 0 {
		t.Fatalf("Add after Run: (%d, %v)", j, ok)
	}
	mustPanic(t, "result after a new Add", func() { b.OK(0) })
	b.Discard()
	if b.Len() != 0 || kp.mb.Pending() != 0 || b.Run() != 0 {
		t.Fatal("Discard")
	}
}

// TestHook: the hook runs the queued jobs inside another crossing (here
// mb_call_hook's), writing what Run writes; Settle finishes the run (keys,
// results, counts); a hook with nothing queued does nothing, and Run and
// Add settle a run nobody settled.
func TestHook(t *testing.T) {
	kp := newKeyPairs(t, rand.New(rand.NewPCG(5, 5)), 1)[0]
	b := mustBatch(t, 8)
	fn, arg := b.Hook()
	nonce, aad := make([]byte, 12), make([]byte, 64)
	tags := make([][]byte, 3)
	for i := range tags {
		tags[i] = make([]byte, 16)
		nonce[11] = byte(i)
		if _, ok := b.SealRequest(kp.mb, tags[i], nonce, aad); !ok {
			t.Fatal("SealRequest")
		}
	}
	callHook(fn, arg)
	if kp.mb.Pending() != 3 || b.Runs() != 0 {
		t.Fatalf("before Settle: pending %d, runs %d", kp.mb.Pending(), b.Runs())
	}
	if n := b.Settle(); n != 3 || b.Len() != 0 || kp.mb.Pending() != 0 || b.HookRuns() != 1 || b.Runs() != 0 {
		t.Fatalf("Settle = %d: len %d, pending %d, hook runs %d, runs %d", n, b.Len(), kp.mb.Pending(), b.HookRuns(), b.Runs())
	}
	for i := range tags {
		nonce[11] = byte(i)
		want := make([]byte, 16)
		kp.ref.SealRequest(want, nonce, aad)
		if !b.OK(i) || !bytes.Equal(tags[i], want) {
			t.Fatalf("job %d: the hook's seal differs from aesni's", i)
		}
	}
	callHook(fn, arg) // nothing queued
	if b.Settle() != 0 || b.HookRuns() != 1 {
		t.Fatal("a hook with nothing queued ran something")
	}
	// Unsettled: the next Add settles, and Run runs only what came after.
	b.SealRequest(kp.mb, tags[0], nonce, aad)
	callHook(fn, arg)
	b.SealRequest(kp.mb, tags[1], nonce, aad)
	if b.HookRuns() != 2 || b.Len() != 1 || kp.mb.Pending() != 1 {
		t.Fatalf("Add did not settle: hook runs %d, len %d, pending %d", b.HookRuns(), b.Len(), kp.mb.Pending())
	}
	callHook(fn, arg)
	if b.Run() != 0 || b.Runs() != 0 || b.HookRuns() != 3 || kp.mb.Pending() != 0 {
		t.Fatalf("Run did not settle first: runs %d, hook runs %d, pending %d", b.Runs(), b.HookRuns(), kp.mb.Pending())
	}
	b.SealRequest(kp.mb, tags[2], nonce, aad)
	if b.Run() != 0 || b.Runs() != 1 {
		t.Fatalf("Run: runs %d", b.Runs())
	}
	if a := testing.AllocsPerRun(100, func() {
		b.SealRequest(kp.mb, tags[0], nonce, aad)
		callHook(fn, arg)
		b.Settle()
	}); a != 0 {
		t.Errorf("%v allocations per hooked run", a)
	}
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s: no panic", what)
		}
	}()
	fn()
}

// TestMisusePanics: what aesni.AEAD asserts, a Batch asserts too, and a
// refused call queues nothing.
func TestMisusePanics(t *testing.T) {
	k := aesni.Key{9}
	key, ref := mustKey(t, k), mustAEAD(t, k)
	res, resRef := mustReserved(t), mustReservedAEAD(t)
	b := mustBatch(t, 4)
	n12, n11, a := make([]byte, 12), make([]byte, 11), make([]byte, 64)
	t16, t15 := make([]byte, 16), make([]byte, 15)
	p := make([]byte, 32)
	out := make([]byte, 48)
	overlap := make([]byte, 64)
	long := make([]byte, aesni.MaxAADSize+1)
	cases := []struct {
		name string
		ref  func()
		mb   func()
	}{
		{"SealRequest short nonce", func() { ref.SealRequest(t16, n11, a) }, func() { b.SealRequest(key, t16, n11, a) }},
		{"SealRequest short tag", func() { ref.SealRequest(t15, n12, a) }, func() { b.SealRequest(key, t15, n12, a) }},
		{"OpenRequest short nonce", func() { ref.OpenRequest(t16, n11, a) }, func() { b.OpenRequest(key, t16, n11, a) }},
		{"SealResponse short out", func() { ref.SealResponse(out[:47], p, n12, a, nil) }, func() { b.SealResponse(key, out[:47], p, n12, a, nil) }},
		{"SealResponse bad reqIV", func() { ref.SealResponse(out, p, n12, a, n11) }, func() { b.SealResponse(key, out, p, n12, a, n11) }},
		{"SealResponse long curried aad", func() { ref.SealResponse(out, p, n12, long, n12) }, func() { b.SealResponse(key, out, p, n12, long, n12) }},
		{"SealResponse overlap", func() { ref.SealResponse(overlap[1:49], overlap[:32], n12, a, nil) }, func() { b.SealResponse(key, overlap[1:49], overlap[:32], n12, a, nil) }},
		{"SealResponseGather short out", func() { ref.SealResponseGather(out[:47], p[:8], 0, p[8:], n12, a, nil) }, func() { b.SealResponseGather(key, out[:47], p[:8], 0, p[8:], n12, a, nil) }},
		{"SealResponseGather negative gap", func() { ref.SealResponseGather(out, p[:8], -1, p[7:], n12, a, nil) }, func() { b.SealResponseGather(key, out, p[:8], -1, p[7:], n12, a, nil) }},
		{"SealResponseGather overlap", func() { b.SealResponseGather(key, overlap[:48], overlap[:8], 0, p[8:], n12, a, nil) }, func() { b.SealResponseGather(key, overlap[:48], p[:8], 0, overlap[8:32], n12, a, nil) }},
		{"SealResponseGather empty head", func() { b.SealResponseGather(key, out, nil, 0, p, n12, a, nil) }, func() { b.SealResponseGather(key, out[:16+GatherGap], p[:0:1], GatherGap, p[:0], n12, a, nil) }},
		{"OpenResponse short dst", func() { ref.OpenResponse(p[:31], out, n12, a, nil) }, func() { b.OpenResponse(key, p[:31], out, n12, a, nil) }},
		{"OpenResponse bad reqIV", func() { ref.OpenResponse(p, out, n12, a, n11) }, func() { b.OpenResponse(key, p, out, n12, a, n11) }},
		{"OpenResponseDirect short dst", func() { ref.OpenResponseDirect(p[:31], out, n12, a, nil) }, func() { b.OpenResponseDirect(key, p[:31], out, n12, a, nil) }},
		{"OpenResponseDirect overlap", func() { ref.OpenResponseDirect(overlap[1:33], overlap[:48], n12, a, nil) }, func() { b.OpenResponseDirect(key, overlap[1:33], overlap[:48], n12, a, nil) }},
		{"SealAuthFailure not reserved", func() { ref.SealAuthFailure(t16, n12, a, n12) }, func() { b.SealAuthFailure(key, t16, n12, a, n12) }},
		{"SealAuthFailure short tag", func() { resRef.SealAuthFailure(t15, n12, a, n12) }, func() { b.SealAuthFailure(res, t15, n12, a, n12) }},
		{"OpenAuthFailure not reserved", func() { ref.OpenAuthFailure(t16, n12, a, n12) }, func() { b.OpenAuthFailure(key, t16, n12, a, n12) }},
		{"OpenAuthFailure bad reqIV", func() { resRef.OpenAuthFailure(t16, n12, a, n11) }, func() { b.OpenAuthFailure(res, t16, n12, a, n11) }},
	}
	for _, c := range cases {
		mustPanic(t, "aesni "+c.name, c.ref)
		mustPanic(t, "mb "+c.name, c.mb)
		if b.Len() != 0 || key.Pending() != 0 || res.Pending() != 0 {
			t.Fatalf("%s: a refused call queued a job", c.name)
		}
	}
	// In place (same start) is allowed, as in crypto/cipher.
	if _, ok := b.SealResponse(key, overlap[:48], overlap[:32], n12, a, nil); !ok {
		t.Fatal("in-place SealResponse refused")
	}
	b.Run()
}

// TestKeyLifecycle: Release waits for the last queued job, Free and Set
// refuse a key with queued jobs, Set re-expands in place, a freed key
// cannot be queued.
func TestKeyLifecycle(t *testing.T) {
	k1, k2 := aesni.Key{1}, aesni.Key{2}
	key, err := NewKey(k1)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Matches(&k1) || key.Matches(&k2) || key.Reserved() {
		t.Fatal("Matches")
	}
	b := mustBatch(t, 4)
	nonce, aad, tag := make([]byte, 12), make([]byte, 64), make([]byte, 16)
	b.SealRequest(key, tag, nonce, aad)
	b.SealRequest(key, tag, nonce, aad)
	if key.Pending() != 2 {
		t.Fatalf("Pending %d", key.Pending())
	}
	mustPanic(t, "Free with queued jobs", key.Free)
	mustPanic(t, "Set with queued jobs", func() { key.Set(k2) })
	b.Run()
	want := make([]byte, 16)
	mustAEAD(t, k1).SealRequest(want, nonce, aad)
	if !bytes.Equal(tag, want) {
		t.Fatal("tag under k1")
	}

	key.Set(k2)
	if !key.Matches(&k2) {
		t.Fatal("Set: Matches")
	}
	b.SealRequest(key, tag, nonce, aad)
	key.Release()
	if key.Freed() {
		t.Fatal("Release freed a key with a queued job")
	}
	b.Run()
	if !key.Freed() || key.Matches(&k2) {
		t.Fatal("Release did not free the key after its last job")
	}
	mustAEAD(t, k2).SealRequest(want, nonce, aad)
	if !bytes.Equal(tag, want) {
		t.Fatal("tag under k2 (Set)")
	}
	mustPanic(t, "queue a freed key", func() { b.SealRequest(key, tag, nonce, aad) })
	key.Free() // twice: nothing

	// Discard also completes a Release.
	key2, _ := NewKey(k1)
	b.SealRequest(key2, tag, nonce, aad)
	key2.Release()
	b.Discard()
	if !key2.Freed() {
		t.Fatal("Discard did not free a released key")
	}

	res, _ := NewReservedKey()
	if !res.Reserved() {
		t.Fatal("reserved")
	}
	res.Set(aesni.ReservedKey())
	if res.Reserved() {
		t.Fatal("Set keeps the reserved mark")
	}
	res.Free()

	b2, _ := NewBatch(2)
	b2.Free()
	mustPanic(t, "use a freed batch", func() { b2.SealRequest(mustKey(t, k1), tag, nonce, aad) })
	b2.Free()
}

// TestAllocs: queuing and running batches allocates nothing in steady
// state, with Go buffers (pinned) and with mmap'd ones.
func TestAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	keys := newKeyPairs(t, rng, 3)
	res := mustReserved(t)
	const capacity = 64
	for _, mk := range memKinds(t) {
		m := mk.m
		b := mustBatch(t, capacity)
		if mk.register {
			if err := b.Register(m.arena); err != nil {
				t.Fatal(err)
			}
		}
		type bufs struct{ p, out, in, dst, tag, bigAAD []byte }
		bs := make([]bufs, capacity)
		for i := range bs {
			n := 64 + 64*(i%4)
			bs[i] = bufs{m.alloc(n, nil), m.alloc(n+16, nil), m.alloc(n+16, nil), m.alloc(n, nil), m.alloc(16, nil), m.alloc(300, nil)}
		}
		nonce, aad, reqIV := randBytes(rng, 12), randBytes(rng, 64), randBytes(rng, 12)
		fill := func() {
			for i := range capacity {
				k := keys[i%len(keys)].mb
				x := &bs[i]
				var ok bool
				switch i % 7 {
				case 0:
					_, ok = b.SealResponse(k, x.out, x.p, nonce, aad, reqIV)
				case 1:
					_, ok = b.OpenResponse(k, x.dst, x.in, nonce, aad, reqIV)
				case 2:
					_, ok = b.OpenResponseDirect(k, x.dst, x.in, nonce, aad, reqIV)
				case 3:
					_, ok = b.SealRequest(k, x.tag, nonce, aad)
				case 4:
					_, ok = b.OpenRequest(k, x.tag, nonce, x.bigAAD)
				case 5:
					_, ok = b.SealAuthFailure(res, x.tag, nonce, aad, reqIV)
				case 6:
					_, ok = b.SealResponse(k, x.out, x.p, nonce, x.bigAAD, nil)
				}
				if !ok {
					t.Fatal("Add refused")
				}
			}
		}
		allocs := testing.AllocsPerRun(100, func() {
			fill()
			b.Run()
		})
		if allocs != 0 {
			t.Errorf("%s buffers: %.1f allocations per batch of %d", m.name, allocs, capacity)
		}
	}
}

// TestRegister: the limit, Unregister's rules, and a registered Go buffer
// staying usable (pinned) after the Pinner of per-job pins is unpinned.
func TestRegister(t *testing.T) {
	b := mustBatch(t, 4)
	var arenas [][]byte
	for i := range MaxRegistered {
		a := make([]byte, 4096)
		if err := b.Register(a); err != nil {
			t.Fatalf("Register %d: %v", i, err)
		}
		arenas = append(arenas, a)
	}
	if err := b.Register(make([]byte, 64)); err != ErrRegistered {
		t.Fatalf("Register beyond the limit: %v", err)
	}
	if b.Unregister(make([]byte, 64)) {
		t.Fatal("Unregister of memory never registered")
	}
	key := mustKey(t, aesni.Key{3})
	ref := mustAEAD(t, aesni.Key{3})
	nonce, aad := make([]byte, 12), make([]byte, 64)
	tag := arenas[3][100:116]
	b.SealRequest(key, tag, nonce, aad)
	mustPanic(t, "Unregister with queued jobs", func() { b.Unregister(arenas[3]) })
	if b.npin != 0 {
		t.Fatal("a buffer inside registered memory was pinned per job")
	}
	b.Run()
	want := make([]byte, 16)
	ref.SealRequest(want, nonce, aad)
	if !bytes.Equal(tag, want) {
		t.Fatal("tag")
	}
	for _, a := range arenas {
		if !b.Unregister(a) {
			t.Fatal("Unregister")
		}
	}
	if len(b.regs) != 0 {
		t.Fatal("registrations left")
	}
	b.SealRequest(key, tag, nonce, aad)
	if b.npin != 1 {
		t.Fatal("an unregistered buffer was not pinned")
	}
	b.Run()
}

// TestRegisteredLookup checks the registered-range lookup against a scan of
// every range: with disjoint ranges (an engine's regions, pool and staging
// buffers) it finds exactly the buffers that lie inside one range; with
// overlapping ones it may miss (the buffer is then pinned per job, which
// is safe) but never claims a buffer outside every range.
func TestRegisteredLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	const n, size = 300, 4096
	arena := make([]byte, 2*n*size)
	base := uintptr(unsafe.Pointer(&arena[0]))
	scan := func(b *Batch, lo, hi uintptr) bool {
		for _, s := range b.regs {
			if lo >= s.lo && hi <= s.hi {
				return true
			}
		}
		return false
	}
	query := func(t *testing.T, b *Batch, disjoint bool) {
		t.Helper()
		for _, r := range b.regs { // each range's edges
			for _, q := range [][2]uintptr{{r.lo, r.hi}, {r.lo, r.hi + 1}, {r.lo - 1, r.hi}, {r.hi - 1, r.hi}, {r.lo, r.lo + 1}} {
				got, want := b.registered(q[0], q[1]), scan(b, q[0], q[1])
				if got && !want || disjoint && got != want {
					t.Fatalf("[%#x, %#x): registered %v, a scan says %v", q[0]-base, q[1]-base, got, want)
				}
			}
		}
		for range 20000 {
			lo := base + uintptr(rng.IntN(len(arena)))
			hi := lo + 1 + uintptr(rng.IntN(2*size))
			got, want := b.registered(lo, hi), scan(b, lo, hi)
			if got && !want {
				t.Fatalf("[%#x, %#x) found registered but lies in no range", lo-base, hi-base)
			}
			if disjoint && got != want {
				t.Fatalf("[%#x, %#x): registered %v, a scan says %v", lo-base, hi-base, got, want)
			}
		}
	}
	// Up to 8 ranges are scanned, more are searched.
	few := mustBatch(t, 4)
	for i := range 8 {
		if err := few.Register(arena[2*i*size : (2*i+1)*size : (2*i+1)*size]); err != nil {
			t.Fatal(err)
		}
	}
	query(t, few, true)
	b := mustBatch(t, 4)
	// Every other 4 KB of the arena, registered in random order.
	var mems [][]byte
	for _, i := range rng.Perm(n) {
		m := arena[2*i*size : (2*i+1)*size : (2*i+1)*size]
		if err := b.Register(m); err != nil {
			t.Fatal(err)
		}
		mems = append(mems, m)
	}
	if !slices.IsSortedFunc(b.regs, func(x, y span) int { return cmp.Compare(x.lo, y.lo) }) {
		t.Fatal("registered ranges not sorted")
	}
	query(t, b, true)
	// Half of them gone.
	for _, m := range mems[:n/2] {
		if !b.Unregister(m) {
			t.Fatal("Unregister")
		}
	}
	if len(b.regs) != n-n/2 || len(b.regPins) != len(b.regs) {
		t.Fatalf("%d ranges and %d pinners left, want %d", len(b.regs), len(b.regPins), n-n/2)
	}
	query(t, b, true)
	// Overlapping ranges on top.
	for range 40 {
		lo := rng.IntN(len(arena) - 4*size)
		m := arena[lo : lo+1+rng.IntN(4*size)]
		if err := b.Register(m[:len(m):len(m)]); err != nil {
			t.Fatal(err)
		}
	}
	query(t, b, false)
}

// TestArch: with ArchEnv set, that code path is the one running.
func TestArch(t *testing.T) {
	a, err := Arch()
	if err != nil {
		t.Fatal(err)
	}
	if want := os.Getenv(ArchEnv); want != "" && want != "auto" && a != want {
		t.Fatalf("Arch() = %q with %s=%s", a, ArchEnv, want)
	}
	t.Logf("arch %s", a)
}

// TestArchs re-runs the equivalence tests on every ipsec-mb code path this
// CPU can run (a CI machine without AVX-512 or VAES takes another path
// than this one), each in a child process since the path is chosen once.
func TestArchs(t *testing.T) {
	if os.Getenv(ArchEnv) != "" {
		t.Skip("in a child")
	}
	if testing.Short() {
		t.Skip("short")
	}
	ran := 0
	for _, arch := range []string{"sse", "avx", "avx2", "avx512"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^(TestArch|TestEquivalence|TestTamper|TestKnownAnswers)$", "-test.v")
		cmd.Env = append(os.Environ(), ArchEnv+"="+arch)
		out, err := cmd.CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "CPU flags") || strings.Contains(string(out), "cpu flags") {
				t.Logf("%s: not on this CPU", arch)
				continue
			}
			t.Fatalf("%s: %v\n%s", arch, err, out)
		}
		if !strings.Contains(string(out), "arch "+arch) {
			t.Fatalf("%s: the child did not run on it:\n%s", arch, out)
		}
		ran++
		t.Logf("%s: ok", arch)
	}
	if ran == 0 {
		t.Fatal("no code path ran")
	}
}
