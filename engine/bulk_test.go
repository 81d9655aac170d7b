package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// The bound's rules, on one stage: priority work passes, bulk passes
// while the stage's allowance lasts (the first item always), and nothing
// is held back while no priority work is in progress or was seen within
// the hold.
func TestBulkBoundTake(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.PollBytes = 4096
	var st Stats
	b := newBulkBound(&cfg, &st)
	now := int64(10 * time.Second)
	for k := range 3 {
		if !b.take(now, bulkServe, abi.ClassLow, 4096, false) {
			t.Fatalf("bulk item %d held back with no priority work", k)
		}
	}
	b.ini = 1
	if !b.take(now, bulkServe, abi.ClassLow, 4096, false) || b.take(now, bulkServe, abi.ClassLow, 4096, false) {
		t.Fatal("with priority work in progress, want one 4 KB item per stage and Poll")
	}
	if !b.take(now, bulkData, abi.ClassLow, 4096, false) || !b.take(now, bulkServe, abi.ClassHigh, 4096, false) || !b.take(now, bulkServe, abi.ClassLow, ShortBytes, false) {
		t.Fatal("another stage, the high class and short ops are not held back")
	}
	b.reset()
	if !b.take(now, bulkServe, abi.ClassLow, 1<<20, false) || b.take(now, bulkServe, abi.ClassLow, ShortBytes+1, false) {
		t.Fatal("the first item of a Poll starts whatever its size, and uses the allowance up")
	}
	b.ini = 0
	// After a short low-class op the bound stays on for PriorityHold,
	// after high-class work for HighHold.
	checkHoldEnds(t, b, now, abi.ClassLow, int64(DefaultPriorityHold))
	now += int64(time.Second)
	checkHoldEnds(t, b, now, abi.ClassHigh, int64(DefaultHighHold))
	if st.BulkHeld != 4 {
		t.Fatalf("BulkHeld %d, want 4", st.BulkHeld)
	}
	b.ini = 1
	b.reset()
	b.take(now, bulkPull, abi.ClassLow, 4096, false)
	if b.take(now, bulkPull, abi.ClassLow, 4096, false) || !b.take(now, bulkPull, abi.ClassLow, 4096, true) {
		t.Fatal("old bulk work is held back")
	}
	if st.BulkHeld != 5 {
		t.Fatalf("BulkHeld %d, want 5", st.BulkHeld)
	}
}

// checkHoldEnds has b see priority work of class cl at now, with no
// priority work in progress, and checks that the bound holds a bulk item
// back (one, counted) until hold has passed, and none after it.
func checkHoldEnds(t *testing.T, b *bulkBound, now int64, cl abi.Class, hold int64) {
	t.Helper()
	b.saw(now, cl)
	b.reset()
	if b.take(now+hold-1, bulkServe, abi.ClassLow, 4096, false); b.take(now+hold-1, bulkServe, abi.ClassLow, 4096, false) {
		t.Fatalf("after %v work the bound goes off before its hold", cl)
	}
	if !b.take(now+hold, bulkServe, abi.ClassLow, 4096, false) {
		t.Fatalf("after %v work the bound stays on after its hold", cl)
	}
}

// servePolls queues four low-class 4 KB READ requests (and, with high,
// one high-class 64 B READ request after them) at engine b, whose
// PollBytes is pollBytes, and returns the low-class READs b serves in
// each of three Polls at the requests' arrival plus at[k].
func servePolls(t *testing.T, pollBytes int, high bool, at [3]int64) (lo [3]int) {
	lo, _ = servePollsMid(t, pollBytes, high, false, at)
	return lo
}

// midPost is an op source whose Poll runs do once: an application
// posting while the core is in its Poll.
type midPost struct{ do func() }

func (m *midPost) Poll(int64) int {
	if m.do != nil {
		m.do()
		m.do = nil
	}
	return 0
}

func (m *midPost) Completed(int64, abi.Completion) {}

// servePollsMid is servePolls; with mid, an application of b that rings
// its summary doorbell posts a 64 B READ while b is in its first Poll
// (after the Poll drained the rings), and it returns how many commands
// b took in that Poll.
func servePollsMid(t *testing.T, pollBytes int, high, mid bool, at [3]int64) (lo [3]int, posted uint64) {
	t.Helper()
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.PollBytes, cb.HighHold = pollBytes, testHighHold
	p := newPair(t, ca, cb)
	var during midPost
	var app *summaryApp
	if mid {
		mem := aligned(abi.SummaryBytes(cb.Portals))
		if err := p.b.SetSummary(mem); err != nil {
			t.Fatal(err)
		}
		sum, _ := abi.NewSummary(mem)
		app = openSummaryApp(t, p.b, sum, true)
		var err error
		if app.slots, err = p.b.AllocSlots(app.id, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := p.b.AttachSource(&during, 1); err != nil {
			t.Fatal(err)
		}
	}
	loApp, hiApp, src, ml, mh := lowHighApps(t, p, 4096)
	p.now += int64(cb.Timeout) // past the hold of the first READ (not priority work anyway)
	for k := range 4 {
		loApp.post(t, readCmd(loApp.slots[k], ipOf("10.0.0.2"), src, 0, ml, uint64(k)*4096, 4096, uint64(100+k)))
	}
	if high {
		hiApp.post(t, readCmd(hiApp.slots[0], ipOf("10.0.0.2"), src, 0, mh, 0, 64, 200))
	}
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	if mid {
		sink, _ := p.b.RegisterRegion(app.id, make([]byte, 64), abi.PermAll, testKr)
		during.do = func() {
			app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), sink, 0, sink, 0, 64, 300))
			app.sum.Ring(uint32(app.id))
		}
	}
	for k := range 3 {
		before := p.b.Stats().Posted
		p.b.Poll(p.now + at[k])
		if k == 0 {
			posted = p.b.Stats().Posted - before
		}
		for _, fr := range p.tb.take() {
			var f wire.Fields
			if _, err := wire.Decode(fr, &f); err != nil {
				t.Fatal(err)
			}
			if f.Offset == 0 && f.Length > 64 {
				lo[k]++
			}
		}
	}
	return lo, posted
}

// testHighHold is servePolls' engine's HighHold: below TIMEOUT/2 of
// testConfig, so that the 4 KB READ requests it holds are not old yet
// when it ends.
const testHighHold = 200 * time.Microsecond

// A serving core with PollBytes serves one 4 KB READ per Poll after a
// high-class request; the rest follow one per Poll while the high class's
// hold lasts (longer than a short op's), then all at once. Without a
// priority request, or without the bound, one Poll serves them all.
func TestPollBytesServe(t *testing.T) {
	hold, holdHigh := int64(DefaultPriorityHold), int64(testHighHold)
	for _, tc := range []struct {
		name      string
		pollBytes int
		high      bool
		at        [3]int64
		want      [3]int
	}{
		{"bound, high request", 4096, true, [3]int64{0, 1, 2}, [3]int{1, 1, 1}},
		{"bound, two READs a Poll", 8192, true, [3]int64{0, 1, 2}, [3]int{2, 2, 0}},
		{"bound, past a short op's hold", 4096, true, [3]int64{0, 1, hold + 1}, [3]int{1, 1, 1}},
		{"bound, past the high class's hold", 4096, true, [3]int64{0, 1, holdHigh + 1}, [3]int{1, 1, 2}},
		{"bound, no priority work", 4096, false, [3]int64{0, 1, 2}, [3]int{4, 0, 0}},
		{"no bound", 0, true, [3]int64{0, 1, 2}, [3]int{4, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := servePolls(t, tc.pollBytes, tc.high, tc.at); got != tc.want {
				t.Fatalf("4 KB READs served by Poll %v, want %v", got, tc.want)
			}
		})
	}
}

// A 64 B READ posted while a Poll with no priority work in progress runs
// (after it drained the rings; its application rings the summary
// doorbell) is taken before that Poll serves bulk work, and bounds it:
// the Poll serves one 4 KB READ, not all four.
func TestPollBytesRedrain(t *testing.T) {
	for _, tc := range []struct {
		pollBytes int
		want      [3]int
	}{{4096, [3]int{1, 1, 1}}, {0, [3]int{4, 0, 0}}} {
		lo, posted := servePollsMid(t, tc.pollBytes, false, true, [3]int64{0, 1, 2})
		if lo != tc.want || (tc.pollBytes > 0) != (posted == 1) {
			t.Errorf("PollBytes %d: 4 KB READs served by Poll %v, want %v; the first Poll took %d commands", tc.pollBytes, lo, tc.want, posted)
		}
	}
}

// While priority work is in progress, a burst's short frames are
// received before its bulk chunks, and the completions they made are
// published before the bulk chunks are opened: a 64 B READ whose answer
// comes last in a burst behind a 4 KB READ's chunks completes first, and
// is visible to its application when ReceiveBurst returns.
func TestReceiveBurstShortFirst(t *testing.T) {
	for _, crypto := range testCryptos() {
		for _, pollBytes := range []int{0, 8192} {
			ca, cb := pairConfigs(crypto)
			ca.PollBytes = pollBytes
			p := newPair(t, ca, cb)
			app := openApp(t, p.a, abi.ClassLow, 4)
			owner := openApp(t, p.b, abi.ClassLow, 0)
			src, _ := p.b.RegisterRegion(owner.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
			sink, _ := p.a.RegisterRegion(app.id, make([]byte, 8192), abi.PermAll, testKr)
			app.post(t, readCmd(app.slots[3], ipOf("10.0.0.2"), src, 0, sink, 0, 8, 99)) // resolves b
			p.run()
			app.completions()
			app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), src, 0, sink, 0, 4096, 1))
			app.post(t, readCmd(app.slots[1], ipOf("10.0.0.2"), src, 0, sink, 4096, 64, 2))
			p.a.Poll(p.now)
			p.ta.deliverTo(p.now, p.b)
			p.b.Poll(p.now)
			frames := p.tb.take()
			if len(frames) != 4 {
				t.Fatalf("%d frames from b, want 4", len(frames))
			}
			var short []byte
			var burst [][]byte
			for _, fr := range frames {
				if bulkFrame(fr) {
					burst = append(burst, fr)
				} else {
					short = fr
				}
			}
			burst = append(burst, short)
			p.a.ReceiveBurst(p.now, burst)
			seen := app.completions()
			p.a.Poll(p.now)
			all := append(seen, app.completions()...)
			want, wantSeen := []uint64{1, 2}, 0
			if pollBytes > 0 {
				want, wantSeen = []uint64{2, 1}, 1
			}
			if len(all) != 2 || all[0].Cookie != want[0] || all[1].Cookie != want[1] || len(seen) != wantSeen {
				t.Fatalf("%s, PollBytes %d: completions %+v (%d seen before Poll), want cookies %v (%d before Poll)", crypto, pollBytes, all, len(seen), want, wantSeen)
			}
			for _, c := range all {
				if c.Status != abi.StatusOK {
					t.Fatalf("%s: completion %+v", crypto, c)
				}
			}
			if err := p.a.Audit(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A short op beside a bulk one takes the two-pass receive and allocates
// nothing.
func TestPollBytesHotPathAllocs(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.PollBytes = 4096
	cfg.HairpinSelf = true // the frames come back through ReceiveBurst
	tx := newTestTx(64)
	c := newCore(t, cfg, tx)
	app := openApp(t, c, abi.ClassLow, 2)
	m := make([]byte, 16384)
	r, _ := c.RegisterRegion(app.id, m, abi.PermAll, testKr)
	big := app.keyed(readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 8192, 4096, 1))
	small := app.keyed(readCmd(app.slots[1], ipOf("10.0.0.1"), r, 0, r, 12288, 64, 2))
	now := int64(1000)
	n := 0
	// The two ops' answers leave in one burst, short and bulk frames.
	for _, cmd := range []*abi.Command{big, small} {
		cmd.Encode(app.cmd.Reserve())
		app.cmd.Commit()
	}
	app.cmd.Publish()
	c.Poll(now)
	tx.deliverTo(now, c) // the requests
	c.Poll(now)
	kinds := map[bool]int{}
	for k, i := range tx.q {
		kinds[bulkFrame(tx.bufs[i][:tx.qlen[k]])]++
	}
	if kinds[true] != 3 || kinds[false] != 1 {
		t.Fatalf("answers: %d bulk and %d short frames, want 3 and 1", kinds[true], kinds[false])
	}
	tx.deliverTo(now, c)
	c.Poll(now)
	n -= len(app.completions())
	allocs := testing.AllocsPerRun(1000, func() {
		for _, cmd := range []*abi.Command{big, small} {
			cmd.Encode(app.cmd.Reserve())
			app.cmd.Commit()
		}
		app.cmd.Publish()
		for k := 0; k < 4; k++ {
			c.Poll(now)
			tx.deliverTo(now, c)
		}
		for e := app.cpl.Peek(); e != nil; e = app.cpl.Peek() {
			n++
			app.cpl.Advance()
		}
		app.cpl.Release()
		now += 100
	})
	if allocs != 0 || n != 2000 {
		t.Fatalf("%v allocs per op, %d completions", allocs, n)
	}
}

// testCryptos are the seal backends this build has.
func testCryptos() []string {
	if mbBuilt {
		return []string{CryptoGo, CryptoIPsecMB}
	}
	return []string{CryptoGo}
}

// WRITEs under the bound: with a priority op in flight at the initiator,
// a burst of pulls for low-class 4 KB WRITEs has their data sent one
// WRITE a Poll, in pull order, and a high-class WRITE pulled meanwhile
// passes them; every one commits and completes OK.
func TestPollBytesWrites(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	ca.PollBytes = 4096
	p := newPair(t, ca, cb)
	lo := openApp(t, p.a, abi.ClassLow, 8)
	hi := openApp(t, p.a, abi.ClassHigh, 2)
	owner := openApp(t, p.b, abi.ClassLow, 0)
	dst, _ := p.b.RegisterRegion(owner.id, make([]byte, 8*4096), abi.PermRemoteWrite|abi.PermRemoteRead, testKr)
	srcLo, _ := p.a.RegisterRegion(lo.id, make([]byte, 8*4096), abi.PermAll, testKr)
	srcHi, _ := p.a.RegisterRegion(hi.id, make([]byte, 4096), abi.PermAll, testKr)
	lo.post(t, readCmd(lo.slots[7], ipOf("10.0.0.2"), dst, 0, srcLo, 0, 8, 99)) // resolves b
	p.run()
	lo.completions()
	b := ipOf("10.0.0.2")
	for k := range 4 {
		lo.post(t, writeCmd(lo.slots[k], b, dst, uint64(k)*4096, srcLo, uint64(k)*4096, 4096, uint64(k)))
	}
	hi.post(t, writeCmd(hi.slots[0], b, dst, 4*4096, srcHi, 0, 4096, 10))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now) // five pulls
	p.tb.deliverTo(p.now, p.a)
	// The high-class WRITE is priority work: the bound is on, and of the
	// four low-class WRITEs pulled one sends its data now.
	var got []uint64
	for range 20 {
		p.a.Poll(p.now)
		p.ta.deliverTo(p.now, p.b)
		p.b.Poll(p.now)
		p.tb.deliverTo(p.now, p.a)
		for _, c := range append(lo.completions(), hi.completions()...) {
			if c.Status != abi.StatusOK {
				t.Fatalf("completion %+v", c)
			}
			got = append(got, c.Cookie)
		}
		for _, c := range []*Core{p.a, p.b} {
			if err := c.Audit(); err != nil {
				t.Fatal(err)
			}
		}
		p.now += 1000
	}
	auditBoth(t, p)
	if len(got) != 5 || got[0] != 10 && got[1] != 10 {
		t.Fatalf("completions %v: want all five, the high-class WRITE among the first two", got)
	}
	t.Logf("completions %v, held %d", got, p.a.Stats().BulkHeld)
	if st := p.a.Stats(); st.BulkHeld == 0 {
		t.Fatal("the bound held nothing back")
	}
}

// requestLengths posts cmds on app a of core p.a, runs one Poll of p.a
// and returns the lengths of the READ requests it sent, in order.
func requestLengths(t *testing.T, p *pair, a *testApp, cmds []*abi.Command) []uint32 {
	t.Helper()
	for _, c := range cmds {
		a.post(t, c)
	}
	p.a.Poll(p.now)
	var got []uint32
	for _, fr := range p.ta.take() {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			t.Fatal(err)
		}
		if f.Type == wire.TypeReadReq {
			got = append(got, f.Length)
		}
	}
	if err := p.a.Audit(); err != nil {
		t.Fatal(err)
	}
	return got
}

// With the bound set, a short op queued behind bulk ops of its own
// application (so of its tenant and class) enters service before them;
// without it, the class FIFO's order holds, and the window lets the
// short op go only after the bulk ops ahead of it.
func TestShortFirstInItsQueue(t *testing.T) {
	for _, tc := range []struct {
		pollBytes int
		want      []uint32
	}{
		{4096, []uint32{64, 4096}}, // the short op first; then the bound's one bulk op a Poll
		{0, []uint32{4096, 4096}},  // the 8 KB window's two bulk ops
	} {
		ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
		ca.PollBytes, ca.WindowBytes = tc.pollBytes, 8192
		p := newPair(t, ca, cb)
		loApp, _, src, ml, _ := lowHighApps(t, p, 4096)
		var cmds []*abi.Command
		for k := range 4 {
			cmds = append(cmds, readCmd(loApp.slots[k], ipOf("10.0.0.2"), src, 0, ml, uint64(k)*4096, 4096, uint64(100+k)))
		}
		cmds = append(cmds, readCmd(loApp.slots[4], ipOf("10.0.0.2"), src, 0, ml, 0, 64, 200))
		if got := requestLengths(t, p, loApp, cmds); !slices.Equal(got, tc.want) {
			t.Errorf("PollBytes %d: READ requests sent %v, want %v", tc.pollBytes, got, tc.want)
		}
	}
}

// Short ops pass a bulk op of their queue shortBurst times in a row,
// then the bulk op goes: a stream of short ops does not starve it.
func TestShortFirstBurst(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	ca.PollBytes = 4096
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, abi.ClassLow, shortBurst+4)
	owner := openApp(t, p.b, abi.ClassLow, 0)
	src, _ := p.b.RegisterRegion(owner.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	sink, _ := p.a.RegisterRegion(app.id, make([]byte, 8192), abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[len(app.slots)-1], ipOf("10.0.0.2"), src, 0, sink, 0, 64, 99)) // resolves b
	p.run()
	app.completions()
	cmds := []*abi.Command{readCmd(app.slots[0], ipOf("10.0.0.2"), src, 0, sink, 0, 4096, 100)}
	for k := 1; k <= shortBurst+2; k++ {
		cmds = append(cmds, readCmd(app.slots[k], ipOf("10.0.0.2"), src, 0, sink, 4096+uint64(k)*64, 64, uint64(100+k)))
	}
	var want []uint32
	for range shortBurst {
		want = append(want, 64)
	}
	want = append(want, 4096, 64, 64)
	if got := requestLengths(t, p, app, cmds); !slices.Equal(got, want) {
		t.Fatalf("READ requests sent %v, want %v", got, want)
	}
}
