package engine

// Replayed requests (SECURITY.md, A2). A request's IV is its sender's
// address ‖ a 64-bit counter that the sender never uses twice, across
// restarts too (aesni.IVSource). Each core of the sender draws its
// counters from its own IV lane, which takes its ranges in order, and
// tags them with its core id in their top bits (sender.go, ivTagShift):
// the counters of one lane grow over time, those of an engine's lanes
// interleave. The serving side remembers, per sender address and lane
// tag, the highest counter of an authenticated request and which of the
// replayWindow counters below it it has seen, as IPsec's anti-replay
// window does (RFC 4303 §3.4.3). A request whose
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
// entries; when all Config.ReplayPeers entries are taken, the lane that
// sent a request least recently is forgotten (Stats.ReplayEvictions), and
// its requests captured before are accepted once more if replayed later.
// The table lives in the core: an engine restart forgets it too.
//
// Which core holds a lane's window does not depend on the rx queue its
// requests arrive on: Steer sends every request of one sender lane to the
// core a hash of its address and tag picks, so each window lives on
// exactly one core of a multi-core serving engine.

const (
	replayWindow = 1 << 16 // counters below the highest that are remembered
	replayWords  = replayWindow / 64
)

type replayPeer struct {
	key  uint64 // sender address << 8 | lane tag
	top  uint64 // highest counter accepted
	last int64  // when a request of this lane was last accepted
}

// replayKey names a sender lane: the IV's address and the tag in the top
// bits of its counter.
func replayKey(addr uint32, ctr uint64) uint64 { return uint64(addr)<<8 | ctr>>ivTagShift }

// replayTable maps sender lanes (address, lane tag) to windows. Fixed size, allocated at
// New: looking up and updating a known peer allocates nothing.
type replayTable struct {
	peers []replayPeer
	bits  []uint64 // replayWords words per peer
	index []int32  // open addressing (linear probing) by key: peer, or -1
	mask  uint32
	shift uint32 // 32 - log2(len(index))
	n     int    // peers in use (peers[:n])

	evictions uint64 // peers forgotten to make room
}

func newReplayTable(peers int) *replayTable {
	if peers <= 0 {
		return nil
	}
	size, bits := 2, uint32(1)
	for size < 2*peers {
		size <<= 1
		bits++
	}
	t := &replayTable{
		peers: make([]replayPeer, peers),
		bits:  make([]uint64, peers*replayWords),
		index: make([]int32, size),
		mask:  uint32(size - 1),
		shift: 32 - bits,
	}
	for i := range t.index {
		t.index[i] = -1
	}
	return t
}

func (t *replayTable) slot(key uint64) uint32 {
	return uint32((key*0x9e3779b97f4a7c15)>>32) >> t.shift // Fibonacci hashing: the top bits
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
// request from addr at time now and reports whether it is new: false when
// the counter was seen, or is replayWindow or more below the highest one
// seen of its lane.
func (t *replayTable) accept(addr uint32, ctr uint64, now int64) bool {
	key := replayKey(addr, ctr)
	k := t.find(key)
	p := t.index[k]
	fresh := p < 0
	if fresh {
		p = t.newPeer(key, k)
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
		return false // too old to tell: dropped
	case w[ctr%replayWindow/64]&(1<<(ctr%64)) != 0:
		return false
	}
	w[ctr%replayWindow/64] |= 1 << (ctr % 64)
	pe.last = now
	return true
}

// newPeer takes an entry for key (the least recently active lane's when
// all are in use: counted in t.evictions) and puts it at index slot k.
func (t *replayTable) newPeer(key uint64, k uint32) int32 {
	var p int32
	if t.n < len(t.peers) {
		p = int32(t.n)
		t.n++
	} else {
		p = 0
		for i := range t.peers {
			if t.peers[i].last < t.peers[p].last {
				p = int32(i)
			}
		}
		t.remove(t.find(t.peers[p].key))
		t.evictions++
		k = t.find(key) // the removal may have moved entries
	}
	t.peers[p].key = key
	t.index[k] = p
	return p
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
