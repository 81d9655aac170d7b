package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// boundsPair is a victim reader on core a and, on core b, a victim owner
// (tenant 1) with a remote-readable and remote-writable region and an
// attacker owner (tenant 2) with one of its own, whose K_r the attacker
// holds: it derives K_d for any source address.
type boundsPair struct {
	*pair
	app             *testApp
	victim, hostile *testApp
	rv, ra, rd      abi.RegionID
	mem             []byte // the victim's remote region
	krA             aesni.Key
}

func newBoundsPair(t *testing.T, edit func(*Config)) *boundsPair {
	t.Helper()
	ca, cb := pairConfigs(testCrypto)
	cb.Tenants = 4
	edit(&cb)
	p := &boundsPair{pair: newPair(t, ca, cb), krA: aesni.Key{0xa7, 0x7a}}
	p.app = openApp(t, p.a, abi.ClassLow, 16)
	p.victim = openTenantApp(t, p.b, 1, abi.ClassLow, 0)
	p.hostile = openTenantApp(t, p.b, 2, abi.ClassLow, 0)
	p.mem = make([]byte, 64<<10)
	pattern(p.mem, 0x11)
	var err error
	if p.rv, err = p.b.RegisterRegion(p.victim.id, p.mem, abi.PermRemoteRead|abi.PermRemoteWrite, testKr); err != nil {
		t.Fatal(err)
	}
	if p.ra, err = p.b.RegisterRegion(p.hostile.id, make([]byte, 64<<10), abi.PermRemoteRead|abi.PermRemoteWrite, p.krA); err != nil {
		t.Fatal(err)
	}
	if p.rd, err = p.a.RegisterRegion(p.app.id, make([]byte, 16*4096), abi.PermAll, testKr); err != nil {
		t.Fatal(err)
	}
	p.app.post(t, readCmd(p.app.slots[0], ipOf("10.0.0.2"), p.rv, 0, p.rd, 0, 64, 0)) // resolves b's MAC
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("warm-up read: %+v", got)
	}
	return p
}

// attack is a request of type typ for the attacker's region from source
// (and IV) address 10.0.9.src, lane 0, with a K_d the attacker derived.
func (p *boundsPair) attack(typ wire.Type, src byte, ctr uint64) []byte {
	addr := [4]byte{10, 0, 9, src}
	op := abi.OpRead
	if typ == wire.TypeWriteReq {
		op = abi.OpWrite
	}
	return forgedRequest(p.b, typ, addr, addr, ctr, p.ra, aesni.DeriveKey(p.krA, addr, testPID, uint8(op)), 4096, ctr)
}

// post posts the victim's ops on slots from, from+1, ... and returns
// their request frames, undelivered.
func (p *boundsPair) post(t *testing.T, from int, cmds ...*abi.Command) [][]byte {
	t.Helper()
	for _, c := range cmds {
		p.app.post(t, c)
	}
	p.a.Poll(p.now)
	fr := p.ta.take()
	if len(fr) != len(cmds) {
		t.Fatalf("%d requests sent, want %d", len(fr), len(cmds))
	}
	return fr
}

// answers hands frames to b without serving and counts b's answers: the
// NACKs it sends at once.
func (p *boundsPair) answers(frames ...[]byte) int {
	for _, f := range frames {
		p.b.Receive(p.now, f)
	}
	return len(p.tb.take())
}

// An owner's requests beyond InboundPerOwner are NACKed at once, whatever
// their source addresses; the class queue keeps the rest of its
// threshold for other owners' readers, who are NACKed by nothing the
// attacker queued.
func TestInboundPerOwner(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) { c.NackThreshold, c.InboundPerOwner, c.InboundPerSender = 12, 6, 6 })
	var flood [][]byte
	for i := range 10 {
		flood = append(flood, p.attack(wire.TypeReadReq, byte(i), 1))
	}
	if n := p.answers(flood...); n != 4 {
		t.Fatalf("flood of 10 from 10 addresses: %d answers at once, want 4 NACKs", n)
	}
	s, ta := p.b.Stats(), p.b.TenantCounters(2)
	if s.ReqNacked != 4 || s.ReqNackedOwner != 4 || s.ReqNackedSender != 0 || ta.NackedOwner != 4 || ta.Nacked != 0 {
		t.Fatalf("after the flood: %+v; attacker's owner %+v", s, ta)
	}
	// The victim's reader: 6 reads queue beside the attacker's 6, up to
	// the class queue's threshold.
	var cmds []*abi.Command
	for k := 1; k <= 6; k++ {
		cmds = append(cmds, readCmd(p.app.slots[k], ipOf("10.0.0.2"), p.rv, uint64(k)*64, p.rd, uint64(k)*4096, 64, uint64(k)))
	}
	if n := p.answers(p.post(t, 1, cmds...)...); n != 0 {
		t.Fatalf("the victim's 6 reads: %d answers at once, want none (queued)", n)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.run()
	got := p.app.completions()
	if len(got) != 6 {
		t.Fatalf("%d completions, want 6", len(got))
	}
	for _, c := range got {
		if c.Status != abi.StatusOK {
			t.Fatalf("the victim's read: %+v", c)
		}
	}
	if tv := p.b.TenantCounters(1); tv != (TenantCounters{WindowShare: tv.WindowShare}) {
		t.Fatalf("victim owner's counters %+v, want none", tv)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	if p.b.srv.bounds.owners[2] != (use{}) || len(p.b.srv.bounds.senders.free) != len(p.b.srv.bounds.senders.e) {
		t.Fatalf("after serving: attacker owner holds %+v, %d senders in use", p.b.srv.bounds.owners[2], len(p.b.srv.bounds.senders.e)-len(p.b.srv.bounds.senders.free))
	}
}

// One sender's requests for one owner's regions beyond InboundPerSender
// are NACKed at once (counted for that owner); its requests for another
// owner's regions are counted apart, as another sender's are, and
// queued. When the table of senders is full, the senders beyond it share
// one bucket, bounded as one sender.
func TestInboundPerSender(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) { c.NackThreshold, c.InboundPerOwner, c.InboundPerSender = 40, 40, 3 })
	kdV := aesni.DeriveKey(testKr, [4]byte{10, 0, 9, 1}, testPID, uint8(abi.OpRead))
	one := [4]byte{10, 0, 9, 1}
	frames := [][]byte{
		p.attack(wire.TypeReadReq, 1, 1), p.attack(wire.TypeReadReq, 1, 2), p.attack(wire.TypeReadReq, 1, 3),
		p.attack(wire.TypeReadReq, 1, 4),                                    // the attacker owner's 4th from one: NACKed
		forgedRequest(p.b, wire.TypeReadReq, one, one, 3, p.rv, kdV, 64, 3), // the victim owner's region: counted apart
		forgedRequest(p.b, wire.TypeReadReq, one, one, 4, p.rv, kdV, 64, 4),
		forgedRequest(p.b, wire.TypeReadReq, one, one, 5, p.rv, kdV, 64, 5),
		forgedRequest(p.b, wire.TypeReadReq, one, one, 6, p.rv, kdV, 64, 6), // its 4th: NACKed
		p.attack(wire.TypeReadReq, 2, 1),                                    // another sender
	}
	if n := p.answers(frames...); n != 2 {
		t.Fatalf("%d answers at once, want 2 NACKs", n)
	}
	s := p.b.Stats()
	if s.ReqNackedSender != 2 || s.ReqNackedOwner != 0 || p.b.TenantCounters(1).NackedSender != 1 || p.b.TenantCounters(2).NackedSender != 1 {
		t.Fatalf("%+v; per owner %+v, %+v", s, p.b.TenantCounters(1), p.b.TenantCounters(2))
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.b.Poll(p.now)
	p.tb.take()

	// A table of two senders: the other six share a bucket bounded at 3
	// requests.
	p.b.srv.bounds.senders = newSenderTable(2, 99)
	frames = frames[:0]
	for src := byte(10); src < 18; src++ {
		frames = append(frames, p.attack(wire.TypeReadReq, src, 10))
	}
	frames = append(frames, p.attack(wire.TypeReadReq, 10, 11)) // a sender with an entry: its own bound
	if n := p.answers(frames...); n != 3 {
		t.Fatalf("%d answers at once, want 3 NACKs (the bucket's 4th to 6th)", n)
	}
	if s := p.b.Stats(); s.SenderOverflow != 3 || s.ReqNackedSender != 5 {
		t.Fatalf("overflow %d, sender NACKs %d; want 3, 5", s.SenderOverflow, s.ReqNackedSender)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.b.Poll(p.now)
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	if o := p.b.srv.bounds.senders.over; o != (use{}) {
		t.Fatalf("the bucket holds %+v once everything is served", o)
	}
}

// An owner's WRITEs beyond PullsPerOwner wait in the pull queue (their
// pulls answered by no one: an attacker's slow pulls) while another
// owner's writes behind them are pulled and commit at once; when the
// attacker's idle pulls pass PullIdleTimeout, its own waiting writes
// reclaim them, never the victim's.
func TestPullsPerOwner(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) { c.PullContexts, c.PullsPerOwner, c.PullsPerSender = 8, 4, 8 })
	var flood [][]byte
	for i := range 7 {
		flood = append(flood, p.attack(wire.TypeWriteReq, byte(i), 1))
	}
	if n := p.answers(flood...); n != 0 {
		t.Fatalf("%d answers at once", n)
	}
	p.b.Poll(p.now)
	if pulls := p.tb.take(); len(pulls) != 4 {
		t.Fatalf("%d pulls for the attacker's 7 writes, want 4", len(pulls))
	}
	s := p.b.Stats()
	if s.PullsIssued != 4 || s.PullsDeferredOwner != 3 || p.b.TenantCounters(2).PullsDeferred != 3 {
		t.Fatalf("%+v", s)
	}
	src := make([]byte, 4096)
	pattern(src, 0x77)
	rs, _ := p.a.RegisterRegion(p.app.id, src, abi.PermAll, testKr)
	for k := 1; k <= 4; k++ {
		p.app.post(t, writeCmd(p.app.slots[k], ipOf("10.0.0.2"), p.rv, uint64(k)*4096, rs, 0, 4096, uint64(k)))
	}
	p.run()
	got := p.app.completions()
	if len(got) != 4 {
		t.Fatalf("%d completions, want 4", len(got))
	}
	for _, c := range got {
		if c.Status != abi.StatusOK {
			t.Fatalf("the victim's write: %+v", c)
		}
	}
	for k := 1; k <= 4; k++ {
		if string(p.mem[k*4096:(k+1)*4096]) != string(src) {
			t.Fatalf("write %d not committed", k)
		}
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	if s := p.b.Stats(); s.PullsIssued != 8 || s.PullsInUse != 4 || p.b.TenantCounters(1).PullsDeferred != 0 {
		t.Fatalf("after the victim's writes: %+v", s)
	}
	// Past the idle timeout the attacker's waiting writes reclaim its own
	// idle pulls, one for one.
	p.now += int64(p.b.cfg.Timeout/4) + 1000
	p.b.Poll(p.now)
	if pulls := p.tb.take(); len(pulls) != 3 {
		t.Fatalf("%d pulls after the idle timeout, want 3", len(pulls))
	}
	if s := p.b.Stats(); s.PullsExpired != 3 || s.PullsIssued != 11 || s.PullsInUse != 4 {
		t.Fatalf("after the idle timeout: %+v", s)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.now += int64(p.b.cfg.Timeout) * 2
	p.b.Poll(p.now)
	p.b.Poll(p.now)
	if s := p.b.Stats(); s.PullsInUse != 0 || s.WindowInUse != 0 {
		t.Fatalf("at the end: %+v", s)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// One sender's WRITEs to one owner's regions beyond PullsPerSender wait
// while another sender's are pulled; its WRITEs to another owner's
// regions are counted apart, and pulled.
func TestPullsPerSender(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) { c.PullContexts, c.PullsPerOwner, c.PullsPerSender = 8, 8, 1 })
	one := [4]byte{10, 0, 9, 1}
	kdV := aesni.DeriveKey(testKr, one, testPID, uint8(abi.OpWrite))
	frames := [][]byte{
		p.attack(wire.TypeWriteReq, 1, 1),
		p.attack(wire.TypeWriteReq, 1, 2),                                      // the attacker owner's 2nd from one: waits
		forgedRequest(p.b, wire.TypeWriteReq, one, one, 2, p.rv, kdV, 4096, 2), // the victim owner's region: counted apart
		p.attack(wire.TypeWriteReq, 2, 1),                                      // another sender
	}
	p.answers(frames...)
	p.b.Poll(p.now)
	if pulls := p.tb.take(); len(pulls) != 3 {
		t.Fatalf("%d pulls, want 3 (one per sender and owner)", len(pulls))
	}
	if s := p.b.Stats(); s.PullsDeferredSender != 1 || s.PullsDeferredOwner != 0 || p.b.TenantCounters(2).PullsDeferred != 1 || p.b.TenantCounters(1).PullsDeferred != 0 {
		t.Fatalf("%+v", s)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.b.Shutdown(p.now)
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// An owner holding K_r derives K_d for any source address, the address
// of another owner's reader too: requests it forges for its own region
// from that reader's address fill only its own part of that sender's
// bounds. The reader's requests for the other owner's regions, from the
// same address, are queued and pulled as if the forger were not there,
// neither NACKed nor deferred.
func TestSenderBoundsPerOwner(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) {
		c.NackThreshold, c.InboundPerOwner, c.InboundPerSender = 40, 20, 6
		c.PullContexts, c.PullsPerOwner, c.PullsPerSender = 8, 8, 2
	})
	a := [4]byte{10, 0, 0, 1} // core a: the victim owner's reader
	kdR := aesni.DeriveKey(p.krA, a, testPID, uint8(abi.OpRead))
	kdW := aesni.DeriveKey(p.krA, a, testPID, uint8(abi.OpWrite))
	var flood [][]byte
	for i := range 8 {
		flood = append(flood, forgedRequest(p.b, wire.TypeReadReq, a, a, uint64(1000+i), p.ra, kdR, 4096, uint64(1000+i)))
	}
	if n := p.answers(flood...); n != 2 {
		t.Fatalf("8 requests forged from the reader's address: %d answers at once, want 2 NACKs", n)
	}
	if ta := p.b.TenantCounters(2); ta.NackedSender != 2 {
		t.Fatalf("the forger's owner: %+v, want 2 NackedSender", ta)
	}
	var cmds []*abi.Command
	for k := 1; k <= 6; k++ {
		cmds = append(cmds, readCmd(p.app.slots[k], ipOf("10.0.0.2"), p.rv, uint64(k)*64, p.rd, uint64(k)*4096, 64, uint64(k)))
	}
	if n := p.answers(p.post(t, 1, cmds...)...); n != 0 {
		t.Fatalf("the reader's 6 reads beside the forged ones: %d answers at once, want none (queued)", n)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
	p.run()
	got := p.app.completions()
	if len(got) != 6 {
		t.Fatalf("%d completions, want 6", len(got))
	}
	for _, c := range got {
		if c.Status != abi.StatusOK {
			t.Fatalf("the reader's read: %+v", c)
		}
	}

	// Writes forged from the reader's address hold their pulls (a does
	// not know them: never answered); the reader's writes are pulled at
	// once.
	flood = flood[:0]
	for i := range 4 {
		flood = append(flood, forgedRequest(p.b, wire.TypeWriteReq, a, a, uint64(2000+i), p.ra, kdW, 4096, uint64(2000+i)))
	}
	if n := p.answers(flood...); n != 0 {
		t.Fatalf("4 writes forged from the reader's address: %d answers at once", n)
	}
	p.b.Poll(p.now)
	if pulls := p.tb.take(); len(pulls) != 2 {
		t.Fatalf("%d pulls for the forged writes, want 2 (their sender's bound)", len(pulls))
	}
	src := make([]byte, 4096)
	pattern(src, 0x5a)
	rs, _ := p.a.RegisterRegion(p.app.id, src, abi.PermAll, testKr)
	for k := 1; k <= 2; k++ {
		p.app.post(t, writeCmd(p.app.slots[k], ipOf("10.0.0.2"), p.rv, uint64(k)*4096, rs, 0, 4096, uint64(10+k)))
	}
	p.run()
	got = p.app.completions()
	if len(got) != 2 {
		t.Fatalf("%d completions of the reader's writes, want 2", len(got))
	}
	for _, c := range got {
		if c.Status != abi.StatusOK {
			t.Fatalf("the reader's write: %+v", c)
		}
	}
	for k := 1; k <= 2; k++ {
		if string(p.mem[k*4096:(k+1)*4096]) != string(src) {
			t.Fatalf("the reader's write %d not committed", k)
		}
	}
	if tv := p.b.TenantCounters(1); tv.Nacked != 0 || tv.NackedOwner != 0 || tv.NackedSender != 0 || tv.PullsDeferred != 0 {
		t.Fatalf("the reader's owner refused or deferred: %+v (the forger's %+v)", tv, p.b.TenantCounters(2))
	}
	if ta := p.b.TenantCounters(2); ta.PullsDeferred != 2 {
		t.Fatalf("the forger's owner: %+v, want 2 PullsDeferred", ta)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

// The bounds a Config leaves 0 are derived from the totals: half of the
// NACK threshold and half of the pulls a core runs at once.
func TestServingBoundsDefaults(t *testing.T) {
	cfg := DefaultConfig()
	b := cfg.ServingBounds()
	want := ServingBounds{InboundPerOwner: 384, InboundPerSender: 384, PullsPerOwner: 32, PullsPerSender: 32, ReplayLanesPerSender: wire.MaxCores, ReplayPerOwner: 4}
	if b != want {
		t.Fatalf("defaults %+v, want %+v", b, want)
	}
	cfg.NackThreshold, cfg.PullContexts, cfg.WindowBytes = 1, 1, ArbitrationBytes
	if b := cfg.ServingBounds(); b.InboundPerOwner != 1 || b.PullsPerSender != 1 {
		t.Fatalf("small totals: %+v, want bounds of 1", b)
	}
	cfg.InboundPerSender, cfg.ReplayLanesPerSender = 7, 16
	if b := cfg.ServingBounds(); b.InboundPerSender != 7 || b.ReplayLanesPerSender != 16 {
		t.Fatalf("set: %+v", b)
	}
	for _, f := range []struct {
		name string
		set  func(c *Config)
	}{
		{"InboundPerOwner", func(c *Config) { c.InboundPerOwner = -1 }},
		{"InboundPerSender", func(c *Config) { c.InboundPerSender = Unbounded + 1 }},
		{"PullsPerOwner", func(c *Config) { c.PullsPerOwner = -1 }},
		{"PullsPerSender", func(c *Config) { c.PullsPerSender = Unbounded + 1 }},
		{"ReplayLanesPerSender", func(c *Config) { c.ReplayLanesPerSender = wire.MaxCores + 1 }},
	} {
		c := testConfig("10.0.0.1", 1)
		f.set(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), f.name) {
			t.Errorf("%s: %v, want ErrConfig naming it", f.name, err)
		}
	}
}

// The bounds cost the data path no allocation: requests NACKed at their
// owner's bound, and a Poll whose pull queue holds writes blocked by
// theirs.
func TestBoundsAllocFree(t *testing.T) {
	p := newBoundsPair(t, func(c *Config) { c.InboundPerOwner, c.PullContexts, c.PullsPerOwner = 6, 8, 2 })
	var frames [][]byte
	for i := range 8 { // the owner's bounds full: 2 writes pulled, 6 waiting
		p.answers(p.attack(wire.TypeWriteReq, byte(i%4), uint64(1+i)))
		if i == 1 {
			p.b.Poll(p.now)
		}
	}
	p.b.Poll(p.now)
	p.tb.take()
	for i := range 400 {
		frames = append(frames, p.attack(wire.TypeReadReq, byte(i%4), uint64(100+i)))
	}
	k := 0
	allocs := testing.AllocsPerRun(300, func() {
		p.b.Receive(p.now, frames[k])
		k++
		p.b.Poll(p.now)
		p.tb.free = append(p.tb.free, p.tb.q...) // drop the NACKs unread
		p.tb.q, p.tb.qlen = p.tb.q[:0], p.tb.qlen[:0]
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per NACKed request and Poll", allocs)
	}
	if s := p.b.Stats(); s.ReqNackedOwner < 300 || s.PullsInUse != 2 {
		t.Fatalf("%+v", s)
	}
	if err := p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}
