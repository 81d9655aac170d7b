package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime/debug"
	"strings"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// Result summarises a run (also on failure, as far as it got).
type Result struct {
	Seed     uint64
	Steps    uint64
	EndNs    int64 // virtual time at the end, relative to the start
	Posted   uint64
	Bad      uint64                // of which invalid commands
	ByKind   [24]uint64            // posted, by what the op tests (KindName)
	ByStatus [abi.NumStatus]uint64 // completions the applications saw
	Orphaned uint64                // ops in flight when their portal was closed
	Restarts uint64                // engines restarted (Faults.EngineRestarts)
	Rekeys   uint64                // regions rekeyed (Core.Rekey)
	// ZeroedSinks: failed ops whose sink held zeros from a response chunk
	// that failed authentication (see Config.StrictFailedSink).
	ZeroedSinks uint64
	// AuthFailDamaged: ops with a good key whose request the fabric
	// damaged, answered REMOTE_AUTHENTICATION_FAILURE.
	AuthFailDamaged uint64
	// WRITEs: posted (every kind), by what they test, completions by
	// status; commits the simulator saw (the server's ④, each checked
	// against the model), of which of orphans (their portal had closed)
	// and of writes that then completed TIMEOUT (④ lost: the outcome the
	// application cannot know).
	Writes           uint64
	WriteKinds       [24]uint64
	WriteStatus      [abi.NumStatus]uint64
	WritesCommitted  uint64
	OrphanCommits    uint64
	TimeoutCommitted uint64
	// ReadsOfWritten: valid reads of remote-writable regions checked
	// against the versions of their range; ReadsMixed: of those, OK reads
	// whose chunks came from different versions (a write committed while
	// the read was being served: reads are not atomic against writes).
	ReadsOfWritten uint64
	ReadsMixed     uint64
	// Remote REKEYs: posted (every kind), by what they test, completions
	// by status; installs the simulator saw (the server's ④), of which of
	// orphans and of REKEYs that then completed TIMEOUT.
	RekeyOps   uint64
	RekeyKinds [24]uint64
	// LOOKUPs (App.LookupFrac): posted (every kind), completions by
	// status, the owners' index updates, and the valid ones checked
	// against the model: found, missed, too large.
	Lookups         uint64
	LookupStatus    [abi.NumStatus]uint64
	LookupUpdates   uint64
	LookupsFound    uint64
	LookupsMissed   uint64
	LookupsTooLarge uint64
	RekeyStatus     [abi.NumStatus]uint64
	RemoteRekeys    uint64
	OrphanRekeys    uint64
	TimeoutRekeyed  uint64
	// CrossCore: READ data a core of an engine of several sent from a
	// region a portal of another of its cores registered (the region
	// table the cores share).
	CrossCore uint64
	// Shares: what the tenant-shares scenarios measured (nil in others).
	Shares  *ShareStats
	Net     NetStats
	Hostile HostileStats   // what the attacker did (Config.Hostile)
	Cores   []engine.Stats // every core's counters, node by node
	// Retired: the counters of every core an engine restart replaced,
	// as they were when it died.
	Retired []engine.Stats
	// Digest folds every event, frame and completion of the run: two runs
	// of one seed must produce the same digest (determinism check).
	Digest uint64
}

// NetStats counts what the fabric did to frames.
type NetStats struct {
	Sent, Delivered, Broadcast                   uint64
	Dropped, Duplicated, Reordered, Corrupted    uint64
	Straggled                                    uint64
	LinkDrops, UpQueueDrops, DownQueueDrops      uint64
	RxOverflow, TxNoBuffer, UnknownDst, Hairpins uint64
	Forged                                       uint64 // responses altered and resealed (Net.Forge)
	// Misaddressed: REMOTE_AUTHENTICATION_FAILURE answers to requests whose
	// source IP the fabric had damaged (sent to the claimed source).
	Misaddressed uint64
	// HandedOver: frames a core of a node took from its rx queue and
	// handed to the core they are steered to (ARP: a copy to every other
	// core); HandoverDrops: lost, that core's hand-over ring was full.
	HandedOver, HandoverDrops uint64
}

// Failure is an invariant violation. Its message names the seed to
// reproduce it and the last events before it.
type Failure struct {
	Scenario string
	Seed     uint64
	NowNs    int64 // virtual time of the violation, relative to the start
	Msg      string
	Trace    []string
}

func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim %s seed=%d t=%dns: %s\n", f.Scenario, f.Seed, f.NowNs, f.Msg)
	if len(f.Trace) > 0 {
		b.WriteString("last events:\n")
		for _, l := range f.Trace {
			b.WriteString("  ")
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "reproduce with -sim.seed=%d (scenario %s)", f.Seed, f.Scenario)
	return b.String()
}

// Run builds the simulation cfg describes, runs it to the end and returns
// its summary and the first invariant violation (nil: every check passed).
// A panic inside the core is reported as a violation, with its stack.
func Run(cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg}
	defer func() {
		if p := recover(); p != nil {
			s.err = nil
			s.fail("panic: %v\n%s", p, debug.Stack())
		}
		s.finishResult()
		// A copy: a *Result into s would keep the whole run (cores,
		// regions, key caches) alive as long as the caller keeps it.
		r := s.res
		res = &r
		if err == nil {
			err = s.err
		}
	}()
	if e := s.setup(); e != nil {
		return nil, e
	}
	s.run()
	return nil, s.err
}

// Sim is one simulation: nodes (core + application), the fabric and the
// event queue, all run by one goroutine on a virtual clock.
type Sim struct {
	cfg Config
	now int64 // virtual ns
	t0  int64 // start time (nonzero: cores must not assume time starts at 0)

	netRng   *rand.Rand // fabric faults
	faultRng *rand.Rand // fault schedule
	appRng   *rand.Rand // applications
	keyRng   *rand.Rand // region keys
	// mcRng draws what only engines of several cores need (core counts,
	// rx queues, the cores portals ask for, the core a stall hits), so
	// one-core runs draw exactly what they drew before nodes had cores.
	mcRng *rand.Rand

	events eventHeap
	seq    uint64
	nodes  []*node
	cores  []*simCore // every node's cores, node by node: what the driver steps
	pool   framePool

	postEnd   int64 // apps stop posting
	hardEnd   int64 // the run must be over by then
	draining  bool
	pendingEv int // fault events not yet fired (link up, reopen...)

	// ops outstanding, by cookie; deadlines in a heap (lazy deletion).
	ops       map[uint64]*op
	deadlines deadlineHeap
	cookieCtr uint64
	regions   []*region // every remote-readable or sink region ever registered (directory)
	patternID uint64

	expect [abi.MaxOpBytes]byte // scratch: the bytes an op should have read
	okByte [abi.MaxOpBytes]bool // scratch: version checks of failed reads
	// writes: every WRITE whose request (①) a core sent, by initiator and
	// tag, kept after its completion: the server's acknowledgment (④)
	// names it, and a commit after the completion is the violation.
	writes     map[reqRef]*op
	writeCtr   uint64
	snapPool   [][]byte
	maxTimeout int64 // the largest Engine.Timeout of any node
	// reqIVs: the IV of every request sent, by sender and tag (kept only
	// to forge responses: Net.Forge).
	reqIVs map[reqRef][12]byte
	// served: who answered each READ, by initiator and tag (sawReadData).
	served map[reqRef]servedBy
	// hostile: the attacker of scenario hostile-initiator (nil: none).
	hostile *hostile
	// reqOps: the op of every request sent, by initiator and tag (only
	// in runs that may restart an engine: checkServedEpoch).
	reqOps map[reqRef]*op

	res   Result
	err   error
	trace [64]string
	tn    int
	// traceOn: formatting a trace line per event is expensive, so the
	// ring is filled only when Config.Trace is set (replaying a failure).
	traceOn bool
}

type evKind uint8

const (
	evSwitch   evKind = iota + 1 // frame reaches the switch
	evDeliver                    // frame reaches a node's rx ring
	evAppTick                    // application posts ops
	evLinkDown                   // node's link goes down
	evLinkUp
	evStall       // core stops being polled for a while
	evCrash       // application dies: its portal is closed
	evReopen      // application restarts: opens a new portal
	evChurn       // portal re-registers its remote-readable region
	evRekey       // an owner replaces a region's key
	evPostEnd     // apps stop posting
	evRunEnd      // end of the grace period: final checks
	evScript      // a scripted step (targeted tests)
	evFlow        // a flow application's issue timer (flow.go)
	evHostile     // the attacker's burst (hostile.go)
	evRestart     // a node's engine dies and a new one starts (restart.go)
	evRedial      // the restarted node's application opens its portals again
	numEventKinds // sentinel
)

var evNames = [...]string{"", "switch", "deliver", "tick", "linkdown", "linkup", "stall", "crash", "reopen", "churn", "rekey", "postend", "runend", "script", "flow", "hostile", "restart", "redial"}

type event struct {
	t    int64
	seq  uint64
	kind evKind
	node int32
	arg  int64
	f    *frame
}

// eventHeap is a binary min-heap on (t, seq): ties resolve in scheduling
// order, so the run is deterministic.
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !a.less(i, p) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	a := *h
	e := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a[n] = event{}
	a = a[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a.less(r, l) {
			m = r
		}
		if !a.less(m, i) {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return e
}

func (s *Sim) schedule(t int64, kind evKind, node int, arg int64, f *frame) {
	s.seq++
	s.events.push(event{t: t, seq: s.seq, kind: kind, node: int32(node), arg: arg, f: f})
}

// fail records the first violation; the driver stops at the end of the
// current step.
func (s *Sim) fail(format string, args ...any) {
	if s.err != nil {
		return
	}
	f := &Failure{Scenario: s.cfg.Name, Seed: s.cfg.Seed, NowNs: s.now - s.t0, Msg: fmt.Sprintf(format, args...)}
	if s.traceOn {
		for i := 0; i < len(s.trace); i++ {
			if l := s.trace[(s.tn+i)%len(s.trace)]; l != "" {
				f.Trace = append(f.Trace, l)
			}
		}
	}
	s.err = f
}

func (s *Sim) tracef(format string, args ...any) {
	if !s.traceOn {
		return
	}
	s.trace[s.tn%len(s.trace)] = fmt.Sprintf("t=%d ", s.now-s.t0) + fmt.Sprintf(format, args...)
	s.tn++
}

// digest folds v into the run's digest (FNV-1a over 64-bit words).
func (s *Sim) digest(vs ...uint64) {
	d := s.res.Digest
	if d == 0 {
		d = 14695981039346656037
	}
	for _, v := range vs {
		d ^= v
		d *= 1099511628211
	}
	s.res.Digest = d
}

func (s *Sim) setup() error {
	cfg := &s.cfg
	seed := cfg.Seed
	s.traceOn = cfg.Trace
	s.res.Seed = seed
	s.netRng = rand.New(rand.NewPCG(seed, 0x6e6574))
	s.faultRng = rand.New(rand.NewPCG(seed, 0xfa017))
	s.appRng = rand.New(rand.NewPCG(seed, 0xa99))
	s.keyRng = rand.New(rand.NewPCG(seed, 0x6b6579))
	s.mcRng = rand.New(rand.NewPCG(seed, 0x6d63))
	s.t0 = 1_000_000_000 + s.faultRng.Int64N(1_000_000_000)
	s.now = s.t0
	s.postEnd = s.t0 + cfg.PostNs
	s.ops = make(map[uint64]*op)
	s.writes = make(map[reqRef]*op)
	s.served = make(map[reqRef]servedBy)
	if cfg.Net.Forge > 0 {
		s.reqIVs = make(map[reqRef][12]byte)
	}
	if cfg.Faults.EngineRestarts > 0 || len(cfg.scripts) > 0 { // (scripts may restart engines)
		s.reqOps = make(map[reqRef]*op)
	}
	s.pool.size = cfg.MTU + wire.EthLen
	if s.pool.size < wire.MinFrame {
		s.pool.size = wire.MinFrame
	}

	s.nodes = make([]*node, cfg.Nodes)
	for i := range s.nodes {
		s.nodes[i] = newNode(s, i)
	}
	for _, n := range s.nodes {
		ec := s.engineConfig(n)
		k := max(cfg.Cores, 1)
		if cfg.CoresVary && k > 1 {
			k = 1 + s.mcRng.IntN(k)
		}
		n.tmpl = ec
		if err := n.newCores(ec, k); err != nil {
			return fmt.Errorf("sim: node %d: %w", n.id, err)
		}
		s.cores = append(s.cores, n.cores...)
		s.maxTimeout = max(s.maxTimeout, int64(ec.Timeout))
	}
	for _, n := range s.nodes {
		n.app = newApp(s, n)
		for p := 0; p < cfg.App.PortalsPerNode; p++ {
			if _, err := n.app.openPortal(); err != nil {
				return fmt.Errorf("sim: node %d: %w", n.id, err)
			}
		}
		if s.err != nil {
			return s.err
		}
	}
	for _, n := range s.nodes {
		if n.app.client {
			s.schedule(s.now+1+s.appRng.Int64N(cfg.App.TickNs), evAppTick, n.id, 0, nil)
		}
	}
	if cfg.flows != nil {
		if err := cfg.flows.setup(s); err != nil {
			return err
		}
	}
	if err := s.setupHostile(); err != nil {
		return err
	}
	s.scheduleFaults()
	for i, st := range cfg.scripts {
		s.schedule(s.t0+st.at, evScript, 0, int64(i), nil)
	}
	s.schedule(s.postEnd, evPostEnd, 0, 0, nil)
	if cfg.MaxSteps == 0 {
		cfg.MaxSteps = 20_000_000
	}
	e := &cfg.Engine
	s.hardEnd = s.postEnd + 4*int64(e.DispatchTimeout+e.ResolveTimeout+e.ARPRetry) + 8*s.maxTimeout +
		4*s.slack() + cfg.Faults.LinkDownNs[1] + 1_000_000
	return nil
}

// engineConfig fills the per-node fields of the template.
func (s *Sim) engineConfig(n *node) engine.Config {
	cfg := &s.cfg
	ec := cfg.Engine
	ec.CoreID = 0
	ec.LocalIP = n.ip
	ec.LocalMAC = n.mac
	ec.MTU = cfg.MTU
	perNode := cfg.App.PortalsPerNode * cfg.App.SlotsPerPortal
	if ec.Slots == 0 {
		// Room for every portal twice (a crashed portal's orphans hold
		// their slots while its replacement allocates), plus spare slots
		// no portal owns (targets of bad-slot commands).
		ec.Slots = 2*perNode + 8
	}
	// Slot ids are global to an engine: vary the base so a core that
	// forgets to subtract it fails. (Core i of a node of several gets
	// SlotBase + i*Slots: engine.NewGroup.)
	ec.SlotBase = abi.SlotID(s.faultRng.IntN(4) * 1000)
	if ec.Regions == 0 {
		// Small on purpose: re-registration reuses entries with a new
		// generation. Four regions per portal (pattern, sink,
		// remote-writable, write source), the crashed ones included.
		ec.Regions = 4*(cfg.App.PortalsPerNode+cfg.Faults.PortalCrashes) + 2
		if cfg.App.LookupFrac > 0 { // an index and a slab per portal
			ec.Regions += 2 * (cfg.App.PortalsPerNode + cfg.Faults.PortalCrashes)
		}
	}
	if ec.Portals == 0 {
		ec.Portals = cfg.App.PortalsPerNode + cfg.Faults.PortalCrashes + 1
	}
	// (Engine restarts need nothing more: a restarted engine starts with
	// empty tables, and its application's redial and a reopen after a
	// crash fit in them as in the first engine's.)
	if cfg.VaryTimeouts {
		ec.Timeout = ec.Timeout * time.Duration(2+s.faultRng.IntN(3)) / 2
	}
	if n.id < len(cfg.timeouts) && cfg.timeouts[n.id] != 0 {
		ec.Timeout = cfg.timeouts[n.id]
	}
	ec.NeighborTable = cfg.NeighborTable
	if ec.NeighborTable == 0 {
		ec.NeighborTable = 4
		for ec.NeighborTable < 2*cfg.Nodes+4 {
			ec.NeighborTable *= 2
		}
	}
	ec.NeighborsPerTenant = cfg.NeighborsPerTenant
	if ec.NeighborsPerTenant == 0 {
		ec.NeighborsPerTenant = ec.NeighborTable / 2
	}
	ec.ARPRate, ec.ARPBurst = cfg.ARPRate, cfg.ARPBurst
	if ec.ARPRate == 0 {
		ec.ARPRate, ec.ARPBurst = 1_000_000, 1_000_000
	}
	// Security: each node its own IV counters (volatile: a run is one
	// process lifetime) and a fixed cache hash seed, so runs repeat.
	ec.IV = aesni.NewVolatileIVSource(aesni.IVConfig{Block: cfg.IVBlock, Span: cfg.IVSpan})
	ec.CacheSeed = mix64(cfg.Seed<<8^uint64(n.id)) | 1
	ec.Neighbors = nil
	if cfg.StaticNeighbors {
		for _, m := range s.nodes {
			if m != n {
				ec.Neighbors = append(ec.Neighbors, engine.Neighbor{IP: m.ip, MAC: m.mac})
			}
		}
	}
	return ec
}

func (s *Sim) scheduleFaults() {
	f := &s.cfg.Faults
	r := s.faultRng
	at := func() int64 { return s.t0 + s.cfg.PostNs/10 + r.Int64N(s.cfg.PostNs*8/10) }
	for i := 0; i < f.LinkFlaps; i++ {
		d := f.LinkDownNs[0] + r.Int64N(f.LinkDownNs[1]-f.LinkDownNs[0]+1)
		// Early enough that ops caught by it time out before posting ends
		// (a Shutdown at the end would abort them first).
		t := s.t0 + s.cfg.PostNs/20 + r.Int64N(s.cfg.PostNs/2)
		s.schedule(t, evLinkDown, r.IntN(len(s.nodes)), d, nil)
		s.pendingEv++
	}
	for i := 0; i < f.Stalls; i++ {
		s.schedule(at(), evStall, r.IntN(len(s.nodes)), 1+r.Int64N(f.StallNs), nil)
	}
	for i := 0; i < f.PortalCrashes; i++ {
		s.schedule(at(), evCrash, s.pickClient(r), 0, nil)
		s.pendingEv++
	}
	for i := 0; i < f.RegionChurn; i++ {
		s.schedule(at(), evChurn, r.IntN(len(s.nodes)), 0, nil)
	}
	for i := 0; i < f.Rekeys; i++ {
		s.schedule(at(), evRekey, r.IntN(len(s.nodes)), 0, nil)
	}
	// Drawn after every other fault, so that no other fault's draws
	// depend on them. Early enough, as link flaps, that the other nodes'
	// ops caught by one time out before posting ends.
	for i := 0; i < f.EngineRestarts; i++ {
		t := s.t0 + s.cfg.PostNs/20 + r.Int64N(s.cfg.PostNs/2)
		s.schedule(t, evRestart, r.IntN(len(s.nodes)), 0, nil)
		s.pendingEv++
	}
}

func (s *Sim) pickClient(r *rand.Rand) int {
	if c := s.cfg.App.Clients; len(c) > 0 {
		return c[r.IntN(len(c))]
	}
	return r.IntN(len(s.nodes))
}

// slack is the extra time an op may take beyond its protocol bound: core
// steps take virtual CPU time, and a stalled core serves nothing.
func (s *Sim) slack() int64 {
	c := &s.cfg.Cost
	sl := int64(50_000) + 64*(c.PollNs+c.RxFrameNs+c.TxFrameNs)
	if s.cfg.Faults.Stalls > 0 {
		sl += s.cfg.Faults.StallNs * int64(s.cfg.Faults.Stalls)
	}
	return sl
}

// run is the driver loop: advance virtual time to the earliest of the next
// event (frame delivery, app tick, fault) and each core's next run time
// (rx pending, Poll requested, NextDeadline), and do that one thing.
func (s *Sim) run() {
	for s.err == nil {
		tEv := int64(math.MaxInt64)
		if len(s.events) > 0 {
			tEv = s.events[0].t
		}
		tN, ci := int64(math.MaxInt64), -1
		for i, c := range s.cores {
			if c.next < tN {
				tN, ci = c.next, i
			}
		}
		t := min(tEv, tN)
		if t == math.MaxInt64 {
			// Nothing will ever happen again: every outstanding op is
			// stuck. Jump past the first bound to report it.
			if len(s.deadlines) > 0 {
				s.now = max(s.now, s.deadlines[0].t+1)
				s.checkDeadlines()
			}
			s.fail("the run stopped with %d ops outstanding, no event pending and every core idle", len(s.ops))
			return
		}
		if t > s.hardEnd {
			s.now = max(s.now, s.hardEnd)
			s.checkDeadlines()
			s.fail("did not quiesce by %dns after posting ended: %d ops outstanding, %d frames in flight",
				s.hardEnd-s.postEnd, len(s.ops), s.pool.inUse)
			return
		}
		if t < s.now {
			s.fail("time went backwards: %d < %d", t-s.t0, s.now-s.t0)
			return
		}
		s.now = t
		s.res.Steps++
		if s.res.Steps > s.cfg.MaxSteps {
			s.fail("livelock: more than %d steps", s.cfg.MaxSteps)
			return
		}
		if tEv <= tN {
			e := s.events.pop()
			if e.kind == evRunEnd {
				s.finalChecks()
				return
			}
			s.handle(e)
		} else {
			s.cores[ci].step()
		}
		s.checkDeadlines()
		if s.draining && s.err == nil {
			s.maybeQuiesced()
		}
	}
}

func (s *Sim) handle(e event) {
	s.digest(uint64(e.t), uint64(e.kind), uint64(e.node))
	n := s.nodes[e.node]
	switch e.kind {
	case evSwitch:
		s.atSwitch(e.f)
	case evDeliver:
		n.deliver(e.f)
	case evAppTick:
		n.app.tick()
	case evLinkDown:
		s.tracef("node %d link down for %dns", n.id, e.arg)
		n.linkDown++
		s.schedule(s.now+e.arg, evLinkUp, n.id, 0, nil)
	case evLinkUp:
		s.tracef("node %d link up", n.id)
		n.linkDown--
		s.pendingEv--
	case evStall:
		c := n.cores[0]
		if len(n.cores) > 1 {
			c = n.cores[s.mcRng.IntN(len(n.cores))]
		}
		s.tracef("node %d core %d stalls for %dns", n.id, c.idx, e.arg)
		if end := s.now + e.arg; end > c.busyUntil {
			c.stalled += end - max(c.busyUntil, s.now)
			c.busyUntil = end
		}
		c.reschedule()
	case evCrash:
		n.app.crash()
		s.schedule(s.now+s.faultRng.Int64N(200_000), evReopen, n.id, 0, nil)
	case evReopen:
		s.pendingEv--
		if _, err := n.app.openPortal(); err != nil {
			s.fail("node %d: reopening a portal after a crash: %v", n.id, err)
		}
	case evFlow:
		s.cfg.flows.timer(e.arg)
	case evHostile:
		s.hostile.tick()
	case evChurn:
		n.app.churn()
	case evRekey:
		n.app.rekey()
	case evRestart:
		n.restart()
	case evRedial:
		s.pendingEv--
		n.app.redial(int(e.arg))
	case evScript:
		s.cfg.scripts[e.arg].do(s)
		for _, m := range s.nodes {
			m.kickAll()
		}
	case evPostEnd:
		s.tracef("posting ends")
		if s.cfg.ShutdownAtEnd {
			s.shutdownAll()
		}
		s.draining = true
	}
}

// checkDeadlines: every op must complete within its bound.
func (s *Sim) checkDeadlines() {
	for len(s.deadlines) > 0 {
		d := s.deadlines[0]
		o, ok := s.ops[d.cookie]
		if !ok || o.deadline != d.t {
			s.deadlines.pop() // completed (or orphaned) already
			continue
		}
		if d.t < s.now {
			s.fail("op not completed within its bound: %s; bound %dns after posting, now %dns after",
				o, o.deadline-o.postedAt, s.now-o.postedAt)
		}
		return
	}
}

// maybeQuiesced: once no op is outstanding, the network is empty and no
// fault is pending, run a grace period (late timers, stale responses) and
// then the final checks.
func (s *Sim) maybeQuiesced() {
	if len(s.ops) > 0 || s.pool.inUse > 0 || s.pendingEv > 0 || (s.cfg.flows != nil && s.cfg.flows.outstanding > 0) {
		return
	}
	for _, n := range s.nodes {
		if n.rxPending() {
			return
		}
	}
	s.draining = false
	e := &s.cfg.Engine
	grace := s.maxTimeout + int64(e.DispatchTimeout+e.ResolveTimeout) + s.slack()
	s.schedule(s.now+grace, evRunEnd, 0, 0, nil)
	s.tracef("quiesced; grace %dns", grace)
}

// startShutdown ends the run the other way: Core.Shutdown on every node
// while ops are still in flight.
func (s *Sim) shutdownAll() {
	for _, n := range s.nodes {
		n.shutdown()
	}
	if s.err != nil {
		return
	}
	// Only WRITEs whose data was all sent stay in service (their server
	// might still commit them); they complete later, on their ack or at
	// their deadline, checked like every other completion.
	for _, o := range s.ops {
		if !o.write || o.pullFirst == 0 {
			s.fail("Shutdown left %s without a completion", o)
			return
		}
	}
}

// shutdown: Core.Shutdown on n. One last Poll takes what the apps
// published; Shutdown then aborts everything queued or in flight but
// WRITEs whose data was all sent, which the node keeps serving.
func (n *node) shutdown() {
	for _, c := range n.cores {
		c.core.Poll(n.s.now)
		n.app.harvestAll()
		n.afterCall("Poll")
	}
	n.shut = true
	for _, c := range n.cores {
		c.core.Shutdown(n.s.now)
		n.app.harvestAll()
		n.afterCall("Shutdown")
	}
	for _, c := range n.cores {
		c.reschedule()
	}
}

// finalChecks: every resource back where it belongs.
func (s *Sim) finalChecks() {
	s.tracef("final checks")
	if len(s.ops) > 0 {
		s.fail("%d ops never completed", len(s.ops))
		return
	}
	for _, n := range s.nodes {
		n.checkQuiet("at the end")
		n.app.checkAtEnd()
		if s.err != nil {
			return
		}
	}
	if fr := s.cfg.flows; fr != nil && fr.shares != nil {
		if fr.shares.atEnd(); s.err != nil {
			return
		}
	}
	if s.hostile != nil {
		s.hostile.checkAtEnd()
		if s.err != nil {
			return
		}
	}
	for _, st := range s.cfg.MustSee {
		if s.res.ByStatus[st] == 0 {
			s.fail("no op completed with %v: the scenario did not exercise that mechanism (completions by status: %s)",
				st, statusSummary(&s.res.ByStatus))
			return
		}
	}
	// Close every portal: all slots come back to the cores.
	for _, n := range s.nodes {
		n.app.closeAll()
		n.afterCall("ClosePortal")
		for _, c := range n.cores {
			st := c.core.Stats()
			if st.SlotsInUse != 0 || st.WindowInUse != 0 || st.OpsInFlight != 0 || st.PullsInUse != 0 {
				s.fail("node %d core %d after closing every portal: SlotsInUse=%d WindowInUse=%d OpsInFlight=%d PullsInUse=%d, want 0",
					n.id, c.idx, st.SlotsInUse, st.WindowInUse, st.OpsInFlight, st.PullsInUse)
				return
			}
		}
		if err := n.g.Audit(); err != nil {
			s.fail("node %d after closing every portal: %v", n.id, err)
			return
		}
	}
}

func (s *Sim) finishResult() {
	s.res.EndNs = s.now - s.t0
	if fr := s.cfg.flows; fr != nil && fr.shares != nil {
		st := fr.shares.st // a copy: a pointer into the run would keep all of it alive
		s.res.Shares = &st
	}
	if s.hostile != nil {
		s.res.Hostile = s.hostile.st
	}
	s.res.Cores = s.res.Cores[:0]
	for _, c := range s.cores {
		s.res.Cores = append(s.res.Cores, c.core.Stats())
	}
}

// ip4 converts an address to the big-endian integer commands carry.
func ip4(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func statusSummary(by *[abi.NumStatus]uint64) string {
	var b strings.Builder
	for i, v := range by {
		if v != 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%v=%d", abi.Status(i), v)
		}
	}
	return b.String()
}
