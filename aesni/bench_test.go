package aesni

import (
	"crypto/aes"
	"fmt"
	"testing"
	"time"
)

var benchSizes = []int{64, 1024, 4096}

// benchResponse is a sealed response frame, its region source and
// destination, and the request IV it answers.
type benchResponse struct {
	g      *AEAD
	f      testFrame
	src    []byte
	dst    []byte
	sealed []byte
	reqIV  []byte
}

func newBenchResponse(b *testing.B, n int) *benchResponse {
	r := &benchResponse{
		g:     mustAEAD(b, Key(pattern(16, 1))),
		f:     newTestFrame(n),
		src:   pattern(n, 2),
		dst:   make([]byte, n),
		reqIV: pattern(NonceSize, 3),
	}
	r.g.SealResponse(r.f.body, r.src, r.f.nonce, r.f.aad, r.reqIV)
	r.sealed = append([]byte(nil), r.f.body...)
	return r
}

// BenchmarkSealResponse: encrypt n bytes from a region into a frame and
// write the tag into its trailer (a READ response's sending side).
func BenchmarkSealResponse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := newBenchResponse(b, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				r.g.SealResponse(r.f.body, r.src, r.f.nonce, r.f.aad, r.reqIV)
			}
		})
	}
}

// BenchmarkOpenResponseDirect: authenticate and decrypt a frame straight
// into the region, one pass.
func BenchmarkOpenResponseDirect(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := newBenchResponse(b, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if r.g.OpenResponseDirect(r.dst, r.f.body, r.f.nonce, r.f.aad, r.reqIV) != nil {
					b.Fatal("open")
				}
			}
		})
	}
}

// BenchmarkOpenResponse: verify-before-write (decrypt in the packet, then
// copy to the region). Opening consumes the packet, so each iteration also
// restores it: one extra copy of n+16 bytes that the engine does not pay
// (compare BenchmarkCopy).
func BenchmarkOpenResponse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := newBenchResponse(b, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				copy(r.f.body, r.sealed)
				if r.g.OpenResponse(r.dst, r.f.body, r.f.nonce, r.f.aad, r.reqIV) != nil {
					b.Fatal("open")
				}
			}
		})
	}
}

// BenchmarkCopy is the cost of one memmove of n bytes, in cache.
func BenchmarkCopy(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			src, dst := pattern(n, 1), make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkOpenResponseForged: the cost of rejecting a forged response.
func BenchmarkOpenResponseForged(b *testing.B) {
	r := newBenchResponse(b, 1024)
	r.sealed[5] ^= 1
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		copy(r.f.body, r.sealed)
		if r.g.OpenResponse(r.dst, r.f.body, r.f.nonce, r.f.aad, r.reqIV) == nil {
			b.Fatal("forgery accepted")
		}
	}
}

// BenchmarkSealRequest / OpenRequest: GMAC over a 64-byte AAD (a READ
// request).
func BenchmarkSealRequest(b *testing.B) {
	g, f := mustAEAD(b, Key{1}), newTestFrame(0)
	b.ReportAllocs()
	for b.Loop() {
		g.SealRequest(f.body, f.nonce, f.aad)
	}
}

func BenchmarkOpenRequest(b *testing.B) {
	g, f := mustAEAD(b, Key{1}), newTestFrame(0)
	g.SealRequest(f.body, f.nonce, f.aad)
	b.ReportAllocs()
	for b.Loop() {
		if g.OpenRequest(f.body, f.nonce, f.aad) != nil {
			b.Fatal("open")
		}
	}
}

// BenchmarkGCMLimit is one core's AES-128-GCM ceiling at 4 KB: per
// iteration it seals a 4 KB response from a region and opens it into
// another region (verify-before-write), the crypto work of one 4 KB READ
// at both ends. This is the "aes-gcm-limit" row of make bench.
func BenchmarkGCMLimit(b *testing.B) {
	const n = 4096
	r := newBenchResponse(b, n)
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		r.g.SealResponse(r.f.body, r.src, r.f.nonce, r.f.aad, r.reqIV)
		if r.g.OpenResponse(r.dst, r.f.body, r.f.nonce, r.f.aad, r.reqIV) != nil {
			b.Fatal("open")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkDeriveKey expands K_r and derives K_d (the one-shot function).
func BenchmarkDeriveKey(b *testing.B) {
	kr := Key(pattern(16, 1))
	b.ReportAllocs()
	for b.Loop() {
		_ = DeriveKey(kr, [4]byte{10, 0, 0, 1}, 4242, 1)
	}
}

// BenchmarkDeriverDerive derives K_d with K_r already expanded: one AES
// block.
func BenchmarkDeriverDerive(b *testing.B) {
	d := NewDeriver(Key(pattern(16, 1)))
	b.ReportAllocs()
	pid := uint32(0)
	for b.Loop() {
		pid++
		_ = d.Derive([4]byte{10, 0, 0, 1}, pid, 1)
	}
}

// BenchmarkNewAEAD is what a cache miss costs on top of the derivation:
// the key schedule and GHASH tables.
func BenchmarkNewAEAD(b *testing.B) {
	k := Key(pattern(16, 1))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewAEAD(k); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAESBlock is the raw one-block AES-128 encryption.
func BenchmarkAESBlock(b *testing.B) {
	c, _ := aes.NewCipher(pattern(16, 1))
	in, out := make([]byte, 16), make([]byte, 16)
	for b.Loop() {
		c.Encrypt(out, in)
	}
}

func BenchmarkCacheGetHit(b *testing.B) {
	c := NewCache(4096, 1)
	for i := range 4000 {
		c.insert(ck(uint32(i%16), uint32(i)), &AEAD{})
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if c.Get(ck(uint32(i%16), uint32(i))) == nil {
			b.Fatal("miss")
		}
		i++
		if i == 4000 {
			i = 0
		}
	}
}

// BenchmarkCacheMiss: derive K_d, build its AEAD, evict by CLOCK.
func BenchmarkCacheMiss(b *testing.B) {
	c := NewCache(256, 1)
	d := NewDeriver(Key{7})
	b.ReportAllocs()
	pid := uint32(0)
	for b.Loop() {
		pid++
		if _, err := c.GetOrDerive(ck(1, pid), d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIVLaneNext(b *testing.B) {
	l := NewVolatileIVSource(IVConfig{}).NewLane()
	nonce := make([]byte, NonceSize)
	b.ReportAllocs()
	for b.Loop() {
		if l.NextNonce(nonce, [4]byte{10, 0, 0, 1}) != nil {
			b.Fatal("next")
		}
	}
}

// BenchmarkIVLaneNextDurable draws from a lane of a state-file source whose
// Block is small enough that the run crosses several reservations (each a
// write and an fsync, made by the source's reserver goroutine) but large
// enough that the reserver keeps up at this rate (~0.4e9 draws a second:
// half a block lasts ~350 ms, seven reserver periods). Only a draw that
// finds its range used up does more than an increment: it takes a new
// range (a compare-and-swap). max-µs/cross is the slowest of those draws
// (each timed alone): microseconds at most, never an fsync. stalls/op
// counts draws that found the source dry (ErrIVPending), fsyncs the
// reservations made during the run.
func BenchmarkIVLaneNextDurable(b *testing.B) {
	s, err := OpenIVSource(IVConfig{Path: b.TempDir() + "/iv.state", Block: 1 << 28})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := s.NewLane()
	if err := l.Refill(); err != nil {
		b.Fatal(err)
	}
	nonce := make([]byte, NonceSize)
	var worst time.Duration
	crosses := 0
	b.ReportAllocs()
	for b.Loop() {
		if l.next < l.end {
			if err := l.NextNonce(nonce, [4]byte{10, 0, 0, 1}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		crosses++
		t0 := time.Now()
		err := l.NextNonce(nonce, [4]byte{10, 0, 0, 1})
		worst = max(worst, time.Since(t0))
		if err != nil && err != ErrIVPending {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(l.Stats().Stalls)/float64(b.N), "stalls/op")
	b.ReportMetric(float64(s.Stats().Reservations-1), "fsyncs")
	b.ReportMetric(float64(crosses), "crosses")
	b.ReportMetric(float64(worst.Nanoseconds())/1e3, "max-µs/cross")
}
