package engine

// destTable records when each destination last answered an op of this
// core: any authenticated answer (a READ's response chunk, a WRITE's
// pull or acknowledgment, a NACK, an error status). The arbiter lets a
// tenant borrow window beyond its guaranteed share only for an op whose
// destination answered within Config.Responsive (shares.go): ops to a
// destination that stops answering hold no more than their tenant's
// share.
//
// A fixed table of Config.Destinations entries, allocated at New: an
// open-addressed index by address (linear probing, backward-shift
// deletion, as replay.go's) and a list of the entries in the order they
// last answered, so that recording an answer and taking the entry of the
// least recently answered destination for a new one are O(1). Only
// authenticated answers enter it, so only destinations holding a K_d of
// one of this core's ops can take entries; a destination evicted is
// unresponsive until it answers again.
type destTable struct {
	e     []dest
	index []int32 // open addressing by address: entry, or -1
	mask  uint32
	shift uint32 // 32 - log2(len(index))
	n     int    // entries in use (e[:n])
	// lru and mru are the ends of the answer-ordered list (entries'
	// prev/next; -1 ends it): lru answered least recently.
	lru, mru  int32
	evictions uint64
}

type dest struct {
	ip         uint32
	lastNs     int64 // its latest authenticated answer
	prev, next int32
}

func newDestTable(entries int) *destTable {
	size, bits := 2, uint32(1)
	for size < 2*entries {
		size <<= 1
		bits++
	}
	t := &destTable{
		e:     make([]dest, entries),
		index: make([]int32, size),
		mask:  uint32(size - 1),
		shift: 32 - bits,
		lru:   -1,
		mru:   -1,
	}
	for i := range t.index {
		t.index[i] = -1
	}
	return t
}

func (t *destTable) home(ip uint32) uint32 {
	return uint32((uint64(ip)*0x9e3779b97f4a7c15)>>32) >> t.shift // Fibonacci hashing: the top bits
}

// find returns where ip's entry is in index, or the empty slot where it
// would go (index[k] < 0).
func (t *destTable) find(ip uint32) uint32 {
	k := t.home(ip)
	for t.index[k] >= 0 && t.e[t.index[k]].ip != ip {
		k = (k + 1) & t.mask
	}
	return k
}

// remove takes the entry at index slot k out of the index.
func (t *destTable) remove(k uint32) {
	t.index[k] = -1
	for j := (k + 1) & t.mask; t.index[j] >= 0; j = (j + 1) & t.mask {
		home := t.home(t.e[t.index[j]].ip)
		// Entry j may move back to the hole k if its home is not in (k, j].
		if (j-home)&t.mask >= (j-k)&t.mask {
			t.index[k], t.index[j] = t.index[j], -1
			k = j
		}
	}
}

func (t *destTable) unlinkLRU(i int32) {
	d := &t.e[i]
	if d.prev >= 0 {
		t.e[d.prev].next = d.next
	} else {
		t.lru = d.next
	}
	if d.next >= 0 {
		t.e[d.next].prev = d.prev
	} else {
		t.mru = d.prev
	}
	d.prev, d.next = -1, -1
}

func (t *destTable) pushMRU(i int32) {
	d := &t.e[i]
	d.prev, d.next = t.mru, -1
	if t.mru >= 0 {
		t.e[t.mru].next = i
	} else {
		t.lru = i
	}
	t.mru = i
}

// answered records an authenticated answer from ip at now.
func (t *destTable) answered(ip uint32, now int64) {
	if m := t.mru; m >= 0 && t.e[m].ip == ip { // the latest to answer, again: most answers
		t.e[m].lastNs = now
		return
	}
	k := t.find(ip)
	i := t.index[k]
	switch {
	case i >= 0:
		t.unlinkLRU(i)
	case t.n < len(t.e):
		i = int32(t.n)
		t.n++
		t.index[k] = i
	default: // full: the least recently answered destination makes room
		i = t.lru
		t.unlinkLRU(i)
		t.remove(t.find(t.e[i].ip))
		t.evictions++
		t.index[t.find(ip)] = i // the removal may have moved entries
	}
	t.e[i].ip, t.e[i].lastNs = ip, now
	t.pushMRU(i)
}

// lastAnswer is when ip last answered; false when the table does not
// know it (it never answered, or it was evicted).
func (t *destTable) lastAnswer(ip uint32) (int64, bool) {
	i := t.index[t.find(ip)]
	if i < 0 {
		return 0, false
	}
	return t.e[i].lastNs, true
}

// stalled moves every answer time by gap (Core.Stalled): time the core
// could not look counts against no destination.
func (t *destTable) stalled(gap int64) {
	for i := range t.e[:t.n] {
		t.e[i].lastNs += gap
	}
}
