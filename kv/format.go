package kv

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/cespare/xxhash/v2"
)

// The layout of a server's two regions (see the package doc for the
// diagram): an index of buckets of Ways slots of SlotBytes each, and a
// slab of variable-size records that slots point to.
const (
	// SlotBytes is one index slot: one cache line.
	SlotBytes = 64
	// slotBodyBytes is the body between the slot's header and its sum.
	slotBodyBytes = 48
	// MaxInline is the most key plus value bytes a slot holds itself;
	// larger pairs live in a slab record the slot points to.
	MaxInline = slotBodyBytes
	// MaxKeyBytes is the longest key (memcached's limit).
	MaxKeyBytes = 250
	// MaxValueBytes is the largest value any server accepts.
	MaxValueBytes = 1 << 20
	// recordOverhead is a slab record's header and sum.
	recordOverhead = recordHeaderBytes + 8
	// recordHeaderBytes is a slab record's header.
	recordHeaderBytes = 16
	// slabAlign is the alignment (and unit of a slot's pointer) of slab
	// records.
	slabAlign = 64
)

// Slot kinds (byte 4 of a slot).
const (
	kindEmpty   = 0
	kindInline  = 1
	kindPointer = 2
	// kindRecord marks a slab record's header.
	kindRecord = 3
)

// Slot is a decoded, validated index slot.
type Slot struct {
	Seq  uint32 // even: the slot's version
	Kind uint8  // kindEmpty, kindInline or kindPointer
	// Inline: Key and Value alias the slot bytes given to DecodeSlot.
	Key, Value []byte
	// Pointer: the record's key hash, stamp, offset in the slab region
	// (bytes, a multiple of 64) and length.
	KeyHash uint64
	Stamp   uint64
	Off     uint64
	Len     uint32
}

// Validation failures of DecodeSlot and DecodeRecord: preallocated, so the
// read path allocates nothing.
var (
	// ErrUnstable: the slot is being rewritten (odd sequence) or its sum
	// does not match (a read that raced a write, or corruption): read it
	// again.
	ErrUnstable = errors.New("kv: slot changed while read")
	// ErrCorrupt: the bytes cannot be a slot or record the server wrote
	// (a length beyond the slot or record, an unknown kind, a pointer
	// outside the slab).
	ErrCorrupt = errors.New("kv: malformed slot or record")
	// ErrStale: the record is whole but not the one the slot pointed to
	// (its stamp, key or length differ: it was replaced since).
	ErrStale = errors.New("kv: record replaced since its slot was read")
)

// slotSum is the sum stored in a slot's last 8 bytes: over its first 56.
func slotSum(s []byte) uint64 { return xxhash.Sum64(s[:SlotBytes-8]) }

// DecodeSlot validates the 64 bytes of one slot as read from a server's
// index region: an even sequence, a sum that matches, a known kind and
// lengths within the slot. slabBytes bounds a pointer: a record must lie
// wholly inside the slab region (and be at most maxRecord bytes). An
// empty slot is valid (Kind kindEmpty). On error the Slot is zero.
func DecodeSlot(s []byte, slabBytes uint64, maxRecord uint32) (Slot, error) {
	if len(s) < SlotBytes {
		return Slot{}, ErrCorrupt
	}
	s = s[:SlotBytes]
	seq := binary.LittleEndian.Uint32(s[0:])
	if seq == 0 {
		// Never written: all zero. The server never publishes sequence 0;
		// content under it is its first write, read while under way.
		if !allZero(s) {
			return Slot{}, ErrUnstable
		}
		return Slot{}, nil
	}
	if seq&1 != 0 || binary.LittleEndian.Uint64(s[56:]) != slotSum(s) {
		return Slot{}, ErrUnstable
	}
	kind, klen, vlen := s[4], int(s[5]), int(binary.LittleEndian.Uint16(s[6:]))
	body := s[8:56]
	switch kind {
	case kindEmpty:
		return Slot{Seq: seq}, nil
	case kindInline:
		if klen == 0 || klen+vlen > MaxInline {
			return Slot{}, ErrCorrupt
		}
		return Slot{Seq: seq, Kind: kindInline, Key: body[:klen:klen], Value: body[klen : klen+vlen : klen+vlen]}, nil
	case kindPointer:
		off := uint64(binary.LittleEndian.Uint32(body[16:])) * slabAlign
		n := binary.LittleEndian.Uint32(body[20:])
		if vlen != 0 || klen == 0 || n < recordOverhead+uint32(klen) || n > maxRecord || off > slabBytes || uint64(n) > slabBytes-off {
			return Slot{}, ErrCorrupt
		}
		return Slot{Seq: seq, Kind: kindPointer, KeyHash: binary.LittleEndian.Uint64(body[0:]),
			Stamp: binary.LittleEndian.Uint64(body[8:]), Off: off, Len: n}, nil
	}
	return Slot{}, ErrCorrupt
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Matches reports whether a valid slot holds key (whose hash is h): an
// inline slot holds the key itself; a pointer slot its hash, and the
// record it points to the key (checked by DecodeRecord).
func (s *Slot) Matches(key []byte, h uint64) bool {
	switch s.Kind {
	case kindInline:
		return bytes.Equal(s.Key, key)
	case kindPointer:
		return s.KeyHash == h
	}
	return false
}

// DecodeRecord validates a slab record read whole (the Len bytes a slot
// pointed to) against the slot and key that led to it, and returns its
// value (aliasing rec). A record whose sum fails was being written while
// read (ErrUnstable); a whole record of another stamp, key or length was
// put there after the slot was read (ErrStale).
func DecodeRecord(rec []byte, s *Slot, key []byte) ([]byte, error) {
	if len(rec) < recordOverhead || uint64(len(rec)) != uint64(s.Len) {
		return nil, ErrCorrupt
	}
	n := len(rec) - 8
	if binary.LittleEndian.Uint64(rec[n:]) != xxhash.Sum64(rec[:n]) {
		return nil, ErrUnstable
	}
	vlen, klen := binary.LittleEndian.Uint32(rec[8:]), int(rec[12])
	if rec[13] != kindRecord || klen == 0 || uint64(recordHeaderBytes)+uint64(klen)+uint64(vlen) != uint64(n) {
		return nil, ErrStale
	}
	if binary.LittleEndian.Uint64(rec[0:]) != s.Stamp || !bytes.Equal(rec[recordHeaderBytes:recordHeaderBytes+klen], key) {
		return nil, ErrStale
	}
	return rec[recordHeaderBytes+klen : n : n], nil
}

// recordLen is the slab bytes a record of key and value lengths takes
// (before rounding to slabAlign).
func recordLen(klen, vlen int) uint32 { return uint32(recordOverhead + klen + vlen) }

// putRecord writes a whole record into rec (len recordLen): the server
// does it into an extent no slot points to yet.
func putRecord(rec []byte, stamp uint64, key, value []byte) {
	binary.LittleEndian.PutUint64(rec[0:], stamp)
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(value)))
	rec[12], rec[13], rec[14], rec[15] = byte(len(key)), kindRecord, 0, 0
	copy(rec[recordHeaderBytes:], key)
	copy(rec[recordHeaderBytes+len(key):], value)
	n := len(rec) - 8
	binary.LittleEndian.PutUint64(rec[n:], xxhash.Sum64(rec[:n]))
}

// slotImage is the bytes [4:56) of a slot (kind, lengths, body) the
// server prepares before publishing them with the sequence lock
// (store.publish).
type slotImage [SlotBytes]byte

func (im *slotImage) inline(key, value []byte) {
	*im = slotImage{}
	im[4], im[5] = kindInline, byte(len(key))
	binary.LittleEndian.PutUint16(im[6:], uint16(len(value)))
	copy(im[8:], key)
	copy(im[8+len(key):], value)
}

func (im *slotImage) pointer(klen int, h, stamp, off uint64, n uint32) {
	*im = slotImage{}
	im[4], im[5] = kindPointer, byte(klen)
	binary.LittleEndian.PutUint64(im[8:], h)
	binary.LittleEndian.PutUint64(im[16:], stamp)
	binary.LittleEndian.PutUint32(im[24:], uint32(off/slabAlign))
	binary.LittleEndian.PutUint32(im[28:], n)
}

func (im *slotImage) empty() { *im = slotImage{} }

// KeyHash is the hash that places a key: its bucket on a server (low
// bits) and, mixed, its point on the consistent-hash ring.
func KeyHash(key []byte) uint64 { return xxhash.Sum64(key) }

// ringPoint mixes a key hash into its ring position (the splitmix64
// finalizer), so that the ring and the bucket index use independent bits.
func ringPoint(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}
