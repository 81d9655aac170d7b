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
		ARPRequests:       s.ARPRequests,
		ARPReplies:        s.ARPReplies,
		ARPUnsolicited:    s.ARPUnsolicited,
		ARPGratuitous:     s.ARPGratuitous,
		NeighborRefreshes: s.NeighborRefreshes,
		NeighborExpiries:  s.NeighborExpiries,
		NeighborChanges:   s.NeighborChanges,
		NoRoute:           s.NoRoute,
		WindowInUse:       s.WindowInUse,
		SlotsInUse:        s.SlotsInUse,
		OpsInFlight:       s.OpsInFlight,
		RingsCorrupt:      s.RingsCorrupt,
		SelfLoop:          s.SelfLoop,
		Doorbells:         s.Doorbells,
		DelayBatches:      s.DelayBatches,
		DelaySamples:      s.DelaySamples,
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

// Stats is the stats reply (rmactl stats): the core's counters, its
// port's, its fault injector's and its portals', all read in one
// Executor.Exec on the core's goroutine; then the poll loop's and the
// tenants' (the maxStatsTenants holding the most memory). also, if not
// nil, runs in the same Exec, so what it reads of the core is of the same
// moment (rmad's metrics copy the core's delay histograms there). The
// error is Exec's: the core is not running.
func (s *Server) Stats(also func(c *engine.Core)) (*ctlmsg.Stats, error) {
	var (
		st      engine.Stats
		fault   *ctlmsg.FaultStats
		port    *ctlmsg.PortStats
		portals []ctlmsg.PortalStats
	)
	faultStats, portStats := s.cfg.FaultStats, s.cfg.PortStats
	if err := s.exec.Exec(func(core *engine.Core) {
		st = core.Stats()
		if faultStats != nil {
			fault = faultStats()
		}
		if portStats != nil {
			port = portStats()
		}
		portals = s.portalStats(core)
		if also != nil {
			also(core)
		}
	}); err != nil {
		return nil, err
	}
	m := StatsMsg(&st)
	m.Fault, m.Port, m.Portals = fault, port, portals
	m.Tenants = largest(s.Tenants(), maxStatsTenants)
	if s.cfg.LoopStats != nil {
		m.Loop = s.cfg.LoopStats()
	}
	return m, nil
}

// portalStats describes every portal the server opened, in id order (on
// the core's goroutine: owner and ownerName are touched only there).
func (s *Server) portalStats(core *engine.Core) []ctlmsg.PortalStats {
	ids := make([]engine.PortalID, 0, len(s.owner))
	for id := range s.owner {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]ctlmsg.PortalStats, 0, len(ids))
	for _, id := range ids {
		p, ok := core.PortalStats(id)
		if !ok {
			continue // closed by the core itself and not reused
		}
		out = append(out, ctlmsg.PortalStats{
			ID: uint32(id), Name: s.ownerName[id], PID: p.PID, UID: s.owner[id].peer.uid, Tenant: s.owner[id].tenant.name,
			Class: p.Class.String(), Regions: p.Regions, RegionBytes: p.RegionBytes,
			Slots: p.Slots, MaxSlots: p.MaxSlots, InFlight: p.Pending,
			CmdDepth: p.CmdDepth, CmdCap: p.CmdCap, CplDepth: p.CplDepth, CplCap: p.CplCap, Closed: p.Dead,
		})
	}
	return out
}
