package engine

import (
	"fmt"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// The solicitation window shared by tenants (shares.go).

const (
	liveIP = "10.0.0.2" // engine b of a sharesPair: answers
	deadIP = "10.0.0.9" // a static neighbour nobody answers for
)

// openShareApp opens a portal of tenant tenant, of weight weight, with
// slots slots and a sink region of 4 KB per slot.
func openShareApp(t testing.TB, c *Core, class abi.Class, slots, tenant, weight int) (*testApp, abi.RegionID) {
	t.Helper()
	const cmdCap, cplCap = 256, 512
	cmdMem := aligned(abi.RingBytes(cmdCap, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(cplCap, abi.CompletionSize))
	id, err := c.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: cmdCap, CplRing: cplMem, CplCap: cplCap, Class: class,
		MaxSlots: slots, PID: testPID, Tenant: tenant, Weight: weight})
	if err != nil {
		t.Fatal(err)
	}
	a := &testApp{id: id, ip: c.out.ipb}
	a.cmd, _ = abi.NewProducer(cmdMem, cmdCap, abi.CommandSize)
	a.cpl, _ = abi.NewConsumer(cplMem, cplCap, abi.CompletionSize)
	if slots > 0 {
		if a.slots, err = c.AllocSlots(id, slots); err != nil {
			t.Fatal(err)
		}
	}
	sink, err := c.RegisterRegion(id, make([]byte, max(slots, 1)*abi.MaxOpBytes), abi.PermAll, testKr)
	if err != nil {
		t.Fatal(err)
	}
	return a, sink
}

// sharesPair is engine a (10.0.0.1) with a window of windowOps 4 KB ops
// and engine b (10.0.0.2) serving a 4 KB region src; a knows b's and a
// dead neighbour's MAC (no ARP).
type sharesPair struct {
	*pair
	src  abi.RegionID
	reqs [][]byte // a's requests taken by requests, in order
}

func newSharesPair(t testing.TB, windowOps int, tune func(*Config)) *sharesPair {
	t.Helper()
	ca, cb := testConfig("10.0.0.1", 1), testConfig(liveIP, 2)
	ca.WindowBytes = windowOps * abi.MaxOpBytes
	ca.Slots, ca.Portals, ca.Regions = 256, 8, 16
	ca.Neighbors = []Neighbor{{IP: cb.LocalIP, MAC: cb.LocalMAC}, {IP: testConfig(deadIP, 9).LocalIP, MAC: wire.MAC{2, 0, 0, 0, 0, 9}}}
	cb.Neighbors = []Neighbor{{IP: ca.LocalIP, MAC: ca.LocalMAC}}
	cb.InboundQueue, cb.NackThreshold, cb.ServeBudget = 1024, 1024, 1024
	if tune != nil {
		tune(&ca)
	}
	p := &sharesPair{pair: newPair(t, ca, cb)}
	owner := openApp(t, p.b, abi.ClassLow, 0)
	var err error
	if p.src, err = p.b.RegisterRegion(owner.id, make([]byte, abi.MaxOpBytes), abi.PermRemoteRead, testKr); err != nil {
		t.Fatal(err)
	}
	return p
}

// postReads posts n 4 KB READs to dst on app's slots from k on.
func (p *sharesPair) postReads(t testing.TB, app *testApp, sink abi.RegionID, k, n int, dst string) {
	t.Helper()
	for j := k; j < k+n; j++ {
		app.post(t, readCmd(app.slots[j], ipOf(dst), p.src, 0, sink, uint64(j)*abi.MaxOpBytes, abi.MaxOpBytes, uint64(j)))
	}
}

// audit fails t unless both engines' books are whole.
func (p *sharesPair) audit(t testing.TB) {
	t.Helper()
	for _, c := range []*Core{p.a, p.b} {
		if err := c.Audit(); err != nil {
			t.Fatal(err)
		}
	}
}

// tenantOf maps a's request frames to the tenant whose portal's slots
// sent them.
type slotTenants map[abi.SlotID]int

func (m slotTenants) add(app *testApp, tenant int) {
	for _, s := range app.slots {
		m[s] = tenant
	}
}

// requests decodes a's frames sent since the last call (taking them off
// its queue): the tenant and class of each request, in order.
func (p *sharesPair) requests(t testing.TB, m slotTenants) (tenants []int, high []bool) {
	t.Helper()
	for _, fr := range p.ta.take() {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			t.Fatal(err)
		}
		if f.Type != wire.TypeReadReq {
			continue
		}
		p.reqs = append(p.reqs, fr)
		tn, ok := m[abi.SlotID(f.Tag>>32)]
		if !ok {
			t.Fatalf("request from slot %d of no tenant's portal", f.Tag>>32)
		}
		tenants = append(tenants, tn)
		high = append(high, f.Flags&wire.FlagHigh != 0)
	}
	return tenants, high
}

func held(c *Core, tenant int) int { return int(c.TenantCounters(tenant).WindowHeld) }

// Each tenant present is guaranteed its weight's fraction of the window,
// and ops to a destination that never answered hold no more than it:
// with three tenants of weights 1, 1 and 2 all reading from a dead
// destination, each holds exactly its share. With the third present but
// idle, the other two still hold only theirs (no borrowing toward a
// destination that never answered) and the rest of the window stays
// free; their ops wait for their own share (ShareWaits) and expire
// DISPATCH_TIMEOUT while it is full (ShareDispatchTimeouts).
func TestSharesByWeight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		weights   []int
		post      []bool
		wantShare []int // in 4 KB ops
		wantHeld  []int
	}{
		{"equal, all busy", []int{1, 1, 1}, []bool{true, true, true}, []int{5, 5, 5}, []int{5, 5, 5}},
		{"1:1:2, all busy", []int{1, 1, 2}, []bool{true, true, true}, []int{4, 4, 8}, []int{4, 4, 8}},
		{"1:1:2, the heavy one idle", []int{1, 1, 2}, []bool{true, true, false}, []int{4, 4, 8}, []int{4, 4, 0}},
		{"1:3, both busy", []int{1, 3}, []bool{true, true}, []int{4, 12}, []int{4, 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSharesPair(t, 16, nil)
			var apps []*testApp
			var sinks []abi.RegionID
			for k, w := range tc.weights {
				app, sink := openShareApp(t, p.a, abi.ClassLow, 32, k, w)
				apps, sinks = append(apps, app), append(sinks, sink)
			}
			for k := range apps {
				if tc.post[k] {
					p.postReads(t, apps[k], sinks[k], 0, 32, deadIP)
				}
			}
			p.a.Poll(p.now)
			p.audit(t)
			var gotShare, gotHeld []int
			for k := range apps {
				tc := p.a.TenantCounters(k)
				// A share is W·w/Σw bytes: whole 4 KB ops of it.
				gotShare = append(gotShare, int(tc.WindowShare)/abi.MaxOpBytes)
				gotHeld = append(gotHeld, held(p.a, k)/abi.MaxOpBytes)
			}
			if fmt.Sprint(gotShare, gotHeld) != fmt.Sprint(tc.wantShare, tc.wantHeld) {
				t.Fatalf("shares and ops held (-want +got)\n-%v %v\n+%v %v", tc.wantShare, tc.wantHeld, gotShare, gotHeld)
			}
			p.now += int64(p.a.cfg.DispatchTimeout)
			p.a.Poll(p.now)
			p.audit(t)
			for k := range apps {
				c := p.a.TenantCounters(k)
				waiting := uint64(0)
				if tc.post[k] {
					waiting = 32 - uint64(tc.wantHeld[k])
				}
				if c.Queued != 0 || c.ShareDispatchTimeouts != waiting || c.Borrowed != 0 {
					t.Errorf("tenant %d: queued %d, DISPATCH_TIMEOUTs at its share %d (want %d), borrowed %d", k, c.Queued, c.ShareDispatchTimeouts, waiting, c.Borrowed)
				}
				// Waits for the share are seen only while window is free.
				if want := waiting * b2u(sum(tc.wantHeld) < 16); c.ShareWaits != want {
					t.Errorf("tenant %d: %d ops waited for its share, want %d", k, c.ShareWaits, want)
				}
			}
		})
	}
}

func sum(v []int) int {
	k := 0
	for _, x := range v {
		k += x
	}
	return k
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// A tenant borrows the window others leave idle, but only for ops to a
// destination that answered within Responsive: once its destination
// falls silent that long, it is back to its share, and borrows again
// once the destination answers.
func TestBorrowingStopsAtDeadDestination(t *testing.T) {
	p := newSharesPair(t, 16, nil)
	live, ls := openShareApp(t, p.a, abi.ClassLow, 64, 0, 1)
	dead, ds := openShareApp(t, p.a, abi.ClassLow, 64, 1, 1)
	_, _ = openShareApp(t, p.a, abi.ClassLow, 0, 2, 1) // present, idle
	if share := int(p.a.TenantCounters(0).WindowShare) / abi.MaxOpBytes; share != 5 {
		t.Fatalf("share of 16 ops among three: %d ops", share)
	}
	ops := func(k int) int { return held(p.a, k) / abi.MaxOpBytes }
	// Never answered: no borrowing.
	p.postReads(t, live, ls, 0, 8, liveIP)
	p.a.Poll(p.now)
	if ops(0) != 5 {
		t.Fatalf("before b ever answered: the live tenant holds %d ops, want its share of 5", ops(0))
	}
	p.run() // b answers
	live.completions()
	// The live tenant borrows the idle tenant's share and what the dead
	// destination's tenant cannot use; that one stays at its share.
	p.postReads(t, dead, ds, 0, 16, deadIP)
	p.postReads(t, live, ls, 8, 16, liveIP)
	p.a.Poll(p.now)
	p.audit(t)
	if ops(0) != 11 || ops(1) != 5 {
		t.Fatalf("b answered: held %d and %d ops, want 11 and 5", ops(0), ops(1))
	}
	if c := p.a.TenantCounters(0); c.Borrowed != 6 || c.BorrowedBytes != 6*abi.MaxOpBytes {
		t.Fatalf("live tenant: borrowed %d ops, %d bytes, want 6 ops", c.Borrowed, c.BorrowedBytes)
	}
	if c := p.a.TenantCounters(1); c.Borrowed != 0 {
		t.Fatalf("the dead destination's tenant borrowed %d ops", c.Borrowed)
	}
	// b falls silent: everything times out, and the ops the live tenant
	// posts afterwards get its share only.
	p.ta.take()
	p.now += int64(p.a.cfg.DispatchTimeout)
	p.a.Poll(p.now)
	p.now += int64(p.a.cfg.Timeout)
	p.a.Poll(p.now)
	p.audit(t)
	live.completions()
	dead.completions()
	if c := p.a.TenantCounters(1); c.ShareDispatchTimeouts != 11 {
		t.Fatalf("dead destination's tenant: %d DISPATCH_TIMEOUTs at its share, want 11", c.ShareDispatchTimeouts)
	}
	waits := p.a.TenantCounters(0).ShareWaits
	p.postReads(t, live, ls, 24, 16, liveIP)
	p.a.Poll(p.now)
	if ops(0) != 5 {
		t.Fatalf("b silent for longer than Responsive: the live tenant holds %d ops, want its share of 5", ops(0))
	}
	// b answers again: borrowing resumes, and the 11 ops that waited
	// for the share while window was free say so.
	p.ta.deliverTo(p.now, p.b)
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a)
	p.a.Poll(p.now)
	if ops(0) != 11 {
		t.Fatalf("b answered again: the live tenant holds %d ops, want 11", ops(0))
	}
	if got := p.a.TenantCounters(0).ShareWaits - waits; got != 11 {
		t.Fatalf("%d ops waited for the live tenant's share while b was silent, want 11", got)
	}
	p.audit(t)
}

// Window borrowed comes back to a tenant below its share first: when one
// borrowed op completes, a waiting op of a tenant below its share takes
// its room, not the borrower's next op.
func TestBorrowedWindowComesBack(t *testing.T) {
	p := newSharesPair(t, 8, nil)
	busy, bs := openShareApp(t, p.a, abi.ClassLow, 64, 0, 1)
	light, lsk := openShareApp(t, p.a, abi.ClassLow, 4, 1, 1)
	m := slotTenants{}
	m.add(busy, 0)
	m.add(light, 1)
	p.postReads(t, busy, bs, 0, 1, liveIP) // b answers once: responsive
	p.run()
	busy.completions()
	p.postReads(t, busy, bs, 1, 32, liveIP)
	p.a.Poll(p.now)
	if tn, _ := p.requests(t, m); len(tn) != 8 || held(p.a, 0) != 8*abi.MaxOpBytes {
		t.Fatalf("busy tenant alone: %d requests, holds %d", len(tn), held(p.a, 0))
	}
	p.postReads(t, light, lsk, 0, 1, liveIP)
	p.a.Poll(p.now) // no room: the light op waits
	if tn, _ := p.requests(t, m); len(tn) != 0 {
		t.Fatalf("requests sent with the window full: %v", tn)
	}
	// One borrowed op completes: its room goes to the light tenant.
	p.b.Receive(p.now, p.reqs[len(p.reqs)-1])
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a)
	p.a.Poll(p.now)
	if tn, _ := p.requests(t, m); fmt.Sprint(tn) != "[1]" {
		t.Fatalf("requests after one busy op completed: tenants %v, want [1]", tn)
	}
	if c := p.a.TenantCounters(1); c.ShareWaits != 0 || c.Borrowed != 0 || c.WindowHeld != abi.MaxOpBytes {
		t.Fatalf("light tenant: %+v", c)
	}
	p.audit(t)
}

// The classes keep their meaning across tenants: high before low and one
// low grant after HighBurst high ones, whichever tenants the ops are of,
// within each tenant's share.
func TestClassesAcrossTenants(t *testing.T) {
	p := newSharesPair(t, 12, func(c *Config) { c.HighBurst = 2 })
	hi1, h1 := openShareApp(t, p.a, abi.ClassHigh, 16, 0, 1)
	hi2, h2 := openShareApp(t, p.a, abi.ClassHigh, 16, 1, 1)
	lo, l := openShareApp(t, p.a, abi.ClassLow, 16, 2, 1)
	m := slotTenants{}
	m.add(hi1, 0)
	m.add(hi2, 1)
	m.add(lo, 2)
	p.postReads(t, lo, l, 0, 16, deadIP)
	p.postReads(t, hi1, h1, 0, 16, deadIP)
	p.postReads(t, hi2, h2, 0, 16, deadIP)
	p.a.Poll(p.now)
	tn, high := p.requests(t, m)
	// Shares of 4 ops each. Two high grants (the high tenants in turn),
	// one low, ...; once both high tenants hold their share, the low
	// tenant takes the rest of its own.
	want := "[0 1 2 0 1 2 0 1 2 0 1 2] [true true false true true false true true false true true false]"
	if got := fmt.Sprint(tn, high); got != want {
		t.Fatalf("grants by tenant and class (-want +got)\n-%s\n+%s", want, got)
	}
	p.audit(t)
}

// Among tenants of one class, grants follow their weights (deficit round
// robin in bytes), within their shares and when borrowing.
func TestRoundRobinByWeight(t *testing.T) {
	p := newSharesPair(t, 16, nil)
	a, as := openShareApp(t, p.a, abi.ClassLow, 64, 0, 1)
	b, bs := openShareApp(t, p.a, abi.ClassLow, 64, 1, 3)
	_, _ = openShareApp(t, p.a, abi.ClassLow, 0, 2, 4) // present, idle: shares of 2, 6 and 8 ops
	m := slotTenants{}
	m.add(a, 0)
	m.add(b, 1)
	p.postReads(t, a, as, 0, 1, liveIP)
	p.run()
	a.completions()
	p.requests(t, m)
	p.postReads(t, a, as, 1, 32, liveIP)
	p.postReads(t, b, bs, 0, 32, liveIP)
	p.a.Poll(p.now)
	tn, _ := p.requests(t, m)
	// Within the shares: a once, b three times, until both hold theirs;
	// then the idle tenant's 8 ops are borrowed in the same proportion.
	want := "[0 1 1 1 0 1 1 1 0 1 1 1 0 1 1 1]"
	if got := fmt.Sprint(tn); got != want {
		t.Fatalf("grants by tenant (-want +got)\n-%s\n+%s", want, got)
	}
	if ca, cb := p.a.TenantCounters(0), p.a.TenantCounters(1); ca.Borrowed != 2 || cb.Borrowed != 6 {
		t.Fatalf("borrowed %d and %d ops, want 2 and 6", ca.Borrowed, cb.Borrowed)
	}
	p.audit(t)
}

// A tenant's share follows the tenants present: it grows when another
// tenant's last portal closes, and a closed portal's ops in service
// (orphans) hold window but no tenant's share.
func TestSharesFollowTenants(t *testing.T) {
	p := newSharesPair(t, 16, nil)
	a, as := openShareApp(t, p.a, abi.ClassLow, 32, 0, 1)
	b, bs := openShareApp(t, p.a, abi.ClassLow, 32, 1, 1)
	b2, _ := openShareApp(t, p.a, abi.ClassLow, 0, 1, 3) // tenant 1's second portal: its weight is now 3
	if s0, s1 := p.a.TenantCounters(0).WindowShare, p.a.TenantCounters(1).WindowShare; s0 != 16<<10 || s1 != 48<<10 {
		t.Fatalf("shares %d and %d, want 16 KB and 48 KB", s0, s1)
	}
	p.postReads(t, b, bs, 0, 8, deadIP)
	p.a.Poll(p.now)
	if err := p.a.ClosePortal(b.id); err != nil {
		t.Fatal(err)
	}
	if h, s := held(p.a, 1), p.a.TenantCounters(1).WindowShare; h != 0 || s != 48<<10 {
		t.Fatalf("tenant 1 with one portal left: holds %d (its orphans are nobody's), share %d", h, s)
	}
	if err := p.a.ClosePortal(b2.id); err != nil {
		t.Fatal(err)
	}
	if s0, s1 := p.a.TenantCounters(0).WindowShare, p.a.TenantCounters(1).WindowShare; s0 != 64<<10 || s1 != 0 {
		t.Fatalf("tenant 0 alone: shares %d and %d, want 64 KB and 0", s0, s1)
	}
	// Alone, the tenant has the whole window that the orphans leave.
	p.postReads(t, a, as, 0, 16, deadIP)
	p.a.Poll(p.now)
	if h := held(p.a, 0); h != 8*abi.MaxOpBytes {
		t.Fatalf("tenant 0 alone beside 8 orphans: holds %d ops, want 8", h/abi.MaxOpBytes)
	}
	p.audit(t)
}

// Responsiveness survives a stall of the core (Core.Stalled): time the
// core could not look counts against no destination.
func TestResponsiveAcrossStall(t *testing.T) {
	p := newSharesPair(t, 16, nil)
	a, as := openShareApp(t, p.a, abi.ClassLow, 64, 0, 1)
	_, _ = openShareApp(t, p.a, abi.ClassLow, 0, 1, 1)
	p.postReads(t, a, as, 0, 1, liveIP)
	p.run()
	a.completions()
	gap := 2 * int64(p.a.cfg.Timeout)
	p.now += gap
	p.a.Stalled(gap)
	p.postReads(t, a, as, 1, 16, liveIP)
	p.a.Poll(p.now)
	if h := held(p.a, 0); h != 16*abi.MaxOpBytes {
		t.Fatalf("after a stall: holds %d ops, want 16 (borrowing toward b)", h/abi.MaxOpBytes)
	}
}

// Hot path with several tenants, borrowing and within shares: no
// allocation.
func TestSharesHotPathAllocs(t *testing.T) {
	p := newSharesPair(t, 4, nil)
	var apps []*testApp
	var sinks []abi.RegionID
	for k := range 3 {
		app, sink := openShareApp(t, p.a, abi.ClassLow, 8, k, k+1)
		apps, sinks = append(apps, app), append(sinks, sink)
	}
	p.postReads(t, apps[0], sinks[0], 0, 1, liveIP)
	p.run()
	apps[0].completions()
	var cpl abi.Completion
	var cmds [3][4]*abi.Command
	for k, app := range apps {
		for j := range 4 {
			cmds[k][j] = app.keyed(readCmd(app.slots[j], ipOf(liveIP), p.src, 0, sinks[k], uint64(j)*abi.MaxOpBytes, abi.MaxOpBytes, uint64(j)))
		}
	}
	allocs := testing.AllocsPerRun(200, func() {
		for k, app := range apps {
			for j := range 4 {
				cmds[k][j].Encode(app.cmd.Reserve())
				app.cmd.Commit()
			}
			app.cmd.Publish()
		}
		for range 8 {
			p.a.Poll(p.now)
			p.ta.deliverTo(p.now, p.b)
			p.b.Poll(p.now)
			p.tb.deliverTo(p.now, p.a)
			p.now += 1000
		}
		p.a.Poll(p.now)
		for _, app := range apps {
			for e := app.cpl.Peek(); e != nil; e = app.cpl.Peek() {
				cpl.Decode(e)
				app.cpl.Advance()
				if cpl.Status != abi.StatusOK {
					panic(cpl.Status)
				}
			}
			app.cpl.Release()
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per round", allocs)
	}
	p.audit(t)
}

// nullTx hands out one buffer and forgets what is sent.
type nullTx struct{ b []byte }

func (t *nullTx) Buffer() []byte { return t.b }
func (t *nullTx) Send(int)       {}

// BenchmarkArbitrate measures a grant of window: an op in service goes
// back to its tenant's queue (as if it had completed and been posted
// again) and arbitrate grants the next, sealing and sending its request,
// with 1 and with 8 tenants (weights 1-3) holding ops queued toward a
// destination that never answered, each at or near its share.
func BenchmarkArbitrate(b *testing.B) {
	for _, tenants := range []int{1, 8} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			cfg := testConfig("10.0.0.1", 1)
			cfg.Slots = 1024
			cfg.Portals = 16
			cfg.WindowBytes = 64 << 10
			cfg.Neighbors = []Neighbor{{IP: testConfig(deadIP, 9).LocalIP, MAC: wire.MAC{2, 0, 0, 0, 0, 9}}}
			c := newCore(b, cfg, &nullTx{b: make([]byte, MaxFrameBytes)})
			n := c.ini
			for k := range tenants {
				app, sink := openShareApp(b, c, abi.ClassLow, 64, k, 1+k%3)
				for j := range 64 {
					app.post(b, readCmd(app.slots[j], ipOf(deadIP), 1, 0, sink, uint64(j)*abi.MaxOpBytes, abi.MaxOpBytes, uint64(j)))
				}
			}
			now := int64(1000)
			c.Poll(now)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				now++
				i := n.lists[listInService].head
				s := &n.slots[i]
				n.win.refund(int(s.debit))
				n.tq[s.tenant].held -= int32(s.debit)
				n.unlink(i)
				n.enqueue(now, i)
				if n.arbitrate(now) != 1 {
					b.Fatal("no grant")
				}
			}
			b.StopTimer()
			if err := c.Audit(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// A tenant's counters on a core start afresh when a portal of a new
// tenure of its index (PortalSpec.TenantEpoch) opens there: a tenant
// never inherits the counters of the one that had its index before.
func TestTenantCountersEpoch(t *testing.T) {
	p := newSharesPair(t, 16, nil)
	open := func(epoch uint64) (*testApp, abi.RegionID) {
		const cmdCap, cplCap = 64, 64
		cmdMem := aligned(abi.RingBytes(cmdCap, abi.CommandSize))
		cplMem := aligned(abi.RingBytes(cplCap, abi.CompletionSize))
		id, err := p.a.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: cmdCap, CplRing: cplMem, CplCap: cplCap,
			MaxSlots: 4, PID: testPID, Tenant: 3, TenantEpoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		a := &testApp{id: id, ip: p.a.out.ipb}
		a.cmd, _ = abi.NewProducer(cmdMem, cmdCap, abi.CommandSize)
		a.cpl, _ = abi.NewConsumer(cplMem, cplCap, abi.CompletionSize)
		a.slots, _ = p.a.AllocSlots(id, 4)
		sink, _ := p.a.RegisterRegion(id, make([]byte, 4*abi.MaxOpBytes), abi.PermAll, testKr)
		return a, sink
	}
	a, sink := open(7)
	p.postReads(t, a, sink, 0, 2, liveIP)
	p.run()
	if c := p.a.TenantCounters(3); c.Epoch != 7 || c.Posted != 2 {
		t.Fatalf("epoch 7: %+v", c)
	}
	b, _ := open(7) // the same tenant's second portal: nothing restarts
	if c := p.a.TenantCounters(3); c.Posted != 2 {
		t.Fatalf("a second portal of epoch 7: %+v", c)
	}
	for _, x := range []*testApp{a, b} {
		if err := p.a.ClosePortal(x.id); err != nil {
			t.Fatal(err)
		}
	}
	if c := p.a.TenantCounters(3); c.Posted != 2 || c.WindowShare != 0 {
		t.Fatalf("the tenant gone: %+v", c)
	}
	open(8)
	if c := p.a.TenantCounters(3); c.Epoch != 8 || c.Posted != 0 || c.WindowShare == 0 {
		t.Fatalf("epoch 8: %+v", c)
	}
}

// With one tenant present the tenants' FIFOs are not kept; a second
// tenant's coming builds them from the class FIFOs with the ops queued
// then, and its leaving drops them: the books stay whole at each step,
// the shares apply from the second tenant's first op, and every op
// completes once.
func TestTenantQueuesFollowPresence(t *testing.T) {
	p := newSharesPair(t, 4, nil)
	one, os := openShareApp(t, p.a, abi.ClassLow, 64, 0, 1)
	p.postReads(t, one, os, 0, 1, liveIP) // b answers once: responsive
	p.run()
	if got := one.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("first read: %+v", got)
	}
	p.postReads(t, one, os, 1, 12, liveIP)
	p.a.Poll(p.now)
	p.audit(t)
	if p.a.ini.multi || held(p.a, 0) != 4*abi.MaxOpBytes || p.a.TenantCounters(0).Queued != 8 {
		t.Fatalf("one tenant: multi %v, holds %d, queued %d", p.a.ini.multi, held(p.a, 0), p.a.TenantCounters(0).Queued)
	}
	two, ts := openShareApp(t, p.a, abi.ClassLow, 8, 1, 1)
	p.audit(t)
	if !p.a.ini.multi || p.a.ini.tq[0].q[abi.ClassLow].n != 8 {
		t.Fatalf("second tenant came: multi %v, tenant 0's FIFO %d ops", p.a.ini.multi, p.a.ini.tq[0].q[abi.ClassLow].n)
	}
	p.postReads(t, two, ts, 0, 4, liveIP)
	p.run()
	p.audit(t)
	if a, b := one.completions(), two.completions(); len(a) != 12 || len(b) != 4 {
		t.Fatalf("completions %d and %d, want 12 and 4", len(a), len(b))
	}
	// Tenant 0 queues again, and tenant 1 leaves while they wait.
	p.postReads(t, one, os, 13, 12, liveIP)
	p.a.Poll(p.now)
	if err := p.a.ClosePortal(two.id); err != nil {
		t.Fatal(err)
	}
	p.audit(t)
	if p.a.ini.multi || p.a.ini.tq[0].q[abi.ClassLow].n != 0 || p.a.ini.rings[abi.ClassLow].n != 0 {
		t.Fatalf("second tenant left: multi %v, tenant 0's FIFO %d ops, ring %d", p.a.ini.multi, p.a.ini.tq[0].q[abi.ClassLow].n, p.a.ini.rings[abi.ClassLow].n)
	}
	p.run()
	p.audit(t)
	for _, c := range one.completions() {
		if c.Status != abi.StatusOK {
			t.Fatalf("after the second tenant left: %+v", c)
		}
	}
}
