package sim

import (
	"math"
	"slices"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// The paper's congestion experiments (§7.4 Fig. 15, §7.5 Fig. 16) as flow
// experiments. The setting resembles the paper's (§6.1, §7.5):
//
//   - 100 Gbit/s links to one switch; 1075 ns of propagation per hop, so a
//     4 KB READ's idle RTT (request out, the 4 KB response back, both
//     serialised on two links, plus the engines' CPU time) is ~5 µs. One
//     4 KB response is one frame (MTU 9000): 4202 bytes + 20 of preamble
//     and gap on the wire, so a link carries at most 97.0 Gbit/s of READ
//     payload (PayloadCapacityBps).
//   - Solicitation window 64 KB (16 ops: the bandwidth-delay product),
//     DISPATCH_TIMEOUT 10 µs (2 RTTs), TIMEOUT 20 µs (4 RTTs).
//   - Engines cost 20 ns per poll and 30 ns per frame received or sent: a
//     core handles ~10 M frames/s, so the engines are not the bottleneck
//     (but for Fig. 16d's server, whose serving cost is its point).
//   - Switch queues of 1 MB per port; rx rings of 4096 frames.
//   - CC (Fig. 15): cc.DefaultParams (AI 0.25, β 0.8, MD 0.5, Cut 10,
//     CwndMax 256) with the RTT estimate set to 5 µs, the issue_delay
//     target to half an RTT (2.5 µs), the remote_delay target to two idle
//     RTTs (10 µs), and every window starting at 16 ops (the BDP: a
//     line-rate start, cc's default) or at 1 op (the ablation).

// Fabric constants of the experiments.
const (
	PaperLinkBps         = 100e9
	PaperHopNs           = 1075
	PaperMTU             = 9000
	PaperWindowBytes     = 64 << 10
	PaperDispatchTimeout = 10 * time.Microsecond
	PaperTimeout         = 20 * time.Microsecond
)

// Durations of the CC experiments (virtual ns): the ramp runs 120 RTTs;
// the second flow joins at 400 µs (as in the paper's Fig. 15b) of a
// 3 ms run; the combined ablation runs 20 ms (~4000 RTTs), long enough
// to settle.
const (
	Fig15RampNs     = 600_000
	Fig15JoinAtNs   = 400_000
	Fig15JoinNs     = 3_000_000
	Fig15CombinedNs = 20_000_000
)

// PaperCC is the controller of the Fig. 15 experiments: cc.DefaultParams
// with the fabric's RTT and targets, every window starting at cwndInit
// ops.
func PaperCC(cwndInit float64) cc.Params {
	p := cc.DefaultParams()
	p.RTT = 5_000
	p.LocalTarget = 2_500
	p.RemoteTarget = 10_000
	p.CwndInit = cwndInit
	return p
}

// PayloadCapacityBps is the READ payload a link of linkBps carries when
// every op reads opBytes at the given MTU: each response frame carries
// Ethernet, IPv4, UDP and OneRMA headers and the GCM tag, and 20 bytes of
// preamble and inter-frame gap (as the simulator serialises them).
func PayloadCapacityBps(linkBps float64, mtu, opBytes int) float64 {
	per := wire.MaxPayload(mtu)
	wireBytes := 0
	for left := opBytes; left > 0; left -= per {
		p := min(left, per)
		wireBytes += wire.EthLen + wire.IPv4Len + wire.UDPLen + wire.HeaderLen + p + wire.TrailerLen + 20
	}
	return linkBps * float64(opBytes) / float64(wireBytes)
}

// paperExperiment is the common setting.
func paperExperiment(name string, nodes int, dur int64) FlowExperiment {
	e := engine.DefaultConfig()
	e.WindowBytes = PaperWindowBytes
	e.DispatchTimeout = PaperDispatchTimeout
	e.Timeout = PaperTimeout
	e.InboundQueue = 1024
	e.NackThreshold = 1024 // no NACK unless an experiment wants them
	e.ServeBudget = 16
	e.KeyCache = 64
	e.Unbound() // one tenant's experiments: the paper's serving side, unbounded per owner and sender
	return FlowExperiment{
		Name:   name,
		Seed:   1,
		Nodes:  nodes,
		MTU:    PaperMTU,
		Engine: e,
		Net: NetConfig{
			LatencyNs:      PaperHopNs,
			BitsPerSec:     int64(PaperLinkBps),
			UpQueueBytes:   1 << 20,
			DownQueueBytes: 1 << 20,
			RxQueueFrames:  4096,
		},
		Cost:       CostConfig{PollNs: 20, RxFrameNs: 30, TxFrameNs: 30},
		CC:         PaperCC(1),
		DurationNs: dur,
	}
}

// Fig15Ramp (Fig. 15a): one client reads 4 MB objects from one server,
// driven by CC from an idle start (every window at CwndInit).
func Fig15Ramp(p cc.Params, dur int64) FlowExperiment {
	x := paperExperiment("fig15a-ramp", 2, dur)
	x.CC = p
	x.KeepSamples = true
	x.Flows = []FlowSpec{{Name: "flow", Client: 0, Server: 1, CC: true}}
	return x
}

// Fig15Join (Fig. 15b-d): a client reads from server 1; at joinNs it
// starts reading from server 2 as well: both flows share the client's
// downlink and solicitation window (local congestion). p.Combined: the
// Fig. 15c ablation (one window per server driven by total_delay).
func Fig15Join(p cc.Params, joinNs, dur int64) FlowExperiment {
	name := "fig15b-join"
	if p.Combined {
		name = "fig15c-join-combined"
	}
	x := paperExperiment(name, 3, dur)
	x.CC = p
	x.KeepSamples = true
	x.Flows = []FlowSpec{
		{Name: "flow 1 (server 1)", Client: 0, Server: 1, CC: true},
		{Name: "flow 2 (server 2)", Client: 0, Server: 2, CC: true, StartNs: joinNs},
	}
	return x
}

// Fig16Jitter (Fig. 16a, b): CC disabled; one client issues READs at a
// static 100 Gbit/s from one server, with a solicitation window of
// windowBytes, on a fabric that delays every frame by a uniform
// [0, jitterNs) on its last hop (an op's RTT grows by up to 2·jitter,
// by jitter on average).
func Fig16Jitter(windowBytes int, jitterNs, dur int64) FlowExperiment {
	x := paperExperiment("fig16a-jitter", 2, dur)
	x.Engine.WindowBytes = windowBytes
	x.Net.JitterNs = jitterNs
	x.Flows = []FlowSpec{{Name: "flow", Client: 0, Server: 1, RateBps: PaperLinkBps, Slots: 256}}
	return x
}

// fig16dServerCost is the CPU cost of Fig. 16d's server: 5 ns per poll
// and per frame received or sent, and 80 ps per byte sent, so a 4 KB
// READ costs ~350 ns to serve (~2.85 M READs/s, ~93 Gbit/s of payload:
// a little below its 100 Gbit/s link, so its inbound queue, not its
// link, is where the excess demand waits) and a NACK ~20 ns.
var fig16dServerCost = CostConfig{PollNs: 5, RxFrameNs: 5, TxFrameNs: 5, TxBytePs: 80}

// Fig16dServeCapacityBps is the READ payload Fig. 16d's server can serve
// when it does nothing else (its CPU per 4 KB READ: a poll, the request
// received, the response sent).
func Fig16dServeCapacityBps() float64 {
	c := fig16dServerCost
	resp := wire.EthLen + wire.IPv4Len + wire.UDPLen + wire.HeaderLen + abi.MaxOpBytes + wire.TrailerLen
	ns := float64(c.PollNs+c.RxFrameNs+c.TxFrameNs) + float64(resp*int(c.TxBytePs))/1000
	return 1e9 / ns * abi.MaxOpBytes * 8
}

// Fig16dClientWindow is each client's solicitation window in Fig. 16d:
// 256 KB (64 ops, four BDPs), so that two greedy clients can keep more
// requests queued at the server than it serves within a TIMEOUT.
const Fig16dClientWindow = 256 << 10

// Fig16Nack (Fig. 16d): CC disabled; two clients each issue READs at a
// static 100 Gbit/s from one server, which serves at most
// ~86 Gbit/s (its CPU: fig16dServerCost); the server NACKs a request
// that finds threshold requests queued. Clients re-read failed chunks.
func Fig16Nack(threshold int, dur int64) FlowExperiment {
	x := paperExperiment("fig16d-nack", 3, dur)
	x.Engine.WindowBytes = Fig16dClientWindow
	x.Engine.InboundQueue = 4096
	x.Engine.NackThreshold = threshold
	x.Engine.ServeBudget = 1 // serve one request per poll: the queue, not the rx ring, holds the backlog
	x.NodeCost = map[int]CostConfig{0: fig16dServerCost}
	x.Flows = []FlowSpec{
		{Name: "client 1", Client: 1, Server: 0, RateBps: PaperLinkBps, Slots: 256},
		{Name: "client 2", Client: 2, Server: 0, RateBps: PaperLinkBps, Slots: 256},
	}
	return x
}

// ---- analyses ---------------------------------------------------------------

// ConvergeWindowRTTs: goodput is computed over windows of this many idle
// RTTs (a flow at a fair share of 48.5 Gbit/s completes ~74 ops in one:
// one op more or less is 1.4%), each window's rate taken at its middle;
// windows start every 100 ns.
const ConvergeWindowRTTs = 10

// settleRTTs is SettledAt on centered windows: the time (ns after from)
// from which on every window's rates satisfy ok, taking a window's rate
// at its middle (never before from), in ns and in RTTs; -1, -1: the last
// window does not satisfy it.
func settle(r *FlowResult, flows []int, from int64, rtt int64, ok func(g []float64) bool) (int64, float64) {
	win := ConvergeWindowRTTs * rtt
	u := r.SettledAt(flows, from, r.Exp.DurationNs, win, 100, ok)
	if u < 0 {
		return -1, -1
	}
	d := max(u+win/2-from, 0)
	return d, float64(d) / float64(rtt)
}

// within: every rate within ±tol of want.
func within(want, tol float64) func(g []float64) bool {
	return func(g []float64) bool {
		for _, v := range g {
			if v < (1-tol)*want || v > (1+tol)*want {
				return false
			}
		}
		return true
	}
}

// equalShares: every rate within ±tol of the rates' mean (and the mean
// above zero).
func equalShares(tol float64) func(g []float64) bool {
	return func(g []float64) bool {
		var m float64
		for _, v := range g {
			m += v
		}
		m /= float64(len(g))
		return m > 0 && within(m, tol)(g)
	}
}

// RampStats is what Fig. 15a measures.
type RampStats struct {
	IdleRTTNs   int64   // smallest total_delay of an OK op
	CapacityBps float64 // the link's READ payload capacity
	// ConvergeNs: from the start until the goodput stays within ±10% of
	// the capacity (-1: it does not by the end of the run).
	ConvergeNs   int64
	ConvergeRTTs float64
	SteadyBps    float64 // goodput over the second half of the run
	NonOK        uint64  // completions not OK
	MaxCwnd      float64
}

// AnalyzeRamp measures Fig. 15a's claims.
func AnalyzeRamp(r *FlowResult) RampStats {
	x := &r.Exp
	st := RampStats{IdleRTTNs: r.MinOKDelayNs(), CapacityBps: PayloadCapacityBps(float64(x.Net.BitsPerSec), x.MTU, x.Flows[0].OpBytes)}
	by := r.Statuses()
	for i, v := range by {
		if abi.Status(i) != abi.StatusOK {
			st.NonOK += v
		}
	}
	st.ConvergeNs, st.ConvergeRTTs = settle(r, []int{0}, x.Flows[0].StartNs, st.IdleRTTNs, within(st.CapacityBps, 0.1))
	st.SteadyBps = r.GoodputBps(0, x.DurationNs/2, x.DurationNs)
	for _, s := range r.Samples {
		st.MaxCwnd = max(st.MaxCwnd, s.Cwnd)
	}
	return st
}

// JoinStats is what Fig. 15b/c measure.
type JoinStats struct {
	IdleRTTNs int64
	FairBps   float64 // half the link's READ payload capacity
	// ConvergeNs: from the join until both flows' goodputs stay within
	// ±10% of FairBps (-1: they do not by the end of the run).
	ConvergeNs   int64
	ConvergeRTTs float64
	// EqualNs: from the join until both flows' goodputs stay within ±10%
	// of their mean (equal shares, whatever their sum).
	EqualNs   int64
	EqualRTTs float64
	// Goodput of each flow over the last quarter of the run.
	EndBps   [2]float64
	ByStatus [abi.NumStatus]uint64
	// Fig. 15d: the largest issue_delay of an OK op after the join, and
	// the mean over the 10 RTTs before it.
	PeakIssueNs, PreIssueNs int64
}

// AnalyzeJoin measures Fig. 15b/c's claims.
func AnalyzeJoin(r *FlowResult) JoinStats {
	x := &r.Exp
	join, end := x.Flows[1].StartNs, x.DurationNs
	st := JoinStats{IdleRTTNs: r.MinOKDelayNs(), ByStatus: r.Statuses()}
	st.FairBps = PayloadCapacityBps(float64(x.Net.BitsPerSec), x.MTU, x.Flows[0].OpBytes) / 2
	st.ConvergeNs, st.ConvergeRTTs = settle(r, []int{0, 1}, join, st.IdleRTTNs, within(st.FairBps, 0.1))
	st.EqualNs, st.EqualRTTs = settle(r, []int{0, 1}, join, st.IdleRTTNs, equalShares(0.1))
	for i := range 2 {
		st.EndBps[i] = r.GoodputBps(i, end-end/4, end)
	}
	var preSum, preN int64
	for _, s := range r.Samples {
		if s.Status != abi.StatusOK {
			continue
		}
		if s.T >= join {
			st.PeakIssueNs = max(st.PeakIssueNs, s.IssueNs)
		} else if s.T >= join-10*st.IdleRTTNs {
			preSum += s.IssueNs
			preN++
		}
	}
	if preN > 0 {
		st.PreIssueNs = preSum / preN
	}
	return st
}

// ShedStats is what Fig. 16a/b/d measure over the steady part of a run.
type ShedStats struct {
	GoodputBps float64 // every flow's, over [warm, end)
	Posted     uint64
	ByStatus   [abi.NumStatus]uint64
	// Rates per op posted.
	DTRate, TimeoutRate, NackRate float64
	// ChunkLatP50Ns: median time from a chunk's first post to its OK
	// (retries after failures included).
	ChunkLatP50Ns int64
}

// AnalyzeShed measures goodput and outcomes after warmNs.
func AnalyzeShed(r *FlowResult, warmNs int64) ShedStats {
	st := ShedStats{GoodputBps: r.TotalGoodputBps(warmNs, r.Exp.DurationNs), ByStatus: r.Statuses()}
	var lat []int64
	for _, f := range r.Flows {
		st.Posted += f.Posted
		lat = append(lat, f.ChunkLatNs...)
	}
	if st.Posted > 0 {
		p := float64(st.Posted)
		st.DTRate = float64(st.ByStatus[abi.StatusDispatchTimeout]) / p
		st.TimeoutRate = float64(st.ByStatus[abi.StatusTimeout]) / p
		st.NackRate = float64(st.ByStatus[abi.StatusNack]) / p
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		st.ChunkLatP50Ns = lat[len(lat)/2]
	}
	return st
}

// Gbps formats bits/s as Gbit/s.
func Gbps(bps float64) float64 { return math.Round(bps/1e7) / 100 }
