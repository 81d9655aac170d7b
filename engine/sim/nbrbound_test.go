package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
)

// neighborAttack: on node 0, tenant 1 (its second portal) posts READs to
// 40 addresses nobody has (10.0.250.x, whose ARP nobody answers) in turn,
// one every 10 µs while it has a slot, for 3 ms; tenant 0 (its first
// portal) reads from nodes 1, 2 and 3, each a new neighbor it must
// resolve by ARP, at 0.5, 1.5 and 2.5 ms, and from all three again later.
// The neighbor table has 16 usable entries, the attacker 40 slots.
func neighborAttack(perTenant int) Config {
	c := scripted(4, false)
	c.NeighborTable = 32
	c.NeighborsPerTenant = perTenant
	c.ARPRate, c.ARPBurst = 10_000, 8 // the attacker's retries alone would be ~27,000 a second
	c.App.PortalsPerNode = 2
	c.App.SlotsPerPortal = 40
	c.tenantPerPortal = true
	c.MustSee = []abi.Status{abi.StatusOK, abi.StatusUnreachable}
	for i := range 300 {
		c.scripts = append(c.scripts, scriptStep{at: 10_000 + int64(i)*10_000, do: func(s *Sim) {
			p := s.nodes[0].app.portals[1]
			if len(p.idle) == 0 {
				return
			}
			if !p.postOp(kUnreachable, nil, 512, 0, func(o *op, cmd *abi.Command) {
				cmd.RemoteAddr = 10<<24 | 250<<8 | uint32(1+i%40)
			}) {
				s.fail("script: could not post")
			}
			p.cmd.Publish()
		}})
	}
	for k, tgt := range []int{1, 2, 3, 1, 2, 3} {
		c.scripts = append(c.scripts, at(500+int64(k)*1000, post(0, kValid, tgt, nil)))
	}
	return c
}

// TestNeighborTableAttackBounded: the attacker's incomplete entries are
// bounded (4 at once), so the victim's reads all resolve their new
// neighbors and complete OK (the simulator fails a valid op that ends
// UNREACHABLE), and node 0's ARP requests stay within ARPRate and ARPBurst.
func TestNeighborTableAttackBounded(t *testing.T) {
	c := neighborAttack(4)
	r, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Cores[0] // node 0's only core
	bound := uint64(c.ARPBurst) + uint64(math.Ceil(float64(c.ARPRate)*float64(r.EndNs)/1e9))
	if st.ARPRequests > bound || st.ARPRateLimited == 0 || st.NeighborRefused == 0 || st.NeighborTableFull != 0 {
		t.Fatalf("node 0: %d ARP requests in %d ns (bound %d), %d deferred, %d ops refused for their tenant, table full %d",
			st.ARPRequests, r.EndNs, bound, st.ARPRateLimited, st.NeighborRefused, st.NeighborTableFull)
	}
	if r.ByStatus[abi.StatusOK] < 6 {
		t.Fatalf("completions %v", r.ByStatus)
	}
	t.Logf("node 0: %d ARP requests in %d µs (bound %d), %d deferred; %d attack ops refused at once", st.ARPRequests, r.EndNs/1000, bound, st.ARPRateLimited, st.NeighborRefused)
}

// TestNeighborTableAttackUnbounded: without the per-tenant bound the same
// attack fills the table, and a victim's read of a live node ends
// UNREACHABLE at once; the simulator catches it.
func TestNeighborTableAttackUnbounded(t *testing.T) {
	_, err := Run(neighborAttack(0))
	if err == nil || !strings.Contains(err.Error(), "UNREACHABLE") {
		t.Fatalf("want the victim's read UNREACHABLE, got %v", err)
	}
}
