package ctl

import (
	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl/ctlmsg"
)

// The ctlmsg permission bits are engine.Perm's, value for value.
var _ = [1]struct{}{}[uint8(engine.PermLocalRead)-ctlmsg.PermLocalRead+
	uint8(engine.PermLocalWrite)-ctlmsg.PermLocalWrite+
	uint8(engine.PermRemoteRead)-ctlmsg.PermRemoteRead+
	uint8(engine.PermRemoteWrite)-ctlmsg.PermRemoteWrite+
	uint8(engine.PermRemoteRekey)-ctlmsg.PermRemoteRekey+
	uint8(engine.PermAll)-ctlmsg.PermAll]

// StatsMsg converts a core's counters to their control-socket form.
// TestStatsMsgCoversEveryField keeps it in step with engine.Stats.
func StatsMsg(s *engine.Stats) *ctlmsg.Stats {
	m := &ctlmsg.Stats{
		Posted:          s.Posted,
		Completed:       make(map[string]uint64),
		Orphaned:        s.Orphaned,
		EnteredSvc:      s.EnteredSvc,
		RxFrames:        s.RxFrames,
		RxDropped:       s.RxDropped,
		RxAuthFailed:    s.RxAuthFailed,
		RxStale:         s.RxStale,
		RxDuplicate:     s.RxDuplicate,
		TxFrames:        s.TxFrames,
		TxNoBuffer:      s.TxNoBuffer,
		ReqServed:       s.ReqServed,
		ReqNacked:       s.ReqNacked,
		ReqErrors:       s.ReqErrors,
		ReqAuthFailed:   s.ReqAuthFailed,
		ReqReplayed:     s.ReqReplayed,
		ReplayEvictions: s.ReplayEvictions,
		Rekeys:          s.Rekeys,
		RemoteRekeys:    s.RemoteRekeys,
		IVErrors:        s.IVErrors,
		ReqExpired:      s.ReqExpired,
		PullsIssued:     s.PullsIssued,
		WritesCommitted: s.WritesCommitted,
		PullsExpired:    s.PullsExpired,
		PullsInUse:      s.PullsInUse,
		ReqQueueMax:     s.ReqQueueMax,
		ARPRequests:     s.ARPRequests,
		ARPReplies:      s.ARPReplies,
		WindowInUse:     s.WindowInUse,
		SlotsInUse:      s.SlotsInUse,
		OpsInFlight:     s.OpsInFlight,
		RingsCorrupt:    s.RingsCorrupt,
		SelfLoop:        s.SelfLoop,
		Doorbells:       s.Doorbells,
		DelayBatches:    s.DelayBatches,
		DelaySamples:    s.DelaySamples,
	}
	for st, n := range s.Completed {
		if n != 0 {
			m.Completed[abi.Status(st).String()] = n
		}
	}
	return m
}
