package sim

import (
	"slices"
	"testing"

	"github.com/onerma/onerma/abi"
)

// Isolation by construction (engine/bulk.go, Config.PollBytes): a
// high-class 64 B READ beside a large low-class transfer, or beside a
// hostile tenant whose window share comes free in one lump, waits about
// one 4 KB READ's service at each engine, not for the whole lump.

// isoCost is the engines' cost in the isolation experiments: a 4 KB
// READ's three response frames cost its server about 2 µs, most of it
// per byte (the seal), as on a real engine.
var isoCost = CostConfig{PollNs: 100, RxFrameNs: 100, TxFrameNs: 100, TxBytePs: 400}

// isoService is one 4 KB READ's engine service time under isoCost: its
// request received and its three response frames sent at the server, the
// three received at the client.
func isoService() int64 {
	const frames = 3
	bytes := int64(abi.MaxOpBytes + frames*(14+20+8+48+16))
	return isoCost.RxFrameNs + frames*isoCost.TxFrameNs + (bytes*isoCost.TxBytePs+999)/1000 + frames*isoCost.RxFrameNs
}

// isoPollBytes is the bound the experiments compare with none: about
// two 4 KB READs (rmad's is one, 4096).
const isoPollBytes = 8192

// isoExperiment: client node 0 reads from server node 1 one high-class
// 64 B op at a time, back to back from 100 µs on (flow 0), beside the
// flows of bg; node 2 is there for a dead destination.
func isoExperiment(pollBytes int, bg []FlowSpec) FlowExperiment {
	return isoExperimentOf(pollBytes, true, 0, bg)
}

// isoExperimentOf is isoExperiment with the short op's class (high or
// low) and the tenant that owns the object it reads at the server.
func isoExperimentOf(pollBytes int, high bool, owner int, bg []FlowSpec) FlowExperiment {
	x := paperExperiment("isolation", 3, 2_000_000)
	x.Engine.WindowBytes = 64 * abi.MaxOpBytes
	x.Engine.ServeBudget = 64
	x.Engine.PollBytes = pollBytes
	x.Engine.Timeout = 400_000
	x.Engine.DispatchTimeout = 400_000
	x.Net.BitsPerSec = 0
	x.Net.LatencyNs = 1000
	x.Cost = isoCost
	x.KeepSamples = true
	x.Flows = append([]FlowSpec{{Name: "short", Client: 0, Server: 1, OpBytes: 64, Slots: 2, MaxOutstanding: 1,
		High: high, Tenant: 1, ServerTenant: owner, StartNs: 100_000}}, bg...)
	return x
}

// isoRun runs x and returns the total delays of its first flow's OK ops,
// in completion order, and the run.
func isoRun(t *testing.T, x FlowExperiment) ([]int64, *FlowResult) {
	t.Helper()
	r, err := RunFlows(x)
	if err != nil {
		t.Fatal(err)
	}
	var d []int64
	for _, s := range r.Samples {
		if s.Flow == 0 {
			if s.Status != abi.StatusOK {
				t.Fatalf("a short op ended %v", s.Status)
			}
			d = append(d, s.TotalNs)
		}
	}
	if len(d) < 10 {
		t.Fatalf("%d short ops completed", len(d))
	}
	return d, r
}

// isoWarmup is how many short ops the bound may take to come on: the
// first meets bulk work started before any priority work was seen.
const isoWarmup = 2

// checkIsolation runs the short flow alone and beside bg, without the
// bound and with it, and checks that with it every short op after the
// first isoWarmup takes at most its idle time plus two 4 KB READs'
// service, where without it the worst took more than ten; and that the
// flow bg names by bulk (an index into the experiment's flows) keeps at
// least 90 % of its goodput. (Beside the transfer, the bound makes the
// server take more steps, each charged PollNs, and the short flow
// completes some seventeen times as many ops, whose requests and answers
// the server pays for too: the transfer keeps about 93 % of the goodput it
// has when the short flow is all but stopped.)
func checkIsolation(t *testing.T, bg []FlowSpec, silent []int, bulk int) {
	checkIsolationOf(t, true, 0, bg, silent, bulk)
}

// checkIsolationOf is checkIsolation with the short op's class and the
// owner of the object it reads.
func checkIsolationOf(t *testing.T, high bool, owner int, bg []FlowSpec, silent []int, bulk int) {
	idle, _ := isoRun(t, isoExperimentOf(isoPollBytes, high, owner, nil))
	slices.Sort(idle)
	limit := idle[len(idle)-1] + 2*isoService()
	var worst [2]int64
	var goodput [2]float64
	for k, pb := range []int{0, isoPollBytes} {
		x := isoExperimentOf(pb, high, owner, bg)
		x.Silent = silent
		d, r := isoRun(t, x)
		worst[k] = slices.Max(d[isoWarmup:])
		goodput[k] = r.GoodputBps(bulk, 200_000, x.DurationNs)
		s := slices.Sorted(slices.Values(d[isoWarmup:]))
		t.Logf("PollBytes %d: short ops p50 %d ns, p99 %d ns, max %d ns (after %d: max %d ns; idle max %d ns, one 4 KB READ's service %d ns); bulk goodput %.2f Gb/s",
			pb, s[len(s)/2], s[len(s)*99/100], slices.Max(d), isoWarmup, worst[k], idle[len(idle)-1], isoService(), goodput[k]/1e9)
	}
	if worst[1] > limit {
		t.Errorf("with PollBytes %d a short op took %d ns, above idle %d ns + 2 × %d ns", isoPollBytes, worst[1], idle[len(idle)-1], isoService())
	}
	if worst[0] <= idle[len(idle)-1]+10*isoService() {
		t.Errorf("without the bound the worst short op took %d ns: the experiment no longer makes a lump", worst[0])
	}
	if goodput[1] < 0.9*goodput[0] {
		t.Errorf("bulk goodput %.3f Gb/s with the bound, %.3f without", goodput[1]/1e9, goodput[0]/1e9)
	}
}

// A high-class 64 B READ beside a low-class transfer that keeps the
// whole window of 4 KB READs in flight.
func TestIsolationBesideTransfer(t *testing.T) {
	checkIsolation(t, []FlowSpec{{Name: "bulk", Client: 0, Server: 1, OpBytes: abi.MaxOpBytes, Slots: 68}}, nil, 1)
}

// A high-class 64 B READ beside a hostile tenant that keeps its share of
// the window in flight toward a dead destination, which times out all at
// once, and reads 4 KB from the live server with the rest: each TIMEOUT
// frees a lump of window the next Poll would grant at once.
func TestIsolationBesideHostileLump(t *testing.T) {
	checkIsolation(t, []FlowSpec{
		{Name: "dead", Client: 0, Server: 2, OpBytes: abi.MaxOpBytes, Slots: 68, Tenant: 2},
		{Name: "bulk", Client: 0, Server: 1, OpBytes: abi.MaxOpBytes, Slots: 68, Tenant: 2},
	}, []int{2}, 2)
}

// A low-class 64 B READ of an object of its own tenant at the server
// (as the noisy-neighbour setup's victim reads) beside a low-class
// transfer of another tenant's: the server's turns by owner put it first,
// and the bound keeps each Poll short.
func TestIsolationLowClassOwnObject(t *testing.T) {
	checkIsolationOf(t, false, 1, []FlowSpec{{Name: "bulk", Client: 0, Server: 1, OpBytes: abi.MaxOpBytes, Slots: 68, Tenant: 2}}, nil, 1)
}

// TestPollBytesSeeds runs every scenario with the bound on bulk work
// (engine.Config.PollBytes, rmad's default with LowAfterHigh; the
// scenarios' engines run without it), of a size drawn per seed from one
// byte (every stage starts one bulk op per Poll while priority work is in
// progress) to 64 KB, and checks every invariant as TestSimSeeds does:
// work held back for the next Poll is never lost or starved into
// TIMEOUTs in the clean scenarios, and every op still gets exactly one
// completion. -sim.seeds and -sim.seed apply.
func TestPollBytesSeeds(t *testing.T) {
	for _, sc := range Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			bounded := func(seed uint64) Config {
				c := sc.Make(seed)
				c.Engine.PollBytes = []int{1, 4096, isoPollBytes, 64 << 10}[seed%4]
				c.Engine.LowAfterHigh = int(seed/4%2) * 4
				return c
			}
			if _, seed, err := runSeeds(seedsFor(t), bounded); err != nil {
				t.Fatalf("%v\nreproduce with: go test ./engine/sim -run 'TestPollBytesSeeds/%s$' -sim.seed=%d", err, sc.Name, seed)
			}
		})
	}
}
