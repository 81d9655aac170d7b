package dpdk_test

import (
	"runtime"
	"testing"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
)

// lockAndRegister locks the benchmark goroutine to its thread and registers
// it as an lcore, so the mempool's per-lcore cache is used; the caller
// defers dpdk.UnregisterThread (same goroutine, each round). The goroutine
// is never unlocked: it exits locked, which ends the thread.
func lockAndRegister(b *testing.B) {
	runtime.LockOSThread()
	if _, err := dpdk.RegisterThread(); err != nil {
		b.Fatal(err)
	}
}

func reportMpps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
}

// BenchmarkCgoNoop: one cgo call to an empty C function.
func BenchmarkCgoNoop(b *testing.B) {
	for b.Loop() {
		dpdk.Noop()
	}
}

// BenchmarkRingLoopbackRaw is the loop with the plain primitives: alloc
// 32 -> write a 64-byte header -> tx -> rx -> free; 4 crossings per burst.
// One op is one packet.
func BenchmarkRingLoopbackRaw(b *testing.B) {
	port, pool := dpdktest.Port(b, ringBench)
	lockAndRegister(b)
	defer dpdk.UnregisterThread()
	burst, err := dpdk.NewBurst(32)
	if err != nil {
		b.Fatal(err)
	}
	defer burst.Free()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += 32 {
		if !dpdk.AllocBurst(pool, burst, 0, 32) {
			b.Fatal("pool empty")
		}
		for _, m := range burst.Mbufs {
			r := m.Room()[:64]
			r[0], r[12], r[13], r[63] = 0xff, 0x08, 0x00, byte(n)
			m.SetLen(64)
		}
		sent := dpdk.TxBurst(port, 0, burst, 0, 32)
		if sent != 32 {
			b.Fatalf("tx %d of 32", sent)
		}
		if got := dpdk.RxBurst(port, 0, burst, 0, 32); got != 32 {
			b.Fatalf("rx %d of 32", got)
		}
		dpdk.FreeBurst(burst, 0, 32)
	}
	b.StopTimer()
	reportMpps(b)
}

// BenchmarkRingLoopbackPortIO: the same loop through the fused call, one
// crossing per burst (tx of this burst + free of the last rx burst + rx +
// stash refill).
func BenchmarkRingLoopbackPortIO(b *testing.B) {
	port, pool := dpdktest.Port(b, ringBench)
	lockAndRegister(b)
	defer dpdk.UnregisterThread()
	io, err := dpdk.NewPortIO(port, 0, pool, 32, 32, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer io.Close()
	io.Do(false)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += 32 {
		for i := 0; i < 32; i++ {
			m := io.TakeStash()
			if m == nil {
				b.Fatal("stash empty")
			}
			r := m.Room()[:64]
			r[0], r[12], r[13], r[63] = 0xff, 0x08, 0x00, byte(n)
			m.SetLen(64)
			io.QueueTx(m)
		}
		if got := io.Do(true); got != 32 {
			b.Fatalf("rx %d of 32", got)
		}
		for _, m := range io.Rx() {
			_ = m.Data()[63]
		}
	}
	b.StopTimer()
	reportMpps(b)
	if c := io.Counters(); c.TxDropped != 0 {
		b.Errorf("dropped %d", c.TxDropped)
	}
}
