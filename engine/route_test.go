package engine

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// An engine on 10.1.0.0/24 reads and writes engines on 10.2.0.0/24
// through its gateway: it ARPs for the gateway only, once, and the one
// entry serves both destinations behind it. The serving engines answer
// to the router's MAC the requests came from, and ARP for nothing.
func TestRoutedOffSubnetThroughGateway(t *testing.T) {
	n := newRoutedNet()
	a := n.add(t, routedConfig("10.1.0.2", 1))
	b := n.add(t, routedConfig("10.2.0.2", 2))
	c := n.add(t, routedConfig("10.2.0.3", 3))
	appA, appB, appC := openRNApp(t, a, abi.ClassLow), openRNApp(t, b, abi.ClassLow), openRNApp(t, c, abi.ClassLow)
	appA.op(t, abi.OpRead, 0, appB, 4096)
	appA.op(t, abi.OpWrite, 1, appC, 3000)
	appA.op(t, abi.OpRead, 2, appC, 100)
	appA.done(t, n, 3, abi.StatusOK)
	if !appA.same(0, appB, 4096) || !appA.same(1, appC, 3000) || !appA.same(2, appC, 100) {
		t.Fatal("data mismatch")
	}
	arps, ip := n.since(0)
	if len(arps) != 1 || arps[0].Op != wire.ARPRequest || arps[0].TargetIP != ipOf("10.1.0.1") || arps[0].SenderIP != ipOf("10.1.0.2") {
		t.Fatalf("want one ARP request, for the gateway 10.1.0.1: %+v", arps)
	}
	for _, x := range ip {
		switch x.from {
		case 0:
			if x.f.DstMAC != n.rtr[0].mac {
				t.Fatalf("a sent a frame to %v, not to its gateway", x.f.DstMAC)
			}
		default: // b, c: answer to the MAC the request came from, the router's
			if x.f.DstMAC != n.rtr[1].mac {
				t.Fatalf("node %d answered to %v, not to the router", x.from, x.f.DstMAC)
			}
		}
	}
	if e := a.nbr.lookup(ipOf("10.1.0.1"), false); e == nil || e.state != nbrResolved || e.mac != n.rtr[0].mac {
		t.Fatalf("gateway entry %+v", e)
	}
	for _, dst := range []string{"10.2.0.2", "10.2.0.3"} {
		if a.nbr.lookup(ipOf(dst), false) != nil {
			t.Fatalf("a has a neighbor entry for %s, behind its gateway", dst)
		}
	}
	if sb, sc := b.Stats(), c.Stats(); sb.ARPRequests+sc.ARPRequests != 0 || a.Stats().ARPRequests != 1 {
		t.Fatalf("ARP requests: a %d, b %d, c %d", a.Stats().ARPRequests, sb.ARPRequests, sc.ARPRequests)
	}
	for _, nd := range n.nodes {
		if err := nd.c.Audit(); err != nil {
			t.Fatal(err)
		}
	}
}

// The routing table: the connected subnet, the gateway's default route
// and static routes in one longest-prefix match; each route's MTU sets
// its chunk size.
func TestRouteLookup(t *testing.T) {
	cfg := routedConfig("10.1.0.2", 1)
	cfg.Routes = []Route{
		{Dst: netip.MustParsePrefix("10.9.0.0/16"), Via: netip.MustParseAddr("10.1.0.254"), MTU: 1400},
		{Dst: netip.MustParsePrefix("10.9.8.0/24"), Via: netip.MustParseAddr("10.1.0.253")},
		{Dst: netip.MustParsePrefix("10.9.8.7/32")}, // on-link host route
		{Dst: netip.MustParsePrefix("192.168.0.0/16"), MTU: 576},
	}
	core := newCore(t, cfg, newTestTx(8))
	for _, tc := range []struct {
		dst, hop string
		chunk    int
	}{
		{"10.1.0.77", "10.1.0.77", 1408}, // connected
		{"10.3.0.1", "10.1.0.1", 1408},   // default route
		{"10.9.1.1", "10.1.0.254", wire.MaxPayload(1400)},
		{"10.9.8.1", "10.1.0.253", 1408}, // the /24 beats the /16
		{"10.9.8.7", "10.9.8.7", 1408},   // the /32 beats both
		{"192.168.3.4", "192.168.3.4", wire.MaxPayload(576)},
	} {
		r := core.routes.lookup(ipOf(tc.dst))
		if r == nil || r.nextHop(ipOf(tc.dst)) != ipOf(tc.hop) || r.maxPayload != tc.chunk {
			t.Errorf("%s: route %+v, want next hop %s, chunk %d", tc.dst, r, tc.hop, tc.chunk)
		}
	}
	want := []string{"10.9.8.7/32 on-link", "10.1.0.0/24 on-link", "10.9.8.0/24 via 10.1.0.253", "10.9.0.0/16 via 10.1.0.254 mtu 1400",
		"192.168.0.0/16 on-link mtu 576", "0.0.0.0/0 via 10.1.0.1"}
	var got []string
	for _, r := range cfg.RoutingTable() {
		got = append(got, r.String())
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("RoutingTable (-want +got)\n-%q\n+%q", want, got)
	}
	// Without Subnet every destination is on-link (the engine's meaning
	// before routing); without Gateway nothing is off-subnet.
	plain := testConfig("10.0.0.1", 1)
	if r := newCore(t, plain, newTestTx(8)).routes.lookup(ipOf("172.16.5.5")); r == nil || r.nextHop(ipOf("172.16.5.5")) != ipOf("172.16.5.5") {
		t.Fatalf("no Subnet: %+v", r)
	}
	cfg.Gateway = netip.Addr{}
	if r := newCore(t, cfg, newTestTx(8)).routes.lookup(ipOf("10.3.0.1")); r != nil {
		t.Fatalf("no Gateway: 10.3.0.1 routed by %+v", r)
	}
}

// Ops ARP for the next hop of their longest-prefix route.
func TestRouteNextHopARP(t *testing.T) {
	cfg := routedConfig("10.1.0.2", 1)
	cfg.Routes = []Route{
		{Dst: netip.MustParsePrefix("10.9.0.0/16"), Via: netip.MustParseAddr("10.1.0.254")},
		{Dst: netip.MustParsePrefix("10.9.8.0/24"), Via: netip.MustParseAddr("10.1.0.253")},
	}
	tx := newTestTx(16)
	c := newCore(t, cfg, tx)
	app := openApp(t, c, abi.ClassLow, 8)
	r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	dsts := []string{"10.9.8.5", "10.9.1.5", "10.3.0.1", "10.1.0.9", "10.9.8.6"}
	for k, d := range dsts {
		app.post(t, readCmd(app.slots[k], ipOf(d), r, 0, r, 0, 8, uint64(k)))
	}
	c.Poll(1000)
	var asked []string
	for _, fr := range tx.take() {
		var a wire.ARP
		if wire.DecodeARP(fr, &a) != nil {
			t.Fatal("a frame that is not ARP")
		}
		asked = append(asked, netip.AddrFrom4([4]byte{byte(a.TargetIP >> 24), byte(a.TargetIP >> 16), byte(a.TargetIP >> 8), byte(a.TargetIP)}).String())
	}
	// 10.9.8.6 shares 10.9.8.5's next hop: no second request.
	if want := "10.1.0.253 10.1.0.254 10.1.0.1 10.1.0.9"; strings.Join(asked, " ") != want {
		t.Fatalf("ARP asked for %v, want %s", asked, want)
	}
	if s := c.Stats(); s.OpsInFlight != 5 {
		t.Fatalf("ops waiting: %d", s.OpsInFlight)
	}
}

// A destination no route covers is UNREACHABLE at the Poll that takes
// its command: no ARP, no wait.
func TestNoRouteUnreachableAtOnce(t *testing.T) {
	cfg := routedConfig("10.1.0.2", 1)
	cfg.Gateway = netip.Addr{}
	tx := newTestTx(8)
	c := newCore(t, cfg, tx)
	app := openApp(t, c, abi.ClassLow, 2)
	r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.2.0.2"), r, 0, r, 0, 8, 7))
	c.Poll(5000)
	got := app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusUnreachable || got[0].Cookie != 7 || got[0].TotalDelayNs != 0 {
		t.Fatalf("%+v", got)
	}
	if fr := tx.take(); len(fr) != 0 {
		t.Fatalf("%d frames sent for an op with no route", len(fr))
	}
	if s := c.Stats(); s.NoRoute != 1 || s.ARPRequests != 0 || s.Completed[abi.StatusUnreachable] != 1 {
		t.Fatalf("%+v", s)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
}

// A route's MTU sets the chunk size of the data sent toward its
// destinations: the WRITE data the initiator sends, and the READ data the
// serving engine streams back (by its own route to the initiator).
func TestRouteMTUSetsChunkSize(t *testing.T) {
	n := newRoutedNet()
	ca := routedConfig("10.1.0.2", 1)
	ca.Routes = []Route{{Dst: netip.MustParsePrefix("10.2.0.0/16"), Via: netip.MustParseAddr("10.1.0.1"), MTU: 576}}
	cb := routedConfig("10.2.0.2", 2)
	cb.Routes = []Route{{Dst: netip.MustParsePrefix("10.1.0.0/24"), Via: netip.MustParseAddr("10.2.0.1"), MTU: 1000}}
	a, b := n.add(t, ca), n.add(t, cb)
	c := n.add(t, routedConfig("10.1.0.3", 3)) // a's own subnet: the port's MTU
	appA, appB, appC := openRNApp(t, a, abi.ClassLow), openRNApp(t, b, abi.ClassLow), openRNApp(t, c, abi.ClassLow)
	appA.op(t, abi.OpWrite, 0, appB, 4096)
	appA.op(t, abi.OpRead, 1, appB, 4096)
	appA.op(t, abi.OpWrite, 2, appC, 4096)
	appA.done(t, n, 3, abi.StatusOK)
	_, ip := n.since(0)
	// The largest chunk of type t sent to dst.
	most := func(t wire.Type, dst string) int {
		m := 0
		for _, x := range ip {
			if x.f.Type == t && x.f.DstIP == ipOf(dst) {
				m = max(m, x.plen)
			}
		}
		return m
	}
	if got, want := most(wire.TypeWriteData, "10.2.0.2"), wire.MaxPayload(576); got != want {
		t.Errorf("WRITE data toward 10.2/16 (mtu 576): chunks up to %d, want %d", got, want)
	}
	if got, want := most(wire.TypeReadResp, "10.1.0.2"), wire.MaxPayload(1000); got != want {
		t.Errorf("READ data b streams toward 10.1/24 (mtu 1000): chunks up to %d, want %d", got, want)
	}
	if got, want := most(wire.TypeWriteData, "10.1.0.3"), wire.MaxPayload(1500); got != want {
		t.Errorf("WRITE data on-link (the port's mtu 1500): chunks up to %d, want %d", got, want)
	}
	if !appA.same(0, appB, 4096) || !appA.same(1, appB, 4096) || !appA.same(2, appC, 4096) {
		t.Fatal("data mismatch")
	}
}

// Every field of the routing config is checked, and the error names it.
func TestRouteConfigRejects(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"subnet without LocalIP", func(c *Config) { c.Subnet = p("10.7.0.0/16") }, "Subnet"},
		{"IPv6 subnet", func(c *Config) { c.Subnet = p("fd00::/64") }, "Subnet"},
		{"gateway off-subnet", func(c *Config) { c.Gateway = a("10.3.0.1") }, "Gateway"},
		{"gateway is us", func(c *Config) { c.Gateway = c.LocalIP }, "Gateway"},
		{"gateway broadcast", func(c *Config) { c.Gateway = a("255.255.255.255") }, "Gateway"},
		{"gateway without subnet", func(c *Config) { c.Subnet = netip.Prefix{} }, "Gateway"},
		{"gateway with /0 subnet", func(c *Config) { c.Subnet = p("0.0.0.0/0") }, "Gateway"},
		{"route without dst", func(c *Config) { c.Routes = []Route{{Via: a("10.1.0.9")}} }, "Routes[0].Dst"},
		{"route via off-link", func(c *Config) { c.Routes = []Route{{Dst: p("10.9.0.0/16"), Via: a("10.4.0.1")}} }, "Routes[0].Via"},
		{"route via multicast", func(c *Config) { c.Routes = []Route{{Dst: p("10.9.0.0/16"), Via: a("224.0.0.1")}} }, "Routes[0].Via"},
		{"route mtu small", func(c *Config) { c.Routes = []Route{{Dst: p("10.9.0.0/16"), MTU: 575}} }, "Routes[0].MTU"},
		{"route mtu above port", func(c *Config) { c.Routes = []Route{{Dst: p("10.9.0.0/16"), MTU: 1501}} }, "Routes[0].MTU"},
		{"route duplicates subnet", func(c *Config) { c.Routes = []Route{{Dst: p("10.1.0.7/24"), Via: a("10.1.0.9")}} }, "Routes[0].Dst"},
		{"route duplicates default", func(c *Config) { c.Routes = []Route{{Dst: p("0.0.0.0/0"), Via: a("10.1.0.9")}} }, "Routes[0].Dst"},
		{"routes duplicate", func(c *Config) {
			c.Routes = []Route{{Dst: p("10.9.0.0/16"), Via: a("10.1.0.9")}, {Dst: p("10.9.1.0/16"), Via: a("10.1.0.8")}}
		}, "Routes[1].Dst"},
		{"too many routes", func(c *Config) { c.Routes = make([]Route, MaxRoutes+1) }, "Routes"},
		{"dscp", func(c *Config) { c.DSCP[abi.ClassHigh] = 64 }, "DSCP[high]"},
		{"reachable", func(c *Config) { c.NeighborReachable = 0 }, "NeighborReachable"},
		{"core id", func(c *Config) { c.CoreID = 64 }, "CoreID"},
		{"udp port range", func(c *Config) { c.UDPPort = 0xC000 - 63 }, "UDPPort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := routedConfig("10.1.0.2", 1)
			tc.edit(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), ": "+tc.field) {
				t.Fatalf("want an error naming %s, got %v", tc.field, err)
			}
		})
	}
	// Accepted: a /32 reaching its gateway by an on-link host route (a
	// cloud VM), an on-link route, a route via a host of the subnet.
	ok := routedConfig("10.1.0.2", 1)
	ok.Subnet = p("10.1.0.2/32")
	ok.Routes = []Route{{Dst: p("10.1.0.1/32")}, {Dst: p("10.9.0.0/16"), Via: a("10.1.0.1"), MTU: 576}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	ok = testConfig("10.0.0.1", 1)
	ok.Routes = []Route{{Dst: p("10.9.0.0/16"), Via: a("10.0.0.254")}} // no Subnet: every address on-link
	ok.DSCP = [abi.NumClass]uint8{10, 63}
	ok.CoreID, ok.UDPPort = 63, 0xC000-64
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The routed data path allocates nothing per op: the route lookup, the
// neighbor's aging check (and its refresh, past 3/4 of its time), a
// route's chunk size on both sides, the op's port.
func TestRoutedHotPathAllocs(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	for _, c := range []*Config{&ca, &cb} {
		c.Subnet = netip.MustParsePrefix(c.LocalIP.String() + "/24")
		c.Gateway = netip.MustParseAddr("10.0.0.254")
		c.Routes = []Route{{Dst: netip.MustParsePrefix("10.0.0.0/30"), MTU: 1000}}
		c.NeighborReachable = 200 * time.Microsecond // refreshed every few ops
		c.ARPRetry = 50 * time.Microsecond
	}
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, abi.ClassLow, 1)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ := p.b.RegisterRegion(srv.id, make([]byte, 8192), abi.PermAll, testKr)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 8192), abi.PermAll, testKr)
	cmds := [2]*abi.Command{
		app.keyed(readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 4096, 1)),
		app.keyed(writeCmd(app.slots[0], ipOf("10.0.0.2"), rs, 4096, rd, 4096, 4096, 2)),
	}
	var cpl abi.Completion
	k := 0
	op := func() {
		b := app.cmd.Reserve()
		cmds[k%2].Encode(b)
		k++
		app.cmd.Commit()
		app.cmd.Publish()
		for range 6 {
			p.a.Poll(p.now)
			p.ta.deliverTo(p.now, p.b)
			p.b.Poll(p.now)
			p.tb.deliverTo(p.now, p.a)
		}
		p.a.Poll(p.now)
		cpl.Decode(app.cpl.Peek())
		app.cpl.Advance()
		app.cpl.Release()
		p.now += 20_000
	}
	op() // resolves b
	allocs := testing.AllocsPerRun(200, op)
	if s := p.a.Stats(); allocs != 0 || cpl.Status != abi.StatusOK || s.NeighborRefreshes == 0 || s.NeighborExpiries != 0 {
		t.Fatalf("%v allocs per op, status %v, refreshes %d, expiries %d", allocs, cpl.Status, s.NeighborRefreshes, s.NeighborExpiries)
	}
}
