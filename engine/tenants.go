package engine

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
	for cl := range q.q {
		tc.Queued += uint64(q.q[cl].n)
	}
	return tc
}
