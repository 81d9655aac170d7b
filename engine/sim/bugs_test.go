package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
)

// Targeted scenarios: scripted ops on a quiet network, with every
// invariant of a random run checked. The TestCoreBug* tests are the
// repros of core bugs the simulator found, kept as regression tests.

// scripted is a quiet configuration: no application posts on its own
// (Clients is empty), no faults; only the scripts act.
func scripted(nodes int, static bool) Config {
	c := Clean(1)
	c.Name = "scripted"
	c.Nodes = nodes
	c.StaticNeighbors = static
	c.MTU = 1500
	c.App.Clients = []int{}
	c.App.PortalsPerNode = 1
	c.App.SlotsPerPortal = 8
	c.App.BadRate = 0
	c.Faults = FaultConfig{}
	c.ShutdownAtEnd = false
	c.PostNs = 5_000_000
	c.MustSee = nil
	return c
}

// post returns a script step: node's first portal posts one op of kind on
// a 512-byte range of the first live remote-readable region of node tgt
// (tgt < 0: no target), with edit applied last.
func post(node int, kind opKind, tgt int, edit func(*abi.Command)) func(*Sim) {
	return func(s *Sim) {
		p := s.nodes[node].app.portals[0]
		var rg *region
		for _, r := range s.regions {
			if tgt >= 0 && r.node == tgt && !r.sink && r.deadAt == math.MaxInt64 {
				rg = r
				break
			}
		}
		var m func(*op, *abi.Command)
		if edit != nil {
			m = func(o *op, c *abi.Command) { edit(c) }
		}
		if !p.postOp(kind, rg, 512, 0, m) {
			s.fail("script: could not post")
		}
		p.cmd.Publish()
	}
}

func at(us int64, do func(*Sim)) scriptStep { return scriptStep{at: us * 1000, do: do} }

// TestScriptedRead: the script machinery itself, on a read that must work.
func TestScriptedRead(t *testing.T) {
	for _, static := range []bool{true, false} {
		c := scripted(2, static)
		c.MustSee = []abi.Status{abi.StatusOK}
		c.scripts = []scriptStep{at(10, post(0, kValid, 1, nil)), at(20, post(1, kValid, 0, nil))}
		if _, err := Run(c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCoreBugNeighborTableLeak: neighbor entries for addresses that never
// answer ARP are never reclaimed. Once an application has posted ops to
// NeighborTable/2 dead addresses (a typo, a decommissioned peer, or on
// purpose), every op to a live peer the core has not resolved yet fails at
// once with UNREACHABLE, for every portal of the core, forever: one
// application denies the others the network.
//
// Here node 0 posts ops to 4 distinct dead addresses (table of 8 entries:
// 4 usable); they get UNREACHABLE after ResolveTimeout, as they should.
// A millisecond later it reads from node 1, which is up and answers ARP:
// the op completes UNREACHABLE at once (want OK).
func TestCoreBugNeighborTableLeak(t *testing.T) {
	c := scripted(2, false)
	c.NeighborTable = 8
	c.MustSee = []abi.Status{abi.StatusOK}
	for i := range 4 {
		c.scripts = append(c.scripts, at(10, post(0, kUnreachable, -1, func(cmd *abi.Command) {
			cmd.RemoteAddr = 10<<24 | 250<<8 | uint32(1+i)
		})))
	}
	resolve := int64(c.Engine.ResolveTimeout / time.Microsecond)
	c.scripts = append(c.scripts, at(resolve+1000, post(0, kValid, 1, nil)))
	if _, err := Run(c); err != nil {
		t.Fatal(err)
	}
}

// TestCoreBugOrphanCountedAsCompleted: Stats.Completed is documented as
// "completions written, by status", and ClosePortal counts the queued ops
// it drops only in Orphaned; but an op orphaned while in service is
// counted in both Completed and Orphaned when it finishes, although no
// completion is written. Here node 0's op is in service (node 1 is
// stalled) when its portal closes; it times out as an orphan:
// Completed[TIMEOUT] becomes 1 with no completion written.
func TestCoreBugOrphanCountedAsCompleted(t *testing.T) {
	c := scripted(2, true)
	c.scripts = []scriptStep{
		at(10, func(s *Sim) {
			n := s.nodes[1]
			n.busyUntil = s.now + 1_000_000
			n.reschedule()
		}),
		at(10, post(0, kValid, 1, nil)),
		at(20, func(s *Sim) { s.nodes[0].app.crash() }),
	}
	_, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
}

// TestSelfReadWithHairpin: a read of the node's own memory through its own
// address works when the fabric returns frames addressed to their sender
// (the core sends them to its own MAC).
func TestSelfReadWithHairpin(t *testing.T) {
	c := Clean(5)
	c.App.SelfReads = 0.3
	c.Net.Hairpin = true
	if _, err := Run(c); err != nil {
		t.Fatal(err)
	}
}

// TestCoreBugSelfReadNeedsHairpin: a read aimed at the engine's own
// address is sent to the wire with the engine's own MAC as destination.
// Switches and Linux bridges do not send a frame back out of the port it
// came in on, so on a real network such an op always TIMEOUTs. The core
// (or its port driver) must loop self-addressed frames back internally.
func TestCoreBugSelfReadNeedsHairpin(t *testing.T) {
	c := scripted(2, true)
	c.scripts = []scriptStep{at(10, func(s *Sim) {
		p := s.nodes[0].app.portals[0]
		if !p.postOp(kValid, p.src, 512, 0, nil) {
			s.fail("script: could not post")
		}
		p.cmd.Publish()
	})}
	_, err := Run(c)
	if err != nil {
		if strings.Contains(err.Error(), "TIMEOUT") {
			t.Fatalf("self read timed out on a switch without hairpin:\n%v", err)
		}
		t.Fatal(err)
	}
}

// TestSinkDeregisteredInFlight: a read is in service (the server is
// stalled) when the application deregisters its sink; the responses that
// arrive afterwards must not land (the old memory is poisoned and checked)
// and the op must fail (TIMEOUT), not complete OK.
func TestSinkDeregisteredInFlight(t *testing.T) {
	c := scripted(2, true)
	c.MustSee = []abi.Status{abi.StatusTimeout}
	c.scripts = []scriptStep{
		at(10, func(s *Sim) {
			n := s.nodes[1]
			n.busyUntil = s.now + 100_000 // serves 100 µs later, before TIMEOUT
			n.reschedule()
		}),
		at(10, post(0, kValid, 1, nil)),
		at(20, func(s *Sim) {
			a := s.nodes[0].app
			a.churnSink(a.portals[0])
		}),
	}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Cores[0]; st.RxStale == 0 {
		t.Errorf("node 0 counted no stale response (%+v): the responses did not arrive after the deregistration", st)
	}
}
