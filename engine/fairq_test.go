package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// ---- the queue alone -------------------------------------------------------

// testFair is a fairQueue of len(weights) owners (weight 0: no portal
// yet, weighed 1) over a pool of its own.
type testFair struct {
	q fairQueue
	p inboundPool
	t int64
}

func newTestFair(weights ...int) *testFair {
	g := newTenantGens(len(weights))
	for o, w := range weights {
		if w > 0 {
			g.opened(o, w)
		}
	}
	return &testFair{q: newFairQueue(len(weights), g), p: newInboundPool(1024)}
}

// add queues n requests of owner, length bytes each.
func (f *testFair) add(owner uint16, length uint32, n int) {
	for range n {
		i := f.p.get()
		f.t++
		f.p.e[i] = inbound{owner: owner, length: length, arrival: f.t}
		f.q.push(f.p.e, i, owner)
	}
}

// serve takes n requests in turn (as responder.serve does) and returns
// their owners in order.
func (f *testFair) serve(tb testing.TB, n int) []uint16 {
	var got []uint16
	for range n {
		t := f.q.turn(f.p.e)
		i := f.q.o[t].head
		got = append(got, f.p.e[i].owner)
		if f.q.owners > 1 {
			f.q.charge(t, costOf(&f.p.e[i]))
		}
		f.q.remove(f.p.e, t, noEntry, i)
		f.p.put(i)
		f.audit(tb)
	}
	return got
}

func (f *testFair) audit(tb testing.TB) {
	tb.Helper()
	seen := make([]uint32, len(f.p.e))
	n, err := f.q.audit("test", f.p.e, seen, 1)
	if err == nil && n+f.p.nfree != len(f.p.e) {
		err = fmt.Errorf("%d queued, %d free of %d", n, f.p.nfree, len(f.p.e))
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// runs is seq as (owner, count) runs: [0 0 1] is "0x2 1x1".
func runs(seq []uint16) string {
	s := ""
	for i := 0; i < len(seq); {
		j := i
		for j < len(seq) && seq[j] == seq[i] {
			j++
		}
		s += fmt.Sprintf(" %dx%d", seq[i], j-i)
		i = j
	}
	return s
}

// Two backlogged owners share the service by bytes, by weight: an owner
// of 64 B requests is served 64 of them (4 KB, a quantum) for each 4 KB
// request of the other, 128 at weight 2. The owner that joined with its
// queue empty (1) goes first with a quantum, then they take turns.
func TestFairQueueBytesAndWeights(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		want    string
	}{
		{[]int{0, 0}, " 1x64 0x1 1x64 0x1 1x64 0x1 1x64 0x1 1x164"},
		{[]int{1, 1}, " 1x64 0x1 1x64 0x1 1x64 0x1 1x64 0x1 1x164"},
		{[]int{1, 2}, " 1x128 0x1 1x128 0x1 1x128 0x1 1x36 0x1"},
		{[]int{2, 1}, " 1x64 0x2 1x64 0x2 1x292"},
	} {
		t.Run(fmt.Sprint(tc.weights), func(t *testing.T) {
			f := newTestFair(tc.weights...)
			f.add(0, 4096, 4)
			f.add(1, 64, 420)
			f.audit(t)
			if got := runs(f.serve(t, 424)); got != tc.want {
				t.Fatalf("service by owner (-want +got)\n-%s\n+%s", tc.want, got)
			}
			if f.q.len() != 0 || f.q.owners != 0 || f.p.nfree != len(f.p.e) {
				t.Fatalf("after serving all: %d queued, %d owners, %d free", f.q.len(), f.q.owners, f.p.nfree)
			}
		})
	}
}

// An owner alone is served FIFO with no turns and no deficit; a second
// owner's request, its queue empty, is served next, whatever the first
// one's turn: ahead of the backlog, then behind the owners that joined
// before it.
func TestFairQueueFreshOwnerFirst(t *testing.T) {
	f := newTestFair(0, 0, 0)
	f.add(0, 64, 200)
	if got := runs(f.serve(t, 10)); got != " 0x10" || f.q.o[0].deficit != 0 {
		t.Fatalf("alone: %s, deficit %d", got, f.q.o[0].deficit)
	}
	f.add(1, 64, 1)
	f.add(2, 4096, 1)
	if got := runs(f.serve(t, 3)); got != " 1x1 2x1 0x1" {
		t.Fatalf("joined: %s, want 1x1 2x1 0x1", got)
	}
	// Both backlogged now: owner 2 joins, and owner 1 behind it.
	f.add(2, 4096, 3)
	f.add(1, 4096, 3)
	if got := runs(f.serve(t, 68)); got != " 2x1 1x1 0x64 2x1 1x1" {
		t.Fatalf("joined again: %s", got)
	}
}

// ---- the serving side --------------------------------------------------------

// servedTags is the tags of the requests that frames answer, in the
// order of their first frame.
func servedTags(t *testing.T, frames [][]byte) []uint64 {
	t.Helper()
	var tags []uint64
	for _, fr := range frames {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(tags, f.Tag) {
			tags = append(tags, f.Tag)
		}
	}
	return tags
}

// victimRequest is a request of type typ for the victim owner's region,
// from (and with an IV of) 10.0.8.src, as its reader there would send it.
func (p *boundsPair) victimRequest(typ wire.Type, src byte, ctr uint64, length uint32, tag uint64, high bool) []byte {
	addr := [4]byte{10, 0, 8, src}
	op := abi.OpRead
	if typ == wire.TypeWriteReq {
		op = abi.OpWrite
	}
	fr := forgedRequest(p.b, typ, addr, addr, ctr, p.rv, aesni.DeriveKey(testKr, addr, testPID, uint8(op)), length, tag)
	if high { // the flag is authenticated: seal again
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			panic(err)
		}
		f.Flags |= wire.FlagHigh
		b := make([]byte, MaxFrameBytes)
		n := wire.Encode(b, &f, 0)
		a, _ := aesni.NewAEAD(aesni.DeriveKey(testKr, addr, testPID, uint8(op)))
		a.SealRequest(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b))
		fr = b[:n]
	}
	return fr
}

// An owner's 64 B read arriving last, behind another owner's deep queue
// of 4 KB reads of its class, is served within one round: it joins the
// ring with its queue empty, and goes first. The classes keep their
// meaning: a high-class read goes before the low class's whole queue.
func TestServeOwnerBehindDeepQueue(t *testing.T) {
	for _, high := range []bool{false, true} {
		t.Run(fmt.Sprintf("high=%v", high), func(t *testing.T) {
			p := newBoundsPair(t, func(c *Config) {})
			for k := range 16 {
				if n := p.answers(p.attack(wire.TypeReadReq, byte(k), uint64(1+k))); n != 0 {
					t.Fatalf("the deep queue's read %d answered at once", k)
				}
			}
			const victimTag = 1000
			if n := p.answers(p.victimRequest(wire.TypeReadReq, 1, 1, 64, victimTag, high)); n != 0 {
				t.Fatal("the victim's read answered at once")
			}
			if err := p.b.Audit(); err != nil {
				t.Fatal(err)
			}
			p.b.Poll(p.now)
			tags := servedTags(t, p.tb.take())
			if len(tags) != 17 || tags[0] != victimTag {
				t.Fatalf("served %v, want the victim's (%d) first of 17", tags, victimTag)
			}
			if !slices.IsSorted(tags[1:]) {
				t.Fatalf("the deep queue served out of order: %v", tags[1:])
			}
			if err := p.b.Audit(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Owners of two backlogged queues share the serving by bytes: a run of
// an owner's 64 B reads for each 4 KB read of the other's. One owner
// alone is served FIFO.
func TestServeOwnersShareBytes(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) {
		c.InboundQueue, c.NackThreshold, c.ServeBudget = 512, 400, 512
		c.InboundPerOwner, c.InboundPerSender = 200, 200
	})
	for k := range 8 {
		p.answers(p.attack(wire.TypeReadReq, byte(k), uint64(1+k)))
	}
	for k := range 150 {
		p.answers(p.victimRequest(wire.TypeReadReq, byte(k%4), uint64(1+k), 64, uint64(1000+k), false))
	}
	p.b.Poll(p.now)
	var seq []uint16
	for _, tag := range servedTags(t, p.tb.take()) {
		seq = append(seq, map[bool]uint16{true: 1, false: 2}[tag >= 1000])
	}
	if got, want := runs(seq), " 1x64 2x1 1x64 2x1 1x22 2x6"; got != want {
		t.Fatalf("served by owner (-want +got)\n-%s\n+%s", want, got)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}

	// One owner: FIFO, whatever the sizes and senders.
	var want []uint64
	for k := range 12 {
		length := []uint32{4096, 64, 1000}[k%3]
		p.answers(p.victimRequest(wire.TypeReadReq, byte(k%5), uint64(200+k), length, uint64(2000+k), false))
		want = append(want, uint64(2000+k))
	}
	p.b.Poll(p.now)
	if got := servedTags(t, p.tb.take()); !slices.Equal(got, want) {
		t.Fatalf("one owner served %v, want FIFO %v", got, want)
	}
}

// A READ partly streamed (out of tx buffers) stays at the head of its
// owner and resumes before anything else of its class, a request of an
// owner that joined meanwhile included.
func TestServeResumesPartlyStreamed(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) {})
	p.answers(p.attack(wire.TypeReadReq, 1, 1), p.attack(wire.TypeReadReq, 2, 2))
	p.tb.limit = 1
	p.b.Poll(p.now)
	if fr := p.tb.take(); len(fr) != 1 || servedTags(t, fr)[0] != 1 {
		t.Fatalf("first Poll: %d frames, want one of request 1", len(fr))
	}
	if p.b.srv.resume[abi.ClassLow] != 2 {
		t.Fatalf("resume %d, want the attacker's owner 2", p.b.srv.resume[abi.ClassLow])
	}
	p.answers(p.victimRequest(wire.TypeReadReq, 1, 1, 64, 1000, false))
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.tb.limit = 0
	p.b.Poll(p.now)
	if got := servedTags(t, p.tb.take()); !slices.Equal(got, []uint64{1, 1000, 2}) {
		t.Fatalf("served %v after the resume, want [1 1000 2]", got)
	}
	if s := p.b.Stats(); s.ReqServed != 4 { // with the warm-up read
		t.Fatalf("%d served, want 4", s.ReqServed)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// The pull queue's owners take turns too: a WRITE of an owner whose
// queue was empty takes the next pull context that frees, ahead of
// another owner's writes queued before it.
func TestPullsInTurns(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) { c.PullContexts, c.PullsPerOwner, c.PullsPerSender = 2, 2, 2 })
	for k := range 6 {
		p.answers(p.attack(wire.TypeWriteReq, byte(k), uint64(1+k)))
	}
	p.b.Poll(p.now)
	if got := servedTags(t, p.tb.take()); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("pulls %v, want [1 2]: two contexts", got)
	}
	p.answers(p.victimRequest(wire.TypeWriteReq, 1, 1, 4096, 1000, false))
	p.b.Poll(p.now)
	if n := len(p.tb.take()); n != 0 {
		t.Fatalf("%d frames with no context free", n)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	// Past PullIdleTimeout the attacker's idle pulls are reclaimed, one
	// per pull to start.
	p.now += int64(p.b.cfg.Timeout/4) + 1000
	p.b.Poll(p.now)
	if got := servedTags(t, p.tb.take()); !slices.Equal(got, []uint64{1000, 3}) {
		t.Fatalf("pulls %v after the idle timeout, want [1000 3]", got)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// Serving two owners in turns allocates nothing: requests queued by
// owner, owners joining and leaving the ring, turns, writes moved to the
// pull queue and pulled.
func TestServeTurnsAllocFree(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) {})
	var frames [][]byte
	for k := range 600 {
		frames = append(frames,
			p.attack(wire.TypeReadReq, byte(k%4), uint64(100+k)),
			p.attack(wire.TypeReadReq, byte(k%4), uint64(10000+k)),
			p.victimRequest(wire.TypeReadReq, byte(k%4), uint64(100+k), 64, uint64(100+k), k%2 == 0),
			p.victimRequest(wire.TypeWriteReq, byte(k%4), uint64(10000+k), 4096, uint64(10000+k), false))
	}
	k := 0
	round := func() {
		p.b.ReceiveBurst(p.now, frames[k:k+4])
		k += 4
		p.b.Poll(p.now)
		p.now += int64(p.b.cfg.Timeout) / 2 // the pulls expire unanswered
		p.tb.free = append(p.tb.free, p.tb.q...)
		p.tb.q, p.tb.qlen = p.tb.q[:0], p.tb.qlen[:0]
	}
	for range 8 { // every sender's K_d derived
		round()
	}
	allocs := testing.AllocsPerRun(500, round)
	if allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
	if s := p.b.Stats(); s.ReqServed < 1000 || s.PullsIssued < 400 || s.ReqNacked != 0 {
		t.Fatalf("%+v", s)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// With shortFirst (the inbound queues while the core bounds bulk work),
// a short request goes ahead of the bulk requests its owner queued,
// behind the short ones placed so before it and behind a READ partly
// streamed at the head, shortBurst in a row at most before a bulk
// request is served; the bulk requests keep their order. Without it the
// owner's FIFO is in arrival order.
func TestFairQueueShortFirst(t *testing.T) {
	// order queues requests of owner 0 of the lengths given (arrival
	// 1, 2, ...), marks the head partly streamed where sentAt says (after
	// that many), and returns the arrivals in the order served.
	order := func(shortFirst bool, sentAt int, lengths ...uint32) []int64 {
		f := newTestFair(0)
		f.q.shortFirst = shortFirst
		for k, n := range lengths {
			if k == sentAt {
				f.p.e[f.q.o[0].head].sent = 1
			}
			f.add(0, n, 1)
			f.audit(t)
		}
		var got []int64
		for f.q.len() > 0 {
			i := f.q.o[0].head
			got = append(got, f.p.e[i].arrival)
			f.q.remove(f.p.e, 0, noEntry, i)
			f.p.put(i)
			f.audit(t)
		}
		return got
	}
	const B, S = 4096, ShortBytes
	for _, tc := range []struct {
		name       string
		shortFirst bool
		sentAt     int
		lengths    []uint32
		want       []int64
	}{
		{"off", false, -1, []uint32{B, B, S, 64}, []int64{1, 2, 3, 4}},
		{"ahead", true, -1, []uint32{B, B, S, 64, B, 64}, []int64{3, 4, 6, 1, 2, 5}},
		{"short first in line", true, -1, []uint32{64, B, 64, B}, []int64{1, 3, 2, 4}},
		{"behind a partly streamed head", true, 2, []uint32{B, B, 64}, []int64{1, 3, 2}},
		{"only short", true, -1, []uint32{64, 64, 64}, []int64{1, 2, 3}},
		{"one past the run", true, -1, []uint32{B, 64, 64, 64, 64, 64, 64, 64, 64, 64, B},
			[]int64{2, 3, 4, 5, 6, 7, 8, 9, 1, 10, 11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := order(tc.shortFirst, tc.sentAt, tc.lengths...); !slices.Equal(got, tc.want) {
				t.Fatalf("served %v, want %v", got, tc.want)
			}
		})
	}

	// A short WRITE keeps its place: the pull queue it moves to is in
	// arrival order.
	w := newTestFair(0)
	w.q.shortFirst = true
	w.add(0, 4096, 1)
	i := w.p.get()
	w.p.e[i] = inbound{op: abi.OpWrite, length: 64, arrival: 2}
	w.q.push(w.p.e, i, 0)
	w.audit(t)
	if w.q.o[0].tail != i || w.q.o[0].run != 0 {
		t.Fatalf("a short WRITE behind a bulk READ: tail %d (want %d), run %d", w.q.o[0].tail, i, w.q.o[0].run)
	}

	// The run ends when a bulk request is served: the next short ones go
	// ahead again.
	f := newTestFair(0)
	f.q.shortFirst = true
	f.add(0, B, 2)
	f.add(0, 64, shortBurst+1)
	f.audit(t)
	if o := &f.q.o[0]; o.run != shortBurst || o.bulk != 2 || f.p.e[o.tail].length != 64 {
		t.Fatalf("after %d short requests behind two bulk ones: run %d, bulk %d, tail of %d bytes", shortBurst+1, o.run, o.bulk, f.p.e[o.tail].length)
	}
	for range shortBurst + 1 { // the eight ahead, then the first bulk one
		f.serve(t, 1)
	}
	f.add(0, 64, 1)
	f.audit(t)
	if i := f.q.o[0].head; f.p.e[i].arrival != f.t {
		t.Fatalf("a short request after a bulk one was served is not at the head (arrival %d, head's %d)", f.t, f.p.e[i].arrival)
	}
}
