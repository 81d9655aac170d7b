package engine

import (
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// oneExchange posts cmd from the secPair's reader and runs exactly one
// round trip (request to b, b's answer to a) and returns what completed:
// an answer that needs no timer.
func (p *secPair) oneExchange(t *testing.T, cmd *abi.Command) []abi.Completion {
	t.Helper()
	p.app.post(t, cmd)
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a)
	p.a.Poll(p.now)
	return p.app.completions()
}

// A region whose owner went away (its portal closed, as when the owner's
// process dies, or deregistered) answers a request authenticated with a
// K_d of it REMOTE_REGION, under that K_d, in one round trip: the engine
// keeps the region's key (a tombstone) until the next region at its index
// goes. A request with any other key, for a region whose tombstone has
// been replaced, or for an index never used, still fails authentication:
// nobody without a key of a region learns whether it exists.
func TestGoneRegionAnswersRemoteRegion(t *testing.T) {
	p := newSecPair(t)
	me := ipOf("10.0.0.2")
	read := func(rid abi.RegionID, key aesni.Key, cookie uint64) *abi.Command {
		c := readCmd(p.app.slots[0], me, rid, 0, p.rd, 0, 64, cookie)
		c.Key = key
		return c
	}
	kd := func(kr aesni.Key, op abi.Op) aesni.Key { return aesni.DeriveKey(kr, p.app.ip, testPID, uint8(op)) }
	expect := func(name string, cmd *abi.Command, want abi.Status) {
		t.Helper()
		got := p.oneExchange(t, cmd)
		if len(got) != 1 || got[0].Status != want {
			t.Fatalf("%s: want %v in one round trip, got %+v", name, want, got)
		}
	}
	// The owner's portal closes with the region registered (its process
	// died): the key's holder hears REMOTE_REGION, others do not.
	owner := openApp(t, p.b, abi.ClassLow, 0)
	kr1 := aesni.Key{0x11, 1}
	r1, err := p.b.RegisterRegion(owner.id, make([]byte, 4096), abi.PermRemoteRead|abi.PermRemoteWrite, kr1)
	if err != nil {
		t.Fatal(err)
	}
	expect("live", read(r1, kd(kr1, abi.OpRead), 1), abi.StatusOK)
	before := p.b.Stats()
	if err := p.b.ClosePortal(owner.id); err != nil {
		t.Fatal(err)
	}
	expect("owner gone", read(r1, kd(kr1, abi.OpRead), 2), abi.StatusRemoteRegion)
	w := writeCmd(p.app.slots[0], me, r1, 0, p.rd, 0, 64, 3)
	w.Key = kd(kr1, abi.OpWrite)
	expect("WRITE, owner gone", w, abi.StatusRemoteRegion)
	expect("owner gone, another key", read(r1, kd(aesni.Key{0x99}, abi.OpRead), 4), abi.StatusRemoteAuthFailure)
	expect("owner gone, the K_d of another op", read(r1, kd(kr1, abi.OpWrite), 5), abi.StatusRemoteAuthFailure)
	expect("older generation", read(abi.MakeRegionID(r1.Index(), r1.Gen()-1), kd(kr1, abi.OpRead), 6), abi.StatusRemoteAuthFailure)
	expect("index never used", read(abi.MakeRegionID(200, 1), kd(kr1, abi.OpRead), 7), abi.StatusRemoteAuthFailure)
	s := p.b.Stats()
	if d := s.ReqErrors - before.ReqErrors; d != 2 {
		t.Errorf("ReqErrors rose by %d, want 2 (the READ and the WRITE of the gone region)", d)
	}
	if d := s.ReqAuthFailed - before.ReqAuthFailed; d != 4 {
		t.Errorf("ReqAuthFailed rose by %d, want 4", d)
	}
	if s.PullsIssued != before.PullsIssued || s.ReqServed != before.ReqServed {
		t.Errorf("a request for a gone region was served or pulled: %+v", s)
	}

	// A new region at the same index (the owner restarted): both are
	// answered for what they are.
	owner2 := openApp(t, p.b, abi.ClassLow, 0)
	kr2 := aesni.Key{0x22, 2}
	r2, err := p.b.RegisterRegion(owner2.id, make([]byte, 4096), abi.PermRemoteRead, kr2)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Index() != r1.Index() || r2.Gen() == r1.Gen() {
		t.Fatalf("new region %#x does not reuse index of %#x under a new generation", uint32(r2), uint32(r1))
	}
	for range 2 { // alternating, so each side's cached K_d are tested after the other's
		expect("new region", read(r2, kd(kr2, abi.OpRead), 8), abi.StatusOK)
		expect("old id beside the new region", read(r1, kd(kr1, abi.OpRead), 9), abi.StatusRemoteRegion)
	}

	// A rekey before the end: only the last key's holders hear of it.
	kr3 := aesni.Key{0x33, 3}
	if err := p.b.Rekey(owner2.id, r2, kr3); err != nil {
		t.Fatal(err)
	}
	if err := p.b.DeregisterRegion(owner2.id, r2); err != nil {
		t.Fatal(err)
	}
	expect("deregistered, the key before the rekey", read(r2, kd(kr2, abi.OpRead), 10), abi.StatusRemoteAuthFailure)
	expect("deregistered, the last key", read(r2, kd(kr3, abi.OpRead), 11), abi.StatusRemoteRegion)
	// r1's tombstone was replaced by r2's.
	expect("tombstone replaced", read(r1, kd(kr1, abi.OpRead), 12), abi.StatusRemoteAuthFailure)
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Audit(); err != nil {
		t.Fatal(err)
	}
}
