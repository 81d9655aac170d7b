package ctl

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// StatsMsg converts a core's counters to their control-socket form.
// TestStatsMsgCoversEveryField keeps it in step with engine.Stats.
func StatsMsg(s *engine.Stats) *ctlmsg.Stats {
	m := &ctlmsg.Stats{
		Posted:            s.Posted,
		Completed:         make(map[string]uint64),
		Orphaned:          s.Orphaned,
		EnteredSvc:        s.EnteredSvc,
		RxFrames:          s.RxFrames,
		RxDropped:         s.RxDropped,
		RxAuthFailed:      s.RxAuthFailed,
		RxStale:           s.RxStale,
		RxDuplicate:       s.RxDuplicate,
		RxIPOptions:       s.RxIPOptions,
		RxFragments:       s.RxFragments,
		RxTTLZero:         s.RxTTLZero,
		RxICMPMalformed:   s.RxICMPMalformed,
		RxICMPOther:       s.RxICMPOther,
		ICMPEchoReplies:   s.ICMPEchoReplies,
		ICMPRateLimited:   s.ICMPRateLimited,
		ICMPEchoTooBig:    s.ICMPEchoTooBig,
		ICMPFragNeeded:    s.ICMPFragNeeded,
		FragNeededMTU:     s.FragNeededMTU,
		TxFrames:          s.TxFrames,
		TxNoBuffer:        s.TxNoBuffer,
		ReqServed:         s.ReqServed,
		ReqNacked:         s.ReqNacked,
		ReqErrors:         s.ReqErrors,
		ReqAuthFailed:     s.ReqAuthFailed,
		ReqReplayed:       s.ReqReplayed,
		ReplayEvictions:   s.ReplayEvictions,
		Rekeys:            s.Rekeys,
		RemoteRekeys:      s.RemoteRekeys,
		IVErrors:          s.IVErrors,
		ReqExpired:        s.ReqExpired,
		PullsIssued:       s.PullsIssued,
		WritesCommitted:   s.WritesCommitted,
		PullsExpired:      s.PullsExpired,
		PullsInUse:        s.PullsInUse,
		ReqQueueMax:       s.ReqQueueMax,
		BulkHeld:          s.BulkHeld,
		RxSplit:           s.RxSplit,
		ARPRequests:       s.ARPRequests,
		ARPReplies:        s.ARPReplies,
		ARPUnsolicited:    s.ARPUnsolicited,
		ARPGratuitous:     s.ARPGratuitous,
		NeighborRefreshes: s.NeighborRefreshes,
		NeighborExpiries:  s.NeighborExpiries,
		NeighborChanges:   s.NeighborChanges,
		NoRoute:           s.NoRoute,
		ARPRateLimited:    s.ARPRateLimited,
		NeighborRefused:   s.NeighborRefused,
		NeighborTableFull: s.NeighborTableFull,
		WindowInUse:       s.WindowInUse,
		SlotsInUse:        s.SlotsInUse,
		OpsInFlight:       s.OpsInFlight,
		RingsCorrupt:      s.RingsCorrupt,
		SelfLoop:          s.SelfLoop,
		Doorbells:         s.Doorbells,
		DoorbellsDeferred: s.DoorbellsDeferred,
		DelayBatches:      s.DelayBatches,
		DelaySamples:      s.DelaySamples,

		ReqNackedOwner:      s.ReqNackedOwner,
		ReqNackedSender:     s.ReqNackedSender,
		SenderOverflow:      s.SenderOverflow,
		PullsDeferredOwner:  s.PullsDeferredOwner,
		PullsDeferredSender: s.PullsDeferredSender,
		ReqIVMismatch:       s.ReqIVMismatch,
		ReplayLanesRefused:  s.ReplayLanesRefused,

		RekeysSuperseded: s.RekeysSuperseded,
	}
	if s.FragNeededDst != 0 {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], s.FragNeededDst)
		m.FragNeededDst = netip.AddrFrom4(a).String()
	}
	for st, n := range s.Completed {
		if n != 0 {
			m.Completed[abi.Status(st).String()] = n
		}
	}
	for st, n := range s.CompletedLookup {
		if n != 0 {
			if m.CompletedLookup == nil {
				m.CompletedLookup = make(map[string]uint64)
			}
			m.CompletedLookup[abi.Status(st).String()] = n
		}
	}
	for op := range s.CompletedByOp {
		for st, n := range s.CompletedByOp[op] {
			if n == 0 {
				continue
			}
			name := abi.Op(op).String()
			if op == 0 {
				name = "OTHER"
			}
			if m.CompletedByOp == nil {
				m.CompletedByOp = make(map[string]map[string]uint64)
			}
			if m.CompletedByOp[name] == nil {
				m.CompletedByOp[name] = make(map[string]uint64)
			}
			m.CompletedByOp[name][abi.Status(st).String()] = n
		}
	}
	return m
}

// Stats is the stats reply (rmactl stats): each core's counters, its
// port's, its fault injector's and its portals', read in one
// Executor.Exec on that core's goroutine, their sums (Stats.Cores when
// the engine has more than one core); then the poll loops' and the
// tenants' (the maxStatsTenants holding the most memory). also, if not
// nil, runs in each core's Exec, so what it reads of the core is of the
// same moment (rmad's metrics copy the core's delay histograms there).
// The error is Exec's: a core is not running.
func (s *Server) Stats(also func(core int, c *engine.Core)) (*ctlmsg.Stats, error) {
	m, _, dp, err := s.collect(also)
	if err != nil {
		return nil, err
	}
	m.Tenants = largest(s.tenantRows(dp), maxStatsTenants)
	return m, nil
}

// collect is Stats without the tenants, the tenant of each portal
// (keys[i] is Portals[i]'s), and the data path's counters of each
// tenant index (sumDatapath), read in the same Exec as the rest.
func (s *Server) collect(also func(core int, c *engine.Core)) (*ctlmsg.Stats, []tenantKey, []engine.TenantCounters, error) {
	n := len(s.execs)
	cores := make([]ctlmsg.CoreStats, n)
	sts := make([]engine.Stats, n)
	var (
		portals []ctlmsg.PortalStats
		keys    []tenantKey
	)
	per := make([][]engine.TenantCounters, n)
	withDP := func(i int, c *engine.Core) {
		per[i] = coreDatapath(c, s.engineTenants)
		if also != nil {
			also(i, c)
		}
	}
	for i := range s.execs {
		var err error
		if portals, err = s.readCore(i, &sts[i], &cores[i].Stats, portals, &keys, withDP); err != nil {
			return nil, nil, nil, err
		}
	}
	var sum engine.Stats
	for i := range sts {
		addStats(&sum, &sts[i])
	}
	m := StatsMsg(&sum)
	m.Fault, m.Port, m.Loop = cores[0].Fault, cores[0].Port, cores[0].Loop
	if n > 1 {
		for i := range cores {
			c := &cores[i]
			fault, port, loop := c.Fault, c.Port, c.Loop
			c.Core, c.Stats = i, *StatsMsg(&sts[i])
			c.Fault, c.Port, c.Loop = fault, port, loop
		}
		m.Fault, m.Port, m.Loop = sumCores(cores)
		m.Cores = cores
	}
	m.Portals = portals
	m.NackThreshold = s.cfg.NackThreshold
	return m, keys, sumDatapath(per), nil
}

// CoreStats is core i's part of the stats reply: its counters, its
// port's, fault injector's and loop's, and its portals, read as Stats
// reads each core (one Executor.Exec on its goroutine, also run in it);
// no tenants. rmad's metrics read each core so, once per scrape.
func (s *Server) CoreStats(i int, also func(c *engine.Core)) (*ctlmsg.Stats, error) {
	var (
		st engine.Stats
		m  ctlmsg.Stats
	)
	var a func(int, *engine.Core)
	if also != nil {
		a = func(_ int, c *engine.Core) { also(c) }
	}
	portals, err := s.readCore(i, &st, &m, nil, nil, a)
	if err != nil {
		return nil, err
	}
	out := StatsMsg(&st)
	out.Fault, out.Port, out.Loop, out.Portals = m.Fault, m.Port, m.Loop, portals
	return out, nil
}

// readCore reads core i's counters into st, its fault injector's, port's
// and loop's into m, and appends its portals to portals, in one Exec on
// its goroutine (also runs there too); keys, if not nil, gets each
// portal's tenant.
func (s *Server) readCore(i int, st *engine.Stats, m *ctlmsg.Stats, portals []ctlmsg.PortalStats, keys *[]tenantKey,
	also func(int, *engine.Core)) ([]ctlmsg.PortalStats, error) {
	faultStats, portStats, loopStats := s.cfg.FaultStats, s.cfg.PortStats, s.cfg.LoopStats
	if err := s.execs[i].Exec(func(core *engine.Core) {
		*st = core.Stats()
		if faultStats != nil {
			m.Fault = faultStats(i)
		}
		if portStats != nil {
			m.Port = portStats(i)
		}
		portals = s.portalStats(i, core, portals, keys)
		if also != nil {
			also(i, core)
		}
	}); err != nil {
		return nil, err
	}
	if loopStats != nil {
		m.Loop = loopStats(i)
	}
	return portals, nil
}

// portalStats appends every portal the server opened on core k, in id
// order, and its tenant to keys if not nil (on the core's goroutine: its
// book is touched only there).
func (s *Server) portalStats(k int, core *engine.Core, out []ctlmsg.PortalStats, keys *[]tenantKey) []ctlmsg.PortalStats {
	b := s.cores[k]
	ids := make([]engine.PortalID, 0, len(b.owner))
	for id := range b.owner {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p, ok := core.PortalStats(id)
		if !ok {
			continue // closed by the core itself and not reused
		}
		out = append(out, ctlmsg.PortalStats{
			ID: uint32(id), Core: uint32(k), Name: b.ownerName[id], PID: p.PID, UID: b.owner[id].peer.uid, Tenant: b.owner[id].tenant.name,
			Class: p.Class.String(), Regions: p.Regions, RegionBytes: p.RegionBytes,
			Slots: p.Slots, MaxSlots: p.MaxSlots, InFlight: p.Pending,
			CmdDepth: p.CmdDepth, CmdCap: p.CmdCap, CplDepth: p.CplDepth, CplCap: p.CplCap, Closed: p.Dead,
		})
		if keys != nil {
			*keys = append(*keys, b.owner[id].tenant.key)
		}
	}
	return out
}
