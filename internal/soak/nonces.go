package soak

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
)

// A OneRMA frame's AES-GCM nonce is its header's IV: the sending engine's
// IPv4 address ‖ a 64-bit counter that engine never hands out twice, not
// across cores and not across restarts (aesni.IVSource persists a
// high-water mark before using a counter below it). Every key an engine
// seals with (each K_d, the reserved key) thus gets nonces from one
// counter space, and a (key, nonce) pair can repeat only if some
// (address, counter) repeats. The soak checks that stronger property over
// every frame an engine sent: no (address, counter) is seen twice, the
// address half of the nonce is the frame's IPv4 source, and each
// incarnation of an engine (between two SIGKILLs) uses only counters
// above every counter its previous incarnation used.

// pageShift: the set keeps counters in bitmap pages of 2^15 counters
// (4 KB). An engine uses its counters nearly densely (a request takes
// one, a 4 KB response a range of 64, a core takes ranges of 2^20), so a
// page holds many frames; ranges skipped at a restart touch no page.
const (
	pageShift = 15
	pageWords = 1 << pageShift / 64
)

type page [pageWords]uint64

// incarnation is what one life of an engine sent.
type incarnation struct {
	Frames   uint64
	Min, Max uint64 // counters
}

// sender is one engine's address and what its frames used.
type sender struct {
	addr  uint32
	pages map[uint64]*page
	// The page of the previous frame: consecutive frames of a sender
	// mostly share one.
	lastKey  uint64
	lastPage *page
	// deaths are the times (Unix ns, ascending) at which an incarnation
	// of this engine was seen dead; a frame captured before the k-th
	// belongs to an incarnation at most k. Written by the fault
	// injector, read by the capture.
	deaths atomic.Pointer[[]int64]
	incs   []incarnation
}

// nonceSet is the set of (address, counter) pairs captured, with the
// counters each incarnation of each engine used. Only the capture
// goroutine adds to it; Died may be called from any goroutine.
type nonceSet struct {
	senders  map[uint32]*sender
	distinct uint64
	repeats  uint64
	foreign  uint64 // frames from an address no engine holds
	mismatch uint64 // frames whose nonce names another address than their source
	pagesN   uint64
	mu       sync.Mutex // first problems, for the report
	problems []string
}

// newNonceSet tracks the engines at addrs.
func newNonceSet(addrs []netip.Addr) *nonceSet {
	s := &nonceSet{senders: map[uint32]*sender{}}
	for _, a := range addrs {
		v := addr32(a)
		sd := &sender{addr: v, pages: map[uint64]*page{}, lastKey: ^uint64(0)}
		sd.deaths.Store(new([]int64))
		s.senders[v] = sd
	}
	return s
}

func addr32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addrOf(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Died records that the engine at a was seen dead at ns (Unix ns): frames
// captured after it come from its next incarnation.
func (s *nonceSet) Died(a netip.Addr, ns int64) {
	sd := s.senders[addr32(a)]
	old := *sd.deaths.Load()
	next := append(append(make([]int64, 0, len(old)+1), old...), ns)
	sd.deaths.Store(&next)
}

func (s *nonceSet) problem(format string, args ...any) {
	s.mu.Lock()
	if len(s.problems) < 10 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
	s.mu.Unlock()
}

// add records the nonce (ivAddr ‖ counter) of a frame from src captured
// at ts (Unix ns). It reports whether the frame counts: not a repeat, from
// an engine, naming its own address.
func (s *nonceSet) add(src, ivAddr uint32, counter uint64, ts int64) bool {
	sd := s.senders[src]
	if sd == nil {
		s.foreign++
		s.problem("a OneRMA frame from %s, which is no engine's address", addrOf(src))
		return false
	}
	if ivAddr != src {
		s.mismatch++
		s.problem("a frame from %s carries the nonce of %s (counter %d)", addrOf(src), addrOf(ivAddr), counter)
		return false
	}
	// Every frame counts for its incarnation, a repeated one too (a
	// restart without the IV state repeats, and goes back).
	deaths := *sd.deaths.Load()
	k := sort.Search(len(deaths), func(i int) bool { return deaths[i] > ts })
	for len(sd.incs) <= k {
		sd.incs = append(sd.incs, incarnation{Min: ^uint64(0)})
	}
	in := &sd.incs[k]
	in.Frames++
	in.Min, in.Max = min(in.Min, counter), max(in.Max, counter)
	key := counter >> pageShift
	p := sd.lastPage
	if key != sd.lastKey {
		if p = sd.pages[key]; p == nil {
			p = new(page)
			sd.pages[key] = p
			s.pagesN++
		}
		sd.lastKey, sd.lastPage = key, p
	}
	bit := counter & (1<<pageShift - 1)
	w, m := &p[bit/64], uint64(1)<<(bit%64)
	if *w&m != 0 {
		s.repeats++
		s.problem("nonce %s ‖ counter %d seen twice", addrOf(src), counter)
		return false
	}
	*w |= m
	s.distinct++
	return true
}

// Bytes is the memory the set's pages take.
func (s *nonceSet) Bytes() uint64 { return s.pagesN * uint64(len(page{})*8) }

// check reports every violation: repeats, foreign and mismatched
// nonces, and for each engine an incarnation that sent nothing or used a
// counter at or below one its previous incarnation used. The caller
// makes sure the capture has processed every frame sent before.
func (s *nonceSet) check() []string {
	s.mu.Lock()
	out := append([]string(nil), s.problems...)
	s.mu.Unlock()
	for _, sd := range s.sortedSenders() {
		n := len(*sd.deaths.Load()) + 1
		for k := 0; k < n; k++ {
			if k >= len(sd.incs) || sd.incs[k].Frames == 0 {
				out = append(out, fmt.Sprintf("%s: no frame captured from its incarnation %d (of %d)", addrOf(sd.addr), k+1, n))
				continue
			}
			if k > 0 && k-1 < len(sd.incs) && sd.incs[k-1].Frames > 0 && sd.incs[k].Min <= sd.incs[k-1].Max {
				out = append(out, fmt.Sprintf("%s: incarnation %d used counter %d, at or below %d of the incarnation before its SIGKILL (IV state not persisted)",
					addrOf(sd.addr), k+1, sd.incs[k].Min, sd.incs[k-1].Max))
			}
		}
	}
	return out
}

func (s *nonceSet) sortedSenders() []*sender {
	out := make([]*sender, 0, len(s.senders))
	for _, sd := range s.senders {
		out = append(out, sd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}
