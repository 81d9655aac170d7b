package mb

import (
	"bytes"
	"testing"

	"github.com/onerma/onerma/aesni"
)

// fit returns b cut or zero-padded to n bytes.
func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

// FuzzBatchVsAEAD queues every method of a Batch for one fuzzed message
// (key, nonce, AAD, request IV, payload) in one batch, next to a forgery
// (one flipped bit of ciphertext ‖ tag ‖ aad ‖ reqIV ‖ nonce), and checks
// every output and result against aesni.AEAD: bytes sealed, plaintext
// opened, what each open leaves in dst and in. Seeds live in
// testdata/fuzz/FuzzBatchVsAEAD.
func FuzzBatchVsAEAD(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), []byte("nonce-nonce!"), []byte("header"), []byte("request-iv12"), []byte("payload"), uint16(3))
	f.Add([]byte{}, []byte{}, []byte{}, []byte{}, []byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, keyB, nonceB, aad, reqIVB, p []byte, flip uint16) {
		k := aesni.Key(fit(keyB, aesni.KeySize))
		nonce := fit(nonceB, aesni.NonceSize)
		var reqIV []byte
		if len(reqIVB) > 0 {
			reqIV = fit(reqIVB, aesni.NonceSize)
			if len(aad) > aesni.MaxAADSize {
				aad = aad[:aesni.MaxAADSize]
			}
		}
		ref := mustAEAD(t, k)
		key, err := NewKey(k)
		if err != nil {
			t.Fatal(err)
		}
		defer key.Release()
		b, err := NewBatch(16)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		n := len(p)

		want := make([]byte, n+aesni.TagSize)
		ref.SealResponse(want, p, nonce, aad, reqIV)
		wantReq := make([]byte, aesni.TagSize)
		ref.SealRequest(wantReq, nonce, aad)

		// The forgery.
		bad, badAAD, badIV, badNonce := bytes.Clone(want), bytes.Clone(aad), bytes.Clone(reqIV), bytes.Clone(nonce)
		fields := [][]byte{bad, badAAD, badIV, badNonce}
		bits := 0
		for _, f := range fields {
			bits += 8 * len(f)
		}
		i := int(flip) % bits
		for _, f := range fields {
			if i < 8*len(f) {
				f[i/8] ^= 1 << (i % 8)
				break
			}
			i -= 8 * len(f)
		}
		refBad := bytes.Clone(bad)
		if ref.OpenResponse(make([]byte, n), refBad, badNonce, badAAD, badIV) != aesni.ErrAuth {
			t.Fatal("aesni accepted a flipped bit")
		}

		out := make([]byte, n+aesni.TagSize)
		tag := make([]byte, aesni.TagSize)
		in1, dst1 := bytes.Clone(want), make([]byte, n)
		dst2 := make([]byte, n)
		canary := bytes.Repeat([]byte{0x5a}, n)
		bad1, dst3 := bytes.Clone(bad), bytes.Clone(canary)
		dst4 := bytes.Clone(canary)
		var ids [8]int
		must := func(i int, ok bool) int {
			if !ok {
				t.Fatal("Add refused")
			}
			return i
		}
		ids[0] = must(b.SealResponse(key, out, p, nonce, aad, reqIV))
		ids[1] = must(b.OpenResponse(key, dst1, in1, nonce, aad, reqIV))
		ids[2] = must(b.OpenResponseDirect(key, dst2, want, nonce, aad, reqIV))
		ids[3] = must(b.OpenResponse(key, dst3, bad1, badNonce, badAAD, badIV))
		ids[4] = must(b.OpenResponseDirect(key, dst4, bad, badNonce, badAAD, badIV))
		ids[5] = must(b.SealRequest(key, tag, nonce, aad))
		ids[6] = must(b.OpenRequest(key, wantReq, nonce, aad))
		ids[7] = must(b.OpenRequest(key, wantReq, badNonce, badAAD))
		// The flip may have hit the ciphertext, which a request has not.
		reqForged := !bytes.Equal(badNonce, nonce) || !bytes.Equal(badAAD, aad)
		wantFailed := 2
		if reqForged {
			wantFailed++
		}
		if failed := b.Run(); failed != wantFailed {
			t.Fatalf("Run: %d failures, want %d", failed, wantFailed)
		}
		for slot, ok := range []bool{true, true, true, false, false, true, true, !reqForged} {
			if b.OK(ids[slot]) != ok {
				t.Fatalf("job %d: ok=%v, want %v", slot, !ok, ok)
			}
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("SealResponse differs from aesni:\n got %x\nwant %x", out, want)
		}
		if !bytes.Equal(tag, wantReq) {
			t.Fatalf("SealRequest differs from aesni")
		}
		refIn := bytes.Clone(want)
		if ref.OpenResponse(make([]byte, n), refIn, nonce, aad, reqIV) != nil {
			t.Fatal("aesni OpenResponse")
		}
		if !bytes.Equal(dst1, p) || !bytes.Equal(in1, refIn) {
			t.Fatal("OpenResponse: dst or in differ from aesni")
		}
		if !bytes.Equal(dst2, p) {
			t.Fatal("OpenResponseDirect")
		}
		if !bytes.Equal(dst3, canary) || !bytes.Equal(bad1, refBad) {
			t.Fatal("failed OpenResponse wrote dst, or left in unlike aesni")
		}
		if !bytes.Equal(dst4, make([]byte, n)) {
			t.Fatal("failed OpenResponseDirect left data in dst")
		}

		// Authentication failure answers (curried only), reserved key.
		if reqIV == nil {
			return
		}
		res, err := NewReservedKey()
		if err != nil {
			t.Fatal(err)
		}
		defer res.Release()
		resRef := mustReservedAEAD(t)
		wantAF := make([]byte, aesni.TagSize)
		resRef.SealAuthFailure(wantAF, nonce, aad, reqIV)
		af := make([]byte, aesni.TagSize)
		i0, _ := b.SealAuthFailure(res, af, nonce, aad, reqIV)
		i1, _ := b.OpenAuthFailure(res, wantAF, nonce, aad, reqIV)
		i2, _ := b.OpenAuthFailure(res, wantAF, badNonce, badAAD, badIV)
		b.Run()
		if !b.OK(i0) || !bytes.Equal(af, wantAF) {
			t.Fatal("SealAuthFailure differs from aesni")
		}
		if !b.OK(i1) {
			t.Fatal("OpenAuthFailure")
		}
		if forged := reqForged || !bytes.Equal(badIV, reqIV); b.OK(i2) == forged {
			t.Fatalf("OpenAuthFailure of a forgery (forged=%v): ok=%v", forged, b.OK(i2))
		}
	})
}
