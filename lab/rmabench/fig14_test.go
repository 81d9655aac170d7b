package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/benchrow"
)

// TestFig14Selection: make bench's default runs fig14, and -only fig14
// selects it.
func TestFig14Selection(t *testing.T) {
	if !slices.Contains(strings.Split(allSetups, ","), "fig14") || !selects(allSetups, "fig14") || !selects("memif,fig14", "fig14") {
		t.Error("fig14 is not selected by default or by name")
	}
	if selects("memif,kv", "fig14") {
		t.Error("a list without fig14 runs it")
	}
}

// fig14Seq builds probes: each step is (status, gen, latency µs), posted
// back to back from 0, each after the previous one's completion plus
// extra µs (a keyx fetch).
type fig14Step struct {
	st    abi.Status
	gen   int32
	lat   int64
	extra int64
}

func fig14Seq(steps []fig14Step) []fig14Probe {
	var p []fig14Probe
	t := int64(0)
	for _, s := range steps {
		t += s.extra * 1000
		p = append(p, fig14Probe{post: t, done: t + s.lat*1000, status: s.st, gen: s.gen})
		t += s.lat * 1000
	}
	return p
}

const (
	stOK   = abi.StatusOK
	stAuth = abi.StatusRemoteAuthFailure
)

// TestFig14Gaps: each rotation's F is the first failure under its old
// generation and N the first success under the new; the unavailability
// is post(N) - post(F) (net) and done(N) - post(F) (raw); a rotation the
// client saw no failure or no success of is missing.
func TestFig14Gaps(t *testing.T) {
	p := fig14Seq([]fig14Step{
		{stOK, 0, 20, 0}, {stOK, 0, 20, 0},
		{stAuth, 0, 10, 0}, {stOK, 1, 20, 0}, // rotation 0: net 10, raw 30
		{stOK, 1, 20, 0},
		{stAuth, 1, 12, 0}, {stAuth, 2, 15, 0}, {stOK, 2, 25, 0}, // rotation 1: a failure under the new key too: net 27, raw 52
		{stOK, 2, 20, 0},
		{stAuth, 2, 10, 0}, {stOK, 3, 20, 3000}, // rotation 2: a 3 ms fetch: net 3010, raw 3030
		{abi.StatusTimeout, 3, 20, 0},
	})
	gaps, missing := fig14Gaps(p, 4) // rotation 3: never seen
	if missing != 1 || len(gaps) != 3 {
		t.Fatalf("gaps %+v, missing %d", gaps, missing)
	}
	for i, want := range [][2]int64{{10, 30}, {27, 52}, {3010, 3030}} {
		if g := gaps[i]; g.net(p) != want[0]*1000 || g.raw(p) != want[1]*1000 {
			t.Errorf("rotation %d: net %d raw %d, want %d %d µs", i, g.net(p)/1000, g.raw(p)/1000, want[0], want[1])
		}
	}
	rows := fig14Rows("fig14-x", p, gaps, missing, time.Second)
	if len(rows) != 3 || rows[0].Test != "unavail" || rows[1].Test != "unavail_raw" || rows[2].Test != "probe_lat" {
		t.Fatalf("rows %+v", rows)
	}
	u, w, l := rows[0], rows[1], rows[2]
	if u.P50us != 27 || *u.P999us != 3010 || u.Ops != 3 || u.Errors != 1 || w.P50us != 52 || *w.P999us != 3030 {
		t.Errorf("unavail p50 %v max %v ops %d errors %d, raw p50 %v max %v", u.P50us, *u.P999us, u.Ops, u.Errors, w.P50us, *w.P999us)
	}
	if l.Errors != 1 || l.Ops != 7 || l.P50us != 20 || u.OpsPerSec != float64(len(p)) || u.Size != 64 || u.Outstanding != 1 {
		t.Errorf("probe_lat %+v, unavail rate %v", l, u.OpsPerSec)
	}
	// The timeline is rotation 1's (the median), times from its F.
	tl := u.Timeline
	if len(tl) != 10 { // within 400 µs of its F's post and N's completion: not rotation 2's N
		t.Fatalf("timeline of %d probes, want 10", len(tl))
	}
	f := slices.IndexFunc(tl, func(x benchrow.Probe) bool { return x.AtUs == 0 })
	if f != 5 || tl[f].Status != "REMOTE_AUTHENTICATION_FAILURE" || tl[f].New || !tl[f+1].New || tl[f+2].LatUs != 25 || tl[f+2].AtUs != 27 || tl[0].AtUs != -90 {
		t.Errorf("timeline %+v", tl)
	}
	if _, err := json.Marshal(u); err != nil {
		t.Fatal(err)
	}
}

// TestFig14GapsNone: no probes, no rotations seen; the rows say so.
func TestFig14GapsNone(t *testing.T) {
	gaps, missing := fig14Gaps(nil, 3)
	if len(gaps) != 0 || missing != 3 {
		t.Fatalf("gaps %v missing %d", gaps, missing)
	}
	rows := fig14Rows("fig14-x", nil, nil, missing, time.Second)
	if rows[0].Errors != 3 || rows[0].P99us != nil || rows[0].Timeline != nil {
		t.Errorf("%+v", rows[0])
	}
}

// TestFig14Dual: per rotation the bound is the distance from the last
// OK departure under the old generation to the first OK one under the
// new (at least 0); a rotation without both is missing; the row counts
// the pairs neither of whose READs succeeded.
func TestFig14Dual(t *testing.T) {
	d := newFig14Dual(4)
	for _, x := range [][2]int64{{0, 100}, {0, 900}, {0, 500}, {1, 1300}, {1, 1100}, {1, 1600}, {2, 1500}, {3, 9000}} {
		d.ok(int(x[0]), x[1])
	}
	d.ok(9, 1) // beyond the generations: ignored
	d.neither[1] = 2
	d.ops, d.other = 100, 1
	ns, missing := d.bounds(3)
	if !slices.Equal(ns, []int64{200, 0, 7500}) || missing != 0 {
		t.Fatalf("bounds %v missing %d", ns, missing)
	}
	if ns, missing := d.bounds(4); len(ns) != 3 || missing != 1 {
		t.Fatalf("4 rotations: bounds %v missing %d", ns, missing)
	}
	save := fig14Rotations
	fig14Rotations = 3
	defer func() { fig14Rotations = save }()
	r := fig14NeitherRow("fig14-driver-neither", d, time.Second)
	if r.Test != "neither" || r.Errors != 2 || r.Ops != 3 || r.P50us != 0.2 || *r.P999us != 7.5 || r.Outstanding != 2*fig14Pairs || r.OpsPerSec != 100 {
		t.Errorf("%+v", r)
	}
	if !strings.Contains(r.Note, "pairs with neither READ OK (2)") || !strings.Contains(r.Note, "1 ending neither OK") {
		t.Errorf("note %q", r.Note)
	}
}

// TestFig14Quantiles: p50, p99 and the max in µs.
func TestFig14Quantiles(t *testing.T) {
	var ns []int64
	for i := range 200 {
		ns = append(ns, int64(200-i)*1000)
	}
	if q := fig14Quantiles(ns); !slices.Equal(q, []float64{101, 199, 200}) {
		t.Errorf("%v", q)
	}
	if fig14Quantiles(nil) != nil {
		t.Error("quantiles of nothing")
	}
	if r := fig14LatRow("s", "rekey_call", nil, "n"); r.P99us != nil || r.Ops != 0 {
		t.Errorf("%+v", r)
	}
}

// TestFig14Headline: the driver path's p50 on one core against its goal,
// and the three designs' unavailability beside the paper's.
func TestFig14Headline(t *testing.T) {
	rows := []Row{
		{Setup: "fig14-rekey-call", Test: "rekey_call", Cores: 2, P50us: 10},
		{Setup: "fig14-rekey-call", Test: "rekey_call", Cores: 1, P50us: 31, P99us: benchrow.F(90)},
		{Setup: "fig14-driver", Test: "unavail", P50us: 20, Ops: 50},
		{Setup: "fig14-rekey-op", Test: "unavail", P50us: 15, Ops: 50},
	}
	m, ok := fig14CallMetric(rows)
	if !ok || m.value != "31.00 µs (p99 90.00 µs)" || m.goal != "≤ 30 µs" || m.verdict != notMet {
		t.Errorf("%+v %v", m, ok)
	}
	if _, ok := fig14UnavailMetric(rows); ok {
		t.Error("a run without fig14-keyx's row has the metric")
	}
	rows = append(rows, Row{Setup: "fig14-keyx", Test: "unavail", P50us: 2000, Ops: 50})
	if m, ok := fig14UnavailMetric(rows); !ok || m.value != "20.00 µs / 15.00 µs / 2000.00 µs" || m.verdict != noGoal {
		t.Errorf("%+v %v", m, ok)
	}
}
