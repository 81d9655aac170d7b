package aesni

import (
	"bytes"
	"testing"
)

// fit returns b cut or zero-padded to n bytes.
func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

// FuzzSealOpen compares the AEAD with crypto/cipher's AES-GCM used the
// plain way (aad ‖ request IV as one slice), round-trips every open, and
// checks that one flipped bit anywhere in the sealed message is rejected
// by both, with dst left as each open promises. Seeds live in
// testdata/fuzz/FuzzSealOpen.
func FuzzSealOpen(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), []byte("nonce-nonce!"), []byte("header"), []byte("request-iv12"), []byte("payload"), uint16(3))
	f.Add([]byte{}, []byte{}, []byte{}, []byte{}, []byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, keyB, nonceB, aad, reqIVB, p []byte, flip uint16) {
		k := Key(fit(keyB, KeySize))
		nonce := fit(nonceB, NonceSize)
		if len(aad) > MaxAADSize {
			aad = aad[:MaxAADSize]
		}
		var reqIV []byte
		if len(reqIVB) > 0 {
			reqIV = fit(reqIVB, NonceSize)
		}
		g := mustAEAD(t, k)
		ref := refGCM(t, k[:])
		full := append(bytes.Clone(aad), reqIV...)

		want := ref.Seal(nil, nonce, p, full)
		out := make([]byte, len(p)+TagSize)
		g.SealResponse(out, p, nonce, aad, reqIV)
		if !bytes.Equal(out, want) {
			t.Fatalf("SealResponse differs from crypto/cipher:\n got %x\nwant %x", out, want)
		}
		if len(p) == 0 && reqIV == nil {
			tag := make([]byte, TagSize)
			g.SealRequest(tag, nonce, aad)
			if !bytes.Equal(tag, want) {
				t.Fatalf("SealRequest differs from crypto/cipher")
			}
			if err := g.OpenRequest(tag, nonce, aad); err != nil {
				t.Fatalf("OpenRequest: %v", err)
			}
		}

		dst := make([]byte, len(p))
		if err := g.OpenResponseDirect(dst, out, nonce, aad, reqIV); err != nil || !bytes.Equal(dst, p) {
			t.Fatalf("OpenResponseDirect: %v", err)
		}
		clear(dst)
		if err := g.OpenResponse(dst, bytes.Clone(out), nonce, aad, reqIV); err != nil || !bytes.Equal(dst, p) {
			t.Fatalf("OpenResponse: %v", err)
		}

		// One flipped bit of ciphertext ‖ tag ‖ aad ‖ reqIV ‖ nonce.
		bad, badAAD, badIV, badNonce := bytes.Clone(out), bytes.Clone(aad), bytes.Clone(reqIV), bytes.Clone(nonce)
		fields := [][]byte{bad, badAAD, badIV, badNonce}
		bits := 0
		for _, b := range fields {
			bits += 8 * len(b)
		}
		i := int(flip) % bits
		for _, b := range fields {
			if i < 8*len(b) {
				b[i/8] ^= 1 << (i % 8)
				break
			}
			i -= 8 * len(b)
		}
		if _, err := ref.Open(nil, badNonce, bad, append(bytes.Clone(badAAD), badIV...)); err == nil {
			t.Fatal("crypto/cipher accepted a flipped bit")
		}
		canary := bytes.Repeat([]byte{0x5a}, len(p))
		copy(dst, canary)
		if err := g.OpenResponse(dst, bytes.Clone(bad), badNonce, badAAD, badIV); err != ErrAuth {
			t.Fatalf("OpenResponse accepted a flipped bit: %v", err)
		}
		if !bytes.Equal(dst, canary) {
			t.Fatal("failed OpenResponse wrote dst")
		}
		if err := g.OpenResponseDirect(dst, bad, badNonce, badAAD, badIV); err != ErrAuth {
			t.Fatalf("OpenResponseDirect accepted a flipped bit: %v", err)
		}
		if !bytes.Equal(dst, make([]byte, len(p))) {
			t.Fatal("failed OpenResponseDirect left data in dst")
		}
	})
}
