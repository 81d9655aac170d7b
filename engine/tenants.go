package engine

// TenantCounters are one tenant's counters on one core: what its own
// share of a pool (the solicitation window, the serving side's queues
// and contexts, the neighbour table) refused or delayed. The index is
// the tenant's PortalSpec.Tenant for the tenant's own ops, and its
// regions' owner tenant for what the serving side refuses on its
// regions' behalf. The control plane sums them over the cores
// (Core.TenantCounters).
type TenantCounters struct {
	Posted uint64 // ops its portals posted on this core

	// The serving side, for requests naming its regions (bounds.go,
	// replay.go):
	//
	// Nacked: NACKed at once, their class queue at its threshold;
	// NackedOwner: NACKed at once, its regions already had
	// Config.InboundPerOwner requests queued; NackedSender: NACKed at
	// once, their source address already had InboundPerSender queued.
	Nacked       uint64
	NackedOwner  uint64
	NackedSender uint64
	// PullsDeferred: write requests that waited for a pull context
	// because it held PullsPerOwner, or their source address
	// PullsPerSender, of them.
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
}

// TenantCounters returns tenant's counters on this core (control plane);
// the zero value for an index at or beyond Config.Tenants.
func (c *Core) TenantCounters(tenant int) TenantCounters {
	if tenant < 0 || tenant >= len(c.tstats) {
		return TenantCounters{}
	}
	return c.tstats[tenant]
}
