package main

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/sim"
)

// writeResults writes RESULTS.md (figures/RESULTS.md): every number of
// this run, next to the paper's.
func writeResults(path string, r *results) error {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	vs := variants()
	capBps := sim.PayloadCapacityBps(sim.PaperLinkBps, sim.PaperMTU, abi.MaxOpBytes)
	ramp := make([]sim.RampStats, len(vs))
	join := make([]sim.JoinStats, len(vs))
	comb := make([]sim.JoinStats, len(vs))
	for i := range vs {
		ramp[i] = sim.AnalyzeRamp(r.ramp[i])
		join[i] = sim.AnalyzeJoin(r.join[i])
		comb[i] = sim.AnalyzeJoin(r.comb[i])
	}
	rtt := ramp[0].IdleRTTNs
	cp := sim.PaperCC(1)

	p("# Congestion experiments: measured next to the paper\n\n")
	p("Written by `make figures` (`lab/rmafigures`): every number below is measured by that run;\n")
	p("`engine/sim/figures_test.go` asserts the claims on the same experiments (`make test`).\n")
	p("The simulator runs real `engine.Core` instances on a virtual clock and fabric (`engine/sim`),\n")
	p("with flow applications (`engine/sim/flow.go`) instead of its random workload, and the real\n")
	p("`cc` package for Fig. 15.\n\n")

	p("## Setting\n\n")
	p("- Links %.0f Gbit/s to one switch, %d ns of propagation per hop, MTU %d (a 4 KB READ response is one\n", sim.PaperLinkBps/1e9, sim.PaperHopNs, sim.PaperMTU)
	p("  frame): a link carries at most **%.2f Gbit/s** of READ payload. Idle RTT of a 4 KB READ: **%.2f µs** (measured).\n", capBps/1e9, float64(rtt)/1000)
	p("- Solicitation window %d KB (the BDP: %.1f ops of 4 KB per RTT), DISPATCH_TIMEOUT %v, TIMEOUT %v.\n",
		sim.PaperWindowBytes>>10, capBps*float64(rtt)/1e9/(abi.MaxOpBytes*8), sim.PaperDispatchTimeout, sim.PaperTimeout)
	p("- Engine CPU: 20 ns per poll, 30 ns per frame received or sent (not a bottleneck), but Fig. 16d's server.\n")
	p("- CC (Fig. 15): `cc.DefaultParams` (AI %.2f, β %.1f, MD %.1f, Cut %.0f, CwndMax %.0f) with RTT estimate %d ns,\n",
		cp.AI, cp.Beta, cp.MD, cp.Cut, cp.CwndMax, cp.RTT)
	p("  issue_delay target %d ns, remote_delay target %d ns; windows start at CwndInit = 1 or 16 (one BDP; `cc.DefaultParams`: %v).\n",
		cp.LocalTarget, cp.RemoteTarget, cc.DefaultParams().CwndInit)
	p("  One controller per client node (one local window, one remote window per server); a flow issues when fewer than\n")
	p("  `MaxInFlight(key)` of its ops are outstanding and its `Pacer` allows (`Gap`).\n")
	p("- Flows read a 4 MB object over and over in 4 KB READs; a failed chunk is read again.\n")
	p("- Goodput: bytes of OK READs completed per unit of time. *Converged at t*: from t on, the goodput of every flow\n")
	p("  over every %d-RTT window (rate taken at the window's middle; windows every 100 ns) stays within ±10%% of the\n", sim.ConvergeWindowRTTs)
	p("  target, to the end of the run. The measure cannot report less than %d RTTs (half a window).\n\n", sim.ConvergeWindowRTTs/2)

	p("## Fig. 15: CC convergence (§7.4)\n\n")
	p("| claim | paper | %s | %s |\n|---|---|---|---|\n", vs[0].name, vs[1].name)
	row := func(claim, paper string, f func(i int) string) {
		p("| %s | %s | %s | %s |\n", claim, paper, f(0), f(1))
	}
	rtts := func(v float64) string {
		if v < 0 {
			return "not within the run"
		}
		return fmt.Sprintf("%.1f RTTs (%.0f µs)", v, v*float64(rtt)/1000)
	}
	row("(a) idle to link rate: within ±10% of the link", "~8 RTTs (40 µs)", func(i int) string { return "**" + rtts(ramp[i].ConvergeRTTs) + "**" })
	row("(a) non-OK outcomes during the ramp", "none", func(i int) string { return fmt.Sprint(ramp[i].NonOK) })
	row("(a) goodput at steady state (second half)", "100 Gbit/s", func(i int) string { return fmt.Sprintf("%.1f Gbit/s", ramp[i].SteadyBps/1e9) })
	row("(a) largest CWND", "15 ops", func(i int) string { return fmt.Sprintf("%.1f ops", ramp[i].MaxCwnd) })
	row("(b) second flow joins: both at fair share ±10%", "~5 RTTs", func(i int) string { return "**" + rtts(join[i].ConvergeRTTs) + "**" })
	row("(b) both at equal shares ±10% (whatever their sum)", "", func(i int) string { return rtts(join[i].EqualRTTs) })
	row("(b) goodput of the two flows, last quarter", "fair", func(i int) string {
		return fmt.Sprintf("%.1f / %.1f Gbit/s", join[i].EndBps[0]/1e9, join[i].EndBps[1]/1e9)
	})
	row("(b) non-OK outcomes", "", func(i int) string { return fmt.Sprint(nonOK(&join[i].ByStatus)) })
	row("(b) Fig. 15d: issue_delay, mean over 10 RTTs before the join → peak after", "sharp increase", func(i int) string {
		return fmt.Sprintf("%.2f µs → %.2f µs", float64(join[i].PreIssueNs)/1000, float64(join[i].PeakIssueNs)/1000)
	})
	row("(c) not separated: both at fair share ±10%", "", func(i int) string { return rtts(comb[i].ConvergeRTTs) })
	row("(c) slower than (b) by", "20×", func(i int) string {
		if comb[i].ConvergeRTTs < 0 || join[i].ConvergeRTTs <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("**%.1f×**", comb[i].ConvergeRTTs/join[i].ConvergeRTTs)
	})
	row("(c) goodput of the two flows, last quarter", "", func(i int) string {
		return fmt.Sprintf("%.1f / %.1f Gbit/s", comb[i].EndBps[0]/1e9, comb[i].EndBps[1]/1e9)
	})
	bdp := 0.9 * capBps * float64(rtt) / 1e9 / (abi.MaxOpBytes * 8)
	p("\nCwndInit 16 is cc.DefaultParams (one BDP of 4 KB ops). With CwndInit 1 the claims of 10 RTTs are not met:\n")
	p("Algorithm 1 adds AI = %.2f op per RTT to a window (AI/cwnd per OK completion, cwnd completions per RTT), so a\n", cp.AI)
	p("window that starts at 1 op needs at least (%.1f − 1) / %.2f = %.0f RTTs to reach 90%% of the BDP (%.1f ops), and\n", bdp, cp.AI, (bdp-1)/cp.AI, bdp)
	p("in (b) the joining flow's remote window grows the same way. A window decreases at most once per RTT and only\n")
	p("for ops posted after its last decrease: without the second rule, issue_delay samples of ops that queued before\n")
	p("the join's first cut arrived after it and cut the shared local window three times in a row (17 RTTs to fair share).\n")
	p("Fig. 15c: one window per server, driven by total_delay against %d ns: both flows react to the same signal and\n", cp.LocalTarget+cp.RemoteTarget)
	p("shrink by the same factor, so only additive increase equalises them (AIMD), hundreds to thousands of RTTs.\n\n")
	p("Plots: `fig15a.png` (goodput and CWND), `fig15b.png`, `fig15c.png` (goodput of both flows), `fig15d.png` (issue_delay).\n\n")

	p("## Fig. 16a/b: goodput vs jitter (§7.5), CC off\n\n")
	p("One client issues 4 KB READs at a static 100 Gbit/s from one server (one op per %.1f ns; an issue time with\n", float64(abi.MaxOpBytes*8)/100)
	p("no free slot is skipped), with every frame delayed by a uniform [0, J) on its last hop (an op's RTT grows by\n")
	p("J on average, 2J at most). Each point: %.0f ms of virtual time, goodput over all but the first %.0f µs.\n", float64(sweepNs)/1e6, float64(warmNs)/1e3)
	p("Paper: goodput drops with jitter; larger windows are more tolerant; 64 KB sheds load locally\n")
	p("(DISPATCH_TIMEOUT) first, TIMEOUTs appear when latency becomes unpredictable.\n\n")
	p("| jitter J (µs) |")
	for _, w := range jitterWindows {
		p(" %d KB goodput |", w>>10)
	}
	p(" 64 KB DISPATCH_TIMEOUT | 64 KB TIMEOUT |\n|---|")
	for range jitterWindows {
		p("---|")
	}
	p("---|---|\n")
	for k, j := range jittersNs {
		p("| %.1f |", float64(j)/1000)
		var st64 sim.ShedStats
		for i, w := range jitterWindows {
			st := sim.AnalyzeShed(r.jitter[i][k], warmNs)
			p(" %.1f Gbit/s |", st.GoodputBps/1e9)
			if w == 64<<10 {
				st64 = st
			}
		}
		p(" %.1f%% | %.1f%% |\n", 100*st64.DTRate, 100*st64.TimeoutRate)
	}
	p("\nPlots: `fig16a.png`, `fig16b.png`.\n\n")

	p("## Fig. 16d: goodput vs NACK threshold (§7.5), CC off\n\n")
	x := sim.Fig16Nack(1, sweepNs)
	serve := sim.Fig16dServeCapacityBps()
	p("Two clients each issue 4 KB READs at a static 100 Gbit/s (windows of %d KB each) from one server whose CPU\n", x.Engine.WindowBytes>>10)
	p("serves at most %.1f Gbit/s of READs (its link: 100 Gbit/s), so the excess demand waits in its inbound queue;\n", serve/1e9)
	p("a request that finds `threshold` requests queued is NACKed. Failed chunks are read again. Paper: with timely\n")
	p("NACKs the unsustainable part of the load is shed without loss of goodput; with too high a threshold the\n")
	p("server's queue grows and goodput collapses. §6.1's threshold, (TIMEOUT − RTT − DISPATCH_TIMEOUT) × service\n")
	p("rate = (%v − %.1f µs − %v) × %.2f M/s = **%.1f** requests.\n\n", sim.PaperTimeout, float64(rtt)/1000, sim.PaperDispatchTimeout, serve/(abi.MaxOpBytes*8)/1e6,
		engine.NackThresholdFormula(sim.PaperTimeout, time.Duration(rtt), sim.PaperDispatchTimeout, serve/(abi.MaxOpBytes*8)))
	p("| threshold | goodput (both) | NACK | TIMEOUT | median chunk latency | server: served / NACKed / expired unserved | deepest queue |\n")
	p("|---|---|---|---|---|---|---|\n")
	for i, th := range nackThresh {
		st := sim.AnalyzeShed(r.nack[i], warmNs)
		sv := r.nack[i].Sim.Cores[0]
		lat := "–"
		if st.GoodputBps > 0 {
			lat = fmt.Sprintf("%.1f µs", float64(st.ChunkLatP50Ns)/1000)
		}
		p("| %d | %.1f Gbit/s | %.1f%% | %.1f%% | %s | %d / %d / %d | %d |\n", th, st.GoodputBps/1e9, 100*st.NackRate, 100*st.TimeoutRate,
			lat, sv.ReqServed, sv.ReqNacked, sv.ReqExpired, sv.ReqQueueMax)
	}
	p("\nThe paper also notes a higher median latency at lower thresholds (more ops retried). Here the NACK rate is\n")
	p("about the same at every threshold that keeps goodput (the same excess must be shed), and latency grows with\n")
	p("the threshold (a deeper queue to wait in). Plot: `fig16d.png`.\n")
	p("\n## Fig. 8 (§7.1): measured on this machine\n\n")
	p("Not simulated: `make bench`'s kv setup measures the key/value caches' GET latency against offered load, and\n")
	p("`rmafigures -kv bench/out.jsonl` draws `fig8.png` and writes `fig8.md`, its numbers next to the paper's claims.\n")
	p("\n## Fig. 14 (§7.3): measured on this machine\n\n")
	p("Not simulated: `make bench`'s fig14 setup measures a client's unavailability while a region's key is rotated by\n")
	p("the driver, by a REKEY op, or with the new K_d fetched over keyx, on two engines over memif, and\n")
	p("`rmafigures -fig14 bench/out.jsonl` draws `fig14.png` and writes `fig14.md`, its numbers next to the paper's claims.\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func nonOK(by *[abi.NumStatus]uint64) uint64 {
	var n uint64
	for i, v := range by {
		if abi.Status(i) != abi.StatusOK {
			n += v
		}
	}
	return n
}
