package kvload

import (
	"net/netip"
	"testing"
	"time"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

// TestOneRMAKVDriver runs the load generator against OneRMA's cache: one
// server and its clients on an in-process engine, a load phase, then
// closed-loop YCSB-B and open-loop YCSB-C runs with 16 GETs in flight
// from one goroutine, every GET's value checked.
func TestOneRMAKVDriver(t *testing.T) {
	eng := enginetest.Start(t, enginetest.Opts{Engine: func(c *engine.Config) {
		c.Slots, c.Regions, c.Portals = 1024, 64, 16
	}})
	screds, ccreds, err := keyx.NewPair("kv", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kv.NewServer(kv.ServerConfig{Socket: eng.Socket, Credentials: screds, Buckets: 1 << 12, SlabBytes: 8 << 20,
		Permits: []keyx.Permit{{Client: ccreds.Name(), Ops: keyx.Read | keyx.Write, Addrs: []netip.Prefix{keyx.AnyAddress}}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close()
	dial := DialOneRMAKV(kv.ClientConfig{Socket: eng.Socket, Servers: []kv.ServerAddr{{RPC: srv.Addr().String()}},
		Credentials: ccreds, MaxInFlight: 16, MaxValue: 1024})

	w := Workload{Mix: YCSBB, Keys: 2000, ValueBytes: 1024, Seed: 7}
	if err := Load(dial, w, 2); err != nil {
		t.Fatal(err)
	}
	r, err := Run(dial, Config{Workload: w, Clients: 1, Depth: 16, Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed() != 0 || r.GetsDone == 0 || r.SetsDone == 0 {
		t.Fatalf("closed loop: %d failed (%v), %d GETs, %d SETs", r.Failed(), r.FirstError, r.GetsDone, r.SetsDone)
	}
	t.Logf("closed loop, 16 in flight: %.0f GETs/s, p50 %v, p99 %v", r.GetsPerSec(),
		time.Duration(r.GetLat.ValueAtQuantile(50)), time.Duration(r.GetLat.ValueAtQuantile(99)))
	w.Mix = YCSBC
	// A drain of seconds: a GET still in flight at its end counts as
	// failed, and a host busy with other work can hold one for long.
	r, err = Run(dial, Config{Workload: w, Clients: 1, Depth: 16, Rate: 5000, Duration: 300 * time.Millisecond, Drain: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Every arrival of the measurement served OK, whenever it completed
	// (GetsDone counts only those done before the measurement's end,
	// fewer on a busy host): about 1500 of them.
	if served := r.GetLat.TotalCount(); r.Failed() != 0 || r.Unserved != 0 || served < 1000 {
		t.Fatalf("open loop at 5000/s: %d failed (%v), %d unserved, %d GETs served (%d done in the measurement)", r.Failed(), r.FirstError, r.Unserved, served, r.GetsDone)
	}
	t.Logf("open loop at 5000/s: %d GETs served, %d done in the measurement", r.GetLat.TotalCount(), r.GetsDone)
}
