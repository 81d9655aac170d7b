package main

// The hol setup: head-of-line blocking as the paper's Fig. 12 measures
// it. Small READs arrive Poisson beside one background transfer, kept
// going on the same portal.Executor (same portal, slots and windows),
// whose size grows from one op to 64 MB; their slowdown should not grow
// with it: the executor lets a short transfer past a long one's chunks
// (ExecutorConfig.ShortFirst), and a short op then waits for the few
// chunks already in the engines, however long the transfer behind them.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// holBgSizes are the background transfers of the loopback-hol-bg rows, 0
// for none (the idle row the others are compared with).
var holBgSizes = []int{0, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

// holRate is the small READs' arrival rate (Poisson, per second), and
// holServers how many of them the application serves at once: one, so
// each is measured alone beside the background transfer (at 10 k/s and a
// few µs each they seldom overlap; arrivals that find it busy wait, and
// rmaperf's note says how late they were posted).
const holRate, holServers = 10000, 1

// holRounds is how many interleaved rounds the hol setup runs.
const holRounds = 3

// holRmaperfArgs are more rmaperf flags for the hol setup's executor runs
// (-hol-rmaperf-args).
var holRmaperfArgs []string

// holEngineArgs are more rmad flags for the hol setup's engine
// (-hol-engine-args); its rows' notes name them.
var holEngineArgs []string

// holBgRun starts a loopback engine (benchLoopback) and runs holRounds
// interleaved rounds, each max(1 s, dur/holRounds) long, of: 64 B READs
// through the executor arriving Poisson at holRate, beside a background
// transfer of each of holBgSizes (rmaperf read_lat -exec -rate -bg; setup
// loopback-hol-bg, the row's background_bytes its size), and one raw 4 KB
// READ at a time (read_lat -s 4096, a 4 KB READ's service time on this
// engine, setup loopback-hol-bg, background_bytes 0).
func holBgRun(rmad, rmaperf, dir string, dur time.Duration, emit emitFunc) error {
	e, err := testbed.Start(benchLoopback(rmad, dir, "bench-hol", "10.99.7.1", "1500", holEngineArgs...))
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	d := max(time.Second, dur/holRounds)
	const setup = "loopback-hol-bg"
	var runs []func() (Row, error)
	for _, bg := range holBgSizes {
		runs = append(runs, func() (Row, error) {
			args := []string{"-socket", e.Socket, "-self", "-exec", "-rate", strconv.Itoa(holRate)}
			if bg > 0 {
				args = append(args, "-bg", strconv.Itoa(bg))
			}
			args = append(args, holRmaperfArgs...)
			r, err := rmaperfRun(rmaperf, "0", spec{"read_lat", 64, holServers}, d, setup, nil, args...)
			r.BackgroundBytes, r.OfferedOpsPerSec = bg, holRate
			return holEngineNote(r), err
		})
	}
	runs = append(runs, func() (Row, error) {
		r, err := rmaperfRun(rmaperf, "0", spec{"read_lat", 4096, 1}, d, setup, nil, "-socket", e.Socket, "-self")
		return holEngineNote(r), err
	})
	return interleaved(holRounds, emit, runs...)
}

// holEngineNote names -hol-engine-args at the end of r's note, after
// nnArgsMark (the headline skips such runs: engineExperiment).
func holEngineNote(r Row) Row {
	if len(holEngineArgs) > 0 {
		r.Note += nnArgsMark + strings.Join(holEngineArgs, " ")
	}
	return r
}

// holBgGoalSpread and holBgGoalOne are the hol setup's targets: the
// small READs' p50 slowdown flat over the background sizes (max/min),
// and their p50 beside any transfer within twice one 4 KB READ's.
const holBgGoalSpread, holBgGoalOne = 1.5, 2.0

// holBgStats is the hol setup's rows summed up: medians over the rounds.
type holBgStats struct {
	rounds                 int
	one                    float64 // one 4 KB READ's p50
	idle50, idle99         float64 // the small READs' alone
	sizes                  []int   // the background sizes measured, in holBgSizes' order
	p50, p99               []float64
	slowdown50, slowdown99 []float64 // p50 and p99 over idle's, by size
}

// holBgSummary returns the medians over the rounds of the loopback-hol-bg
// rows: for each background size, the small READs' p50 and p99 and their
// slowdown against the idle row's; false without an idle row or a 4 KB
// READ row.
func holBgSummary(rows []Row) (holBgStats, bool) {
	p50s, p99s := map[int][]float64{}, map[int][]float64{}
	var ref []float64 // one 4 KB READ's p50, by round
	for i := range rows {
		r := &rows[i]
		if r.Setup != "loopback-hol-bg" || r.Test != "read_lat" {
			continue
		}
		if r.Size == 4096 {
			ref = append(ref, r.P50us)
			continue
		}
		p50s[r.BackgroundBytes] = append(p50s[r.BackgroundBytes], r.P50us)
		p99s[r.BackgroundBytes] = append(p99s[r.BackgroundBytes], p99(r))
	}
	if len(p50s[0]) == 0 || len(ref) == 0 {
		return holBgStats{}, false
	}
	h := holBgStats{rounds: len(ref), one: median(ref), idle50: median(p50s[0]), idle99: median(p99s[0])}
	for _, bg := range holBgSizes[1:] {
		if len(p50s[bg]) == 0 {
			continue
		}
		m50, m99 := median(p50s[bg]), median(p99s[bg])
		h.sizes = append(h.sizes, bg)
		h.p50, h.p99 = append(h.p50, m50), append(h.p99, m99)
		h.slowdown50, h.slowdown99 = append(h.slowdown50, m50/h.idle50), append(h.slowdown99, m99/h.idle99)
	}
	return h, true
}

// spread is max/min of v.
func spread(v []float64) float64 { return slices.Max(v) / slices.Min(v) }

// worstOne is the highest p50 beside a transfer, in one 4 KB READ's p50.
func (h holBgStats) worstOne() float64 { return slices.Max(h.p50) / h.one }

// printHolBg prints, for each background size, the small READs' median
// p50 and p99 over the rounds, their slowdown against the idle row's and
// their multiple of one 4 KB READ's p50, then the spread of the
// slowdowns over the background sizes, against the targets.
func printHolBg(rows []Row) {
	h, ok := holBgSummary(rows)
	if !ok {
		return
	}
	fmt.Printf("head-of-line (Fig. 12): 64 B READs arriving Poisson at %d/s through the executor, medians of %d rounds; one 4 KB READ p50 %.2f us; idle p50 %.2f us, p99 %.2f us\n",
		holRate, h.rounds, h.one, h.idle50, h.idle99)
	for i, bg := range h.sizes {
		fmt.Printf("head-of-line: beside one %8d B transfer: p50 %7.2f us (%.2fx idle, %.2fx one 4 KB READ; target <= %.0f), p99 %8.2f us (%.2fx idle)\n",
			bg, h.p50[i], h.slowdown50[i], h.p50[i]/h.one, holBgGoalOne, h.p99[i], h.slowdown99[i])
	}
	if len(h.sizes) > 1 {
		fmt.Printf("head-of-line: slowdown max/min over background sizes %s: p50 %.2f, p99 %.2f (target <= %.1f)\n",
			holSizes(), spread(h.slowdown50), spread(h.slowdown99), holBgGoalSpread)
	}
}

// holSizes names the background sizes of holBgSizes (without 0).
func holSizes() string {
	var s []string
	for _, b := range holBgSizes[1:] {
		switch {
		case b >= 1<<20:
			s = append(s, fmt.Sprintf("%d MB", b>>20))
		default:
			s = append(s, fmt.Sprintf("%d KB", b>>10))
		}
	}
	return strings.Join(s, ", ")
}
