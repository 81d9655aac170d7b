package ctl_test

import (
	"os"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
)

// TestServerStats: Server.Stats (the stats reply rmactl prints and rmad's
// metrics read) names each portal's uid and the regions it holds, and
// runs its also closure in the same Exec as the counters it returns.
func TestServerStats(t *testing.T) {
	e := setup(t, nil)
	p := dial(t, e, "stats")
	for _, size := range []uint64{4096, 8192} {
		if _, err := p.RegisterRegion(size, abi.PermAll); err != nil {
			t.Fatal(err)
		}
	}
	var (
		posted uint64
		ran    bool
	)
	st, err := e.srv.Stats(func(_ int, c *engine.Core) { posted, ran = c.Stats().Posted, true })
	if err != nil {
		t.Fatal(err)
	}
	if !ran || posted != st.Posted {
		t.Fatalf("also ran %v, saw %d posted; the reply says %d", ran, posted, st.Posted)
	}
	if len(st.Portals) != 1 {
		t.Fatalf("portals %+v", st.Portals)
	}
	if ps := st.Portals[0]; ps.Name != "stats" || ps.UID != uint32(os.Getuid()) || ps.Regions != 2 || ps.RegionBytes != 12288 {
		t.Fatalf("portal %+v: want name stats, uid %d, 2 regions of 12288 bytes", ps, os.Getuid())
	}
}

// The stats reply carries the NACK threshold and its derivation the
// server was given (rmad's), to every asker.
func TestServerStatsNackThreshold(t *testing.T) {
	n := &ctlmsg.NackThreshold{Threshold: 849, Source: "derived", Derived: 849, Formula: "(7ms − 1.532ms − 0s) × 155340/s = 849.4 → 849 (within [1, 1024])"}
	e := setup(t, func(c *ctl.Config) { c.NackThreshold = n })
	st, err := e.srv.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.NackThreshold == nil || *st.NackThreshold != *n {
		t.Fatalf("nack_threshold %+v, want %+v", st.NackThreshold, n)
	}
}
