package aesni

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
)

// MaxAADSize is the largest aad a curried (response) operation accepts: the
// AEAD copies aad ‖ request IV into scratch of this size plus NonceSize,
// because crypto/cipher takes additional data as one slice. OneRMA's AAD
// (IPv4 addresses, UDP header, OneRMA header) is 64 bytes.
const MaxAADSize = 128

// ErrAuth is the only error an open returns: the message failed
// authentication. It says nothing about which input was wrong.
var ErrAuth = errors.New("aesni: message authentication failed")

// AEAD is a prepared AES-128-GCM instance for one key: the key schedule and
// the GHASH tables are computed once by NewAEAD, which costs as much as
// dozens of small seals, so the hot path never builds one per message (see
// Cache). Its methods neither allocate nor take locks.
//
// An AEAD owns scratch for curried AAD, so it is not safe for concurrent
// use: each engine core owns its own (through its Cache and its reserved
// AEAD).
//
// Buffers: every method states what it reads and writes. Lengths that the
// caller controls (nonce, tag, out, dst, aad) are asserted: a mismatch is a
// bug and panics. Lengths that come off the wire (in) are checked and fail
// with ErrAuth.
type AEAD struct {
	g        cipher.AEAD
	reserved bool
	key      Key                          // what it was built from (Matches)
	aad      [MaxAADSize + NonceSize]byte // aad ‖ request IV
	ext      any                          // the owner's per-AEAD extension (Ext)
}

// Ext returns what SetExt stored (nil if nothing). An engine core keeps
// there a second backend's expanded copy of the same key (an aesni/mb
// Key), found with the AEAD and without a second lookup.
func (a *AEAD) Ext() any { return a.ext }

// SetExt stores x with a; aesni never looks at it. A Cache's remove hook
// (Cache.SetOnRemove) is where the owner releases it.
func (a *AEAD) SetExt(x any) { a.ext = x }

// Key returns the key a was prepared for (the slow path of a second
// backend that expands its own copy).
func (a *AEAD) Key() Key { return a.key }

// NewAEAD prepares an AES-128-GCM instance for k (slow path: allocates). It
// fails only where crypto/cipher refuses GCM with caller-chosen nonces (the
// FIPS 140-only mode).
func NewAEAD(k Key) (*AEAD, error) {
	b, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &AEAD{g: g, key: k}, nil
}

// Matches reports whether a was prepared for key k. The initiating side
// caches AEADs for the K_d that commands carry: a command whose key no
// longer matches (the application switched keys after a Rekey) must not
// reuse the entry.
func (a *AEAD) Matches(k *Key) bool { return a.key == *k }

// NewReservedAEAD prepares the AEAD of the well-known reserved key; only it
// may SealAuthFailure and OpenAuthFailure. Build one per engine core.
func NewReservedAEAD() (*AEAD, error) {
	a, err := NewAEAD(ReservedKey())
	if err != nil {
		return nil, err
	}
	a.reserved = true
	return a, nil
}

func checkNonce(nonce []byte) {
	if len(nonce) != NonceSize {
		panic("aesni: nonce must be 12 bytes")
	}
}

// curry returns aad ‖ reqIV, in the AEAD's scratch when reqIV is not empty.
func (a *AEAD) curry(aad, reqIV []byte) []byte {
	switch len(reqIV) {
	case 0:
		return aad
	case NonceSize:
	default:
		panic("aesni: request IV must be 12 bytes or empty")
	}
	if len(aad) > MaxAADSize {
		panic("aesni: aad longer than MaxAADSize")
	}
	n := copy(a.aad[:], aad)
	n += copy(a.aad[n:], reqIV)
	return a.aad[:n]
}

// SealRequest authenticates a message without payload (a request): it
// writes into tag (TagSize bytes, the frame's trailer) the GCM tag of an
// empty plaintext with aad as additional data, i.e. GMAC_K(nonce, aad).
// nonce is the sender's IV (address ‖ counter), normally the header's IV
// field, which lies inside aad as well. tag must not overlap aad.
func (a *AEAD) SealRequest(tag, nonce, aad []byte) {
	checkNonce(nonce)
	if len(tag) != TagSize {
		panic("aesni: tag must be 16 bytes")
	}
	a.g.Seal(tag[:0], nonce, nil, aad)
}

// OpenRequest verifies the tag of a message without payload (see
// SealRequest). It reads tag, nonce and aad and writes nothing.
func (a *AEAD) OpenRequest(tag, nonce, aad []byte) error {
	checkNonce(nonce)
	if len(tag) != TagSize {
		return ErrAuth
	}
	if _, err := a.g.Open(nil, nonce, tag, aad); err != nil {
		return ErrAuth
	}
	return nil
}

// SealResponse encrypts plaintext (normally read straight from a region)
// into out[:len(plaintext)] and writes the tag to out[len(plaintext):]:
// out is the frame's payload followed by its trailer, so the data is moved
// once, fused with the cipher, and the frame needs no further copy. out
// must be exactly len(plaintext)+TagSize bytes and must either not overlap
// plaintext or start at the same address (in-place). The additional data
// is aad ‖ reqIV (reqIV: the IV of the request being answered, 12 bytes,
// or empty for a message that answers nothing). nonce must never have been
// used with this key before (see IVLane).
func (a *AEAD) SealResponse(out, plaintext, nonce, aad, reqIV []byte) {
	checkNonce(nonce)
	if len(out) != len(plaintext)+TagSize {
		panic("aesni: out must be len(plaintext)+16 bytes")
	}
	a.g.Seal(out[:0], nonce, plaintext, a.curry(aad, reqIV))
}

// SealResponseGather is SealResponse of the message head ‖ gap zero
// bytes ‖ plaintext: one frame carrying two parts of an answer that lie
// in different places (a LOOKUP's entry and its target). out must be
// exactly len(head)+gap+len(plaintext)+TagSize bytes and overlap neither
// part. crypto/cipher seals one buffer, so this copies the parts into
// out and seals them there (a batching backend reads each part once:
// aesni/mb's SealResponseGather).
func (a *AEAD) SealResponseGather(out, head []byte, gap int, plaintext, nonce, aad, reqIV []byte) {
	checkNonce(nonce)
	n := len(head) + gap + len(plaintext)
	if gap < 0 || len(out) != n+TagSize {
		panic("aesni: out must be len(head)+gap+len(plaintext)+16 bytes")
	}
	copy(out, head)
	clear(out[len(head) : len(head)+gap])
	copy(out[len(head)+gap:], plaintext)
	a.g.Seal(out[:0], nonce, out[:n], a.curry(aad, reqIV))
}

// OpenResponse authenticates and decrypts in (ciphertext ‖ tag, the
// frame's payload and trailer) into dst (len(in)-TagSize bytes, normally
// the destination range of a region), with additional data aad ‖ reqIV.
//
// It verifies before it writes dst: it decrypts in place, inside in, and
// copies the plaintext to dst only after the tag matched. On failure dst is
// untouched, in's ciphertext is zeroed (crypto/cipher clears its output on
// failure) and ErrAuth is returned. So in must be writable and is consumed
// either way; the cost is one copy of the payload, hot in cache (see
// OpenResponseDirect for the single-pass variant).
func (a *AEAD) OpenResponse(dst, in, nonce, aad, reqIV []byte) error {
	checkNonce(nonce)
	if len(in) < TagSize {
		return ErrAuth
	}
	n := len(in) - TagSize
	if len(dst) != n {
		panic("aesni: dst must be len(in)-16 bytes")
	}
	if _, err := a.g.Open(in[:0], nonce, in, a.curry(aad, reqIV)); err != nil {
		return ErrAuth
	}
	copy(dst, in[:n])
	return nil
}

// OpenResponseDirect is OpenResponse in a single pass: it decrypts in
// straight into dst while it authenticates (crypto/cipher's AES-NI path
// decrypts and hashes together), and zeroes dst if the tag does not match.
// So dst never holds unauthenticated plaintext once it returns, but does
// while it runs, and a failure leaves zeros where dst had other contents.
// in is only read. Use it where dst is private until the op completes.
func (a *AEAD) OpenResponseDirect(dst, in, nonce, aad, reqIV []byte) error {
	checkNonce(nonce)
	if len(in) < TagSize {
		return ErrAuth
	}
	if len(dst) != len(in)-TagSize {
		panic("aesni: dst must be len(in)-16 bytes")
	}
	if _, err := a.g.Open(dst[:0], nonce, in, a.curry(aad, reqIV)); err != nil {
		return ErrAuth
	}
	return nil
}

// SealAuthFailure writes into tag the tag of a REMOTE_AUTHENTICATION_FAILURE
// answer (a message without payload): additional data aad ‖ reqIV, where
// reqIV is the IV of the request that failed authentication, so that the
// answer is tied to it. a must come from NewReservedAEAD.
func (a *AEAD) SealAuthFailure(tag, nonce, aad, reqIV []byte) {
	if !a.reserved {
		panic("aesni: SealAuthFailure needs the reserved AEAD")
	}
	if len(tag) != TagSize {
		panic("aesni: tag must be 16 bytes")
	}
	a.SealResponse(tag, nil, nonce, aad, reqIV)
}

// OpenAuthFailure verifies a REMOTE_AUTHENTICATION_FAILURE answer sealed by
// SealAuthFailure. It writes nothing. a must come from NewReservedAEAD.
func (a *AEAD) OpenAuthFailure(tag, nonce, aad, reqIV []byte) error {
	if !a.reserved {
		panic("aesni: OpenAuthFailure needs the reserved AEAD")
	}
	checkNonce(nonce)
	if len(tag) != TagSize {
		return ErrAuth
	}
	if _, err := a.g.Open(nil, nonce, tag, a.curry(aad, reqIV)); err != nil {
		return ErrAuth
	}
	return nil
}

// PutNonce writes the 12-byte nonce addr ‖ counter (big-endian) into
// nonce, normally the header's IV field.
func PutNonce(nonce []byte, addr [4]byte, counter uint64) {
	_ = nonce[NonceSize-1]
	copy(nonce[0:4], addr[:])
	binary.BigEndian.PutUint64(nonce[4:12], counter)
}

// NonceCounter splits a nonce written by PutNonce.
func NonceCounter(nonce []byte) (addr [4]byte, counter uint64) {
	_ = nonce[NonceSize-1]
	copy(addr[:], nonce[0:4])
	return addr, binary.BigEndian.Uint64(nonce[4:12])
}

// ChunkAlign is the alignment of response chunk offsets within an op (it
// mirrors wire.ChunkAlign; this package imports nothing of ours).
const ChunkAlign = 64

// ResponseSpan is how many consecutive counters a server reserves (with
// IVLane.NextN) to answer one request of opLen bytes: one per possible
// chunk offset, so that chunk nonces follow from the offset (see
// PutResponseNonce). A request answered without payload (error, NACK,
// REMOTE_AUTHENTICATION_FAILURE, opLen 0) needs one.
func ResponseSpan(opLen uint32) uint64 {
	if opLen == 0 {
		return 1
	}
	return (uint64(opLen) + ChunkAlign - 1) / ChunkAlign
}

// PutResponseNonce writes the nonce of the response chunk at byte offset
// (within the op) of a request answered with the counter range
// [base, base+ResponseSpan(opLen)): server ‖ (base + offset/ChunkAlign).
// The server salts each response with its own counter and the chunk's
// offset (paper Appendix A); distinct chunks of one answer get distinct
// counters, and answers never share a range. offset must be a multiple of
// ChunkAlign below the op length; a chunk must be sealed once only.
func PutResponseNonce(nonce []byte, server [4]byte, base, offset uint64) {
	if offset%ChunkAlign != 0 {
		panic("aesni: response offset not a multiple of ChunkAlign")
	}
	PutNonce(nonce, server, base+offset/ChunkAlign)
}
