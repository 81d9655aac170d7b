package engine

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

func writeCmd(slot abi.SlotID, dst uint32, rreg abi.RegionID, roff uint64, lreg abi.RegionID, loff uint64, n uint32, cookie uint64) *abi.Command {
	c := readCmd(slot, dst, rreg, roff, lreg, loff, n, cookie)
	c.Op = abi.OpWrite
	return c
}

func frameType(fr []byte) wire.Type { return wire.Type(fr[wire.EthLen+wire.IPv4Len+wire.UDPLen+1]) }

func TestWriteLoopbackSizes(t *testing.T) {
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
		loff, roff uint64
	}{{1, 0, 0}, {63, 3, 5}, {64, 64, 128}, {65, 1001, 7}, {1408, 13, 4099}, {1409, 777, 1}, {2817, 3, 9}, {4095, 5, 11}, {4096, 60000, 61439}} {
		clear(dst)
		app.post(t, writeCmd(app.slots[0], ipOf("10.0.0.1"), rd, tc.roff, rs, tc.loff, tc.n, uint64(tc.n)))
		var got []abi.Completion
		for k := 0; k < 10 && len(got) == 0; k++ {
			c.Poll(now)
			tx.deliverTo(now, c)
			c.Poll(now)
			now += 500
			got = app.completions()
		}
		if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Op != abi.OpWrite || got[0].Length != tc.n {
			t.Fatalf("size %d: completions %+v", tc.n, got)
		}
		if !bytes.Equal(dst[tc.roff:tc.roff+uint64(tc.n)], src[tc.loff:tc.loff+uint64(tc.n)]) {
			t.Fatalf("size %d: data mismatch", tc.n)
		}
		if bytes.ContainsFunc(dst[:tc.roff], func(r rune) bool { return r != 0 }) || bytes.ContainsFunc(dst[tc.roff+uint64(tc.n):], func(r rune) bool { return r != 0 }) {
			t.Fatalf("size %d: bytes outside the written range changed", tc.n)
		}
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.WindowInUse != 0 || s.OpsInFlight != 0 || s.PullsInUse != 0 || s.WritesCommitted != 9 || s.PullsIssued != 9 {
		t.Fatalf("leak or miscount: %+v", s)
	}
}

// wPair is a writer on core a and an owner on core b with a region that
// takes remote writes and one that is read-only.
type wPair struct {
	*pair
	app, srv       *testApp
	src, dst, ro   []byte
	rs, rd, rro    abi.RegionID
	writerKeyedFor abi.Op
}

func newWPair(t *testing.T, ca, cb Config) *wPair {
	t.Helper()
	p := &wPair{pair: newPair(t, ca, cb)}
	p.app = openApp(t, p.a, abi.ClassLow, 8)
	p.srv = openApp(t, p.b, abi.ClassLow, 0)
	p.src, p.dst, p.ro = make([]byte, 8192), make([]byte, 8192), make([]byte, 8192)
	pattern(p.src, 0x33)
	pattern(p.ro, 0x44)
	var err error
	if p.rs, err = p.a.RegisterRegion(p.app.id, p.src, abi.PermLocalRead|abi.PermLocalWrite, testKr); err != nil {
		t.Fatal(err)
	}
	if p.rd, err = p.b.RegisterRegion(p.srv.id, p.dst, abi.PermRemoteWrite|abi.PermRemoteRead, testKr); err != nil {
		t.Fatal(err)
	}
	if p.rro, err = p.b.RegisterRegion(p.srv.id, p.ro, abi.PermRemoteRead, testKr); err != nil {
		t.Fatal(err)
	}
	p.write(t, 0, p.rd, 0, 1, abi.StatusOK) // resolves b's MAC
	clear(p.dst)
	return p
}

// pullOut posts a 256 B write on slot 1, delivers its request ① to b and
// returns the pull ② b sent (not delivered).
func (p *wPair) pullOut(t *testing.T) [][]byte {
	t.Helper()
	p.app.post(t, p.cmd(1, p.rd, 0, 256))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b) // ①
	p.b.Poll(p.now)
	pull := p.tb.take() // ②
	if len(pull) != 1 || frameType(pull[0]) != wire.TypePullReq {
		t.Fatalf("want a pull, got %d frames", len(pull))
	}
	return pull
}

func (p *wPair) cmd(k int, reg abi.RegionID, off uint64, n uint32) *abi.Command {
	return writeCmd(p.app.slots[k], ipOf("10.0.0.2"), reg, off, p.rs, 0, n, uint64(k))
}

// write posts one write on slot k and runs both cores until it completes.
func (p *wPair) write(t *testing.T, k int, reg abi.RegionID, off uint64, n uint32, want abi.Status) {
	t.Helper()
	p.app.post(t, p.cmd(k, reg, off, n))
	p.run()
	got := p.app.completions()
	if len(got) != 1 || got[0].Status != want {
		t.Fatalf("want one %v, got %+v", want, got)
	}
}

func auditBoth(t *testing.T, p *pair) {
	t.Helper()
	for _, c := range []*Core{p.a, p.b} {
		if err := c.Audit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.WindowInUse != 0 || s.OpsInFlight != 0 || s.PullsInUse != 0 {
			t.Fatalf("leak: %+v", s)
		}
	}
}

func TestWriteRemoteRefusals(t *testing.T) {
	p := newWPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.write(t, 1, p.rro, 0, 64, abi.StatusRemotePermission)
	p.write(t, 1, p.rd, 8192-63, 64, abi.StatusRemoteBounds)
	p.write(t, 1, abi.MakeRegionID(9, 1), 0, 64, abi.StatusRemoteAuthFailure) // unknown region
	cmd := p.cmd(1, p.rd, 0, 64)
	cmd.Key = p.app.keyed(readCmd(0, 0, 0, 0, 0, 0, 0, 0)).Key // the READ K_d: wrong op
	p.app.post(t, cmd)
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("READ key on a WRITE: %+v", got)
	}
	if !bytes.Equal(p.ro[:64], func() []byte { b := make([]byte, 64); pattern(b, 0x44); return b }()) || bytes.ContainsFunc(p.dst, func(r rune) bool { return r != 0 }) {
		t.Fatal("a refused write changed memory")
	}
	// The local side: a WRITE reads its source.
	wo, _ := p.a.RegisterRegion(p.app.id, make([]byte, 64), abi.PermLocalWrite, testKr)
	cmd = p.cmd(1, p.rd, 0, 64)
	cmd.LocalRegion = wo
	p.app.post(t, cmd)
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusLocalPermission {
		t.Fatalf("write-only source: %+v", got)
	}
	auditBoth(t, p.pair)
}

// step delivers one round of frames and returns what each side sent,
// optionally filtering frames from a to b.
func (p *wPair) step(filter func(fr []byte) bool) {
	p.a.Poll(p.now)
	for _, fr := range p.ta.take() {
		if filter == nil || filter(fr) {
			p.b.Receive(p.now, fr)
		}
	}
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a)
	p.a.Poll(p.now)
}

// A WRITE whose data does not all arrive is never committed; the server
// gives up first, the initiator reports TIMEOUT after it, and nothing
// changes afterwards, even when the missing chunk shows up late.
func TestWriteLostChunkNeverCommits(t *testing.T) {
	p := newWPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.app.post(t, p.cmd(1, p.rd, 100, 4096))
	var late [][]byte
	dropOne := func(fr []byte) bool {
		if frameType(fr) == wire.TypeWriteData && len(late) == 0 {
			late = append(late, fr)
			return false
		}
		return true
	}
	p.step(dropOne) // ①, ② back to a
	p.step(dropOne) // ③ minus one chunk
	if len(late) != 1 || p.b.Stats().PullsInUse != 1 {
		t.Fatalf("want one withheld chunk and one pull in progress: %d, %+v", len(late), p.b.Stats())
	}
	var serverGaveUp int64
	for k := 0; k < 40; k++ {
		p.now += int64(100 * time.Microsecond)
		p.b.Poll(p.now)
		if serverGaveUp == 0 && p.b.Stats().PullsExpired == 1 {
			serverGaveUp = p.now
		}
		p.a.Poll(p.now)
		if got := p.app.completions(); len(got) > 0 {
			if len(got) != 1 || got[0].Status != abi.StatusTimeout {
				t.Fatalf("completions %+v", got)
			}
			if serverGaveUp == 0 {
				t.Fatal("the initiator timed out before the server abandoned the write")
			}
			break
		}
	}
	p.b.Receive(p.now, late[0]) // the lost chunk, late
	p.b.Poll(p.now)
	if bytes.ContainsFunc(p.dst, func(r rune) bool { return r != 0 }) {
		t.Fatal("an incomplete write changed the region")
	}
	if s := p.b.Stats(); s.WritesCommitted != 1 || s.RxStale == 0 {
		t.Fatalf("stats %+v", s)
	}
	auditBoth(t, p.pair)
}

// Replays, with the server's replay detection off (the layer underneath;
// TestReplayedRequestsDropped has it on): a captured write request makes
// the server pull again, under a fresh IV, from an initiator that answers
// nothing; captured data and acknowledgments fail or go stale. The region
// never changes.
func TestWriteReplayMutatesNothing(t *testing.T) {
	cb := testConfig("10.0.0.2", 2)
	cb.ReplayPeers = 0
	p := newWPair(t, testConfig("10.0.0.1", 1), cb)
	var toB, toA [][]byte
	p.app.post(t, p.cmd(1, p.rd, 0, 2000))
	for k := 0; k < 4; k++ {
		p.a.Poll(p.now)
		for _, fr := range p.ta.take() {
			toB = append(toB, fr)
			p.b.Receive(p.now, fr)
		}
		p.b.Poll(p.now)
		for _, fr := range p.tb.take() {
			toA = append(toA, fr)
			p.a.Receive(p.now, fr)
		}
		p.now += 1000
	}
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK || !bytes.Equal(p.dst[:2000], p.src[:2000]) {
		t.Fatalf("genuine write: %+v", got)
	}
	clear(p.dst) // a replay that committed would show
	before := p.b.Stats()
	for _, fr := range toB { // ① and ③ again
		p.b.Receive(p.now, fr)
	}
	p.b.Poll(p.now)
	for _, fr := range p.tb.take() { // the new ② reaches a, which drops it
		if frameType(fr) != wire.TypePullReq {
			t.Fatalf("server answered a replay with type %d", frameType(fr))
		}
		p.a.Receive(p.now, fr)
	}
	for _, fr := range toA { // ② and ④ again
		p.a.Receive(p.now, fr)
	}
	p.a.Poll(p.now)
	if fr := p.ta.take(); len(fr) != 0 {
		t.Fatalf("initiator sent %d frames for replays", len(fr))
	}
	p.now += int64(2 * time.Millisecond)
	p.run()
	if bytes.ContainsFunc(p.dst, func(r rune) bool { return r != 0 }) {
		t.Fatal("a replay changed the region")
	}
	s := p.b.Stats()
	if s.WritesCommitted != before.WritesCommitted || s.PullsExpired != before.PullsExpired+1 {
		t.Fatalf("replay committed or was not abandoned: %+v", s)
	}
	if got := p.app.completions(); len(got) != 0 {
		t.Fatalf("replays produced completions %+v", got)
	}
	auditBoth(t, p.pair)
}

// A replayed write request (replay detection off, or the sender's window
// forgotten) is pulled from an initiator that no longer answers, as is a
// genuine request from an initiator that stopped. Its pull keeps its
// context until TIMEOUT while nothing else needs one; a genuine request
// that finds none free reclaims it once no chunk has answered it for
// PullIdleTimeout. A pull receiving data is never reclaimed.
func TestWriteReplayedPullReclaimed(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.ReplayPeers = 0
	ca.Timeout, cb.Timeout, cb.PullIdleTimeout = 10*time.Millisecond, 10*time.Millisecond, time.Millisecond
	cb.PullContexts = 1
	p := newWPair(t, ca, cb)
	p.app.post(t, p.cmd(1, p.rd, 0, 2000))
	p.a.Poll(p.now)
	req := p.ta.take()
	if len(req) != 1 || frameType(req[0]) != wire.TypeWriteReq {
		t.Fatalf("want one write request, got %d frames", len(req))
	}
	p.b.Receive(p.now, req[0])
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("genuine write: %+v", got)
	}
	clear(p.dst)
	before := p.b.Stats()

	start := p.now
	p.b.Receive(p.now, req[0]) // the replay takes the only pull context
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a) // its pull: a has no such op and drops it
	p.a.Poll(p.now)
	if s := p.b.Stats(); s.PullsIssued != before.PullsIssued+1 || s.PullsInUse != 1 || s.WindowInUse == 0 {
		t.Fatalf("replay not pulled: %+v", s)
	}
	p.now = start + int64(2*time.Millisecond)
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.PullsInUse != 1 || s.PullsExpired != before.PullsExpired {
		t.Fatalf("an idle pull ended with no request waiting: %+v", s)
	}

	// A genuine write arrives: it takes the replay's context at once
	// (idle for 2 ms > PullIdleTimeout) and commits.
	p.app.post(t, p.cmd(2, p.rd, 0, 4096))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b) // ①
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.PullsExpired != before.PullsExpired+1 || s.PullsIssued != before.PullsIssued+2 {
		t.Fatalf("the replay's idle pull was not reclaimed for a genuine write: %+v", s)
	}
	p.tb.deliverTo(p.now, p.a) // ②
	p.a.Poll(p.now)
	data := p.ta.take()
	if len(data) != 3 {
		t.Fatalf("want 3 data chunks, got %d frames", len(data))
	}
	// Its first chunk arrives at once, the other two after 2 ms, while a
	// third write waits for the context: a pull receiving data is not
	// reclaimed.
	p.b.Receive(p.now, data[0])
	p.b.Poll(p.now)
	p.app.post(t, p.cmd(3, p.rd, 4096, 64))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.now += int64(2 * time.Millisecond)
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.PullsInUse != 1 || s.PullsExpired != before.PullsExpired+1 || s.PullsIssued != before.PullsIssued+2 {
		t.Fatalf("a pull receiving data was reclaimed: %+v", s)
	}
	p.b.Receive(p.now, data[1])
	p.b.Receive(p.now, data[2])
	p.run()
	got := p.app.completions()
	if len(got) != 2 || got[0].Status != abi.StatusOK || got[1].Status != abi.StatusOK {
		t.Fatalf("genuine writes: %+v", got)
	}
	if !bytes.Equal(p.dst[:4096], p.src[:4096]) || !bytes.Equal(p.dst[4096:4160], p.src[:64]) {
		t.Fatal("genuine writes: data mismatch")
	}
	auditBoth(t, p.pair)

	for _, tc := range []struct{ idle, want time.Duration }{{0, 2500 * time.Microsecond}, {time.Millisecond, time.Millisecond}, {time.Second, 10 * time.Millisecond}} {
		cfg := testConfig("10.0.0.3", 3)
		cfg.Timeout, cfg.PullIdleTimeout = 10*time.Millisecond, tc.idle
		if c := newCore(t, cfg, newTestTx(4)); c.srv.pullIdle != int64(tc.want) {
			t.Errorf("PullIdleTimeout %v: pulls idle for %v, want %v", tc.idle, time.Duration(c.srv.pullIdle), tc.want)
		}
	}
}

// A duplicated write request (the fabric, or an attacker while the op is
// live) is dropped as a replay; with replay detection off it is pulled
// twice and one pull is answered. Either way the op completes once and
// commits once.
func TestWriteDuplicateRequest(t *testing.T) {
	for _, window := range []bool{true, false} {
		t.Run(fmt.Sprintf("window=%v", window), func(t *testing.T) { writeDuplicateRequest(t, window) })
	}
}

func writeDuplicateRequest(t *testing.T, window bool) {
	cb := testConfig("10.0.0.2", 2)
	if !window {
		cb.ReplayPeers = 0
	}
	p := newWPair(t, testConfig("10.0.0.1", 1), cb)
	p.app.post(t, p.cmd(2, p.rd, 64, 300))
	p.a.Poll(p.now)
	req := p.ta.take()
	p.b.Receive(p.now, req[0])
	p.b.Receive(p.now, req[0])
	p.b.Poll(p.now)
	pulls, replayed := uint64(2), uint64(0) // the set-up write's, this one's (twice, or once and a replay)
	if !window {
		pulls = 3
	} else {
		replayed = 1
	}
	if s := p.b.Stats(); s.PullsIssued != pulls || s.ReqReplayed != replayed {
		t.Fatalf("pulls issued %d (want %d), requests dropped as replays %d (want %d)", s.PullsIssued, pulls, s.ReqReplayed, replayed)
	}
	p.tb.deliverTo(p.now, p.a)
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK || !bytes.Equal(p.dst[64:364], p.src[:300]) {
		t.Fatalf("completions %+v", got)
	}
	p.now += int64(2 * time.Millisecond)
	p.run()
	if s := p.b.Stats(); s.WritesCommitted != 2 || s.PullsExpired != pulls-2 { // the set-up write, this one; the duplicate's pull
		t.Fatalf("stats %+v", s)
	}
	auditBoth(t, p.pair)
}

// On the pull, the initiator adopts the server's timeout: with a server
// slower to give up than the initiator's own TIMEOUT, the initiator
// still times out only after the server did.
func TestWriteInitiatorTimesOutLast(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.Timeout = 5 * time.Millisecond // ca: 1 ms
	p := newWPair(t, ca, cb)
	p.app.post(t, p.cmd(1, p.rd, 0, 4096))
	p.step(func(fr []byte) bool { return frameType(fr) != wire.TypeWriteData }) // no data arrives
	start := p.now
	var serverGaveUp int64
	for p.now < start+int64(10*time.Millisecond) {
		p.now += int64(50 * time.Microsecond)
		p.b.Poll(p.now)
		if serverGaveUp == 0 && p.b.Stats().PullsExpired == 1 {
			serverGaveUp = p.now
		}
		p.a.Poll(p.now)
		if got := p.app.completions(); len(got) > 0 {
			if got[0].Status != abi.StatusTimeout || serverGaveUp == 0 || p.now-start < int64(cb.Timeout) {
				t.Fatalf("initiator finished %v after the pull (server gave up at +%v): %+v",
					time.Duration(p.now-start), time.Duration(serverGaveUp-start), got)
			}
			auditBoth(t, p.pair)
			return
		}
	}
	t.Fatal("no completion")
}

// A write waits in the server's inbound queue while its window is taken,
// and is pulled when window frees; reads behind it wait their turn.
func TestWritePulledWhenWindowFrees(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.WindowBytes = ArbitrationBytes
	cb.PullContexts = 1
	p := newWPair(t, ca, cb)
	p.app.post(t, p.cmd(1, p.rd, 0, 4096))
	p.app.post(t, p.cmd(2, p.rd, 4096, 4096))
	p.a.Poll(p.now)
	for _, fr := range p.ta.take() {
		p.b.Receive(p.now, fr)
	}
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.PullsIssued != 2 || s.PullsInUse != 1 { // set-up write + the first
		t.Fatalf("want exactly one pull in progress: %+v", s)
	}
	p.tb.deliverTo(p.now, p.a)
	p.run()
	got := p.app.completions()
	if len(got) != 2 || got[0].Status != abi.StatusOK || got[1].Status != abi.StatusOK {
		t.Fatalf("completions %+v", got)
	}
	if !bytes.Equal(p.dst[:4096], p.src[:4096]) || !bytes.Equal(p.dst[4096:], p.src[:4096]) {
		t.Fatal("data")
	}
	auditBoth(t, p.pair)
}

// Tampered data fails authentication in the staging buffer; the genuine
// chunk still completes the write. Forged answers are dropped.
func TestWriteTamperedData(t *testing.T) {
	p := newWPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.app.post(t, p.cmd(1, p.rd, 0, 128))
	p.step(func(fr []byte) bool {
		if frameType(fr) == wire.TypeWriteData {
			bad := append([]byte(nil), fr...)
			bad[wire.PayloadOffset+5] ^= 1
			p.b.Receive(p.now, bad)
			if p.b.Stats().PullsInUse != 1 || p.b.Stats().RxAuthFailed == 0 {
				t.Fatalf("tampered chunk: %+v", p.b.Stats())
			}
		}
		return true
	})
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK || !bytes.Equal(p.dst[:128], p.src[:128]) {
		t.Fatalf("completions %+v", got)
	}
	auditBoth(t, p.pair)
}

func TestWriteHotPathAllocs(t *testing.T) {
	c, tx, app, r := selfApp(t, testConfig("10.0.0.1", 1), 1)
	cmd := app.keyed(writeCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 4096, 1))
	var cpl abi.Completion
	now := int64(1000)
	allocs := testing.AllocsPerRun(1000, func() {
		b := app.cmd.Reserve()
		cmd.Encode(b)
		app.cmd.Commit()
		app.cmd.Publish()
		for k := 0; k < 4; k++ { // ①, ②, ③, ④
			c.Poll(now)
			tx.deliverTo(now, c)
		}
		c.Poll(now)
		e := app.cpl.Peek()
		cpl.Decode(e)
		app.cpl.Advance()
		app.cpl.Release()
		now += 100
	})
	if allocs != 0 || cpl.Status != abi.StatusOK {
		t.Fatalf("%v allocs per op, status %v", allocs, cpl.Status)
	}
}

func BenchmarkWriteLoopback64(b *testing.B)   { benchOp(b, abi.OpWrite, 64) }
func BenchmarkWriteLoopback4096(b *testing.B) { benchOp(b, abi.OpWrite, 4096) }

// After the pull, a REMOTE_AUTHENTICATION_FAILURE (sealed with the public
// reserved key, curried with the pull's IV that travelled in clear) or a
// NACK can only be forged: the initiator drops them, and the write
// completes OK when its data commits.
func TestWriteForgedFailureAfterPullDropped(t *testing.T) {
	p := newWPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	pull := p.pullOut(t)
	var f wire.Fields
	if _, err := wire.Decode(pull[0], &f); err != nil {
		t.Fatal(err)
	}
	p.a.Receive(p.now, pull[0]) // data goes out towards b
	iv := f.IV
	before := p.a.Stats().RxDropped
	for _, forged := range []struct {
		t  wire.Type
		st abi.Status
	}{{wire.TypeError, abi.StatusRemoteAuthFailure}, {wire.TypeNack, 0}} {
		// Anyone can seal these: the reserved key is public.
		to := peer{mac: f.DstMAC, ip: f.DstIP, port: f.DstPort, pid: f.PID, tag: f.Tag}
		p.b.srv.reply(&to, forged.t, forged.st, nil, &iv)
		p.tb.deliverTo(p.now, p.a)
	}
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 0 {
		t.Fatalf("forged failure accepted after the pull: %+v", got)
	}
	if d := p.a.Stats().RxDropped - before; d != 2 {
		t.Fatalf("dropped %d forged answers, want 2", d)
	}
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK || !bytes.Equal(p.dst[:256], p.src[:256]) {
		t.Fatalf("completions %+v", got)
	}
	auditBoth(t, p.pair)
}

// Shutdown aborts what can no longer take effect but keeps a WRITE whose
// data was all sent in service: its server may still commit it, so it
// completes OK on the ack (or TIMEOUT at its deadline), never ABORTED.
// Commands posted after Shutdown complete ABORTED at once.
func TestShutdownKeepsSentWrites(t *testing.T) {
	p := newWPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.app.post(t, p.cmd(1, p.rd, 0, 512))  // pulled, data sent, ack pending
	p.app.post(t, p.cmd(2, p.rd, 512, 64)) // its request never reaches b
	p.a.Poll(p.now)
	reqs := p.ta.take()
	p.b.Receive(p.now, reqs[0])
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a) // ② for the first write: its data goes out
	data := p.ta.take()
	p.a.Shutdown(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Cookie != 2 || got[0].Status != abi.StatusAborted {
		t.Fatalf("at shutdown: %+v", got)
	}
	if p.a.InFlight() != 1 {
		t.Fatalf("in flight %d, want the sent write", p.a.InFlight())
	}
	p.app.post(t, p.cmd(3, p.rd, 0, 64))
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusAborted || len(p.ta.take()) != 0 {
		t.Fatalf("posted after shutdown: %+v", got)
	}
	for _, fr := range data {
		p.b.Receive(p.now, fr)
	}
	p.tb.deliverTo(p.now, p.a) // ④
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Cookie != 1 || got[0].Status != abi.StatusOK || !bytes.Equal(p.dst[:512], p.src[:512]) {
		t.Fatalf("sent write after shutdown: %+v", got)
	}
	if err := p.a.Audit(); err != nil || p.a.InFlight() != 0 {
		t.Fatalf("audit %v, in flight %d", err, p.a.InFlight())
	}
}

// A WRITE waiting for the serving side's window or a pull context does
// not hold up the requests queued behind it: a READ is answered at once.
func TestReadNotBehindWaitingWrite(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.WindowBytes = ArbitrationBytes
	cb.PullContexts = 1
	p := newWPair(t, ca, cb)
	p.app.post(t, p.cmd(1, p.rd, 0, 4096))
	p.app.post(t, p.cmd(2, p.rd, 4096, 4096)) // waits: one context, one window's worth
	rd := readCmd(p.app.slots[3], ipOf("10.0.0.2"), p.rro, 0, p.rs, 0, 64, 3)
	p.app.post(t, rd)
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now)
	var pulls, resps int
	for _, fr := range p.tb.take() {
		switch frameType(fr) {
		case wire.TypePullReq:
			pulls++
		case wire.TypeReadResp:
			resps++
		}
	}
	if pulls != 1 || resps != 1 {
		t.Fatalf("b sent %d pulls and %d read responses, want 1 and 1", pulls, resps)
	}
	if s := p.b.Stats(); s.PullsInUse != 1 {
		t.Fatalf("pulls in use %d", s.PullsInUse)
	}
}

// A stall of the serving engine moves none of its timers: its pull still
// ends at its own deadline, so a WRITE's initiator, which adopted that
// timeout at ② and may only move its own deadline later, times out last.
func TestWriteStalledServerKeepsPullDeadline(t *testing.T) {
	p := newWPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2))
	p.pullOut(t) // ② lost
	t0 := p.now
	const gap = int64(5 * time.Millisecond)
	p.b.Stalled(gap)
	p.now = t0 + int64(p.b.cfg.Timeout) + 1
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.PullsExpired != 1 || s.PullsInUse != 0 || s.WindowInUse != 0 {
		t.Fatalf("the stalled server's pull outlived its deadline: %+v", s)
	}
	if !bytes.Equal(p.dst, make([]byte, len(p.dst))) {
		t.Fatal("region changed")
	}
}
