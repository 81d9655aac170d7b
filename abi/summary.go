package abi

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// SegmentSummaryOff is the summary flag word (u32) of a portal segment,
// beside the arm word in the header's second cache line. An application
// that rings its core's summary doorbell (Summary.Ring) after every
// publication of its command ring stores 1 there once, before its first
// such publication; the engine reads it in its fallback scans, and once it
// has seen 1 it looks at the portal's command ring only when the portal's
// bit is rung, when it left commands there itself, and in those scans.
// A segment whose word stays 0 (a client older than the summary doorbell)
// has its command ring looked at in every poll, as before.
const SegmentSummaryOff = 68

// SummaryOn is the value of the summary flag word of a portal that rings.
const SummaryOn = 1

// SummaryWordBits is how many portals one summary word covers: portal p's
// bit is bit p%64 of word p/64.
const SummaryWordBits = 64

// SummaryBytes is the size of a summary doorbell covering portals
// portals: one u64 word per 64 portals.
func SummaryBytes(portals int) int {
	return (portals + SummaryWordBits - 1) / SummaryWordBits * 8
}

// ErrSummaryMemory: summary memory that is empty, not a whole number of
// 8-byte words, or not 8-byte aligned.
var ErrSummaryMemory = errors.New("abi: summary memory must be whole, aligned 8-byte words")

// Summary is a core's summary doorbell: one bit per portal of the core
// in u64 words of a page every application of the core maps (shared,
// writable by all of them), which an application sets after it publishes
// commands and the engine takes (swaps to 0) once per poll, so that it
// reads the command rings of the portals that rang and of no other.
//
// Every application of the core can write every word: a bit set by
// another costs the engine one look at a ring with nothing new (what
// every ring cost before the summary); a bit cleared by another hides a
// post until the engine's next fallback scan, which looks at every
// portal whatever the summary says (engine.Config.SummaryScan bounds the
// delay). The engine never trusts the summary for more than where to
// look first.
type Summary struct {
	w []atomic.Uint64
}

// NewSummary views mem (shared memory, 8-byte aligned, a whole number of
// words) as a summary doorbell.
func NewSummary(mem []byte) (*Summary, error) {
	if len(mem) == 0 || len(mem)%8 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, ErrSummaryMemory
	}
	return &Summary{w: unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(unsafe.SliceData(mem))), len(mem)/8)}, nil
}

// Words is the number of u64 words.
func (s *Summary) Words() int { return len(s.w) }

// Portals is how many portals the summary covers.
func (s *Summary) Portals() int { return len(s.w) * SummaryWordBits }

// Ring sets portal's bit, after the application published its command
// ring's producer index (a sequentially consistent store, which Go's
// atomics are): it loads the word and sets the bit (atomic OR) only when
// it is clear, so a portal posting faster than the engine polls writes
// the shared line once per poll. The load must follow the index's store
// in a single total order (sequentially consistent atomics on both), or
// the engine could take the bit this load saw and miss the commands just
// published. A portal outside the summary does not ring.
func (s *Summary) Ring(portal uint32) {
	i := portal / SummaryWordBits
	if int(i) >= len(s.w) {
		return
	}
	w, m := &s.w[i], uint64(1)<<(portal%SummaryWordBits)
	if w.Load()&m == 0 {
		w.Or(m)
	}
}

// Take returns word i's bits and clears them (engine side): a load, and
// an atomic swap only when some bit is set, so a summary nobody rang is
// only read.
func (s *Summary) Take(i int) uint64 {
	w := &s.w[i]
	if w.Load() == 0 {
		return 0
	}
	return w.Swap(0)
}
