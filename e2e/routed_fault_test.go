package e2e

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// The testbed's engines by place: subnet 1 holds e1 (af_packet) and e2
// (AF_XDP), subnet 2 e3 (af_packet) and e4 (net_tap).
const (
	e1, e2, e3, e4 = 0, 1, 2, 3
	subnet1        = 0
	subnet2        = 1
)

// A destination no route leads to ends UNREACHABLE, never TIMEOUT: one
// routed via an address that never answers ARP after resolve_timeout; one
// off the subnet of an engine with no gateway at once, without an ARP
// request.
func (b *routedBed) testRouteToNowhere(t *testing.T) {
	a := b.app[e1]
	before := stats(t, a.p)
	dst := netip.AddrFrom4([4]byte{10, 9, 0, 7})
	if !routedNowhere.Contains(dst) {
		t.Fatalf("%s is not in %s", dst, routedNowhere)
	}
	cookie := a.cookie
	a.cookie++
	if err := a.p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: a.slots[0], Cookie: cookie,
		Remote: dst, RemoteRegion: b.app[e3].ro.ID(), Key: kdFor(b.app[e3].ro, a.p),
		Local: a.local, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	cs, err := collect(a.p, cookie, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Duration(cs[0].TotalDelayNs)
	if c := cs[0]; c.Status != abi.StatusUnreachable || d < routedResolve || d >= routedTimeout {
		t.Fatalf("READ from %s (routed via an address no one holds): %v after %v, want UNREACHABLE after resolve_timeout %v (TIMEOUT is %v)",
			dst, c.Status, d, routedResolve, routedTimeout)
	}
	after := stats(t, a.p)
	if after.ARPRequests == before.ARPRequests {
		t.Fatalf("UNREACHABLE without an ARP request for the route's next hop")
	}
	t.Logf("route via a silent next hop: UNREACHABLE after %v (resolve_timeout %v), %d ARP requests",
		d, routedResolve, after.ARPRequests-before.ARPRequests)

	// An engine with a prefix and no gateway: an address off its subnet
	// has no route.
	o := testbed.Loopback(rmadBin, b.dir, b.Prefix+"-nogw", "10.3.0.2/24")
	o.Extra = append(o.Extra, routedFlags...)
	p := dial(t, start(t, o), "nogw")
	slots, err := p.AllocSlots(1)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 1,
		Remote: b.addr(e3), RemoteRegion: b.app[e3].ro.ID(), Key: kdFor(b.app[e3].ro, p),
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	cs, err = collect(p, 1, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d = time.Duration(cs[0].TotalDelayNs)
	if c := cs[0]; c.Status != abi.StatusUnreachable || d >= routedResolve {
		t.Fatalf("READ from %s by an engine on 10.3.0.0/24 without a gateway: %v after %v, want UNREACHABLE at once (before resolve_timeout %v)",
			b.addr(e3), c.Status, d, routedResolve)
	}
	if st := stats(t, p); st.ARPRequests != 0 || st.NoRoute != 1 {
		t.Fatalf("%d ARP requests for a destination without a route, no_route %d (want 0 and 1)", st.ARPRequests, st.NoRoute)
	}
	t.Logf("no route: UNREACHABLE after %v", d)
}

// The router's link to subnet 2 goes down: ops from subnet 1 to it end in
// TIMEOUT (each once; none hangs), ops from subnet 2 end TIMEOUT or, once
// the engine's gateway entry has aged out unanswered, UNREACHABLE; the
// link comes back up and ops succeed again both ways.
func (b *routedBed) testLinkDownUp(t *testing.T) {
	if err := b.SetLink(subnet2, false); err != nil {
		t.Fatal(err)
	}
	up := false
	defer func() {
		if !up {
			b.SetLink(subnet2, true)
		}
	}()
	type flow struct {
		src, dst int
		op       abi.Op
		ok       []abi.Status // the statuses allowed
	}
	timeout := []abi.Status{abi.StatusTimeout}
	flows := []flow{
		{e1, e3, abi.OpRead, timeout},
		{e2, e4, abi.OpWrite, timeout},
		{e3, e1, abi.OpRead, []abi.Status{abi.StatusTimeout, abi.StatusUnreachable}},
	}
	var wg sync.WaitGroup
	res, errs := make([][]abi.Completion, len(flows)), make([]error, len(flows))
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = b.burst(f.src, f.dst, f.op, 4096, routedTimeout+5*time.Second)
		}()
	}
	wg.Wait()
	for i, f := range flows {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	next:
		for _, c := range res[i] {
			for _, s := range f.ok {
				if c.Status == s {
					continue next
				}
			}
			t.Fatalf("%s from %s to %s with the link down: %+v, want one of %v", f.op, b.Hosts[f.src].Name, b.addr(f.dst), c, f.ok)
		}
		t.Logf("%s %s -> %s, link down: %v", f.op, b.Hosts[f.src].Name, b.addr(f.dst), statuses(res[i]))
	}
	if err := b.SetLink(subnet2, true); err != nil {
		t.Fatal(err)
	}
	up = true
	for _, f := range flows {
		d, err := b.recovered(f.src, f.dst, 10*time.Second)
		if err != nil {
			t.Fatalf("link up: %v", err)
		}
		t.Logf("%s -> %s: first READ OK %v after the link came up", b.Hosts[f.src].Name, b.addr(f.dst), d)
		b.allOK(t, f.src, f.dst, f.op, 4096)
	}
}

// The gateway of subnet 1 takes a new MAC without telling anyone: frames
// to the old one are lost, and each engine of the subnet takes the new
// one (from a reply to its own ARP request) when it re-resolves its
// gateway, within its reachable time; its ops then succeed again.
func (b *routedBed) testGatewayMAC(t *testing.T) {
	flows := [][2]int{{e1, e3}, {e2, e4}}
	for _, f := range flows {
		b.allOK(t, f[0], f[1], abi.OpRead, 4096)
	}
	// How an engine re-resolves depends on when its ops last used the
	// entry: a refresh past 3/4 of the reachable time whose reply brings
	// the new MAC (neighbor_changes), or, with no op sent meanwhile, the
	// entry's expiry and a new resolution (neighbor_expiries).
	reresolved := func(i int) uint64 {
		st := stats(t, b.app[flows[i][0]].p)
		return st.NeighborChanges + st.NeighborExpiries
	}
	before := make([]uint64, len(flows))
	for i := range flows {
		before[i] = reresolved(i)
	}
	changed := time.Now()
	if err := b.SetGatewayMAC(subnet1, testbed.GatewayMAC(subnet1, 2)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	res := make([]streamResult, len(flows))
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = b.stream(f[0], f[1], changed, 15*time.Second)
		}()
	}
	wg.Wait()
	// The entry ages only as ops use it, and ops in flight use nothing:
	// the first op sent past the reachable time re-resolves. The slack
	// covers the 8 ops then in flight timing out and CI's loaded cores.
	bound := routedReachable + 1500*time.Millisecond
	for i, f := range flows {
		r := res[i]
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("%s -> %s: %d ops failed (%v), the first OK %v after the change, %d OK after it",
			b.Hosts[f[0]].Name, b.addr(f[1]), r.failed, r.failures, r.recovery, r.okAfter)
		if r.recovery > bound {
			t.Errorf("%s recovered %v after its gateway's MAC changed, want within its reachable time %v (+1.5 s)",
				b.Hosts[f[0]].Name, r.recovery, routedReachable)
		}
		if n := reresolved(i); n <= before[i] {
			t.Errorf("%s recovered, but neither neighbor_changes nor neighbor_expiries rose (%d)", b.Hosts[f[0]].Name, n)
		}
	}
}

// streamResult is what stream saw.
type streamResult struct {
	recovery time.Duration // from the change to the first OK completion of an op posted after it
	failed   int           // ops that did not complete OK
	failures map[abi.Status]int
	okAfter  int // ops completed OK after the first
	err      error
}

// stream keeps 4 KB READs from engine src of dst's ro region in flight,
// one posted every 50 ms while a slot is free, until 8 ops posted after
// the first OK completion since the change have completed OK. Every op
// completes once; an op posted after that first OK must complete OK.
func (b *routedBed) stream(src, dst int, changed time.Time, within time.Duration) streamResult {
	a, d := b.app[src], b.app[dst]
	r := streamResult{failures: map[abi.Status]int{}}
	base := a.cookie
	posted := map[uint64]time.Time{} // cookie -> when, for ops in flight
	slotOf := map[uint64]int{}       // cookie -> index into a.slots, for ops in flight
	free := make([]int, len(a.slots))
	for k := range free {
		free[k] = k
	}
	var firstOK time.Time
	buf := make([]abi.Completion, 16)
	var last time.Time
	deadline := time.Now().Add(within)
	for {
		now := time.Now()
		if now.After(deadline) {
			r.err = fmt.Errorf("%s -> %s: no steady OK within %v of the change (first OK after %v, %d OK after it, %d failed: %v)",
				b.Hosts[src].Name, b.addr(dst), within, r.recovery, r.okAfter, r.failed, r.failures)
			break
		}
		if r.okAfter >= 8 && len(posted) == 0 {
			break
		}
		if len(free) > 0 && now.Sub(last) >= 50*time.Millisecond && r.okAfter < 8 {
			k := free[len(free)-1]
			free = free[:len(free)-1]
			cookie := a.cookie
			a.cookie++
			off := uint64(k) * abi.MaxOpBytes
			if err := a.p.Submit(&portal.Op{
				Type: portal.OpRead, Slot: a.slots[k], Cookie: cookie,
				Remote: b.addr(dst), RemoteRegion: d.ro.ID(), RemoteOffset: off, Key: kdFor(d.ro, a.p),
				Local: a.local, LocalOffset: off, Length: 4096,
			}); err != nil {
				r.err = err
				return r
			}
			posted[cookie], slotOf[cookie], last = now, k, now
		}
		n, err := a.p.Poll(buf)
		if err != nil {
			r.err = err
			return r
		}
		for _, c := range buf[:n] {
			at, ok := posted[c.Cookie]
			if !ok || c.Cookie < base {
				r.err = fmt.Errorf("unexpected completion %+v", c)
				return r
			}
			k := slotOf[c.Cookie]
			free = append(free, k)
			delete(posted, c.Cookie)
			delete(slotOf, c.Cookie)
			if c.Status != abi.StatusOK {
				r.failed++
				r.failures[c.Status]++
				if !firstOK.IsZero() && at.After(firstOK) {
					r.err = fmt.Errorf("%s -> %s: an op posted %v after the first OK failed: %+v",
						b.Hosts[src].Name, b.addr(dst), at.Sub(firstOK), c)
					return r
				}
				continue
			}
			off := uint64(k) * abi.MaxOpBytes
			for i, v := range a.local.Bytes()[off : off+4096] {
				if v != pattern(off+uint64(i)) {
					r.err = fmt.Errorf("READ from %s: byte %d is %#x, want %#x", b.addr(dst), i, v, pattern(off+uint64(i)))
					return r
				}
			}
			if firstOK.IsZero() {
				if at.After(changed) {
					firstOK = time.Now()
					r.recovery = firstOK.Sub(changed)
				}
			} else if at.After(firstOK) {
				r.okAfter++
			}
		}
		if n == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return r
}

// The router's interface toward subnet 2 at MTU 1280, below the engines'
// 1500: frames of 4 KB ops from subnet 1 are too large (the engine sets
// DF), so the router drops them and answers ICMP "fragmentation needed",
// which the sending engine counts; its ops end TIMEOUT, while small ops
// still succeed. Restarted with a route to subnet 2 of mtu 1280, the
// engine sends frames that fit, and 4 KB ops succeed.
func (b *routedBed) testPathMTU(t *testing.T) {
	if err := b.SetMTU(subnet2, 1280); err != nil {
		t.Fatal(err)
	}
	defer b.SetMTU(subnet2, 1500)
	before := stats(t, b.app[e1].p).ICMPFragNeeded
	// WRITEs from e1: its data frames cross toward subnet 2. READs by e3
	// of e1's region: e1's responses do.
	for _, f := range [][2]int{{e1, e3}, {e3, e1}} {
		op := abi.OpWrite
		if f[0] == e3 {
			op = abi.OpRead
		}
		b.allOK(t, f[0], f[1], op, 64)
		cs, err := b.burst(f[0], f[1], op, 4096, routedTimeout+5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if st := statuses(cs); st[abi.StatusTimeout] != len(cs) {
			t.Fatalf("4 KB %ss from %s to %s across MTU 1280: %v, want all TIMEOUT", op, b.Hosts[f[0]].Name, b.addr(f[1]), st)
		}
	}
	st := stats(t, b.app[e1].p)
	if st.ICMPFragNeeded <= before {
		t.Fatalf("%s's icmp_frag_needed stayed %d after frames too large for the path", b.Hosts[e1].Name, st.ICMPFragNeeded)
	}
	// The latest concerns a frame to e3 (e1's WRITE data or READ
	// responses), and names the router's MTU toward it.
	if st.FragNeededDst != b.addr(e3).String() || st.FragNeededMTU != 1280 {
		t.Fatalf("%s: the latest fragmentation needed is about %q, MTU %d; want %s, 1280", b.Hosts[e1].Name, st.FragNeededDst, st.FragNeededMTU, b.addr(e3))
	}
	t.Logf("%s: icmp_frag_needed %d -> %d, the latest about %s (MTU %d)", b.Hosts[e1].Name, before, st.ICMPFragNeeded, st.FragNeededDst, st.FragNeededMTU)

	// A route to subnet 2 with the path's MTU.
	mtuRoute := route{Dst: b.Subnets[subnet2].Prefix.String(), Via: b.Subnets[subnet1].Gateway.String(), MTU: 1280}
	if err := b.start(e1, []route{mtuRoute}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.recovered(e1, e3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	owner := b.app[e3].p
	verifiedWrites(t, b.app[e1].p, b.addr(e3), owner, ownerRegion(t, owner, routedRegion, abi.PermRemoteRead|abi.PermRemoteWrite))
	verifiedReads(t, b.app[e3].p, b.addr(e1), b.app[e1].ro)
}
