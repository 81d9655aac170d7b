package engine

import (
	"sync"
	"sync/atomic"
)

// TenantCounters are one tenant's counters on one core: what its own
// share of a pool (the solicitation window, the serving side's queues
// and contexts, the neighbour table) refused or delayed. The index is
// the tenant's PortalSpec.Tenant for the tenant's own ops, and its
// regions' owner tenant for what the serving side refuses on its
// regions' behalf. The control plane sums them over the cores
// (Core.TenantCounters).
type TenantCounters struct {
	// Epoch is the PortalSpec.TenantEpoch of the latest portal of this
	// index opened on the core: the counters are that tenant's since
	// its first portal here (the gauges are live whatever the epoch).
	Epoch uint64

	Posted uint64 // ops its portals posted on this core

	// The solicitation window (shares.go). ShareWaits: ops that waited
	// for window while their tenant was at its share (window was free,
	// but the op did not fit in the share and could not borrow: its
	// destination had not answered within Config.Responsive), counted
	// when they enter service or end DISPATCH_TIMEOUT.
	// ShareDispatchTimeouts: DISPATCH_TIMEOUTs of ops that did not fit
	// in their tenant's share when they expired. Borrowed and
	// BorrowedBytes: ops that entered service beyond the share, toward
	// responsive destinations, and the window they took.
	ShareWaits            uint64
	ShareDispatchTimeouts uint64
	Borrowed              uint64
	BorrowedBytes         uint64
	// Gauges: the window its ops in service hold now, its guaranteed
	// share (0 while it has no portal on the core), and its ops waiting
	// for window.
	WindowHeld  uint64
	WindowShare uint64
	Queued      uint64
	// The serving side, for requests naming its regions (bounds.go,
	// replay.go):
	//
	// Nacked: NACKed at once, their class queue at its threshold;
	// NackedOwner: NACKed at once, its regions already had
	// Config.InboundPerOwner requests queued; NackedSender: NACKed at
	// once, their source address already had InboundPerSender queued
	// for its regions.
	Nacked       uint64
	NackedOwner  uint64
	NackedSender uint64
	// PullsDeferred: write requests that waited for a pull context
	// because it held PullsPerOwner, or their source address
	// PullsPerSender for its regions, of them.
	PullsDeferred uint64
	// IVMismatch: dropped, their IV naming another address than their
	// source (before authentication: anyone can send these).
	IVMismatch uint64
	// ReplayLanesRefused: authenticated, dropped: their sender address
	// already had ReplayLanesPerSender lanes of its windows.
	ReplayLanesRefused uint64
	// ReplayEvictions: its windows forgotten to make room (by its own
	// new lanes, or, beyond its guaranteed share, another owner's).
	ReplayEvictions uint64
	// NeighborRefused: its ops completed UNREACHABLE at once, to a new
	// on-link neighbor, while it held Config.NeighborsPerTenant
	// incomplete neighbor entries already (neighbor.go).
	NeighborRefused uint64
}

// TenantCounters returns tenant's counters on this core (control plane);
// the zero value for an index at or beyond Config.Tenants.
func (c *Core) TenantCounters(tenant int) TenantCounters {
	if tenant < 0 || tenant >= len(c.tstats) {
		return TenantCounters{}
	}
	tc := c.tstats[tenant]
	q := &c.ini.tq[tenant]
	tc.WindowHeld, tc.WindowShare = uint64(q.held), uint64(q.share)
	switch {
	case c.ini.multi:
		for cl := range q.q {
			tc.Queued += uint64(q.q[cl].n)
		}
	case q.portals > 0: // the one tenant present: the class FIFOs hold its ops only
		tc.Queued = uint64(c.ini.queued)
	}
	return tc
}

// tenantGens is, per tenant index of an engine (PortalSpec.Tenant), how
// many of its portals are open on the engine's cores, the index's
// generation and its weight. The generation grows each time the index
// goes from no portal open to one, so that a tenant index the control
// plane hands to a new tenant (indices are reused once their tenant has
// left) does not inherit what the serving side keeps for the one before.
// The replay windows are keyed by it (replay.go): windows a tenant's
// requests moved, in its own namespace, are not those of its successor's
// regions. The weight is PortalSpec.Weight of the index's latest portal
// opened on any core: the serving side's queues weigh the owners of the
// regions they serve by it (fairq.go), whichever core the owner's
// portals are on. Shared by the cores of a Group; changed on the control
// plane only, read per request (the generation) and per turn of an owner
// (the weight).
type tenantGens struct {
	mu     sync.Mutex
	open   []int32
	gen    []atomic.Uint32
	weight []atomic.Int32
}

func newTenantGens(n int) *tenantGens {
	return &tenantGens{open: make([]int32, n), gen: make([]atomic.Uint32, n), weight: make([]atomic.Int32, n)}
}

// opened: a portal of tenant t, of weight w (1..MaxWeight), opened.
func (g *tenantGens) opened(t, w int) {
	g.mu.Lock()
	if g.open[t] == 0 {
		g.gen[t].Add(1)
	}
	g.open[t]++
	g.weight[t].Store(int32(w))
	g.mu.Unlock()
}

// closed: a portal of tenant t closed.
func (g *tenantGens) closed(t int) {
	g.mu.Lock()
	g.open[t]--
	g.mu.Unlock()
}

// of is tenant t's generation, in the bits a replay key holds.
func (g *tenantGens) of(t uint16) uint16 { return uint16(g.gen[t].Load()) & replayGenMask }

// weightOf is tenant t's weight: its latest portal's, 1 before it had one.
func (g *tenantGens) weightOf(t int32) int32 { return max(g.weight[t].Load(), 1) }
