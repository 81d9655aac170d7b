package engine

// Replayed requests (SECURITY.md, A2). A request's IV is its sender's
// address ‖ a 64-bit counter that the sender never uses twice, across
// restarts too (aesni.IVSource), and that grows over time: an engine has
// one IV lane, and the lane takes its ranges in order. The serving side
// remembers, per sender address, the highest counter of an authenticated
// request and which of the replayWindow counters below it it has seen, as
// IPsec's anti-replay window does (RFC 4303 §3.4.3). A request whose
// counter was seen, or lies a whole window below the highest, is dropped
// (Stats.ReqReplayed) before it costs anything: no answer, no pull, no
// window. Without this a captured READ request replayed by an on-path
// attacker made the server send its data again, ~60x the bytes of the
// request, and a replayed WRITE request made it pull again.
//
// A sender's counter advances with every message it seals, to anyone, so
// the window must cover the messages a sender can seal while one of its
// requests is overtaken by a later one: 65536 counters are >= 13 ms at
// 5 M seals/s, beyond any TIMEOUT; a genuine request that late is dropped
// (its op times out, as it would have anyway). Only authenticated requests
// reach the table, so only peers holding a K_d for one of our regions take
// entries; when all Config.ReplayPeers entries are taken, the peer that
// sent a request least recently is forgotten (Stats.ReplayEvictions), and
// its requests captured before are accepted once more if replayed later.
// The table lives in the core: an engine restart forgets it too.
//
// Multi-core engines will draw IVs from several lanes whose ranges
// interleave; each lane then needs its own window (a lane id in the
// counter's top bits would do).

const (
	replayWindow = 1 << 16 // counters below the highest that are remembered
	replayWords  = replayWindow / 64
)

type replayPeer struct {
	addr uint32
	top  uint64 // highest counter accepted
	last int64  // when a request of this peer was last accepted
}

// replayTable maps sender addresses to windows. Fixed size, allocated at
// New: looking up and updating a known peer allocates nothing.
type replayTable struct {
	peers []replayPeer
	bits  []uint64 // replayWords words per peer
	index []int32  // open addressing (linear probing) by address: peer, or -1
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

func (t *replayTable) slot(addr uint32) uint32 {
	return (addr * 0x9e3779b1) >> t.shift // Fibonacci hashing: the top bits
}

// find returns where addr's peer is in index, or the empty slot where it
// would go (index[k] < 0).
func (t *replayTable) find(addr uint32) uint32 {
	k := t.slot(addr)
	for t.index[k] >= 0 && t.peers[t.index[k]].addr != addr {
		k = (k + 1) & t.mask
	}
	return k
}

// remove takes the peer at index slot k out of the index (backward-shift
// deletion: no tombstones).
func (t *replayTable) remove(k uint32) {
	t.index[k] = -1
	for j := (k + 1) & t.mask; t.index[j] >= 0; j = (j + 1) & t.mask {
		home := t.slot(t.peers[t.index[j]].addr)
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

// accept records counter ctr of an authenticated request from addr at
// time now and reports whether it is new: false when the counter was
// seen, or is replayWindow or more below the highest one seen.
func (t *replayTable) accept(addr uint32, ctr uint64, now int64) bool {
	k := t.find(addr)
	p := t.index[k]
	fresh := p < 0
	if fresh {
		p = t.newPeer(addr, k)
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

// newPeer takes an entry for addr (the least recently active peer's when
// all are in use: counted in t.evictions) and puts it at index slot k.
func (t *replayTable) newPeer(addr uint32, k uint32) int32 {
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
		t.remove(t.find(t.peers[p].addr))
		t.evictions++
		k = t.find(addr) // the removal may have moved entries
	}
	t.peers[p].addr = addr
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
