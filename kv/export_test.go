package kv

import (
	"encoding/binary"

	"github.com/onerma/onerma/portal"
)

// RecordOf is the bytes of key's record in s's slab (nil when its value
// is inline or the key is not held): tests damage it in place.
func RecordOf(s *Server, key []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	h := KeyHash(key)
	i := st.find(h&(st.buckets-1), key, h)
	if i < 0 || st.meta[i].ext.class < 0 {
		return nil
	}
	off := st.slabs.offset(st.meta[i].ext)
	n := recordHeaderBytes + uint64(st.slab[off+12]) + uint64(binary.LittleEndian.Uint32(st.slab[off+8:])) + 8
	return st.slab[off : off+n : off+n]
}

// MaxLookupValue is the largest value of key whose record one LOOKUP
// brings back with its slot.
func MaxLookupValue(key []byte) int {
	return portal.MaxOpBytes - SlotBytes - recordOverhead - len(key)
}
