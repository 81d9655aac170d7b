package aesni

import "encoding/binary"

// CacheKey names one derived key K_d as an engine core sees it.
type CacheKey struct {
	// Region is the region id. In OneRMA it carries the registration
	// generation (generation<<16 | index), so a re-registered region never
	// hits a stale entry; a rekey keeps the id, so Invalidate it.
	Region uint32
	// Peer is the other end's IPv4 address: the initiator's on the serving
	// side, the server's on the initiating side.
	Peer [4]byte
	// PID is the initiator's PID, Op the op type (see DeriveKey).
	PID uint32
	Op  uint8
}

// Cache maps CacheKeys to prepared AEADs, so that the hot path expands no
// key per message: a miss costs a key derivation and NewAEAD (as much as
// several small seals, see the package doc), a hit a hash and a probe.
// Capacity is fixed at construction and never grows; when full, an
// insertion evicts an entry chosen by CLOCK (second chance: a hit sets
// the entry's reference bit, the hand clears bits until it finds an entry
// without one). Get allocates nothing; an insertion allocates only the new
// AEAD.
//
// The table is open addressing with linear probing at load <= 1/2 and
// backward-shift deletion (no tombstones), hashed with a caller-chosen
// seed so that peers cannot aim collisions at it (pass a random seed in
// production, a fixed one in the simulator). The entries of each region
// are also linked in a chain, found through a second table of the same
// kind keyed by region, so that Invalidate visits only that region's
// entries: a rekey, which invalidates inside an engine core's poll, costs
// what the region holds, not the cache's capacity.
//
// A Cache belongs to one engine core: no locks, not safe for concurrent
// use. An AEAD it returned stays valid after eviction (entries are never
// recycled), but is no longer found.
type Cache struct {
	ents  []cacheEntry
	index []uint32 // entry index + 1; 0 = empty
	mask  uint32
	n     int // live entries
	free  []uint32
	hand  int
	seed  uint64
	stats CacheStats

	// regions holds, per region with live entries, the head of its
	// chain (entry index + 1; 0 = empty), hashed by region alone.
	regions []uint32

	onRemove func(*AEAD)
}

// SetOnRemove installs f, called with every AEAD that leaves the cache:
// evicted by CLOCK, replaced by a Put for the same CacheKey, removed by
// Invalidate or Purge (before the entry is forgotten). The AEAD itself
// stays valid (whoever holds it may still use it); f releases what the
// owner attached to it (AEAD.SetExt). nil removes the hook.
func (c *Cache) SetOnRemove(f func(*AEAD)) { c.onRemove = f }

func (c *Cache) removed(a *AEAD) {
	if c.onRemove != nil && a != nil {
		c.onRemove(a)
	}
}

type cacheEntry struct {
	key  CacheKey
	aead *AEAD
	ref  bool
	live bool

	// prev and next link the entries of key.Region (entry index + 1; 0:
	// none), the chain's head first.
	prev, next uint32
}

// CacheStats counts a Cache's activity.
type CacheStats struct {
	Hits          uint64
	Misses        uint64
	Inserts       uint64
	Evictions     uint64 // entries displaced by CLOCK
	Invalidations uint64 // entries removed by Invalidate or Purge
}

// NewCache returns a cache of capacity entries (> 0).
func NewCache(capacity int, seed uint64) *Cache {
	if capacity <= 0 || capacity > 1<<30 {
		panic("aesni: cache capacity out of range")
	}
	size := 2
	for size < 2*capacity {
		size <<= 1
	}
	c := &Cache{
		ents:  make([]cacheEntry, capacity),
		index: make([]uint32, size),
		mask:  uint32(size - 1),
		free:  make([]uint32, 0, capacity),
		seed:  seed,

		regions: make([]uint32, size),
	}
	for i := capacity - 1; i >= 0; i-- {
		c.free = append(c.free, uint32(i))
	}
	return c
}

// fmix64 is MurmurHash3's finalizer.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func (c *Cache) home(k *CacheKey) uint32 {
	a := uint64(k.Region)<<32 | uint64(binary.BigEndian.Uint32(k.Peer[:]))
	b := uint64(k.PID)<<8 | uint64(k.Op)
	return uint32(fmix64(fmix64(a^c.seed)^b)) & c.mask
}

// regionHome is region's home position in c.regions.
func (c *Cache) regionHome(region uint32) uint32 {
	return uint32(fmix64(uint64(region)^c.seed^0x5bd1e9955bd1e995)) & c.mask
}

// findRegion returns the c.regions position holding region's chain, or
// the empty position where it would go (and false).
func (c *Cache) findRegion(region uint32) (pos uint32, ok bool) {
	for pos = c.regionHome(region); ; pos = (pos + 1) & c.mask {
		e := c.regions[pos]
		if e == 0 {
			return pos, false
		}
		if c.ents[e-1].key.Region == region {
			return pos, true
		}
	}
}

// link puts live entry i at the head of its region's chain.
func (c *Cache) link(i uint32) {
	e := &c.ents[i]
	pos, ok := c.findRegion(e.key.Region)
	if ok {
		h := c.regions[pos]
		e.next = h
		c.ents[h-1].prev = i + 1
	}
	c.regions[pos] = i + 1
}

// unlink takes entry i out of its region's chain, and the chain out of
// c.regions when i was its last entry (backward-shift deletion).
func (c *Cache) unlink(i uint32) {
	e := &c.ents[i]
	if e.next != 0 {
		c.ents[e.next-1].prev = e.prev
	}
	if e.prev != 0 {
		c.ents[e.prev-1].next = e.next
		e.prev, e.next = 0, 0
		return
	}
	pos, ok := c.findRegion(e.key.Region)
	if !ok || c.regions[pos] != i+1 {
		panic("aesni: cache lost a region's chain")
	}
	if e.next != 0 {
		c.regions[pos] = e.next
		e.next = 0
		return
	}
	hole := pos
	for p := (hole + 1) & c.mask; c.regions[p] != 0; p = (p + 1) & c.mask {
		h := c.regionHome(c.ents[c.regions[p]-1].key.Region)
		if (p-h)&c.mask >= (p-hole)&c.mask {
			c.regions[hole] = c.regions[p]
			hole = p
		}
	}
	c.regions[hole] = 0
}

// find returns the index-table position holding k, or the empty position
// where k would go (and false).
func (c *Cache) find(k *CacheKey) (pos uint32, ok bool) {
	for pos = c.home(k); ; pos = (pos + 1) & c.mask {
		e := c.index[pos]
		if e == 0 {
			return pos, false
		}
		if c.ents[e-1].key == *k {
			return pos, true
		}
	}
}

// Get returns the AEAD cached for k, or nil.
func (c *Cache) Get(k CacheKey) *AEAD {
	pos, ok := c.find(&k)
	if !ok {
		c.stats.Misses++
		return nil
	}
	e := &c.ents[c.index[pos]-1]
	e.ref = true
	c.stats.Hits++
	return e.aead
}

// Put prepares an AEAD for key, caches it under k (replacing what k held)
// and returns it. It fails only as NewAEAD does.
func (c *Cache) Put(k CacheKey, key Key) (*AEAD, error) {
	a, err := NewAEAD(key)
	if err != nil {
		return nil, err
	}
	c.insert(k, a)
	return a, nil
}

// GetOrDerive returns the AEAD for k, deriving K_d from d (the region's
// K_r) with k's Peer, PID and Op on a miss: the serving side's lookup.
func (c *Cache) GetOrDerive(k CacheKey, d *Deriver) (*AEAD, error) {
	if a := c.Get(k); a != nil {
		return a, nil
	}
	return c.Put(k, d.Derive(k.Peer, k.PID, k.Op))
}

func (c *Cache) insert(k CacheKey, a *AEAD) {
	c.stats.Inserts++
	pos, ok := c.find(&k)
	if ok {
		e := &c.ents[c.index[pos]-1]
		if e.aead != a {
			c.removed(e.aead)
		}
		e.aead, e.ref = a, false
		return
	}
	if len(c.free) == 0 {
		c.evict()
		pos, _ = c.find(&k) // the eviction may have shifted the table
	}
	i := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.ents[i] = cacheEntry{key: k, aead: a, live: true}
	c.index[pos] = i + 1
	c.link(i)
	c.n++
}

// evict removes one entry by CLOCK: at most two turns of the hand.
func (c *Cache) evict() {
	for {
		e := &c.ents[c.hand]
		i := c.hand
		c.hand++
		if c.hand == len(c.ents) {
			c.hand = 0
		}
		if !e.live {
			continue
		}
		if e.ref {
			e.ref = false
			continue
		}
		c.remove(uint32(i))
		c.stats.Evictions++
		return
	}
}

// remove deletes entry i from the table and frees it.
func (c *Cache) remove(i uint32) {
	pos, ok := c.find(&c.ents[i].key)
	if !ok || c.index[pos] != i+1 {
		panic("aesni: cache index lost an entry")
	}
	// Backward-shift deletion: move later entries of the probe run into
	// the hole when their home position allows it.
	hole := pos
	for p := (hole + 1) & c.mask; c.index[p] != 0; p = (p + 1) & c.mask {
		h := c.home(&c.ents[c.index[p]-1].key)
		// The entry at p may fill the hole unless its home lies
		// cyclically in (hole, p].
		if (p-h)&c.mask >= (p-hole)&c.mask {
			c.index[hole] = c.index[p]
			hole = p
		}
	}
	c.index[hole] = 0
	c.unlink(i)
	c.removed(c.ents[i].aead)
	c.ents[i] = cacheEntry{}
	c.free = append(c.free, i)
	c.n--
}

// Invalidate removes every entry of region (after a rekey or a
// deregistration) and returns how many it removed. It walks the region's
// chain: its cost is the region's entries, whatever the capacity.
func (c *Cache) Invalidate(region uint32) int {
	removed := 0
	for {
		pos, ok := c.findRegion(region)
		if !ok {
			break
		}
		c.remove(c.regions[pos] - 1) // the head: its successor heads the chain next
		removed++
	}
	c.stats.Invalidations += uint64(removed)
	return removed
}

// Purge removes every entry.
func (c *Cache) Purge() {
	c.stats.Invalidations += uint64(c.n)
	for i := range c.ents {
		if c.ents[i].live {
			c.removed(c.ents[i].aead)
		}
	}
	clear(c.ents)
	clear(c.index)
	clear(c.regions)
	c.free = c.free[:0]
	for i := len(c.ents) - 1; i >= 0; i-- {
		c.free = append(c.free, uint32(i))
	}
	c.n, c.hand = 0, 0
}

// Len returns the number of cached entries; Cap the capacity.
func (c *Cache) Len() int { return c.n }

// Cap returns the capacity fixed by NewCache.
func (c *Cache) Cap() int { return len(c.ents) }

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats { return c.stats }
