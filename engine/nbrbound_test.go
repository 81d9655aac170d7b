package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// openAppOfTenant is openApp for a portal of tenant.
func openAppOfTenant(t testing.TB, c *Core, tenant, slots int) *testApp {
	t.Helper()
	const cmdCap, cplCap = 256, 512
	cmdMem := aligned(abi.RingBytes(cmdCap, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(cplCap, abi.CompletionSize))
	id, err := c.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: cmdCap, CplRing: cplMem, CplCap: cplCap,
		Class: abi.ClassLow, MaxSlots: slots, PID: testPID, Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	a := &testApp{id: id, ip: c.out.ipb}
	a.cmd, _ = abi.NewProducer(cmdMem, cmdCap, abi.CommandSize)
	a.cpl, _ = abi.NewConsumer(cplMem, cplCap, abi.CompletionSize)
	if a.slots, err = c.AllocSlots(id, slots); err != nil {
		t.Fatal(err)
	}
	return a
}

// arpConfig is a test core with the engine's default ARP timers and
// bounds (testConfig shortens the timers), room for a full neighbor
// table's worth of ops, and tenants.
func arpConfig() Config {
	d := DefaultConfig()
	cfg := testConfig("10.0.0.1", 1)
	cfg.Slots, cfg.Tenants = 512, 4
	cfg.ResolveTimeout, cfg.ARPRetry = d.ResolveTimeout, d.ARPRetry
	cfg.NeighborTable, cfg.NeighborsPerTenant = d.NeighborTable, d.NeighborsPerTenant
	cfg.ARPRate, cfg.ARPBurst = d.ARPRate, d.ARPBurst
	return cfg
}

// nbrAttack is the neighbor-table attack of SECURITY.md on a core of
// cfg: tenant 0 keeps posting READs to 128 unused on-link addresses
// (10.0.1.0-127, nobody answers their ARP) in turn, as fast as its slots
// allow, for dur; meanwhile tenant 1 posts a READ to a new neighbor (10.0.2.k,
// which answers ARP at once; nothing answers the request, so the op ends
// TIMEOUT once it is sent) every 10 ms. It returns the victim's
// completions in order, the times (ns) of the ARP requests the core
// broadcast, and the core; every step it checks the table's bound on
// the attacker's incomplete entries.
func nbrAttack(t *testing.T, cfg Config, dur time.Duration) (victim []abi.Completion, arps []int64, c *Core) {
	t.Helper()
	tx := newTestTx(1024)
	c = newCore(t, cfg, tx)
	hostile := openAppOfTenant(t, c, 0, 256)
	good := openAppOfTenant(t, c, 1, 4)
	rh, _ := c.RegisterRegion(hostile.id, make([]byte, 4096), abi.PermAll, testKr)
	rg, _ := c.RegisterRegion(good.id, make([]byte, 4096), abi.PermAll, testKr)
	free := append([]abi.SlotID(nil), hostile.slots...)
	next := 0 // the attacker's next address: 10.0.1.next
	k := 0    // the victim's last neighbor: 10.0.2.k
	const step = 100_000
	end := int64(dur)
	for now := int64(step); now <= end; now += step {
		for n := 0; n < 16 && len(free) > 0; n++ {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			hostile.post(t, readCmd(s, ipOf("10.0.1.0")+uint32(next), rh, 0, rh, 0, 64, uint64(s)))
			next = (next + 1) % 128
		}
		if now%int64(10*time.Millisecond) == 0 && k < 250 {
			k++
			good.post(t, readCmd(good.slots[0], ipOf("10.0.2.0")+uint32(k), rg, 0, rg, 0, 64, uint64(k)))
		}
		c.Poll(now)
		for _, f := range tx.take() {
			var m wire.ARP
			if wire.EtherType(f) != wire.EtherTypeARP || wire.DecodeARP(f, &m) != nil || m.Op != wire.ARPRequest {
				continue
			}
			arps = append(arps, now)
			if m.TargetIP>>8 == ipOf("10.0.2.0")>>8 { // a victim's neighbor: it answers
				mac := wire.MAC{2, 0, 0, 0, 2, byte(m.TargetIP)}
				r := wire.ARP{Op: wire.ARPReply, SenderMAC: mac, SenderIP: m.TargetIP, TargetMAC: c.out.mac, TargetIP: c.out.ip, EthDst: c.out.mac, EthSrc: mac}
				b := make([]byte, wire.MinFrame)
				wire.EncodeARP(b, &r)
				c.Receive(now, b)
			}
		}
		c.Poll(now)
		tx.take() // the victim's requests: nobody answers them
		for _, cp := range hostile.completions() {
			free = append(free, cp.Slot)
		}
		victim = append(victim, good.completions()...)
		if ch := c.nbr.charged[0]; ch > int32(cfg.NeighborsPerTenant) {
			t.Fatalf("at %v the attacker holds %d incomplete entries (bound %d)", time.Duration(now), ch, cfg.NeighborsPerTenant)
		}
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
	return victim, arps, c
}

// A tenant cycling through 128 unused on-link addresses holds at most
// NeighborsPerTenant incomplete entries; its other ops end UNREACHABLE
// at once, counted as its own. Another tenant's ops to new neighbors
// resolve at once, and the engine's ARP requests stay within ARPRate and
// ARPBurst (without the bound the attacker's retries alone would be
// 128 addresses every ARPRetry: 25,600 a second).
func TestNeighborTableBoundedPerTenant(t *testing.T) {
	cfg := arpConfig()
	const dur = time.Second
	victim, arps, c := nbrAttack(t, cfg, dur)
	if len(victim) < 90 {
		t.Fatalf("the victim's ops completed: %d", len(victim))
	}
	for _, v := range victim {
		// Resolved at once (its first ARP request was not deferred), sent
		// and unanswered: TIMEOUT after Timeout in service.
		if v.Status != abi.StatusTimeout || v.IssueDelayNs > 200_000 {
			t.Fatalf("victim op %d: %v after %d ns issue delay (want TIMEOUT, sent at once)", v.Cookie, v.Status, v.IssueDelayNs)
		}
	}
	hs, vs, st := c.TenantCounters(0), c.TenantCounters(1), c.Stats()
	if hs.NeighborRefused == 0 || vs.NeighborRefused != 0 || st.NeighborRefused != hs.NeighborRefused || st.NeighborTableFull != 0 {
		t.Fatalf("refused: attacker %d, victim %d, engine %d, table full %d", hs.NeighborRefused, vs.NeighborRefused, st.NeighborRefused, st.NeighborTableFull)
	}
	if st.ARPRateLimited == 0 {
		t.Fatal("the attack never reached the ARP rate bound")
	}
	// Within the bucket: at most ARPBurst + ARPRate × w in any window w.
	for _, w := range []int64{int64(10 * time.Millisecond), int64(100 * time.Millisecond), int64(dur)} {
		max := int64(cfg.ARPBurst) + int64(cfg.ARPRate)*w/1e9
		for i, j := 0, 0; i < len(arps); i++ {
			for j < len(arps) && arps[j] < arps[i]+w {
				j++
			}
			if n := int64(j - i); n > max {
				t.Fatalf("%d ARP requests within %v from %v (bound %d)", n, time.Duration(w), time.Duration(arps[i]), max)
			}
		}
	}
	t.Logf("victim ops %d, all sent at once; attacker refused %d; ARP requests %d in %v, %d deferred", len(victim), hs.NeighborRefused, len(arps), dur, st.ARPRateLimited)
}

// Without the per-tenant bound (NeighborsPerTenant = NeighborTable/2)
// and the rate bound, the same attack fills the table: the victim's ops
// to new neighbors end UNREACHABLE at once. (What the bounds prevent.)
func TestNeighborTableUnboundedAttackWorks(t *testing.T) {
	cfg := arpConfig()
	cfg.NeighborsPerTenant = cfg.NeighborTable / 2
	cfg.ARPRate, cfg.ARPBurst = maxARPRate, maxARPBurst
	victim, arps, c := nbrAttack(t, cfg, 200*time.Millisecond)
	refused := 0
	for _, v := range victim {
		if v.Status == abi.StatusUnreachable && v.TotalDelayNs == 0 {
			refused++
		}
	}
	if refused < len(victim)/2 || c.Stats().NeighborTableFull == 0 {
		t.Fatalf("the attack did not fill the table: %d of %d victim ops refused, table full %d", refused, len(victim), c.Stats().NeighborTableFull)
	}
	if perSec := int64(len(arps)) * 5; perSec < 20_000 {
		t.Fatalf("unbounded ARP: %d requests a second", perSec)
	}
}

// Only an on-link destination's incomplete entry is charged, to the op's
// tenant, until it resolves or is forgotten; a gateway's is nobody's,
// and so are static entries.
func TestNeighborChargeOnlyIncompleteOnLink(t *testing.T) {
	cfg := arpConfig()
	cfg.Subnet = netip.MustParsePrefix("10.0.0.0/16")
	cfg.Gateway = netip.MustParseAddr("10.0.0.254")
	cfg.Neighbors = []Neighbor{{IP: netip.MustParseAddr("10.0.0.9"), MAC: wire.MAC{2, 9, 9, 9, 9, 9}}}
	tx := newTestTx(64)
	c := newCore(t, cfg, tx)
	app := openAppOfTenant(t, c, 2, 8)
	r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	now := int64(1000)
	app.post(t, readCmd(app.slots[0], ipOf("10.9.0.1"), r, 0, r, 0, 64, 1)) // through the gateway
	app.post(t, readCmd(app.slots[1], ipOf("10.0.0.9"), r, 0, r, 0, 64, 2)) // static
	app.post(t, readCmd(app.slots[2], ipOf("10.0.0.7"), r, 0, r, 0, 64, 3)) // on-link, new
	c.Poll(now)
	if gw, on := c.nbr.lookup(ipOf("10.0.0.254"), false), c.nbr.lookup(ipOf("10.0.0.7"), false); gw == nil || gw.charged != 0 || on == nil || on.charged != 3 {
		t.Fatalf("gateway entry %+v, on-link entry %+v", gw, on)
	}
	if c.nbr.charged[2] != 1 {
		t.Fatalf("tenant 2 charged %d", c.nbr.charged[2])
	}
	// The on-link neighbor answers: its charge ends.
	mac := wire.MAC{2, 7, 7, 7, 7, 7}
	b := make([]byte, wire.MinFrame)
	wire.EncodeARP(b, &wire.ARP{Op: wire.ARPReply, SenderMAC: mac, SenderIP: ipOf("10.0.0.7"), TargetMAC: c.out.mac, TargetIP: c.out.ip, EthDst: c.out.mac, EthSrc: mac})
	c.Receive(now, b)
	if e := c.nbr.lookup(ipOf("10.0.0.7"), false); e.state != nbrResolved || e.charged != 0 || c.nbr.charged[2] != 0 {
		t.Fatalf("resolved entry %+v, tenant charged %d", e, c.nbr.charged[2])
	}
	// Another new on-link address never answers: charged until its op
	// gives up, then forgotten.
	app.post(t, readCmd(app.slots[3], ipOf("10.0.0.8"), r, 0, r, 0, 64, 4))
	c.Poll(now)
	if c.nbr.charged[2] != 1 {
		t.Fatalf("tenant 2 charged %d", c.nbr.charged[2])
	}
	c.Poll(now + int64(cfg.ResolveTimeout))
	if c.nbr.charged[2] != 0 || c.nbr.lookup(ipOf("10.0.0.8"), false) != nil {
		t.Fatalf("after its op gave up: charged %d", c.nbr.charged[2])
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
}

// A portal closed while its ops wait for ARP takes their entries, and its
// tenant's charge, with it (the tenant's index may be the control plane's
// for the next tenant). An entry another op still waits for stays, and
// stays charged, until it resolves or that op gives up (ResolveTimeout).
func TestNeighborChargeEndsWithPortal(t *testing.T) {
	c := newCore(t, arpConfig(), newTestTx(64))
	app := openAppOfTenant(t, c, 1, 8)
	other := openAppOfTenant(t, c, 2, 8)
	r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	ro, _ := c.RegisterRegion(other.id, make([]byte, 4096), abi.PermAll, testKr)
	for k := range 4 {
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.7")+uint32(k), r, 0, r, 0, 64, 1))
	}
	other.post(t, readCmd(other.slots[0], ipOf("10.0.0.7"), ro, 0, ro, 0, 64, 1)) // waits on tenant 1's entry
	c.Poll(1000)
	if c.nbr.charged[1] != 4 || c.nbr.n != 4 {
		t.Fatalf("charged %d, entries %d", c.nbr.charged[1], c.nbr.n)
	}
	if err := c.ClosePortal(app.id); err != nil {
		t.Fatal(err)
	}
	// 10.0.0.7 stays: another tenant's op waits for it.
	if c.nbr.charged[1] != 1 || c.nbr.n != 1 || c.nbr.lookup(ipOf("10.0.0.7"), false) == nil {
		t.Fatalf("after close: charged %d, entries %d", c.nbr.charged[1], c.nbr.n)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
}

// The rate bound: ARPBurst requests at once, then ARPRate a second; a
// retry of an unanswered request leaves the last ARPBurst/2 tokens to
// first requests.
func TestARPLimit(t *testing.T) {
	l := newARPLimit(1000, 8) // a token a millisecond
	now := int64(5e9)
	for i := 0; i < 4; i++ {
		if !l.take(now, true) {
			t.Fatalf("retry %d of a full bucket refused", i)
		}
	}
	if l.take(now, true) {
		t.Fatal("a retry took the reserve")
	}
	for i := 0; i < 4; i++ {
		if !l.take(now, false) {
			t.Fatalf("first request %d refused with the reserve left", i)
		}
	}
	if l.take(now, false) {
		t.Fatal("an empty bucket gave a token")
	}
	if l.take(now+999_999, false) || !l.take(now+1_000_000, false) {
		t.Fatal("the refill is not a token a millisecond")
	}
	if l.take(now-1_000_000, false) { // another core's clock, behind
		t.Fatal("time behind refilled the bucket")
	}
	// A long quiet spell fills the bucket to ARPBurst, no more.
	now += int64(time.Hour)
	n := 0
	for l.take(now, false) {
		n++
	}
	if n != 8 {
		t.Fatalf("after a quiet spell %d tokens, want 8", n)
	}
}

// A request over the bound is deferred, not dropped: counted, and sent
// at its entry's next retry once the bucket has a token; a retry of an
// unanswered request waits while only the reserve is left, a first
// request does not.
func TestARPRateLimitedDeferred(t *testing.T) {
	cfg := arpConfig()
	cfg.ARPRate, cfg.ARPBurst = 100, 2 // a token each 10 ms (two ARPRetry intervals), one of them the reserve
	tx := newTestTx(64)
	c := newCore(t, cfg, tx)
	app := openAppOfTenant(t, c, 0, 4)
	r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	now := int64(1000)
	for k := range 3 {
		app.post(t, readCmd(app.slots[k], ipOf("10.0.0.7")+uint32(k), r, 0, r, 0, 64, 1))
	}
	c.Poll(now)
	if n, s := len(tx.take()), c.Stats(); n != 2 || s.ARPRequests != 2 || s.ARPRateLimited != 1 {
		t.Fatalf("sent %d, stats %+v", n, s)
	}
	e := c.nbr.lookup(ipOf("10.0.0.9"), false)
	if e.asked {
		t.Fatal("a deferred request counts as outstanding")
	}
	// The next retry (ARPRetry later) finds half a token; the one after
	// finds one, which the first request for 10.0.0.9 takes and the
	// retries for 10.0.0.7 and .8 may not.
	c.Poll(now + int64(cfg.ARPRetry))
	if n := len(tx.take()); n != 0 {
		t.Fatalf("%d requests sent without a token", n)
	}
	c.Poll(now + 2*int64(cfg.ARPRetry))
	var targets []uint32
	for _, f := range tx.take() {
		var m wire.ARP
		if wire.DecodeARP(f, &m) == nil {
			targets = append(targets, m.TargetIP)
		}
	}
	if len(targets) != 1 || targets[0] != ipOf("10.0.0.9") || !e.asked {
		t.Fatalf("at the second retry: requests for %x, entry %+v", targets, e)
	}
	if s := c.Stats(); s.ARPRateLimited != 1+3+2 {
		t.Fatalf("deferred %d, want 6", s.ARPRateLimited)
	}
}

// The cores of an engine share the bound.
func TestARPLimitSharedByCores(t *testing.T) {
	cfg := arpConfig()
	cfg.ARPRate, cfg.ARPBurst = 100, 2
	txs := []*testTx{newTestTx(64), newTestTx(64)}
	g, err := NewGroup(cfg, []Tx{txs[0], txs[1]})
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1000)
	for i := range 2 {
		c := g.Core(i)
		app := openAppOfTenant(t, c, 0, 4)
		r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
		for k := range 2 {
			app.post(t, readCmd(app.slots[k], ipOf("10.0.0.7")+uint32(2*i+k), r, 0, r, 0, 64, 1))
		}
		c.Poll(now)
	}
	s0, s1 := g.Core(0).Stats(), g.Core(1).Stats()
	if s0.ARPRequests+s1.ARPRequests != 2 || s0.ARPRateLimited+s1.ARPRateLimited != 2 {
		t.Fatalf("requests %d+%d, deferred %d+%d: want 2 sent of 4", s0.ARPRequests, s1.ARPRequests, s0.ARPRateLimited, s1.ARPRateLimited)
	}
}
