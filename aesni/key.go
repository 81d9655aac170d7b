package aesni

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
)

// Sizes, in bytes.
const (
	KeySize   = 16 // AES-128 key: K_r, K_d and the reserved key
	NonceSize = 12 // GCM nonce (the OneRMA header's IV field)
	TagSize   = 16 // GCM tag (the OneRMA trailer)
)

// Key is an AES-128 key: a region key K_r, a derived key K_d, or the
// reserved key.
type Key [KeySize]byte

// ReservedKeyText is the well-known reserved key (paper §4.2), as 16 ASCII
// bytes. Every engine seals REMOTE_AUTHENTICATION_FAILURE answers with it.
// Being public, it gives integrity against corruption, not authenticity: an
// on-path attacker can forge such answers, which buys nothing it could not
// get by dropping packets.
const ReservedKeyText = "1RMA:auth-failed"

// ReservedKey returns the well-known reserved key.
func ReservedKey() Key {
	return Key([]byte(ReservedKeyText))
}

// derivationBlock is the single AES block that K_r encrypts into K_d:
//
//	0  initiator IPv4 address, network byte order (4 B)
//	4  initiator PID, big-endian u32 (as stamped in the OneRMA header)
//	8  op type u8 (the OneRMA message type of the request)
//	9  zero (7 B)
func derivationBlock(b *[16]byte, initiator [4]byte, pid uint32, op uint8) {
	// address ‖ PID in the first half, op ‖ zeros in the second.
	binary.BigEndian.PutUint64(b[0:8], uint64(binary.BigEndian.Uint32(initiator[:]))<<32|uint64(pid))
	binary.BigEndian.PutUint64(b[8:16], uint64(op)<<56)
}

// DeriveKey computes K_d = AES_{K_r}(initiator ‖ pid ‖ op ‖ 0^56), the key
// that one initiating process uses for one op type on one region (paper
// §4.2). The block layout is documented on the package. It expands K_r on
// every call (and allocates): use a Deriver where K_r is used repeatedly.
func DeriveKey(kr Key, initiator [4]byte, pid uint32, op uint8) Key {
	return NewDeriver(kr).Derive(initiator, pid, op)
}

// Deriver holds an expanded region key K_r so that each derivation is one
// AES block encryption. The server side derives per request miss; keep one
// Deriver per region per engine core. It holds its own scratch, so Derive
// does not allocate, and it is not safe for concurrent use.
type Deriver struct {
	b   cipher.Block
	in  [16]byte
	out [16]byte
}

// NewDeriver expands kr (slow path: allocates).
func NewDeriver(kr Key) *Deriver {
	b, err := aes.NewCipher(kr[:])
	if err != nil { // only a bad key length, impossible with a Key
		panic("aesni: " + err.Error())
	}
	return &Deriver{b: b}
}

// Derive returns K_d for (initiator, pid, op) under the Deriver's K_r.
func (d *Deriver) Derive(initiator [4]byte, pid uint32, op uint8) Key {
	derivationBlock(&d.in, initiator, pid, op)
	d.b.Encrypt(d.out[:], d.in[:])
	return Key(d.out)
}
