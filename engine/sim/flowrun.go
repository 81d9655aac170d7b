package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/engine"
)

// A flow experiment's state inside a Sim: its flows, servers and portals,
// the Config it runs on, their setup, and the result.

// flowRun is an experiment's state inside a Sim.
type flowRun struct {
	exp         FlowExperiment
	s           *Sim
	shares      *shareRun // FlowExperiment.Shares's checks (nil: none)
	flows       []*flowState
	servers     map[srvKey]*flowServer
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
	issuedAt int64 // its request was sent (0: not yet; seen only with FlowExperiment.Shares)
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
		case f.Tenant < 0 || f.Weight < 0 || f.ServerTenant < 0:
			return Config{}, fmt.Errorf("sim: flow %d: tenant %d weight %d server tenant %d", i, f.Tenant, f.Weight, f.ServerTenant)
		}
	}
	for _, n := range x.Silent {
		if n < 0 || n >= x.Nodes {
			return Config{}, fmt.Errorf("sim: silent node %d", n)
		}
	}
	if x.Shares != nil {
		if err := x.Shares.validate(x); err != nil {
			return Config{}, err
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
	fr.servers = make(map[srvKey]*flowServer)
	fr.ctl = make(map[int]*cc.Controller)
	fr.inflight = make(map[ccKey]int)
	for _, n := range x.Silent {
		s.nodes[n].linkDown++ // for good: it never answers
	}
	for i, spec := range x.Flows {
		sk := srvKey{spec.Server, spec.ServerTenant}
		srv := fr.servers[sk]
		if srv == nil {
			var err error
			if srv, err = fr.newServer(s.nodes[spec.Server], spec.ObjectBytes, spec.ServerTenant); err != nil {
				return err
			}
			fr.servers[sk] = srv
		} else if len(srv.obj) < spec.ObjectBytes {
			return fmt.Errorf("sim: flow %d: node %d serves one object to every flow of its server tenant: size it for the largest", i, spec.Server)
		}
		f := &flowState{fr: fr, idx: i, spec: spec, srv: srv, start: s.t0 + spec.StartNs, stop: s.t0 + spec.StopNs}
		f.st.Spec = spec
		cn := s.nodes[spec.Client]
		fp, err := fr.openPortal(cn, f, spec.Slots, uint32(5000+i), 0)
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
	if x.Shares != nil {
		fr.shares = newShareRun(fr)
	}
	return nil
}

// srvKey names a flow server: its node, and the tenant of its portal (the
// owner of its object).
type srvKey struct{ node, tenant int }

func (fr *flowRun) newServer(n *node, size, tenant int) (*flowServer, error) {
	fp, err := fr.openPortal(n, nil, 0, uint32(6000+n.id), tenant)
	if err != nil {
		return nil, err
	}
	obj := alignedBytes(size)
	pat := uint64(0xf10<<8 | n.id | tenant<<24)
	fillPattern(obj, pat)
	kr := fr.s.newKey()
	id, err := n.cores[0].core.RegisterRegion(fp.id, obj, abi.PermRemoteRead, kr)
	if err != nil {
		return nil, fmt.Errorf("sim: node %d: registering a %d-byte object: %w", n.id, size, err)
	}
	n.afterCall("RegisterRegion")
	return &flowServer{fp: fp, obj: obj, pattern: pat, id: id, d: aesni.NewDeriver(kr)}, nil
}

// openPortal opens a portal on n as the portal library would, with slots
// and a sink of one OpBytes area per slot (f != nil: a flow's, of its
// tenant; else a server's, of tenant).
func (fr *flowRun) openPortal(n *node, f *flowState, slots int, pid uint32, tenant int) (*flowPortal, error) {
	cmdCap := nextPow2(uint32(max(slots, 2)))
	lay, err := abi.NewLayout(0, cmdCap, nextPow2(uint32(slots)+cmdCap))
	if err != nil {
		return nil, err
	}
	fp := &flowPortal{fr: fr, n: n, f: f, pid: pid, seg: alignedBytes(int(lay.Size)), slotIx: make(map[abi.SlotID]int)}
	spec := engine.PortalSpec{
		CmdRing: lay.CmdRing(fp.seg), CmdCap: lay.CmdCap,
		CplRing: lay.CplRing(fp.seg), CplCap: lay.CplCap,
		MaxSlots: slots, PID: pid, Tenant: tenant,
	}
	if f != nil {
		spec.Tenant, spec.Weight = f.spec.Tenant, f.spec.Weight
		if f.spec.High {
			spec.Class = abi.ClassHigh
		}
	}
	id, err := n.cores[0].core.OpenPortal(spec)
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
		if fp.slots, err = n.cores[0].core.AllocSlots(id, slots); err != nil {
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
		if fp.sinkID, err = n.cores[0].core.RegisterRegion(id, fp.sink, abi.PermLocalWrite, fr.s.newKey()); err != nil {
			return nil, fmt.Errorf("sim: node %d: registering a sink: %w", n.id, err)
		}
	}
	n.app.flows = append(n.app.flows, fp)
	n.afterCall("OpenPortal")
	return fp, nil
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
