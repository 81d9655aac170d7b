package dpdkport_test

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/stage"
)

// One net_ring vdev per test: a Port owns its queue.
const (
	ringLoop   = "net_ring0"
	ringStable = "net_ring1"
	ringBurst  = "net_ring2"
	ringAllocs = "net_ring3"
	ringDrop   = "net_ring4"
	ringBench  = "net_ring5"
	ringE2E    = "net_ring6"
	ringE2EB   = "net_ring7" // BenchmarkRead
	ringQs     = "net_ring8" // two queues: TestQueues*, BenchmarkHandOver
	ringInv    = "net_ring9" // TestLoopInvariants
	pairA      = "e2eA"      // TestReadTwoEngines: ports net_ring_e2eA, net_ring_e2eB
	pairB      = "e2eB"
)

func TestMain(m *testing.M) {
	dpdktest.Main(m, ringLoop, ringStable, ringBurst, ringAllocs, ringDrop, ringBench, ringE2E, ringE2EB, ringQs, ringInv)
}

// smallConfig fits frames of 14+1500 bytes into the default 2 KB mbufs.
func smallConfig() dpdkport.Config {
	c := dpdkport.DefaultConfig()
	c.FrameBytes = 14 + 1500
	return c
}

func newPort(t testing.TB, name string) (*dpdkport.Port, *dpdk.Mempool) {
	t.Helper()
	_, pool := dpdktest.Port(t, name)
	p, err := dpdkport.New(name, pool, 0, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	return p, pool
}

func TestLoopback(t *testing.T) {
	p, pool := newPort(t, ringLoop)
	inUse := pool.InUse()
	sizes := []int{60, 64, 100, 1514}
	for round := range 3 {
		for i, size := range sizes {
			b := p.Buffer()
			if len(b) < 1514 {
				t.Fatalf("Buffer() has %d bytes", len(b))
			}
			for j := range size {
				b[j] = byte(round + i + j)
			}
			p.Send(size)
		}
		p.Flush()
		var got [][]byte
		for tries := 0; len(got) < len(sizes) && tries < 100; tries++ {
			for _, f := range p.Recv() {
				got = append(got, append([]byte(nil), f...))
			}
		}
		if len(got) != len(sizes) {
			t.Fatalf("round %d: %d frames back, want %d", round, len(got), len(sizes))
		}
		for i, f := range got {
			if len(f) != sizes[i] {
				t.Fatalf("frame %d: %d bytes, want %d", i, len(f), sizes[i])
			}
			for j := range f {
				if f[j] != byte(round+i+j) {
					t.Fatalf("frame %d byte %d: %#x", i, j, f[j])
				}
			}
		}
	}
	s := p.Stats()
	if s.TxFrames != 12 || s.RxFrames != 12 || s.TxDropped != 0 || s.TxNoBuffer != 0 {
		t.Errorf("stats %+v", s)
	}
	p.Buffer() // a buffer still held at Close goes back too
	p.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use after Close: %d, want %d", got, inUse)
	}
}

// TxMemory (registered with the ipsec-mb batch) covers every buffer the
// port hands out and every frame it receives (the rx queue takes its mbufs
// from the same pool).
func TestTxMemory(t *testing.T) {
	p, _ := newPort(t, ringLoop)
	defer p.Close()
	mem := p.TxMemory()
	if len(mem) == 0 {
		t.Fatal("no tx memory")
	}
	inside := func(what string, b []byte) {
		t.Helper()
		a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		for _, m := range mem {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
			if a >= lo && a+uintptr(len(b)) <= lo+uintptr(len(m)) {
				return
			}
		}
		t.Fatalf("%s at %#x+%d outside the tx memory's %d ranges", what, a, len(b), len(mem))
	}
	for round := range 4 {
		for range 32 {
			b := p.Buffer()
			inside("tx buffer", b)
			b[0] = byte(round)
			p.Send(60)
		}
		p.Flush()
		n := 0
		for tries := 0; n < 32 && tries < 100; tries++ {
			for _, f := range p.Recv() {
				inside("rx frame", f)
				n++
			}
		}
		if n != 32 {
			t.Fatalf("round %d: %d frames back", round, n)
		}
	}
}

func TestConfig(t *testing.T) {
	_, pool := dpdktest.Port(t, ringLoop)
	// Default FrameBytes (jumbo) does not fit the test pool's 2 KB mbufs.
	if _, err := dpdkport.New(ringLoop, pool, 0, dpdkport.DefaultConfig()); !errors.Is(err, dpdkport.ErrConfig) {
		t.Errorf("New with jumbo frames on 2 KB mbufs = %v, want ErrConfig", err)
	}
	bad := []func(*dpdkport.Config){
		func(c *dpdkport.Config) { c.Burst = 0 },
		func(c *dpdkport.Config) { c.Burst = dpdk.MaxBurst + 1 },
		func(c *dpdkport.Config) { c.Stash = 0 },
		func(c *dpdkport.Config) { c.TxRetries = -1 },
		func(c *dpdkport.Config) { c.FrameBytes = 10 },
	}
	for i, mutate := range bad {
		c := smallConfig()
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, dpdkport.ErrConfig) {
			t.Errorf("case %d: Validate(%+v) = %v", i, c, err)
		}
	}
	if _, err := dpdkport.New("net_ring_none", pool, 0, smallConfig()); err == nil {
		t.Error("New on an unknown port succeeded")
	}
}

func TestBufferStableUntilSend(t *testing.T) {
	p, _ := newPort(t, ringStable)
	defer p.Close()
	b1, b2 := p.Buffer(), p.Buffer()
	if &b1[0] != &b2[0] {
		t.Fatal("Buffer() changed before Send")
	}
	p.Send(60)
	if b3 := p.Buffer(); &b3[0] == &b1[0] {
		t.Fatal("Buffer() after Send returned the sent mbuf")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Send(0) did not panic")
			}
		}()
		p.Send(0)
	}()
	p.Send(60)
	p.Flush()
	for len(p.Recv()) > 0 {
	}
}

// TestFullBurst: a full tx burst goes out when the next frame needs a
// buffer, without a Flush: each crossing of Buffer a section of stage
// Transmit inside the caller's (the core's Build), the seals of the burst
// (the hook) in it.
func TestFullBurst(t *testing.T) {
	p, _ := newPort(t, ringBurst)
	defer p.Close()
	var k uint64
	s := stage.New(func() uint64 { k++; return k })
	s.Enter(stage.Build)
	p.SetStages(s)
	hooked := stage.NumStages
	p.SetBeforeTx(func() { hooked = s.Current() })
	for range 32 {
		p.Buffer()
		p.Send(60)
	}
	if s := p.Stats(); s.TxFrames != 0 {
		t.Fatalf("after 32 Sends: %+v, want nothing sent yet", s)
	}
	p.Buffer()
	if s := p.Stats(); s.TxFrames != 32 || s.IOCalls != 2 {
		t.Fatalf("after the 33rd Buffer: %+v, want 32 sent in the 2nd crossing", s)
	}
	// Both crossings: the first Buffer's (the stash filled) and the burst's.
	if sn := s.Snapshot(0); sn.Sections[stage.Transmit] != 2 || s.Current() != stage.Build || hooked != stage.Transmit {
		t.Fatalf("transmit sections %d, back in %v, hook ran in %v", sn.Sections[stage.Transmit], s.Current(), hooked)
	}
	p.Send(60)
	if n := len(p.Recv()); n != 32 { // sends the 33rd, receives the first 32
		t.Fatalf("Recv() = %d frames, want 32", n)
	}
	if n := len(p.Recv()); n != 1 {
		t.Fatalf("Recv() = %d frames, want 1", n)
	}
}

func TestTxDropCounted(t *testing.T) {
	p, pool := newPort(t, ringDrop)
	inUse := pool.InUse()
	const frames = 2048 // the ring holds 1023
	for range frames {
		if p.Buffer() == nil {
			t.Fatal("pool exhausted")
		}
		p.Send(60)
	}
	p.Flush()
	s := p.Stats()
	if s.TxDropped == 0 || s.TxFrames+s.TxDropped != frames {
		t.Errorf("stats %+v: want drops, sent+dropped = %d", s, frames)
	}
	for len(p.Recv()) > 0 {
	}
	p.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d", got, inUse)
	}
}

// TestAllocs: the hot path (Buffer, Send, Flush, Recv) allocates nothing
// per packet or per burst, busy or idle.
func TestAllocs(t *testing.T) {
	p, _ := newPort(t, ringAllocs)
	defer p.Close()
	burst := testing.AllocsPerRun(200, func() {
		for i := range 32 {
			b := p.Buffer()
			b[0] = byte(i)
			p.Send(64)
		}
		p.Flush()
		for _, f := range p.Recv() {
			_ = f[0]
		}
	})
	idle := testing.AllocsPerRun(200, func() {
		p.Flush()
		p.Recv()
	})
	if burst != 0 || idle != 0 {
		t.Errorf("allocations: %v per burst, %v per idle iteration; want 0", burst, idle)
	}
}

// BenchmarkLoopback: 64-byte frames through Buffer/Send, Flush and Recv
// over net_ring, bursts of 32, on a thread registered with the EAL. One op
// is one packet.
func BenchmarkLoopback(b *testing.B) {
	p, _ := newPort(b, ringBench)
	defer p.Close()
	runtime.LockOSThread() // never unlocked: the benchmark goroutine ends with its thread
	if _, err := dpdk.RegisterThread(); err != nil {
		b.Fatal(err)
	}
	defer dpdk.UnregisterThread()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += 32 {
		for range 32 {
			f := p.Buffer()
			f[0], f[12], f[13], f[63] = 0xff, 0x08, 0x00, byte(n)
			p.Send(64)
		}
		p.Flush()
		if got := len(p.Recv()); got != 32 {
			b.Fatalf("received %d of 32", got)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
	s := p.Stats()
	b.ReportMetric(float64(s.IOCalls)/float64(s.TxFrames)*32, "crossings/burst")
}
