package kv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// A full bucket evicts its least recently used key: the one neither set
// nor hinted for longest.
func TestBucketLRUByHints(t *testing.T) {
	s := testStore(t, 1, 4, 2<<20, 1024)
	k := func(i int) []byte { return fmt.Appendf(nil, "k%d", i) }
	for i := range 4 {
		s.set(k(i), []byte("v"))
	}
	s.hint(KeyHash(k(0)))
	s.hint(KeyHash(k(1)))
	s.set(k(4), []byte("v")) // evicts k2: set before k3, never hinted
	if _, ok := s.get(k(2)); ok {
		t.Fatal("k2 survived")
	}
	for _, i := range []int{0, 1, 3, 4} {
		if _, ok := s.get(k(i)); !ok {
			t.Fatalf("k%d evicted", i)
		}
	}
	s.set(k(5), []byte("v")) // evicts k3 now
	if _, ok := s.get(k(3)); ok || s.st.EvictedIndex != 2 || s.st.Items != 4 {
		t.Fatalf("k3 held %v, evictions %d, items %d", ok, s.st.EvictedIndex, s.st.Items)
	}
	s.hint(KeyHash([]byte("absent")))
	if s.st.Hints != 3 || s.st.HintsUnmatched != 1 {
		t.Fatalf("hints %d unmatched %d", s.st.Hints, s.st.HintsUnmatched)
	}
	audit(t, s)
}

// A size class out of room evicts by CLOCK: keys hinted since the hand
// last passed keep their records once.
func TestSlabClock(t *testing.T) {
	// One 1 MB page: 1024 records of up to 1024 B in one class.
	s := testStore(t, 1<<12, 8, 1<<20, 1000)
	val := bytes.Repeat([]byte{1}, 900)
	n := int(s.slabs.classes[s.slabs.classFor(recordLen(4, 900))].perPage)
	key := func(i int) []byte { return fmt.Appendf(nil, "%04d", i) }
	for i := range n {
		if err := s.set(key(i), val); err != nil {
			t.Fatal(err)
		}
	}
	if s.st.EvictedSlab != 0 || s.st.Records != uint64(n) {
		t.Fatalf("%d records of %d, %d evicted", s.st.Records, n, s.st.EvictedSlab)
	}
	// The hand's first turn clears every reference bit the SETs set and
	// evicts the first key; hint the even keys, and the next SETs evict
	// only odd ones.
	s.set([]byte("new0"), val)
	for i := 0; i < n; i += 2 {
		s.hint(KeyHash(key(i)))
	}
	for j := 1; j < n/4; j++ {
		s.set(fmt.Appendf(nil, "new%d", j), val)
	}
	for i := 2; i < n; i += 2 {
		if _, ok := s.get(key(i)); !ok {
			t.Fatalf("hinted key %d evicted", i)
		}
	}
	if s.st.EvictedSlab != uint64(n/4) {
		t.Fatalf("%d evicted, want %d", s.st.EvictedSlab, n/4)
	}
	audit(t, s)
}

// A size class without a page takes one from the class holding the most.
func TestSlabSteal(t *testing.T) {
	s := testStore(t, 1<<10, 8, 2<<20, 64<<10) // 2 pages
	for i := range 6000 {
		s.set(fmt.Appendf(nil, "small%d", i), bytes.Repeat([]byte{2}, 300))
	}
	if s.slabs.used != 2 {
		t.Fatalf("%d pages used", s.slabs.used)
	}
	if err := s.set([]byte("big"), bytes.Repeat([]byte{3}, 60<<10)); err != nil {
		t.Fatal(err)
	}
	if v, ok := s.get([]byte("big")); !ok || len(v) != 60<<10 || s.st.EvictedSlab == 0 {
		t.Fatalf("big: %d bytes, %v; %d evicted", len(v), ok, s.st.EvictedSlab)
	}
	audit(t, s)
}

// Random SETs, DELETEs and hints against a model: every key the store
// holds has the last value set, keys missing were deleted or evicted,
// and the books balance (audit).
func TestStoreModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	s := testStore(t, 64, 4, 3<<20, 8<<10) // evicts from full buckets and a full slab
	model := map[string][]byte{}
	for op := range 20000 {
		k := fmt.Sprintf("key%d", rng.IntN(600))
		switch r := rng.IntN(10); {
		case r < 6:
			n := []int{0, 10, 40, 200, 1000, 5000, 8 << 10}[rng.IntN(7)]
			v := make([]byte, n)
			for i := range v {
				v[i] = byte(op + i)
			}
			if err := s.set([]byte(k), v); err != nil {
				t.Fatalf("op %d: set: %v (seed %d)", op, err, seed)
			}
			model[k] = v
		case r < 8:
			s.del([]byte(k))
			delete(model, k)
		default:
			s.hint(KeyHash([]byte(k)))
		}
		if op%1000 == 0 {
			audit(t, s)
		}
	}
	held := 0
	for k, v := range model {
		got, ok := s.get([]byte(k))
		if ok {
			held++
			if !bytes.Equal(got, v) {
				t.Fatalf("key %s: %d bytes, want %d (seed %d)", k, len(got), len(v), seed)
			}
		}
	}
	if uint64(held) != s.st.Items {
		t.Fatalf("store holds %d keys, %d of them in the model (seed %d)", s.st.Items, held, seed)
	}
	t.Logf("%d of %d keys held; evicted %d (bucket) %d (slab)", held, len(model), s.st.EvictedIndex, s.st.EvictedSlab)
	audit(t, s)
}

// audit checks the books: every used slot decodes to its meta's key and
// kind, every record it points to decodes, extents are owned by exactly
// the slots pointing to them, the free lists hold the rest, and the
// counters agree.
func audit(t *testing.T, s *store) {
	t.Helper()
	var items, records uint64
	owned := map[extent]int{}
	for i := range s.meta {
		m := &s.meta[i]
		sl, err := DecodeSlot(s.slot(i), uint64(len(s.slab)), recordLen(MaxKeyBytes, s.maxValue))
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		if !m.used {
			if sl.Kind != kindEmpty || m.ext.class >= 0 {
				t.Fatalf("slot %d unused but %+v, ext %+v", i, sl, m.ext)
			}
			continue
		}
		items++
		if int(uint64(i)/uint64(s.ways)) != int(m.hash&(s.buckets-1)) {
			t.Fatalf("slot %d in the wrong bucket", i)
		}
		if m.ext.class < 0 {
			if sl.Kind != kindInline || KeyHash(sl.Key) != m.hash {
				t.Fatalf("slot %d: %+v, want inline of hash %x", i, sl, m.hash)
			}
			continue
		}
		records++
		owned[m.ext] = i
		if sl.Kind != kindPointer || sl.KeyHash != m.hash || sl.Off != s.slabs.offset(m.ext) || sl.Len > s.slabs.extentBytes(m.ext) {
			t.Fatalf("slot %d: %+v, want a pointer to extent %+v at %d", i, sl, m.ext, s.slabs.offset(m.ext))
		}
		key := s.keyAt(i, m)
		if _, err := DecodeRecord(s.slab[sl.Off:sl.Off+uint64(sl.Len)], &sl, key); err != nil {
			t.Fatalf("record of slot %d: %v", i, err)
		}
	}
	if items != s.st.Items || records != s.st.Records {
		t.Fatalf("%d keys, %d records; counters say %d, %d", items, records, s.st.Items, s.st.Records)
	}
	pages := uint32(0)
	for ci := range s.slabs.classes {
		c := &s.slabs.classes[ci]
		pages += uint32(len(c.pages))
		if len(c.owners) != len(c.pages)*int(c.perPage) {
			t.Fatalf("class %d: %d extents on %d pages", ci, len(c.owners), len(c.pages))
		}
		free := map[uint32]bool{}
		for _, e := range c.free[c.head:] {
			if free[e] || c.owners[e] != 0 {
				t.Fatalf("class %d: extent %d free twice or owned", ci, e)
			}
			free[e] = true
		}
		for e, o := range c.owners {
			x := extent{class: int32(ci), n: uint32(e)}
			if o == 0 {
				if !free[uint32(e)] {
					t.Fatalf("class %d: extent %d neither owned nor free", ci, e)
				}
				continue
			}
			if owned[x] != int(o-1) {
				t.Fatalf("class %d: extent %d owned by slot %d, pointed to by %d", ci, e, o-1, owned[x])
			}
		}
	}
	if pages != s.slabs.used {
		t.Fatalf("%d pages in classes, %d given", pages, s.slabs.used)
	}
}
