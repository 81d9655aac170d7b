package runner_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/tsc"
	"github.com/onerma/onerma/wire"
)

// The loop's invariants, counted (never timed) over a real loop: two
// engines on a memport pair, each driven by a started runner, one
// application reading the other engine's region with ops in flight, its
// portal ringing the summary doorbell. Each asserts, from the counters
// the runners publish when they stop:
//
//   - one clock read per iteration (plus one per sleep cut short, and one
//     at stop);
//   - at most runner.MaxCrossings cgo crossings in every iteration;
//   - no look at a command ring with nothing new except in the engine's
//     fallback scans (or one the summary asked for after an earlier
//     look had taken the commands);
//   - no allocation per op in the steady state: runtime.MemStats over
//     the whole process and thousands of ops, per op as
//     testing.AllocsPerRun counts (whole allocations per op: the runtime
//     itself allocates now and then, a goroutine for a thread it starts
//     when a loop blocks in a system call, which no op causes);
//     TestIterateOpsAllocs counts exactly, on one goroutine.

// invKr is the region key of the test's source region, invPID the
// reading application's identity.
var invKr = aesni.Key{0x69, 0x6e, 0x76}

const invPID = 7

func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

// invApp is an application's side of a portal that rings its core's
// summary doorbell.
type invApp struct {
	id    engine.PortalID
	cmd   *abi.Producer
	cpl   *abi.Consumer
	sum   *abi.Summary
	slots []abi.SlotID
	dst   abi.RegionID
	src   abi.RegionID
	mixed bool // reads: every fourth READ of 4 KB
}

// openInvApp gives core (through r) a summary doorbell and opens a
// portal whose segment says it rings it, with slots slots and a region
// (remote-readable src when remote, else a local sink).
func openInvApp(t testing.TB, r *runner.Runner, slots int, mem []byte, remote bool) *invApp {
	t.Helper()
	const ringCap = 256
	cmdMem := aligned(abi.RingBytes(ringCap, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(ringCap, abi.CompletionSize))
	flag := aligned(64)
	(*atomic.Uint32)(unsafe.Pointer(&flag[0])).Store(abi.SummaryOn)
	a := &invApp{}
	a.cmd, _ = abi.NewProducer(cmdMem, ringCap, abi.CommandSize)
	a.cpl, _ = abi.NewConsumer(cplMem, ringCap, abi.CompletionSize)
	var err error
	exErr := r.Exec(func(c *engine.Core) {
		sumMem := aligned(abi.SummaryBytes(c.Config().Portals))
		if err = c.SetSummary(sumMem); err != nil {
			return
		}
		a.sum, _ = abi.NewSummary(sumMem)
		if a.id, err = c.OpenPortal(engine.PortalSpec{CmdRing: cmdMem, CmdCap: ringCap, CplRing: cplMem, CplCap: ringCap,
			Class: abi.ClassLow, MaxSlots: slots, PID: invPID, SummaryFlag: flag[:4]}); err != nil {
			return
		}
		if slots > 0 {
			if a.slots, err = c.AllocSlots(a.id, slots); err != nil {
				return
			}
		}
		if remote {
			a.src, err = c.RegisterRegion(a.id, mem, abi.PermRemoteRead, invKr)
		} else {
			a.dst, err = c.RegisterRegion(a.id, mem, abi.PermLocalWrite, invKr)
		}
	})
	if exErr != nil || err != nil {
		t.Fatal(exErr, err)
	}
	return a
}

// reads keeps window 64-byte READs of src at peer in flight until n have
// completed OK, posting and ringing as an application does, without
// allocating; every fourth is of 4 KB when a.mixed is set.
func (a *invApp) reads(t testing.TB, n, window int, peer uint32, src abi.RegionID, kd aesni.Key) {
	free := append(make([]abi.SlotID, 0, len(a.slots)), a.slots[:window]...)
	done, posted := 0, 0
	var cpl abi.Completion
	deadline := time.Now().Add(30 * time.Second)
	for done < n {
		was := posted
		for len(free) > 0 && posted < n {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			off, size := uint64(posted%64)*64, uint32(64)
			if a.mixed && posted%4 == 3 {
				size = 4096
			}
			cmd := abi.Command{Op: abi.OpRead, Slot: s, Cookie: uint64(posted), RemoteAddr: peer, RemoteRegion: src,
				RemoteOffset: off, LocalRegion: a.dst, LocalOffset: off, Length: size, Key: kd}
			cmd.Encode(a.cmd.Reserve())
			a.cmd.Commit()
			posted++
		}
		if posted != was { // rings only for commands it published
			a.cmd.Publish()
			a.sum.Ring(uint32(a.id))
		}
		got := false
		for e := a.cpl.Peek(); e != nil; e = a.cpl.Peek() {
			cpl.Decode(e)
			a.cpl.Advance()
			if cpl.Status != abi.StatusOK {
				t.Fatalf("completion %+v", cpl)
			}
			free = append(free, cpl.Slot)
			done++
			got = true
		}
		a.cpl.Release()
		if !got {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d ops done after 30 s", done, n)
			}
			runtime.Gosched()
		}
	}
}

func ip4(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// invEngine is an engine of one core at ip on port, its neighbor peer
// known statically (no ARP: every burst's opens run in one batch).
func invEngine(t testing.TB, port *memport.Port, ip, peer string, mac, peerMAC byte, crypto string, mode runner.Mode, s *stage.Stages, pollBytes int) (*engine.Core, *runner.Runner) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.LocalIP, cfg.LocalMAC = netip.MustParseAddr(ip), wire.MAC{2, 0, 0, 0, 0, mac}
	cfg.Subnet = netip.MustParsePrefix(ip + "/24")
	cfg.Neighbors = []engine.Neighbor{{IP: netip.MustParseAddr(peer), MAC: wire.MAC{2, 0, 0, 0, 0, peerMAC}}}
	cfg.Slots, cfg.Regions, cfg.Portals = 64, 8, 4
	cfg.Timeout, cfg.DispatchTimeout = time.Second, 500*time.Millisecond // a loaded CI host: no TIMEOUT
	cfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	cfg.Crypto = crypto
	cfg.PollBytes = pollBytes
	core, err := engine.New(cfg, port)
	if err != nil {
		t.Fatal(err)
	}
	core.SetStages(s)
	rcfg := runner.DefaultConfig()
	rcfg.Mode, rcfg.Stages = mode, s
	r, err := runner.New(core, port, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return core, r
}

func stopRunner(t testing.TB, r *runner.Runner) runner.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return r.Stats() // published when the loop stopped: exact
}

// checkLoopInvariants asserts the invariants on the counters of a runner
// that has stopped, whose core serves portals portals that ring the
// summary doorbell; withCrypto: it seals and opens on ipsec-mb.
func checkLoopInvariants(t testing.TB, name string, s runner.Stats, portals uint64, mb bool) {
	t.Helper()
	t.Logf("%s: %d iterations (%d with work), %d clock reads, %d woken early, crossings %d (max %d, over %d), ring looks %d (idle %d, rung idle %d), scans %d",
		name, s.Iterations, s.WorkIterations, s.ClockReads, s.WokenEarly, s.Crossings, s.CrossingsMax, s.CrossingsOver,
		s.RingLooks, s.RingLooksIdle, s.RingRungIdle, s.RingScans)
	if s.ClockReads != s.Iterations+s.WokenEarly+1 {
		t.Errorf("%s: %d clock reads in %d iterations with %d sleeps cut short: want one each, and one at stop", name, s.ClockReads, s.Iterations, s.WokenEarly)
	}
	if s.CrossingsOver != 0 || s.CrossingsMax > runner.MaxCrossings {
		t.Errorf("%s: %d iterations crossed into C more than %d times (the most: %d)", name, s.CrossingsOver, runner.MaxCrossings, s.CrossingsMax)
	}
	if mb && (s.Crossings == 0 || s.Crossings > runner.MaxCrossings*s.WorkIterations+s.Iterations-s.WorkIterations) {
		t.Errorf("%s: %d crossings in %d iterations (%d with work)", name, s.Crossings, s.Iterations, s.WorkIterations)
	}
	if idle := s.RingLooksIdle - s.RingRungIdle; idle > s.RingScans*portals {
		t.Errorf("%s: %d idle looks at command rings outside what %d scans of %d portals explain", name, idle, s.RingScans, portals)
	}
	if s.RingScans == 0 || s.WorkIterations == 0 {
		t.Errorf("%s: nothing happened", name)
	}
}

// TestLoopInvariants: two engines on a memport pair, in each loop mode
// and on each seal backend, without and with cost accounting (a Stages on
// each loop, on the CPU's time-stamp counter: its marks read no clock of
// the loop's and cross into nothing); the reader keeps 8 READs in flight
// (a tx burst per iteration at most) for thousands of ops.
func TestLoopInvariants(t *testing.T) {
	cryptos := []string{engine.CryptoGo}
	if _, err := engine.MBArch(); err == nil {
		cryptos = append(cryptos, engine.CryptoIPsecMB)
	}
	const window = 8
	for _, crypto := range cryptos {
		for _, mode := range []runner.Mode{runner.Busy, runner.Backoff} {
			for _, staged := range []bool{false, true} {
				// Two busy loops and the application share the CPUs of a
				// small CI host: fewer ops, as many checks.
				ops := 4000
				if mode == runner.Busy {
					ops = 1000
				}
				name := fmt.Sprintf("%s/%v", crypto, mode)
				if staged {
					name += "/stages"
				}
				t.Run(name, func(t *testing.T) { loopInvariants(t, crypto, mode, staged, ops, window, 0) })
			}
		}
	}
}

// TestLoopInvariantsPollBytes: the same with the bound on bulk work
// (engine.Config.PollBytes) on both engines and every fourth READ of 4 KB:
// the bursts of 64 B answers and 4 KB chunks are taken in two passes.
func TestLoopInvariantsPollBytes(t *testing.T) {
	cryptos := []string{engine.CryptoGo}
	if _, err := engine.MBArch(); err == nil {
		cryptos = append(cryptos, engine.CryptoIPsecMB)
	}
	for _, crypto := range cryptos {
		for _, staged := range []bool{false, true} {
			name := crypto
			if staged {
				name += "/stages"
			}
			t.Run(name, func(t *testing.T) { loopInvariants(t, crypto, runner.Backoff, staged, 2000, 8, 4096) })
		}
	}
}

// loopInvariants is a run of TestLoopInvariants.
func loopInvariants(t *testing.T, crypto string, mode runner.Mode, staged bool, ops, window, pollBytes int) {
	pa, pb, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var sa0, sb0 *stage.Stages
	if staged {
		sa0, sb0 = stage.New(tsc.Read), stage.New(tsc.Read)
	}
	ca, ra := invEngine(t, pa, "10.0.5.1", "10.0.5.2", 1, 2, crypto, mode, sa0, pollBytes)
	_, rb := invEngine(t, pb, "10.0.5.2", "10.0.5.1", 2, 1, crypto, mode, sb0, pollBytes)
	src := make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i * 13)
	}
	owner := openInvApp(t, rb, 0, src, true)
	reader := openInvApp(t, ra, window, make([]byte, 64<<10), false)
	reader.mixed = pollBytes > 0
	kd := aesni.DeriveKey(invKr, netip.MustParseAddr("10.0.5.1").As4(), invPID, uint8(abi.OpRead))
	peer := ip4(netip.MustParseAddr("10.0.5.2"))
	reader.reads(t, 200, window, peer, owner.src, kd) // warm: caches, keys, pools

	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	reader.reads(t, ops, window, peer, owner.src, kd)
	runtime.ReadMemStats(&m1)
	sa, sb := stopRunner(t, ra), stopRunner(t, rb)
	if a := m1.Mallocs - m0.Mallocs; a/uint64(ops) != 0 {
		t.Errorf("%d allocations in %d ops (the process: both loops and the application), want 0 per op", a, ops)
	} else {
		t.Logf("%d allocations in %d ops (the runtime's own: 0 per op)", a, ops)
	}
	checkLoopInvariants(t, "reader", sa, 1, crypto == engine.CryptoIPsecMB)
	if pollBytes > 0 { // the loop has stopped: the core is ours to read
		st := ca.Stats()
		t.Logf("reader: %d bursts taken in two passes, %d bulk items held back", st.RxSplit, st.BulkHeld)
		if st.RxSplit == 0 {
			t.Error("reader: no burst was taken in two passes")
		}
	}
	checkLoopInvariants(t, "owner", sb, 1, crypto == engine.CryptoIPsecMB)
	if sb.RingLooks != sb.RingScans || sb.RingRungIdle != 0 {
		t.Errorf("owner: its portal never posts, yet its ring was read %d times outside %d scans", sb.RingLooks-sb.RingScans, sb.RingScans)
	}
	if mode == runner.Busy && (sa.WokenEarly != 0 || sa.IdleSleeps != 0) {
		t.Errorf("busy loop slept: %+v", sa)
	}
	if staged { // the loops have stopped: their Stages are ours to read
		for name, s := range map[string]*stage.Stages{"reader": sa0, "owner": sb0} {
			sn := s.Snapshot(0)
			for _, st := range []stage.Stage{stage.Receive, stage.Protocol, stage.Build, stage.Seal, stage.Transmit, stage.Clock} {
				if sn.Cycles[st] == 0 {
					t.Errorf("%s: no cycle charged to %v: %v", name, st, sn.Cycles)
				}
			}
		}
	}
}
