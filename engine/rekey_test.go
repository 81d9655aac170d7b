package engine

import (
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// The rekey race (pull.go): a remote REKEY installs only under the key its
// request authenticated with, so a REKEY holder's key never lands after
// the owner's revoking Rekey, however its frames are delayed.

var (
	heldKr  = aesni.Key{0x48, 0x4c, 0x44, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13} // the REKEY holder's new key
	ownerKr = aesni.Key{0x4f, 0x57, 0x4e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13} // the owner's revoking key
)

// newRekeyPair is a secPair whose served region takes remote REKEYs, with
// heldKr staged at offset 4096 of the initiator's region.
func newRekeyPair(t *testing.T) *secPair {
	t.Helper()
	p := newSecPair(t)
	editRegion(p.b, p.rs, func(r *region) { r.perm |= abi.PermRemoteRekey })
	copy(p.dst[4096:], heldKr[:])
	return p
}

// keysAfterRace checks which region key the serving engine holds: reads
// with K_d of want succeed, with K_d of each of stale fail authentication.
func (p *secPair) keysAfterRace(t *testing.T, want aesni.Key, stale ...aesni.Key) {
	t.Helper()
	readKd := func(kr aesni.Key) aesni.Key { return aesni.DeriveKey(kr, p.app.ip, testPID, uint8(abi.OpRead)) }
	p.readKey(t, 1, 64, readKd(want), abi.StatusOK)
	for _, kr := range stale {
		p.readKey(t, 1, 64, readKd(kr), abi.StatusRemoteAuthFailure)
	}
}

// auditRace checks both engines and that nothing of the REKEYs is held.
func (p *secPair) auditRace(t *testing.T) {
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

// TestRekeyRaceOwnerAfterPull: the owner rekeys after the serving engine
// pulled a remote REKEY and before its key arrives (the pull ② held back
// meanwhile). The pulled key is not installed: the REKEY ends
// REMOTE_REGION, reads under the owner's key succeed, and the REKEY
// holder's key opens nothing.
func TestRekeyRaceOwnerAfterPull(t *testing.T) {
	p := newRekeyPair(t)
	p.app.post(t, p.rekeyCmd(3, 4096, aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRekey))))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b) // ①
	p.b.Poll(p.now)
	pull := p.tb.take() // ②, held back
	if len(pull) != 1 || frameType(pull[0]) != wire.TypePullReq {
		t.Fatalf("want a pull, got %d frames", len(pull))
	}
	if err := p.b.Rekey(p.srv.id, p.rs, ownerKr); err != nil {
		t.Fatal(err)
	}
	p.a.Receive(p.now, pull[0]) // ② at last: a sends the key ③
	p.a.Poll(p.now)
	if n := p.ta.deliverTo(p.now, p.b); n != 1 {
		t.Fatalf("want the key frame, got %d frames", n)
	}
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a)
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteRegion || got[0].Op != abi.OpRekey {
		t.Fatalf("REKEY raced by its owner's Rekey: %+v", got)
	}
	p.keysAfterRace(t, ownerKr, heldKr, testKr)
	if s := p.b.Stats(); s.RekeysSuperseded != 1 || s.RemoteRekeys != 0 || s.Rekeys != 1 || s.PullsIssued != 1 {
		t.Fatalf("superseded %d, remote rekeys %d, rekeys %d, pulls %d", s.RekeysSuperseded, s.RemoteRekeys, s.Rekeys, s.PullsIssued)
	}
	p.auditRace(t)
}

// TestRekeyRaceOwnerBeforePull: the owner rekeys while a remote REKEY it
// authenticated waits to be pulled. It is answered REMOTE_REGION instead
// of being pulled (curried with its request's IV, so its initiator takes
// the answer), and the owner's key stays.
func TestRekeyRaceOwnerBeforePull(t *testing.T) {
	p := newRekeyPair(t)
	p.app.post(t, p.rekeyCmd(3, 4096, aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRekey))))
	p.a.Poll(p.now)
	for _, fr := range p.ta.take() {
		p.b.Receive(p.now, fr) // ① authenticated and queued; served at b's next Poll
	}
	if err := p.b.Rekey(p.srv.id, p.rs, ownerKr); err != nil {
		t.Fatal(err)
	}
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteRegion {
		t.Fatalf("queued REKEY after its owner's Rekey: %+v", got)
	}
	p.keysAfterRace(t, ownerKr, heldKr, testKr)
	if s := p.b.Stats(); s.RekeysSuperseded != 1 || s.RemoteRekeys != 0 || s.PullsIssued != 0 {
		t.Fatalf("superseded %d, remote rekeys %d, pulls %d", s.RekeysSuperseded, s.RemoteRekeys, s.PullsIssued)
	}
	p.auditRace(t)
}

// TestRekeyRaceTwoRemote: two remote REKEYs asked under the same key, both
// pulled before either key arrives. The first key to arrive is installed;
// the other REKEY was asked under the key it replaced and ends
// REMOTE_REGION, its key never installed.
func TestRekeyRaceTwoRemote(t *testing.T) {
	p := newRekeyPair(t)
	otherKr := aesni.Key{0x32, 0x4e, 0x44, 9}
	copy(p.dst[4096+aesni.KeySize:], otherKr[:])
	kd := aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRekey))
	p.app.post(t, p.rekeyCmd(3, 4096, kd))
	second := p.rekeyCmd(4, 4096+aesni.KeySize, kd)
	second.Cookie = 10
	p.app.post(t, second)
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b) // both ①
	p.b.Poll(p.now)
	if pulls := p.b.Stats().PullsInUse; pulls != 2 {
		t.Fatalf("want both REKEYs pulled, %d pulls", pulls)
	}
	p.run()
	got := p.app.completions()
	if len(got) != 2 || got[0].Status == got[1].Status {
		t.Fatalf("two REKEYs under one key: %+v", got)
	}
	won, lost := heldKr, otherKr
	for _, c := range got {
		if c.Status != abi.StatusOK && c.Status != abi.StatusRemoteRegion {
			t.Fatalf("two REKEYs under one key: %+v", got)
		}
		if (c.Status == abi.StatusOK) == (c.Cookie == 10) {
			won, lost = otherKr, heldKr
		}
	}
	p.keysAfterRace(t, won, lost, testKr)
	if s := p.b.Stats(); s.RekeysSuperseded != 1 || s.RemoteRekeys != 1 || s.Rekeys != 1 {
		t.Fatalf("superseded %d, remote rekeys %d, rekeys %d", s.RekeysSuperseded, s.RemoteRekeys, s.Rekeys)
	}
	p.auditRace(t)
}

// TestSetKeyEpoch: the region table installs a remote rekey only under
// the epoch it was asked under, and an owner's rekey (want 0) always.
func TestSetKeyEpoch(t *testing.T) {
	tb := newRegionTable(4)
	rid, r0, err := tb.add(ownerOf(0, 1), 0, make([]byte, 64), abi.PermAll, testKr, nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, how := tb.setKey(rid, heldKr, r0.epoch)
	if how != keyInstalled || r1.epoch == r0.epoch || r1.kr != heldKr || tb.lookup(rid) != r1 {
		t.Fatalf("rekey under the live epoch: %v", how)
	}
	if _, how := tb.setKey(rid, ownerKr, r0.epoch); how != keySuperseded || tb.lookup(rid) != r1 {
		t.Fatalf("rekey under a replaced epoch: %v", how)
	}
	r2, how := tb.setKey(rid, ownerKr, 0)
	if how != keyInstalled || r2.kr != ownerKr || r2.epoch == r1.epoch {
		t.Fatalf("owner's rekey: %v", how)
	}
	tb.remove(rid.Index())
	if _, how := tb.setKey(rid, heldKr, r2.epoch); how != keyGone {
		t.Fatalf("rekey of a removed region: %v", how)
	}
	if _, how := tb.setKey(rid, heldKr, 0); how != keyGone {
		t.Fatalf("owner's rekey of a removed region: %v", how)
	}
}

// TestRekeyLatencyAsWrite: a remote REKEY takes a WRITE's four hops and
// nothing more. On the same pair, in virtual time (both cores polled and
// every frame delivered once per step), a REKEY completes in as many
// steps, with the same issue and total delay, as a 16-byte WRITE to the
// same region, and once more after the key it installed.
func TestRekeyLatencyAsWrite(t *testing.T) {
	p := newRekeyPair(t)
	editRegion(p.b, p.rs, func(r *region) { r.perm |= abi.PermRemoteWrite })
	kd := func(kr aesni.Key, op abi.Op) aesni.Key { return aesni.DeriveKey(kr, p.app.ip, testPID, uint8(op)) }
	// op posts cmd and steps until its completion: the completion and the
	// steps it took.
	op := func(cmd *abi.Command) (abi.Completion, int) {
		t.Helper()
		p.app.post(t, cmd)
		for steps := 1; steps <= 20; steps++ {
			p.a.Poll(p.now)
			p.b.Poll(p.now)
			p.ta.deliverTo(p.now, p.b)
			p.tb.deliverTo(p.now, p.a)
			p.now += 1000
			if got := p.app.completions(); len(got) > 0 {
				if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Op != cmd.Op {
					t.Fatalf("%v: %+v", cmd.Op, got)
				}
				return got[0], steps
			}
		}
		t.Fatalf("%v: no completion in 20 steps", cmd.Op)
		return abi.Completion{}, 0
	}
	write := func(kr aesni.Key) *abi.Command {
		c := writeCmd(p.app.slots[2], ipOf("10.0.0.2"), p.rs, 64, p.rd, 0, aesni.KeySize, 1)
		c.Key = kd(kr, abi.OpWrite)
		return c
	}
	otherKr := aesni.Key{0x4f, 0x54, 0x48, 9}
	copy(p.dst[4096+aesni.KeySize:], otherKr[:])
	for _, tc := range []struct {
		name   string
		kr, to aesni.Key // the region's key before, and the REKEY's
		off    uint64
	}{
		{"first", testKr, heldKr, 4096},
		{"again", heldKr, otherKr, 4096 + aesni.KeySize},
	} {
		w, ws := op(write(tc.kr))
		r, rs := op(p.rekeyCmd(3, tc.off, kd(tc.kr, abi.OpRekey)))
		if rs != ws || r.TotalDelayNs != w.TotalDelayNs || r.IssueDelayNs != w.IssueDelayNs {
			t.Fatalf("%s: REKEY %d steps (issue %d ns, total %d ns), WRITE %d steps (issue %d ns, total %d ns)",
				tc.name, rs, r.IssueDelayNs, r.TotalDelayNs, ws, w.IssueDelayNs, w.TotalDelayNs)
		}
		if _, after := op(write(tc.to)); after != ws {
			t.Fatalf("%s: a WRITE under the new key took %d steps, before it %d", tc.name, after, ws)
		}
	}
	if s := p.b.Stats(); s.RemoteRekeys != 2 || s.PullsIssued != 6 {
		t.Fatalf("remote rekeys %d, pulls %d", s.RemoteRekeys, s.PullsIssued)
	}
	p.auditRace(t)
}
