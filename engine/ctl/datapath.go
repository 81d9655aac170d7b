package ctl

import (
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// The data path's counters of each tenant (engine.TenantCounters): every
// core keeps them by tenant index, and an index passes from tenant to
// tenant (quota.go); each tenure of an index has an epoch of its own
// (tenant.epoch, engine.PortalSpec.TenantEpoch), and a core's counters
// of an index are those of the epoch of the latest portal of that index
// it opened. A tenant's row sums the cores whose counters are of its
// epoch: the others still hold a former tenant's, or none.

// coreDatapath reads core's counters of every tenant index below n (on
// the core's goroutine).
func coreDatapath(core *engine.Core, n int) []engine.TenantCounters {
	out := make([]engine.TenantCounters, n)
	for i := range out {
		out[i] = core.TenantCounters(i)
	}
	return out
}

// sumDatapath sums each tenant index's counters over the cores (per: each
// core's, coreDatapath) that hold the index's latest epoch; the sum's
// Epoch is that epoch.
func sumDatapath(per [][]engine.TenantCounters) []engine.TenantCounters {
	if len(per) == 0 {
		return nil
	}
	out := make([]engine.TenantCounters, len(per[0]))
	for i := range out {
		for _, c := range per {
			if i < len(c) {
				out[i].Epoch = max(out[i].Epoch, c[i].Epoch)
			}
		}
		for _, c := range per {
			if i < len(c) && c[i].Epoch == out[i].Epoch {
				addTenantCounters(&out[i], &c[i])
			}
		}
	}
	return out
}

// addTenantCounters adds b's counters and gauges to a (not the epoch).
func addTenantCounters(a, b *engine.TenantCounters) {
	a.Posted += b.Posted
	a.ShareWaits += b.ShareWaits
	a.ShareDispatchTimeouts += b.ShareDispatchTimeouts
	a.Borrowed += b.Borrowed
	a.BorrowedBytes += b.BorrowedBytes
	a.WindowHeld += b.WindowHeld
	a.WindowShare += b.WindowShare
	a.Queued += b.Queued
	a.Nacked += b.Nacked
	a.NackedOwner += b.NackedOwner
	a.NackedSender += b.NackedSender
	a.PullsDeferred += b.PullsDeferred
	a.IVMismatch += b.IVMismatch
	a.ReplayLanesRefused += b.ReplayLanesRefused
	a.ReplayEvictions += b.ReplayEvictions
	a.NeighborRefused += b.NeighborRefused
}

// datapathMsg is c as the stats reply carries it.
func datapathMsg(c *engine.TenantCounters) *ctlmsg.TenantDatapath {
	return &ctlmsg.TenantDatapath{
		Posted:                c.Posted,
		ShareWaits:            c.ShareWaits,
		ShareDispatchTimeouts: c.ShareDispatchTimeouts,
		Borrowed:              c.Borrowed,
		BorrowedBytes:         c.BorrowedBytes,
		WindowHeld:            c.WindowHeld,
		WindowShare:           c.WindowShare,
		Queued:                c.Queued,
		Nacked:                c.Nacked,
		NackedOwner:           c.NackedOwner,
		NackedSender:          c.NackedSender,
		PullsDeferred:         c.PullsDeferred,
		IVMismatch:            c.IVMismatch,
		ReplayLanesRefused:    c.ReplayLanesRefused,
		ReplayEvictions:       c.ReplayEvictions,
		NeighborRefused:       c.NeighborRefused,
	}
}

// readDatapath reads every core's counters (one Exec each) and sums them
// (sumDatapath). The error is Exec's: a core is not running.
func (s *Server) readDatapath() ([]engine.TenantCounters, error) {
	per := make([][]engine.TenantCounters, len(s.execs))
	for i := range s.execs {
		if err := s.execs[i].Exec(func(core *engine.Core) { per[i] = coreDatapath(core, s.engineTenants) }); err != nil {
			return nil, err
		}
	}
	return sumDatapath(per), nil
}
