package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/wire"
)

func readCmd(slot abi.SlotID, dst uint32, rreg abi.RegionID, roff uint64, lreg abi.RegionID, loff uint64, n uint32, cookie uint64) *abi.Command {
	return &abi.Command{Op: abi.OpRead, Slot: slot, Cookie: cookie, RemoteAddr: dst, RemoteRegion: rreg,
		RemoteOffset: roff, LocalRegion: lreg, LocalOffset: loff, Length: n}
}

func TestReadLoopbackSizes(t *testing.T) {
	tx := newTestTx(256)
	c := newCore(t, testConfig("10.0.0.1", 1), tx)
	app := openApp(t, c, abi.ClassLow, 8)
	src := make([]byte, 64<<10)
	pattern(src, 0x5a)
	dst := make([]byte, 64<<10)
	rs, _ := c.RegisterRegion(app.id, src, abi.PermAll, testKr)
	rd, _ := c.RegisterRegion(app.id, dst, abi.PermAll, testKr)
	now := int64(1000)
	for _, tc := range []struct {
		n          uint32
		roff, loff uint64
	}{{1, 0, 0}, {63, 3, 5}, {64, 64, 128}, {65, 1001, 7}, {1408, 13, 4099}, {1409, 777, 1}, {2817, 3, 9}, {4095, 5, 11}, {4096, 60000, 61439}} {
		clear(dst)
		app.post(t, readCmd(app.slots[0], ipOf("10.0.0.1"), rs, tc.roff, rd, tc.loff, tc.n, uint64(tc.n)))
		var got []abi.Completion
		for k := 0; k < 10 && len(got) == 0; k++ {
			c.Poll(now)
			tx.deliverTo(now, c)
			c.Poll(now)
			now += 500
			got = app.completions()
		}
		if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Cookie != uint64(tc.n) || got[0].Length != tc.n || got[0].Slot != app.slots[0] {
			t.Fatalf("size %d: completions %+v", tc.n, got)
		}
		if !bytes.Equal(dst[tc.loff:tc.loff+uint64(tc.n)], src[tc.roff:tc.roff+uint64(tc.n)]) {
			t.Fatalf("size %d: data mismatch", tc.n)
		}
		if bytes.ContainsFunc(dst[:tc.loff], func(r rune) bool { return r != 0 }) || bytes.ContainsFunc(dst[tc.loff+uint64(tc.n):], func(r rune) bool { return r != 0 }) {
			t.Fatalf("size %d: bytes outside the sink range changed", tc.n)
		}
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.WindowInUse != 0 || s.OpsInFlight != 0 {
		t.Fatalf("leak: %+v", s)
	}
}

func TestOutOfOrderDuplicateResponses(t *testing.T) {
	p := newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.a.cfg.Neighbors = nil
	app := openApp(t, p.a, abi.ClassLow, 4)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	src := make([]byte, 8192)
	pattern(src, 3)
	rs, _ := p.b.RegisterRegion(srv.id, src, abi.PermRemoteRead, testKr)
	dst := make([]byte, 8192)
	rd, _ := p.a.RegisterRegion(app.id, dst, abi.PermAll, testKr)
	// Resolve b's MAC first.
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 1, 1))
	p.run()
	if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("warm-up: %+v", got)
	}
	app.post(t, readCmd(app.slots[1], ipOf("10.0.0.2"), rs, 100, rd, 50, 4096, 2))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now)
	frames := p.tb.take()
	if len(frames) != 3 {
		t.Fatalf("want 3 response chunks, got %d", len(frames))
	}
	// Reversed, with every chunk twice: duplicates are ignored.
	for k := len(frames) - 1; k >= 0; k-- {
		p.a.Receive(p.now, frames[k])
		p.a.Receive(p.now, frames[k])
	}
	p.a.Poll(p.now)
	got := app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Cookie != 2 {
		t.Fatalf("completions %+v", got)
	}
	if !bytes.Equal(dst[50:50+4096], src[100:100+4096]) {
		t.Fatal("data mismatch")
	}
	if s := p.a.Stats(); s.RxDuplicate != 2 {
		t.Fatalf("duplicates counted %d, want 2", s.RxDuplicate)
	}
	// The second copy of the completing chunk, and any later copy, is stale.
	p.a.Receive(p.now, frames[0])
	if s := p.a.Stats(); s.RxStale != 2 {
		t.Fatalf("stale %d", s.RxStale)
	}
}

func TestCorruptResponseRejected(t *testing.T) {
	p := newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	app := openApp(t, p.a, abi.ClassLow, 4)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	src := make([]byte, 4096)
	pattern(src, 9)
	rs, _ := p.b.RegisterRegion(srv.id, src, abi.PermRemoteRead, testKr)
	dst := make([]byte, 4096)
	rd, _ := p.a.RegisterRegion(app.id, dst, abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 1, 1))
	p.run() // resolves the peer
	app.completions()
	dst[0] = 0
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 1000, 1))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now)
	frames := p.tb.take()
	if len(frames) != 1 {
		t.Fatalf("want one response, got %d", len(frames))
	}
	bad := append([]byte(nil), frames[0]...)
	bad[wire.PayloadOffset+10] ^= 0x40
	p.a.Receive(p.now, bad)
	if s := p.a.Stats(); s.RxAuthFailed != 1 {
		t.Fatalf("forged response not counted: %+v", s)
	}
	if dst[10] != 0 {
		t.Fatal("corrupted payload landed")
	}
	p.a.Receive(p.now, frames[0])
	p.a.Poll(p.now)
	if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("%+v", got)
	}
}

func TestBadCommands(t *testing.T) {
	tx := newTestTx(64)
	c := newCore(t, testConfig("10.0.0.1", 1), tx)
	a := openApp(t, c, abi.ClassLow, 4)
	b := openApp(t, c, abi.ClassLow, 4)
	ma := make([]byte, 4096)
	mb := make([]byte, 4096)
	ra, _ := c.RegisterRegion(a.id, ma, abi.PermAll, testKr)
	rb, _ := c.RegisterRegion(b.id, mb, abi.PermAll, testKr)
	ro, _ := c.RegisterRegion(a.id, make([]byte, 4096), abi.PermLocalRead|abi.PermRemoteRead, testKr)
	me := ipOf("10.0.0.1")
	for _, tc := range []struct {
		name string
		cmd  *abi.Command
		want abi.Status
	}{
		{"other portal's slot", readCmd(b.slots[0], me, ra, 0, ra, 0, 8, 1), abi.StatusBadSlot},
		{"slot out of range", readCmd(9999, me, ra, 0, ra, 0, 8, 1), abi.StatusBadSlot},
		{"other app's region", readCmd(a.slots[0], me, ra, 0, rb, 0, 8, 1), abi.StatusLocalRegion},
		{"stale region id", readCmd(a.slots[0], me, ra, 0, abi.MakeRegionID(ra.Index(), ra.Gen()+1), 0, 8, 1), abi.StatusLocalRegion},
		{"region 0", readCmd(a.slots[0], me, ra, 0, 0, 0, 8, 1), abi.StatusLocalRegion},
		{"out of bounds", readCmd(a.slots[0], me, ra, 0, ra, 4090, 8, 1), abi.StatusLocalBounds},
		{"offset overflow", readCmd(a.slots[0], me, ra, 0, ra, 1<<63, 8, 1), abi.StatusLocalBounds},
		{"too large", readCmd(a.slots[0], me, ra, 0, ra, 0, 4097, 1), abi.StatusTooLarge},
		{"zero length", readCmd(a.slots[0], me, ra, 0, ra, 0, 0, 1), abi.StatusBadCommand},
		{"unknown op", &abi.Command{Op: 99, Slot: a.slots[0], LocalRegion: ra, Length: 8, RemoteAddr: me}, abi.StatusBadCommand},
		{"sink not writable", readCmd(a.slots[0], me, ra, 0, ro, 0, 8, 1), abi.StatusLocalPermission},
		{"broadcast peer", readCmd(a.slots[0], 0xffffffff, ra, 0, ra, 0, 8, 1), abi.StatusUnreachable},
		{"multicast peer", readCmd(a.slots[0], ipOf("224.0.0.1"), ra, 0, ra, 0, 8, 1), abi.StatusUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pattern(mb, 1)
			a.post(t, tc.cmd)
			c.Poll(1000)
			got := a.completions()
			if len(got) != 1 || got[0].Status != tc.want || got[0].Slot != tc.cmd.Slot {
				t.Fatalf("(-want %v +got) %+v", tc.want, got)
			}
			if len(tx.q) != 0 {
				t.Fatal("a bad command sent a frame")
			}
			chk := make([]byte, 4096)
			pattern(chk, 1)
			if !bytes.Equal(mb, chk) {
				t.Fatal("other app's memory touched")
			}
			if err := c.Audit(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Reserved bytes set: malformed command, still exactly one completion.
	buf := a.cmd.Reserve()
	a.keyed(readCmd(a.slots[1], me, ra, 0, ra, 0, 8, 77)).Encode(buf)
	buf[2] = 1
	a.cmd.Commit()
	a.cmd.Publish()
	c.Poll(1000)
	if got := a.completions(); len(got) != 1 || got[0].Status != abi.StatusBadCommand || got[0].Cookie != 77 {
		t.Fatalf("malformed: %+v", got)
	}
}

func TestBusySlotRejected(t *testing.T) {
	p := newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.a.cfg.Neighbors = nil
	app := openApp(t, p.a, abi.ClassLow, 2)
	m := make([]byte, 4096)
	r, _ := p.a.RegisterRegion(app.id, m, abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.9"), r, 0, r, 0, 8, 1))
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.9"), r, 0, r, 0, 8, 2))
	p.a.Poll(p.now)
	got := app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusBadSlot || got[0].Cookie != 2 {
		t.Fatalf("%+v", got)
	}
}

func TestUnreachablePeer(t *testing.T) {
	p := newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	app := openApp(t, p.a, abi.ClassLow, 2)
	m := make([]byte, 4096)
	r, _ := p.a.RegisterRegion(app.id, m, abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.77"), r, 0, r, 0, 8, 1))
	start := p.now
	var got []abi.Completion
	arps := 0
	for len(got) == 0 && p.now-start < int64(10*time.Millisecond) {
		p.a.Poll(p.now)
		arps += len(p.ta.take())
		got = app.completions()
		p.now += 100_000
	}
	if len(got) != 1 || got[0].Status != abi.StatusUnreachable {
		t.Fatalf("%+v", got)
	}
	if d := int64(got[0].TotalDelayNs); d < int64(p.a.cfg.ResolveTimeout) || d > int64(p.a.cfg.ResolveTimeout)+200_000 {
		t.Fatalf("unreachable after %d ns, resolve timeout %v", d, p.a.cfg.ResolveTimeout)
	}
	if arps < 2 {
		t.Fatalf("ARP retried %d times", arps)
	}
}

func TestRemoteErrors(t *testing.T) {
	p := newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	app := openApp(t, p.a, abi.ClassLow, 4)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ := p.b.RegisterRegion(srv.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	rw, _ := p.b.RegisterRegion(srv.id, make([]byte, 4096), abi.PermRemoteWrite, testKr)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	peer := ipOf("10.0.0.2")
	for _, tc := range []struct {
		name string
		cmd  *abi.Command
		want abi.Status
	}{
		// No K_r to authenticate with: the server cannot tell a region
		// it lacks from a wrong key, and says nothing more.
		{"unknown region", readCmd(app.slots[0], peer, abi.MakeRegionID(9, 1), 0, rd, 0, 8, 1), abi.StatusRemoteAuthFailure},
		{"stale region", readCmd(app.slots[0], peer, abi.MakeRegionID(rs.Index(), rs.Gen()+1), 0, rd, 0, 8, 1), abi.StatusRemoteAuthFailure},
		{"bounds", readCmd(app.slots[0], peer, rs, 4000, rd, 0, 200, 1), abi.StatusRemoteBounds},
		{"permission", readCmd(app.slots[0], peer, rw, 0, rd, 0, 8, 1), abi.StatusRemotePermission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app.post(t, tc.cmd)
			p.run()
			got := app.completions()
			if len(got) != 1 || got[0].Status != tc.want {
				t.Fatalf("(-want %v +got) %+v", tc.want, got)
			}
		})
	}
}

// readPair: a pair with an app on a (4 slots) that has read 8 bytes of
// region rs on b into its region rd, so a knows b's MAC.
func readPair(t *testing.T) (p *pair, app *testApp, rs, rd abi.RegionID) {
	p = newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	app = openApp(t, p.a, abi.ClassLow, 4)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ = p.b.RegisterRegion(srv.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	rd, _ = p.a.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 8, 1))
	p.run() // resolves ARP, completes one op
	if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("the first read: %+v", got)
	}
	return p, app, rs, rd
}

func TestTimeoutRefundsWindow(t *testing.T) {
	p, app, rs, rd := readPair(t)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 3000, 2))
	p.a.Poll(p.now)
	if s := p.a.Stats(); s.WindowInUse != 3000 {
		t.Fatalf("window debit %d, want the op's size", s.WindowInUse)
	}
	p.ta.take() // the request is lost
	p.now += int64(p.a.cfg.Timeout)
	if d := p.a.NextDeadline(); d > p.now {
		t.Fatalf("next deadline %d after timeout %d", d, p.now)
	}
	p.a.Poll(p.now)
	got := app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusTimeout {
		t.Fatalf("%+v", got)
	}
	if s := p.a.Stats(); s.WindowInUse != 0 {
		t.Fatal("window not refunded")
	}
}

// windowBound: a pair whose a has a 4 KB window (one op in service at a
// time) and a static entry for b, and an app on a that posted n 64 B
// READs to b, cookies 0..n-1; a has not polled yet.
func windowBound(t *testing.T, n int) (*pair, Config, *testApp) {
	ca := testConfig("10.0.0.1", 1)
	ca.WindowBytes = 4096
	ca.Neighbors = []Neighbor{{IP: testConfig("10.0.0.2", 2).LocalIP, MAC: wire.MAC{2, 0, 0, 0, 0, 2}}}
	p := newPair(t, ca, testConfig("10.0.0.2", 2))
	app := openApp(t, p.a, abi.ClassLow, 8)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	for k := range n {
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.2"), abi.MakeRegionID(1, 1), 0, rd, 0, 64, uint64(k)))
	}
	return p, ca, app
}

func TestDispatchTimeoutWhenWindowExhausted(t *testing.T) {
	p, ca, app := windowBound(t, 4)
	p.a.Poll(p.now)
	if n := len(p.ta.take()); n != 1 {
		t.Fatalf("%d requests entered service with a 4 KB window, want 1", n)
	}
	p.now += int64(ca.DispatchTimeout)
	p.a.Poll(p.now)
	got := app.completions()
	if len(got) != 3 {
		t.Fatalf("%+v", got)
	}
	for _, g := range got {
		if g.Status != abi.StatusDispatchTimeout || g.IssueDelayNs != 0 {
			t.Fatalf("%+v", g)
		}
	}
	p.now += int64(ca.Timeout)
	p.a.Poll(p.now)
	if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusTimeout || got[0].Cookie != 0 {
		t.Fatalf("%+v", got)
	}
}

func TestNackAboveThreshold(t *testing.T) {
	cb := testConfig("10.0.0.2", 2)
	cb.NackThreshold = 2
	cb.InboundPerOwner, cb.InboundPerSender = 2, 2 // the threshold alone: one owner, one sender
	p := newPair(t, testConfig("10.0.0.1", 1), cb)
	app := openApp(t, p.a, abi.ClassLow, 8)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ := p.b.RegisterRegion(srv.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 8*4096), abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 8, 100))
	p.run()
	app.completions()
	for k := 0; k < 6; k++ {
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.2"), rs, 0, rd, uint64(k)*4096, 4096, uint64(k)))
	}
	p.run()
	got := app.completions()
	var ok, nack int
	for _, g := range got {
		switch g.Status {
		case abi.StatusOK:
			ok++
		case abi.StatusNack:
			nack++
		}
	}
	if len(got) != 6 || ok != 2 || nack != 4 {
		t.Fatalf("ok %d nack %d: %+v", ok, nack, got)
	}
	if s := p.b.Stats(); s.ReqNacked != 4 {
		t.Fatalf("server counted %d NACKs", s.ReqNacked)
	}
	if s := p.a.Stats(); s.WindowInUse != 0 {
		t.Fatal("NACK did not refund the window")
	}
}

func TestHighClassFirstWithoutStarvation(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.WindowBytes = 4096
	cfg.HighBurst = 2
	cfg.DispatchTimeout = time.Second
	cfg.Timeout = time.Second
	tx := newTestTx(64)
	c := newCore(t, cfg, tx)
	lo := openApp(t, c, abi.ClassLow, 8)
	hi := openApp(t, c, abi.ClassHigh, 8)
	ml, _ := c.RegisterRegion(lo.id, make([]byte, 4096), abi.PermAll, testKr)
	mh, _ := c.RegisterRegion(hi.id, make([]byte, 4096), abi.PermAll, testKr)
	for k := 0; k < 4; k++ {
		lo.post(t, readCmd(lo.slots[k], ipOf("10.0.0.1"), ml, 0, ml, 0, 8, uint64(100+k)))
		hi.post(t, readCmd(hi.slots[k], ipOf("10.0.0.1"), mh, 0, mh, 0, 8, uint64(200+k)))
	}
	// One op in service at a time: the order of service is the order of
	// completions.
	var order []uint64
	now := int64(1000)
	for len(order) < 8 {
		c.Poll(now) // the self-loop completes each op inside one Poll
		for _, g := range append(lo.completions(), hi.completions()...) {
			order = append(order, g.Cookie)
		}
		now += 1000
	}
	// Low was posted first, but high goes first; after 2 high grants one low.
	want := []uint64{200, 201, 100, 202, 203, 101, 102, 103}
	for k := range want {
		if order[k] != want[k] {
			t.Fatalf("service order (-want +got)\n%v\n%v", want, order)
		}
	}
}

// The serving side queues requests by the class their initiator stamps
// (wire.FlagHigh): a high request that arrives behind low ones is served
// first, and low ones still get one turn per HighBurst high ones.
func TestServingSideHighClassFirst(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.HighBurst = 2
	p := newPair(t, ca, cb)
	lo := openApp(t, p.a, abi.ClassLow, 8)
	hi := openApp(t, p.a, abi.ClassHigh, 8)
	owner := openApp(t, p.b, abi.ClassLow, 0)
	src, _ := p.b.RegisterRegion(owner.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	ml, _ := p.a.RegisterRegion(lo.id, make([]byte, 4096), abi.PermAll, testKr)
	mh, _ := p.a.RegisterRegion(hi.id, make([]byte, 4096), abi.PermAll, testKr)
	lo.post(t, readCmd(lo.slots[7], ipOf("10.0.0.2"), src, 0, ml, 0, 8, 99)) // resolves b
	p.run()
	lo.completions()
	for k := 0; k < 4; k++ {
		lo.post(t, readCmd(lo.slots[k], ipOf("10.0.0.2"), src, 0, ml, 0, 8, uint64(100+k)))
		hi.post(t, readCmd(hi.slots[k], ipOf("10.0.0.2"), src, 0, mh, 0, 8, uint64(200+k)))
	}
	p.a.Poll(p.now)
	reqs := p.ta.take()
	var los, his [][]byte
	for _, fr := range reqs {
		if fr[wire.EthLen+wire.IPv4Len+wire.UDPLen+3]&wire.FlagHigh != 0 {
			his = append(his, fr)
		} else {
			los = append(los, fr)
		}
	}
	if len(los) != 4 || len(his) != 4 {
		t.Fatalf("requests: %d low, %d high", len(los), len(his))
	}
	for _, fr := range append(los, his...) { // every low request arrives first
		p.b.Receive(p.now, fr)
	}
	p.b.Poll(p.now)
	var order []uint64
	for _, fr := range p.tb.take() {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			t.Fatal(err)
		}
		p.a.Receive(p.now, fr)
		p.a.Poll(p.now)
		for _, g := range append(lo.completions(), hi.completions()...) {
			order = append(order, g.Cookie)
		}
	}
	want := []uint64{200, 201, 100, 202, 203, 101, 102, 103}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("service order (-want +got)\n%v\n%v", want, order)
	}
}

func TestClosePortalReclaims(t *testing.T) {
	p := newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	app := openApp(t, p.a, abi.ClassLow, 8)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ := p.b.RegisterRegion(srv.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 8, 1))
	p.run()
	app.completions()
	for k := 0; k < 4; k++ {
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.2"), rs, 0, rd, 0, 4096, uint64(k)))
	}
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now)
	if err := p.a.ClosePortal(app.id); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Audit(); err != nil {
		t.Fatal(err)
	}
	p.tb.deliverTo(p.now, p.a) // responses for orphans: dropped, slots freed
	p.a.Poll(p.now)
	s := p.a.Stats()
	if s.SlotsInUse != 0 || s.WindowInUse != 0 || s.OpsInFlight != 0 {
		t.Fatalf("not reclaimed: %+v", s)
	}
	if app.cpl.Available() != 0 {
		t.Fatal("completion written after close")
	}
	if err := p.a.Audit(); err != nil {
		t.Fatal(err)
	}
	// The region is gone for remote readers too: one holding a K_d of
	// it (the tests' regions share a K_r) hears REMOTE_REGION.
	other := openApp(t, p.b, abi.ClassLow, 2)
	od, _ := p.b.RegisterRegion(other.id, make([]byte, 64), abi.PermAll, testKr)
	other.post(t, readCmd(other.slots[0], ipOf("10.0.0.1"), rd, 0, od, 0, 8, 5))
	p.run()
	if got := other.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteRegion {
		t.Fatalf("%+v", got)
	}
}

func TestSlotCap(t *testing.T) {
	c := newCore(t, testConfig("10.0.0.1", 1), newTestTx(4))
	app := openApp(t, c, abi.ClassLow, 3)
	if _, err := c.AllocSlots(app.id, 1); err == nil {
		t.Fatal("cap not enforced")
	}
	if got := c.Stats().SlotsInUse; got != 3 {
		t.Fatalf("slots in use %d", got)
	}
}

func TestCorruptRingClosesPortal(t *testing.T) {
	c := newCore(t, testConfig("10.0.0.1", 1), newTestTx(4))
	cmdMem := aligned(abi.RingBytes(16, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(16, abi.CompletionSize))
	id, _ := c.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: 16, CplRing: cplMem, CplCap: 16, MaxSlots: 4})
	c.AllocSlots(id, 4)
	cmdMem[0] = 200 // producer index 200 ahead of consumer 0 with capacity 16
	c.Poll(1000)
	if s := c.Stats(); s.RingsCorrupt != 1 || s.SlotsInUse != 0 {
		t.Fatalf("%+v", s)
	}
	// The id stays taken (and refuses new resources) until ClosePortal.
	other := openApp(t, c, abi.ClassLow, 1)
	if other.id == id {
		t.Fatal("a disabled portal's id was reused before ClosePortal")
	}
	if _, err := c.AllocSlots(id, 1); !errors.Is(err, ErrPortalDead) {
		t.Fatalf("alloc on a disabled portal: %v", err)
	}
	if err := c.ClosePortal(id); err != nil {
		t.Fatal(err)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
}

func TestARPAnswered(t *testing.T) {
	tx := newTestTx(4)
	c := newCore(t, testConfig("10.0.0.1", 1), tx)
	req := make([]byte, 60)
	wire.EncodeARP(req, &wire.ARP{Op: wire.ARPRequest, SenderMAC: wire.MAC{2, 9, 9, 9, 9, 9}, SenderIP: ipOf("10.0.0.9"),
		TargetIP: ipOf("10.0.0.1"), EthDst: wire.Broadcast, EthSrc: wire.MAC{2, 9, 9, 9, 9, 9}})
	c.Receive(1, req)
	out := tx.take()
	var a wire.ARP
	if len(out) != 1 || wire.DecodeARP(out[0], &a) != nil || a.Op != wire.ARPReply || a.SenderMAC != c.out.mac || a.TargetIP != ipOf("10.0.0.9") {
		t.Fatalf("%+v", a)
	}
	// Not for us: no answer.
	wire.EncodeARP(req, &wire.ARP{Op: wire.ARPRequest, SenderIP: ipOf("10.0.0.9"), TargetIP: ipOf("10.0.0.3"), EthDst: wire.Broadcast})
	c.Receive(1, req)
	if len(tx.take()) != 0 {
		t.Fatal("answered ARP for another address")
	}
}

func TestHotPathAllocs(t *testing.T) {
	c, tx, app, r := selfApp(t, testConfig("10.0.0.1", 1), 1)
	cmd := app.keyed(readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 4096, 1))
	if allocs, cpl := allocsPerOp(c, tx, app, cmd); allocs != 0 || cpl.Status != abi.StatusOK {
		t.Fatalf("%v allocs per op, status %v", allocs, cpl.Status)
	}
}

// allocsPerOp posts cmd on app's portal of core c (whose frames go out on
// tx and come back to it) and runs it to its completion, two hops, 1000
// times; it returns the allocations per op and the last completion.
func allocsPerOp(c *Core, tx *testTx, app *testApp, cmd *abi.Command) (float64, abi.Completion) {
	var cpl abi.Completion
	now := int64(1000)
	allocs := testing.AllocsPerRun(1000, func() {
		b := app.cmd.Reserve()
		cmd.Encode(b)
		app.cmd.Commit()
		app.cmd.Publish()
		c.Poll(now)
		tx.deliverTo(now, c) // request
		c.Poll(now)
		tx.deliverTo(now, c) // responses
		c.Poll(now)
		e := app.cpl.Peek()
		cpl.Decode(e)
		app.cpl.Advance()
		app.cpl.Release()
		now += 100
	})
	return allocs, cpl
}

func BenchmarkReadLoopback64(b *testing.B)   { benchOp(b, abi.OpRead, 64) }
func BenchmarkReadLoopback4096(b *testing.B) { benchOp(b, abi.OpRead, 4096) }

// benchOp measures one core's full per-op cost (initiator and server in
// the same core, frames handed back without copies): post, arbitrate,
// request, serve, place, complete — 32 ops per round, like a burst.
// tune, if given, adjusts the core's config.
func benchOp(b *testing.B, op abi.Op, size uint32, tune ...func(*Config)) {
	c, tx, app, r := benchCore(b, tune...)
	var cmds [32]*abi.Command
	for k := range cmds {
		cmd := readCmd(app.slots[k], ip4(c.cfg.LocalIP.As4()), r, uint64(k)*4096, r, 512<<10+uint64(k)*4096, size, uint64(k))
		cmd.Op = op
		cmds[k] = app.keyed(cmd)
	}
	benchRounds(b, c, tx, app, &cmds, size, 0)
}

// benchCore is benchOp's core: one core whose frames come back to it
// through tx, an application of 32 slots and a 1 MB region of it.
func benchCore(b *testing.B, tune ...func(*Config)) (*Core, *testTx, *testApp, abi.RegionID) {
	tx := newTestTx(256)
	cfg := testConfig("10.0.0.1", 1)
	cfg.WindowBytes = 1 << 20
	cfg.HairpinSelf = true // frames go through tx and come back through Receive, as over a reflecting port
	cfg.Unbound()          // one owner, one sender: 32 requests at once, each of them the only one's
	for _, f := range tune {
		f(&cfg)
	}
	c := newCore(b, cfg, tx)
	app := openApp(b, c, abi.ClassLow, 32)
	r, _ := c.RegisterRegion(app.id, make([]byte, 1<<20), abi.PermAll, testKr)
	return c, tx, app, r
}

// benchRounds times rounds of cmds posted at once and run to their
// completions, each OK (and of wantLen bytes, unless 0), counting size
// bytes an op.
func benchRounds(b *testing.B, c *Core, tx *testTx, app *testApp, cmds *[32]*abi.Command, size, wantLen uint32) {
	var cpl abi.Completion
	now := int64(1000)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for done := 0; done < b.N; {
		for k := range cmds {
			e := app.cmd.Reserve()
			cmds[k].Encode(e)
			app.cmd.Commit()
		}
		app.cmd.Publish()
		for c.Poll(now)+tx.deliverTo(now, c) > 0 {
		}
		for e := app.cpl.Peek(); e != nil; e = app.cpl.Peek() {
			cpl.Decode(e)
			app.cpl.Advance()
			if cpl.Status != abi.StatusOK || (wantLen != 0 && cpl.Length != wantLen) {
				b.Fatalf("completion %+v", cpl)
			}
			done++
		}
		app.cpl.Release()
		now += 1000
	}
}

type countBell struct{ n int }

func (b *countBell) Ring() { b.n++ }

// The doorbell rings once per arming, only after completions are
// published, and only when the application armed it.
func TestDoorbell(t *testing.T) {
	c, _, app, r := selfApp(t, testConfig("10.0.0.1", 1), 2)
	arm := aligned(64)
	bell := &countBell{}
	if err := c.SetDoorbell(app.id, arm[:4], bell); err != nil {
		t.Fatal(err)
	}
	read := func(cookie uint64) {
		app.post(t, readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 64, cookie))
		c.Poll(1000)
		if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
			t.Fatalf("%+v", got)
		}
	}
	read(1) // not armed: no ring
	if bell.n != 0 {
		t.Fatalf("rang %d times unarmed", bell.n)
	}
	arm[0] = 1
	read(2)
	if bell.n != 1 || arm[0] != 0 {
		t.Fatalf("armed: rang %d times, arm word %d after", bell.n, arm[0])
	}
	read(3) // disarmed by the ring
	if bell.n != 1 {
		t.Fatalf("rang again without re-arming (%d)", bell.n)
	}
	if s := c.Stats(); s.Doorbells != 1 {
		t.Fatalf("Doorbells %d", s.Doorbells)
	}
	if err := c.SetDoorbell(app.id, arm[1:5], bell); err == nil {
		t.Fatal("misaligned arm word accepted")
	}
}

// A moderated doorbell rings once count completions are unread, or the
// period after the first completion it deferred; not for an application
// that woke by itself; and SetModeration refuses what it cannot honour.
func TestDoorbellModeration(t *testing.T) {
	c, _, app, r := selfApp(t, testConfig("10.0.0.1", 1), 4)
	if err := c.SetModeration(app.id, 3, 50*time.Microsecond); !errors.Is(err, ErrModeration) {
		t.Fatalf("moderation without a doorbell: %v", err)
	}
	arm := aligned(64)
	bell := &countBell{}
	if err := c.SetDoorbell(app.id, arm[:4], bell); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		count  int
		period time.Duration
	}{{0, time.Microsecond}, {int(app.cpl.Capacity()) + 1, time.Microsecond}, {3, 0}, {3, -1}, {3, MaxModerationPeriod + 1}} {
		if err := c.SetModeration(app.id, bad.count, bad.period); !errors.Is(err, ErrModeration) {
			t.Fatalf("SetModeration(%d, %v): %v", bad.count, bad.period, err)
		}
	}
	if err := c.SetModeration(PortalID(99), 3, time.Microsecond); !errors.Is(err, ErrNoPortal) {
		t.Fatalf("no such portal: %v", err)
	}
	const period = int64(50 * time.Microsecond)
	if err := c.SetModeration(app.id, 3, time.Duration(period)); err != nil {
		t.Fatal(err)
	}
	now := int64(1000)
	post := func(n int) {
		for k := range n {
			app.post(t, readCmd(app.slots[k], ipOf("10.0.0.1"), r, 0, r, 4096, 64, uint64(k+1)))
		}
	}
	poll := func(at int64) {
		now = at
		c.Poll(now)
		if err := c.Audit(); err != nil {
			t.Fatal(err)
		}
	}

	// One completion of three: deferred until the period is over.
	arm[0] = 1
	post(1)
	poll(now)
	if bell.n != 0 || arm[0] != 1 || c.Stats().DoorbellsDeferred != 1 {
		t.Fatalf("one of three: rang %d, arm %d, deferred %d", bell.n, arm[0], c.Stats().DoorbellsDeferred)
	}
	due := now + period
	if d := c.NextDeadline(); d != due {
		t.Fatalf("NextDeadline %d, want the deferred ring's %d", d, due)
	}
	poll(due - 1)
	if bell.n != 0 {
		t.Fatal("rang before the period was over")
	}
	poll(due)
	if bell.n != 1 || arm[0] != 0 {
		t.Fatalf("period over: rang %d, arm %d", bell.n, arm[0])
	}
	if d := c.NextDeadline(); d != math.MaxInt64 {
		t.Fatalf("NextDeadline %d after the ring", d)
	}
	if got := app.completions(); len(got) != 1 {
		t.Fatalf("%d completions", len(got))
	}

	// Three at once: rung at once.
	arm[0] = 1
	post(3)
	poll(now + 1)
	if bell.n != 2 || arm[0] != 0 {
		t.Fatalf("three of three: rang %d, arm %d", bell.n, arm[0])
	}
	if got := app.completions(); len(got) != 3 {
		t.Fatalf("%d completions", len(got))
	}

	// Two, then one more before the period is over: rung at the third.
	arm[0] = 1
	post(2)
	poll(now + 1)
	if bell.n != 2 {
		t.Fatal("rang at two of three")
	}
	app.post(t, readCmd(app.slots[2], ipOf("10.0.0.1"), r, 0, r, 4096, 64, 9))
	poll(now + 1)
	if bell.n != 3 || arm[0] != 0 {
		t.Fatalf("third before the period: rang %d, arm %d", bell.n, arm[0])
	}
	poll(now + period) // the deferral is forgotten, not rung again
	if bell.n != 3 || c.NextDeadline() != math.MaxInt64 {
		t.Fatalf("after the count: rang %d, NextDeadline %d", bell.n, c.NextDeadline())
	}
	app.completions()

	// The application wakes by itself before the period: no ring.
	arm[0] = 1
	post(1)
	poll(now + 1)
	arm[0] = 0
	app.completions()
	poll(now + period)
	if bell.n != 3 || c.NextDeadline() != math.MaxInt64 {
		t.Fatalf("woke by itself: rang %d, NextDeadline %d", bell.n, c.NextDeadline())
	}

	// count 1 rings at every publication again.
	if err := c.SetModeration(app.id, 1, 0); err != nil {
		t.Fatal(err)
	}
	arm[0] = 1
	post(1)
	poll(now + 1)
	if bell.n != 4 {
		t.Fatalf("count 1: rang %d", bell.n)
	}
	if s := c.Stats(); s.Doorbells != 4 || s.DoorbellsDeferred != 3 {
		t.Fatalf("Doorbells %d, DoorbellsDeferred %d", s.Doorbells, s.DoorbellsDeferred)
	}
}

// One portal's moderation holds back its own rings only: another
// tenant's portal on the core, armed, is rung at its completion, and the
// moderated one when its period is over.
func TestModerationIsPerPortal(t *testing.T) {
	c, _, app, r := selfApp(t, testConfig("10.0.0.1", 1), 1)
	other := openTenantApp(t, c, 1, abi.ClassLow, 1)
	ro, err := c.RegisterRegion(other.id, make([]byte, 8192), abi.PermAll, testKr)
	if err != nil {
		t.Fatal(err)
	}
	arm, armO := aligned(64), aligned(64)
	bell, bellO := &countBell{}, &countBell{}
	if err := c.SetDoorbell(app.id, arm[:4], bell); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDoorbell(other.id, armO[:4], bellO); err != nil {
		t.Fatal(err)
	}
	const period = int64(100 * time.Microsecond)
	if err := c.SetModeration(app.id, 8, time.Duration(period)); err != nil {
		t.Fatal(err)
	}
	arm[0], armO[0] = 1, 1
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 64, 1))
	other.post(t, readCmd(other.slots[0], ipOf("10.0.0.1"), ro, 0, ro, 4096, 64, 2))
	c.Poll(1000)
	if bell.n != 0 || bellO.n != 1 || armO[0] != 0 {
		t.Fatalf("moderated rang %d, the other %d (arm %d)", bell.n, bellO.n, armO[0])
	}
	c.Poll(1000 + period)
	if bell.n != 1 || bellO.n != 1 {
		t.Fatalf("after the period: moderated rang %d, the other %d", bell.n, bellO.n)
	}
}

// A portal closed with its ring held back leaves nothing behind: its
// entry, reused, is listed for its own rings only, and is not rung for
// the closed one's.
func TestModerationClosedPortal(t *testing.T) {
	c, _, app, r := selfApp(t, testConfig("10.0.0.1", 1), 1)
	arm, bell := aligned(64), &countBell{}
	if err := c.SetDoorbell(app.id, arm[:4], bell); err != nil {
		t.Fatal(err)
	}
	const period = int64(50 * time.Microsecond)
	if err := c.SetModeration(app.id, 8, time.Duration(period)); err != nil {
		t.Fatal(err)
	}
	arm[0] = 1
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 64, 1))
	c.Poll(1000)
	if bell.n != 0 || len(c.portals.bells) != 1 {
		t.Fatalf("not held back: rang %d, %d listed", bell.n, len(c.portals.bells))
	}
	if err := c.ClosePortal(app.id); err != nil {
		t.Fatal(err)
	}
	if len(c.portals.bells) != 0 {
		t.Fatalf("a closed portal's ring still listed: %v", c.portals.bells)
	}
	c.Poll(1000 + period)
	if bell.n != 0 {
		t.Fatalf("a closed portal rung (%d)", bell.n)
	}
}

// Config.DoorbellGap: a portal is rung at most once per gap; a
// completion published sooner is rung at the gap's end, and a portal's
// first ring is never held back.
func TestDoorbellGap(t *testing.T) {
	const gap = 20 * time.Microsecond
	cfg := testConfig("10.0.0.1", 1)
	cfg.DoorbellGap = gap
	c, _, app, r := selfApp(t, cfg, 2)
	arm := aligned(64)
	bell := &countBell{}
	if err := c.SetDoorbell(app.id, arm[:4], bell); err != nil {
		t.Fatal(err)
	}
	read := func(at int64) {
		arm[0] = 1
		app.post(t, readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 64, 1))
		c.Poll(at)
	}
	read(1000)
	if bell.n != 1 {
		t.Fatalf("first ring held back (%d)", bell.n)
	}
	app.completions()
	read(1000 + int64(gap) - 1)
	if bell.n != 1 || c.NextDeadline() != 1000+int64(gap) {
		t.Fatalf("within the gap: rang %d, NextDeadline %d", bell.n, c.NextDeadline())
	}
	c.Poll(1000 + int64(gap))
	if bell.n != 2 || arm[0] != 0 {
		t.Fatalf("at the gap's end: rang %d, arm %d", bell.n, arm[0])
	}
	app.completions()
	read(1000 + 3*int64(gap)) // a gap after the last ring: at once
	if bell.n != 3 {
		t.Fatalf("after the gap: rang %d", bell.n)
	}
	for _, bad := range []time.Duration{-1, MaxModerationPeriod + 1} {
		cfg.DoorbellGap = bad
		if err := cfg.Validate(); err == nil {
			t.Fatalf("DoorbellGap %v accepted", bad)
		}
	}
}

// Core.Stalled moves the deadlines of the core's own ops by the gap: an op
// whose answer waited out a stall of its engine completes OK after its
// original deadline (reporting the whole delay), and an op waiting for
// window fails DISPATCH_TIMEOUT the gap later.
func TestStalledMovesOwnDeadlines(t *testing.T) {
	const gap = int64(5 * time.Millisecond)
	t.Run("timeout", func(t *testing.T) {
		p, app, rs, rd := readPair(t)
		t0 := p.now
		app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 64, 2))
		p.a.Poll(t0)
		req := p.ta.take() // the request waits while a stalls
		p.a.Stalled(gap)
		p.now = t0 + int64(p.a.cfg.Timeout) + gap/2 // past the op's first deadline
		p.a.Poll(p.now)
		if got := app.completions(); len(got) != 0 {
			t.Fatalf("completed during the gap's allowance: %+v", got)
		}
		for _, f := range req {
			p.b.Receive(p.now, f)
		}
		p.b.Poll(p.now)
		p.tb.deliverTo(p.now, p.a)
		p.a.Poll(p.now)
		got := app.completions()
		if len(got) != 1 || got[0].Status != abi.StatusOK || int64(got[0].TotalDelayNs) < p.now-t0 {
			t.Fatalf("want OK with the whole delay %d, got %+v", p.now-t0, got)
		}
		p.now = t0 + int64(p.a.cfg.Timeout) + gap + 1 // a stall moves one deadline once
		app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 64, 3))
		p.a.Poll(p.now)
		p.ta.take() // lost
		p.now += int64(p.a.cfg.Timeout)
		p.a.Poll(p.now)
		if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusTimeout {
			t.Fatalf("want TIMEOUT, got %+v", got)
		}
	})
	t.Run("dispatch", func(t *testing.T) {
		p, ca, app := windowBound(t, 3)
		t0 := p.now
		p.a.Poll(t0) // one in service, two waiting for window
		p.a.Stalled(gap)
		p.now = t0 + int64(ca.DispatchTimeout) + gap/2
		p.a.Poll(p.now)
		if got := app.completions(); len(got) != 0 {
			t.Fatalf("DISPATCH_TIMEOUT within the gap's allowance: %+v", got)
		}
		p.now = t0 + int64(ca.DispatchTimeout) + gap
		p.a.Poll(p.now)
		if got := app.completions(); len(got) != 2 || got[0].Status != abi.StatusDispatchTimeout || got[1].Status != abi.StatusDispatchTimeout {
			t.Fatalf("want two DISPATCH_TIMEOUTs, got %+v", got)
		}
		p.now = t0 + int64(ca.Timeout) + gap // the one in service, moved as well
		p.a.Poll(p.now)
		if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusTimeout {
			t.Fatalf("want TIMEOUT, got %+v", got)
		}
		auditBoth(t, p)
	})
}

// TestDelaySamples: every completion written (ops that ran and commands
// refused before they got a slot) leaves one telemetry sample with its
// delays; a full batch goes to the hook at once, a partial one once its
// oldest sample is FlushNs old.
func TestDelaySamples(t *testing.T) {
	tx := newTestTx(256)
	cfg := testConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true // through tx, so a read takes time
	c := newCore(t, cfg, tx)
	app := openApp(t, c, abi.ClassLow, 8)
	src, dst := make([]byte, 4096), make([]byte, 4096)
	rs, _ := c.RegisterRegion(app.id, src, abi.PermAll, testKr)
	rd, _ := c.RegisterRegion(app.id, dst, abi.PermAll, testKr)
	me := ipOf("10.0.0.1")
	now := int64(1_000_000)
	var got []abi.Completion
	round := func(bad bool) {
		for _, s := range app.slots {
			cmd := readCmd(s, me, rs, 0, rd, 0, 64, uint64(len(got)))
			if bad {
				cmd = readCmd(s, me, rs, 0, rd, 4090, 64, uint64(len(got))) // LOCAL_BOUNDS: no slot taken
			}
			app.post(t, cmd)
		}
		for n, k := len(got), 0; len(got) < n+len(app.slots); k, now = k+1, now+500 {
			if k == 100 {
				t.Fatalf("%d of %d completions", len(got)-n, len(app.slots))
			}
			c.Poll(now)
			now += 700 // the read's total delay
			tx.deliverTo(now, c)
			c.Poll(now)
			got = append(got, app.completions()...)
		}
	}
	round(false)
	round(true)
	if b := c.portals.delays; b.Len() != len(got) || b.Flushes != 0 {
		t.Fatalf("%d completions, %d samples, %d flushes", len(got), b.Len(), b.Flushes)
	}
	for i, cp := range got {
		want := telemetry.Sample{IssueNs: cp.IssueDelayNs, TotalNs: cp.TotalDelayNs, Op: uint8(cp.Op), Status: uint8(cp.Status), Length: cp.Length}
		if s := c.portals.delays.Pending()[i]; s != want {
			t.Fatalf("sample %d: %+v, want %+v (from %+v)", i, s, want, cp)
		}
	}
	if got[len(got)-1].Status == abi.StatusOK || got[0].Status != abi.StatusOK || got[0].TotalDelayNs == 0 {
		t.Fatalf("want OK reads then refused ones: %+v, %+v", got[0], got[len(got)-1])
	}
	// Not yet FlushNs since the first sample: kept.
	first := c.portals.delays.Oldest()
	c.Poll(first + telemetry.FlushNs - 1)
	if c.portals.delays.Flushes != 0 {
		t.Fatal("flushed before FlushNs")
	}
	c.Poll(first + telemetry.FlushNs)
	if s := c.Stats(); s.DelayBatches != 1 || s.DelaySamples != uint64(len(got)) || c.portals.delays.Len() != 0 {
		t.Fatalf("after FlushNs: %d batches, %d samples, %d left", s.DelayBatches, s.DelaySamples, c.portals.delays.Len())
	}
	// A full batch goes at once, whatever the clock.
	now = first + telemetry.FlushNs
	for flushed := len(got); len(got) < flushed+telemetry.BatchLen; { // 32 rounds of 8
		round(true)
	}
	if s := c.Stats(); s.DelayBatches != 2 || s.DelaySamples != uint64(len(got)) || c.portals.delays.Len() != 0 {
		t.Fatalf("full batch: %+v with %d left", s, c.portals.delays.Len())
	}
	// Shutdown's ABORTED completions are handed over by Shutdown itself:
	// the driver may not poll again.
	for _, s := range app.slots {
		app.post(t, readCmd(s, me, rs, 0, rd, 0, 64, 0))
	}
	c.Poll(now) // in service, their requests unanswered in tx
	c.Shutdown(now + 1)
	if cs := app.completions(); len(cs) != len(app.slots) || cs[0].Status != abi.StatusAborted {
		t.Fatalf("shutdown completions %+v", cs)
	}
	if s := c.Stats(); s.DelayBatches != 3 || s.DelaySamples != uint64(len(got)+len(app.slots)) || c.portals.delays.Len() != 0 {
		t.Fatalf("after Shutdown: %d batches, %d samples, %d left", s.DelayBatches, s.DelaySamples, c.portals.delays.Len())
	}
}

// TestPortalStatsAndOpCounts: a portal's ring depths follow what its
// application posted and consumed, and completions are counted by op and
// status (an op that is none of READ, WRITE, REKEY under 0).
func TestPortalStatsAndOpCounts(t *testing.T) {
	tx := newTestTx(256)
	c := newCore(t, testConfig("10.0.0.1", 1), tx)
	app := openApp(t, c, abi.ClassHigh, 8)
	m := make([]byte, 4096)
	r, _ := c.RegisterRegion(app.id, m, abi.PermAll, testKr)
	me := ipOf("10.0.0.1")
	for _, s := range app.slots[:6] {
		app.post(t, readCmd(s, me, r, 0, r, 2048, 64, 0))
	}
	bad := readCmd(app.slots[6], me, r, 0, r, 0, 64, 0)
	bad.Op = 9
	app.post(t, bad)
	ps, ok := c.PortalStats(app.id)
	if !ok || ps.CmdDepth != 7 || ps.CplDepth != 0 || ps.Pending != 0 || ps.Slots != 8 || ps.MaxSlots != 8 || ps.Class != abi.ClassHigh || ps.PID != testPID || ps.CmdCap != 256 || ps.CplCap != 512 || ps.Dead {
		t.Fatalf("posted, not polled: %+v", ps)
	}
	for k := 0; k < 10; k++ {
		c.Poll(int64(1000 + k))
	}
	if ps, _ = c.PortalStats(app.id); ps.CmdDepth != 0 || ps.CplDepth != 7 || ps.Pending != 0 {
		t.Fatalf("completed, not consumed: %+v", ps)
	}
	if got := app.completions(); len(got) != 7 {
		t.Fatalf("%d completions", len(got))
	}
	if ps, _ = c.PortalStats(app.id); ps.CplDepth != 0 {
		t.Fatalf("consumed: %+v", ps)
	}
	st := c.Stats()
	if st.CompletedByOp[abi.OpRead][abi.StatusOK] != 6 || st.CompletedByOp[0][abi.StatusBadCommand] != 1 || st.Completed[abi.StatusOK] != 6 || st.Completed[abi.StatusBadCommand] != 1 {
		t.Fatalf("by op %v, by status %v", st.CompletedByOp, st.Completed)
	}
	if _, ok := c.PortalStats(app.id + 1); ok {
		t.Fatal("stats of a portal never opened")
	}
}

// A portal's tenant index must be below Config.Tenants and its weight at
// most MaxWeight; its regions are its tenant's.
func TestOpenPortalTenant(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.Tenants = 4
	c := newCore(t, cfg, newTestTx(4))
	for _, spec := range []PortalSpec{{Tenant: 4}, {Tenant: -1}, {Weight: MaxWeight + 1}, {Weight: -1}} {
		spec.CmdRing, spec.CmdCap = aligned(abi.RingBytes(16, abi.CommandSize)), 16
		spec.CplRing, spec.CplCap = aligned(abi.RingBytes(16, abi.CompletionSize)), 16
		if _, err := c.OpenPortal(spec); !errors.Is(err, ErrPortalSpec) {
			t.Errorf("tenant %d weight %d: %v, want ErrPortalSpec", spec.Tenant, spec.Weight, err)
		}
	}
	spec := PortalSpec{Tenant: 3, CmdCap: 16, CplCap: 16, MaxSlots: 1}
	spec.CmdRing, spec.CplRing = aligned(abi.RingBytes(16, abi.CommandSize)), aligned(abi.RingBytes(16, abi.CompletionSize))
	id, err := c.OpenPortal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if ps, _ := c.PortalStats(id); ps.Tenant != 3 || ps.Weight != 1 {
		t.Fatalf("tenant %d weight %d, want 3 and 1 (weight 0 means 1)", ps.Tenant, ps.Weight)
	}
	rid, err := c.RegisterRegion(id, make([]byte, 4096), abi.PermAll, aesni.Key{1})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.regions.lookup(rid); r == nil || r.tenant != 3 {
		t.Fatalf("region %#x: %+v, want tenant 3's", uint32(rid), r)
	}
}
