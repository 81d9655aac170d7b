package ctl_test

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/portal"
)

// TestDriverPathLent: on an engine of two cores whose loops sleep between
// calls (Backoff, lending their core to the control call that finds them
// asleep, as rmad's), the driver's guarantees hold call after call: a
// rekey is in force on every core when it returns (the old K_d fails, the
// new one reads, through portals of both cores), and a deregistration
// returns only once every core has passed a quiescent point since the
// region left the table. Most calls run on the connection's own thread.
func TestDriverPathLent(t *testing.T) {
	var execTid, runTid atomic.Int64
	var lent, calls atomic.Int64
	ctl.SetHopTrace(func(h int) {
		switch ctl.HopNames[h] {
		case "exec":
			execTid.Store(int64(unix.Gettid()))
		case "run":
			runTid.Store(int64(unix.Gettid()))
		case "back":
			calls.Add(1)
			if runTid.Load() == execTid.Load() {
				lent.Add(1)
			}
		}
	})
	defer ctl.SetHopTrace(nil)
	e := setup2(t, 2)
	own := dial(t, e, "owner")
	var readers []*portal.Portal
	var sinks []*portal.Region
	for range 2 {
		r := dial(t, e, "reader")
		r.AllocSlots(2)
		sink, _ := r.RegisterRegion(4096, abi.PermLocalWrite)
		readers, sinks = append(readers, r), append(sinks, sink)
	}
	if readers[0].Core() == readers[1].Core() {
		t.Fatalf("both readers on core %d", readers[0].Core())
	}
	src, err := own.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	g := e.drv.g
	for round := range 40 {
		time.Sleep(time.Millisecond) // the loops go to sleep
		old := []aesni.Key{kd(src, readers[0]), kd(src, readers[1])}
		if err := own.Rekey(src, aesni.Key{byte(round), 0x3c}); err != nil {
			t.Fatal(err)
		}
		for i, r := range readers {
			if c := readWith(t, r, src, old[i], sinks[i], 0); c.Status != abi.StatusRemoteAuthFailure {
				t.Fatalf("round %d, reader on core %d, the old K_d right after Rekey returned: %+v", round, r.Core(), c)
			}
			if c := readWith(t, r, src, kd(src, r), sinks[i], 0); c.Status != abi.StatusOK {
				t.Fatalf("round %d, reader on core %d, the new K_d: %+v", round, r.Core(), c)
			}
		}
		if round%4 == 3 {
			time.Sleep(time.Millisecond)
			if err := own.DeregisterRegion(src); err != nil {
				t.Fatal(err)
			}
			if v := g.Version(); !g.Quiesced(v) {
				t.Fatalf("round %d: DeregisterRegion returned before every core passed a quiescent point (version %d)", round, v)
			}
			if src, err = own.RegisterRegion(4096, abi.PermRemoteRead); err != nil {
				t.Fatal(err)
			}
		}
	}
	if lent.Load() == 0 {
		t.Fatalf("none of %d calls to a core ran on the connection's thread: no core was lent", calls.Load())
	}
	t.Logf("%d of %d calls to a core ran on the connection's thread", lent.Load(), calls.Load())
}
