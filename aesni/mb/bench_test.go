package mb

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/onerma/onerma/aesni"
)

// The benchmarks process bursts of benchBurst messages per iteration, the
// way an engine core would: "aesni" calls aesni.AEAD once per message
// (crypto/cipher), "mb" queues the burst in a Batch and Runs it (one cgo
// call), with Go buffers (each pinned), "mb-mmap" the same with mmap'd
// buffers (memory the Go runtime does not manage, like mbufs and regions:
// Pin does nothing, but is still called), "mb-reg" with mmap'd buffers in
// memory registered with the batch (no Pin call per job: an engine that
// registers its mbuf pool and region memory). ns/msg is per message; MB/s
// counts payload bytes.

const benchBurst = 32

var benchSizes = []int{64, 1024, 4096}

// benchMsg is one response of a burst: its region source and destination,
// its frame (ciphertext ‖ tag) and a sealed copy to restore it from.
type benchMsg struct {
	src, dst, frame, sealed []byte
	nonce                   []byte
}

type benchSet struct {
	ref   *aesni.AEAD
	key   *Key
	b     *Batch
	aad   []byte // IPv4 addresses, UDP and OneRMA headers: 64 B
	reqIV []byte
	msgs  []benchMsg
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*31 + seed
	}
	return b
}

func newBenchSet(b *testing.B, n int, v variant) *benchSet {
	m := v.mem(b)
	k := aesni.Key(pattern(16, 1))
	s := &benchSet{
		ref:   mustAEAD(b, k),
		key:   mustKey(b, k),
		b:     mustBatch(b, benchBurst),
		aad:   pattern(64, 2),
		reqIV: pattern(aesni.NonceSize, 3),
		msgs:  make([]benchMsg, benchBurst),
	}
	for i := range s.msgs {
		x := &s.msgs[i]
		x.src = m.alloc(n, pattern(n, byte(i)))
		x.dst = m.alloc(n, nil)
		x.frame = m.alloc(n+aesni.TagSize, nil)
		x.nonce = pattern(aesni.NonceSize, byte(i))
		s.ref.SealResponse(x.frame, x.src, x.nonce, s.aad, s.reqIV)
		x.sealed = m.alloc(n+aesni.TagSize, x.frame)
	}
	if v.register {
		if err := s.b.Register(m.arena); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// variant is one backend of a benchmark.
type variant struct {
	name     string
	mem      func(b *testing.B) *mem
	mb       bool
	register bool
}

func benchMmap(b *testing.B) *mem { return mmapMem(b, 1<<20) }

var variants = []variant{
	{"aesni", func(*testing.B) *mem { return goMem() }, false, false},
	{"mb", func(*testing.B) *mem { return goMem() }, true, false},
	{"mb-mmap", benchMmap, true, false},
	{"mb-reg", benchMmap, true, true},
}

// runBursts runs body (one burst) until the benchmark ends and reports
// ns/msg.
func runBursts(b *testing.B, n int, body func()) {
	b.SetBytes(int64(n) * benchBurst)
	b.ReportAllocs()
	for b.Loop() {
		body()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBurst), "ns/msg")
}

func (s *benchSet) run(b *testing.B, want int) {
	if f := s.b.Run(); f != want {
		b.Fatalf("%d failures", f)
	}
}

// burst applies step to every message of the burst and, with mb, runs the
// batch the steps queued (one Run, no failure expected).
func (s *benchSet) burst(b *testing.B, v variant, step func(x *benchMsg)) {
	for i := range s.msgs {
		step(&s.msgs[i])
	}
	if v.mb {
		s.run(b, 0)
	}
}

// benchResponses runs body per message size and variant; body runs bursts
// of step (see burst).
func benchResponses(b *testing.B, step func(b *testing.B, s *benchSet, v variant, x *benchMsg)) {
	for _, n := range benchSizes {
		for _, v := range variants {
			b.Run(fmt.Sprintf("%d/%s", n, v.name), func(b *testing.B) {
				s := newBenchSet(b, n, v)
				runBursts(b, n, func() { s.burst(b, v, func(x *benchMsg) { step(b, s, v, x) }) })
			})
		}
	}
}

// benchRequests runs bursts of step per variant on 64-byte AADs (no
// payload), after prepare (nil: none) has run once per message.
func benchRequests(b *testing.B, prepare func(s *benchSet, x *benchMsg), step func(b *testing.B, s *benchSet, v variant, x *benchMsg)) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			s := newBenchSet(b, 0, v)
			if prepare != nil {
				for i := range s.msgs {
					prepare(s, &s.msgs[i])
				}
			}
			runBursts(b, 0, func() { s.burst(b, v, func(x *benchMsg) { step(b, s, v, x) }) })
		})
	}
}

// BenchmarkSealResponse: encrypt a burst of responses from a region into
// their frames, tag in the trailer, AAD 64 B ‖ request IV.
func BenchmarkSealResponse(b *testing.B) {
	benchResponses(b, func(b *testing.B, s *benchSet, v variant, x *benchMsg) {
		if v.mb {
			s.b.SealResponse(s.key, x.frame, x.src, x.nonce, s.aad, s.reqIV)
		} else {
			s.ref.SealResponse(x.frame, x.src, x.nonce, s.aad, s.reqIV)
		}
	})
}

// BenchmarkOpenResponseDirect: authenticate and decrypt a burst straight
// into the region.
func BenchmarkOpenResponseDirect(b *testing.B) {
	benchResponses(b, func(b *testing.B, s *benchSet, v variant, x *benchMsg) {
		if v.mb {
			s.b.OpenResponseDirect(s.key, x.dst, x.frame, x.nonce, s.aad, s.reqIV)
		} else if s.ref.OpenResponseDirect(x.dst, x.frame, x.nonce, s.aad, s.reqIV) != nil {
			b.Fatal("open")
		}
	})
}

// BenchmarkOpenResponse: verify before write (decrypt in the packet, copy
// to the region once the tag matched). Opening consumes the packet, so
// each message is restored first (a copy of n+16 bytes that an engine does
// not pay), as in aesni's BenchmarkOpenResponse.
func BenchmarkOpenResponse(b *testing.B) {
	benchResponses(b, func(b *testing.B, s *benchSet, v variant, x *benchMsg) {
		copy(x.frame, x.sealed)
		if v.mb {
			s.b.OpenResponse(s.key, x.dst, x.frame, x.nonce, s.aad, s.reqIV)
		} else if s.ref.OpenResponse(x.dst, x.frame, x.nonce, s.aad, s.reqIV) != nil {
			b.Fatal("open")
		}
	})
}

// BenchmarkSealRequest / OpenRequest: GMAC over a 64-byte AAD (a burst of
// READ requests).
func BenchmarkSealRequest(b *testing.B) {
	benchRequests(b, nil, func(b *testing.B, s *benchSet, v variant, x *benchMsg) {
		if v.mb {
			s.b.SealRequest(s.key, x.frame, x.nonce, s.aad)
		} else {
			s.ref.SealRequest(x.frame, x.nonce, s.aad)
		}
	})
}

func BenchmarkOpenRequest(b *testing.B) {
	seal := func(s *benchSet, x *benchMsg) { s.ref.SealRequest(x.frame, x.nonce, s.aad) }
	benchRequests(b, seal, func(b *testing.B, s *benchSet, v variant, x *benchMsg) {
		if v.mb {
			s.b.OpenRequest(s.key, x.frame, x.nonce, s.aad)
		} else if s.ref.OpenRequest(x.frame, x.nonce, s.aad) != nil {
			b.Fatal("open")
		}
	})
}

// BenchmarkGCMLimit is aesni's "aes-gcm-limit" per burst: seal 4 KB
// responses from a region and open them (verify before write) into
// another, the crypto of one 4 KB READ at both ends, per message. With mb
// a burst is two Runs (the opens need the seals' output).
func BenchmarkGCMLimit(b *testing.B) {
	const n = 4096
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			s := newBenchSet(b, n, v)
			runBursts(b, n, func() {
				for i := range s.msgs {
					x := &s.msgs[i]
					if v.mb {
						s.b.SealResponse(s.key, x.frame, x.src, x.nonce, s.aad, s.reqIV)
					} else {
						s.ref.SealResponse(x.frame, x.src, x.nonce, s.aad, s.reqIV)
						if s.ref.OpenResponse(x.dst, x.frame, x.nonce, s.aad, s.reqIV) != nil {
							b.Fatal("open")
						}
					}
				}
				if v.mb {
					s.run(b, 0)
					for i := range s.msgs {
						x := &s.msgs[i]
						s.b.OpenResponse(s.key, x.dst, x.frame, x.nonce, s.aad, s.reqIV)
					}
					s.run(b, 0)
				}
			})
			b.ReportMetric(float64(b.N*benchBurst)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkNewKey is the cache-miss cost on top of the derivation: C
// allocation and key expansion. BenchmarkKeySet re-expands in place.
func BenchmarkNewKey(b *testing.B) {
	k := aesni.Key(pattern(16, 1))
	b.ReportAllocs()
	for b.Loop() {
		key, err := NewKey(k)
		if err != nil {
			b.Fatal(err)
		}
		key.Free()
	}
}

func BenchmarkKeySet(b *testing.B) {
	key := mustKey(b, aesni.Key{})
	k := aesni.Key(pattern(16, 1))
	b.ReportAllocs()
	for b.Loop() {
		k[0]++
		key.Set(k)
	}
}

// BenchmarkPin is what pinning costs per buffer: runtime.Pinner.Pin of
// distinct Go buffers then Unpin ("go"), and Pin of mmap'd memory, which
// it leaves alone ("mmap"). A Batch pins each Go buffer of a job (dst and
// src: two per response) unless it lies in one it pinned already.
func BenchmarkPin(b *testing.B) {
	for _, name := range []string{"go", "mmap"} {
		b.Run(name, func(b *testing.B) {
			m := goMem()
			if name == "mmap" {
				m = mmapMem(b, 1<<20)
			}
			bufs := make([][]byte, benchBurst)
			for i := range bufs {
				bufs[i] = m.alloc(64, nil)
			}
			pins := make([]runtime.Pinner, (benchBurst+pinsPerPinner-1)/pinsPerPinner)
			b.ReportAllocs()
			for b.Loop() {
				for i, buf := range bufs {
					pins[i/pinsPerPinner].Pin(&buf[0])
				}
				for i := range pins {
					pins[i].Unpin()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBurst), "ns/pin")
		})
	}
}
