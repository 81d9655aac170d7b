package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/metrics"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// An engine of two cores, scraped as rmad scrapes it (each core read
// once per scrape, its own stats and delays: ctl.Server.CoreStats): each
// core's series carry its core label, each portal's gauges the core that
// serves it, the cores' counters add up to the engine's, and the page
// passes promtool.
func TestScrapeCores(t *testing.T) {
	delays := []*telemetry.Delays{new(telemetry.Delays), new(telemetry.Delays)}
	e := enginetest.Start(t, enginetest.Opts{Cores: 2, Engine: func(c *engine.Config) {
		c.Delays, c.HairpinSelf = delays[0], true
		c.Timeout = time.Second // the reads must end OK on a busy host too
	}})
	e.Group.SetDelays(1, delays[1]) // before any op: core 1 has done nothing yet
	limits := metrics.Limits{WindowBytes: 256 << 10, Slots: 64, Portals: 4, Regions: 32, MaxRegionsPerPortal: 256, MaxPortalBytes: 4 << 30}
	var cores []metrics.Core
	for i, d := range delays {
		cores = append(cores, metrics.Core{ID: i, Limits: limits, Snapshot: func(s *metrics.Snapshot) (err error) {
			s.Stats, err = e.Server.CoreStats(i, func(*engine.Core) { s.Delays = *d })
			return err
		}})
	}
	col, err := metrics.NewCollector(metrics.Config{Cores: cores, PortalSeries: true})
	if err != nil {
		t.Fatal(err)
	}
	// A portal on each core reads the other's region.
	var ps [2]*portal.Portal
	var rs [2]*portal.Region
	for i := range ps {
		p, err := portal.DialOptions(e.Socket, "p", portal.Options{PinCore: true, Core: i})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if rs[i], err = p.RegisterRegion(64<<10, abi.PermRemoteRead|abi.PermLocalWrite); err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	const reads = 40
	for i, p := range ps {
		src := rs[1-i]
		slots, err := p.AllocSlots(1)
		if err != nil {
			t.Fatal(err)
		}
		id := p.Identity()
		for k := range reads {
			if err := p.Submit(&portal.Op{
				Type: portal.OpRead, Slot: slots[0], Cookie: uint64(k),
				Remote: id.Addr, RemoteRegion: src.ID(), RemoteOffset: uint64(k) * 64, Key: src.DeriveKey(id.Addr, id.PID, abi.OpRead),
				Local: rs[i], LocalOffset: uint64(k) * 64, Length: 64,
			}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out := make([]abi.Completion, 1)
			_, err := p.Wait(ctx, out)
			cancel()
			if err != nil || out[0].Status != abi.StatusOK {
				t.Fatalf("core %d read %d: %+v, %v", i, k, out[0], err)
			}
		}
	}
	// The cores hand their delay samples over a millisecond after the
	// last completion at the latest.
	pg := scrape(t, col)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); pg = scrape(t, col) {
		n := 0.0
		for _, c := range []string{"0", "1"} {
			n += float64(pg.find("onerma_op_total_delay_seconds", map[string]string{"core": c, "op": "READ"}).GetHistogram().GetSampleCount())
		}
		if n == 2*reads {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	promtoolCheck(t, pg.text)
	all, err := e.Server.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	var posted float64
	for _, c := range []string{"0", "1"} {
		if v := pg.value("onerma_core_up", map[string]string{"core": c}); v != 1 {
			t.Errorf("core %s up = %v", c, v)
		}
		ok := pg.value("onerma_completions_total", map[string]string{"core": c, "op": "READ", "status": "OK"})
		if ok != reads {
			t.Errorf("core %s: %v READs OK, want %d", c, ok, reads)
		}
		if v := pg.value("onerma_portal_slots", map[string]string{"core": c}); v != 1 {
			t.Errorf("core %s's portal holds %v slots, want 1", c, v)
		}
		if m := pg.find("onerma_op_total_delay_seconds", map[string]string{"core": c, "op": "READ"}); m == nil || m.GetHistogram().GetSampleCount() != reads {
			t.Errorf("core %s: READ delay histogram %v, want %d samples", c, m, reads)
		}
		posted += pg.value("onerma_commands_posted_total", map[string]string{"core": c})
	}
	if posted != float64(all.Posted) || posted != 2*reads {
		t.Errorf("posted: cores' sum %v, engine's %d, want %d", posted, all.Posted, 2*reads)
	}
}
