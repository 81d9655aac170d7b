package dpdk_test

import (
	"runtime"
	"testing"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
)

// newBurst allocates n mbufs from pool into a new Burst of n pointers.
func newBurst(t *testing.T, pool *dpdk.Mempool, n int) *dpdk.Burst {
	t.Helper()
	b, err := dpdk.NewBurst(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Free)
	if !dpdk.AllocBurst(pool, b, 0, n) {
		t.Fatal("AllocBurst failed")
	}
	return b
}

// TestRing: a ring of an exact size takes what fits, gives it back in
// order, and Free returns what it still holds to the pool.
func TestRing(t *testing.T) {
	_, pool := dpdktest.Port(t, ringRaw)
	inUse := pool.InUse()
	r, err := dpdk.NewRing("t_ring", 100, dpdk.SocketAny, dpdk.SingleProducer|dpdk.SingleConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dpdk.NewRing("t_ring", 100, dpdk.SocketAny, 0); err == nil {
		t.Error("a second ring of the same name was created")
	}
	if _, err := dpdk.NewRing("t_ring_with_a_name_far_too_long", 8, dpdk.SocketAny, 0); err == nil {
		t.Error("a ring with a 31-byte name was created")
	}
	if r.Cap() != 100 || r.Len() != 0 || r.Name() != "t_ring" {
		t.Fatalf("new ring: cap %d, len %d, name %q", r.Cap(), r.Len(), r.Name())
	}
	b := newBurst(t, pool, 128)
	sent := append([]*dpdk.Mbuf(nil), b.Mbufs...)
	if n := r.Enqueue(b, 0, 128); n != 100 {
		t.Fatalf("Enqueue of 128 into 100 took %d", n)
	}
	dpdk.FreeBurst(b, 100, 28) // refused: still ours
	if r.Len() != 100 {
		t.Fatalf("Len %d, want 100", r.Len())
	}
	out, err := dpdk.NewBurst(64)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	if n := r.Dequeue(out, 0, 64); n != 64 {
		t.Fatalf("Dequeue took %d of 64", n)
	}
	for i, m := range out.Mbufs {
		if m != sent[i] {
			t.Fatalf("dequeued %d: %p, want %p (FIFO)", i, m, sent[i])
		}
	}
	dpdk.FreeBurst(out, 0, 64)
	r.Free() // 36 still in it
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use after Free: %d, want %d", got, inUse)
	}
}

// TestRingAcrossThreads: a producer and a consumer, each on its own
// registered OS thread, pass 200,000 mbufs through a small SP/SC ring; every
// one arrives, in order, and none is lost.
func TestRingAcrossThreads(t *testing.T) {
	_, pool := dpdktest.Port(t, ringRaw)
	inUse := pool.InUse()
	r, err := dpdk.NewRing("t_ring_x", 64, dpdk.SocketAny, dpdk.SingleProducer|dpdk.SingleConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	const total = 200_000
	const burst = 32
	// The producer stamps each mbuf's data with its sequence number.
	prod := func(done chan<- error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if _, err := dpdk.RegisterThread(); err != nil {
			done <- err
			return
		}
		defer dpdk.UnregisterThread()
		b, err := dpdk.NewBurst(burst)
		if err != nil {
			done <- err
			return
		}
		defer b.Free()
		for seq := 0; seq < total; {
			n := min(burst, total-seq)
			for !dpdk.AllocBurst(pool, b, 0, n) {
				runtime.Gosched() // the consumer frees
			}
			for i, m := range b.Mbufs[:n] {
				v := seq + i
				m.Room()[0], m.Room()[1], m.Room()[2] = byte(v), byte(v>>8), byte(v>>16)
				m.SetLen(3)
			}
			for off := 0; off < n; {
				off += r.Enqueue(b, off, n-off)
			}
			seq += n
		}
		done <- nil
	}
	pdone := make(chan error, 1)
	go prod(pdone)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, err := dpdk.RegisterThread(); err != nil {
		t.Fatal(err)
	}
	defer dpdk.UnregisterThread()
	b, err := dpdk.NewBurst(burst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for seq := 0; seq < total; {
		n := r.Dequeue(b, 0, burst)
		for _, m := range b.Mbufs[:n] {
			d := m.Data()
			if got := int(d[0]) | int(d[1])<<8 | int(d[2])<<16; got != seq&0xffffff {
				t.Fatalf("mbuf %d carries %d", seq, got)
			}
			seq++
		}
		dpdk.FreeBurst(b, 0, n)
		if n == 0 {
			runtime.Gosched()
		}
	}
	if err := <-pdone; err != nil {
		t.Fatal(err)
	}
	if r.Len() != 0 {
		t.Errorf("%d mbufs left in the ring", r.Len())
	}
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d", got, inUse)
	}
}

// TestFanout: unicast mbufs reach their own ring, a broadcast mbuf every
// ring with a reference each (the sender keeps its own), a full ring's
// share is freed and counted, and nothing leaks.
func TestFanout(t *testing.T) {
	_, pool := dpdktest.Port(t, ringRaw)
	inUse := pool.InUse()
	var rings [3]*dpdk.Ring
	for _, j := range []int{0, 2} {
		r, err := dpdk.NewRing("t_fan"+string(rune('0'+j)), 4, dpdk.SocketAny, dpdk.SingleProducer|dpdk.SingleConsumer)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Free()
		rings[j] = r
	}
	f, err := dpdk.NewFanout(rings[:], 8) // destination 1 is the sender itself
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := newBurst(t, pool, 8)
	m := b.Mbufs
	f.Add(0, m[0])
	f.Add(2, m[1])
	f.Add(2, m[2])
	f.AddAll(m[3]) // the sender keeps m[3] too
	if f.Len() != 4 {
		t.Fatalf("Len %d, want 4", f.Len())
	}
	if n := f.Send(); n != 5 {
		t.Fatalf("Send enqueued %d references, want 5", n)
	}
	if m[3].Refs() != 3 {
		t.Fatalf("broadcast mbuf has %d references, want 3 (sender + 2 rings)", m[3].Refs())
	}
	out, err := dpdk.NewBurst(8)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	for _, c := range []struct {
		j    int
		want []*dpdk.Mbuf
	}{{0, []*dpdk.Mbuf{m[0], m[3]}}, {2, []*dpdk.Mbuf{m[1], m[2], m[3]}}} {
		n := rings[c.j].Dequeue(out, 0, 8)
		if n != len(c.want) {
			t.Fatalf("ring %d: %d mbufs, want %d", c.j, n, len(c.want))
		}
		for i, w := range c.want {
			if out.Mbufs[i] != w {
				t.Errorf("ring %d entry %d: %p, want %p", c.j, i, out.Mbufs[i], w)
			}
		}
		dpdk.FreeBurst(out, 0, n) // each receiver frees its reference
	}
	if m[3].Refs() != 1 {
		t.Fatalf("broadcast mbuf has %d references after the receivers freed theirs, want 1", m[3].Refs())
	}
	// Ring 2 holds 4: the fifth reference is refused, freed, counted.
	for i := 4; i < 8; i++ {
		f.Add(2, m[i])
	}
	f.AddAll(m[3])
	if n := f.Send(); n != 5 {
		t.Fatalf("Send into a ring of 4 enqueued %d, want 5 (4 + 1 on ring 0)", n)
	}
	c := f.Counters()
	if c.Calls != 2 || c.Sent != 10 || c.Dropped != 1 {
		t.Errorf("counters %+v, want 2 calls, 10 sent, 1 dropped", c)
	}
	dpdk.FreeBurst(b, 3, 1) // the sender's own reference to m[3]
	rings[0].Drain()
	rings[2].Drain()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d", got, inUse)
	}
}

// TestPortIOInbound: Do(true) receives the port's frames and then those
// other threads put in its inbound rings, in one crossing; TrimRx keeps
// the first entries for the next Do to free and gives the rest away.
func TestPortIOInbound(t *testing.T) {
	port, pool := dpdktest.PortQueues(t, ringQs, 2, dpdktest.Mbufs, dpdktest.DataRoom)
	inUse := pool.InUse()
	info, err := port.Info()
	if err != nil {
		t.Fatal(err)
	}
	if hf, err := port.RSSHashes(); err != nil || hf != 0 || info.RSSOffloads != 0 {
		t.Errorf("net_ring: RSS hashes %#x (%v), offloads %#x: want none", hf, err, info.RSSOffloads)
	}
	io, err := dpdk.NewPortIO(port, 1, pool, 8, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	var in [2]*dpdk.Ring
	for j := range in {
		if in[j], err = dpdk.NewRing("t_in"+string(rune('0'+j)), 16, dpdk.SocketAny, dpdk.SingleProducer|dpdk.SingleConsumer); err != nil {
			t.Fatal(err)
		}
		defer in[j].Free()
	}
	if err := io.SetInbound(in[:], 9); err == nil {
		t.Error("SetInbound took more per receive than a burst")
	}
	if err := io.SetInbound([]*dpdk.Ring{in[0], nil, in[1]}, 8); err != nil {
		t.Fatal(err)
	}
	before, err := port.QueueStats(1)
	if err != nil {
		t.Fatal(err)
	}
	io.Do(false) // stash
	for i := 0; i < 3; i++ {
		m := io.TakeStash()
		fill(m.Room()[:70], i)
		m.SetLen(70)
		io.QueueTx(m) // net_ring queue 1 loops back to itself
	}
	b := newBurst(t, pool, 12)
	for i, m := range b.Mbufs {
		fill(m.Room()[:80], 100+i)
		m.SetLen(80)
	}
	if in[0].Enqueue(b, 0, 6) != 6 || in[1].Enqueue(b, 6, 6) != 6 {
		t.Fatal("inbound rings refused mbufs")
	}
	n := io.Do(true)
	if n != 3+8 || io.RxPort() != 3 {
		t.Fatalf("Do(true) = %d with %d from the port, want 3 + 8 (the inbound share)", n, io.RxPort())
	}
	rx := io.Rx()
	for i, m := range rx[:3] {
		check(t, m.Data(), i, 70)
	}
	from := map[int]bool{}
	for _, m := range rx[3:] {
		d := m.Data()
		if len(d) != 80 {
			t.Fatalf("inbound frame of %d bytes", len(d))
		}
		from[int(d[0])] = true
	}
	if len(from) != 8 {
		t.Fatalf("inbound frames not distinct: %v", from)
	}
	// Give rx[0] away (freed here, as a Fanout would have sent it), keep
	// the rest.
	gone := rx[0]
	copy(rx, rx[1:])
	io.TrimRx(n - 1)
	gone.Free()
	// The next receive frees the kept ones and takes the other 4.
	if n := io.Do(true); n != 4 || io.RxPort() != 0 {
		t.Fatalf("second Do(true) = %d (port %d), want the 4 left inbound", n, io.RxPort())
	}
	c := io.Counters()
	if c.RxPackets != 3 || c.RxRing != 12 {
		t.Errorf("counters %+v, want 3 from the port, 12 from the rings", c)
	}
	after, err := port.QueueStats(1)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.RxPackets - before.RxPackets; d != 3 {
		t.Errorf("queue 1 counted %d frames received, want 3", d)
	}
	if _, err := port.QueueStats(16); err == nil {
		t.Error("QueueStats(16) succeeded (RTE_ETHDEV_QUEUE_STAT_CNTRS is 16)")
	}
	io.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d", got, inUse)
	}
}

// TestRingPairQueues: queue q of one port of a pair sends to queue q of
// the other, and only there.
func TestRingPairQueues(t *testing.T) {
	a, b, poolA, _ := dpdktest.RingPairQueues(t, "qpair0a", "qpair0b", 2)
	bu := newBurst(t, poolA, 4)
	for i, m := range bu.Mbufs {
		fill(m.Room()[:64], i)
		m.SetLen(64)
	}
	if n := dpdk.TxBurst(a, 1, bu, 0, 4); n != 4 {
		t.Fatalf("TxBurst took %d of 4", n)
	}
	if n := dpdk.RxBurst(b, 0, bu, 0, 4); n != 0 {
		t.Fatalf("queue 0 of b received %d frames sent on queue 1 of a", n)
	}
	if n := dpdk.RxBurst(b, 1, bu, 0, 4); n != 4 {
		t.Fatalf("queue 1 of b received %d of 4", n)
	}
	dpdk.FreeBurst(bu, 0, 4)
}

// TestInboundAllocs: receiving from inbound rings and fanning out allocate
// nothing.
func TestInboundAllocs(t *testing.T) {
	port, pool := dpdktest.PortQueues(t, ringQs, 2, dpdktest.Mbufs, dpdktest.DataRoom)
	io, err := dpdk.NewPortIO(port, 0, pool, 32, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer io.Close()
	r, err := dpdk.NewRing("t_alloc", 64, dpdk.SocketAny, dpdk.SingleProducer|dpdk.SingleConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	if err := io.SetInbound([]*dpdk.Ring{r}, 32); err != nil {
		t.Fatal(err)
	}
	f, err := dpdk.NewFanout([]*dpdk.Ring{r}, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	io.Do(false)
	allocs := testing.AllocsPerRun(100, func() {
		for i := 0; i < 16; i++ {
			m := io.TakeStash()
			if m == nil {
				io.Do(false)
				m = io.TakeStash()
			}
			m.SetLen(64)
			f.Add(0, m)
		}
		f.Send()
		n := io.Do(true)
		rx := io.Rx()
		for _, m := range rx[:n] {
			_ = m.Data()[0]
		}
		io.TrimRx(n)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per burst, want 0", allocs)
	}
}

// TestPortIOPreTxOutbound: a Do with frames to send runs the pre-transmit
// hook first (one without, never), and every Do sends what its outbound
// Fanout holds, in the same crossing: the Fanout counts no crossing of
// its own, and a broadcast mbuf of the rx burst the Do frees reaches its
// ring with a reference of the ring's own.
func TestPortIOPreTxOutbound(t *testing.T) {
	port, pool := dpdktest.Port(t, ringIO)
	inUse := pool.InUse()
	io, err := dpdk.NewPortIO(port, 0, pool, 8, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	fn, arg, count := dpdk.CountingHook()
	io.SetPreTx(fn, arg)
	r, err := dpdk.NewRing("t_out", 16, dpdk.SocketAny, dpdk.SingleProducer|dpdk.SingleConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	f, err := dpdk.NewFanout([]*dpdk.Ring{r}, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	io.SetOutbound(f)

	io.Do(true) // stash; nothing to send
	if count() != 0 {
		t.Fatalf("hook ran %d times with nothing to send", count())
	}
	for i := range 2 {
		m := io.TakeStash()
		fill(m.Room()[:64], i)
		m.SetLen(64)
		io.QueueTx(m)
	}
	if n := io.Do(true); n != 2 || count() != 1 {
		t.Fatalf("Do(true) received %d, hook ran %d times; want 2 and 1", n, count())
	}
	// Hand the first received frame to the ring, and broadcast the second
	// (kept in the burst, freed by the next Do).
	rx := io.Rx()
	gone, kept := rx[0], rx[1]
	rx[0] = kept
	io.TrimRx(1)
	f.Add(0, gone)
	f.AddAll(kept)
	if f.Len() != 2 {
		t.Fatalf("Len %d, want 2", f.Len())
	}
	before := io.Calls()
	if n := io.Do(true); n != 0 {
		t.Fatalf("Do(true) received %d, want 0", n)
	}
	if io.Calls() != before+1 || f.Len() != 0 || count() != 1 {
		t.Fatalf("calls +%d, fanout holds %d, hook ran %d times: want 1 crossing, 0 left, 1", io.Calls()-before, f.Len(), count())
	}
	if c := f.Counters(); c.Calls != 0 || c.Sent != 2 {
		t.Errorf("fanout counters %+v, want no crossing of its own and 2 sent", c)
	}
	b, err := dpdk.NewBurst(4)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if n := r.Dequeue(b, 0, 4); n != 2 || b.Mbufs[0] != gone || b.Mbufs[1] != kept {
		t.Fatalf("ring gave %d mbufs", n)
	}
	if kept.Refs() != 1 {
		t.Errorf("broadcast mbuf has %d references once the Do freed the burst's, want 1 (the ring's)", kept.Refs())
	}
	check(t, gone.Data(), 0, 64)
	check(t, kept.Data(), 1, 64)
	dpdk.FreeBurst(b, 0, 2)
	io.SetOutbound(nil)
	io.SetPreTx(nil, nil)
	io.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d", got, inUse)
	}
}

// TestPortIOStamps: with SetStamps a Do records the time-stamp counter at
// its phase boundaries, in order, a phase it skips (no frame to send: no
// hook) as long as nothing; without, it records nothing.
func TestPortIOStamps(t *testing.T) {
	port, pool := dpdktest.Port(t, ringIO)
	inUse := pool.InUse()
	io, err := dpdk.NewPortIO(port, 0, pool, 8, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	fn, arg, count := dpdk.CountingHook()
	io.SetPreTx(fn, arg)
	io.Do(true) // the stash; no stamps asked for
	if s := io.Stamps(); s != (dpdk.Stamps{}) {
		t.Fatalf("stamps %+v without SetStamps", s)
	}
	io.SetStamps(true)
	for i := range 2 {
		m := io.TakeStash()
		fill(m.Room()[:64], i)
		m.SetLen(64)
		io.QueueTx(m)
	}
	if n := io.Do(true); n != 2 || count() != 1 {
		t.Fatalf("Do(true) received %d, hook ran %d times; want 2 and 1", n, count())
	}
	s := io.Stamps()
	ordered := func(s dpdk.Stamps) bool {
		return s.Start != 0 && s.Start <= s.PreTx && s.PreTx <= s.Tx && s.Tx <= s.Sent && s.Sent <= s.Freed &&
			s.Freed <= s.Refilled && s.Refilled <= s.End
	}
	if !ordered(s) || s.Outbound()+s.PreTxHook()+s.Send()+s.FreeRx()+s.Refill()+s.Receive() != s.End-s.Start {
		t.Fatalf("stamps %+v: not in the order of the phases", s)
	}
	if n := io.Do(true); n != 0 { // nothing to send: no hook
		t.Fatalf("Do(true) received %d, want 0", n)
	}
	s2 := io.Stamps()
	if !ordered(s2) || s2.Start < s.End || s2.PreTxHook() != 0 || count() != 1 {
		t.Fatalf("stamps %+v after %+v, hook ran %d times", s2, s, count())
	}
	io.SetStamps(false)
	io.Do(true)
	if s3 := io.Stamps(); s3 != s2 {
		t.Fatalf("stamps %+v after SetStamps(false), want those of the last stamped Do", s3)
	}
	io.SetPreTx(nil, nil)
	io.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d", got, inUse)
	}
}
