package aesni

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func ck(region uint32, pid uint32) CacheKey {
	return CacheKey{Region: region, Peer: [4]byte{10, 0, 0, byte(pid)}, PID: pid, Op: 1}
}

// checkCache verifies the table: every live entry is found at its own
// index slot, and the index holds nothing else.
func checkCache(t *testing.T, c *Cache) {
	t.Helper()
	live := 0
	for i := range c.ents {
		e := &c.ents[i]
		if !e.live {
			continue
		}
		live++
		pos, ok := c.find(&e.key)
		if !ok || c.index[pos] != uint32(i)+1 {
			t.Fatalf("entry %d (%+v) not reachable", i, e.key)
		}
	}
	used := 0
	for _, v := range c.index {
		if v != 0 {
			used++
		}
	}
	if live != c.n || used != c.n || len(c.free) != len(c.ents)-c.n {
		t.Fatalf("live %d, index %d, n %d, free %d", live, used, c.n, len(c.free))
	}
	// Every region's chain is found from its own position and holds its
	// live entries, linked both ways; together they hold every entry.
	chained := 0
	for pos, h := range c.regions {
		if h == 0 {
			continue
		}
		region := c.ents[h-1].key.Region
		if p, ok := c.findRegion(region); !ok || p != uint32(pos) {
			t.Fatalf("region %d's chain not reachable", region)
		}
		prev := uint32(0)
		for i := h; i != 0; i = c.ents[i-1].next {
			e := &c.ents[i-1]
			if !e.live || e.key.Region != region || e.prev != prev {
				t.Fatalf("region %d's chain broken at entry %d (%+v)", region, i-1, e.key)
			}
			if chained++; chained > c.n {
				t.Fatal("region chains loop")
			}
			prev = i
		}
	}
	if chained != c.n {
		t.Fatalf("region chains hold %d entries of %d", chained, c.n)
	}
}

func TestCacheHitMissEvict(t *testing.T) {
	c := NewCache(4, 1)
	if c.Get(ck(1, 1)) != nil {
		t.Fatal("hit in an empty cache")
	}
	var aeads [5]*AEAD
	for i := range 4 {
		a, err := c.Put(ck(1, uint32(i)), Key{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		aeads[i] = a
	}
	for i := range 4 {
		if c.Get(ck(1, uint32(i))) != aeads[i] {
			t.Fatalf("entry %d lost", i)
		}
	}
	// All four are referenced: the hand clears every bit in one turn and
	// evicts entry 0, where it started.
	a, _ := c.Put(ck(2, 9), Key{9}) // sweeps all bits clear, evicts entry 0
	aeads[4] = a
	if c.Get(ck(1, 0)) != nil {
		t.Fatal("CLOCK kept the entry the hand reached first")
	}
	c.Get(ck(1, 1))
	c.Get(ck(1, 3))
	c.Put(ck(2, 10), Key{10}) // 1 and 3 referenced; 2 is not: evicted
	if c.Get(ck(1, 2)) != nil || c.Get(ck(1, 1)) == nil || c.Get(ck(1, 3)) == nil || c.Get(ck(2, 9)) == nil {
		t.Fatal("CLOCK evicted a referenced entry")
	}
	if c.Len() != 4 || c.Cap() != 4 {
		t.Fatalf("len %d cap %d", c.Len(), c.Cap())
	}
	st := c.Stats()
	if st.Evictions != 2 || st.Inserts != 6 {
		t.Fatalf("stats %+v", st)
	}
	checkCache(t, c)
	// An evicted AEAD still works.
	f := newTestFrame(0)
	aeads[0].SealRequest(f.body, f.nonce, f.aad)
	if err := aeads[0].OpenRequest(f.body, f.nonce, f.aad); err != nil {
		t.Fatal(err)
	}
}

func TestCacheInvalidatePurge(t *testing.T) {
	c := NewCache(16, 7)
	for i := range 12 {
		c.Put(ck(uint32(i%3), uint32(i)), Key{byte(i)})
	}
	if n := c.Invalidate(1); n != 4 {
		t.Fatalf("Invalidate removed %d, want 4", n)
	}
	for i := range 12 {
		if got := c.Get(ck(uint32(i%3), uint32(i))) != nil; got != (i%3 != 1) {
			t.Fatalf("entry %d present=%v after invalidating region 1", i, got)
		}
	}
	checkCache(t, c)
	c.Purge()
	if c.Len() != 0 || c.Get(ck(0, 0)) != nil {
		t.Fatal("Purge left entries")
	}
	checkCache(t, c)
	if st := c.Stats(); st.Invalidations != 12 {
		t.Fatalf("invalidations %d", st.Invalidations)
	}
	// Usable after a purge, to full capacity.
	for i := range 16 {
		c.Put(ck(5, uint32(i)), Key{})
	}
	if c.Len() != 16 || c.Stats().Evictions != 0 {
		t.Fatalf("len %d after refill", c.Len())
	}
	checkCache(t, c)
}

func TestCacheGetOrDerive(t *testing.T) {
	kr := Key(pattern(16, 4))
	d := NewDeriver(kr)
	c := NewCache(8, 3)
	k := CacheKey{Region: 0x10002, Peer: [4]byte{10, 1, 2, 3}, PID: 777, Op: 1}
	a, err := c.GetOrDerive(k, d)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.GetOrDerive(k, d); b != a {
		t.Fatal("second lookup missed")
	}
	// The cached AEAD is keyed with K_d for (peer, pid, op).
	f := newTestFrame(0)
	a.SealRequest(f.body, f.nonce, f.aad)
	want := mustAEAD(t, DeriveKey(kr, k.Peer, k.PID, k.Op))
	if err := want.OpenRequest(f.body, f.nonce, f.aad); err != nil {
		t.Fatal("cached AEAD does not hold K_d")
	}
	if st := c.Stats(); st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Random operations against a model: the cache never exceeds its
// capacity, never returns a wrong AEAD, and its table stays consistent.
func TestCacheModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		capacity := 1 + rng.IntN(20)
		c := NewCache(capacity, seed)
		model := map[CacheKey]*AEAD{}
		for step := range 3000 {
			k := ck(uint32(rng.IntN(4)), uint32(rng.IntN(12)))
			switch r := rng.IntN(20); {
			case r < 10:
				a := c.Get(k)
				if a != nil && model[k] != a {
					t.Fatalf("seed %d step %d: Get(%+v) returned a foreign AEAD", seed, step, k)
				}
				if a == nil {
					delete(model, k) // evicted
				}
			case r < 18:
				a := &AEAD{} // stands in for a prepared AEAD
				c.insert(k, a)
				model[k] = a
			case r < 19:
				c.Invalidate(k.Region)
				for mk := range model {
					if mk.Region == k.Region {
						delete(model, mk)
					}
				}
			default:
				if rng.IntN(10) == 0 {
					c.Purge()
					clear(model)
				}
			}
			if c.Len() > capacity {
				t.Fatalf("seed %d: %d entries over capacity %d", seed, c.Len(), capacity)
			}
			if step%97 == 0 {
				checkCache(t, c)
			}
		}
		checkCache(t, c)
		// Everything still cached is what the model says.
		for i := range c.ents {
			if e := &c.ents[i]; e.live && model[e.key] != e.aead {
				t.Fatalf("seed %d: entry %+v holds a stale AEAD", seed, e.key)
			}
		}
	}
}

func TestCacheHitAllocs(t *testing.T) {
	c := NewCache(1024, 5)
	for i := range 1000 {
		c.insert(ck(uint32(i%7), uint32(i)), &AEAD{})
	}
	k := ck(3, 10)
	if c.Get(k) == nil {
		t.Fatal("miss")
	}
	if a := testing.AllocsPerRun(1000, func() {
		if c.Get(k) == nil {
			panic("miss")
		}
	}); a != 0 {
		t.Errorf("Get: %v allocs per hit", a)
	}
	d := NewDeriver(Key{})
	c.Put(ck(9, 9), Key{})
	if a := testing.AllocsPerRun(1000, func() { _, _ = c.GetOrDerive(ck(9, 9), d) }); a != 0 {
		t.Errorf("GetOrDerive: %v allocs per hit", a)
	}
}

// The remove hook sees every AEAD that leaves the cache exactly once:
// evicted, replaced by a Put for its key, invalidated, purged; Ext is
// kept with the AEAD.
func TestCacheOnRemove(t *testing.T) {
	c := NewCache(4, 3)
	gone := map[*AEAD]int{}
	c.SetOnRemove(func(a *AEAD) { gone[a]++ })
	var as []*AEAD
	for i := range 4 {
		a, _ := c.Put(ck(uint32(i%2), uint32(i)), Key{byte(i)})
		a.SetExt(i)
		as = append(as, a)
	}
	if as[2].Ext() != 2 || as[2].Key() != (Key{2}) {
		t.Fatal("Ext or Key lost")
	}
	a4, _ := c.Put(ck(9, 9), Key{9}) // evicts one of the four
	evicted := 0
	for _, a := range as {
		evicted += gone[a]
	}
	if evicted != 1 || len(gone) != 1 {
		t.Fatalf("eviction: %v", gone)
	}
	clear(gone)
	a5, _ := c.Put(ck(9, 9), Key{10}) // replaces a4
	if gone[a4] != 1 || len(gone) != 1 || a5 == a4 {
		t.Fatalf("replacement: %v", gone)
	}
	clear(gone)
	n := c.Invalidate(1)
	if len(gone) != n || n == 0 {
		t.Fatalf("invalidate removed %d, hook saw %d", n, len(gone))
	}
	clear(gone)
	left := c.Len()
	c.Purge()
	if len(gone) != left || gone[a5] != 1 {
		t.Fatalf("purge of %d: hook saw %v", left, gone)
	}
	for a, k := range gone {
		if k != 1 {
			t.Fatalf("%p removed %d times", a, k)
		}
	}
	checkCache(t, c)
}

// Invalidate takes a region's entries, however many others the cache
// holds, and leaves the others as they were.
func TestCacheInvalidateAmongMany(t *testing.T) {
	c := NewCache(4096, 7)
	for i := range 4000 {
		c.insert(ck(uint32(100+i%500), uint32(i)), &AEAD{})
	}
	mine := map[CacheKey]bool{}
	for i := range 12 {
		k := CacheKey{Region: 7, Peer: [4]byte{10, 0, 1, byte(i)}, PID: uint32(i), Op: uint8(i % 3)}
		c.insert(k, &AEAD{})
		mine[k] = true
	}
	if n := c.Invalidate(7); n != len(mine) {
		t.Fatalf("Invalidate removed %d, want %d", n, len(mine))
	}
	for k := range mine {
		if c.Get(k) != nil {
			t.Fatalf("%+v still cached", k)
		}
	}
	if c.Len() != 4000 || c.Invalidate(7) != 0 {
		t.Fatalf("%d entries left, want 4000", c.Len())
	}
	checkCache(t, c)
}

// BenchmarkCacheInvalidate: a rekey's invalidation of a region with 8
// entries, in a cache of 64 and of 4096 (the engine's default KeyCache),
// each put back after: the two cost alike.
func BenchmarkCacheInvalidate(b *testing.B) {
	for _, capacity := range []int{64, 4096} {
		b.Run(fmt.Sprint(capacity), func(b *testing.B) {
			c := NewCache(capacity, 1)
			for i := range capacity / 2 {
				c.insert(ck(uint32(100+i), uint32(i)), &AEAD{})
			}
			as := make([]*AEAD, 8)
			for i := range as {
				as[i] = &AEAD{}
			}
			b.ResetTimer()
			for range b.N {
				for i, a := range as {
					c.insert(ck(7, uint32(i)), a)
				}
				if c.Invalidate(7) != len(as) {
					b.Fatal("lost an entry")
				}
			}
		})
	}
}
