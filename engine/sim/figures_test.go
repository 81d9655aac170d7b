package sim

import (
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/engine"
)

// The paper's congestion experiments (§7.4, §7.5) with assertions on their
// claims, at the sizes lab/rmafigures plots them (the CC experiments)
// or with fewer points (the sweeps). Where this implementation does not
// reach the paper's number the test asserts what it measures, with the
// reason; figures/RESULTS.md has the numbers next to the paper's.

func runFlows(t *testing.T, x FlowExperiment) *FlowResult {
	t.Helper()
	r, err := RunFlows(x)
	if err != nil {
		t.Fatalf("%s: %v", x.Name, err)
	}
	return r
}

// The harness itself: a closed-loop flow (fixed outstanding ops) reads its
// object exactly, every op OK, runs repeat exactly, and the data check
// catches an object changed behind the engine's back.
func TestFlowHarness(t *testing.T) {
	x := paperExperiment("harness", 2, 200_000)
	x.Flows = []FlowSpec{{Client: 0, Server: 1, MaxOutstanding: 8, Slots: 16, ObjectBytes: 64 << 10}}
	a, b := runFlows(t, x), runFlows(t, x)
	if a.Sim.Digest != b.Sim.Digest {
		t.Fatalf("two runs of one experiment differ: digest %#x vs %#x", a.Sim.Digest, b.Sim.Digest)
	}
	f := a.Flows[0]
	if f.Posted == 0 || f.ByStatus[abi.StatusOK] != f.Posted || f.OKBytes != f.Posted*abi.MaxOpBytes {
		t.Fatalf("posted %d, completions %s, OK bytes %d", f.Posted, statusSummary(&f.ByStatus), f.OKBytes)
	}
	// 8 ops per ~5 µs RTT: ~52 Gbit/s, window-limited, well below the link.
	if g := a.GoodputBps(0, 20_000, x.DurationNs); g < 45e9 || g > 60e9 {
		t.Fatalf("8 outstanding 4 KB ops per ~5 µs: goodput %.1f Gbit/s", g/1e9)
	}
	if rtt := AnalyzeShed(a, 0).ChunkLatP50Ns; rtt < 4500 || rtt > 6500 {
		t.Fatalf("median op latency %d ns, want the ~5 µs idle RTT", rtt)
	}

	fr := &flowRun{exp: x}
	cfg, err := fr.config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.scripts = []scriptStep{{at: 100_000, do: func(s *Sim) { fr.servers[srvKey{1, 0}].obj[12345] ^= 0x40 }}}
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "wrong data") {
		t.Fatalf("an object byte changed behind the engine's back: want the data check to fire, got %v", err)
	}
}

// Fig. 15a: idle to link rate. Paper: ~8 RTTs to 100 Gbit/s (CWND 15),
// no non-OK outcome.
func TestFig15aRamp(t *testing.T) {
	t.Parallel()
	// cc.DefaultParams start every window at 1 op. Algorithm 1 adds AI =
	// 0.25 op per RTT, so reaching 90% of the link (~13.3 of the ~14.8
	// ops of the BDP) takes at least (13.3-1)/0.25 ≈ 49 RTTs: the paper's
	// ~8 RTTs is out of reach from that start: about 61 RTTs
	// (figures/RESULTS.md).
	r := runFlows(t, Fig15Ramp(PaperCC(1), Fig15RampNs))
	st := AnalyzeRamp(r)
	t.Logf("CwndInit 1: within ±10%% of %.1f Gbit/s after %.1f RTTs (RTT %d ns), steady %.1f Gbit/s, max cwnd %.1f, non-OK %d",
		st.CapacityBps/1e9, st.ConvergeRTTs, st.IdleRTTNs, st.SteadyBps/1e9, st.MaxCwnd, st.NonOK)
	if st.IdleRTTNs < 4500 || st.IdleRTTNs > 5500 {
		t.Errorf("idle RTT %d ns, the setting wants ~5 µs", st.IdleRTTNs)
	}
	if st.NonOK != 0 {
		t.Errorf("%d non-OK outcomes: %s", st.NonOK, statusSummary(ptr(r.Statuses())))
	}
	if st.ConvergeRTTs < 45 || st.ConvergeRTTs > 70 {
		t.Errorf("CwndInit 1: converged after %.1f RTTs, measured 61 (AI-bound: >= 49)", st.ConvergeRTTs)
	}
	if st.SteadyBps < 0.95*st.CapacityBps {
		t.Errorf("steady goodput %.1f Gbit/s, below 95%% of %.1f", st.SteadyBps/1e9, st.CapacityBps/1e9)
	}

	// Starting at the BDP (16 ops), the claim holds: at link rate within
	// 10 RTTs (the measure's floor is 5: half a 10-RTT window), no non-OK.
	r = runFlows(t, Fig15Ramp(PaperCC(16), Fig15RampNs))
	st = AnalyzeRamp(r)
	t.Logf("CwndInit 16: within ±10%% after %.1f RTTs, steady %.1f Gbit/s, non-OK %d", st.ConvergeRTTs, st.SteadyBps/1e9, st.NonOK)
	if st.NonOK != 0 || st.ConvergeRTTs < 0 || st.ConvergeRTTs > 10 || st.SteadyBps < 0.95*st.CapacityBps {
		t.Errorf("CwndInit 16: converged after %.1f RTTs (want <= 10), steady %.1f Gbit/s, non-OK %d",
			st.ConvergeRTTs, st.SteadyBps/1e9, st.NonOK)
	}
}

// Fig. 15b/d: a second flow joins at the client. Paper: both at fair
// share within ~5 RTTs, after a sharp rise of issue_delay.
func TestFig15bJoin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		p         cc.Params
		maxFair   float64 // RTTs from the join to fair share ±10% (measured + margin)
		maxEqual  float64 // RTTs to equal shares ±10%
		minIssueX float64 // peak issue_delay after the join / mean before
	}{
		// Flow 2's remote window starts at 1 op and grows by AI per RTT:
		// about 77 RTTs to fair share (figures/RESULTS.md; the claim's 10 is
		// not met).
		{"CwndInit 1", PaperCC(1), 85, 85, 5},
		// Flow 2 starts at the BDP (cc.DefaultParams); the shared local
		// window is cut once (a window decreases only for ops posted after
		// its last decrease): fair and equal shares after ~6 RTTs.
		{"CwndInit 16", PaperCC(16), 10, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runFlows(t, Fig15Join(tc.p, Fig15JoinAtNs, Fig15JoinNs))
			st := AnalyzeJoin(r)
			t.Logf("fair share %.1f Gbit/s ±10%% after %.1f RTTs, equal shares after %.1f RTTs; end %.1f / %.1f Gbit/s; issue_delay %d ns before, peak %d ns after; %s",
				st.FairBps/1e9, st.ConvergeRTTs, st.EqualRTTs, st.EndBps[0]/1e9, st.EndBps[1]/1e9, st.PreIssueNs, st.PeakIssueNs, statusSummary(&st.ByStatus))
			if st.ConvergeRTTs < 0 || st.ConvergeRTTs > tc.maxFair {
				t.Errorf("fair share after %.1f RTTs, want <= %.0f", st.ConvergeRTTs, tc.maxFair)
			}
			if st.EqualRTTs < 0 || st.EqualRTTs > tc.maxEqual {
				t.Errorf("equal shares after %.1f RTTs, want <= %.0f", st.EqualRTTs, tc.maxEqual)
			}
			for i, g := range st.EndBps {
				if g < 0.9*st.FairBps || g > 1.1*st.FairBps {
					t.Errorf("flow %d ends at %.1f Gbit/s, fair share %.1f", i+1, g/1e9, st.FairBps/1e9)
				}
			}
			if float64(st.PeakIssueNs) < tc.minIssueX*float64(st.PreIssueNs) || st.PeakIssueNs < 2000 {
				t.Errorf("Fig. 15d: issue_delay %d ns before the join, peak %d ns after: want a sharp rise", st.PreIssueNs, st.PeakIssueNs)
			}
			if ok := st.ByStatus[abi.StatusOK]; ok == 0 || ok != sum(&st.ByStatus) {
				t.Errorf("non-OK outcomes: %s", statusSummary(&st.ByStatus))
			}
		})
	}
}

// Fig. 15c: the same with local and remote congestion not separated (one
// window per server driven by total_delay). Paper: 20× slower.
func TestFig15cCombined(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		p         cc.Params
		minFactor float64 // combined / separated time to fair share (measured 13.0 and 161)
	}{
		{"CwndInit 1", PaperCC(1), 10},
		{"CwndInit 16", PaperCC(16), 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sep := AnalyzeJoin(runFlows(t, Fig15Join(tc.p, Fig15JoinAtNs, Fig15JoinNs)))
			p := tc.p
			p.Combined = true
			comb := AnalyzeJoin(runFlows(t, Fig15Join(p, Fig15JoinAtNs, Fig15CombinedNs)))
			t.Logf("separated: fair share after %.1f RTTs; combined: after %.1f RTTs (ends %.1f / %.1f Gbit/s): %.1fx slower",
				sep.ConvergeRTTs, comb.ConvergeRTTs, comb.EndBps[0]/1e9, comb.EndBps[1]/1e9, comb.ConvergeRTTs/sep.ConvergeRTTs)
			if sep.ConvergeRTTs <= 0 || comb.ConvergeRTTs < 0 {
				t.Fatalf("did not converge: separated %.1f, combined %.1f RTTs", sep.ConvergeRTTs, comb.ConvergeRTTs)
			}
			if f := comb.ConvergeRTTs / sep.ConvergeRTTs; f < tc.minFactor {
				t.Errorf("combined is %.1fx slower than separated, want >= %.0fx", f, tc.minFactor)
			}
			if ok := comb.ByStatus[abi.StatusOK]; ok != sum(&comb.ByStatus) {
				t.Errorf("non-OK outcomes: %s", statusSummary(&comb.ByStatus))
			}
		})
	}
}

// Fig. 16a/b: goodput vs jitter for windows below (48 KB), at (64 KB)
// and above (96 KB) the BDP, CC off, 100 Gbit/s offered. Paper: goodput
// drops with jitter; larger windows tolerate more; TIMEOUTs appear when
// latency becomes unpredictable.
func TestFig16aJitter(t *testing.T) {
	t.Parallel()
	windows := []int{48 << 10, 64 << 10, 96 << 10}
	jitters := []int64{0, 1000, 2000, 5000, 10_000}
	const dur, warm = 500_000, 50_000
	capBps := PayloadCapacityBps(PaperLinkBps, PaperMTU, abi.MaxOpBytes)
	g := make([][]ShedStats, len(windows))
	for i, w := range windows {
		for _, j := range jitters {
			st := AnalyzeShed(runFlows(t, Fig16Jitter(w, j, dur)), warm)
			g[i] = append(g[i], st)
			t.Logf("window %2d KB, jitter %5d ns: %.1f Gbit/s, DISPATCH_TIMEOUT %.3f, TIMEOUT %.3f of %d ops",
				w>>10, j, st.GoodputBps/1e9, st.DTRate, st.TimeoutRate, st.Posted)
		}
	}
	// No jitter: 64 and 96 KB carry the link; 48 KB (12 ops per ~5 µs
	// RTT: ~79 Gbit/s) cannot.
	if g[1][0].GoodputBps < 0.97*capBps || g[2][0].GoodputBps < 0.97*capBps {
		t.Errorf("no jitter: 64 KB %.1f, 96 KB %.1f Gbit/s, want the link's %.1f", g[1][0].GoodputBps/1e9, g[2][0].GoodputBps/1e9, capBps/1e9)
	}
	if v := g[0][0].GoodputBps; v < 0.75*capBps || v > 0.85*capBps {
		t.Errorf("no jitter: 48 KB %.1f Gbit/s, want ~12/14.8 of the link", v/1e9)
	}
	for i := range windows {
		for k := 1; k < len(jitters); k++ {
			if g[i][k].GoodputBps > 1.01*g[i][k-1].GoodputBps {
				t.Errorf("window %d KB: goodput rises with jitter: %.1f -> %.1f Gbit/s", windows[i]>>10, g[i][k-1].GoodputBps/1e9, g[i][k].GoodputBps/1e9)
			}
			if g[i][k].GoodputBps >= g[i][0].GoodputBps && g[i][0].GoodputBps < 0.97*capBps {
				t.Errorf("window %d KB: jitter %d ns did not cost goodput", windows[i]>>10, jitters[k])
			}
		}
	}
	for k := range jitters {
		if !(g[2][k].GoodputBps >= g[1][k].GoodputBps && g[1][k].GoodputBps > g[0][k].GoodputBps) {
			t.Errorf("jitter %d ns: goodput 48/64/96 KB %.1f/%.1f/%.1f Gbit/s: larger windows must tolerate more",
				jitters[k], g[0][k].GoodputBps/1e9, g[1][k].GoodputBps/1e9, g[2][k].GoodputBps/1e9)
		}
	}
	// 96 KB absorbs 2 µs of jitter at full rate.
	if v := g[2][2].GoodputBps; v < 0.97*capBps {
		t.Errorf("96 KB at 2 µs of jitter: %.1f Gbit/s", v/1e9)
	}
	// Fig. 16b: shedding is local (DISPATCH_TIMEOUT) while an op's RTT
	// (up to 5 µs + 2 jitters) stays below TIMEOUT (20 µs); beyond,
	// TIMEOUTs appear.
	for i := range windows {
		for k, j := range jitters {
			st := g[i][k]
			if 5000+2*j < int64(PaperTimeout) && st.TimeoutRate != 0 {
				t.Errorf("window %d KB, jitter %d ns: TIMEOUT rate %.3f with every RTT below TIMEOUT", windows[i]>>10, j, st.TimeoutRate)
			}
			if j > 0 && st.DTRate == 0 && st.GoodputBps < 0.97*capBps {
				t.Errorf("window %d KB, jitter %d ns: goodput lost but no DISPATCH_TIMEOUT (local shedding)", windows[i]>>10, j)
			}
		}
	}
	if g[1][4].TimeoutRate == 0 {
		t.Errorf("64 KB at 10 µs of jitter (RTT up to 25 µs > TIMEOUT 20 µs): no TIMEOUT")
	}
}

// Fig. 16d: goodput vs NACK threshold, two clients each demanding
// 100 Gbit/s of a server that serves ~87. Paper: a low threshold sheds
// the excess with no loss of goodput; too high a threshold lets the
// server's queue grow until goodput collapses.
func TestFig16dNack(t *testing.T) {
	t.Parallel()
	const dur, warm = 500_000, 50_000
	serve := Fig16dServeCapacityBps()
	formula := engine.NackThresholdFormula(PaperTimeout, 5000, PaperDispatchTimeout, serve/(abi.MaxOpBytes*8))
	t.Logf("server serves at most %.1f Gbit/s; §6.1's threshold formula: %.1f requests", serve/1e9, formula)
	var low []float64
	for _, th := range []int{1, 4, 8, 16, 32, 64, 256} {
		r := runFlows(t, Fig16Nack(th, dur))
		st := AnalyzeShed(r, warm)
		sv := r.Sim.Cores[0]
		t.Logf("threshold %3d: %.1f Gbit/s, NACK %.3f, TIMEOUT %.3f, median chunk latency %d ns; server served %d, NACKed %d, expired %d, deepest queue %d",
			th, st.GoodputBps/1e9, st.NackRate, st.TimeoutRate, st.ChunkLatP50Ns, sv.ReqServed, sv.ReqNacked, sv.ReqExpired, sv.ReqQueueMax)
		if sum(&st.ByStatus) == 0 {
			t.Fatalf("threshold %d: no completions", th)
		}
		switch {
		case th <= 32:
			// Timely NACKs: the excess is shed, the server's capacity is
			// delivered, nothing times out.
			if st.GoodputBps < 0.9*serve || st.NackRate < 0.4 || st.TimeoutRate != 0 {
				t.Errorf("threshold %d: goodput %.1f Gbit/s (server %.1f), NACK rate %.3f, TIMEOUT rate %.3f",
					th, st.GoodputBps/1e9, serve/1e9, st.NackRate, st.TimeoutRate)
			}
			low = append(low, st.GoodputBps)
		default:
			// A queue deeper than the server drains within TIMEOUT: every
			// response comes late, goodput collapses.
			if st.GoodputBps > 0.1*serve || st.TimeoutRate < 0.3 {
				t.Errorf("threshold %d: goodput %.1f Gbit/s, TIMEOUT rate %.3f: want a collapse", th, st.GoodputBps/1e9, st.TimeoutRate)
			}
		}
	}
	if lo, hi := minMax(low); hi > 1.02*lo {
		t.Errorf("goodput varies with low thresholds: %.1f..%.1f Gbit/s", lo/1e9, hi/1e9)
	}
	if formula < 1 || formula > 32 {
		t.Errorf("§6.1's threshold %.1f falls outside the thresholds measured to keep goodput", formula)
	}
}

func ptr[T any](v T) *T { return &v }

func sum(by *[abi.NumStatus]uint64) uint64 {
	var n uint64
	for _, v := range by {
		n += v
	}
	return n
}

func minMax(v []float64) (float64, float64) {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}
