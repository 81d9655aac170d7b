package sim

import (
	"math"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// Scripted remote REKEYs: every invariant of a random run checked (the
// install seen at ④, exactly one completion, TIMEOUT bounds, the
// directory's keys: later ops with the old key must fail authentication,
// ops with the new one must succeed).

// rekeyable is the first live remote-readable or remote-writable region
// of node whose PermRemoteRekey is want.
func rekeyable(s *Sim, node int, want bool) *region {
	for _, r := range s.regions {
		if r.node == node && (r.kind == regSrc || r.kind == regDst) && r.deadAt == math.MaxInt64 &&
			(r.perm&abi.PermRemoteRekey != 0) == want {
			return r
		}
	}
	return nil
}

// postRekey: node's first portal posts a REKEY of kind of node tgt's
// first live region whose PermRemoteRekey is perm.
func postRekey(node int, kind opKind, tgt int, perm bool) func(*Sim) {
	return func(s *Sim) {
		rg := rekeyable(s, tgt, perm)
		if rg == nil {
			s.fail("script: node %d has no region with PermRemoteRekey=%v", tgt, perm)
			return
		}
		p := s.nodes[node].app.portals[0]
		if !p.postOpType(abi.OpRekey, kind, rg, aesni.KeySize, 0, nil) {
			s.fail("script: could not post")
		}
		p.cmd.Publish()
	}
}

// readRekeyable: node posts a READ of node tgt's first region with
// PermRemoteRekey (with the newest key node knows).
func readRekeyable(node, tgt int) func(*Sim) {
	return func(s *Sim) {
		rg := rekeyable(s, tgt, true)
		if rg == nil {
			s.fail("script: node %d has no rekeyable region", tgt)
			return
		}
		postTyped(abi.OpRead, node, kValid, tgt, rg.kind, 512, 0, nil)(s)
	}
}

// withRegions: both kinds of region exist on node 1 (PermRemoteRekey is
// given by pattern id): a config whose node 1 has one of each.
func withRegions(t *testing.T, c Config) Config {
	c.scripts = append([]scriptStep{at(1, func(s *Sim) {
		if rekeyable(s, 1, true) == nil || rekeyable(s, 1, false) == nil {
			s.fail("script: node 1 lacks a region with or without PermRemoteRekey")
		}
	})}, c.scripts...)
	return c
}

// TestRemoteRekey: node 0 rekeys a region of node 1 (OK: installed); node
// 0 then reads it with the new key (OK) and node 2, which has not learnt
// it yet, with the old one (REMOTE_AUTHENTICATION_FAILURE), as does node
// 2's REKEY with the old key; a REKEY of a region without
// PermRemoteRekey gets REMOTE_PERMISSION and installs nothing.
func TestRemoteRekey(t *testing.T) {
	c := scripted(3, true)
	c.MustSee = []abi.Status{abi.StatusOK, abi.StatusRemoteAuthFailure, abi.StatusRemotePermission}
	c.scripts = []scriptStep{
		at(10, postRekey(0, kValid, 1, true)),
		at(100, func(s *Sim) {
			rg := rekeyable(s, 1, true)
			if len(rg.keys) != 2 {
				s.fail("script: region has %d keys after the REKEY, want 2", len(rg.keys))
				return
			}
			v := &rg.keys[1]
			v.learn[0], v.learn[2] = s.now, s.now+1_000_000_000
		}),
		at(110, readRekeyable(0, 1)),
		at(111, readRekeyable(2, 1)),
		at(112, postRekey(2, kValid, 1, true)), // stale key
		at(120, postRekey(0, kRemotePerm, 1, false)),
	}
	res, err := Run(withRegions(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if res.RemoteRekeys != 1 || res.RekeyStatus[abi.StatusOK] != 1 || res.RekeyStatus[abi.StatusRemoteAuthFailure] != 1 ||
		res.RekeyStatus[abi.StatusRemotePermission] != 1 || res.RekeyKinds[kStaleKey] != 1 {
		t.Errorf("installs %d, REKEYs %s, stale-key REKEYs %d", res.RemoteRekeys, statusSummary(&res.RekeyStatus), res.RekeyKinds[kStaleKey])
	}
	if res.ByStatus[abi.StatusOK] != 2 || res.ByStatus[abi.StatusRemoteAuthFailure] != 2 {
		t.Errorf("completions %s, want OK=2 (REKEY, read) and REMOTE_AUTHENTICATION_FAILURE=2", statusSummary(&res.ByStatus))
	}
	if st := res.Cores[1]; st.RemoteRekeys != 1 || st.Rekeys != 1 {
		t.Errorf("server: RemoteRekeys %d Rekeys %d, want 1 and 1", st.RemoteRekeys, st.Rekeys)
	}
}

// TestRemoteRekeyAckLost: the REKEY's ④ is damaged: the key was installed
// but the initiator reports TIMEOUT (after the server's timeout); a read
// with the new key is OK.
func TestRemoteRekeyAckLost(t *testing.T) {
	c := scripted(2, true)
	c.Strict = false
	c.Faults.KeyDelayNs = 0
	c.MustSee = []abi.Status{abi.StatusTimeout, abi.StatusOK}
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); h != nil && h.Type == wire.TypeAck {
			damage(s, f)
		}
	}
	c.scripts = []scriptStep{
		at(10, postRekey(0, kValid, 1, true)),
		at(100, readRekeyable(0, 1)),
	}
	res, err := Run(withRegions(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if res.RekeyStatus[abi.StatusTimeout] != 1 || res.TimeoutRekeyed != 1 || res.ByStatus[abi.StatusOK] != 1 {
		t.Errorf("REKEYs %s, installed then TIMEOUT %d, completions %s", statusSummary(&res.RekeyStatus), res.TimeoutRekeyed,
			statusSummary(&res.ByStatus))
	}
}

// TestRemoteRekeyLostKey: the REKEY's data (③) is lost: nothing is
// installed, the initiator times out after the server gave up, and a
// read with the old key is still OK.
func TestRemoteRekeyLostKey(t *testing.T) {
	c := scripted(2, true)
	c.Strict = false
	c.MustSee = []abi.Status{abi.StatusTimeout, abi.StatusOK}
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); h != nil && h.Type == wire.TypeWriteData {
			damage(s, f)
		}
	}
	c.scripts = []scriptStep{
		at(10, postRekey(0, kValid, 1, true)),
		at(1500, readRekeyable(0, 1)),
	}
	res, err := Run(withRegions(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if res.RekeyStatus[abi.StatusTimeout] != 1 || res.RemoteRekeys != 0 || res.ByStatus[abi.StatusOK] != 1 {
		t.Errorf("REKEYs %s, installs %d, completions %s", statusSummary(&res.RekeyStatus), res.RemoteRekeys, statusSummary(&res.ByStatus))
	}
	if st := res.Cores[1]; st.Rekeys != 0 || st.PullsExpired != 1 {
		t.Errorf("server: Rekeys %d PullsExpired %d, want 0 and 1", st.Rekeys, st.PullsExpired)
	}
}

// TestRemoteRekeyRacesOwnerRekey: the region's owner rekeys it while a
// REKEY's pull (②) is on its way to the REKEY's initiator, whose key then
// arrives under a key epoch that is no longer the region's: it is not
// installed (REMOTE_REGION, Stats.RekeysSuperseded), and a read with the
// owner's new key is OK (sawInstall would fail the run had it landed).
func TestRemoteRekeyRacesOwnerRekey(t *testing.T) {
	c := scripted(2, true)
	c.Faults.KeyDelayNs = 0
	c.MustSee = []abi.Status{abi.StatusRemoteRegion, abi.StatusOK}
	rekeyed := false
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); h != nil && h.Type == wire.TypePullReq && d.id == 0 && !rekeyed {
			rekeyed = true
			rg := rekeyable(s, 1, true)
			s.nodes[1].app.rekeyRegion(rg.p, rg) // the owner's Rekey, ② in flight
		}
	}
	c.scripts = []scriptStep{
		at(10, postRekey(0, kValid, 1, true)),
		at(200, readRekeyable(0, 1)),
	}
	res, err := Run(withRegions(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if !rekeyed || res.RemoteRekeys != 0 || res.RekeyStatus[abi.StatusRemoteRegion] != 1 || res.ByStatus[abi.StatusOK] != 1 {
		t.Errorf("owner rekeyed %v; installs %d, REKEYs %s, completions %s", rekeyed, res.RemoteRekeys,
			statusSummary(&res.RekeyStatus), statusSummary(&res.ByStatus))
	}
	if st := res.Cores[1]; st.RekeysSuperseded != 1 || st.Rekeys != 1 || st.RemoteRekeys != 0 {
		t.Errorf("server: RekeysSuperseded %d Rekeys %d RemoteRekeys %d, want 1, 1 and 0", st.RekeysSuperseded, st.Rekeys, st.RemoteRekeys)
	}
}
