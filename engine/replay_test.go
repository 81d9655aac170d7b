package engine

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// testReplayTable is a table of peers entries for one owner (tenant 0),
// every lane allowed.
func testReplayTable(peers int) *replayTable {
	return newReplayTable(peers, 1, wire.MaxCores, 1, nil)
}

// fresh is accept for owner 0: whether the request is fresh.
func (t *replayTable) fresh(addr uint32, ctr uint64) bool {
	return t.accept(0, 0, addr, ctr) == replayFresh
}

func TestReplayWindow(t *testing.T) {
	tb := testReplayTable(4)
	const a, b = 0x0a000001, 100000
	for _, tc := range []struct {
		ctr  uint64
		want bool
	}{
		{b, true}, {b, false}, // a replay
		{b + 2, true}, {b + 1, true}, {b + 1, false}, // reordered, then replayed
		{b - 1, true}, {b + 3 - replayWindow, true}, // never seen, inside the window
		{b + 2 - replayWindow, false},            // a window below the highest: too old
		{b + replayWindow, true}, {b + 2, false}, // a jump: b+2 slid out
		{b + 3*replayWindow, true},     // a jump past the whole window
		{b + 3*replayWindow - 1, true}, // cleared by the jump
		{b + 2*replayWindow, false},
	} {
		if got := tb.fresh(a, tc.ctr); got != tc.want {
			t.Fatalf("accept(%d) = %v, want %v", tc.ctr, got, tc.want)
		}
	}
	// A counter one window above a seen one, never seen itself, once the
	// window slid past the old one: its bit must have been cleared, by a
	// slide of many counters and by a slide of one.
	for _, steps := range [][]uint64{{b, b + 100, b + replayWindow + 50}, {b, b + replayWindow - 1, b + replayWindow + 1}} {
		tw := testReplayTable(1)
		for _, c := range steps {
			if !tw.fresh(a, c) {
				t.Fatalf("%v: accept(%d) refused", steps, c)
			}
		}
		if !tw.fresh(a, b+replayWindow) || tw.fresh(a, b+replayWindow) {
			t.Fatalf("%v: counter %d (one window above a seen one) not accepted exactly once", steps, b+replayWindow)
		}
	}
	// Other senders have their own windows.
	if !tb.fresh(a+1, b) || !tb.fresh(a+2, b) || tb.fresh(a+1, b) {
		t.Fatal("windows are not per sender")
	}
}

// TestReplayTableModel runs random requests from a changing set of senders
// through a small table and a plain model of it (a set of seen counters
// per sender, least recently active sender forgotten first).
func TestReplayTableModel(t *testing.T) {
	const peers = 8
	type model struct {
		top  uint64
		seen map[uint64]bool
		last int64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tb := testReplayTable(peers)
	ref := map[uint32]*model{}
	next := map[uint32]uint64{}
	var evictions uint64
	for now := int64(1); now < 200000; now++ {
		addr := uint32(0x0a000000 + rng.IntN(14)) // more senders than entries
		ctr := next[addr]
		switch r := rng.IntN(10); {
		case r < 6: // a fresh counter, often with a gap
			ctr += 1 + uint64(rng.IntN(3))*uint64(rng.IntN(30000))
			next[addr] = ctr
		case r < 9 && ctr > 0: // an older one: reordered or replayed
			ctr -= uint64(rng.IntN(int(min(ctr, 3*replayWindow/2))))
		}
		m := ref[addr]
		if m == nil {
			if len(ref) == peers {
				var victim uint32
				var oldest int64 = 1 << 62
				for k, v := range ref {
					if v.last < oldest {
						victim, oldest = k, v.last
					}
				}
				delete(ref, victim)
				evictions++
			}
			m = &model{top: ctr, seen: map[uint64]bool{}}
			ref[addr] = m
		}
		want := false
		switch {
		case len(m.seen) == 0 || ctr > m.top:
			want = true
			m.top = ctr
		case m.top-ctr >= replayWindow:
		case !m.seen[ctr]:
			want = true
		}
		if want {
			m.seen[ctr] = true
			m.last = now
		}
		if got := tb.fresh(addr, ctr); got != want {
			t.Fatalf("step %d: accept(%#x, %d) = %v, model says %v (top %d)", now, addr, ctr, got, want, m.top)
		}
	}
	if tb.evictions != evictions || evictions == 0 {
		t.Fatalf("evictions %d, model %d", tb.evictions, evictions)
	}
	// The index still finds every peer it holds, and only those.
	for i := range tb.n {
		if k := tb.find(tb.peers[i].key); tb.index[k] != int32(i) {
			t.Fatalf("peer %d (%#x) lost from the index", i, tb.peers[i].key)
		}
	}
	used := 0
	for _, p := range tb.index {
		if p >= 0 {
			used++
		}
	}
	if used != tb.n {
		t.Fatalf("index holds %d entries, table %d", used, tb.n)
	}
}

// A replayed READ request is dropped before it is served: no answer, no
// window, counted. A request overtaken by a later one is still served;
// one a whole window older than the highest seen is dropped unseen.
func TestReplayedRequestsDropped(t *testing.T) {
	p := newSecPair(t)
	r1, r2 := p.requestFrame(t, 1, 100), p.requestFrame(t, 2, 100)
	if got := p.serve(r2, r1); len(got) != 2 {
		t.Fatalf("reordered requests: %d answers, want 2", len(got))
	}
	served := p.b.Stats().ReqServed
	if got := p.serve(r1, r2, r1); len(got) != 0 {
		t.Fatalf("replays answered: %d frames", len(got))
	}
	if s := p.b.Stats(); s.ReqReplayed != 3 || s.ReqServed != served || s.WindowInUse != 0 {
		t.Fatalf("after 3 replays: %+v", s)
	}
	old := p.requestFrame(t, 3, 100)
	for range replayWindow + 10 {
		if _, err := p.a.out.lane.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.serve(p.requestFrame(t, 4, 100)); len(got) != 1 {
		t.Fatalf("fresh request: %d answers", len(got))
	}
	if got := p.serve(old); len(got) != 0 || p.b.Stats().ReqReplayed != 4 {
		t.Fatalf("request a window older than the newest: %d answers, %d dropped", len(got), p.b.Stats().ReqReplayed)
	}
	// A request that fails authentication never reaches the window: a
	// forged copy of a fresh request's IV cannot burn it.
	fresh := p.requestFrame(t, 5, 100)
	forged := append([]byte(nil), fresh...)
	wire.Trailer(forged, 0)[0] ^= 1
	if got := p.serve(forged); len(got) != 1 || p.b.Stats().ReqAuthFailed == 0 {
		t.Fatal("forged request not answered REMOTE_AUTHENTICATION_FAILURE")
	}
	if got := p.serve(fresh); len(got) != 1 {
		t.Fatalf("the genuine request after its forged copy: %d answers", len(got))
	}
}

func TestReplayPeersConfig(t *testing.T) {
	for _, n := range []int{-1, 1<<13 + 1} {
		cfg := testConfig("10.0.0.1", 1)
		cfg.ReplayPeers = n
		if _, err := New(cfg, newTestTx(4)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ReplayPeers") {
			t.Errorf("ReplayPeers %d: %v, want ErrConfig naming it", n, err)
		}
	}
	cfg := testConfig("10.0.0.1", 1)
	cfg.ReplayPeers = 0
	c, err := New(cfg, newTestTx(4))
	if err != nil || c.srv.replay != nil {
		t.Fatalf("ReplayPeers 0: %v, table %v; want no table", err, c.srv.replay != nil)
	}
}

// TestReplayOwnersModel runs random requests of several owners' senders,
// on several lanes each, through a small table and a plain model of the
// rules of replay.go: windows per (owner, address, lane); at most lanes
// per (owner, address), a further lane refused; when the table is full,
// an owner holding its share or more forgets its own least recently
// active lane, one below it that of the owner holding most beyond its
// share (ties: the lowest). Owner 0 sends most, from many addresses.
func TestReplayOwnersModel(t *testing.T) {
	const peers, owners, lanes = 9, 3, 2 // a share of 3 each
	type key struct {
		owner uint16
		addr  uint32
		tag   uint64
	}
	type model struct {
		top  uint64
		seen map[uint64]bool
		last int64
	}
	rng := rand.New(rand.NewPCG(3, 4))
	tb := newReplayTable(peers, owners, lanes, 7, nil)
	ref := map[key]*model{}
	next := map[key]uint64{}
	held := make([]int, owners)
	var evictions, refused [owners]uint64
	for now := int64(1); now < 300000; now++ {
		k := key{owner: uint16(rng.IntN(owners)), tag: uint64(rng.IntN(4))}
		if rng.IntN(2) == 0 {
			k.owner = 0
		}
		senders := 3
		if k.owner == 0 {
			senders = 13
		}
		k.addr = uint32(0x0a000000 + rng.IntN(senders))
		ctr := next[k]
		switch r := rng.IntN(10); {
		case r < 6:
			ctr += 1 + uint64(rng.IntN(3))*uint64(rng.IntN(30000))
			next[k] = ctr
		case r < 9 && ctr > 0:
			ctr -= uint64(rng.IntN(int(min(ctr, 3*replayWindow/2))))
		}
		full := k.tag<<ivTagShift | ctr
		m := ref[k]
		want := replayFresh
		if m == nil {
			n := 0
			for o := range ref {
				if o.owner == k.owner && o.addr == k.addr {
					n++
				}
			}
			if n >= lanes {
				want = replayNoLane
				refused[k.owner]++
			} else {
				if len(ref) == peers {
					from := int(k.owner)
					if held[from] == 0 || held[from] < peers/owners {
						best := 0
						from = -1
						for o, h := range held {
							if d := h - peers/owners; d > best {
								from, best = o, d
							}
						}
					}
					var victim key
					oldest := int64(1 << 62)
					for o, v := range ref {
						if int(o.owner) == from && v.last < oldest {
							victim, oldest = o, v.last
						}
					}
					if oldest == 1<<62 {
						t.Fatalf("step %d: the model found nothing to forget for owner %d", now, k.owner)
					}
					delete(ref, victim)
					held[from]--
					evictions[from]++
				}
				m = &model{top: ctr, seen: map[uint64]bool{}}
				ref[k] = m
				held[k.owner]++
			}
		}
		if m != nil {
			switch {
			case len(m.seen) == 0 || ctr > m.top:
				m.top = ctr
			case m.top-ctr >= replayWindow, m.seen[ctr]:
				want = replaySeen
			}
			if want == replayFresh {
				m.seen[ctr] = true
				m.last = now
			}
		}
		if got := tb.accept(k.owner, 0, k.addr, full); got != want {
			t.Fatalf("step %d: accept(%d, %#x, lane %d, %d) = %v, model says %v", now, k.owner, k.addr, k.tag, ctr, got, want)
		}
		if now%1000 == 0 {
			if err := tb.audit(); err != nil {
				t.Fatalf("step %d: %v", now, err)
			}
		}
	}
	for o := range owners {
		if tb.tstats[o].ReplayEvictions != evictions[o] || tb.tstats[o].ReplayLanesRefused != refused[o] || int(tb.held[o]) != held[o] {
			t.Fatalf("owner %d: evictions %d refused %d held %d, model %d %d %d", o, tb.tstats[o].ReplayEvictions, tb.tstats[o].ReplayLanesRefused, tb.held[o], evictions[o], refused[o], held[o])
		}
		if evictions[o] == 0 || refused[o] == 0 {
			t.Fatalf("owner %d: %d evictions, %d lanes refused: the run did not exercise them", o, evictions[o], refused[o])
		}
	}
}

// A forger holds K_r of its own region (tenant 2's), so K_d for any
// address, and sends the serving engine authenticated requests for that
// region with a victim's address, in its IV and as its source: its
// windows are the forger's owner's, apart from those of the victim's
// requests to the victim owner's region (tenant 1's). Its counters far
// ahead of the victim's push nothing of the victim's, the lanes it mints
// evict only its own owner's windows (within the victim owner's share,
// none of the victim's is forgotten: a replay of the victim's captured
// request is still dropped), and a request whose IV address is not its
// source is dropped before authentication.
func TestReplayForgerMovesOnlyItsOwnWindows(t *testing.T) {
	ca, cb := pairConfigs(testCrypto)
	cb.Tenants, cb.ReplayPeers = 4, 8 // a share of 2 windows per owner
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, abi.ClassLow, 8)
	victim := openTenantApp(t, p.b, 1, abi.ClassLow, 0)
	forger := openTenantApp(t, p.b, 2, abi.ClassLow, 0)
	krF := aesni.Key{0xf0, 0x0f}
	rv, err := p.b.RegisterRegion(victim.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := p.b.RegisterRegion(forger.id, make([]byte, 4096), abi.PermRemoteRead, krF)
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 8*4096), abi.PermAll, testKr)
	read := func(k int, want abi.Status) {
		t.Helper()
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.2"), rv, 0, rd, 0, 64, uint64(k)))
		p.run()
		if got := app.completions(); len(got) != 1 || got[0].Status != want {
			t.Fatalf("victim's read: %+v, want %v", got, want)
		}
	}
	read(0, abi.StatusOK) // resolves b's MAC
	app.post(t, readCmd(app.slots[1], ipOf("10.0.0.2"), rv, 0, rd, 0, 64, 1))
	p.a.Poll(p.now)
	captured := p.ta.take()[0]
	p.b.Receive(p.now, captured)
	p.run()
	app.completions()

	victimIP := [4]byte{10, 0, 0, 1}
	_, vctr := aesni.NonceCounter(wire.IV(captured))
	kdAs := func(addr [4]byte) aesni.Key { return aesni.DeriveKey(krF, addr, testPID, uint8(abi.OpRead)) }
	serve := func(fr []byte) int {
		p.b.Receive(p.now, fr)
		p.b.Poll(p.now)
		return len(p.tb.take())
	}
	st0 := p.b.Stats()
	// Pushing: the victim's address and lane, a counter 2^40 ahead.
	if n := serve(forgedRequest(p.b, wire.TypeReadReq, victimIP, victimIP, vctr+1<<40, rf, kdAs(victimIP), 64, 7)); n != 1 {
		t.Fatalf("the forger's request for its own region: %d answers, want its data", n)
	}
	// The victim's address in the IV only, from the forger's own.
	forgerIP := [4]byte{10, 0, 0, 66}
	if n := serve(forgedRequest(p.b, wire.TypeReadReq, forgerIP, victimIP, vctr+2<<40, rf, kdAs(forgerIP), 64, 8)); n != 0 {
		t.Fatalf("IV address not the source: %d answers", n)
	}
	// Minting lanes: 16 addresses x 4 lanes, far beyond the table.
	for a := range 16 {
		addr := [4]byte{10, 0, 1, byte(a)}
		for lane := range uint64(4) {
			if n := serve(forgedRequest(p.b, wire.TypeReadReq, addr, addr, lane<<ivTagShift|1<<20, rf, kdAs(addr), 64, 9)); n != 1 {
				t.Fatalf("minted lane %d of %v: %d answers", lane, addr, n)
			}
		}
	}
	st := p.b.Stats()
	if st.ReqIVMismatch != st0.ReqIVMismatch+1 || st.ReqServed != st0.ReqServed+65 || st.ReplayEvictions == 0 {
		t.Fatalf("IV mismatches %d, served %d, evictions %d (before: %d, %d)", st.ReqIVMismatch, st.ReqServed, st.ReplayEvictions, st0.ReqIVMismatch, st0.ReqServed)
	}
	if v, f := p.b.TenantCounters(1), p.b.TenantCounters(2); v.ReplayEvictions != 0 || f.ReplayEvictions != st.ReplayEvictions || f.IVMismatch != 1 {
		t.Fatalf("victim owner %+v, forger's %+v: the evictions must all be the forger's", v, f)
	}
	// The victim's window neither moved nor was forgotten.
	read(2, abi.StatusOK)
	if n := serve(captured); n != 0 || p.b.Stats().ReqReplayed != st.ReqReplayed+1 {
		t.Fatalf("the victim's captured request replayed: %d answers", n)
	}
	read(3, abi.StatusOK)
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// A sender address opens at most ReplayLanesPerSender lanes of one
// owner's windows; a further lane's requests are dropped, counted, and
// its other lanes and other owners' are untouched.
func TestReplayLanesPerSender(t *testing.T) {
	ca, cb := pairConfigs(testCrypto)
	cb.Tenants, cb.ReplayLanesPerSender = 4, 2
	p := newPair(t, ca, cb)
	owners := []*testApp{openTenantApp(t, p.b, 1, abi.ClassLow, 0), openTenantApp(t, p.b, 2, abi.ClassLow, 0)}
	var rids []abi.RegionID
	for _, o := range owners {
		rid, err := p.b.RegisterRegion(o.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
		if err != nil {
			t.Fatal(err)
		}
		rids = append(rids, rid)
	}
	addr := [4]byte{10, 0, 0, 9}
	kd := aesni.DeriveKey(testKr, addr, testPID, uint8(abi.OpRead))
	serve := func(rid abi.RegionID, lane, ctr uint64) int {
		p.b.Receive(p.now, forgedRequest(p.b, wire.TypeReadReq, addr, addr, lane<<ivTagShift|ctr, rid, kd, 64, lane))
		p.b.Poll(p.now)
		return len(p.tb.take())
	}
	for _, tc := range []struct {
		owner      int
		lane, ctr  uint64
		answers    int
		refusedNow uint64
	}{
		{0, 0, 1, 1, 0}, {0, 1, 1, 1, 0}, // two lanes of owner 1
		{0, 2, 1, 0, 1}, {0, 63, 5, 0, 2}, // a third and a fourth: refused
		{0, 0, 2, 1, 2}, {0, 1, 2, 1, 2}, // the first two go on
		{1, 2, 1, 1, 2}, {1, 3, 1, 1, 2}, // another owner's: lanes of its own
		{1, 0, 1, 0, 3},
	} {
		if n := serve(rids[tc.owner], tc.lane, tc.ctr); n != tc.answers || p.b.Stats().ReplayLanesRefused != tc.refusedNow {
			t.Fatalf("owner %d lane %d: %d answers (want %d), %d refused (want %d)", tc.owner+1, tc.lane, n, tc.answers, p.b.Stats().ReplayLanesRefused, tc.refusedNow)
		}
	}
	if a, b := p.b.TenantCounters(1), p.b.TenantCounters(2); a.ReplayLanesRefused != 2 || b.ReplayLanesRefused != 1 {
		t.Fatalf("refused per owner: %d, %d; want 2, 1", a.ReplayLanesRefused, b.ReplayLanesRefused)
	}
}

// A tenant index handed to a new tenant after its tenant left starts with
// windows of its own: the windows the leaver pushed in its namespace (a
// reader's address and lane, counters far ahead) are not those of its
// successor's regions, whose readers are served.
func TestReplayTenantIndexReused(t *testing.T) {
	ca, cb := pairConfigs(testCrypto)
	cb.Tenants = 4
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, abi.ClassLow, 8)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 8*4096), abi.PermAll, testKr)
	forger := openTenantApp(t, p.b, 2, abi.ClassLow, 0)
	krF := aesni.Key{0xf0, 0x0f}
	rf, err := p.b.RegisterRegion(forger.id, make([]byte, 4096), abi.PermRemoteRead, krF)
	if err != nil {
		t.Fatal(err)
	}
	// The reader reads the forger's region (the forger gave it its K_d):
	// its first read resolves b's MAC, its second is caught, and the
	// forger's push, 2^40 past it on its lane, lands before it.
	victimIP := [4]byte{10, 0, 0, 1}
	readF := func(k int) *abi.Command {
		cmd := readCmd(app.slots[k], ipOf("10.0.0.2"), rf, 0, rd, 0, 64, uint64(k))
		cmd.Key = aesni.DeriveKey(krF, victimIP, testPID, uint8(abi.OpRead))
		return cmd
	}
	app.post(t, readF(0))
	p.run()
	if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("the reader's first read of the forger's region: %+v", got)
	}
	app.post(t, readF(1))
	p.a.Poll(p.now)
	req := p.ta.take()[0]
	_, vctr := aesni.NonceCounter(wire.IV(req))
	p.b.Receive(p.now, forgedRequest(p.b, wire.TypeReadReq, victimIP, victimIP, vctr+1<<40, rf, aesni.DeriveKey(krF, victimIP, testPID, uint8(abi.OpRead)), 64, 7))
	p.b.Receive(p.now, req)
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.ReqReplayed != 1 {
		t.Fatalf("in the forger's own namespace its push works: the reader's next read must be dropped as too old; %d replays", s.ReqReplayed)
	}
	p.tb.take()
	p.now += int64(ca.Timeout) * 2
	p.run()
	app.completions() // TIMEOUT
	if err := p.b.ClosePortal(forger.id); err != nil {
		t.Fatal(err)
	}
	// Index 2's next tenant, and the reader reading its region.
	next := openTenantApp(t, p.b, 2, abi.ClassLow, 0)
	rn, err := p.b.RegisterRegion(next.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 3; k++ {
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.2"), rn, 0, rd, 0, 64, uint64(k)))
		p.run()
		if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
			t.Fatalf("read %d of the index's next tenant's region: %+v", k, got)
		}
	}
	if s := p.b.Stats(); s.ReqReplayed != 1 {
		t.Fatalf("%d requests dropped as replays, want only the one before the forger left", s.ReqReplayed)
	}
}
