package engine

import (
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// gatewayNet is a routed net with a on 10.1.0.0/24 and b on 10.2.0.0/24,
// after one READ a -> b: a's gateway entry resolved at n.now.
func gatewayNet(t *testing.T, edit ...func(*Config)) (n *routedNet, a *Core, appA, appB *rnApp) {
	t.Helper()
	n = newRoutedNet()
	ca := routedConfig("10.1.0.2", 1)
	for _, e := range edit {
		e(&ca)
	}
	a = n.add(t, ca)
	b := n.add(t, routedConfig("10.2.0.2", 2))
	appA, appB = openRNApp(t, a, abi.ClassLow), openRNApp(t, b, abi.ClassLow)
	appA.op(t, abi.OpRead, 0, appB, 64)
	appA.done(t, n, 1, abi.StatusOK)
	return n, a, appA, appB
}

// gw is a's gateway entry.
func gw(a *Core) *neighbor { return a.nbr.lookup(ipOf("10.1.0.1"), false) }

// wait steps the net for d, 50 µs a step.
func (n *routedNet) wait(d time.Duration) {
	for end := n.now + int64(d); n.now < end; n.now += 50_000 {
		n.step()
	}
}

// An op that uses an entry past 3/4 of its reachable time sends a new
// ARP request and goes on at once with the known MAC; the reply
// confirms the entry for another reachable time.
func TestNeighborRefreshBeforeExpiry(t *testing.T) {
	n, a, appA, appB := gatewayNet(t)
	t0 := gw(a).confirmed
	reach := int64(a.cfg.NeighborReachable)
	n.now = t0 + reach*8/10
	appA.op(t, abi.OpRead, 1, appB, 64)
	mark := len(n.log)
	n.step() // one poll: the op's request and the refresh leave together
	arps, ip := n.since(mark)
	if len(arps) != 1 || arps[0].TargetIP != ipOf("10.1.0.1") || arps[0].EthDst != wire.Broadcast {
		t.Fatalf("want one broadcast ARP request for the gateway, got %+v", arps)
	}
	if len(ip) != 1 || ip[0].f.Type != wire.TypeReadReq || ip[0].f.DstMAC != n.rtr[0].mac {
		t.Fatalf("the op waited for the refresh: %+v", ip)
	}
	appA.done(t, n, 1, abi.StatusOK)
	e := gw(a)
	if s := a.Stats(); s.NeighborRefreshes != 1 || s.NeighborExpiries != 0 || e.confirmed < t0+reach*8/10 || e.asked {
		t.Fatalf("after the refresh: entry %+v, stats %+v", e, s)
	}
	// Confirmed anew: past t0 + reach, before 3/4 of the new time, no ARP.
	n.now = t0 + reach*12/10
	mark = len(n.log)
	appA.op(t, abi.OpRead, 2, appB, 64)
	appA.done(t, n, 1, abi.StatusOK)
	if arps, _ := n.since(mark); len(arps) != 0 {
		t.Fatalf("ARP before 3/4 of the confirmed entry's time: %+v", arps)
	}
}

// With no reply to the refresh, the entry expires at the end of its
// reachable time: the next op waits for resolution as for a new
// neighbor, and succeeds once the gateway answers again (or is
// UNREACHABLE after ResolveTimeout if it never does).
func TestNeighborExpiry(t *testing.T) {
	n, a, appA, appB := gatewayNet(t)
	t0 := gw(a).confirmed
	reach := int64(a.cfg.NeighborReachable)
	n.noARP = true // the gateway forwards but no longer answers ARP
	n.now = t0 + reach*8/10
	appA.op(t, abi.OpRead, 1, appB, 64)
	appA.done(t, n, 1, abi.StatusOK) // the known MAC still works
	n.now = t0 + reach
	appA.op(t, abi.OpRead, 2, appB, 64)
	mark := len(n.log)
	n.step()
	arps, ip := n.since(mark)
	if len(ip) != 0 || len(arps) != 1 || a.ini.lists[listResolving].n != 1 {
		t.Fatalf("expired entry: %d frames sent, ARP %+v, %d ops resolving", len(ip), arps, a.ini.lists[listResolving].n)
	}
	if e, s := gw(a), a.Stats(); e.state != nbrIncomplete || s.NeighborExpiries != 1 {
		t.Fatalf("entry %+v, expiries %d", e, s.NeighborExpiries)
	}
	n.noARP = false
	n.wait(a.cfg.ARPRetry * 2) // the next retry is answered
	appA.done(t, n, 1, abi.StatusOK)
	if e := gw(a); e.state != nbrResolved {
		t.Fatalf("not resolved again: %+v", e)
	}

	// Never answered again: UNREACHABLE after ResolveTimeout.
	n.noARP = true
	n.now = gw(a).confirmed + reach
	appA.op(t, abi.OpRead, 3, appB, 64)
	n.wait(a.cfg.ResolveTimeout + time.Millisecond)
	appA.done(t, n, 1, abi.StatusUnreachable)
	if gw(a) != nil {
		t.Fatal("the unresolved entry outlived its last op")
	}
	if err := a.Audit(); err != nil {
		t.Fatal(err)
	}
}

// Static entries never age.
func TestStaticNeighborNeverAges(t *testing.T) {
	n, a, appA, appB := gatewayNet(t, func(c *Config) {
		c.Neighbors = []Neighbor{{IP: c.Gateway, MAC: wire.MAC{2, 0xee, 0, 0, 1, 1}}}
	})
	n.now += 5 * int64(a.cfg.NeighborReachable)
	appA.op(t, abi.OpRead, 1, appB, 64)
	appA.done(t, n, 1, abi.StatusOK)
	if arps, _ := n.since(0); len(arps) != 0 || gw(a).state != nbrStatic {
		t.Fatalf("ARP for a static gateway: %+v", arps)
	}
}

// The gateway's MAC changes (a replaced router): an unsolicited reply
// with the new MAC is ignored; the reply to the engine's own refresh is
// taken, and the ops after it reach the new MAC.
func TestNeighborMACChangeOnlyFromOwnRequest(t *testing.T) {
	n, a, appA, appB := gatewayNet(t)
	old := n.rtr[0].mac
	t0 := gw(a).confirmed
	n.rtr[0].mac = wire.MAC{2, 0xee, 0, 0, 1, 0x99}
	a.Receive(n.now, n.arpFromRouter(0, wire.ARPReply, a.out.mac, a.out.ip))
	if e, s := gw(a), a.Stats(); e.mac != old || s.ARPUnsolicited != 1 || s.NeighborChanges != 0 {
		t.Fatalf("unsolicited reply: entry %+v, stats %+v", e, s)
	}
	// The refresh at 3/4: the op sent with the old MAC is lost with the
	// old router; the refresh's reply brings the new MAC.
	n.now = t0 + int64(a.cfg.NeighborReachable)*8/10
	appA.op(t, abi.OpRead, 1, appB, 64)
	n.run()
	if e, s := gw(a), a.Stats(); e.mac != n.rtr[0].mac || s.NeighborChanges != 1 || s.NeighborRefreshes != 1 {
		t.Fatalf("after the refresh: entry %+v, stats %+v", e, s)
	}
	n.wait(a.cfg.Timeout + time.Millisecond)
	appA.done(t, n, 1, abi.StatusTimeout)
	appA.op(t, abi.OpRead, 2, appB, 64)
	appA.done(t, n, 1, abi.StatusOK)
	if !appA.same(2, appB, 64) {
		t.Fatal("data mismatch")
	}
}

// Gratuitous ARP from the gateway (its failover announcing a new MAC) is
// not learned: it makes the engine ask at once, at most once per
// ARPRetry, and the reply to that request is taken.
func TestGratuitousARPTriggersReARP(t *testing.T) {
	n, a, appA, appB := gatewayNet(t)
	old := n.rtr[0].mac
	n.rtr[0].mac = wire.MAC{2, 0xee, 0, 0, 1, 0x42}
	n.now += int64(a.cfg.ARPRetry) // the first request's rate limit is past
	gratuitous := n.arpFromRouter(0, wire.ARPRequest, wire.Broadcast, n.rtr[0].ip)
	a.Receive(n.now, gratuitous)
	if e := gw(a); e.mac != old || !e.asked {
		t.Fatalf("gratuitous ARP learned, or no request: %+v", e)
	}
	req := a.ini.out.tx.(*testTx).take()
	var m wire.ARP
	if len(req) != 1 || wire.DecodeARP(req[0], &m) != nil || m.Op != wire.ARPRequest || m.TargetIP != n.rtr[0].ip {
		t.Fatalf("want one ARP request for the gateway, got %d frames (%+v)", len(req), m)
	}
	a.Receive(n.now, gratuitous) // again, and as a reply: counted, not asked again yet
	a.Receive(n.now, n.arpFromRouter(0, wire.ARPReply, wire.Broadcast, n.rtr[0].ip))
	if fr := a.ini.out.tx.(*testTx).take(); len(fr) != 0 {
		t.Fatalf("%d more requests within ARPRetry", len(fr))
	}
	n.carry(0, req[0]) // the router answers the request with its new MAC
	n.step()
	if e, s := gw(a), a.Stats(); e.mac != n.rtr[0].mac || s.ARPGratuitous != 3 || s.NeighborRefreshes != 1 || s.NeighborChanges != 1 {
		t.Fatalf("after the reply: entry %+v, stats %+v", e, s)
	}
	appA.op(t, abi.OpRead, 1, appB, 64)
	appA.done(t, n, 1, abi.StatusOK)
}

// ARP replies no request of ours asked for are ignored and counted;
// requests teach nothing (the one for our address is answered).
func TestARPUnsolicitedIgnored(t *testing.T) {
	tx := newTestTx(16)
	c := newCore(t, testConfig("10.0.0.1", 1), tx)
	app := openApp(t, c, abi.ClassLow, 2)
	r, _ := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr)
	peer, peerMAC, evil := ipOf("10.0.0.9"), wire.MAC{2, 9, 9, 9, 9, 9}, wire.MAC{2, 6, 6, 6, 6, 6}
	reply := func(mac wire.MAC, edit func(*wire.ARP)) []byte {
		m := wire.ARP{Op: wire.ARPReply, SenderMAC: mac, SenderIP: peer, TargetMAC: c.out.mac, TargetIP: c.out.ip, EthDst: c.out.mac, EthSrc: mac}
		if edit != nil {
			edit(&m)
		}
		b := make([]byte, wire.MinFrame)
		wire.EncodeARP(b, &m)
		return b
	}
	now := int64(1000)
	c.Receive(now, reply(evil, nil)) // never asked
	if c.nbr.lookup(peer, false) != nil || c.Stats().ARPUnsolicited != 1 {
		t.Fatal("an unsolicited reply made an entry")
	}
	// A request for our address: answered, nothing learned.
	req := make([]byte, wire.MinFrame)
	wire.EncodeARP(req, &wire.ARP{Op: wire.ARPRequest, SenderMAC: evil, SenderIP: peer, TargetIP: c.out.ip, EthDst: wire.Broadcast, EthSrc: evil})
	c.Receive(now, req)
	if fr := tx.take(); len(fr) != 1 || c.nbr.lookup(peer, false) != nil {
		t.Fatalf("request for our address: %d answers, entry %+v", len(fr), c.nbr.lookup(peer, false))
	}
	app.post(t, readCmd(app.slots[0], peer, r, 0, r, 0, 8, 1))
	c.Poll(now) // asks for peer
	tx.take()
	for _, bad := range [][]byte{
		reply(evil, func(m *wire.ARP) { m.TargetMAC = evil }),                 // not to our MAC
		reply(evil, func(m *wire.ARP) { m.TargetIP = ipOf("10.0.0.3") }),      // not to our address
		reply(evil, func(m *wire.ARP) { m.SenderIP = ipOf("10.0.0.10") }),     // for an address we did not ask
		reply(wire.MAC{3, 1, 1, 1, 1, 1}, func(m *wire.ARP) { m.Op = 2 }),     // multicast sender MAC: dropped
		reply(evil, func(m *wire.ARP) { m.EthDst = wire.MAC{2, 5, 5, 5, 5} }), // another host's frame: dropped
	} {
		c.Receive(now, bad)
	}
	if e, s := c.nbr.lookup(peer, false), c.Stats(); e.state != nbrIncomplete || s.ARPUnsolicited != 4 || s.RxDropped != 2 {
		t.Fatalf("bad replies: entry %+v, unsolicited %d, dropped %d", e, s.ARPUnsolicited, s.RxDropped)
	}
	c.Receive(now, reply(peerMAC, nil)) // the answer to our request
	c.Receive(now, reply(evil, nil))    // a second answer: ignored
	c.Poll(now)
	fr := tx.take()
	var f wire.Fields
	if len(fr) != 1 || func() error { _, err := wire.Decode(fr[0], &f); return err }() != nil || f.DstMAC != peerMAC {
		t.Fatalf("the op's request went to %v, want %v", f.DstMAC, peerMAC)
	}
	if e, s := c.nbr.lookup(peer, false), c.Stats(); e.mac != peerMAC || s.ARPUnsolicited != 5 {
		t.Fatalf("entry %+v, unsolicited %d", e, s.ARPUnsolicited)
	}
	// A reply arriving after ResolveTimeout answers nothing any more.
	c.nbr.lookup(peer, false).asked = true
	c.Receive(now+int64(c.cfg.ResolveTimeout)+1, reply(evil, nil))
	if e := c.nbr.lookup(peer, false); e.mac != peerMAC {
		t.Fatalf("a late reply was taken: %+v", e)
	}
}
