package kv

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// FuzzDecode feeds arbitrary bytes to the decoders a client runs on what
// a server's regions hold: a slot (the first 64 bytes) and the record it
// points to (the rest, as if read from the slab at the slot's offset). An
// error means a zero result; an accepted value lies inside the bytes
// given. With fixSums the fuzzer's bytes get valid sums first, so that it
// explores what a malicious server (which can compute sums) could send.
func FuzzDecode(f *testing.F) {
	s := testStore(f, 1, 4, 2<<20, 4096)
	s.set([]byte("inline-key"), []byte("inline value"))
	s.set([]byte("record-key"), bytes.Repeat([]byte("v"), 300))
	for i := range s.ways {
		seed := append([]byte(nil), s.slot(i)...)
		if sl, err := DecodeSlot(seed, uint64(len(s.slab)), 1<<20); err == nil && sl.Kind == kindPointer {
			seed = append(seed, s.slab[sl.Off:sl.Off+uint64(sl.Len)]...)
		}
		f.Add(seed, []byte("record-key"), false)
	}
	f.Add(make([]byte, 64), []byte("k"), true)
	f.Fuzz(func(t *testing.T, data, key []byte, fixSums bool) {
		const slab = 1 << 20
		if fixSums && len(data) >= SlotBytes {
			data = append([]byte(nil), data...)
			binary.LittleEndian.PutUint64(data[56:], slotSum(data))
		}
		sl, err := DecodeSlot(data, slab, 64<<10)
		if err != nil {
			if !zeroSlot(sl) {
				t.Fatalf("error %v with a slot %+v", err, sl)
			}
			return
		}
		switch sl.Kind {
		case kindEmpty:
			return
		case kindInline:
			if len(sl.Key) == 0 || len(sl.Key)+len(sl.Value) > MaxInline || !within(sl.Value, data[:SlotBytes]) || !within(sl.Key, data[:SlotBytes]) {
				t.Fatalf("inline slot outside its bytes: %+v", sl)
			}
			return
		}
		if sl.Off+uint64(sl.Len) > slab || sl.Len > 64<<10 || sl.Off%slabAlign != 0 {
			t.Fatalf("pointer outside the slab: %+v", sl)
		}
		rec := data[SlotBytes:]
		if uint64(len(rec)) > uint64(sl.Len) {
			rec = rec[:sl.Len]
		}
		if fixSums && len(rec) >= 8 {
			binary.LittleEndian.PutUint64(rec[len(rec)-8:], xxhash.Sum64(rec[:len(rec)-8]))
		}
		v, err := DecodeRecord(rec, &sl, key)
		if err != nil {
			if v != nil {
				t.Fatalf("error %v with a value", err)
			}
			return
		}
		if !within(v, rec) || len(rec) != int(sl.Len) {
			t.Fatalf("record value outside its bytes")
		}
	})
}

// within reports whether b lies inside in.
func within(b, in []byte) bool {
	if len(b) == 0 {
		return true
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(in))
}
