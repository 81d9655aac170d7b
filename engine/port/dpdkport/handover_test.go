package dpdkport_test

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/wire"
)

const testUDPPort = 4792

// frame writes into b a frame engine.Steer sends to initiator core core
// (a UDP datagram to its initiator port), or, with core < 0, an ARP
// request (every core), and returns its length.
func frame(b []byte, core int, tag byte) int {
	clear(b[:wire.PayloadOffset+16])
	copy(b, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 9})
	if core < 0 {
		binary.BigEndian.PutUint16(b[12:], uint16(wire.EtherTypeARP))
		b[20] = tag
		return 60
	}
	binary.BigEndian.PutUint16(b[12:], uint16(wire.EtherTypeIPv4))
	ip := b[wire.EthLen:]
	ip[0], ip[9] = 0x45, 17
	udp := ip[wire.IPv4Len:]
	binary.BigEndian.PutUint16(udp[2:], wire.InitiatorPort(0, uint16(core)))
	b[wire.PayloadOffset] = tag
	return wire.PayloadOffset + 16
}

// sendFrames sends frames on p's queue: net_ring's queue i receives what
// it sent, as a device whose queues cannot steer would.
func sendFrames(t *testing.T, p *dpdkport.Port, cores []int, tag0 byte) {
	t.Helper()
	for i, c := range cores {
		b := p.Buffer()
		if b == nil {
			t.Fatal("no buffer")
		}
		p.Send(frame(b, c, tag0+byte(i)))
	}
	p.Flush()
}

// tags are the tags of frames as Recv returns them.
func tags(views [][]byte) []byte {
	var out []byte
	for _, f := range views {
		if wire.EtherType(f) == wire.EtherTypeARP {
			out = append(out, f[20])
		} else {
			out = append(out, f[wire.PayloadOffset])
		}
	}
	return out
}

// TestQueuesHandOver: on a device of two queues that cannot steer, each
// core keeps its own frames, hands the other core's over, copies ARP to
// both; a full ring's frames are counted lost; nothing leaks.
func TestQueuesHandOver(t *testing.T) {
	_, pool := dpdktest.PortQueues(t, ringQs, 2, dpdktest.Mbufs, dpdktest.DataRoom)
	inUse := pool.InUse()
	cfg := smallConfig()
	cfg.HandOverRing = 64
	q, err := dpdkport.NewQueues(ringQs, pool, 2, testUDPPort, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := q.Ports[0], q.Ports[1]
	if len(q.Txs()) != 2 || q.Txs()[1] != engine.Tx(p1) {
		t.Fatal("Txs not the ports in core order")
	}
	// Queue 0 receives frames for core 0, core 1 and everyone (ARP).
	sendFrames(t, p0, []int{0, 1, 1, -1, 0}, 10)
	if got := tags(p0.Recv()); string(got) != string([]byte{10, 13, 14}) {
		t.Fatalf("core 0 kept %v, want its own and the ARP frame [10 13 14]", got)
	}
	// Handed over in core 0's next crossing, not before.
	if got := p1.Recv(); len(got) != 0 {
		t.Fatalf("core 1 got %d frames before core 0's next crossing", len(got))
	}
	calls := p0.Stats().IOCalls
	p0.Flush()
	if c := p0.Stats().IOCalls; c != calls+1 || p0.Crossings() != c {
		t.Fatalf("the hand-over took %d crossings, want 1 (Crossings %d, IOCalls %d)", c-calls, p0.Crossings(), c)
	}
	if got := tags(p1.Recv()); string(got) != string([]byte{11, 12, 13}) {
		t.Fatalf("core 1 got %v, want the two handed over and the ARP copy [11 12 13]", got)
	}
	s0, s1 := p0.Stats(), p1.Stats()
	if s0.HandedOut != 3 || s0.HandedIn != 0 || s1.HandedIn != 3 || s1.HandedOut != 0 || s0.HandOverFull != 0 {
		t.Fatalf("stats core 0 %+v, core 1 %+v: want 3 handed from 0 to 1", s0, s1)
	}
	if s0.RxFrames != 3 || s1.RxFrames != 3 {
		t.Fatalf("rx frames %d and %d, want 3 each", s0.RxFrames, s1.RxFrames)
	}
	// Core 1 does not receive: its ring from core 0 (64) fills.
	for range 4 {
		cores := make([]int, 32)
		for i := range cores {
			cores[i] = 1
		}
		sendFrames(t, p0, cores, 0)
		if got := p0.Recv(); len(got) != 0 {
			t.Fatalf("core 0 kept %d frames of core 1", len(got))
		}
		p0.Flush()
	}
	s0 = p0.Stats()
	if s0.HandedOut != 3+64 || s0.HandOverFull != 128-64 {
		t.Fatalf("with core 1 away: %+v, want 64 more handed out and 64 lost", s0)
	}
	n := 0
	for range 4 {
		n += len(p1.Recv())
	}
	if n != 64 {
		t.Fatalf("core 1 received %d of the 64 its ring held", n)
	}
	// Frames left in a ring, and frames handed over but not yet sent, at
	// Close go back to the pool.
	sendFrames(t, p0, []int{1, 1}, 0)
	p0.Recv()
	p0.Flush()
	sendFrames(t, p0, []int{1, 1}, 0)
	p0.Recv()
	q.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use after Close: %d, want %d", got, inUse)
	}
}

// TestQueuesAllocs: a receive that hands frames over and one that takes
// them in allocate nothing.
func TestQueuesAllocs(t *testing.T) {
	_, pool := dpdktest.PortQueues(t, ringQs, 2, dpdktest.Mbufs, dpdktest.DataRoom)
	q, err := dpdkport.NewQueues(ringQs, pool, 2, testUDPPort, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	p0, p1 := q.Ports[0], q.Ports[1]
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 16 {
			b := p0.Buffer()
			p0.Send(frame(b, i&1, byte(i)))
		}
		p0.Flush()
		p0.Recv()
		p1.Recv()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per round, want 0", allocs)
	}
	if s := p1.Stats(); s.HandedIn == 0 {
		t.Errorf("nothing handed over: %+v", s)
	}
}

// BenchmarkHandOver: a burst of 32 frames, half for the other core, through
// core 0's receive (steering, hand-over) and core 1's (taking them in), on
// one thread registered with the EAL. Compare BenchmarkLoopback (no
// hand-over).
func BenchmarkHandOver(b *testing.B) {
	_, pool := dpdktest.PortQueues(b, ringQs, 2, dpdktest.Mbufs, dpdktest.DataRoom)
	q, err := dpdkport.NewQueues(ringQs, pool, 2, testUDPPort, smallConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	p0, p1 := q.Ports[0], q.Ports[1]
	runtime.LockOSThread() // never unlocked: the benchmark goroutine ends with its thread
	if _, err := dpdk.RegisterThread(); err != nil {
		b.Fatal(err)
	}
	defer dpdk.UnregisterThread()
	b.ReportAllocs()
	for b.Loop() {
		for i := range 32 {
			p0.Send(frame(p0.Buffer(), i&1, byte(i)))
		}
		p0.Flush()
		p0.Recv()
		p1.Recv()
	}
	b.ReportMetric(float64(b.N)*32/b.Elapsed().Seconds()/1e6, "Mframes/s")
}
