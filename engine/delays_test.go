package engine

import (
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry"
)

// TestConfigDelays: the histograms a driver gives the core (Config.Delays)
// hold exactly the delays of the completions the application read, by
// op, once the batch holding them is flushed (FlushNs after the oldest),
// and not before.
func TestConfigDelays(t *testing.T) {
	tx := newTestTx(256)
	cfg := testConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true // through tx, so a read takes time
	cfg.Delays = new(telemetry.Delays)
	c := newCore(t, cfg, tx)
	app := openApp(t, c, abi.ClassLow, 8)
	src, dst := make([]byte, 4096), make([]byte, 4096)
	rs, _ := c.RegisterRegion(app.id, src, abi.PermAll, testKr)
	rd, _ := c.RegisterRegion(app.id, dst, abi.PermAll, testKr)
	me := ipOf("10.0.0.1")
	var want telemetry.Delays
	now, n := int64(1_000_000), 0
	for round := range 6 {
		for k, s := range app.slots {
			cmd := readCmd(s, me, rs, uint64(64*k), rd, 0, 64, uint64(n))
			switch {
			case round == 4:
				cmd.Op = abi.OpWrite
				cmd.RemoteRegion, cmd.LocalRegion = rd, rs
			case round == 5 && k%2 == 1:
				cmd.Op = 7 // not an op: BAD_COMMAND at once, counted as op 0
			}
			app.post(t, cmd)
			n++
		}
		var got []abi.Completion
		for k := 0; len(got) < len(app.slots); k, now = k+1, now+500 {
			if k == 100 {
				t.Fatalf("round %d: %d of %d completions", round, len(got), len(app.slots))
			}
			c.Poll(now)
			now += 700 * int64(round+1) // a different total delay each round
			tx.deliverTo(now, c)
			c.Poll(now)
			got = append(got, app.completions()...)
		}
		var batch []telemetry.Sample
		for _, cp := range got {
			batch = append(batch, telemetry.Sample{IssueNs: cp.IssueDelayNs, TotalNs: cp.TotalDelayNs, Op: uint8(cp.Op)})
		}
		want.Add(batch)
	}
	if *cfg.Delays != (telemetry.Delays{}) {
		t.Fatal("histograms fed before the batch was handed over")
	}
	c.Poll(c.portals.delays.Oldest() + telemetry.FlushNs)
	if *cfg.Delays != want {
		t.Fatalf("histograms differ from the completions'\n got %v\nwant %v", *cfg.Delays, want)
	}
	read, write, bad := cfg.Delays.Count(int(abi.OpRead)), cfg.Delays.Count(int(abi.OpWrite)), cfg.Delays.Count(0)
	if read != 4*8+4 || write != 8 || bad != 4 {
		t.Fatalf("counted %d READs, %d WRITEs, %d bad commands; want 36, 8, 4", read, write, bad)
	}
	if s := c.Stats(); s.CompletedByOp[abi.OpRead][abi.StatusOK] != read || s.CompletedByOp[0][abi.StatusBadCommand] != bad {
		t.Fatalf("completion counters %v, histograms %d READs and %d bad", s.CompletedByOp, read, bad)
	}
}

// TestPortalRegionUse: PortalStats counts each portal's regions and
// their bytes as they are registered, deregistered and reclaimed.
func TestPortalRegionUse(t *testing.T) {
	c := newCore(t, testConfig("10.0.0.1", 1), newTestTx(16))
	a, b := openApp(t, c, abi.ClassLow, 1), openApp(t, c, abi.ClassLow, 1)
	use := func(id PortalID) (int, uint64) {
		ps, ok := c.PortalStats(id)
		if !ok {
			t.Fatalf("portal %d: no stats", id)
		}
		return ps.Regions, ps.RegionBytes
	}
	r1, _ := c.RegisterRegion(a.id, make([]byte, 4096), abi.PermAll, testKr)
	c.RegisterRegion(a.id, make([]byte, 100), abi.PermAll, testKr)
	c.RegisterRegion(b.id, make([]byte, 64), abi.PermAll, testKr)
	if n, bytes := use(a.id); n != 2 || bytes != 4196 {
		t.Fatalf("a: %d regions, %d bytes", n, bytes)
	}
	if err := c.DeregisterRegion(a.id, r1); err != nil {
		t.Fatal(err)
	}
	if n, bytes := use(a.id); n != 1 || bytes != 100 {
		t.Fatalf("a after deregistering: %d regions, %d bytes", n, bytes)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
	if err := c.ClosePortal(a.id); err != nil {
		t.Fatal(err)
	}
	if n, bytes := use(b.id); n != 1 || bytes != 64 {
		t.Fatalf("b: %d regions, %d bytes", n, bytes)
	}
	a2 := openApp(t, c, abi.ClassLow, 1) // a's id again, holding nothing
	if n, bytes := use(a2.id); a2.id != a.id || n != 0 || bytes != 0 {
		t.Fatalf("reopened portal %d (was %d): %d regions, %d bytes", a2.id, a.id, n, bytes)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReadLoopback64MBDelays is BenchmarkReadLoopback64MB with the
// core keeping delay histograms (Config.Delays, rmad -metrics): their
// cost per op, one batch at a time. Compare the two in alternation:
//
//	go test -c ./engine && taskset -c 1 ./engine.test -test.run '^$' \
//	  -test.bench 'ReadLoopback64MB(Delays)?$' -test.count 5
func BenchmarkReadLoopback64MBDelays(b *testing.B) {
	withCrypto(b, CryptoIPsecMB, func(b *testing.B) {
		benchOp(b, abi.OpRead, 64, func(c *Config) { c.Delays = new(telemetry.Delays) })
	})
}
