package opgen

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/tsc"
	"github.com/onerma/onerma/wire"
	"golang.org/x/sys/unix"
)

// selfTestRegion is a target region of n bytes filled with a pattern in
// which ranges 64 bytes apart differ in every byte.
func selfTestRegion(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + 7)
	}
	return b
}

// runSelfTest polls c (frames to itself loop back inside it, or with
// HairpinSelf through tx) until the run is done, or fails the test after
// a virtual second.
func runSelfTest(t *testing.T, c *engine.Core, tx *testTx, st *SelfTest, now *int64) {
	t.Helper()
	st.Start()
	for end := *now + int64(time.Second); !st.Done(); *now += 1000 {
		if *now > end {
			r := st.Result()
			t.Fatalf("not done after a virtual second: %+v", r.Failure())
		}
		c.Poll(*now)
		tx.deliverTo(*now, c)
	}
}

// summary is r's counts, without the latency histograms.
func summary(r *Result) string {
	var b strings.Builder
	for i, c := range r.Cores {
		fmt.Fprintf(&b, "core %d: initiator %v done %v ops %d posted %d verified %d read back %d errors %d (%v) mismatches %d in flight %d; ",
			i, c.Initiator, c.Done, c.Ops, c.Posted, c.Verified, c.ReadBacks, c.Errors, c.FirstStatus, c.Mismatches, c.InFlight)
	}
	return b.String() + "failure: " + r.Failure()
}

func selfTestConfig(op abi.Op, size, o int, mem []byte) Config {
	return Config{Op: op, Size: size, Outstanding: o, Warmup: 200 * time.Microsecond, Duration: 2 * time.Millisecond,
		Target: Target{Mem: mem}}
}

// TestSelfTestLoopback: one core reads and writes a region of its own
// engine (through the self-loop, and out of the port and back), every op
// checked; afterwards Close gives every slot, region and entry back.
func TestSelfTestLoopback(t *testing.T) {
	for _, hairpin := range []bool{false, true} {
		for _, op := range []abi.Op{abi.OpRead, abi.OpWrite} {
			for _, size := range []int{1, 64, 4096} {
				t.Run(fmt.Sprintf("hairpin=%v/%v/%d", hairpin, op, size), func(t *testing.T) {
					cfg := testConfig("10.0.0.1", 1)
					cfg.HairpinSelf = hairpin
					tx := newTestTx(512)
					g, c := oneCore(t, cfg, tx)
					mem := selfTestRegion(256 << 10)
					st, err := New(g, selfTestConfig(op, size, 8, mem))
					if err != nil {
						t.Fatal(err)
					}
					now := int64(1000)
					runSelfTest(t, c, tx, st, &now)
					r := st.Result()
					s := r.Sum()
					if !r.OK() || s.Ops == 0 || s.Verified != s.Posted || s.Posted < s.Ops || s.Latency.N() != s.Ops || s.WindowNs != int64(2*time.Millisecond) {
						t.Fatalf("%s", summary(&r))
					}
					if st := c.Stats(); st.CompletedByOp[op][abi.StatusOK] != s.Posted {
						t.Errorf("the core counts %d %v completions OK, the source posted %d", st.CompletedByOp[op][abi.StatusOK], op, s.Posted)
					}
					if err := c.Audit(); err != nil {
						t.Fatal(err)
					}
					st.Close()
					assertGone(t, c)
				})
			}
		}
	}
}

// TestSelfTestCorruptRegion: a byte of the target that is not what the
// run expects fails the run with a message naming the op, the region,
// the offset and both bytes; a peer that never answers fails it with the
// op's status.
func TestSelfTestCorruptRegion(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	tx := newTestTx(512)
	g, c := oneCore(t, cfg, tx)
	mem := selfTestRegion(64 << 10)
	st, err := New(g, selfTestConfig(abi.OpRead, 64, 1, mem))
	if err != nil {
		t.Fatal(err)
	}
	mem[5] ^= 0xff // the first READ reads bytes 0..63
	now := int64(1000)
	runSelfTest(t, c, tx, st, &now)
	r := st.Result()
	want := fmt.Sprintf("core 0: READ of 64 B at offset 0x0 of region %#x on 10.0.0.1: byte 5 (region offset 0x5) is %#02x, want %#02x (what the region holds)",
		uint32(st.Region()), mem[5], mem[5]^0xff)
	if r.OK() || r.Failure() != want || r.Cores[0].Mismatches != 1 || r.Cores[0].Posted != 1 {
		t.Fatalf("failure %q, want %q; %s", r.Failure(), want, summary(&r))
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}

	// A peer that does not answer ARP: the op completes UNREACHABLE.
	g, c = oneCore(t, cfg, newTestTx(512))
	st, err = New(g, Config{Op: abi.OpWrite, Size: 64, Outstanding: 2, Duration: time.Millisecond,
		Target: Target{Addr: netip.MustParseAddr("10.0.0.9"), Region: 0x10001, Bytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	runSelfTest(t, c, newTestTx(512), st, &now)
	r = st.Result()
	if f := r.Failure(); r.OK() || !strings.HasPrefix(f, "core 0: WRITE of 64 B at offset 0x80000 of region 0x10001 on 10.0.0.9 (slot 0) completed UNREACHABLE") {
		t.Fatalf("failure %q", f)
	}
}

// TestSelfTestPeer: engine a reads and writes a region an application of
// engine b owns, with the K_d b's owner derives for a's op source;
// WRITEs are read back at the end, and what they wrote is in b's region.
func TestSelfTestPeer(t *testing.T) {
	for _, op := range []abi.Op{abi.OpRead, abi.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
			p := &pair{ta: newTestTx(512), tb: newTestTx(512), now: 1000}
			ga, a := oneCore(t, ca, p.ta)
			_, b := oneCore(t, cb, p.tb)
			p.a, p.b = a, b
			owner := openPortal(t, p.b)
			mem := selfTestRegion(1 << 20)
			expect := append([]byte(nil), mem...)
			rid, err := p.b.RegisterRegion(owner, mem, abi.PermRemoteRead|abi.PermRemoteWrite, testKr)
			if err != nil {
				t.Fatal(err)
			}
			ip := ca.LocalIP.As4()
			cfg := Config{Op: op, Size: 4096, Outstanding: 16, Warmup: time.Millisecond, Duration: 3 * time.Millisecond,
				Target: Target{Addr: cb.LocalIP, Region: rid, Bytes: uint64(len(mem)), Expect: expect,
					ReadKey:  aesni.DeriveKey(testKr, ip, engine.SelfTestPID, uint8(abi.OpRead)),
					WriteKey: aesni.DeriveKey(testKr, ip, engine.SelfTestPID, uint8(abi.OpWrite))}}
			st, err := New(ga, cfg)
			if err != nil {
				t.Fatal(err)
			}
			st.Start()
			for end := p.now + int64(time.Second); !st.Done(); p.now += 1000 {
				if p.now > end {
					t.Fatal("not done after a virtual second")
				}
				p.a.Poll(p.now)
				p.b.Poll(p.now)
				p.ta.deliverTo(p.now, p.b)
				p.tb.deliverTo(p.now, p.a)
			}
			r := st.Result()
			s := r.Sum()
			if !r.OK() || s.Ops == 0 {
				t.Fatalf("%s", summary(&r))
			}
			if op == abi.OpWrite {
				if s.ReadBacks != 16 {
					t.Fatalf("%d slots read back, want 16", s.ReadBacks)
				}
				src := st.src[0]
				for k := range 16 { // each slot's area holds its source: what it wrote last
					if got, want := mem[src.area[k]:][:4096], src.local[k*4096:][:4096]; string(got) != string(want) {
						t.Fatalf("slot %d's area at %#x does not hold its last WRITE", k, src.area[k])
					}
				}
				if string(mem[:len(mem)/2]) != string(expect[:len(mem)/2]) {
					t.Fatal("WRITEs changed the region's first half, which READs read")
				}
			}
			for _, c := range []*engine.Core{p.a, p.b} {
				if err := c.Audit(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSelfTestHandOver: on an engine of two cores whose port returns each
// core's frames to that core's queue (the net_ring loopback), HandOver
// lets only the cores whose requests another core serves initiate, and
// every answer then reaches them through another core; an address where
// each core serves its own requests is refused, naming one that works.
func TestSelfTestHandOver(t *testing.T) {
	var own, crossing netip.Addr // an address of each kind
	for a := netip.MustParseAddr("10.0.0.1"); !own.IsValid() || !crossing.IsValid(); a = a.Next() {
		switch {
		case engine.RequestCore(a, 0, 2) == 0 && engine.RequestCore(a, 1, 2) == 1:
			own = a
		case engine.RequestCore(a, 0, 2) != 0 || engine.RequestCore(a, 1, 2) != 1:
			crossing = a
		}
	}
	cfg := testConfig(own.String(), 1)
	cfg.HairpinSelf = true
	g, _ := group(t, cfg, 2)
	mc := selfTestConfig(abi.OpRead, 64, 4, selfTestRegion(64<<10))
	mc.HandOver = true
	if _, err := New(g, mc); err == nil || !strings.Contains(err.Error(), "serves every core's requests on that core") {
		t.Fatalf("New at %v: %v", own, err)
	}
	for i := range 2 { // the refusal left nothing behind
		assertGone(t, g.Core(i))
	}

	cfg = testConfig(crossing.String(), 1)
	cfg.HairpinSelf = true
	g, txs := group(t, cfg, 2)
	st, err := New(g, mc)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := range 2 {
		if engine.RequestCore(crossing, i, 2) != i {
			want++
		}
	}
	if st.Initiators() != want {
		t.Fatalf("%d initiating cores, want %d", st.Initiators(), want)
	}
	// The loopback port: core i's frames come back to core i's queue,
	// which hands those of other cores over.
	answers, handed := 0, 0
	st.Start()
	for now, k := int64(1000), 0; !st.Done(); now, k = now+1000, k+1 {
		if k > 100000 {
			t.Fatal("not done")
		}
		for i := range 2 {
			g.Core(i).Poll(now)
		}
		for i, tx := range txs {
			for _, f := range tx.take() {
				c := engine.Steer(f, cfg.UDPPort, 2)
				if _, ok := wire.PortCore(binary.BigEndian.Uint16(f[wire.EthLen+wire.IPv4Len+2:])); ok {
					answers++
					if c != i {
						handed++
					}
				}
				if c < 0 {
					c = i
				}
				g.Core(c).Receive(now, f)
			}
		}
	}
	r := st.Result()
	if !r.OK() || answers == 0 || handed != answers {
		t.Fatalf("%d of %d answers handed over; %s", handed, answers, summary(&r))
	}
	for i := range 2 {
		if err := g.Core(i).Audit(); err != nil {
			t.Fatalf("core %d: %v", i, err)
		}
	}
	if err := g.Audit(); err != nil {
		t.Fatal(err)
	}
}

// TestSelfTestRefuses: what New refuses, and that a refusal
// leaves the cores as they were.
func TestSelfTestRefuses(t *testing.T) {
	g, c := oneCore(t, testConfig("10.0.0.1", 1), newTestTx(8))
	mem := selfTestRegion(64 << 10)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"op", func(c *Config) { c.Op = abi.OpRekey }, "op REKEY, want READ or WRITE"},
		{"size", func(c *Config) { c.Size = 4097 }, "size 4097"},
		{"outstanding", func(c *Config) { c.Outstanding = 65 }, "65 ops in flight, want 1..64"},
		{"duration", func(c *Config) { c.Duration = 0 }, "duration 0s"},
		{"both", func(c *Config) { c.Target.Addr = netip.MustParseAddr("10.0.0.2") }, "at once"},
		{"none", func(c *Config) { c.Target.Mem = nil }, "no target"},
		{"small", func(c *Config) { c.Target.Mem = mem[:64] }, "first half"},
		{"writes", func(c *Config) { c.Op, c.Size, c.Outstanding = abi.OpWrite, 4096, 9 }, "1 cores × 9 ops × 4096 bytes"},
		{"expect", func(c *Config) {
			c.Target = Target{Addr: netip.MustParseAddr("10.0.0.2"), Region: 1, Bytes: 1 << 20}
		}, "0 bytes expected"},
	} {
		cfg := selfTestConfig(abi.OpRead, 64, 8, mem)
		tc.edit(&cfg)
		if _, err := New(g, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	assertGone(t, c) // no refusal left an op source behind
}

// TestSelfTestStages: with Config.Stages each core's source snapshots its
// core's cost accounting when its window opens and closes; the window's
// counts cover its length on the loop's clock, and refusals are precise.
func TestSelfTestStages(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true
	tx := newTestTx(512)
	g, c := oneCore(t, cfg, tx)
	now := int64(1000)
	s := stage.New(func() uint64 { return uint64(2 * now) }) // two cycles a ns
	c.SetStages(s)
	sc := selfTestConfig(abi.OpRead, 64, 8, selfTestRegion(256<<10))
	sc.Stages = []*stage.Stages{s}
	st, err := New(g, sc)
	if err != nil {
		t.Fatal(err)
	}
	runSelfTest(t, c, tx, st, &now)
	r := st.Result()
	sum := r.Sum()
	d := sum.Stages
	// The window's snapshots are taken at the first Poll at or after its
	// start and end: the test's polls are 1 µs apart.
	if !r.OK() || sum.Ops == 0 || d.Now < int64(2*time.Millisecond) || d.Now > int64(2*time.Millisecond)+1000 || d.At != uint64(2*d.Now) || d.Total() != d.At {
		t.Fatalf("window %+v over %s", d, summary(&r))
	}
	if d.Cycles[stage.Protocol]+d.Cycles[stage.Build] == 0 || d.Sections[stage.Build] == 0 {
		t.Errorf("nothing charged to the core's stages: %+v", d)
	}
	if d.Sections[stage.Check] == 0 || d.Sections[stage.Check] > uint64(sum.Ops) {
		t.Errorf("the source's checks: %d sections of Check for %d ops", d.Sections[stage.Check], sum.Ops)
	}
	rep := stage.NewReport(d, sum.Ops, 2e9, stage.Budget{})
	if x, _ := rep.Row(stage.RowUnattributed); x.Cycles != 0 {
		t.Errorf("unattributed %+v", x)
	}
	st.Close()

	sc.Stages = []*stage.Stages{s, s}
	if _, err := New(g, sc); err == nil || !strings.Contains(err.Error(), "stages for 2 cores") {
		t.Errorf("stages for two cores of one: %v", err)
	}
	sc.Stages = []*stage.Stages{nil} // a core without: no snapshots
	st, err = New(g, sc)
	if err != nil {
		t.Fatal(err)
	}
	runSelfTest(t, c, tx, st, &now)
	if r := st.Result(); r.Sum().Stages.At != 0 {
		t.Errorf("stages counted without: %+v", r.Sum().Stages)
	}
	st.Close()
}

// TestSelfTestAllocs: the op source's steady state allocates nothing,
// with stages counted or not.
func TestSelfTestAllocs(t *testing.T) {
	for _, tc := range []struct {
		op     abi.Op
		staged bool
	}{{abi.OpRead, false}, {abi.OpWrite, false}, {abi.OpRead, true}} {
		op, staged := tc.op, tc.staged
		g, c := oneCore(t, testConfig("10.0.0.1", 1), newTestTx(8))
		cfg := selfTestConfig(op, 64, 16, selfTestRegion(64<<10))
		cfg.Duration = time.Hour
		if staged {
			var k uint64
			s := stage.New(func() uint64 { k++; return k })
			c.SetStages(s)
			cfg.Stages = []*stage.Stages{s}
			cfg.Warmup = 0
		}
		st, err := New(g, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st.Start()
		now := int64(1000)
		for range 100 {
			c.Poll(now)
			now += 1000
		}
		if a := testing.AllocsPerRun(1000, func() { c.Poll(now); now += 1000 }); a != 0 {
			t.Errorf("%v: %.1f allocations per Poll", op, a)
		}
		if r := st.Result(); r.Sum().Verified < 1000 || r.Sum().Errors+r.Sum().Mismatches > 0 {
			t.Fatalf("%v: %s", op, summary(&r))
		}
	}
}

// BenchmarkSelfTestLoopback: one core's cost per op of its own 64 B
// READs, posted, served through the self-loop, checked (ns/op is per op).
func BenchmarkSelfTestLoopback(b *testing.B) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.Unbound() // one tenant: its 32 requests may fill the queue to the NACK threshold
	g, c := oneCore(b, cfg, newTestTx(8))
	sc := selfTestConfig(abi.OpRead, 64, 32, selfTestRegion(1<<20)) // below the test config's NACK threshold
	sc.Duration = time.Hour
	st, err := New(g, sc)
	if err != nil {
		b.Fatal(err)
	}
	st.Start()
	src := st.src[0]
	now := int64(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for start := src.res.Verified; src.res.Verified-start < uint64(b.N); now += 1000 {
		c.Poll(now)
	}
	b.StopTimer()
	if src.res.Errors+src.res.Mismatches > 0 {
		b.Fatalf("%d errors (%v), %d mismatches", src.res.Errors, src.res.FirstStatus, src.res.Mismatches)
	}
}

// BenchmarkSelfTestStages is what the cost accounting costs: one core's
// 64 B READs (O in flight) out of its Tx and back, with ipsec-mb where it
// is built (rmad's -selftest on the loopback), with no stages and with
// stages on the CPU's counter, marked by the core and, as the runner
// marks them, around each burst (ns/op is per op). cpu-ns/op is the
// thread's CPU time per op: on a busy host it leaves out the time the
// thread waited for its CPU. Compare the two with benchstat, -count 10.
func BenchmarkSelfTestStages(b *testing.B) {
	for _, depth := range []int{16, 64} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("O=%d/stages=%v", depth, on), func(b *testing.B) { benchStages(b, depth, on) })
		}
	}
}

func benchStages(b *testing.B, depth int, on bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg := testConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true
	cfg.Slots, cfg.WindowBytes = 2*depth, 1<<20 // as rmad's: neither bounds the ops in flight
	cfg.InboundQueue, cfg.NackThreshold = 4*depth, 2*depth
	cfg.Unbound()
	if _, err := engine.MBArch(); err == nil {
		cfg.Crypto = engine.CryptoIPsecMB
	}
	tx := newTestTx(512)
	g, c := oneCore(b, cfg, tx)
	sc := selfTestConfig(abi.OpRead, 64, depth, selfTestRegion(1<<20))
	sc.Duration, sc.Warmup = time.Hour, 0
	var s *stage.Stages
	if on {
		s = stage.New(tsc.Read)
		c.SetStages(s)
	}
	st, err := New(g, sc)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	st.Start()
	now := int64(1000)
	iterate := func() { // as runner.iterate marks
		if s != nil {
			s.Enter(stage.Receive)
		}
		tx.deliverTo(now, c)
		c.Poll(now)
		if s != nil {
			s.Enter(stage.Transmit)
			s.Enter(stage.Clock)
		}
		now += 1000
	}
	for range 1000 {
		iterate()
	}
	src := st.src[0]
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := src.res.Verified, threadCPUNs()
	for src.res.Verified-start < uint64(b.N) {
		iterate()
	}
	b.ReportMetric(float64(threadCPUNs()-cpu0)/float64(src.res.Verified-start), "cpu-ns/op")
	if src.res.Errors+src.res.Mismatches > 0 {
		b.Fatalf("%d errors, %d mismatches", src.res.Errors, src.res.Mismatches)
	}
}

// threadCPUNs is the CPU time of the calling thread.
func threadCPUNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
