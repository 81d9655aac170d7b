package engine

import "fmt"

// Replayed requests (SECURITY.md, A2). A request's IV is its sender's
// address ‖ a 64-bit counter that the sender never uses twice, across
// restarts too (aesni.IVSource). Each core of the sender draws its
// counters from its own IV lane, which takes its ranges in order, and
// tags them with its core id in their top bits (sender.go, ivTagShift):
// the counters of one lane grow over time, those of an engine's lanes
// interleave. The serving side remembers, per region owner, sender
// address and lane tag, the highest counter of an authenticated request
// and which of the replayWindow counters below it it has seen, as
// IPsec's anti-replay window does (RFC 4303 §3.4.3). A request whose
// counter was seen, or lies a whole window below the highest, is dropped
// (Stats.ReqReplayed) before it costs anything: no answer, no pull, no
// window. Without this a captured READ request replayed by an on-path
// attacker made the server send its data again, ~60x the bytes of the
// request, and a replayed WRITE request made it pull again.
//
// A sender lane's counter advances with every message it seals, to
// anyone, so the window must cover the messages a lane can seal while one
// of its requests is overtaken by a later one: 65536 counters are >= 13 ms at
// 5 M seals/s, beyond any TIMEOUT; a genuine request that late is dropped
// (its op times out, as it would have anyway). Only authenticated requests
// reach the table, so only peers holding a K_d for one of our regions take
// entries. The table lives in the core: an engine restart forgets it too.
//
// Why the owner is part of the key. K_d = AES_K_r(address ‖ PID ‖ op):
// whoever holds K_r, a region's owner first of all, derives a K_d for any
// address, and so authenticates requests with any source address and any
// IV it likes for its own regions. Were windows keyed by address and lane
// alone, such a request with a victim's address and a counter far ahead
// would push the victim's window past every counter the victim will use
// (its genuine requests then dropped as too old until the server
// restarts), and new lanes minted at will would evict the victim's
// windows (re-opening replay of its captured requests). Two rules take
// that away. A request whose IV address is not its frame's source address
// is dropped before authentication (prepRequest: Stats.ReqIVMismatch), so
// the window a request moves is that of the address it claims to come
// from, the address its K_d is bound to. And the window is that of the
// region's owner tenant (region.tenant) too: a K_d derived from one's own
// K_r authenticates only requests for one's own regions, which move only
// windows of one's own namespace, whatever address they claim. The
// victim's requests to other owners' regions have windows of their own,
// which no key of the forger's reaches.
//
// Room. When all Config.ReplayPeers entries are taken, a new lane needs
// one forgotten (Stats.ReplayEvictions), and that lane's requests captured
// before are accepted once more if replayed later. Each owner is
// guaranteed share = ReplayPeers/Tenants entries: an owner holding its
// share or more forgets its own least recently active lane; an owner
// below it takes the least recently active lane of the owner holding
// most beyond its share (there is one: the table is full). So the lanes
// of an owner within its share are forgotten only for its own new ones,
// and a forger minting lanes for its own regions (any address, any lane)
// takes no more than free entries and its own share: once at its share,
// it forgets only its own. The lanes of one (owner, sender address) are
// bounded by Config.ReplayLanesPerSender (an engine uses one lane per
// core); a request of a further lane is dropped
// (Stats.ReplayLanesRefused).
//
// Which core holds a lane's window does not depend on the rx queue its
// requests arrive on: Steer sends every request of one sender lane to the
// core a hash of its address and tag picks, so each window lives on
// exactly one core of a multi-core serving engine (for every owner).

const (
	replayWindow = 1 << 16 // counters below the highest that are remembered
	replayWords  = replayWindow / 64
	// A key holds the owner tenant above the address and the lane tag
	// (MaxTenants fits its 12 bits), and the tenant index's generation
	// (tenantGens), modulo 4096, above it.
	replayOwnerShift = 40
	replayGenShift   = 52
	replayGenMask    = 1<<(64-replayGenShift) - 1
)

type replayPeer struct {
	key        uint64 // generation << 52 | owner << 40 | sender address << 8 | lane tag
	top        uint64 // highest counter accepted
	owner      uint16
	prev, next int32 // in its owner's list, least recently active first (-1: none)
}

// replayKey names a sender lane of an owner's: the region's owner
// tenant and its index's generation, the IV's address and the tag in the
// top bits of its counter.
func replayKey(owner, gen uint16, addr uint32, ctr uint64) uint64 {
	return uint64(gen)<<replayGenShift | uint64(owner)<<replayOwnerShift | uint64(addr)<<8 | ctr>>ivTagShift
}

// replayList is one owner's entries, least recently active first.
type replayList struct{ head, tail int32 }

// replayVerdict is what the table says of a request.
type replayVerdict uint8

const (
	replayFresh  replayVerdict = iota // a counter not seen: serve it
	replaySeen                        // seen, or a window below the highest: a replay
	replayNoLane                      // a lane beyond ReplayLanesPerSender: dropped
)

// replayTable maps owners' sender lanes to windows. Fixed size, allocated
// at New: looking up and updating a known lane allocates nothing.
type replayTable struct {
	peers []replayPeer
	bits  []uint64 // replayWords words per peer
	index []int32  // open addressing (linear probing) by key: peer, or -1
	mask  uint32
	shift uint32 // 64 - log2(len(index))
	seed  uint64 // keys the hash: senders choose addresses, not slots
	n     int    // peers in use (peers[:n])

	lists []replayList // by owner tenant
	held  []int32      // entries by owner tenant
	share int32        // each owner's guaranteed entries (ReplayPeers/Tenants)
	lanes int          // ReplayLanesPerSender

	evictions uint64           // peers forgotten to make room
	refused   uint64           // requests of lanes beyond the cap
	tstats    []TenantCounters // by owner: its evictions and refusals
}

// newReplayTable makes a table of peers entries for owners tenants, each
// guaranteed peers/owners of them, at most lanes per owner and sender
// address; tstats (nil: a table of its own) counts per owner.
func newReplayTable(peers, owners, lanes int, seed uint64, tstats []TenantCounters) *replayTable {
	if peers <= 0 {
		return nil
	}
	size, bits := 2, uint32(1)
	for size < 2*peers {
		size <<= 1
		bits++
	}
	if tstats == nil {
		tstats = make([]TenantCounters, owners)
	}
	t := &replayTable{
		peers:  make([]replayPeer, peers),
		bits:   make([]uint64, peers*replayWords),
		index:  make([]int32, size),
		mask:   uint32(size - 1),
		shift:  64 - bits,
		seed:   seed,
		lists:  make([]replayList, owners),
		held:   make([]int32, owners),
		share:  int32(peers / owners),
		lanes:  lanes,
		tstats: tstats,
	}
	for i := range t.index {
		t.index[i] = -1
	}
	for i := range t.lists {
		t.lists[i] = replayList{-1, -1}
	}
	return t
}

func (t *replayTable) slot(key uint64) uint32 { return uint32(mix64(key^t.seed) >> t.shift) }

// mix64 is MurmurHash3's 64-bit finalizer: keyed by a seed the sender
// does not know, a table's slots cannot be aimed at.
func mix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// find returns where key's peer is in index, or the empty slot where it
// would go (index[k] < 0).
func (t *replayTable) find(key uint64) uint32 {
	k := t.slot(key)
	for t.index[k] >= 0 && t.peers[t.index[k]].key != key {
		k = (k + 1) & t.mask
	}
	return k
}

// remove takes the peer at index slot k out of the index (backward-shift
// deletion: no tombstones).
func (t *replayTable) remove(k uint32) {
	t.index[k] = -1
	for j := (k + 1) & t.mask; t.index[j] >= 0; j = (j + 1) & t.mask {
		home := t.slot(t.peers[t.index[j]].key)
		// Entry j may move back to the hole k if its home is not in (k, j].
		if (j-home)&t.mask >= (j-k)&t.mask {
			t.index[k], t.index[j] = t.index[j], -1
			k = j
		}
	}
}

// window is peer p's bitmap.
func (t *replayTable) window(p int32) []uint64 {
	return t.bits[int(p)*replayWords : (int(p)+1)*replayWords]
}

// accept records counter ctr (with its lane tag) of an authenticated
// request from addr for a region of owner (generation gen), and reports
// whether it is fresh: replaySeen when the counter was seen, or is
// replayWindow or more below the highest one seen of its lane;
// replayNoLane when the lane is new and addr already has
// ReplayLanesPerSender lanes of owner's.
func (t *replayTable) accept(owner, gen uint16, addr uint32, ctr uint64) replayVerdict {
	key := replayKey(owner, gen, addr, ctr)
	k := t.find(key)
	p := t.index[k]
	fresh := p < 0
	if fresh {
		if !t.laneRoom(key, ctr>>ivTagShift) {
			t.refused++
			t.tstats[owner].ReplayLanesRefused++
			return replayNoLane
		}
		p = t.newPeer(key, owner, k)
	}
	pe := &t.peers[p]
	w := t.window(p)
	switch {
	case fresh:
		clear(w)
		pe.top = ctr
	case ctr > pe.top:
		if ctr-pe.top >= replayWindow {
			clear(w)
		} else {
			clearRange(w, pe.top+1, ctr) // counters the window now stands for afresh
		}
		pe.top = ctr
	case pe.top-ctr >= replayWindow:
		return replaySeen // too old to tell: dropped
	case w[ctr%replayWindow/64]&(1<<(ctr%64)) != 0:
		return replaySeen
	}
	w[ctr%replayWindow/64] |= 1 << (ctr % 64)
	t.touch(p)
	return replayFresh
}

// laneRoom reports whether the sender of key (its owner, generation and
// address) may open lane tag: it holds fewer than ReplayLanesPerSender
// others. Only for a lane not in the table: a probe per other tag, and
// none at all when the cap is every tag a counter can carry.
func (t *replayTable) laneRoom(key, tag uint64) bool {
	if t.lanes >= 1<<(64-ivTagShift) {
		return true
	}
	base, n := key&^(1<<(64-ivTagShift)-1), 0
	for o := uint64(0); o < 1<<(64-ivTagShift); o++ {
		if o != tag && t.index[t.find(base|o)] >= 0 {
			if n++; n >= t.lanes {
				return false
			}
		}
	}
	return true
}

// newPeer takes an entry for key of owner (when all are in use, one
// forgotten: victim) and puts it at index slot k.
func (t *replayTable) newPeer(key uint64, owner uint16, k uint32) int32 {
	var p int32
	if t.n < len(t.peers) {
		p = int32(t.n)
		t.n++
	} else {
		p = t.victim(owner)
		t.remove(t.find(t.peers[p].key))
		t.unlink(p)
		t.evictions++
		t.tstats[t.peers[p].owner].ReplayEvictions++
		k = t.find(key) // the removal may have moved entries
	}
	t.peers[p] = replayPeer{key: key, owner: owner, prev: -1, next: -1}
	t.held[owner]++
	l := &t.lists[owner]
	if l.tail >= 0 {
		t.peers[l.tail].next = p
		t.peers[p].prev = l.tail
	} else {
		l.head = p
	}
	l.tail = p
	t.index[k] = p
	return p
}

// victim is the entry forgotten for a new lane of owner when the table is
// full: owner's own least recently active one when it holds its share or
// more; else that of the owner holding most beyond its share (ties: the
// lowest index), which exists since the table is full.
func (t *replayTable) victim(owner uint16) int32 {
	if h := t.held[owner]; h > 0 && h >= t.share {
		return t.lists[owner].head
	}
	best, over := -1, int32(0)
	for o, h := range t.held {
		if d := h - t.share; d > over {
			best, over = o, d
		}
	}
	if best < 0 {
		panic("engine: replay table full with no owner beyond its share")
	}
	return t.lists[best].head
}

// touch makes p its owner's most recently active lane.
func (t *replayTable) touch(p int32) {
	pe := &t.peers[p]
	l := &t.lists[pe.owner]
	if l.tail == p {
		return
	}
	t.unlinkFrom(l, p)
	pe.prev, pe.next = l.tail, -1
	t.peers[l.tail].next = p // l.tail >= 0: the list held p and another
	l.tail = p
}

// unlink takes p out of its owner's list and count.
func (t *replayTable) unlink(p int32) {
	o := t.peers[p].owner
	t.unlinkFrom(&t.lists[o], p)
	t.held[o]--
}

func (t *replayTable) unlinkFrom(l *replayList, p int32) {
	pe := &t.peers[p]
	if pe.prev >= 0 {
		t.peers[pe.prev].next = pe.next
	} else {
		l.head = pe.next
	}
	if pe.next >= 0 {
		t.peers[pe.next].prev = pe.prev
	} else {
		l.tail = pe.prev
	}
	pe.prev, pe.next = -1, -1
}

// audit checks the owners' lists and counts against the table.
func (t *replayTable) audit() error {
	seen := 0
	for o := range t.lists {
		n, prev := int32(0), int32(-1)
		for p := t.lists[o].head; p >= 0; p = t.peers[p].next {
			if int(t.peers[p].owner) != o || t.peers[p].prev != prev || t.index[t.find(t.peers[p].key)] != p {
				return fmt.Errorf("audit: replay list of owner %d broken at %d", o, p)
			}
			if n++; int(n) > t.n {
				return fmt.Errorf("audit: replay list of owner %d loops", o)
			}
			prev = p
		}
		if prev != t.lists[o].tail || n != t.held[o] {
			return fmt.Errorf("audit: replay owner %d: %d listed, %d held", o, n, t.held[o])
		}
		seen += int(n)
	}
	if seen != t.n {
		return fmt.Errorf("audit: replay table: %d listed, %d in use", seen, t.n)
	}
	return nil
}

// clearRange clears the bits of counters [from, to) in window w, a word
// at a time.
func clearRange(w []uint64, from, to uint64) {
	for from < to {
		pos := from % replayWindow
		bit := pos % 64
		n := min(to-from, 64-bit) // bits of this word in the range: 1..64
		w[pos/64] &^= (^uint64(0) >> (64 - n)) << bit
		from += n
	}
}
