package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// testStore is a store over plain memory: buckets × ways slots and a slab.
func testStore(t testing.TB, buckets uint64, ways int, slabBytes uint64, maxValue int) *store {
	t.Helper()
	idx := make([]byte, buckets*uint64(ways)*SlotBytes)
	s, err := newStore(idx, make([]byte, slabBytes), buckets, ways, maxValue, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// slotOf is the slot of s holding key, decoded, and its bytes.
func slotOf(t *testing.T, s *store, key []byte) (Slot, []byte) {
	t.Helper()
	h := KeyHash(key)
	i := s.find(h&(s.buckets-1), key, h)
	if i < 0 {
		t.Fatalf("key %q not held", key)
	}
	b := s.slot(i)
	sl, err := DecodeSlot(b, uint64(len(s.slab)), recordLen(MaxKeyBytes, s.maxValue))
	if err != nil {
		t.Fatalf("slot of %q: %v", key, err)
	}
	return sl, b
}

func TestSlotRoundTrip(t *testing.T) {
	s := testStore(t, 4, 4, 2<<20, 8<<10)
	cases := []struct {
		key, val []byte
		kind     uint8
	}{
		{[]byte("k"), nil, kindInline},
		{[]byte("0123456789abcdef"), bytes.Repeat([]byte{7}, 32), kindInline}, // 48 B: the largest inline
		{[]byte("0123456789abcdeg"), bytes.Repeat([]byte{8}, 33), kindPointer},
		{bytes.Repeat([]byte{'x'}, MaxKeyBytes), []byte("v"), kindPointer},
		{[]byte("big"), bytes.Repeat([]byte{9}, 8<<10), kindPointer},
	}
	for _, tc := range cases {
		if err := s.set(tc.key, tc.val); err != nil {
			t.Fatal(err)
		}
		sl, _ := slotOf(t, s, tc.key)
		if sl.Kind != tc.kind || sl.Seq == 0 || sl.Seq&1 != 0 || !sl.Matches(tc.key, KeyHash(tc.key)) {
			t.Fatalf("%d-byte key, %d-byte value: slot %+v", len(tc.key), len(tc.val), sl)
		}
		var got []byte
		if sl.Kind == kindInline {
			got = sl.Value
		} else {
			v, err := DecodeRecord(s.slab[sl.Off:sl.Off+uint64(sl.Len)], &sl, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			got = v
		}
		if !bytes.Equal(got, tc.val) {
			t.Fatalf("%d-byte value read back as %d bytes", len(tc.val), len(got))
		}
	}
	// Never written and emptied slots are valid and empty.
	var zero [SlotBytes]byte
	if sl, err := DecodeSlot(zero[:], 1<<20, 1<<20); err != nil || sl.Kind != kindEmpty {
		t.Fatalf("zero slot: %+v %v", sl, err)
	}
	s.del([]byte("k"))
	for i := range s.meta {
		if sl, err := DecodeSlot(s.slot(i), uint64(len(s.slab)), 1<<20); err != nil || (sl.Kind == kindEmpty) == s.meta[i].used {
			t.Fatalf("slot %d after delete: %+v %v (used %v)", i, sl, err, s.meta[i].used)
		}
	}
}

// Every single-bit change of a valid slot or record is refused: the
// reader never takes bytes the server did not write as they are.
func TestFlippedBitsRefused(t *testing.T) {
	s := testStore(t, 1, 4, 2<<20, 4096)
	s.set([]byte("inline"), []byte("value"))
	s.set([]byte("pointer"), bytes.Repeat([]byte{1}, 200))
	for _, key := range []string{"inline", "pointer"} {
		sl, b := slotOf(t, s, []byte(key))
		for bit := range SlotBytes * 8 {
			c := append([]byte(nil), b...)
			c[bit/8] ^= 1 << (bit % 8)
			if got, err := DecodeSlot(c, uint64(len(s.slab)), 1<<20); err == nil || !zeroSlot(got) {
				t.Fatalf("%s slot with bit %d flipped: %+v, %v", key, bit, got, err)
			}
		}
		if sl.Kind != kindPointer {
			continue
		}
		rec := s.slab[sl.Off : sl.Off+uint64(sl.Len)]
		for bit := range len(rec) * 8 {
			c := append([]byte(nil), rec...)
			c[bit/8] ^= 1 << (bit % 8)
			if v, err := DecodeRecord(c, &sl, []byte(key)); err == nil || v != nil {
				t.Fatalf("record with bit %d flipped: %v", bit, err)
			}
		}
	}
}

// A slot whose sum is right but whose content cannot be the server's (a
// corrupt or malicious server) is refused before anything is read through
// it, and a record that is whole but not the one pointed to is stale.
func TestMaliciousSlots(t *testing.T) {
	const slab = 1 << 20
	mk := func(edit func(b []byte)) []byte {
		var im slotImage
		im.pointer(3, 42, 7, 4096, 100)
		binary.LittleEndian.PutUint32(im[0:], 2)
		edit(im[:])
		binary.LittleEndian.PutUint64(im[56:], slotSum(im[:]))
		return im[:]
	}
	if sl, err := DecodeSlot(mk(func([]byte) {}), slab, 1<<20); err != nil || sl.Off != 4096 || sl.Len != 100 {
		t.Fatalf("valid pointer: %+v %v", sl, err)
	}
	cases := map[string]func(b []byte){
		"offset beyond the slab":       func(b []byte) { binary.LittleEndian.PutUint32(b[24:], slab/64) },
		"record ending past the slab":  func(b []byte) { binary.LittleEndian.PutUint32(b[24:], slab/64-1) },
		"offset at 2^38":               func(b []byte) { binary.LittleEndian.PutUint32(b[24:], 0xffffffff) },
		"length above the largest":     func(b []byte) { binary.LittleEndian.PutUint32(b[28:], 1<<20+1) },
		"length below key + overhead":  func(b []byte) { binary.LittleEndian.PutUint32(b[28:], recordOverhead+2) },
		"pointer without a key":        func(b []byte) { b[5] = 0 },
		"pointer with a value length":  func(b []byte) { b[6] = 1 },
		"inline key+value beyond body": func(b []byte) { b[4], b[5], b[6] = kindInline, 40, 9 },
		"inline without a key":         func(b []byte) { b[4], b[5] = kindInline, 0 },
		"unknown kind":                 func(b []byte) { b[4] = 9 },
	}
	for name, edit := range cases {
		if sl, err := DecodeSlot(mk(edit), slab, 1<<20); !errors.Is(err, ErrCorrupt) || !zeroSlot(sl) {
			t.Errorf("%s: %+v, %v", name, sl, err)
		}
	}
	var junk [SlotBytes]byte
	junk[20] = 1 // sequence 0 with content: a first write under way
	if _, err := DecodeSlot(junk[:], slab, 1<<20); !errors.Is(err, ErrUnstable) {
		t.Errorf("sequence 0 with content: %v", err)
	}
	if _, err := DecodeSlot(junk[:63], slab, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Errorf("63 bytes: %v", err)
	}

	// Records: another stamp, key, or a length that disagrees.
	rec := make([]byte, recordLen(3, 10))
	putRecord(rec, 7, []byte("abc"), []byte("0123456789"))
	sl := Slot{Kind: kindPointer, Stamp: 7, Len: uint32(len(rec))}
	if v, err := DecodeRecord(rec, &sl, []byte("abc")); err != nil || string(v) != "0123456789" {
		t.Fatalf("valid record: %q %v", v, err)
	}
	other := sl
	other.Stamp = 8
	if _, err := DecodeRecord(rec, &other, []byte("abc")); !errors.Is(err, ErrStale) {
		t.Errorf("other stamp: %v", err)
	}
	if _, err := DecodeRecord(rec, &sl, []byte("abd")); !errors.Is(err, ErrStale) {
		t.Errorf("other key: %v", err)
	}
	long := sl
	long.Len++
	if _, err := DecodeRecord(rec, &long, []byte("abc")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("length disagreeing with the slot: %v", err)
	}
	// A record claiming a longer value than it holds, with a valid sum.
	bad := append([]byte(nil), rec...)
	binary.LittleEndian.PutUint32(bad[8:], 11)
	binary.LittleEndian.PutUint64(bad[len(bad)-8:], sumOf(bad[:len(bad)-8]))
	if _, err := DecodeRecord(bad, &sl, []byte("abc")); !errors.Is(err, ErrStale) {
		t.Errorf("value length beyond the record: %v", err)
	}
}

func sumOf(b []byte) uint64 { return xxhash.Sum64(b) }

// zeroSlot reports whether s is the zero Slot.
func zeroSlot(s Slot) bool {
	return s.Seq == 0 && s.Kind == 0 && s.Key == nil && s.Value == nil && s.KeyHash == 0 && s.Stamp == 0 && s.Off == 0 && s.Len == 0
}
