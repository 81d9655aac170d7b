package dpdkport_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/tsc"
)

// TestLoopInvariants: the loop's invariants on the real engine, counted
// (never timed): a core on a net_ring port that reflects its frames
// (HairpinSelf: every request and response crosses the port), sealing
// and opening on ipsec-mb (and on crypto/cipher), busy and backing off,
// reads its own region with 8 ops in flight for a thousand ops, its
// portal ringing the summary doorbell. From the counters the runner
// publishes when it stops:
//
//   - one clock read per iteration, plus one per sleep cut short and one
//     at stop;
//   - at most runner.MaxCrossings crossings into C in every iteration:
//     the poll step (the seals of the frames it sends run inside it:
//     engine.TxCHook, SealsInTx) and the opens of the burst received;
//   - no look at the command ring with nothing new outside the fallback
//     scans (RingRungIdle: a look the summary asked for after an earlier
//     look took the commands, a race with the application's ring);
//   - 0 allocations per op, over the process (runtime.MemStats), as
//     testing.AllocsPerRun counts them.
//
// Each also runs with cost accounting, as rmad -selftest -profile wires
// it (a Stages on the CPU's time-stamp counter, on the core, the port and
// the loop): the invariants hold as they are (the marks read their own
// counter, no clock of the loop's, and the stamps of the crossing's phases
// are taken inside it, in C), every cycle from the loop's start to its
// stop is charged to exactly one stage, and the poll step's one crossing
// is split between Receive, Seal and Transmit.
func TestLoopInvariants(t *testing.T) {
	dpdktest.Require(t)
	cryptos := []string{engine.CryptoGo}
	if _, err := engine.MBArch(); err == nil {
		cryptos = append(cryptos, engine.CryptoIPsecMB)
	}
	for _, crypto := range cryptos {
		for _, mode := range []runner.Mode{runner.Busy, runner.Backoff} {
			for _, staged := range []bool{false, true} {
				name := fmt.Sprintf("%s/%v", crypto, mode)
				if staged {
					name += "/stages"
				}
				t.Run(name, func(t *testing.T) { loopInvariants(t, crypto, mode, staged) })
			}
		}
	}
}

// loopInvariants is a run of TestLoopInvariants.
func loopInvariants(t *testing.T, crypto string, mode runner.Mode, staged bool) {
	cfg := e2eConfig("10.0.0.1", 1)
	cfg.HairpinSelf = true
	cfg.Crypto = crypto
	var stg *stage.Stages
	var counted int
	var start uint64 // the counter when the loop reset stg
	if staged {
		stg = stage.New(func() uint64 {
			c := tsc.Read()
			if counted == 1 {
				start = c
			}
			counted++
			return c
		})
	}
	n := startEngineStages(t, ringInv, cfg, mode, stg)
	src := make([]byte, 64<<10)
	pattern(src, 0x3c)
	sum, flag := ringSummary(t, n)
	flag.Store(abi.SummaryOn) // the portal rings (the first scan sees it)
	a := openAppFlag(t, n.r, cfg.LocalIP.As4(), 8, src, make([]byte, 64<<10), flagBytes(flag))
	me := ipU32(cfg.LocalIP)
	kd := aesni.DeriveKey(testKr, a.ip, testPID, uint8(abi.OpRead))
	reads := func(ops int) {
		free := append(make([]abi.SlotID, 0, 8), a.slots...)
		posted, done := 0, 0
		var c abi.Completion
		deadline := time.Now().Add(30 * time.Second)
		for done < ops {
			was := posted
			for len(free) > 0 && posted < ops {
				s := free[len(free)-1]
				free = free[:len(free)-1]
				off := uint64(posted%64) * 64
				(&abi.Command{Op: abi.OpRead, Slot: s, Cookie: uint64(posted), RemoteAddr: me, RemoteRegion: a.src,
					RemoteOffset: off, LocalRegion: a.dst, LocalOffset: off, Length: 64, Key: kd}).Encode(a.cmd.Reserve())
				a.cmd.Commit()
				posted++
			}
			if posted != was {
				a.cmd.Publish()
				sum.Ring(uint32(a.id))
			}
			got := false
			for e := a.cpl.Peek(); e != nil; e = a.cpl.Peek() {
				c.Decode(e)
				a.cpl.Advance()
				if c.Status != abi.StatusOK {
					t.Fatalf("completion %+v", c)
				}
				free = append(free, c.Slot)
				done++
				got = true
			}
			a.cpl.Release()
			if !got {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d ops after 30 s", done, ops)
				}
				runtime.Gosched()
			}
		}
	}
	reads(200) // warm: keys, pools, registrations
	const ops = 1000
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	reads(ops)
	runtime.ReadMemStats(&m1)
	var ps dpdkport.Stats
	if err := n.r.Exec(func(*engine.Core) { ps = n.port.Stats() }); err != nil {
		t.Fatal(err)
	}
	n.stop(t)
	s := n.r.Stats() // published as the loop stopped: exact
	t.Logf("%d iterations (%d with work), %d clock reads, %d woken early; crossings %d (max %d, over %d), port %d (%d mid-iteration); ring looks %d (idle %d, rung idle %d), scans %d; %d allocations in %d ops",
		s.Iterations, s.WorkIterations, s.ClockReads, s.WokenEarly, s.Crossings, s.CrossingsMax, s.CrossingsOver,
		ps.IOCalls, ps.TxFullCalls, s.RingLooks, s.RingLooksIdle, s.RingRungIdle, s.RingScans, m1.Mallocs-m0.Mallocs, ops)
	if s.ClockReads != s.Iterations+s.WokenEarly+1 {
		t.Errorf("%d clock reads in %d iterations with %d sleeps cut short: want one each, and one at stop", s.ClockReads, s.Iterations, s.WokenEarly)
	}
	if s.CrossingsOver != 0 || s.CrossingsMax > runner.MaxCrossings || s.CrossingsMax == 0 {
		t.Errorf("%d iterations crossed more than %d times (the most: %d)", s.CrossingsOver, runner.MaxCrossings, s.CrossingsMax)
	}
	if s.Crossings < s.Iterations {
		t.Errorf("%d crossings in %d iterations: every iteration polls the port", s.Crossings, s.Iterations)
	}
	if s.RingLooksIdle-s.RingRungIdle > s.RingScans {
		t.Errorf("%d idle looks at the command ring beyond the %d scans'", s.RingLooksIdle-s.RingRungIdle, s.RingScans)
	}
	if a := m1.Mallocs - m0.Mallocs; a/ops != 0 {
		t.Errorf("%d allocations in %d ops, want 0 per op", a, ops)
	}
	if crypto == engine.CryptoIPsecMB {
		p := pathOf(n)
		if p.SealsInTx == 0 {
			t.Errorf("no seal batch ran in the port's crossing: %+v", p)
		}
	}
	if mode == runner.Busy && s.WokenEarly != 0 {
		t.Errorf("a busy loop woke early %d times", s.WokenEarly)
	}
	if staged {
		checkStages(t, stg.Snapshot(0), start)
	}
}

// checkStages checks the stages a loop that has stopped charged since
// the counter read start (its Reset): all of it, each cycle to one
// stage, and some to each stage of the data path.
func checkStages(t *testing.T, sn stage.Snapshot, start uint64) {
	t.Helper()
	t.Logf("stages: %v cycles, %v sections", sn.Cycles, sn.Sections)
	if sn.Total() != sn.At-start {
		t.Errorf("%d cycles charged between the loop's start and its stop, %d passed", sn.Total(), sn.At-start)
	}
	for _, st := range []stage.Stage{stage.Receive, stage.Open, stage.Protocol, stage.Build, stage.Seal, stage.Transmit, stage.Clock} {
		if sn.Cycles[st] == 0 || sn.Sections[st] == 0 {
			t.Errorf("%v: %d cycles in %d sections", st, sn.Cycles[st], sn.Sections[st])
		}
	}
	if sn.Frames == 0 {
		t.Error("no frame counted")
	}
}

// ringSummary gives n's core a summary doorbell and returns it with a
// summary flag word for a portal's segment (Go memory here).
func ringSummary(t *testing.T, n *engineNode) (*abi.Summary, *atomic.Uint32) {
	t.Helper()
	mem := aligned(abi.SummaryBytes(n.core.Config().Portals))
	var err error
	if xerr := n.r.Exec(func(c *engine.Core) { err = c.SetSummary(mem) }); xerr != nil || err != nil {
		t.Fatal(xerr, err)
	}
	sum, _ := abi.NewSummary(mem)
	return sum, (*atomic.Uint32)(unsafe.Pointer(&aligned(64)[0]))
}

// flagBytes is the 4 bytes of flag.
func flagBytes(flag *atomic.Uint32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(flag)), 4) }

// pathOf reads n's core's path counters (after its runner stopped).
func pathOf(n *engineNode) engine.PathCounters { return n.core.PathCounters() }

// TestGroupLoopInvariants: two engines of two cores each over ports of two
// queues that cannot steer (net_ring: what one sends on queue q the other
// receives on queue q), so requests and answers reach a core other than
// the one they name and are handed over. Every portal reads 64 B from
// both of the peer's portals, 8 ops at a time, for rounds: no iteration of
// any core crosses into C more than runner.MaxCrossings times (the
// hand-over rides the poll step's crossing), each reads the clock once,
// and frames were handed over.
func TestGroupLoopInvariants(t *testing.T) {
	dpdktest.RingPairQueues(t, "invA", "invB", 2)
	cfgA, cfgB := e2eConfig("10.0.0.1", 0xa), e2eConfig("10.0.0.2", 0xb)
	cfgA.Neighbors = []engine.Neighbor{{IP: cfgB.LocalIP, MAC: cfgB.LocalMAC}} // no ARP: a burst's opens in one batch
	cfgB.Neighbors = []engine.Neighbor{{IP: cfgA.LocalIP, MAC: cfgA.LocalMAC}}
	if _, err := engine.MBArch(); err == nil {
		cfgA.Crypto, cfgB.Crypto = engine.CryptoIPsecMB, engine.CryptoIPsecMB
	}
	na := startGroup(t, "net_ring_invA", 2, cfgA)
	nb := startGroup(t, "net_ring_invB", 2, cfgB)
	type side struct {
		apps [2]*app
		ip   uint32
	}
	mk := func(n *groupNode, cfg engine.Config) *side {
		s := &side{ip: ipU32(cfg.LocalIP)}
		for i := range 2 {
			src := make([]byte, 8192)
			pattern(src, byte(i))
			s.apps[i] = openAppOn(t, n.rs[i], cfg.LocalIP.As4(), 8, src, make([]byte, 8192))
		}
		return s
	}
	a, b := mk(na, cfgA), mk(nb, cfgB)
	for round := range 50 {
		for _, pair := range [][2]*side{{a, b}, {b, a}} {
			me, peer := pair[0], pair[1]
			for _, ap := range me.apps {
				for k := range 8 {
					ap.post(t, &abi.Command{Op: abi.OpRead, Slot: ap.slots[k], Cookie: uint64(round*8 + k),
						RemoteAddr: peer.ip, RemoteRegion: peer.apps[k%2].src, RemoteOffset: uint64(k) * 64,
						LocalRegion: ap.dst, LocalOffset: uint64(k) * 64, Length: 64})
				}
				ap.cmd.Publish()
			}
		}
		for _, s := range []*side{a, b} {
			for _, ap := range s.apps {
				for _, c := range ap.wait(t, 8) {
					if c.Status != abi.StatusOK {
						t.Fatalf("round %d: %+v", round, c)
					}
				}
			}
		}
	}
	for name, n := range map[string]*groupNode{"A": na, "B": nb} {
		ps := n.portStats(t)
		n.stop(t)
		var out uint64
		for i, r := range n.rs {
			s := r.Stats()
			out += ps[i].HandedOut
			t.Logf("engine %s core %d: %d iterations, crossings %d (max %d, over %d), handed out %d, in %d",
				name, i, s.Iterations, s.Crossings, s.CrossingsMax, s.CrossingsOver, ps[i].HandedOut, ps[i].HandedIn)
			if s.CrossingsOver != 0 || s.CrossingsMax > runner.MaxCrossings {
				t.Errorf("engine %s core %d: %d iterations crossed more than %d times (the most: %d)", name, i, s.CrossingsOver, runner.MaxCrossings, s.CrossingsMax)
			}
			if s.ClockReads != s.Iterations+s.WokenEarly+1 {
				t.Errorf("engine %s core %d: %d clock reads in %d iterations (%d woken early)", name, i, s.ClockReads, s.Iterations, s.WokenEarly)
			}
		}
		if out == 0 {
			t.Errorf("engine %s: nothing handed over", name)
		}
	}
}
