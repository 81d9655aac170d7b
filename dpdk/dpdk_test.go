package dpdk_test

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"golang.org/x/sys/unix"
)

// Ports used by this package's tests; each test owns its port.
const (
	ringRaw   = "net_ring0" // TestRingLoopback
	ringIO    = "net_ring1" // TestPortIO*
	ringDrop  = "net_ring2" // TestPortIOTxDrop
	ringBench = "net_ring3" // benchmarks
	null0     = "net_null0" // TestNullPort
	ringInfo  = "net_ring4" // TestPortInfo
	ringQs    = "net_ring5" // TestPortIOInbound (two queues)
)

func TestMain(m *testing.M) {
	dpdktest.Main(m, ringRaw, ringIO, ringDrop, ringBench, null0, ringInfo, ringQs)
}

func TestEAL(t *testing.T) {
	dpdktest.Require(t)
	if !dpdk.Initialized() {
		t.Fatal("Initialized() = false after Init")
	}
	if err := dpdk.Init(nil); !errors.Is(err, dpdk.ErrAlreadyInitialized) {
		t.Errorf("second Init: got %v, want ErrAlreadyInitialized", err)
	}
	if n := dpdk.LcoreCount(); n < 1 {
		t.Errorf("LcoreCount() = %d", n)
	}
	if l := dpdk.MainLcore(); l >= dpdk.MaxLcore {
		t.Errorf("MainLcore() = %d", l)
	}
	if n := dpdk.SocketCount(); n < 1 {
		t.Errorf("SocketCount() = %d", n)
	}
	if n := dpdk.PortCount(); n < 6 { // the vdevs (ring pairs come later)
		t.Errorf("PortCount() = %d, want >= 6 vdevs", n)
	}
}

func TestPortByNameUnknown(t *testing.T) {
	dpdktest.Require(t)
	_, err := dpdk.PortByName("net_ring_nonexistent")
	if err == nil {
		t.Fatal("PortByName(unknown) succeeded")
	}
	var de *dpdk.Error
	if !errors.As(err, &de) || de.Op != "rte_eth_dev_get_port_by_name" {
		t.Errorf("error %v: want a *dpdk.Error from rte_eth_dev_get_port_by_name", err)
	}
	if !errors.Is(err, unix.ENODEV) {
		t.Errorf("error %v: want ENODEV", err)
	}
}

func TestErrorsWrapErrno(t *testing.T) {
	dpdktest.Require(t)
	bad := dpdk.PortID(dpdk.MaxLcore + 1000) // no such port
	err := bad.Configure(1, 1, 0)
	if err == nil {
		t.Fatal("Configure on an invalid port succeeded")
	}
	if !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EINVAL) {
		t.Errorf("Configure(invalid port) = %v, want ENODEV or EINVAL", err)
	}
	if _, err := dpdk.NewPktmbufPool("x", 0, 0, 0, 0, dpdk.SocketAny); err == nil {
		t.Error("NewPktmbufPool(n=0) succeeded")
	}
}

func TestPortInfo(t *testing.T) {
	port, pool := dpdktest.Port(t, ringInfo)
	name, err := port.Name()
	if err != nil || name != ringInfo {
		t.Errorf("Name() = %q, %v; want %q", name, err, ringInfo)
	}
	if got, err := dpdk.PortByName(ringInfo); err != nil || got != port {
		t.Errorf("PortByName(%q) = %d, %v; want %d", ringInfo, got, err, port)
	}
	if !port.Valid() {
		t.Error("Valid() = false")
	}
	info, err := port.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Driver != "net_ring" || info.MaxRxQueues < 1 {
		t.Errorf("Info() = %+v", info)
	}
	if _, err := port.MACAddr(); err != nil {
		t.Error(err)
	}
	link, err := port.Link()
	if err != nil {
		t.Fatal(err)
	}
	if !link.Up {
		t.Errorf("Link() = %+v, want up after Start", link)
	}
	if mtu, err := port.MTU(); err != nil || mtu == 0 {
		t.Errorf("MTU() = %d, %v", mtu, err)
	}
	// net_ring has no MTU callback: ENOTSUP is a legitimate answer.
	if err := port.SetMTU(1500); err != nil && !errors.Is(err, unix.ENOTSUP) {
		t.Errorf("SetMTU(1500) = %v, want nil or ENOTSUP", err)
	}
	if pool.DataRoom() != dpdktest.DataRoom {
		t.Errorf("DataRoom() = %d, want %d", pool.DataRoom(), dpdktest.DataRoom)
	}
	if _, err := port.Stats(); err != nil {
		t.Error(err)
	}
}

// fill writes a frame pattern identifying frame i into b.
func fill(b []byte, i int) {
	for j := range b {
		b[j] = byte(i*7 + j)
	}
}

func check(t *testing.T, b []byte, i, size int) {
	t.Helper()
	if len(b) != size {
		t.Fatalf("frame %d: %d bytes, want %d", i, len(b), size)
	}
	for j := range b {
		if b[j] != byte(i*7+j) {
			t.Fatalf("frame %d: byte %d = %#x, want %#x", i, j, b[j], byte(i*7+j))
		}
	}
}

// TestRingLoopback writes patterned frames of several sizes through a
// net_ring port with the plain burst primitives and reads them back.
func TestRingLoopback(t *testing.T) {
	port, pool := dpdktest.Port(t, ringRaw)
	b, err := dpdk.NewBurst(32)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	inUse := pool.InUse()
	for _, size := range []int{60, 64, 128, 1514, 2048} {
		if !dpdk.AllocBurst(pool, b, 0, 32) {
			t.Fatal("AllocBurst failed")
		}
		for i, m := range b.Mbufs {
			if m.Segs() != 1 || m.DataLen() != 0 || m.DataOff() != dpdk.Headroom {
				t.Fatalf("fresh mbuf: segs %d, data_len %d, data_off %d", m.Segs(), m.DataLen(), m.DataOff())
			}
			room := m.Room()
			if len(room) < size {
				t.Fatalf("room %d < %d", len(room), size)
			}
			fill(room[:size], i)
			m.SetLen(size)
		}
		if n := dpdk.TxBurst(port, 0, b, 0, 32); n != 32 {
			t.Fatalf("TxBurst took %d of 32", n)
		}
		got := 0
		for tries := 0; got < 32 && tries < 100; tries++ {
			got += dpdk.RxBurst(port, 0, b, got, 32-got)
		}
		if got != 32 {
			t.Fatalf("RxBurst: %d of 32 frames came back", got)
		}
		for i, m := range b.Mbufs {
			// (net_ring hands back the mbufs as sent: it does not
			// set the input port.)
			if m.PktLen() != size || m.Segs() != 1 {
				t.Fatalf("frame %d: pkt_len %d, %d segments", i, m.PktLen(), m.Segs())
			}
			check(t, m.Data(), i, size)
		}
		dpdk.FreeBurst(b, 0, 32)
	}
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d (leak)", got, inUse)
	}
}

// TestNullPort: net_null accepts (and frees) everything sent, and receives
// generated frames.
func TestNullPort(t *testing.T) {
	port, pool := dpdktest.Port(t, null0)
	b, err := dpdk.NewBurst(32)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if !dpdk.AllocBurst(pool, b, 0, 32) {
		t.Fatal("AllocBurst failed")
	}
	for _, m := range b.Mbufs {
		m.SetLen(64)
	}
	if n := dpdk.TxBurst(port, 0, b, 0, 32); n != 32 {
		t.Fatalf("TxBurst took %d of 32", n)
	}
	n := dpdk.RxBurst(port, 0, b, 0, 32)
	if n == 0 {
		t.Fatal("net_null received nothing")
	}
	for _, m := range b.Mbufs[:n] {
		if m.DataLen() == 0 || len(m.Data()) != m.DataLen() {
			t.Fatalf("null rx frame: data_len %d", m.DataLen())
		}
	}
	dpdk.FreeBurst(b, 0, n)
}

// TestPortIO runs frames through the fused call: queue, Do (tx), Do (rx).
func TestPortIO(t *testing.T) {
	port, pool := dpdktest.Port(t, ringIO)
	inUse := pool.InUse()
	io, err := dpdk.NewPortIO(port, 0, pool, 32, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	if io.StashLen() != 0 || io.TxLen() != 0 || len(io.Rx()) != 0 {
		t.Fatal("new PortIO not empty")
	}
	io.Do(false) // fills the stash
	if io.StashLen() != 64 {
		t.Fatalf("stash %d after refill, want 64", io.StashLen())
	}
	const frames = 20
	for i := 0; i < frames; i++ {
		m := io.TakeStash()
		fill(m.Room()[:100+i], i)
		m.SetLen(100 + i)
		if io.QueueTx(m) {
			t.Fatal("burst full too early")
		}
	}
	if n := io.Do(true); n != frames { // tx then rx in one crossing
		t.Fatalf("Do(true) received %d, want %d", n, frames)
	}
	for i, m := range io.Rx() {
		check(t, m.Data(), i, 100+i)
	}
	if n := io.Do(true); n != 0 { // frees the burst, receives nothing
		t.Fatalf("second Do(true) received %d", n)
	}
	c := io.Counters()
	if c.Calls != 3 || c.TxPackets != frames || c.RxPackets != frames || c.TxDropped != 0 {
		t.Errorf("counters %+v", c)
	}
	// A taken mbuf can go back.
	// Taken mbufs go back while the stash has room; once a refill has
	// filled it, the caller keeps them and frees them itself.
	m := io.TakeStash()
	if !io.ReturnStash(m) {
		t.Error("ReturnStash refused an mbuf just taken")
	}
	var taken []*dpdk.Mbuf
	for io.StashLen() > 0 {
		taken = append(taken, io.TakeStash())
	}
	io.Do(false) // refill to full
	if io.StashLen() != 64 {
		t.Fatalf("stash %d after refill, want 64", io.StashLen())
	}
	if io.ReturnStash(taken[0]) {
		t.Error("ReturnStash accepted more than the stash holds")
	}
	for _, m := range taken {
		m.Free()
	}
	io.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use after Close: %d, want %d (leak)", got, inUse)
	}
}

// TestPortIOTxDrop fills the ring (nobody receives) until the port refuses
// frames: they are retried, then freed and counted, never leaked.
func TestPortIOTxDrop(t *testing.T) {
	port, pool := dpdktest.Port(t, ringDrop)
	inUse := pool.InUse()
	io, err := dpdk.NewPortIO(port, 0, pool, 32, 32, 2)
	if err != nil {
		t.Fatal(err)
	}
	const frames = 2048 // net_ring's ring holds 1023
	for i := 0; i < frames; i++ {
		m := io.TakeStash()
		if m == nil {
			io.Do(false)
			m = io.TakeStash()
		}
		m.SetLen(64)
		if io.QueueTx(m) {
			io.Do(false)
		}
	}
	io.Do(false)
	c := io.Counters()
	if c.TxPackets+c.TxDropped != frames || c.TxDropped == 0 {
		t.Errorf("counters %+v: want TxPackets+TxDropped = %d with drops", c, frames)
	}
	// Drain the ring.
	for io.Do(true) > 0 {
	}
	io.Close()
	if got := pool.InUse(); got != inUse {
		t.Errorf("mbufs in use: %d, want %d (leak)", got, inUse)
	}
}

// TestRingPair: frames sent on one port of a pair arrive on the other, and
// only there.
func TestRingPair(t *testing.T) {
	a, b, poolA, _ := dpdktest.RingPair(t, "pair0a", "pair0b")
	if a == b {
		t.Fatal("pair ports are the same port")
	}
	burst, err := dpdk.NewBurst(32)
	if err != nil {
		t.Fatal(err)
	}
	defer burst.Free()
	for _, dir := range [][2]dpdk.PortID{{a, b}, {b, a}} {
		from, to := dir[0], dir[1]
		if !dpdk.AllocBurst(poolA, burst, 0, 8) {
			t.Fatal("AllocBurst failed")
		}
		for i, m := range burst.Mbufs[:8] {
			fill(m.Room()[:64], i+int(from))
			m.SetLen(64)
		}
		if n := dpdk.TxBurst(from, 0, burst, 0, 8); n != 8 {
			t.Fatalf("tx %d of 8", n)
		}
		if n := dpdk.RxBurst(from, 0, burst, 0, 32); n != 0 {
			t.Fatalf("port %d received %d of its own frames", from, n)
		}
		if n := dpdk.RxBurst(to, 0, burst, 0, 32); n != 8 {
			t.Fatalf("port %d received %d of 8 frames", to, n)
		}
		for i, m := range burst.Mbufs[:8] {
			check(t, m.Data(), i+int(from), 64)
		}
		dpdk.FreeBurst(burst, 0, 8)
	}
	if _, _, err := dpdk.NewRingPair("pair0a", "pair0b", 64, dpdk.SocketAny); err == nil {
		t.Error("a second pair with the same names succeeded")
	}
}

func TestRegisterThread(t *testing.T) {
	dpdktest.Require(t)
	type result struct {
		lcore, seen uint32
		cpus        []int
		err         error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var r result
		if r.err = dpdk.SetAffinity(0); r.err == nil {
			r.cpus, r.err = dpdk.Affinity()
		}
		if r.err == nil {
			r.lcore, r.err = dpdk.RegisterThread()
			r.seen = dpdk.LcoreID()
			dpdk.UnregisterThread()
		}
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lcore == dpdk.LcoreAny || r.lcore != r.seen {
		t.Errorf("RegisterThread() = %d, LcoreID() = %d", r.lcore, r.seen)
	}
	if len(r.cpus) != 1 || r.cpus[0] != 0 {
		t.Errorf("Affinity() = %v, want [0]", r.cpus)
	}
	if got := dpdk.LcoreID(); got != dpdk.LcoreAny {
		// This goroutine is not locked, but no unlocked thread is ever
		// registered, so it must see LCORE_ID_ANY.
		t.Errorf("LcoreID() on an unregistered thread = %d", got)
	}
	if err := dpdk.SetAffinity(); err == nil {
		t.Error("SetAffinity() with no CPU succeeded")
	}
}

// TestHotPathAllocs: mbuf views and the fused call allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	port, pool := dpdktest.Port(t, ringIO)
	io, err := dpdk.NewPortIO(port, 0, pool, 32, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer io.Close()
	allocs := testing.AllocsPerRun(100, func() {
		for i := 0; i < 32; i++ {
			m := io.TakeStash()
			if m == nil {
				io.Do(false)
				m = io.TakeStash()
			}
			r := m.Room()
			r[0] = byte(i)
			m.SetLen(64)
			io.QueueTx(m)
		}
		io.Do(true)
		for _, m := range io.Rx() {
			_ = m.Data()[0]
		}
	})
	if allocs != 0 {
		t.Errorf("hot path: %v allocations per burst, want 0", allocs)
	}
}

// TestMempoolMemory checks that Memory covers every mbuf of a pool larger
// than a hugepage (its data room and its header), lowest address first,
// with adjacent chunks joined: aesni/mb's Batch registers these ranges,
// and an mbuf outside them is pinned per job. DPDK populates a pool by
// IOVA-contiguous chunks, one per 2 MB page when the pages are not
// physically contiguous, while the memzone is one range of virtual memory.
func TestMempoolMemory(t *testing.T) {
	dpdktest.Require(t)
	const n = 4095 // ~9 MB of 2 KB mbufs: several 2 MB pages
	pool, err := dpdk.NewPktmbufPool("memtest", n, 0, 0, dpdktest.DataRoom, dpdk.SocketAny)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	mem := pool.Memory()
	if len(mem) == 0 {
		t.Fatal("Memory() is empty")
	}
	for i := 1; i < len(mem); i++ {
		prevHi := uintptr(unsafe.Pointer(unsafe.SliceData(mem[i-1]))) + uintptr(len(mem[i-1]))
		if lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem[i]))); lo <= prevHi {
			t.Errorf("chunk %d at %#x: not above chunk %d's end %#x (unsorted, overlapping or not joined)", i, lo, i-1, prevHi)
		}
	}
	t.Logf("%d mbufs in %d range(s)", n, len(mem))
	b, err := dpdk.NewBurst(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if !dpdk.AllocBurst(pool, b, 0, n) {
		t.Fatal("AllocBurst of the whole pool failed")
	}
	defer dpdk.FreeBurst(b, 0, n)
	covered := func(p unsafe.Pointer, size uintptr) bool {
		for _, m := range mem {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
			if uintptr(p) >= lo && uintptr(p)+size <= lo+uintptr(len(m)) {
				return true
			}
		}
		return false
	}
	for i, m := range b.Mbufs {
		room := m.Room()
		if !covered(unsafe.Pointer(unsafe.SliceData(room)), uintptr(len(room))) {
			t.Fatalf("mbuf %d of %d: data room at %p+%d outside Memory()", i, n, unsafe.SliceData(room), len(room))
		}
		if !covered(unsafe.Pointer(m), 128) {
			t.Fatalf("mbuf %d of %d: header at %p outside Memory()", i, n, m)
		}
	}
}

// TestKeepOthersOff: a thread pinned to one CPU moves every other thread of
// the process off it; threads started afterwards stay off it too, and
// GOMAXPROCS stays as it was (the runtime recounts CPUs about once a
// second: watched for 2.5 s). The test gives the threads their affinity
// back.
func TestKeepOthersOff(t *testing.T) {
	// The test binary set GOMAXPROCS (-cpu), which stops the runtime's
	// updates; a daemon such as rmad has them.
	runtime.SetDefaultGOMAXPROCS()
	procs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(procs)
	all, err := dpdk.Affinity()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Skipf("needs two CPUs to keep threads off one; this thread may use %v", all)
	}
	engine := all[len(all)-1]
	tids := func() []int {
		d, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, e := range d {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	restore := func() {
		var set unix.CPUSet
		for _, c := range all {
			set.Set(c)
		}
		for _, tid := range tids() {
			_ = unix.SchedSetaffinity(tid, &set)
		}
	}
	defer restore()
	type result struct {
		tid, moved int
		err        error
	}
	done, quit := make(chan result), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := result{tid: unix.Gettid()}
		if r.err = dpdk.SetAffinity(engine); r.err == nil {
			r.moved, r.err = dpdk.KeepOthersOff(engine)
		}
		done <- r
		<-quit
	}()
	r := <-done
	defer close(quit)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.moved == 0 {
		t.Fatal("no thread moved")
	}
	newThreads(4)
	for _, tid := range tids() {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue
		}
		if tid == r.tid {
			if set.Count() != 1 || !set.IsSet(engine) {
				t.Errorf("the pinned thread %d lost its CPU %d", tid, engine)
			}
			continue
		}
		if set.IsSet(engine) {
			t.Errorf("thread %d may still run on CPU %d", tid, engine)
		}
	}
	for range 10 {
		time.Sleep(250 * time.Millisecond)
		if got := runtime.GOMAXPROCS(0); got != procs {
			t.Fatalf("GOMAXPROCS went from %d to %d", procs, got)
		}
	}
}

// TestSetNice: SetNice changes the calling thread's nice value and no
// other thread's, and threads the runtime starts afterwards do not inherit
// it (Go starts them from threads that are not locked).
func TestSetNice(t *testing.T) {
	type result struct {
		tid, nice int
		err       error
	}
	done, quit := make(chan result), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		r := result{tid: unix.Gettid()}
		if r.err = dpdk.SetNice(-7); r.err == nil {
			r.nice, r.err = dpdk.Nice()
		}
		done <- r
		<-quit
	}()
	r := <-done
	defer close(quit)
	if errors.Is(r.err, unix.EACCES) || errors.Is(r.err, unix.EPERM) {
		if os.Getuid() != 0 && os.Getenv("CI") != "true" {
			t.Skip("lowering a nice value needs CAP_SYS_NICE; not root and CI is not \"true\"")
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.nice != -7 {
		t.Fatalf("the thread's nice value is %d after SetNice(-7)", r.nice)
	}
	newThreads(4)
	d, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	others := 0
	for _, e := range d {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // exited
		}
		switch nice := 20 - p; {
		case tid == r.tid && nice != -7:
			t.Errorf("the thread's nice value went back to %d", nice)
		case tid != r.tid && nice != 0:
			t.Errorf("thread %d has nice value %d", tid, nice)
		case tid != r.tid:
			others++
		}
	}
	if others < 5 {
		t.Errorf("only %d other threads seen", others)
	}
}

// newThreads makes the runtime start about n more OS threads: n goroutines
// locked to their threads, blocked in a system call at the same time.
func newThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			unix.Nanosleep(&unix.Timespec{Nsec: 20e6}, nil)
		}()
	}
	wg.Wait()
}

// TestPagedMempool: a paged pool's objects are one page each, page-aligned,
// and form one array from its first chunk on, the AF_XDP umem DPDK 22.11's
// net_af_xdp registers for it; a pool populated page by page whose objects
// do not fill their pages (rte_pktmbuf_pool_create) leaves a gap at each
// page's end, and its last objects lie beyond that array.
func TestPagedMempool(t *testing.T) {
	dpdktest.Require(t)
	const n = 4095 // 16 MB: several pages of any size
	page := os.Getpagesize()
	paged, err := dpdk.NewPagedPktmbufPool("pagedtest", n, 0, dpdk.SocketAny)
	if err != nil {
		t.Fatal(err)
	}
	defer paged.Free()
	if k := paged.OutsideArray(); k != 0 {
		t.Errorf("paged pool: %d objects outside the array", k)
	}
	if size, room := paged.ObjectSize(), paged.DataRoom(); size != page || room != page-paged.HeaderSize()-128 {
		t.Errorf("ObjectSize() = %d, DataRoom() = %d, HeaderSize() = %d; want a page of %d: header, 128-byte mbuf, data room", size, room, paged.HeaderSize(), page)
	}
	mem := paged.Memory()
	if len(mem) != 1 || len(mem[0]) != n*page {
		t.Fatalf("paged pool memory: %d ranges, the first %d bytes; want one of %d", len(mem), len(mem[0]), n*page)
	}
	b, err := dpdk.NewBurst(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if !dpdk.AllocBurst(paged, b, 0, n) {
		t.Fatal("AllocBurst of the whole pool failed")
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem[0])))
	seen := make(map[uintptr]bool, n)
	for i, m := range b.Mbufs {
		d := uintptr(unsafe.Pointer(m)) - base - uintptr(paged.HeaderSize())
		if d%uintptr(page) != 0 || d/uintptr(page) >= n || seen[d] {
			t.Fatalf("mbuf %d: its object at offset %d of the pool's memory: not its own page among %d", i, d, n)
		}
		seen[d] = true
		if room := m.Room(); len(room) != paged.DataRoom()-dpdk.Headroom {
			t.Fatalf("mbuf %d: %d bytes after the headroom, want %d", i, len(room), paged.DataRoom()-dpdk.Headroom)
		}
	}
	dpdk.FreeBurst(b, 0, n)

	room := uint16(dpdk.Headroom + 2048)
	gappy, err := dpdk.NewPktmbufPool("gappytest", n, 0, 0, room, dpdk.SocketAny)
	if err != nil {
		t.Fatal(err)
	}
	defer gappy.Free()
	k := gappy.OutsideArray()
	t.Logf("rte_pktmbuf_pool_create: %d of %d objects of %d bytes outside the array", k, n, gappy.ObjectSize())
	if k == 0 {
		t.Error("no object of a pool populated page by page lies outside the array: the paged pool would not be needed")
	}
}
