package kv

import "slices"

// slabAlloc hands out extents of the slab region to records, memcached
// style: the region is cut into pages, a page is given whole to one size
// class on demand and cut into that class's extents. When a class has no
// free extent and no page is left, CLOCK picks a victim among the class's
// extents: an extent whose slot was used (set, or hinted by a client)
// since the hand last passed keeps its place once; the first one that was
// not is evicted (its slot emptied through evict).
type slabAlloc struct {
	pageBytes uint64
	pages     uint32 // pages in the region
	used      uint32 // pages given to classes
	classes   []slabClass
	// evict empties the slot whose index is given (the owner of an
	// extent CLOCK chose), leaving its extent to the caller; ref reports
	// and clears the slot's use since the hand last passed.
	evict func(slot int32)
	ref   func(slot int32) bool
}

// slabClass is one size of extent.
type slabClass struct {
	size    uint32   // bytes per extent, a multiple of slabAlign
	perPage uint32   // extents per page
	pages   []uint32 // the class's pages, in the order given
	owners  []int32  // per extent: its slot's index + 1; 0 when free
	// free extents, oldest first from head: an extent freed goes to the
	// back, so it is reused as late as possible, which gives a client
	// still reading the record it held time to finish before another
	// record is written over it (the read would see another stamp and
	// read again, but later is cheaper).
	free []uint32
	head int
	hand uint32 // CLOCK's position among the class's extents
}

// extent names one extent: its class and its number in the class.
type extent struct {
	class int32 // -1: none
	n     uint32
}

var noExtent = extent{class: -1}

// newSlabAlloc plans classes from slabAlign up to maxRecord bytes, each
// about 1.25 times the one before, and pages of at least 1 MB.
func newSlabAlloc(slabBytes uint64, maxRecord uint32) *slabAlloc {
	top := roundUp(uint64(maxRecord), slabAlign)
	a := &slabAlloc{pageBytes: max(1<<20, top)}
	a.pages = uint32(slabBytes / a.pageBytes)
	for size := uint64(slabAlign); ; {
		a.classes = append(a.classes, slabClass{size: uint32(size), perPage: uint32(a.pageBytes / size)})
		if size >= top {
			break
		}
		size = min(top, max(size+slabAlign, roundUp(size*5/4, slabAlign)))
	}
	return a
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// offset is where extent e starts in the slab region.
func (a *slabAlloc) offset(e extent) uint64 {
	c := &a.classes[e.class]
	return uint64(c.pages[e.n/c.perPage])*a.pageBytes + uint64(e.n%c.perPage)*uint64(c.size)
}

// classFor is the smallest class holding n bytes.
func (a *slabAlloc) classFor(n uint32) int {
	lo, hi := 0, len(a.classes)
	for lo < hi {
		m := (lo + hi) / 2
		if a.classes[m].size >= n {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// alloc returns a free extent of at least n bytes: from its class's free
// list, from a new page, by evicting (CLOCK) in its class or, when the
// class holds no page at all, from a page taken from another class. It
// fails only when no page can be had (the slab has no page, or n is
// larger than the largest class). The extent belongs to nobody until own.
func (a *slabAlloc) alloc(n uint32) (extent, bool) {
	ci := a.classFor(n)
	if ci >= len(a.classes) {
		return noExtent, false
	}
	c := &a.classes[ci]
	if c.nfree() == 0 && a.used < a.pages {
		a.grow(ci)
	}
	if e, ok := c.popFree(); ok {
		return extent{class: int32(ci), n: e}, true
	}
	if len(c.owners) == 0 {
		// No page at all for this size: take one from the class holding
		// the most (memcached's slab reassignment), emptying it.
		if !a.steal(ci) {
			return noExtent, false
		}
		e, _ := c.popFree()
		return extent{class: int32(ci), n: e}, true
	}
	return extent{class: int32(ci), n: a.clock(ci)}, true
}

// steal moves the last page of the class with the most pages to class ci,
// evicting every key on it.
func (a *slabAlloc) steal(ci int) bool {
	vi := -1
	for j := range a.classes {
		if j != ci && len(a.classes[j].pages) > 0 && (vi < 0 || len(a.classes[j].pages) >= len(a.classes[vi].pages)) {
			vi = j
		}
	}
	if vi < 0 {
		return false
	}
	v := &a.classes[vi]
	page := v.pages[len(v.pages)-1]
	first := uint32(len(v.owners)) - v.perPage
	for e := first; e < uint32(len(v.owners)); e++ {
		if o := v.owners[e]; o != 0 {
			a.evict(o - 1)
		}
	}
	v.free = slices.DeleteFunc(v.free[v.head:], func(e uint32) bool { return e >= first })
	v.head = 0
	v.owners = v.owners[:first]
	v.pages = v.pages[:len(v.pages)-1]
	if len(v.owners) == 0 {
		v.hand = 0
	} else {
		v.hand %= uint32(len(v.owners))
	}
	a.give(ci, page)
	return true
}

// grow gives class ci the next unused page.
func (a *slabAlloc) grow(ci int) {
	a.give(ci, a.used)
	a.used++
}

// give adds page to class ci, cut into free extents.
func (a *slabAlloc) give(ci int, page uint32) {
	c := &a.classes[ci]
	base := uint32(len(c.owners))
	c.pages = append(c.pages, page)
	for i := range c.perPage {
		c.owners = append(c.owners, 0)
		c.free = append(c.free, base+i)
	}
}

// clock evicts in class ci and returns the extent it freed. Every extent
// is owned (the class has no free one), so it ends within two turns.
func (a *slabAlloc) clock(ci int) uint32 {
	c := &a.classes[ci]
	n := uint32(len(c.owners))
	for range 2 * n {
		e := c.hand
		c.hand = (c.hand + 1) % n
		o := c.owners[e]
		if o == 0 || a.ref(o-1) {
			continue
		}
		a.evict(o - 1)
		return e
	}
	// ref clears what it reports, so the second turn finds a victim
	// unless ref is broken.
	panic("kv: slab CLOCK found no victim in two turns")
}

// own records that slot holds extent e.
func (a *slabAlloc) own(e extent, slot int) { a.classes[e.class].owners[e.n] = int32(slot) + 1 }

// release frees extent e.
func (a *slabAlloc) release(e extent) {
	c := &a.classes[e.class]
	c.owners[e.n] = 0
	c.free = append(c.free, e.n)
}

func (c *slabClass) nfree() int { return len(c.free) - c.head }

// popFree takes the extent freed longest ago.
func (c *slabClass) popFree() (uint32, bool) {
	if c.head == len(c.free) {
		return 0, false
	}
	e := c.free[c.head]
	c.head++
	if c.head == len(c.free) || c.head >= 1024 && 2*c.head >= len(c.free) {
		// Move what is left to the front (amortised: at most as many
		// moves as pops).
		n := copy(c.free, c.free[c.head:])
		c.free, c.head = c.free[:n], 0
	}
	return e, true
}

// extentBytes is the size of e's class.
func (a *slabAlloc) extentBytes(e extent) uint32 { return a.classes[e.class].size }
