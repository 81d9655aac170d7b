package sim

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/engine"
)

// Flow experiments (paper §7.4, §7.5): the simulator's nodes, fabric and
// virtual clock, real engine.Core instances, but instead of the random
// workload "flow" applications. A flow reads a large object (4 MB,
// repeated) from one server in ops of at most 4 KB, issued either
// statically (a fixed rate and/or a fixed number of outstanding ops: CC
// disabled, as for Fig. 16) or as a cc.Controller allows (one controller
// per client node, as the paper's CommandExecutor: Fig. 15). Every
// completion is checked (exactly one per op, its status one congestion can
// cause, its delays consistent, its bytes the object's) and recorded:
// time series per flow, status counts, totals. The engine invariants of
// the simulator (Audit after every call, counters, leaks at the end) hold
// as in every other run.

// FlowExperiment describes one experiment.
type FlowExperiment struct {
	Name  string
	Seed  uint64
	Nodes int
	MTU   int
	// Engine is the template of every node's engine (WindowBytes,
	// DispatchTimeout, Timeout, InboundQueue, NackThreshold, ServeBudget;
	// zero Slots, Regions, Portals: sized for the flows).
	Engine engine.Config
	Net    NetConfig
	Cost   CostConfig
	// NodeCost overrides Cost for some nodes (a server that serves at a
	// finite rate).
	NodeCost map[int]CostConfig
	// CC parameterises the controller of every client node that runs a
	// flow with FlowSpec.CC.
	CC    cc.Params
	Flows []FlowSpec
	// DurationNs: flows post for this long (virtual ns from the start);
	// then the simulator drains every op and checks the engines.
	DurationNs int64
	// BucketNs is the resolution of the time series (default 1 µs).
	BucketNs int64
	// KeepSamples records every completion (FlowResult.Samples).
	KeepSamples bool
}

// FlowSpec is one flow: a client reading an object of a server.
type FlowSpec struct {
	Name           string
	Client, Server int
	// StartNs, StopNs: the flow posts from StartNs to StopNs (virtual ns
	// from the start; StopNs 0: until DurationNs).
	StartNs, StopNs int64
	ObjectBytes     int // the object read, over and over (default 4 MB)
	OpBytes         int // bytes per op (default 4096)
	Slots           int // the flow portal's command slots (default 128)
	// Static issue (CC off): RateBps > 0 posts one op every
	// OpBytes*8/RateBps seconds (an issue time with no free slot is
	// skipped: FlowStats.Skipped); MaxOutstanding > 0 caps the ops posted
	// and not completed. With neither, the flow keeps every slot busy.
	RateBps        float64
	MaxOutstanding int
	// CC: issue as the client's controller allows (FlowExperiment.CC):
	// at most MaxInFlight(key) ops in flight to the server, paced by Gap.
	CC bool
}

// FlowResult is what an experiment measured.
type FlowResult struct {
	Exp   FlowExperiment
	Sim   *Result // the simulator's summary (engine stats per node)
	Flows []FlowStats
	// Samples: every completion, in order (FlowExperiment.KeepSamples).
	Samples []FlowSample
}

// FlowStats are one flow's totals and time series. Times are virtual ns
// from the start of the run.
type FlowStats struct {
	Spec     FlowSpec
	Posted   uint64
	Skipped  uint64 // static issue times that found no free slot
	Retried  uint64 // ops that re-read a chunk whose earlier op failed
	ByStatus [abi.NumStatus]uint64
	OKBytes  uint64
	// OKTimes: completion time of every OK op (its bytes: Spec.OpBytes).
	OKTimes []int64
	// ChunkLatNs: per chunk read OK, from the first post of the chunk
	// (failed attempts included) to its OK completion.
	ChunkLatNs []int64
	Buckets    []FlowBucket
}

// FlowBucket is one BucketNs of a flow.
type FlowBucket struct {
	OKBytes uint64
	OK      uint32
	NACK    uint32
	Timeout uint32
	DT      uint32 // DISPATCH_TIMEOUT
	Posted  uint32
	// Sums over the bucket's OK completions (means: divide by OK).
	IssueSumNs, RemoteSumNs int64
	// CC flows: the windows after the bucket's last completion (carried
	// forward through buckets without one); 0 before the first.
	Cwnd, Local, Remote float64
}

// FlowSample is one completion.
type FlowSample struct {
	T        int64 // virtual ns from the start
	Flow     int
	Status   abi.Status
	IssueNs  int64
	TotalNs  int64
	Cwnd     float64 // CC flows: after the completion
	Local    float64
	Remote   float64
	Inflight int // ops of the flow outstanding after it
}

// DefaultBucketNs is the time-series resolution when BucketNs is 0.
const DefaultBucketNs = 1000

// RunFlows runs an experiment and returns what it measured, and the first
// invariant violation (nil: every check passed).
func RunFlows(x FlowExperiment) (*FlowResult, error) {
	fr := &flowRun{exp: x}
	cfg, err := fr.config()
	if err != nil {
		return nil, err
	}
	res, err := Run(cfg)
	out := fr.result()
	out.Sim = res
	return out, err
}

// flowRun is an experiment's state inside a Sim.
type flowRun struct {
	exp         FlowExperiment
	s           *Sim
	flows       []*flowState
	servers     map[int]*flowServer
	ctl         map[int]*cc.Controller
	inflight    map[ccKey]int // ops outstanding per (client, key): MaxInFlight counts them
	outstanding int           // ops of every flow outstanding (the drain waits for 0)
	samples     []FlowSample
	bucketNs    int64
}

type ccKey struct {
	node int
	k    cc.Key
}

type flowServer struct {
	fp      *flowPortal
	obj     []byte
	pattern uint64 // obj[i] == patByte(pattern, i)
	id      abi.RegionID
	d       *aesni.Deriver
}

type flowOp struct {
	live     bool
	cookie   uint64
	off      uint64 // chunk offset in the object
	postedAt int64
	firstAt  int64 // first post of this chunk
	length   uint32
}

type retryChunk struct {
	off     uint64
	firstAt int64
}

type flowState struct {
	fr        *flowRun
	idx       int
	spec      FlowSpec
	fp        *flowPortal
	srv       *flowServer
	kd        aesni.Key
	key       cc.Key
	ctl       *cc.Controller
	pacer     cc.Pacer
	start     int64 // absolute
	stop      int64
	gap       float64 // static rate: ns between issues
	nextIssue float64 // static rate: next issue time (absolute)
	nextChunk uint64
	retry     []retryChunk
	timerAt   int64 // earliest pending timer (0: none)
	out       int   // ops outstanding
	seq       uint64
	st        FlowStats
	cur       FlowBucket // carried windows
}

// flowPortal is a portal of a flow (slots, sink) or of a server (no
// slots: it owns the object region).
type flowPortal struct {
	fr     *flowRun
	n      *node
	f      *flowState // nil: a server's portal
	id     engine.PortalID
	pid    uint32
	seg    []byte
	cmd    *abi.Producer
	cpl    *abi.Consumer
	slots  []abi.SlotID
	slotIx map[abi.SlotID]int
	busy   []flowOp
	idle   []int
	sink   []byte
	sinkID abi.RegionID
	closed bool
}

func (fr *flowRun) config() (Config, error) {
	x := &fr.exp
	x.Flows = slices.Clone(x.Flows) // defaults are filled in: not in the caller's slice
	if x.BucketNs <= 0 {
		x.BucketNs = DefaultBucketNs
	}
	fr.bucketNs = x.BucketNs
	if x.Nodes < 2 || len(x.Flows) == 0 || x.DurationNs <= 0 {
		return Config{}, fmt.Errorf("sim: flow experiment %q: needs 2+ nodes, flows and a duration", x.Name)
	}
	for i := range x.Flows {
		f := &x.Flows[i]
		if f.ObjectBytes == 0 {
			f.ObjectBytes = 4 << 20
		}
		if f.OpBytes == 0 {
			f.OpBytes = abi.MaxOpBytes
		}
		if f.Slots == 0 {
			f.Slots = 128
		}
		if f.StopNs == 0 || f.StopNs > x.DurationNs {
			f.StopNs = x.DurationNs
		}
		switch {
		case f.Client < 0 || f.Client >= x.Nodes || f.Server < 0 || f.Server >= x.Nodes || f.Client == f.Server:
			return Config{}, fmt.Errorf("sim: flow %d: client %d server %d", i, f.Client, f.Server)
		case f.OpBytes < 1 || f.OpBytes > abi.MaxOpBytes || f.ObjectBytes < f.OpBytes:
			return Config{}, fmt.Errorf("sim: flow %d: OpBytes %d ObjectBytes %d", i, f.OpBytes, f.ObjectBytes)
		case f.StartNs < 0 || f.StartNs >= f.StopNs:
			return Config{}, fmt.Errorf("sim: flow %d: StartNs %d StopNs %d", i, f.StartNs, f.StopNs)
		case f.RateBps < 0 || f.MaxOutstanding < 0 || f.Slots < 1:
			return Config{}, fmt.Errorf("sim: flow %d: rate %v outstanding %d slots %d", i, f.RateBps, f.MaxOutstanding, f.Slots)
		}
	}
	e := x.Engine
	if e.Slots == 0 {
		e.Slots = 8
		for _, f := range x.Flows {
			e.Slots += f.Slots
		}
	}
	if e.Regions == 0 {
		e.Regions = 16 + len(x.Flows)
	}
	if e.Portals == 0 {
		e.Portals = 4 + len(x.Flows)
	}
	if e.ResolveTimeout == 0 {
		e.ResolveTimeout = time.Millisecond
	}
	if e.ARPRetry == 0 {
		e.ARPRetry = 100 * time.Microsecond
	}
	cfg := Config{
		Name:            "flows/" + x.Name,
		Seed:            x.Seed,
		Nodes:           x.Nodes,
		Engine:          e,
		MTU:             x.MTU,
		StaticNeighbors: true,
		Net:             x.Net,
		Cost:            x.Cost,
		// The random workload's applications open one small portal per
		// node and post nothing (no clients): the flows are the load.
		App: AppConfig{
			PortalsPerNode: 1, SlotsPerPortal: 1, CmdCap: 2, TickNs: 1_000_000,
			SrcMinBytes: 64, SrcMaxBytes: 64, DstMinBytes: 64, DstMaxBytes: 64,
			Clients: []int{},
		},
		PostNs:   x.DurationNs,
		MaxSteps: 400_000_000,
		flows:    fr,
	}
	if cfg.Net.RxQueueFrames == 0 {
		cfg.Net.RxQueueFrames = 4096
	}
	if len(x.NodeCost) > 0 {
		cfg.costs = make([]CostConfig, x.Nodes)
		for n, c := range x.NodeCost {
			if n < 0 || n >= x.Nodes || c.PollNs < 1 {
				return Config{}, fmt.Errorf("sim: NodeCost[%d] = %+v", n, c)
			}
			cfg.costs[n] = c
		}
	}
	return cfg, nil
}

// setup opens the servers' and the flows' portals and schedules the flows.
func (fr *flowRun) setup(s *Sim) error {
	fr.s = s
	x := &fr.exp
	fr.servers = make(map[int]*flowServer)
	fr.ctl = make(map[int]*cc.Controller)
	fr.inflight = make(map[ccKey]int)
	for i, spec := range x.Flows {
		srv := fr.servers[spec.Server]
		if srv == nil {
			var err error
			if srv, err = fr.newServer(s.nodes[spec.Server], spec.ObjectBytes); err != nil {
				return err
			}
			fr.servers[spec.Server] = srv
		} else if len(srv.obj) < spec.ObjectBytes {
			return fmt.Errorf("sim: flow %d: node %d serves one object to every flow: size it for the largest", i, spec.Server)
		}
		f := &flowState{fr: fr, idx: i, spec: spec, srv: srv, start: s.t0 + spec.StartNs, stop: s.t0 + spec.StopNs}
		f.st.Spec = spec
		cn := s.nodes[spec.Client]
		fp, err := fr.openPortal(cn, f, spec.Slots, uint32(5000+i))
		if err != nil {
			return err
		}
		f.fp = fp
		f.kd = srv.d.Derive(cn.ip.As4(), fp.pid, uint8(abi.OpRead))
		f.key = cc.Key{Peer: s.nodes[spec.Server].ip4, Dir: cc.Read}
		if spec.CC {
			if fr.ctl[spec.Client] == nil {
				c, err := cc.New(x.CC)
				if err != nil {
					return err
				}
				fr.ctl[spec.Client] = c
			}
			f.ctl = fr.ctl[spec.Client]
		}
		if spec.RateBps > 0 {
			f.gap = float64(spec.OpBytes) * 8 * 1e9 / spec.RateBps
			f.nextIssue = float64(f.start)
		}
		nb := int((spec.StopNs - spec.StartNs + fr.bucketNs - 1) / fr.bucketNs)
		nb += int((s.cfg.Engine.DispatchTimeout+s.cfg.Engine.Timeout)/time.Duration(fr.bucketNs)) + 64 // the drain
		f.st.Buckets = make([]FlowBucket, int(spec.StartNs/fr.bucketNs)+nb)
		fr.flows = append(fr.flows, f)
		f.setTimer(f.start)
	}
	return nil
}

func (fr *flowRun) newServer(n *node, size int) (*flowServer, error) {
	fp, err := fr.openPortal(n, nil, 0, uint32(6000+n.id))
	if err != nil {
		return nil, err
	}
	obj := alignedBytes(size)
	pat := uint64(0xf10<<8 | n.id)
	fillPattern(obj, pat)
	kr := fr.s.newKey()
	id, err := n.core.RegisterRegion(fp.id, obj, abi.PermRemoteRead, kr)
	if err != nil {
		return nil, fmt.Errorf("sim: node %d: registering a %d-byte object: %w", n.id, size, err)
	}
	n.afterCall("RegisterRegion")
	return &flowServer{fp: fp, obj: obj, pattern: pat, id: id, d: aesni.NewDeriver(kr)}, nil
}

// openPortal opens a portal on n as the portal library would, with slots
// and a sink of one OpBytes area per slot (f != nil).
func (fr *flowRun) openPortal(n *node, f *flowState, slots int, pid uint32) (*flowPortal, error) {
	cmdCap := nextPow2(uint32(max(slots, 2)))
	lay, err := abi.NewLayout(0, cmdCap, nextPow2(uint32(slots)+cmdCap))
	if err != nil {
		return nil, err
	}
	fp := &flowPortal{fr: fr, n: n, f: f, pid: pid, seg: alignedBytes(int(lay.Size)), slotIx: make(map[abi.SlotID]int)}
	id, err := n.core.OpenPortal(engine.PortalSpec{
		CmdRing: lay.CmdRing(fp.seg), CmdCap: lay.CmdCap,
		CplRing: lay.CplRing(fp.seg), CplCap: lay.CplCap,
		MaxSlots: slots, PID: pid,
	})
	if err != nil {
		return nil, fmt.Errorf("sim: node %d: OpenPortal: %w", n.id, err)
	}
	fp.id = id
	lay.Portal = uint32(id)
	lay.Encode(fp.seg)
	if fp.cmd, err = abi.NewProducer(lay.CmdRing(fp.seg), lay.CmdCap, abi.CommandSize); err != nil {
		return nil, err
	}
	if fp.cpl, err = abi.NewConsumer(lay.CplRing(fp.seg), lay.CplCap, abi.CompletionSize); err != nil {
		return nil, err
	}
	if slots > 0 {
		if fp.slots, err = n.core.AllocSlots(id, slots); err != nil {
			return nil, fmt.Errorf("sim: node %d: AllocSlots(%d): %w", n.id, slots, err)
		}
		for k, sl := range fp.slots {
			fp.slotIx[sl] = k
		}
		fp.busy = make([]flowOp, slots)
		for k := slots - 1; k >= 0; k-- {
			fp.idle = append(fp.idle, k)
		}
		fp.sink = alignedBytes(slots * f.spec.OpBytes)
		fill(fp.sink, poison)
		if fp.sinkID, err = n.core.RegisterRegion(id, fp.sink, abi.PermLocalWrite, fr.s.newKey()); err != nil {
			return nil, fmt.Errorf("sim: node %d: registering a sink: %w", n.id, err)
		}
	}
	n.app.flows = append(n.app.flows, fp)
	n.afterCall("OpenPortal")
	return fp, nil
}

// setTimer asks for a call of pump at t (absolute).
func (f *flowState) setTimer(t int64) {
	s := f.fr.s
	if f.timerAt != 0 && f.timerAt <= t {
		return
	}
	f.timerAt = t
	s.schedule(t, evFlow, f.spec.Client, int64(f.idx), nil)
}

// timer: a flow's issue timer fired.
func (fr *flowRun) timer(i int64) {
	f := fr.flows[i]
	if f.timerAt != 0 && f.timerAt <= fr.s.now {
		f.timerAt = 0
	}
	f.pump()
}

func (f *flowState) bucket(t int64) *FlowBucket {
	i := int((t - f.fr.s.t0) / f.fr.bucketNs)
	if i >= len(f.st.Buckets) {
		f.st.Buckets = append(f.st.Buckets, make([]FlowBucket, i+1-len(f.st.Buckets))...)
	}
	return &f.st.Buckets[i]
}

// pump posts what the flow may post now and arms its timer for later.
func (f *flowState) pump() {
	fr := f.fr
	s := fr.s
	now := s.now
	if now < f.start || now >= f.stop || now >= s.postEnd || s.err != nil {
		return
	}
	posted := false
	defer func() {
		if posted {
			f.fp.cmd.Publish()
			n := f.fp.n
			n.kick = true
			n.reschedule()
		}
	}()
	for {
		switch {
		case f.spec.CC:
			ck := ccKey{f.spec.Client, f.key}
			if fr.inflight[ck] >= f.ctl.MaxInFlight(f.key) {
				return // a completion calls pump again
			}
			if w := f.pacer.Wait(now); w > 0 {
				f.setTimer(now + w)
				return
			}
		case f.spec.RateBps > 0:
			if float64(now) < f.nextIssue {
				f.setTimer(int64(math.Ceil(f.nextIssue)))
				return
			}
			f.nextIssue += f.gap
			if (f.spec.MaxOutstanding > 0 && f.out >= f.spec.MaxOutstanding) || len(f.fp.idle) == 0 {
				f.st.Skipped++
				continue
			}
		default:
			if f.spec.MaxOutstanding > 0 && f.out >= f.spec.MaxOutstanding {
				return
			}
		}
		if len(f.fp.idle) == 0 {
			return // a completion calls pump again
		}
		if !f.post(now) {
			return
		}
		posted = true
		if f.spec.CC {
			f.pacer.Issued(now, f.ctl.Gap(f.key, f.spec.OpBytes))
		}
	}
}

// post writes one READ of the flow's next chunk (a failed one first).
func (f *flowState) post(now int64) bool {
	fr := f.fr
	s := fr.s
	fp := f.fp
	entry := fp.cmd.Reserve()
	if entry == nil {
		return false
	}
	k := fp.idle[len(fp.idle)-1]
	area := fp.sink[k*f.spec.OpBytes : (k+1)*f.spec.OpBytes]
	if i := firstNotPoison(area); i >= 0 {
		s.fail("flow %d: byte %d of idle slot %d's sink area written (%#02x): a late response landed after its op completed", f.idx, i, k, area[i])
		return false
	}
	fp.idle = fp.idle[:len(fp.idle)-1]
	op := flowOp{live: true, postedAt: now, firstAt: now, length: uint32(f.spec.OpBytes)}
	if n := len(f.retry); n > 0 {
		r := f.retry[0]
		f.retry = f.retry[1:]
		op.off, op.firstAt = r.off, r.firstAt
		f.st.Retried++
	} else {
		op.off = f.nextChunk
		f.nextChunk += uint64(f.spec.OpBytes)
		if f.nextChunk+uint64(f.spec.OpBytes) > uint64(len(f.srv.obj)) {
			f.nextChunk = 0 // the next transfer of the object
		}
	}
	f.seq++
	op.cookie = uint64(f.idx)<<48 | f.seq
	fp.busy[k] = op
	c := abi.Command{
		Op: abi.OpRead, Slot: fp.slots[k], Cookie: op.cookie,
		RemoteAddr: f.key.Peer, RemoteRegion: f.srv.id, RemoteOffset: op.off,
		LocalRegion: fp.sinkID, LocalOffset: uint64(k * f.spec.OpBytes), Length: op.length, Key: f.kd,
	}
	c.Encode(entry)
	fp.cmd.Commit()
	f.out++
	fr.outstanding++
	fr.inflight[ccKey{f.spec.Client, f.key}]++
	f.st.Posted++
	f.bucket(now).Posted++
	s.digest(0xf1, op.cookie, uint64(now))
	return true
}

// harvest reads the portal's completions (inside the node's step).
func (fp *flowPortal) harvest() {
	if fp.closed {
		return
	}
	s := fp.fr.s
	got := false
	for {
		e := fp.cpl.Peek()
		if e == nil {
			break
		}
		var c abi.Completion
		c.Decode(e)
		fp.cpl.Advance()
		fp.n.app.completions++
		got = true
		fp.complete(&c)
		if s.err != nil {
			break
		}
	}
	fp.cpl.Release()
	if fp.cpl.Corrupt() {
		s.fail("node %d flow portal %d: the core wrote an impossible completion-ring producer index", fp.n.id, fp.id)
	}
	if got && s.err == nil {
		// The executor reacts at once: the node's CC flows may issue more
		// (the local window is shared), this flow may reuse its slots.
		for _, q := range fp.n.app.flows {
			if q.f != nil && (q == fp || q.f.spec.CC) {
				q.f.pump()
			}
		}
	}
}

// complete checks and records one completion.
func (fp *flowPortal) complete(c *abi.Completion) {
	fr := fp.fr
	s := fr.s
	f := fp.f
	s.digest(0xf2, c.Cookie, uint64(c.Status), uint64(s.now))
	if f == nil {
		s.fail("node %d: completion %+v on a server portal, which posts nothing", fp.n.id, *c)
		return
	}
	k, ok := fp.slotIx[c.Slot]
	if !ok || !fp.busy[k].live || fp.busy[k].cookie != c.Cookie {
		s.fail("flow %d: completion {cookie=%#x slot=%d status=%v}: no such op outstanding", f.idx, c.Cookie, c.Slot, c.Status)
		return
	}
	op := fp.busy[k]
	e := &fp.n.ecfg
	age := s.now - op.postedAt
	issue, total := int64(c.IssueDelayNs), int64(c.TotalDelayNs)
	bound := int64(e.DispatchTimeout+e.Timeout) + 100_000
	switch c.Status {
	case abi.StatusOK, abi.StatusNack, abi.StatusTimeout, abi.StatusDispatchTimeout:
	default:
		s.fail("flow %d: op %#x (chunk %d) completed %v: only congestion outcomes are possible here", f.idx, op.cookie, op.off, c.Status)
		return
	}
	switch {
	case c.Op != abi.OpRead:
		s.fail("flow %d: op %#x completed with op %v", f.idx, op.cookie, c.Op)
	case c.Status == abi.StatusOK && c.Length != op.length:
		s.fail("flow %d: op %#x completed OK with length %d, want %d", f.idx, op.cookie, c.Length, op.length)
	case issue > total || total > age:
		s.fail("flow %d: op %#x: issue_delay %d, total_delay %d, but it was posted %dns ago", f.idx, op.cookie, issue, total, age)
	case age > bound:
		s.fail("flow %d: op %#x completed %dns after it was posted (bound %dns)", f.idx, op.cookie, age, bound)
	case c.Status == abi.StatusDispatchTimeout && total < int64(e.DispatchTimeout):
		s.fail("flow %d: op %#x: DISPATCH_TIMEOUT after %dns (DispatchTimeout %v)", f.idx, op.cookie, total, e.DispatchTimeout)
	case c.Status == abi.StatusTimeout && total-issue < int64(e.Timeout):
		s.fail("flow %d: op %#x: TIMEOUT after %dns in service (Timeout %v)", f.idx, op.cookie, total-issue, e.Timeout)
	}
	if s.err != nil {
		return
	}
	// The data: exactly the object's bytes (OK), or each byte the object's
	// or untouched (a failure after some chunks landed). Then poison the
	// area again for the slot's next op. (The object's bytes as the
	// pattern defines them, not as its memory holds them: a server that
	// changed them must be caught.)
	area := fp.sink[k*f.spec.OpBytes : (k+1)*f.spec.OpBytes]
	want := s.expect[:op.length]
	fillPatternAt(want, f.srv.pattern, op.off)
	if c.Status == abi.StatusOK {
		if !bytes.Equal(area[:op.length], want) {
			s.fail("flow %d: op %#x completed OK with wrong data", f.idx, op.cookie)
			return
		}
	} else if firstNotPoison(area) >= 0 {
		for i, b := range area[:op.length] {
			if b != want[i] && b != poison {
				s.fail("flow %d: op %#x failed %v with byte %d neither the object's nor untouched", f.idx, op.cookie, c.Status, i)
				return
			}
		}
	}
	fill(area, poison)
	fp.busy[k] = flowOp{}
	fp.idle = append(fp.idle, k)
	f.out--
	fr.outstanding--
	fr.inflight[ccKey{f.spec.Client, f.key}]--

	b := f.bucket(s.now)
	f.st.ByStatus[c.Status]++
	switch c.Status {
	case abi.StatusOK:
		b.OK++
		b.OKBytes += uint64(op.length)
		b.IssueSumNs += issue
		b.RemoteSumNs += total - issue
		f.st.OKBytes += uint64(op.length)
		f.st.OKTimes = append(f.st.OKTimes, s.now-s.t0)
		f.st.ChunkLatNs = append(f.st.ChunkLatNs, s.now-op.firstAt)
	default:
		switch c.Status {
		case abi.StatusNack:
			b.NACK++
		case abi.StatusTimeout:
			b.Timeout++
		case abi.StatusDispatchTimeout:
			b.DT++
		}
		f.retry = append(f.retry, retryChunk{op.off, op.firstAt})
	}
	if f.ctl != nil {
		f.ctl.OnCompletion(s.now, f.key, c.Status, issue, total)
		f.cur.Cwnd, f.cur.Local, f.cur.Remote = f.ctl.Cwnd(f.key), f.ctl.Local(), f.ctl.Remote(f.key)
		b.Cwnd, b.Local, b.Remote = f.cur.Cwnd, f.cur.Local, f.cur.Remote
	}
	if fr.exp.KeepSamples {
		fr.samples = append(fr.samples, FlowSample{T: s.now - s.t0, Flow: f.idx, Status: c.Status, IssueNs: issue, TotalNs: total,
			Cwnd: f.cur.Cwnd, Local: f.cur.Local, Remote: f.cur.Remote, Inflight: f.out})
	}
}

// close closes the portal at the end (every op has completed).
func (fp *flowPortal) close() {
	s := fp.fr.s
	if fp.closed {
		return
	}
	if fp.f != nil && fp.f.out != 0 {
		s.fail("flow %d: %d ops outstanding at the end", fp.f.idx, fp.f.out)
		return
	}
	if err := fp.n.core.ClosePortal(fp.id); err != nil {
		s.fail("node %d: ClosePortal(flow portal %d): %v", fp.n.id, fp.id, err)
		return
	}
	fp.closed = true
	if i := firstNotPoison(fp.sink); i >= 0 {
		s.fail("node %d: flow portal %d: sink byte %d written after every op completed", fp.n.id, fp.id, i)
	}
}

func (fr *flowRun) result() *FlowResult {
	out := &FlowResult{Exp: fr.exp, Samples: fr.samples}
	for _, f := range fr.flows {
		st := f.st
		// Carry the windows through buckets without a completion; trim
		// the tail after the last event.
		last := 0
		var cw FlowBucket
		for i := range st.Buckets {
			b := &st.Buckets[i]
			if b.OK+b.NACK+b.Timeout+b.DT+b.Posted > 0 {
				last = i
			}
			if b.Cwnd == 0 && b.Local == 0 && b.Remote == 0 {
				b.Cwnd, b.Local, b.Remote = cw.Cwnd, cw.Local, cw.Remote
			} else {
				cw = *b
			}
		}
		st.Buckets = st.Buckets[:last+1]
		out.Flows = append(out.Flows, st)
	}
	return out
}

// ---- measures ---------------------------------------------------------------

// GoodputBps is flow i's goodput over [from, to) (virtual ns from the
// start): bytes of the OK ops that completed then.
func (r *FlowResult) GoodputBps(i int, from, to int64) float64 {
	if to <= from {
		return 0
	}
	f := &r.Flows[i]
	lo, _ := slices.BinarySearch(f.OKTimes, from)
	hi, _ := slices.BinarySearch(f.OKTimes, to)
	return float64(hi-lo) * float64(f.Spec.OpBytes) * 8 * 1e9 / float64(to-from)
}

// TotalGoodputBps is the sum of every flow's goodput over [from, to).
func (r *FlowResult) TotalGoodputBps(from, to int64) float64 {
	var g float64
	for i := range r.Flows {
		g += r.GoodputBps(i, from, to)
	}
	return g
}

// SettledAt is the earliest window start u0 >= from (virtual ns; windows
// [u, u+win) on a grid of step ns, ending by end) such that ok holds for
// the goodputs of flows over every window from u0 on to the end of the
// run; -1 if it does not hold for the last window.
func (r *FlowResult) SettledAt(flows []int, from, end, win, step int64, ok func(g []float64) bool) int64 {
	good := int64(-1) // first window of the current run of windows where ok holds
	g := make([]float64, len(flows))
	for u := from; u+win <= end; u += step {
		for k, i := range flows {
			g[k] = r.GoodputBps(i, u, u+win)
		}
		switch {
		case !ok(g):
			good = -1
		case good < 0:
			good = u
		}
	}
	return good
}

// Statuses sums every flow's completions by status.
func (r *FlowResult) Statuses() [abi.NumStatus]uint64 {
	var by [abi.NumStatus]uint64
	for _, f := range r.Flows {
		for i, v := range f.ByStatus {
			by[i] += v
		}
	}
	return by
}

// MinOKDelayNs is the smallest total_delay of an OK completion (samples
// needed): the idle RTT an op sees.
func (r *FlowResult) MinOKDelayNs() int64 {
	m := int64(math.MaxInt64)
	for _, s := range r.Samples {
		if s.Status == abi.StatusOK && s.TotalNs < m {
			m = s.TotalNs
		}
	}
	return m
}
