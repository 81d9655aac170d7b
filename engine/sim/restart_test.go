package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// restartNode: node's engine dies and a new one starts (fault
// EngineRestarts); its application redials within 200 µs.
func restartNode(node int) func(*Sim) {
	return func(s *Sim) {
		s.pendingEv++ // (the redial's)
		s.nodes[node].restart()
	}
}

// postListed: node's first portal posts a valid READ of the region of
// node tgt of kind rk its directory lists now (a region of tgt's engine
// before a restart, while node has not learnt of its successor); ops
// gets the op.
func postListed(node, tgt int, rk regKind, ops *[]*op) func(*Sim) {
	return func(s *Sim) {
		a := s.nodes[node].app
		var rg *region
		for _, r := range s.regions {
			if r.node == tgt && r.kind == rk && r.listed(node, s.now) {
				rg = r
			}
		}
		if rg == nil {
			s.fail("script: node %d lists no region of kind %d of node %d", node, rk, tgt)
			return
		}
		p := a.portals[0]
		if !p.postOp(kValid, rg, 512, 64, func(o *op, _ *abi.Command) { *ops = append(*ops, o) }) {
			s.fail("script: could not post")
		}
		p.cmd.Publish()
	}
}

// TestEngineRestart: node 1's engine restarts while node 0 has a READ in
// flight to it (its request lost, a copy of it delayed past the restart)
// and node 1 a READ in flight to node 0 (its answers lost). Node 1's READ
// completes ENGINE_GONE, once; node 0's gets REMOTE_AUTHENTICATION_FAILURE
// from the new engine, which took over the old region ids with new keys;
// node 0 then posts twice with its stale directory entry (before the
// redial, and after it, not having learnt of the new regions yet): both
// stale, REMOTE_AUTHENTICATION_FAILURE, never served from the region that
// took the id (checkServedEpoch). Once it has learnt of them, its READ
// and WRITE of node 1's new regions are OK, as is node 1's READ of node
// 0 through its new portal: node 0's replay windows accept the new
// engine's IV counters. A strict run: any TIMEOUT fails it.
func TestEngineRestart(t *testing.T) {
	c := scripted(2, true)
	c.Faults.KeyDelayNs = 0
	restarted := false
	lost := func(f *frame) { f.buf[0], f.buf[5] = 0x02, 0xfe } // to a MAC the node does not have: dropped by its core
	c.netHook = func(s *Sim, d *node, f *frame) {
		h, _ := frameOf(f)
		if h == nil || restarted {
			return
		}
		switch {
		case d.id == 1 && h.Type == wire.TypeReadReq:
			g := s.pool.clone(f)
			s.schedule(s.t0+60_000, evDeliver, d.id, 0, g)
			lost(f)
		case d.id == 1 && h.Type == wire.TypeReadResp:
			lost(f)
		}
	}
	var stale, old []*op
	var oldIDs []abi.RegionID
	c.scripts = []scriptStep{
		at(10, postListed(0, 1, regSrc, &old)),
		at(10, postReadOf(1, 0, regSrc, 512, 0)),
		at(40, func(s *Sim) {
			for _, r := range s.regions {
				if r.node == 1 {
					oldIDs = append(oldIDs, r.id)
				}
			}
			restarted = true
			restartNode(1)(s)
			postListed(0, 1, regSrc, &stale)(s) // before the redial
		}),
		at(300, func(s *Sim) {
			// Node 0 has not learnt of node 1's new regions yet.
			for _, r := range s.regions {
				if r.node == 1 && r.visible != nil {
					r.visible[0] = s.now + 1_000_000
				}
			}
		}),
		at(310, postListed(0, 1, regSrc, &stale)),
		at(1400, postListed(0, 1, regSrc, &old)),
		at(1400, postWrite(0, kValid, 1, 1024, 0, nil)),
		at(1400, postReadOf(1, 0, regSrc, 512, 0)),
	}
	c.MustSee = []abi.Status{abi.StatusOK, abi.StatusEngineGone, abi.StatusRemoteAuthFailure}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 2 || len(old) != 2 {
		t.Fatalf("posted %d stale and %d other READs of node 1, want 2 and 2", len(stale), len(old))
	}
	for _, o := range stale {
		if o.kind != kStaleKey || !o.target.gone || o.target.epoch != 0 {
			t.Errorf("%s: want a stale-key READ of a region of node 1's first engine", o)
		}
	}
	if o := old[1]; o.target.epoch != 1 || o.target.gone {
		t.Errorf("%s: want a READ of a region of node 1's new engine", o)
	}
	reused := false
	for _, id := range oldIDs {
		if id == old[1].target.id {
			reused = true
		}
	}
	if !reused {
		t.Errorf("node 1's new pattern region %#x has an id its first engine did not have (%x): no id reused", uint32(old[1].target.id), oldIDs)
	}
	want := [abi.NumStatus]uint64{}
	want[abi.StatusEngineGone] = 1        // node 1's READ
	want[abi.StatusRemoteAuthFailure] = 3 // node 0's READ in flight, its two stale ones
	want[abi.StatusOK] = 3                // node 0's READ and WRITE of the new regions, node 1's READ
	if res.ByStatus != want {
		t.Errorf("completions %s, want %s", statusSummary(&res.ByStatus), statusSummary(&want))
	}
	if res.Restarts != 1 || len(res.Retired) != 1 || res.Retired[0].Posted != 1 {
		t.Errorf("restarts %d, retired cores %d (%+v), want 1 and 1, with 1 op posted", res.Restarts, len(res.Retired), res.Retired)
	}
	if st := res.Cores[1]; st.ReqAuthFailed < 3 {
		t.Errorf("node 1's new engine refused %d requests, want at least 3", st.ReqAuthFailed)
	}
}

// TestSimCatchesRestartKeyReuse: the restarted node's application
// registers its regions again under their old K_r (and the new engine
// gives them the old ids): node 0's stale READ then authenticates at the
// new engine and is served from the region that took the old id, which
// must fail the run.
func TestSimCatchesRestartKeyReuse(t *testing.T) {
	c := scripted(2, true)
	c.restartKeepsKeys = true
	var ops []*op
	c.scripts = []scriptStep{
		at(40, restartNode(1)),
		at(300, func(s *Sim) {
			for _, r := range s.regions {
				if r.node == 1 && r.visible != nil {
					r.visible[0] = s.now + 1_000_000
				}
			}
		}),
		at(310, postListed(0, 1, regSrc, &ops)),
	}
	_, err := Run(c)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Msg, "of the engine before") {
		t.Fatalf("a stale READ served by the new engine went unnoticed: %v", err)
	}
	t.Logf("caught: %s", f.Msg)
}
