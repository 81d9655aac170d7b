package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// store is a server's data: the index and slab region memory (shared with
// its engine, which serves clients' READs of it at any moment) and the
// server's own bookkeeping beside it, which no client sees. One goroutine
// at a time (the Server holds a mutex around every call).
//
// Update protocol. A slot changes only through publish, a sequence lock:
// the sequence (bytes 0..3) is made odd, the kind, lengths and body are
// written, the sum over the new header and body is written, and the
// sequence is made even again (2 more than before). A reader accepts a
// slot only with an even sequence and a matching sum; a READ that overlaps
// a publish sees an odd sequence, or bytes of two versions under one sum
// (a 64-bit sum misses that with probability 2^-64), and reads again. A
// slab record is never changed while a slot points to it: a SET writes the
// new record into a free extent first, then publishes the slot pointing to
// it, then frees the old extent. A reader still holding the old pointer
// may read that extent after it was reused; the record there has another
// stamp (stamps are never reused), or is being written (its sum fails):
// either way it reads the slot again.
type store struct {
	idx, slab []byte
	buckets   uint64 // a power of two
	ways      int
	maxValue  int
	meta      []slotMeta
	slabs     *slabAlloc
	tick      uint32 // logical clock of uses (SETs and hints), for LRU in a bucket
	stamp     uint64 // the last record stamp given
	st        StoreStats
	im        slotImage
}

// slotMeta is what the server keeps about a slot apart from the region.
type slotMeta struct {
	hash uint64
	last uint32 // tick of its last SET or hint
	ext  extent // its record's extent, noExtent when inline or empty
	used bool   // holds a key
	ref  bool   // used since CLOCK's hand last passed its extent
}

// StoreStats are a server's counters.
type StoreStats struct {
	Items          uint64 // keys held
	Records        uint64 // of them, values in the slab
	Sets, Deletes  uint64
	EvictedIndex   uint64 // keys evicted because their bucket was full
	EvictedSlab    uint64 // keys evicted to make room in the slab
	Hints          uint64 // hints received
	HintsUnmatched uint64 // hints for keys not (or no longer) held
	SlabPages      uint32 // slab pages given to size classes
	SlabPagesTotal uint32
}

// Store errors.
var (
	ErrTooLarge = errors.New("kv: key or value too large")
	ErrNoMemory = errors.New("kv: no slab memory for a value of this size")
)

// newStore formats the index (buckets × ways slots, all zero: empty) and
// plans the slab.
func newStore(idx, slab []byte, buckets uint64, ways, maxValue int, stampBase uint64) (*store, error) {
	switch {
	case buckets == 0 || buckets&(buckets-1) != 0:
		return nil, fmt.Errorf("kv: %d buckets, want a power of two", buckets)
	case ways < 1 || ways > 64:
		return nil, fmt.Errorf("kv: %d ways, want 1..64", ways)
	case uint64(len(idx)) < buckets*uint64(ways)*SlotBytes:
		return nil, fmt.Errorf("kv: index of %d bytes for %d buckets of %d slots", len(idx), buckets, ways)
	case maxValue < 0 || maxValue > MaxValueBytes:
		return nil, fmt.Errorf("kv: max value %d bytes, want at most %d", maxValue, MaxValueBytes)
	case uintptr(unsafe.Pointer(unsafe.SliceData(idx)))%8 != 0:
		return nil, errors.New("kv: index memory not 8-byte aligned")
	}
	s := &store{idx: idx, slab: slab, buckets: buckets, ways: ways, maxValue: maxValue, stamp: stampBase,
		meta: make([]slotMeta, buckets*uint64(ways))}
	for i := range s.meta {
		s.meta[i].ext = noExtent
	}
	s.slabs = newSlabAlloc(uint64(len(slab)), recordLen(MaxKeyBytes, maxValue))
	s.slabs.evict = func(i int32) { s.st.EvictedSlab++; s.clear(int(i), false) }
	s.slabs.ref = func(i int32) bool {
		m := &s.meta[i]
		r := m.ref
		m.ref = false
		return r
	}
	s.st.SlabPagesTotal = s.slabs.pages
	return s, nil
}

// slot is slot i's bytes in the index region.
func (s *store) slot(i int) []byte { return s.idx[i*SlotBytes : (i+1)*SlotBytes : (i+1)*SlotBytes] }

// publish replaces slot i with im under the sequence lock (see store).
func (s *store) publish(i int, im *slotImage) {
	b := s.slot(i)
	seqp := (*uint32)(unsafe.Pointer(&b[0]))
	seq := atomic.LoadUint32(seqp)
	next := seq + 2
	if next == 0 { // sequence 0 means never written
		next = 2
	}
	atomic.StoreUint32(seqp, seq|1)
	copy(b[4:SlotBytes-8], im[4:SlotBytes-8])
	binary.LittleEndian.PutUint32(im[0:], next)
	binary.LittleEndian.PutUint64(b[SlotBytes-8:], slotSum(im[:]))
	atomic.StoreUint32(seqp, next)
}

// find returns the slot of bucket b holding key (hash h), or -1.
func (s *store) find(b uint64, key []byte, h uint64) int {
	first := int(b) * s.ways
	for i := first; i < first+s.ways; i++ {
		m := &s.meta[i]
		if !m.used || m.hash != h {
			continue
		}
		if bytes.Equal(s.keyAt(i, m), key) {
			return i
		}
	}
	return -1
}

// keyAt is the key slot i holds (in the slot, or in its record).
func (s *store) keyAt(i int, m *slotMeta) []byte {
	b := s.slot(i)
	if m.ext.class < 0 {
		return b[8 : 8+int(b[5])]
	}
	off := s.slabs.offset(m.ext)
	return s.slab[off+recordHeaderBytes : off+recordHeaderBytes+uint64(b[5])]
}

// set stores value under key, replacing its value if held, else taking
// an empty slot of its bucket, else the bucket's least recently used one.
func (s *store) set(key, value []byte) error {
	if len(key) == 0 || len(key) > MaxKeyBytes || len(value) > s.maxValue {
		return ErrTooLarge
	}
	h := KeyHash(key)
	b := h & (s.buckets - 1)
	s.tick++
	s.st.Sets++
	inline := len(key)+len(value) <= MaxInline
	// The extent first: CLOCK may empty any slot, this bucket's too.
	ext := noExtent
	if !inline {
		var ok bool
		if ext, ok = s.slabs.alloc(recordLen(len(key), len(value))); !ok {
			return ErrNoMemory
		}
	}
	i := s.find(b, key, h)
	if i < 0 {
		i = s.victim(b)
	}
	m := &s.meta[i]
	old := m.ext
	if inline {
		s.im.inline(key, value)
	} else {
		s.stamp++
		off := s.slabs.offset(ext)
		n := recordLen(len(key), len(value))
		putRecord(s.slab[off:off+uint64(n)], s.stamp, key, value)
		s.slabs.own(ext, i)
		s.im.pointer(len(key), h, s.stamp, off, n)
	}
	s.publish(i, &s.im)
	if old.class >= 0 {
		s.slabs.release(old)
		s.st.Records--
	}
	if !inline {
		s.st.Records++
	}
	if !m.used {
		s.st.Items++
	}
	*m = slotMeta{hash: h, last: s.tick, ext: ext, used: true, ref: true}
	s.st.SlabPages = s.slabs.used
	return nil
}

// victim is an empty slot of bucket b, or else its least recently used
// one, emptied.
func (s *store) victim(b uint64) int {
	first := int(b) * s.ways
	lru := first
	for i := first; i < first+s.ways; i++ {
		if !s.meta[i].used {
			return i
		}
		if s.tick-s.meta[i].last > s.tick-s.meta[lru].last { // oldest, across wrap-around
			lru = i
		}
	}
	s.st.EvictedIndex++
	s.clear(lru, true)
	return lru
}

// clear empties slot i; release says whether to free its extent (CLOCK
// keeps it for the record it evicts for).
func (s *store) clear(i int, release bool) {
	m := &s.meta[i]
	if !m.used {
		return
	}
	s.im.empty()
	s.publish(i, &s.im)
	if m.ext.class >= 0 {
		if release {
			s.slabs.release(m.ext)
		}
		s.st.Records--
	}
	s.st.Items--
	*m = slotMeta{ext: noExtent}
}

// del removes key; false if it was not held.
func (s *store) del(key []byte) bool {
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return false
	}
	h := KeyHash(key)
	i := s.find(h&(s.buckets-1), key, h)
	if i < 0 {
		return false
	}
	s.st.Deletes++
	s.clear(i, true)
	return true
}

// hint records that a client read the key of hash h: it becomes its
// bucket's most recently used and survives CLOCK's next turn.
func (s *store) hint(h uint64) {
	s.st.Hints++
	first := int(h&(s.buckets-1)) * s.ways
	s.tick++
	for i := first; i < first+s.ways; i++ {
		if m := &s.meta[i]; m.used && m.hash == h {
			m.last, m.ref = s.tick, true
			return
		}
	}
	s.st.HintsUnmatched++
}

// get is the server's own lookup (tests and the tool's checks; clients
// read the region).
func (s *store) get(key []byte) ([]byte, bool) {
	h := KeyHash(key)
	i := s.find(h&(s.buckets-1), key, h)
	if i < 0 {
		return nil, false
	}
	m := &s.meta[i]
	if m.ext.class < 0 {
		b := s.slot(i)
		return b[8+int(b[5]) : 8+int(b[5])+int(binary.LittleEndian.Uint16(b[6:]))], true
	}
	off := s.slabs.offset(m.ext)
	n := binary.LittleEndian.Uint32(s.slab[off+8:])
	v := off + recordHeaderBytes + uint64(s.slab[off+12])
	return s.slab[v : v+uint64(n)], true
}
