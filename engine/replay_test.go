package engine

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/onerma/onerma/wire"
)

func TestReplayWindow(t *testing.T) {
	tb := newReplayTable(4)
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
		if got := tb.accept(a, tc.ctr, 1); got != tc.want {
			t.Fatalf("accept(%d) = %v, want %v", tc.ctr, got, tc.want)
		}
	}
	// A counter one window above a seen one, never seen itself, once the
	// window slid past the old one: its bit must have been cleared, by a
	// slide of many counters and by a slide of one.
	for _, steps := range [][]uint64{{b, b + 100, b + replayWindow + 50}, {b, b + replayWindow - 1, b + replayWindow + 1}} {
		tw := newReplayTable(1)
		for _, c := range steps {
			if !tw.accept(a, c, 1) {
				t.Fatalf("%v: accept(%d) refused", steps, c)
			}
		}
		if !tw.accept(a, b+replayWindow, 1) || tw.accept(a, b+replayWindow, 1) {
			t.Fatalf("%v: counter %d (one window above a seen one) not accepted exactly once", steps, b+replayWindow)
		}
	}
	// Other senders have their own windows.
	if !tb.accept(a+1, b, 2) || !tb.accept(a+2, b, 2) || tb.accept(a+1, b, 3) {
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
	tb := newReplayTable(peers)
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
		if got := tb.accept(addr, ctr, now); got != want {
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
