package ctl_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/portal"
)

// BenchmarkRegionControl times the control calls that change the
// engine's region table through the control socket, the driver path of
// the paper's Fig. 14, on engines of one and two cores (each its own
// runner, Backoff, lending its core as rmad's; BenchmarkDriverHops breaks
// the rekey down by hop): a rekey (in force on every core when it returns: key
// epochs); a deregistration, which returns only once every core has
// passed a quiescent point since (ctl's quiesce) and the memory is
// unmapped, its region registered again between two timed calls; a
// registration (create_region, the application's mapping, register_region:
// portal.RegisterRegion), its region deregistered between two timed
// calls; and an open (portal.Dial: connect, open, attach, doorbell), its
// portal closed and reclaimed between two timed calls.
//
//	go test ./engine/ctl -run '^$' -bench RegionControl -benchtime 2000x
func BenchmarkRegionControl(b *testing.B) {
	for _, cores := range []int{1, 2} {
		e := setupCores(b, cores, nil, nil, zerolog.Nop())
		own := dial(b, e, "owner")
		b.Run(fmt.Sprintf("cores=%d/rekey", cores), func(b *testing.B) {
			r, err := own.RegisterRegion(4096, abi.PermRemoteRead)
			if err != nil {
				b.Fatal(err)
			}
			k := aesni.Key{1}
			var ts latencies
			for i := 0; b.Loop(); i++ {
				k[1] = byte(i)
				t0 := time.Now()
				if err := own.Rekey(r, k); err != nil {
					b.Fatal(err)
				}
				ts.add(t0)
			}
			ts.report(b)
		})
		b.Run(fmt.Sprintf("cores=%d/deregister", cores), func(b *testing.B) {
			b.StopTimer()
			var ts latencies
			for range b.N {
				r, err := own.RegisterRegion(4096, abi.PermRemoteRead)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if err := own.DeregisterRegion(r); err != nil {
					b.Fatal(err)
				}
				ts.add(t0)
				b.StopTimer()
			}
			ts.report(b)
		})
		b.Run(fmt.Sprintf("cores=%d/register", cores), func(b *testing.B) {
			b.StopTimer()
			var ts latencies
			for range b.N {
				b.StartTimer()
				t0 := time.Now()
				r, err := own.RegisterRegion(4096, abi.PermRemoteRead)
				if err != nil {
					b.Fatal(err)
				}
				ts.add(t0)
				b.StopTimer()
				if err := own.DeregisterRegion(r); err != nil {
					b.Fatal(err)
				}
			}
			ts.report(b)
		})
		b.Run(fmt.Sprintf("cores=%d/open", cores), func(b *testing.B) {
			b.StopTimer()
			var ts latencies
			for range b.N {
				b.StartTimer()
				t0 := time.Now()
				p, err := portal.Dial(e.sock, "opener")
				if err != nil {
					b.Fatal(err)
				}
				ts.add(t0)
				b.StopTimer()
				p.Close()
				for e.srv.Conns() > 1 { // reclaimed: the owner's is left
					time.Sleep(50 * time.Microsecond)
				}
			}
			ts.report(b)
		})
	}
}

// BenchmarkQuiesce times the engine's part of a deregistration on an
// engine of two cores, without the socket: the closure on the owner's
// core (its runner's Exec) and the wait until the other core has passed
// a quiescent point (what ctl's quiesce does: it runs the point,
// engine.Group.Quiesce, in an Exec: on the loop, or on the caller's
// goroutine when a loop asleep lends its core), with both loops in
// Backoff, the owner's in Backoff and the other's in Busy mode, and both
// in Busy mode (on a
// machine with a CPU for each loop and one for the control plane).
//
//	go test ./engine/ctl -run '^$' -bench Quiesce -benchtime 2000x
func BenchmarkQuiesce(b *testing.B) {
	for _, modes := range [][]runner.Mode{{runner.Backoff}, {runner.Backoff, runner.Busy}, {runner.Busy}} {
		name := modes[0].String()
		if len(modes) > 1 {
			name += "+" + modes[1].String()
		}
		b.Run(name, func(b *testing.B) {
			drv, err := newLoopDrivers(engineConfig(), 2, modes...)
			if err != nil {
				b.Fatal(err)
			}
			defer drv.Stop()
			var id engine.PortalID
			drv.runners[0].Exec(func(c *engine.Core) {
				id, err = c.OpenPortal(engine.PortalSpec{CmdRing: ring(abi.CommandSize), CmdCap: 16, CplRing: ring(abi.CompletionSize), CplCap: 16})
			})
			if err != nil {
				b.Fatal(err)
			}
			mem := make([]byte, 4096)
			var ts latencies
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				var rid abi.RegionID
				drv.runners[0].Exec(func(c *engine.Core) { rid, err = c.RegisterRegion(id, mem, abi.PermRemoteRead, aesni.Key{1}) })
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				drv.runners[0].Exec(func(c *engine.Core) { err = c.DeregisterRegion(id, rid) })
				if err != nil {
					b.Fatal(err)
				}
				if v := drv.g.Version(); !drv.g.CoreQuiesced(1, v) { // ctl's quiesce
					drv.runners[1].Exec(func(*engine.Core) { drv.g.Quiesce(1) })
				}
				ts.add(t0)
			}
			ts.report(b)
		})
	}
}

// latencies are the times of a benchmark's calls: a loaded machine's
// outliers move the mean, the median shows the call.
type latencies []time.Duration

func (l *latencies) add(t0 time.Time) { *l = append(*l, time.Since(t0)) }

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	b.ReportMetric(float64(l[len(l)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(l[len(l)*99/100].Nanoseconds()), "p99-ns")
}

func ring(entry uint32) []byte {
	b := make([]byte, abi.RingBytes(16, entry)+64)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))%64)) % 64
	return b[off : off+abi.RingBytes(16, entry)]
}
