package aesni

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"fmt"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustAEAD(t testing.TB, k Key) *AEAD {
	t.Helper()
	a, err := NewAEAD(k)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func refGCM(t testing.TB, k []byte) cipher.AEAD {
	t.Helper()
	b, err := aes.NewCipher(k)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The AES-128 test cases 1-4 of McGrew and Viega, "The Galois/Counter Mode
// of Operation (GCM)", Appendix B (also NIST's GCM test vectors), typed in
// from the specification.
var gcmVectors = []struct {
	name            string
	key, iv, p, a   string
	c, tag          string
	aadSplit        int // test case 4: aad = A[:8], reqIV = A[8:] (curried)
	usesRequestPath bool
}{
	{
		name: "TC1",
		key:  "00000000000000000000000000000000",
		iv:   "000000000000000000000000",
		tag:  "58e2fccefa7e3061367f1d57a4e7455a",
	},
	{
		name: "TC2",
		key:  "00000000000000000000000000000000",
		iv:   "000000000000000000000000",
		p:    "00000000000000000000000000000000",
		c:    "0388dace60b6a392f328c2b971b2fe78",
		tag:  "ab6e47d42cec13bdf53a67b21257bddf",
	},
	{
		name: "TC3",
		key:  "feffe9928665731c6d6a8f9467308308",
		iv:   "cafebabefacedbaddecaf888",
		p: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72" +
			"1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
		c: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e" +
			"21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
		tag: "4d5c2af327cd64a62cf35abd2ba6fab4",
	},
	{
		name: "TC4",
		key:  "feffe9928665731c6d6a8f9467308308",
		iv:   "cafebabefacedbaddecaf888",
		p: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72" +
			"1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
		a: "feedfacedeadbeeffeedfacedeadbeefabaddad2",
		c: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e" +
			"21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
		tag:      "5bc94fbc3221a5db94fae95ae7121a47",
		aadSplit: 8,
	},
}

func TestGCMKnownAnswers(t *testing.T) {
	for _, v := range gcmVectors {
		t.Run(v.name, func(t *testing.T) {
			k := Key(unhex(t, v.key))
			iv, p, a := unhex(t, v.iv), unhex(t, v.p), unhex(t, v.a)
			want := append(unhex(t, v.c), unhex(t, v.tag)...)
			aad, reqIV := a, []byte(nil)
			if v.aadSplit > 0 {
				aad, reqIV = a[:v.aadSplit], a[v.aadSplit:]
			}
			g := mustAEAD(t, k)

			// The reference agrees with the specification.
			if got := refGCM(t, k[:]).Seal(nil, iv, p, a); !bytes.Equal(got, want) {
				t.Fatalf("crypto/cipher: got %x, want %x", got, want)
			}

			out := make([]byte, len(p)+TagSize)
			g.SealResponse(out, p, iv, aad, reqIV)
			if !bytes.Equal(out, want) {
				t.Fatalf("SealResponse (-want +got):\n-%x\n+%x", want, out)
			}
			if len(p) == 0 && len(reqIV) == 0 {
				tag := make([]byte, TagSize)
				g.SealRequest(tag, iv, aad)
				if !bytes.Equal(tag, want) {
					t.Fatalf("SealRequest (-want +got):\n-%x\n+%x", want, tag)
				}
				if err := g.OpenRequest(tag, iv, aad); err != nil {
					t.Fatalf("OpenRequest: %v", err)
				}
			}

			dst := make([]byte, len(p))
			if err := g.OpenResponseDirect(dst, want, iv, aad, reqIV); err != nil || !bytes.Equal(dst, p) {
				t.Fatalf("OpenResponseDirect: %v, got %x want %x", err, dst, p)
			}
			clear(dst)
			in := bytes.Clone(want)
			if err := g.OpenResponse(dst, in, iv, aad, reqIV); err != nil || !bytes.Equal(dst, p) {
				t.Fatalf("OpenResponse: %v, got %x want %x", err, dst, p)
			}
		})
	}
}

// A response frame as the engine lays it out: AAD (IPv4 addresses, UDP
// header, OneRMA header with the IV at offset 32), payload, trailer.
type testFrame struct {
	buf   []byte
	aad   []byte
	nonce []byte // inside aad
	body  []byte // payload ‖ trailer
}

func newTestFrame(plen int) testFrame {
	const aadLen = 64
	buf := make([]byte, aadLen+plen+TagSize)
	for i := range aadLen {
		buf[i] = byte(i*7 + 1)
	}
	f := testFrame{buf: buf, aad: buf[:aadLen], body: buf[aadLen:]}
	f.nonce = f.aad[16+32 : 16+32+NonceSize]
	PutNonce(f.nonce, [4]byte{10, 0, 0, 2}, 0x0102030405060708)
	return f
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*31 + seed
	}
	return b
}

func TestCurryingMatchesReference(t *testing.T) {
	k := Key(pattern(16, 9))
	g, ref := mustAEAD(t, k), refGCM(t, k[:])
	reqIV := pattern(NonceSize, 77)
	for _, n := range []int{0, 1, 15, 16, 17, 64, 1000, 4096} {
		f := newTestFrame(n)
		p := pattern(n, 3)
		g.SealResponse(f.body, p, f.nonce, f.aad, reqIV)
		want := ref.Seal(nil, f.nonce, p, append(bytes.Clone(f.aad), reqIV...))
		if !bytes.Equal(f.body, want) {
			t.Fatalf("n=%d: curried seal differs from crypto/cipher over aad‖reqIV", n)
		}
		// The same message without currying, or curried with another
		// request's IV, must not open.
		dst := make([]byte, n)
		if err := g.OpenResponseDirect(dst, f.body, f.nonce, f.aad, nil); err != ErrAuth {
			t.Fatalf("n=%d: opened without the request IV: %v", n, err)
		}
		other := bytes.Clone(reqIV)
		other[11]++
		if err := g.OpenResponseDirect(dst, f.body, f.nonce, f.aad, other); err != ErrAuth {
			t.Fatalf("n=%d: opened with another request IV: %v", n, err)
		}
		if err := g.OpenResponseDirect(dst, f.body, f.nonce, f.aad, reqIV); err != nil || !bytes.Equal(dst, p) {
			t.Fatalf("n=%d: round trip: %v", n, err)
		}
	}
}

// SealResponseGather seals the message its parts and gap make, as
// SealResponse of that message in one buffer does.
func TestSealResponseGather(t *testing.T) {
	g := mustAEAD(t, Key(pattern(16, 5)))
	reqIV := pattern(NonceSize, 7)
	for _, c := range []struct{ head, gap, tail int }{{64, 0, 1000}, {32, 32, 3000}, {1, 63, 1}, {17, 5, 16}} {
		n := c.head + c.gap + c.tail
		msg := pattern(n, 11)
		clear(msg[c.head : c.head+c.gap])
		f := newTestFrame(n)
		g.SealResponse(f.body, msg, f.nonce, f.aad, reqIV)
		out := make([]byte, n+TagSize)
		g.SealResponseGather(out, msg[:c.head], c.gap, bytes.Clone(msg[c.head+c.gap:]), f.nonce, f.aad, reqIV)
		if !bytes.Equal(out, f.body) {
			t.Fatalf("%+v: gathered seal differs from the seal of the message", c)
		}
	}
}

// flipEach calls fn once per bit of b with that bit flipped, then restores it.
func flipEach(b []byte, fn func(i int)) {
	for i := range 8 * len(b) {
		b[i/8] ^= 1 << (i % 8)
		fn(i)
		b[i/8] ^= 1 << (i % 8)
	}
}

func TestRequestTamper(t *testing.T) {
	g := mustAEAD(t, Key(pattern(16, 1)))
	f := newTestFrame(0)
	tag := f.body
	g.SealRequest(tag, f.nonce, f.aad)
	if err := g.OpenRequest(tag, f.nonce, f.aad); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	// The nonce lies inside the AAD (the header's IV field); flip it both
	// ways: as the AEAD nonce alone, and in the header bytes.
	nonce := bytes.Clone(f.nonce)
	for _, c := range []struct {
		name string
		b    []byte
	}{{"tag", tag}, {"aad", f.aad}, {"nonce", nonce}} {
		flipEach(c.b, func(i int) {
			if err := g.OpenRequest(tag, nonce, f.aad); err != ErrAuth {
				t.Fatalf("%s bit %d flipped: got %v, want ErrAuth", c.name, i, err)
			}
		})
	}
	other := mustAEAD(t, Key(pattern(16, 2)))
	if err := other.OpenRequest(tag, nonce, f.aad); err != ErrAuth {
		t.Fatalf("opened under another key: %v", err)
	}
	if err := g.OpenRequest(tag[:15], nonce, f.aad); err != ErrAuth {
		t.Fatalf("short tag: %v", err)
	}
}

func TestResponseTamper(t *testing.T) {
	const n = 64
	g := mustAEAD(t, Key(pattern(16, 5)))
	p := pattern(n, 11)
	reqIV := pattern(NonceSize, 200)
	f := newTestFrame(n)
	g.SealResponse(f.body, p, f.nonce, f.aad, reqIV)
	sealed := bytes.Clone(f.body)
	nonce := bytes.Clone(f.nonce)
	ct, tag := f.body[:n], f.body[n:]

	const canary = 0xa5
	dst := make([]byte, n)
	in := make([]byte, len(f.body))
	cases := []struct {
		name string
		b    []byte
	}{{"tag", tag}, {"ciphertext", ct}, {"aad", f.aad}, {"nonce", nonce}, {"reqIV", reqIV}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flipEach(c.b, func(i int) {
				// Verify-before-write: dst keeps its contents.
				for j := range dst {
					dst[j] = canary
				}
				copy(in, f.body)
				if err := g.OpenResponse(dst, in, nonce, f.aad, reqIV); err != ErrAuth {
					t.Fatalf("OpenResponse, bit %d flipped: got %v, want ErrAuth", i, err)
				}
				if !bytes.Equal(dst, bytes.Repeat([]byte{canary}, n)) {
					t.Fatalf("OpenResponse, bit %d flipped: dst written", i)
				}
				if bytes.Contains(in, p[:16]) {
					t.Fatalf("OpenResponse, bit %d flipped: plaintext left in the packet", i)
				}
				// Direct: dst zeroed.
				for j := range dst {
					dst[j] = canary
				}
				if err := g.OpenResponseDirect(dst, f.body, nonce, f.aad, reqIV); err != ErrAuth {
					t.Fatalf("OpenResponseDirect, bit %d flipped: got %v, want ErrAuth", i, err)
				}
				if !bytes.Equal(dst, make([]byte, n)) {
					t.Fatalf("OpenResponseDirect, bit %d flipped: dst not zeroed: %x", i, dst)
				}
			})
			if !bytes.Equal(f.body, sealed) {
				t.Fatal("OpenResponseDirect modified its input")
			}
		})
	}
	// Every flip was restored: the message opens again.
	copy(in, f.body)
	if err := g.OpenResponse(dst, in, nonce, f.aad, reqIV); err != nil || !bytes.Equal(dst, p) {
		t.Fatalf("intact response: %v", err)
	}
	// Truncated or too-short input.
	if err := g.OpenResponse(nil, in[:TagSize-1], nonce, f.aad, reqIV); err != ErrAuth {
		t.Fatalf("short input: %v", err)
	}
	if err := g.OpenResponseDirect(dst[:n-1], f.body[:len(f.body)-1], nonce, f.aad, reqIV); err != ErrAuth {
		t.Fatalf("truncated input: %v", err)
	}
}

func TestAuthFailureAnswers(t *testing.T) {
	r, err := NewReservedAEAD()
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := NewReservedAEAD() // another engine
	f := newTestFrame(0)
	reqIV := pattern(NonceSize, 42)
	r.SealAuthFailure(f.body, f.nonce, f.aad, reqIV)
	if err := r2.OpenAuthFailure(f.body, f.nonce, f.aad, reqIV); err != nil {
		t.Fatalf("another engine rejects the answer: %v", err)
	}
	// It is exactly a curried response with an empty payload under the
	// reserved key.
	want := refGCM(t, []byte(ReservedKeyText)).Seal(nil, f.nonce, nil, append(bytes.Clone(f.aad), reqIV...))
	if !bytes.Equal(f.body, want) {
		t.Fatalf("answer tag %x, want %x", f.body, want)
	}
	reqIV[0] ^= 1
	if err := r2.OpenAuthFailure(f.body, f.nonce, f.aad, reqIV); err != ErrAuth {
		t.Fatalf("answer for another request accepted: %v", err)
	}
	reqIV[0] ^= 1
	// A K_d AEAD may not use the reserved helpers, and does not open them.
	g := mustAEAD(t, Key(pattern(16, 1)))
	if err := g.OpenResponseDirect(nil, f.body, f.nonce, f.aad, reqIV); err != ErrAuth {
		t.Fatalf("K_d opened a reserved-key answer: %v", err)
	}
	mustPanic(t, "SealAuthFailure with K_d", func() { g.SealAuthFailure(f.body, f.nonce, f.aad, reqIV) })
	mustPanic(t, "OpenAuthFailure with K_d", func() { _ = g.OpenAuthFailure(f.body, f.nonce, f.aad, reqIV) })
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	fn()
}

func TestMisusePanics(t *testing.T) {
	g := mustAEAD(t, Key{})
	nonce, tag, iv := make([]byte, 12), make([]byte, 16), make([]byte, 12)
	mustPanic(t, "short nonce", func() { g.SealRequest(tag, nonce[:11], nil) })
	mustPanic(t, "short tag", func() { g.SealRequest(tag[:15], nonce, nil) })
	mustPanic(t, "out size", func() { g.SealResponse(make([]byte, 20), make([]byte, 5), nonce, nil, nil) })
	mustPanic(t, "dst size", func() { _ = g.OpenResponse(make([]byte, 3), make([]byte, 20), nonce, nil, nil) })
	mustPanic(t, "dst size direct", func() { _ = g.OpenResponseDirect(make([]byte, 3), make([]byte, 20), nonce, nil, nil) })
	mustPanic(t, "reqIV size", func() { g.SealResponse(tag, nil, nonce, nil, iv[:5]) })
	mustPanic(t, "aad size", func() { g.SealResponse(tag, nil, nonce, make([]byte, MaxAADSize+1), iv) })
	mustPanic(t, "offset", func() { PutResponseNonce(nonce, [4]byte{}, 0, 65) })
	// MaxAADSize itself is fine.
	g.SealResponse(tag, nil, nonce, make([]byte, MaxAADSize), iv)
}

func TestNonces(t *testing.T) {
	nonce := make([]byte, NonceSize)
	PutNonce(nonce, [4]byte{192, 168, 1, 2}, 0x1122334455667788)
	if want := unhex(t, "c0a801021122334455667788"); !bytes.Equal(nonce, want) {
		t.Fatalf("PutNonce: %x, want %x", nonce, want)
	}
	if a, c := NonceCounter(nonce); a != [4]byte{192, 168, 1, 2} || c != 0x1122334455667788 {
		t.Fatalf("NonceCounter: %v %x", a, c)
	}
	for _, c := range []struct {
		opLen uint32
		span  uint64
	}{{0, 1}, {1, 1}, {64, 1}, {65, 2}, {4096, 64}, {4095, 64}} {
		if got := ResponseSpan(c.opLen); got != c.span {
			t.Errorf("ResponseSpan(%d) = %d, want %d", c.opLen, got, c.span)
		}
	}
	// Chunks of one answer get distinct counters within its span.
	seen := map[uint64]bool{}
	for off := uint64(0); off < 4096; off += ChunkAlign {
		PutResponseNonce(nonce, [4]byte{10, 0, 0, 1}, 1000, off)
		_, c := NonceCounter(nonce)
		if c < 1000 || c >= 1000+ResponseSpan(4096) || seen[c] {
			t.Fatalf("offset %d: counter %d outside span or repeated", off, c)
		}
		seen[c] = true
	}
}

func TestHotPathAllocs(t *testing.T) {
	g := mustAEAD(t, Key(pattern(16, 1)))
	r, _ := NewReservedAEAD()
	reqIV := pattern(NonceSize, 3)
	for _, n := range []int{0, 64, 4096} {
		f := newTestFrame(n)
		p := pattern(n, 1)
		dst := make([]byte, n)
		in := make([]byte, len(f.body))
		bad := make([]byte, len(f.body))
		g.SealResponse(bad, p, f.nonce, f.aad, nil) // not curried: fails to open
		tag := make([]byte, TagSize)
		g.SealRequest(tag, f.nonce, f.aad)
		nonce, rtag := make([]byte, NonceSize), make([]byte, TagSize)
		cases := map[string]func(){
			"SealRequest": func() { g.SealRequest(tag, f.nonce, f.aad) },
			"OpenRequest": func() {
				if g.OpenRequest(tag, f.nonce, f.aad) != nil {
					panic("open")
				}
			},
			"OpenRequest/fail": func() { _ = g.OpenRequest(tag, f.nonce[:NonceSize], f.aad[1:]) },
			"SealResponse":     func() { g.SealResponse(f.body, p, f.nonce, f.aad, reqIV) },
			"OpenResponse": func() {
				copy(in, f.body)
				if g.OpenResponse(dst, in, f.nonce, f.aad, reqIV) != nil {
					panic("open")
				}
			},
			"OpenResponse/fail": func() {
				copy(in, bad)
				_ = g.OpenResponse(dst, in, f.nonce, f.aad, reqIV)
			},
			"OpenResponseDirect": func() {
				if g.OpenResponseDirect(dst, f.body, f.nonce, f.aad, reqIV) != nil {
					panic("open")
				}
			},
			"OpenResponseDirect/fail": func() { _ = g.OpenResponseDirect(dst, bad, f.nonce, f.aad, reqIV) },
			"SealAuthFailure":         func() { r.SealAuthFailure(rtag, f.nonce, f.aad, reqIV) },
			"PutResponseNonce":        func() { PutResponseNonce(nonce, [4]byte{1, 2, 3, 4}, 99, 128) },
		}
		g.SealResponse(f.body, p, f.nonce, f.aad, reqIV)
		for name, fn := range cases {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				if a := testing.AllocsPerRun(100, fn); a != 0 {
					t.Errorf("%v allocs per run, want 0", a)
				}
			})
		}
	}
}
