package opgen

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/engine/telemetry"
)

// SelfTest is an engine's own op generator, as testpmd's forwarding modes
// measure a port without an application: every polling core of a Group
// posts READs or WRITEs of one size itself, keeping a number in flight,
// with no application process and no portal ring, checks the data of
// every op as it completes, and counts and times them. The target is a
// region of the engine itself (loopback: on a port that reflects frames,
// every core is both initiator and target) or of a peer engine, whose
// owner granted this engine's engine.SelfTestPID its K_d.
//
// Each core's part is an opSource (opsource.go), the engine.OpSource
// attached to that core; the core's Poll lets it post. New attaches the
// parts before the cores run, Start starts them all, Done reports when
// every core has finished (its last op completed and checked), and
// Result collects the counts, latencies and the first failure.
type SelfTest struct {
	cfg      Config
	g        *engine.Group
	src      []*opSource
	done     []doneWord
	run      atomic.Bool // set by Start; each source loads it until it has started
	expect   []byte      // what the target's READ half holds
	target   []byte      // the target's memory, when it is this engine's
	region   abi.RegionID
	addr     netip.Addr
	readKey  aesni.Key
	readBack bool // WRITEs to a peer: each slot's last one is read back
}

// Config is one run of the op source.
type Config struct {
	Op          abi.Op // abi.OpRead or abi.OpWrite
	Size        int    // bytes per op: 1 .. abi.MaxOpBytes
	Outstanding int    // ops each initiating core keeps in flight: 1 .. engine.Config.Slots
	// Warmup runs first: its ops are checked but neither counted in the
	// rate nor timed; Duration is the measured window that follows.
	Warmup, Duration time.Duration

	// HandOver: only the cores whose requests the serving engine serves
	// on another core (engine.RequestCore; the serving engine has
	// ServerCores cores, 0: as many as this one) initiate, the others
	// only serve. On ports whose queue i hands its frames to core i
	// (memif, the net_ring loopback) every answer then reaches this
	// engine on another core's queue and crosses a hand-over ring
	// (dpdkport.Queues).
	HandOver    bool
	ServerCores int

	// Stages, if set, holds each core's cost accounting (index: the
	// core; a nil entry: none), the Stages its loop, core and port mark
	// (engine/stage): each core's source snapshots it when the measured
	// window opens and when it closes (CoreResult.Stages).
	Stages []*stage.Stages

	Target Target
}

// Target is the region the ops read or write: its first half is read (it
// must hold Expect, or Mem's content), and its second half is written,
// each initiating core in a part of its own and each slot in an area of
// its own there.
type Target struct {
	// Mem is a region of this engine (loopback): New registers it, owned
	// by core 0's op source, under a fresh random K_r, and derives the op
	// source's K_d itself. A READ must find what Mem holds when New is
	// called; a WRITE is checked in Mem as it completes.
	Mem []byte

	// Or a region of the engine at Addr (a peer): its id and size, the
	// K_d its owner granted this engine's address and engine.SelfTestPID
	// for READ (READs; WRITEs: the read-back of each slot's last WRITE)
	// and WRITE, and what its first half holds (Expect, at least Bytes/2
	// bytes; READs only).
	Addr              netip.Addr
	Region            abi.RegionID
	Bytes             uint64
	ReadKey, WriteKey aesni.Key
	Expect            []byte
}

// ErrConfig wraps every Config refused.
var ErrConfig = errors.New("engine: self-test")

// readStride spaces the areas the slots READ in the target's first half.
const readStride = abi.MaxOpBytes + 64

// New attaches an op source to every core of g for the run cfg
// describes: each core's portal table gets an entry with no rings, and an
// initiating core slots and a local region of its own (sources, sinks) in
// it; with Target.Mem, core 0's entry owns the target region. Call it
// before g's cores run (or with every core's driver stopped). Start
// starts the run.
func New(g *engine.Group, cfg Config) (*SelfTest, error) {
	n := g.Len()
	ec := g.Core(0).Config() // core 0's: the engine's Slots and LocalIP
	tg := &cfg.Target
	loop := len(tg.Mem) > 0
	if loop {
		tg.Bytes = uint64(len(tg.Mem))
	}
	half := tg.Bytes / 2
	switch {
	case cfg.Op != abi.OpRead && cfg.Op != abi.OpWrite:
		return nil, fmt.Errorf("%w: op %v, want READ or WRITE", ErrConfig, cfg.Op)
	case cfg.Size < 1 || cfg.Size > abi.MaxOpBytes:
		return nil, fmt.Errorf("%w: size %d, want 1..%d", ErrConfig, cfg.Size, abi.MaxOpBytes)
	case cfg.Outstanding < 1 || cfg.Outstanding > ec.Slots:
		return nil, fmt.Errorf("%w: %d ops in flight, want 1..%d (the slots of a core)", ErrConfig, cfg.Outstanding, ec.Slots)
	case cfg.Warmup < 0 || cfg.Duration <= 0:
		return nil, fmt.Errorf("%w: warm-up %v, duration %v", ErrConfig, cfg.Warmup, cfg.Duration)
	case cfg.ServerCores < 0:
		return nil, fmt.Errorf("%w: %d serving cores", ErrConfig, cfg.ServerCores)
	case cfg.Stages != nil && len(cfg.Stages) != n:
		return nil, fmt.Errorf("%w: stages for %d cores, the engine has %d", ErrConfig, len(cfg.Stages), n)
	case loop && tg.Addr.IsValid():
		return nil, fmt.Errorf("%w: a target of this engine (Mem) and a peer's (Addr %v) at once", ErrConfig, tg.Addr)
	case !loop && (!tg.Addr.Is4() || tg.Region == 0):
		return nil, fmt.Errorf("%w: no target: a region of this engine (Mem), or a peer's address and region", ErrConfig)
	case half < uint64(cfg.Size)+64:
		return nil, fmt.Errorf("%w: a region of %d bytes: READs read its first half, which must hold -s %d + 64 bytes", ErrConfig, tg.Bytes, cfg.Size)
	case !loop && cfg.Op == abi.OpRead && uint64(len(tg.Expect)) < half:
		return nil, fmt.Errorf("%w: %d bytes expected of the region's first half of %d", ErrConfig, len(tg.Expect), half)
	}
	local := ec.LocalIP.As4()
	t := &SelfTest{cfg: cfg, g: g, src: make([]*opSource, n), done: make([]doneWord, n),
		addr: tg.Addr, region: tg.Region, readKey: tg.ReadKey, expect: tg.Expect}
	initiate := make([]bool, n)
	initiators := 0
	for i := range initiate {
		server := cmp.Or(cfg.ServerCores, n)
		initiate[i] = !cfg.HandOver || engine.RequestCore(netip.AddrFrom4(local), i, server) != i
		if initiate[i] {
			initiators++
		}
	}
	if initiators == 0 {
		return nil, fmt.Errorf("%w: hand-over: an engine of %d cores at %v serves every core's requests on that core (see RequestCore): no answer would be handed over; another address makes some cross (e.g. %v)",
			ErrConfig, cmp.Or(cfg.ServerCores, n), netip.AddrFrom4(local), handOverAddr(netip.AddrFrom4(local), n, cmp.Or(cfg.ServerCores, n)))
	}
	stride := uint64(cfg.Size+63) &^ 63
	if cfg.Op == abi.OpWrite && uint64(initiators*cfg.Outstanding)*stride > tg.Bytes-half {
		return nil, fmt.Errorf("%w: %d cores × %d ops × %d bytes written do not fit the region's second half (%d of %d bytes)",
			ErrConfig, initiators, cfg.Outstanding, stride, tg.Bytes-half, tg.Bytes)
	}
	for i := range n {
		s := &opSource{t: t, core: i}
		if cfg.Stages != nil {
			s.stg = cfg.Stages[i]
		}
		port, err := g.Core(i).AttachSource(s, cfg.Outstanding)
		if err != nil {
			t.Close()
			if errors.Is(err, engine.ErrSourceAttached) {
				return nil, fmt.Errorf("%w: core %d has an op source attached already", ErrConfig, i)
			}
			return nil, fmt.Errorf("%w: core %d: %v", ErrConfig, i, err)
		}
		s.port, t.src[i] = port, s
	}
	if loop {
		kr, err := randomKey()
		if err == nil {
			t.region, err = t.src[0].port.RegisterRegion(tg.Mem, abi.PermRemoteRead|abi.PermRemoteWrite, kr)
		}
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("%w: the target region: %v", ErrConfig, err)
		}
		t.addr, t.target, t.expect = ec.LocalIP, tg.Mem, bytes.Clone(tg.Mem)
		t.readKey = aesni.DeriveKey(kr, local, engine.SelfTestPID, uint8(abi.OpRead))
		tg.WriteKey = aesni.DeriveKey(kr, local, engine.SelfTestPID, uint8(abi.OpWrite))
	}
	t.readBack = !loop && cfg.Op == abi.OpWrite
	j := 0 // the initiating cores, in order
	for i, s := range t.src {
		if !initiate[i] {
			t.done[i].v.Store(true)
			continue
		}
		if err := s.attach(j, half, stride, tg.WriteKey); err != nil {
			t.Close()
			return nil, fmt.Errorf("%w: core %d: %v", ErrConfig, i, err)
		}
		j++
	}
	return t, nil
}

// attach gives the source of the j-th initiating core its slots, its
// local region and the fields every one of its ops shares.
func (s *opSource) attach(j int, half, stride uint64, writeKey aesni.Key) error {
	t := s.t
	o := t.cfg.Outstanding
	slots, err := s.port.AllocSlots(o)
	if err != nil {
		return err
	}
	bufs := o // a source or sink per slot, and a read-back sink after them
	if t.readBack {
		bufs *= 2
	}
	local := make([]byte, bufs*abi.MaxOpBytes)
	for i := range local { // the sources' bytes between the stamps
		local[i] = byte(i*17 + 3)
	}
	kr, err := randomKey()
	if err != nil {
		return err
	}
	lrid, err := s.port.RegisterRegion(local, abi.PermLocalRead|abi.PermLocalWrite, kr)
	if err != nil {
		return err
	}
	s.slots, s.local = slots, local
	s.remOff, s.area, s.lastOK = make([]uint64, o), make([]uint64, o), make([]bool, o)
	s.ready, s.unchecked = newSlotFIFO(o), newSlotFIFO(o)
	s.inWin, s.delay = make([]bool, o), make([]uint32, o)
	s.stamp = uint64(t.g.Core(s.core).Config().CoreID) << 56
	span := half - uint64(t.cfg.Size) - 64
	for k := range o {
		idx := uint64(j*o + k)
		if t.cfg.Op == abi.OpRead {
			s.area[k] = idx * readStride % (span + 1) &^ 63
			s.remOff[k] = s.area[k] + 64 // the first READ reads area
		} else {
			s.area[k] = half + idx*stride
			s.remOff[k] = s.area[k]
		}
	}
	key := t.readKey
	if t.cfg.Op == abi.OpWrite {
		key = writeKey
	}
	a := t.addr.As4()
	s.cmd = abi.Command{Op: t.cfg.Op, RemoteAddr: binary.BigEndian.Uint32(a[:]), RemoteRegion: t.region,
		LocalRegion: lrid, Length: uint32(t.cfg.Size), Key: key}
	s.state = srcWaiting
	return nil
}

// Start starts every core's source at its next Poll (any goroutine).
func (t *SelfTest) Start() { t.run.Store(true) }

// Done reports whether every core has finished: its measured window is
// over, its ops have all completed and been checked (any goroutine).
func (t *SelfTest) Done() bool {
	for i := range t.done {
		if !t.done[i].v.Load() {
			return false
		}
	}
	return true
}

// Region is the target region's id (with Target.Mem: the one New
// registered).
func (t *SelfTest) Region() abi.RegionID { return t.region }

// RegionBytes is the target region's size.
func (t *SelfTest) RegionBytes() uint64 { return t.cfg.Target.Bytes }

// Initiators is the number of cores that post ops.
func (t *SelfTest) Initiators() int {
	n := 0
	for _, s := range t.src {
		if s != nil && s.slots != nil {
			n++
		}
	}
	return n
}

// CoreResult is what one core's source did.
type CoreResult struct {
	Initiator bool // it posted ops (HandOver: not every core does)
	Done      bool // it finished: every op it posted completed and was checked
	// Ops completed OK and checked in the measured window, over WindowNs;
	// Latency holds their total_delay (post to completion, in the
	// engine), ns.
	Ops      uint64
	WindowNs int64
	Latency  telemetry.Hist
	// Stages is what the core's loop counted by stage over the measured
	// window (Config.Stages; zero without), from the first Poll at or
	// after its start to the first at or after its end.
	Stages stage.Snapshot
	// Every op of the run (warm-up, window, the drain after it, and the
	// read-back of WRITEs to a peer): posted, completed OK and checked
	// (Verified: a READ's data, a WRITE to this engine's region there; a
	// WRITE to a peer's is acknowledged after its commit, and the last of
	// each slot read back at the end: ReadBacks, counted in Verified
	// too), completed with another status (Errors, the first one
	// FirstStatus), completed OK with data that did not check
	// (Mismatches).
	Posted, Verified, ReadBacks, Errors, Mismatches uint64
	FirstStatus                                     abi.Status
	InFlight                                        int
	Failure                                         string // the first failure, "" when none
}

// Result is a run's outcome, core by core.
type Result struct {
	Cores []CoreResult
}

// Result collects what every core's source did. Call it once Done
// reports true, or once every core's driver has stopped (a run cut
// short: unfinished cores say so).
func (t *SelfTest) Result() Result {
	r := Result{Cores: make([]CoreResult, len(t.src))}
	for i, s := range t.src {
		c := &r.Cores[i]
		c.Done = t.done[i].v.Load()
		if s == nil || s.slots == nil {
			continue
		}
		*c = s.res
		c.Initiator, c.Done, c.InFlight = true, t.done[i].v.Load(), s.inflight
		c.WindowNs = int64(t.cfg.Duration)
		if s.stgDone {
			c.Stages = s.stgEnd.Sub(s.stgStart)
		}
		if s.fail.kind != failNone {
			c.Failure = t.describe(i, &s.fail)
		} else if !c.Done {
			c.Failure = fmt.Sprintf("core %d: did not finish: %d ops in flight", i, s.inflight)
		}
	}
	return r
}

// OK reports whether every op of every core completed OK and checked.
func (r *Result) OK() bool {
	any := false
	for i := range r.Cores {
		c := &r.Cores[i]
		if c.Failure != "" || !c.Done || c.Errors+c.Mismatches > 0 || c.Verified != c.Posted {
			return false
		}
		any = any || c.Initiator
	}
	return any
}

// Failure is the first core's failure ("" when none).
func (r *Result) Failure() string {
	for i := range r.Cores {
		if f := r.Cores[i].Failure; f != "" {
			return f
		}
	}
	return ""
}

// Sum adds up the cores: counts, and latencies merged; WindowNs is the
// window every core measured.
func (r *Result) Sum() CoreResult {
	var s CoreResult
	s.Done = true
	for i := range r.Cores {
		c := &r.Cores[i]
		s.Initiator = s.Initiator || c.Initiator
		s.Done = s.Done && c.Done
		s.Ops += c.Ops
		s.WindowNs = max(s.WindowNs, c.WindowNs)
		s.Latency.Merge(&c.Latency)
		s.Stages.Add(c.Stages)
		s.Posted += c.Posted
		s.Verified += c.Verified
		s.ReadBacks += c.ReadBacks
		s.Errors += c.Errors
		s.Mismatches += c.Mismatches
		s.InFlight += c.InFlight
		if s.FirstStatus == abi.StatusOK {
			s.FirstStatus = c.FirstStatus
		}
		if s.Failure == "" {
			s.Failure = c.Failure
		}
	}
	return s
}

// describe says what failure f of core i's source was, precisely.
func (t *SelfTest) describe(i int, f *failure) string {
	size := t.cfg.Size
	at := fmt.Sprintf("%d B at offset %#x of region %#x on %v", size, f.off, uint32(t.region), t.addr)
	switch f.kind {
	case failStatus:
		what := fmt.Sprintf("%v of %s", f.op, at)
		if t.readBack && f.op == abi.OpRead {
			what = "the read-back of the WRITE of " + at
		}
		return fmt.Sprintf("core %d: %s (slot %d) completed %v", i, what, f.slot, f.status)
	case failRead:
		return fmt.Sprintf("core %d: READ of %s: byte %d (region offset %#x) is %#02x, want %#02x (what the region holds)",
			i, at, f.at, f.off+uint64(f.at), f.got, f.want)
	case failWrite:
		return fmt.Sprintf("core %d: WRITE of %s completed OK, but the region holds %#02x at offset %#x, want %#02x (the byte written)",
			i, at, f.got, f.off+uint64(f.at), f.want)
	case failReadBack:
		return fmt.Sprintf("core %d: reading back the last WRITE of %s gave %#02x at offset %#x, want %#02x (the byte written)",
			i, at, f.got, f.off+uint64(f.at), f.want)
	}
	return fmt.Sprintf("core %d: failure %d", i, f.kind)
}

// Close takes every core's op source away: its slots, its regions (the
// target with Target.Mem) and its portal table entry
// (engine.SourcePort.Detach). Call it when the cores do not run (before
// their drivers start, or after they stopped) or on each core's
// goroutine.
func (t *SelfTest) Close() {
	for i, s := range t.src {
		if s == nil {
			continue
		}
		s.port.Detach()
		t.src[i] = nil
	}
}

// handOverAddr is an address near addr at which an engine of cores cores
// serves some of its own requests on another core of an engine of server
// cores: a suggestion for a refused HandOver.
func handOverAddr(addr netip.Addr, cores, server int) netip.Addr {
	a := addr
	for range 256 {
		a = a.Next()
		if !a.IsValid() {
			break
		}
		for i := range cores {
			if engine.RequestCore(a, i, server) != i {
				return a
			}
		}
	}
	return netip.Addr{}
}

func randomKey() (aesni.Key, error) {
	var k aesni.Key
	_, err := rand.Read(k[:])
	return k, err
}
