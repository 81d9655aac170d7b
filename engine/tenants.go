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
	return c.tstats[tenant]
}
