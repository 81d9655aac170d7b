package sim

import (
	"math"
	"slices"

	"github.com/onerma/onerma/abi"
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
	// Silent are nodes whose link is down the whole run: a flow reading
	// from one gets no answer, ever (its ops end TIMEOUT or
	// DISPATCH_TIMEOUT).
	Silent []int
	// Shares, if set, checks the window's shares between the tenants of
	// three flows of one client node at every step (shares.go).
	Shares *ShareCheck
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
	// Tenant and Weight are the flow portal's (engine.PortalSpec: the
	// engine-local tenant index, its weight in the window's shares; 0:
	// tenant 0, weight 1); High opens it in the high class.
	Tenant, Weight int
	High           bool
	// ServerTenant is the tenant of the server's portal that registers
	// the object the flow reads (its region's owner at the server; 0:
	// tenant 0). A server node has one object per ServerTenant.
	ServerTenant int
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
