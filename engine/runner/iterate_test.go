package runner

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/wire"
)

func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

// TestIterateAllocs: one loop iteration (rx burst -> Receive -> Poll ->
// Flush) allocates nothing, with and without frames.
func TestIterateAllocs(t *testing.T) {
	a, b, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(core, a, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1e9)
	allocs := testing.AllocsPerRun(200, func() {
		for range 8 {
			if f := b.Buffer(); f != nil {
				clear(f[:60])
				b.Send(60)
			}
		}
		b.Flush()
		b.Recv()
		now += 1000
		r.iterate(now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per iteration, want 0", allocs)
	}
}

// traceCounter's reads differ by distinct powers of two, so each stage's
// cycles say which sections it was charged (trace).
type traceCounter struct{ k uint }

func (c *traceCounter) read() uint64 {
	c.k++
	return 1<<c.k - 1
}

// trace is the stages s charged its sections to, in order, consecutive
// sections of one stage as one, the section running now last.
func trace(s *stage.Stages) []stage.Stage {
	sn := s.Snapshot(0)
	var out []stage.Stage
	for bit := 1; bit < 64; bit++ {
		for st := range stage.NumStages {
			if sn.Cycles[st]&(1<<bit) != 0 && (len(out) == 0 || out[len(out)-1] != st) {
				out = append(out, st)
			}
		}
	}
	return out
}

// sendsOnRecv is a memport.Port driven as the DPDK port is
// (SendsOnRecv): the loop does not flush it after each iteration, and its
// Recv sends what was queued since, in the one "crossing" that receives.
// With stages it charges that send to Transmit apart from the rx poll
// around it, as engine/port/dpdkport charges the transmit and seal parts
// of its crossing (which dpdk measures in C; here Charge measures it).
type sendsOnRecv struct {
	*memport.Port
	s      *stage.Stages
	queued int
	flush  func()
}

func newSendsOnRecv(p *memport.Port, s *stage.Stages) *sendsOnRecv {
	f := &sendsOnRecv{Port: p, s: s}
	f.flush = f.Port.Flush
	return f
}

func (p *sendsOnRecv) SendsOnRecv() {}

func (p *sendsOnRecv) Send(n int) {
	p.Port.Send(n)
	p.queued++
}

func (p *sendsOnRecv) Flush() {
	p.Port.Flush()
	p.queued = 0
}

func (p *sendsOnRecv) Recv() [][]byte {
	if p.queued > 0 {
		if p.s != nil {
			p.s.Charge(stage.Transmit, 0, p.flush)
		} else {
			p.Port.Flush()
		}
		p.queued = 0
	}
	return p.Port.Recv()
}

// arpRequest writes into b an ARP request for the engine's default
// address (engine.DefaultConfig's LocalIP), which the engine answers.
func arpRequest(b []byte) int {
	return wire.EncodeARP(b, &wire.ARP{Op: wire.ARPRequest, SenderMAC: wire.MAC{2, 9, 9, 9, 9, 9}, SenderIP: 10<<24 | 9,
		TargetIP: 10<<24 | 1, EthDst: wire.Broadcast, EthSrc: wire.MAC{2, 9, 9, 9, 9, 9}})
}

// TestIterateStages: the loop's own marks, on a port flushed every
// iteration (memport) and on one that sends on Recv (the DPDK port's
// flow). An iteration whose rx poll finds nothing charges it to EmptyRx,
// and the rest of it, Poll finding nothing to do, to EmptyPoll; one with
// frames charges its rx poll to Receive and Poll's phases follow. Then,
// flushed every iteration: Transmit from the end of Poll through Flush,
// and Clock from there to the next rx poll. Sending on Recv: Clock from
// the end of Poll; the frames the iteration queued (an ARP reply, sent
// from within Receive) leave in the next iteration's rx poll, whose
// section (here EmptyRx: nothing more comes) is split around the send,
// charged to Transmit (Charge): ... X T X ... in the trace, one span
// charged once. Neither allocates.
func TestIterateStages(t *testing.T) {
	L, X, E, R, P, B, T, K := stage.Loop, stage.EmptyRx, stage.EmptyPoll, stage.Receive, stage.Protocol, stage.Build, stage.Transmit, stage.Clock
	for _, fused := range []bool{false, true} {
		name := "flushed"
		if fused {
			name = "sends-on-recv"
		}
		t.Run(name, func(t *testing.T) {
			a, b, err := memport.Pair(memport.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			var k traceCounter
			s := stage.New(k.read)
			var port interface {
				Port
				engine.Tx
			} = a
			if fused {
				port = newSendsOnRecv(a, s)
			}
			ecfg := engine.DefaultConfig()
			ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
			core, err := engine.New(ecfg, port)
			if err != nil {
				t.Fatal(err)
			}
			core.SetStages(s)
			cfg := DefaultConfig()
			cfg.Stages = s
			r, err := New(core, port, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.fused != fused {
				t.Fatalf("runner sees a port that sends on Recv: %v, want %v", r.fused, fused)
			}
			r.iterate(1e9) // nothing received
			if fused {     // an ARP request: answered from within Receive
				b.Send(arpRequest(b.Buffer()))
			} else { // frames the engine drops
				for range 3 {
					f := b.Buffer()
					clear(f[:60])
					b.Send(60)
				}
			}
			b.Flush()
			r.iterate(2e9)
			want := []stage.Stage{L, X, E, K, R, P, B, T, K}
			// Frames received, empty rx polls, sections moved to
			// EmptyPoll (Protocol, Build and, flushed, Transmit, per
			// idle iteration), transmits.
			counts := [4]uint64{3, 1, 3, 1}
			if fused {
				r.iterate(3e9) // nothing received; the reply leaves in its rx poll
				want = []stage.Stage{L, X, E, K, R, P, B, K, X, T, X, E, K}
				// The third rx poll, split around its send, is one
				// section of EmptyRx.
				counts = [4]uint64{1, 2, 4, 1}
				if n := len(b.Recv()); n != 1 {
					t.Errorf("the peer received %d frames, want the ARP reply", n)
				}
			}
			if got := trace(s); !slices.Equal(got, want) {
				t.Errorf("sections %v, want %v", got, want)
			}
			sn := s.Snapshot(0)
			if got := [4]uint64{sn.Frames, sn.Sections[stage.EmptyRx], sn.Sections[stage.EmptyPoll], sn.Sections[stage.Transmit]}; got != counts {
				t.Errorf("frames, empty rx polls, empty poll sections, transmits %v, want %v", got, counts)
			}
			if sn.Total() != sn.At-1 { // the counter's first read was 1
				t.Errorf("%d cycles charged of %d", sn.Total(), sn.At-1)
			}
			now := int64(4e9)
			allocs := testing.AllocsPerRun(200, func() {
				s.Reset()
				k.k = 0
				if fused {
					b.Send(arpRequest(b.Buffer()))
				} else {
					f := b.Buffer()
					clear(f[:60])
					b.Send(60)
				}
				b.Flush()
				b.Recv()
				now += 1000
				r.iterate(now)
				r.iterate(now)
			})
			if allocs != 0 {
				t.Errorf("%v allocations per two iterations with stages, want 0", allocs)
			}
		})
	}
}

// TestLoopStages: a running loop charges its idle iterations (EmptyRx,
// EmptyPoll, Clock) and the closures it runs (Loop) to its Stages.
func TestLoopStages(t *testing.T) {
	a, _, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	var c atomic.Uint64
	s := stage.New(func() uint64 { return c.Add(1) })
	core.SetStages(s)
	cfg := DefaultConfig()
	cfg.Mode, cfg.Stages = Busy, s
	r, err := New(core, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	time.Sleep(10 * time.Millisecond)
	var sn stage.Snapshot
	if err := r.Exec(func(*engine.Core) { sn = s.Snapshot(0) }); err != nil {
		t.Fatal(err)
	}
	// The closure's own section has not ended: its cycles so far are
	// charged, it is not counted yet.
	if sn.Sections[stage.Clock] == 0 || sn.Sections[stage.EmptyRx] == 0 || sn.Cycles[stage.Loop] == 0 ||
		sn.Sections[stage.EmptyPoll] < sn.Sections[stage.EmptyRx] || sn.Frames != 0 {
		t.Errorf("sections %v, frames %d", sn.Sections, sn.Frames)
	}
}

// TestIterateOpsAllocs: READs between two engines on a memport pair, the
// application's portal ringing the summary doorbell, both loops'
// iterations run on the test's goroutine with a clock of its own: every
// op allocates nothing (exactly), every iteration crosses into C at most
// MaxCrossings times, and no command ring is read with nothing new but
// in the fallback scans (single goroutine: no look can lose a race). The
// same with a Stages on both loops: the cost accounting adds no crossing
// and no allocation, and charges every cycle it marks to one stage.
func TestIterateOpsAllocs(t *testing.T) {
	cryptos := []string{engine.CryptoGo}
	if _, err := engine.MBArch(); err == nil {
		cryptos = append(cryptos, engine.CryptoIPsecMB)
	}
	// Each also with a Stages on both loops (the counter: a fake that
	// advances by one a read), and with a Stages over ports that send on
	// Recv (sendsOnRecv: the DPDK port's flow).
	variants := []string{"", "stages", "stages-sends-on-recv"}
	for _, crypto := range cryptos {
		for _, variant := range variants {
			name := crypto
			if variant != "" {
				name += "/" + variant
			}
			t.Run(name, func(t *testing.T) { iterateOps(t, crypto, variant) })
		}
	}
}

// iterateOps is TestIterateOpsAllocs on crypto, in a variant ("", "stages",
// "stages-sends-on-recv").
func iterateOps(t *testing.T, crypto, variant string) {
	pa, pb, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var stages []*stage.Stages
	node := func(p *memport.Port, ip, peer string, mac, peerMAC byte) *Runner {
		cfg := engine.DefaultConfig()
		cfg.LocalIP, cfg.LocalMAC = netip.MustParseAddr(ip), wire.MAC{2, 0, 0, 0, 0, mac}
		cfg.Subnet = netip.MustParsePrefix(ip + "/24")
		cfg.Neighbors = []engine.Neighbor{{IP: netip.MustParseAddr(peer), MAC: wire.MAC{2, 0, 0, 0, 0, peerMAC}}}
		cfg.Slots, cfg.Regions, cfg.Portals = 64, 8, 4
		cfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
		cfg.Crypto = crypto
		var s *stage.Stages
		if variant != "" {
			var n uint64
			s = stage.New(func() uint64 { n++; return n })
			stages = append(stages, s)
		}
		var port interface {
			Port
			engine.Tx
		} = p
		if variant == "stages-sends-on-recv" {
			port = newSendsOnRecv(p, s)
		}
		core, err := engine.New(cfg, port)
		if err != nil {
			t.Fatal(err)
		}
		core.SetStages(s)
		rcfg := DefaultConfig()
		rcfg.Stages = s
		r, err := New(core, port, rcfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ra, rb := node(pa, "10.0.6.1", "10.0.6.2", 1, 2), node(pb, "10.0.6.2", "10.0.6.1", 2, 1)
	kr := aesni.Key{1, 2, 3}
	open := func(r *Runner, slots int, mem []byte, perm abi.Perm) (*abi.Producer, *abi.Consumer, *abi.Summary, engine.PortalID, []abi.SlotID, abi.RegionID) {
		c := r.core
		sumMem := aligned(abi.SummaryBytes(c.Config().Portals))
		if err := c.SetSummary(sumMem); err != nil {
			t.Fatal(err)
		}
		sum, _ := abi.NewSummary(sumMem)
		cmdMem, cplMem, flag := aligned(abi.RingBytes(64, abi.CommandSize)), aligned(abi.RingBytes(64, abi.CompletionSize)), aligned(64)
		flag[0] = abi.SummaryOn
		id, err := c.OpenPortal(engine.PortalSpec{CmdRing: cmdMem, CmdCap: 64, CplRing: cplMem, CplCap: 64,
			MaxSlots: slots, PID: 9, SummaryFlag: flag[:4]})
		if err != nil {
			t.Fatal(err)
		}
		var ss []abi.SlotID
		if slots > 0 {
			if ss, err = c.AllocSlots(id, slots); err != nil {
				t.Fatal(err)
			}
		}
		rid, err := c.RegisterRegion(id, mem, perm, kr)
		if err != nil {
			t.Fatal(err)
		}
		cmd, _ := abi.NewProducer(cmdMem, 64, abi.CommandSize)
		cpl, _ := abi.NewConsumer(cplMem, 64, abi.CompletionSize)
		return cmd, cpl, sum, id, ss, rid
	}
	_, _, _, _, _, src := open(rb, 0, make([]byte, 8192), abi.PermRemoteRead)
	cmd, cpl, sum, id, slots, dst := open(ra, 8, make([]byte, 8192), abi.PermLocalWrite)
	kd := aesni.DeriveKey(kr, netip.MustParseAddr("10.0.6.1").As4(), 9, uint8(abi.OpRead))
	peer := uint32(10)<<24 | 6<<8 | 2
	now := int64(1e9)
	var c abi.Completion
	round := func() {
		for k, s := range slots {
			(&abi.Command{Op: abi.OpRead, Slot: s, Cookie: uint64(k), RemoteAddr: peer, RemoteRegion: src,
				RemoteOffset: uint64(k) * 64, LocalRegion: dst, LocalOffset: uint64(k) * 64, Length: 64, Key: kd}).Encode(cmd.Reserve())
			cmd.Commit()
		}
		cmd.Publish()
		sum.Ring(uint32(id))
		for done := 0; done < len(slots); {
			now += 1000
			ra.iterate(now)
			rb.iterate(now)
			for e := cpl.Peek(); e != nil; e = cpl.Peek() {
				c.Decode(e)
				cpl.Advance()
				if c.Status != abi.StatusOK {
					t.Fatalf("completion %+v", c)
				}
				done++
			}
			cpl.Release()
		}
	}
	for range 10 {
		round()
	}
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%v allocations per round of %d ops, want 0", a, len(slots))
	}
	for _, r := range []*Runner{ra, rb} {
		s, p := r.lc, r.core.PathCounters()
		if s.CrossingsOver != 0 || s.CrossingsMax > MaxCrossings {
			t.Errorf("%d iterations crossed more than %d times (the most: %d)", s.CrossingsOver, MaxCrossings, s.CrossingsMax)
		}
		if crypto == engine.CryptoIPsecMB && s.Crossings == 0 {
			t.Error("ipsec-mb, and no crossing counted")
		}
		if p.RingRungIdle != 0 || p.RingLooksIdle > p.RingScans || p.RingScans == 0 {
			t.Errorf("ring looks %+v: idle looks beyond one per scan of the one portal", p)
		}
		t.Logf("%d iterations, crossings %d (max %d); %+v", s.Iterations, s.Crossings, s.CrossingsMax, p)
	}
	for i, s := range stages {
		sn := s.Snapshot(0)
		if sn.Total() != sn.At-1 || sn.Frames == 0 || sn.Cycles[stage.Build] == 0 || sn.Cycles[stage.Seal] == 0 ||
			sn.Cycles[stage.Transmit] == 0 {
			t.Errorf("loop %d: %d cycles charged of %d, %d frames; %v", i, sn.Total(), sn.At-1, sn.Frames, sn.Cycles)
		}
	}
}
