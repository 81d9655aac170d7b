package ctl

import (
	"testing"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// The engine-wide counters of the stats reply are the cores' sums; the
// deepest queue and the fragmentation-needed report are one core's.
func TestAddStats(t *testing.T) {
	a := engine.Stats{Posted: 3, ReqQueueMax: 9, ICMPFragNeeded: 1, FragNeededDst: 7, FragNeededMTU: 1400}
	a.Completed[1], a.CompletedByOp[1][2] = 4, 5
	b := engine.Stats{Posted: 2, ReqQueueMax: 4, ICMPFragNeeded: 2, FragNeededDst: 8, FragNeededMTU: 1280, WindowInUse: 64}
	b.Completed[1], b.CompletedByOp[1][2] = 1, 1
	var sum engine.Stats
	addStats(&sum, &a)
	addStats(&sum, &b)
	if sum.Posted != 5 || sum.Completed[1] != 5 || sum.CompletedByOp[1][2] != 6 || sum.WindowInUse != 64 ||
		sum.ReqQueueMax != 9 || sum.ICMPFragNeeded != 3 || sum.FragNeededDst != 8 || sum.FragNeededMTU != 1280 {
		t.Fatalf("%+v", sum)
	}
	f, p, l := sumCores([]ctlmsg.CoreStats{
		{Core: 0, Stats: ctlmsg.Stats{Loop: &ctlmsg.LoopStats{Iterations: 5}, Port: &ctlmsg.PortStats{Name: "p", Driver: ctlmsg.PortDriverStats{RxFrames: 1}, Dev: ctlmsg.PortDevStats{RxPackets: 9}}}},
		{Core: 1, Stats: ctlmsg.Stats{Loop: &ctlmsg.LoopStats{Iterations: 7}, Port: &ctlmsg.PortStats{Name: "p", Driver: ctlmsg.PortDriverStats{RxFrames: 2}, Dev: ctlmsg.PortDevStats{RxPackets: 4}}}},
	})
	// Each core's device counters are its queue pair's: they add up.
	if f != nil || l.Iterations != 12 || p.Driver.RxFrames != 3 || p.Dev.RxPackets != 13 || p.Name != "p" {
		t.Fatalf("fault %v, loop %+v, port %+v", f, l, p)
	}
}
