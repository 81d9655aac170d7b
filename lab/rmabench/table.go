package main

import (
	"fmt"
	"strings"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/benchrow"
)

// p99 is a row's p99 latency (0 when it has none).
func p99(r *Row) float64 {
	if r.P99us == nil {
		return 0
	}
	return *r.P99us
}

func printTable(rows []Row) {
	sw := len("setup")
	for _, r := range rows {
		sw = max(sw, len(r.Setup))
	}
	fmt.Printf("\n%-13s %-*s %-9s %8s %4s %2s %12s %10s %9s %9s %9s %10s %6s\n", "system", sw, "setup", "test", "size", "O", "C", "ops/s", "MB/s", "p50_us", "p99_us", "p99.9_us", "eng_p50_us", "errors")
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f", *v)
	}
	for _, r := range rows {
		if r.Stage != "" { // a line of a stage table: printStageSummaries
			continue
		}
		fmt.Printf("%-13s %-*s %-9s %8d %4d %2d %12.0f %10.1f %9.2f %9s %9s %10s %6d\n", r.System, sw, r.Setup, r.Test, r.Size, r.Outstanding, r.Cores,
			r.OpsPerSec, r.MBPerSec, r.P50us, opt(r.P99us), opt(r.P999us), opt(r.EngP50us), r.Errors)
	}
	fmt.Println()
	// Ratios against the TCP peer for the same test, size and depth
	// (ucp_get for the reads, ucp_put_bw / ucp_put_lat for the writes).
	for _, u := range ucxRatios(rows) {
		r := u.row
		fmt.Printf("%-*s %-9s %5d B O=%-3d onerma/ucx-tcp: %.1fx ops/s", sw, r.Setup, r.Test, r.Size, r.Outstanding, u.ops())
		if r.P50us > 0 && strings.HasSuffix(r.Test, "_lat") {
			if lower := u.p50Lower(); lower >= 1 {
				fmt.Printf(", p50 %.1fx lower", lower)
			} else {
				fmt.Printf(", p50 %.1fx higher", 1/lower)
			}
			if r.Test == "write_lat" {
				fmt.Print(" (ucp_put_lat's p50 is half a ping-pong round trip)")
			}
		}
		fmt.Println()
	}
	// One core's 4 KB goodput (both ends of every op) against its bare
	// seal+open ceiling.
	for _, g := range goodputRatios(rows) {
		r, a := g.row, g.limit
		fmt.Printf("%-*s %-9s %5d B O=%-3d goodput/aes-gcm-limit(%s): %.1f/%.1f MB/s = %.2f (target >= %.2f)\n",
			sw, r.Setup, r.Test, r.Size, r.Outstanding, a.Setup, r.MBPerSec, a.MBPerSec, g.ratio(), g.goal)
	}
	// The executor's per-op overhead: its 4 MB READ goodput against raw
	// 4 KB READs (O=64) on the same setup in the same run.
	for _, e := range executorRatios(rows) {
		x, r := e.x, e.raw
		fmt.Printf("%-*s %-9s %d B O=%d executor goodput/raw %d B O=%d: %.1f/%.1f MB/s = %.2f (target >= %.2f)\n",
			sw, x.Setup, x.Test, x.Size, x.Outstanding, r.Size, r.Outstanding, x.MBPerSec, r.MBPerSec, x.MBPerSec/r.MBPerSec, executorGoal)
	}
	// The same ratio from the interleaved pairs (loopbackPairs).
	ratios, fpRatios := pairsRatios(rows)
	if len(ratios) > 0 {
		fmt.Printf("loopback read_bw %d B executor/raw %d B, %d interleaved pairs: median %.2f (ratios %s) (target >= %.2f)\n",
			execSpec.size, abi.MaxOpBytes, len(ratios), median(ratios), ratioList(ratios), executorGoal)
	}
	if len(fpRatios) > 0 {
		fmt.Printf("loopback read_bw %d B executor/raw %d B over the executor's memory footprint, same rounds: median %.2f (ratios %s)\n",
			execSpec.size, abi.MaxOpBytes, median(fpRatios), ratioList(fpRatios))
	}
	printScaling(rows)
	printTestpmd(rows)
	printWritePairs(rows)
	printCLoopback(rows)
	printPyLoopback(rows)
	printTelemetry(rows)
	printMetrics(rows)
	printVeth(rows)
	printRTT(rows)
	printAB(rows)
	printABLoop(rows)
	printKV(rows)
	// Head-of-line isolation: 64 B executor READs alone and behind a 4 MB
	// transfer on the same executor, against one 4 KB READ's latency (a
	// 4 KB service time) of the same run.
	var holIdle, hol, lat4k *Row
	for i, r := range rows {
		switch {
		case r.Setup == "loopback-hol-idle":
			holIdle = &rows[i]
		case r.Setup == "loopback-hol":
			hol = &rows[i]
		case r.System == "onerma" && r.Setup == "loopback" && r.Test == "read_lat" && r.Size == abi.MaxOpBytes:
			lat4k = &rows[i]
		}
	}
	if holIdle != nil && hol != nil {
		fmt.Printf("head-of-line: 64 B executor read_lat alone p50 %.2f us, p99 %.2f us; behind a %d B transfer on the same executor p50 %.2f us, p99 %.2f us",
			holIdle.P50us, p99(holIdle), holBg, hol.P50us, p99(hol))
		if lat4k != nil && lat4k.P50us > 0 {
			fmt.Printf(" = %.1f / %.1f x one 4 KB READ (p50 %.2f us)", hol.P50us/lat4k.P50us, p99(hol)/lat4k.P50us, lat4k.P50us)
		}
		// What the transfer behind gave up (the executor's ShortFirst):
		// rmaperf's note says what it moved meanwhile.
		if i := strings.Index(hol.Note, "meanwhile "); i >= 0 {
			fmt.Printf("; %s", hol.Note[i:])
		}
		fmt.Println()
	}
	printHolBg(rows)
	printNoisy(rows)
	// Isolation (paper Fig. 12): the high-class application's latency
	// alone and under each low-class load.
	var idle *Row
	for i, r := range rows {
		if r.Setup == "isolation-idle" && r.Test == "read_lat" {
			idle = &rows[i]
		}
	}
	if idle == nil {
		return
	}
	eng := func(r *Row) float64 {
		if r.EngP50us == nil {
			return 0
		}
		return *r.EngP50us
	}
	fmt.Printf("isolation: high-class %d B read_lat in %-26s p50 %.2f us, p99 %.2f us, engine p50 %.2f us\n", idle.Size, idle.Setup+":", idle.P50us, p99(idle), eng(idle))
	for i, r := range rows {
		if !strings.HasPrefix(r.Setup, "isolation-loaded") || r.Test != "read_lat" {
			continue
		}
		class := "high"
		if r.Setup == "isolation-loaded-lowclass" {
			class = "low"
		}
		fmt.Printf("isolation: %4s-class %d B read_lat in %-26s p50 %.2f us, p99 %.2f us, engine p50 %.2f us (p99 %.1fx idle)",
			class, r.Size, r.Setup+":", r.P50us, p99(&rows[i]), eng(&rows[i]), p99(&rows[i])/max(p99(idle), 1e-9))
		for _, l := range rows {
			if l.Setup == r.Setup && l.Test != "read_lat" {
				fmt.Printf("; low-class load %s %d B O=%d: %.1f MB/s, %d errors", l.Test, l.Size, l.Outstanding, l.MBPerSec, l.Errors)
			}
		}
		fmt.Println()
	}
	if t, ok := isolationTarget(rows); ok {
		fmt.Printf("isolation: high-class engine p99 loaded %.2f us, idle %.2f us + 2 x one 4 KB READ's engine service (%s p50 %.2f us) = %.2f us (target: loaded <= that)\n",
			t.loaded, t.idle, t.serviceFrom, t.service, t.bound())
	}
}

// ucxRatio is an onerma row and the ucx-tcp row of the same test, size
// and depth in the same run.
type ucxRatio struct{ row, peer *Row }

// ops is onerma's ops/s over the peer's.
func (u ucxRatio) ops() float64 { return u.row.OpsPerSec / u.peer.OpsPerSec }

// p50Lower is how many times lower onerma's p50 is than the peer's.
func (u ucxRatio) p50Lower() float64 { return u.peer.P50us / u.row.P50us }

// ucxRatios pairs each onerma row of the single-row setups (loopback,
// loopback-jumbo, memif, the head-of-line rows) with its ucx-tcp row.
func ucxRatios(rows []Row) []ucxRatio {
	var out []ucxRatio
	for i := range rows {
		r := &rows[i]
		if r.System != "onerma" || strings.HasPrefix(r.Setup, "isolation") || strings.HasPrefix(r.Setup, "noisy-neighbour") || strings.HasPrefix(r.Setup, "loopback-pairs") || strings.HasPrefix(r.Setup, "write-pairs") || strings.HasPrefix(r.Setup, "telemetry") || strings.HasPrefix(r.Setup, "metrics") || r.Setup == "c-loopback" || r.Setup == "ab" || r.Setup == abLoopSetup || strings.HasPrefix(r.Setup, "af_") {
			continue
		}
		for j := range rows {
			u := &rows[j]
			if u.System == "ucx-tcp" && u.Setup == "tcp" && u.Test == r.Test && u.Size == r.Size && u.Outstanding == r.Outstanding && u.OpsPerSec > 0 {
				out = append(out, ucxRatio{r, u})
			}
		}
	}
	return out
}

// The goodput targets: a 4 KB READ's goodput on one loopback core
// against the same run's one-core seal+open row, at the Ethernet MTU and
// with jumbo frames, and a 4 KB WRITE's at either.
const (
	readGoodputGoal      = benchrow.ReadGoodput
	readGoodputGoalJumbo = benchrow.ReadGoodputJumbo
	writeGoodputGoal     = benchrow.WriteGoodput
)

// goodputGoal is the goodput target of a 4 KB row of test on setup.
func goodputGoal(setup, test string) float64 {
	switch {
	case strings.HasPrefix(test, "write"):
		return writeGoodputGoal
	case strings.HasSuffix(setup, "jumbo"):
		return readGoodputGoalJumbo
	}
	return readGoodputGoal
}

// goodputRatio is a 4 KB bandwidth row of a loopback setup against an
// aes-gcm-limit row of the same run, and its target.
type goodputRatio struct {
	row, limit *Row
	goal       float64
}

func (g goodputRatio) ratio() float64 { return g.row.MBPerSec / g.limit.MBPerSec }

// goodputRatios pairs every aes-gcm-limit row (but write-pairs') with
// every 4 KB read_bw and write_bw row of loopback and loopback-jumbo.
func goodputRatios(rows []Row) []goodputRatio {
	var out []goodputRatio
	for i := range rows {
		a := &rows[i]
		if a.System != "aes-gcm-limit" || a.MBPerSec <= 0 || strings.HasPrefix(a.Setup, "write-pairs") {
			continue
		}
		for j := range rows {
			r := &rows[j]
			if r.System == "onerma" && strings.HasPrefix(r.Setup, "loopback") && !strings.HasPrefix(r.Setup, "loopback-pairs") && r.Size == 4096 && strings.HasSuffix(r.Test, "_bw") {
				out = append(out, goodputRatio{r, a, goodputGoal(r.Setup, r.Test)})
			}
		}
	}
	return out
}

// executorGoal is the executor's target: its 4 MB READ goodput against
// raw 4 KB READs on the same engine.
const executorGoal = 0.90

// executorRatio is an executor row (a READ above one op's size) and the
// raw 4 KB read_bw row of its setup.
type executorRatio struct{ x, raw *Row }

// executorRatios pairs each executor row of a single-row setup with the
// raw 4 KB read_bw rows of the same setup.
func executorRatios(rows []Row) []executorRatio {
	var out []executorRatio
	for i := range rows {
		x := &rows[i]
		if x.System != "onerma" || x.Test != "read_bw" || x.Size <= abi.MaxOpBytes || strings.HasPrefix(x.Setup, "loopback-pairs") {
			continue
		}
		for j := range rows {
			r := &rows[j]
			if r.System == "onerma" && r.Setup == x.Setup && r.Test == "read_bw" && r.Size == abi.MaxOpBytes && r.MBPerSec > 0 {
				out = append(out, executorRatio{x, r})
			}
		}
	}
	return out
}

// pairsRatios returns, for each round of loopbackPairs (its rows in the
// order they ran, three a round), the executor's goodput over the raw
// 4 KB READs' and over the raw READs' across the executor's footprint.
func pairsRatios(rows []Row) (ratios, fpRatios []float64) {
	var round []Row // the rows of one round, in the order they ran
	for _, r := range rows {
		if r.Test != execSpec.test || !strings.HasPrefix(r.Setup, "loopback-pairs") {
			continue
		}
		if round = append(round, r); len(round) < 3 {
			continue
		}
		var raw, fp, x *Row
		for i := range round {
			switch m := &round[i]; {
			case m.Setup == "loopback-pairs-footprint":
				fp = m
			case m.Size == abi.MaxOpBytes:
				raw = m
			case m.Size == execSpec.size:
				x = m
			}
		}
		if x != nil && raw != nil && raw.MBPerSec > 0 {
			ratios = append(ratios, x.MBPerSec/raw.MBPerSec)
		}
		if x != nil && fp != nil && fp.MBPerSec > 0 {
			fpRatios = append(fpRatios, x.MBPerSec/fp.MBPerSec)
		}
		round = round[:0]
	}
	return ratios, fpRatios
}

// isoTarget is the isolation target's terms: the high-class 64 B READ's
// engine p99 under the low-class 4 KB READ load (setup isolation-loaded)
// must stay within its idle engine p99 plus two 4 KB READs' engine
// service time.
type isoTarget struct {
	loaded, idle, service float64
	serviceFrom           string // the row service comes from
}

func (t isoTarget) bound() float64 { return t.idle + 2*t.service }
func (t isoTarget) met() bool      { return t.loaded <= t.bound() }

// isolationTarget reads isoTarget from a run's rows: one 4 KB READ's
// engine service time is the p50 of the selftest setup's 4 KB read_lat
// on one core (the engine's own op generator: nothing but the engine),
// else the engine p50 of the loopback setup's 4 KB read_lat.
func isolationTarget(rows []Row) (isoTarget, bool) {
	var t isoTarget
	var idle, loaded *Row
	for i := range rows {
		r := &rows[i]
		switch {
		case r.Setup == "isolation-idle" && r.Test == "read_lat":
			idle = r
		case r.Setup == "isolation-loaded" && r.Test == "read_lat":
			loaded = r
		case r.Setup == "selftest" && r.Test == "read_lat" && r.Size == abi.MaxOpBytes && r.Cores == 1 && r.P50us > 0:
			t.service, t.serviceFrom = r.P50us, "selftest read_lat 4096 B"
		case r.System == "onerma" && r.Setup == "loopback" && r.Test == "read_lat" && r.Size == abi.MaxOpBytes && r.EngP50us != nil && t.serviceFrom == "":
			t.service = *r.EngP50us
		}
	}
	if t.serviceFrom == "" && t.service > 0 {
		t.serviceFrom = "loopback read_lat 4096 B, engine"
	}
	if idle == nil || loaded == nil || idle.EngP99us == nil || loaded.EngP99us == nil || t.service <= 0 {
		return isoTarget{}, false
	}
	t.idle, t.loaded = *idle.EngP99us, *loaded.EngP99us
	return t, true
}
