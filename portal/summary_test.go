package portal_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
)

// TestSummaryDoorbell: a portal rings its core's summary doorbell after
// every Flush, so the engine reads its command ring when it posted and in
// its fallback scans, never otherwise: while two idle portals wait, every
// idle look is a scan's; ops complete as before. An engine that gives no
// summary (ctl.no_summary) reads the rings in every poll, and the portal
// works the same without one.
func TestSummaryDoorbell(t *testing.T) {
	for _, none := range []bool{false, true} {
		e := enginetest.Start(t, enginetest.Opts{Ctl: func(c *ctl.Config) {
			c.Sockets[0].Policy.Default = 16
			c.NoSummary = none
		}})
		owner, reader := dial(t, e.Socket, "owner"), dial(t, e.Socket, "reader")
		if owner.Summary() == none || reader.Summary() == none {
			t.Fatalf("no_summary %v: portals ring the summary: %v, %v", none, owner.Summary(), reader.Summary())
		}
		src, err := owner.RegisterRegion(4096, abi.PermRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		copy(src.Bytes(), bytes.Repeat([]byte{0x5a}, 4096))
		reader.AllocSlots(1)
		sink, err := reader.RegisterRegion(4096, abi.PermLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		id := reader.Identity()
		for range 20 {
			if c := read(t, reader, src, src.DeriveKey(id.Addr, id.PID, abi.OpRead), sink); c.Status != abi.StatusOK {
				t.Fatalf("read: %+v", c)
			}
		}
		path := func() engine.PathCounters {
			var p engine.PathCounters
			if err := e.Runner.Exec(func(c *engine.Core) { p = c.PathCounters() }); err != nil {
				t.Fatal(err)
			}
			return p
		}
		p0 := path()
		time.Sleep(50 * time.Millisecond) // both portals idle
		p1 := path()
		looks, idle, scans := p1.RingLooks-p0.RingLooks, p1.RingLooksIdle-p0.RingLooksIdle, p1.RingScans-p0.RingScans
		t.Logf("no_summary %v: idle for 50 ms: %d looks, %d idle, %d scans", none, looks, idle, scans)
		if !none && (idle > 2*scans || p1.RingRungIdle != p0.RingRungIdle) {
			t.Errorf("%d idle looks at 2 idle rings in %d scans (rung idle %d)", idle, scans, p1.RingRungIdle-p0.RingRungIdle)
		}
		if none && idle < 2*scans {
			t.Errorf("without a summary, %d idle looks in %d scans: the rings are read in every poll", idle, scans)
		}
	}
}
