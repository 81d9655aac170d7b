package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onerma/onerma/internal/benchrow"
)

// TestHeadlineMatchesOutJSONL regenerates the headline from the committed
// bench/out.jsonl: bench/RESULTS.md's generated section must be it.
func TestHeadlineMatchesOutJSONL(t *testing.T) {
	rows, err := readRows("../../bench/out.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../bench/RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	section := headlineSection(rows, "bench/out.jsonl")
	want, err := replaceHeadline(string(doc), section)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Errorf("bench/RESULTS.md's headline is not bench/out.jsonl's: run `go run ./lab/rmabench results` at the top of the tree. It should read:\n%s", section)
	}
}

// rw is a row of setup, test and size; opts fill in the rest.
func rw(system, setup, test string, size int, opts ...func(*Row)) Row {
	r := Row{System: system, Setup: setup, Test: test, Size: size, Outstanding: 1, Cores: 1}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func ops(v float64) func(*Row)   { return func(r *Row) { r.OpsPerSec = v } }
func mbps(v float64) func(*Row)  { return func(r *Row) { r.MBPerSec = v } }
func p50(v float64) func(*Row)   { return func(r *Row) { r.P50us = v } }
func p99us(v float64) func(*Row) { return func(r *Row) { r.P99us = benchrow.F(v) } }
func engP99(v float64) func(*Row) {
	return func(r *Row) { r.EngP99us = benchrow.F(v) }
}
func engP50(v float64) func(*Row) { return func(r *Row) { r.EngP50us = benchrow.F(v) } }
func cores(n int) func(*Row)      { return func(r *Row) { r.Cores = n } }
func depth(n int) func(*Row)      { return func(r *Row) { r.Outstanding = n } }
func bg(n int) func(*Row)         { return func(r *Row) { r.BackgroundBytes = n } }
func cpu(v float64) func(*Row)    { return func(r *Row) { r.CPUSecPerMOps = benchrow.F(v) } }
func runID(id string) func(*Row)  { return func(r *Row) { r.Run = id } }
func cpuNs(v float64) func(*Row)  { return func(r *Row) { r.CPUNsPerOp = benchrow.F(v) } }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestHolBgSummary(t *testing.T) {
	var rows []Row
	// Two rounds: idle p50 2, then beside each size p50 2x..; one 4 KB
	// READ p50 3 and 5 (median 4).
	for k, one := range []float64{3, 5} {
		rows = append(rows, rw("onerma", "loopback-hol-bg", "read_lat", 64, bg(0), p50(2), p99us(10)))
		for i, b := range holBgSizes[1:] {
			rows = append(rows, rw("onerma", "loopback-hol-bg", "read_lat", 64, bg(b), p50(2*float64(i+2)+float64(k)), p99us(20)))
		}
		rows = append(rows, rw("onerma", "loopback-hol-bg", "read_lat", 4096, p50(one)))
	}
	h, ok := holBgSummary(rows)
	if !ok {
		t.Fatal("no summary")
	}
	if h.rounds != 2 || h.one != 4 || h.idle50 != 2 || h.idle99 != 10 || len(h.sizes) != len(holBgSizes)-1 {
		t.Fatalf("summary %+v", h)
	}
	// p50 beside size i: medians of 2(i+2) and 2(i+2)+1.
	if got, want := spread(h.slowdown50), (2*6+0.5)/(2*2+0.5); !near(got, want) {
		t.Errorf("spread %v, want %v", got, want)
	}
	if got, want := h.worstOne(), (2*6+0.5)/4; !near(got, want) {
		t.Errorf("worst / one 4 KB READ %v, want %v", got, want)
	}
	m, ok := holSpreadMetric(rows)
	if !ok || m.verdict != notMet {
		t.Errorf("spread metric %+v", m)
	}
	if _, ok := holBgSummary(rows[1:len(holBgSizes)]); ok {
		t.Error("a summary without the idle and 4 KB rows")
	}
	// A run with more engine flags (-hol-engine-args) is an experiment.
	holEngineArgs = []string{"-poll-bytes", "0"}
	defer func() { holEngineArgs = nil }()
	exp := slices.Clone(rows)
	exp[0] = holEngineNote(exp[0])
	if m, ok := holSpreadMetric(exp); ok {
		t.Errorf("a spread headline from an experiment's rows: %+v", m)
	}
	if m, ok := holOneMetric(exp); ok {
		t.Errorf("a headline from an experiment's rows: %+v", m)
	}
}

func TestIsolationTarget(t *testing.T) {
	rows := []Row{
		rw("onerma", "isolation-idle", "read_lat", 64, engP99(1)),
		rw("onerma", "isolation-loaded", "read_lat", 64, engP99(3.5)),
		rw("onerma", "isolation-loaded", "read_bw", 4096, engP99(100)),
		rw("onerma", "loopback", "read_lat", 4096, engP50(2)),
	}
	tg, ok := isolationTarget(rows)
	if !ok || tg.service != 2 || tg.bound() != 5 || !tg.met() || !strings.Contains(tg.serviceFrom, "loopback") {
		t.Fatalf("from the loopback row: %+v, %v", tg, ok)
	}
	// The selftest row wins, whichever comes first.
	rows = append(rows, rw("onerma", "selftest", "read_lat", 4096, p50(1)))
	tg, ok = isolationTarget(rows)
	if !ok || tg.service != 1 || tg.bound() != 3 || tg.met() || !strings.Contains(tg.serviceFrom, "selftest") {
		t.Fatalf("from the selftest row: %+v, %v", tg, ok)
	}
	m, ok := isolationMetric(rows)
	if !ok || m.verdict != notMet || m.value != "3.50 µs" {
		t.Errorf("metric %+v", m)
	}
	// A run with more engine flags (-iso-engine-args) is an experiment.
	exp := slices.Clone(rows)
	exp[1].Note = "high-class app; engine window 32768 B" + nnArgsMark + "-poll-bytes 0"
	if m, ok := isolationMetric(exp); ok {
		t.Errorf("a headline from an experiment's rows: %+v", m)
	}
	if _, ok := isolationTarget(rows[1:]); ok {
		t.Error("a target without the idle row")
	}
}

func TestPairsRatios(t *testing.T) {
	raw := func(v float64) Row { return rw("onerma", "loopback-pairs", "read_bw", 4096, mbps(v)) }
	x := func(v float64) Row { return rw("onerma", "loopback-pairs", "read_bw", execSpec.size, mbps(v)) }
	fp := func(v float64) Row { return rw("onerma", "loopback-pairs-footprint", "read_bw", 4096, mbps(v)) }
	rows := []Row{raw(100), x(90), fp(80), fp(50), x(50), raw(100), raw(100), x(95), fp(100)}
	r, f := pairsRatios(rows)
	if want := []float64{0.9, 0.5, 0.95}; !equalF(r, want) {
		t.Errorf("ratios %v, want %v", r, want)
	}
	if want := []float64{90.0 / 80, 1, 0.95}; !equalF(f, want) {
		t.Errorf("footprint ratios %v, want %v", f, want)
	}
	m, ok := executorMetric(rows)
	if !ok || m.verdict != met || m.value != "0.90 (3 rounds)" {
		t.Errorf("metric %+v", m)
	}
}

func equalF(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestSelftestScalingShare(t *testing.T) {
	cs := func(n int, v float64) Row { return rw("host", "platform", "crypto-scaling", 4096, cores(n), ops(v)) }
	rows := []Row{cs(1, 100), cs(2, 190), cs(2, 400), cs(1, 180), cs(1, 100), cs(2, 200)} // the second round backwards
	if got, want := scalingRatios(rows), []float64{1.9, 400.0 / 180, 2}; !equalF(got, want) {
		t.Fatalf("platform ratios %v, want %v", got, want)
	}
	for _, v := range [][3]float64{{1, 1.8, 0.5}, {1, 1.6, 0.5}, {1, 1.7, 0.5}} {
		rows = append(rows,
			rw("onerma", "selftest-rounds", "read_bw", 64, cores(1), ops(v[0])),
			rw("onerma", "selftest-rounds", "read_bw", 64, cores(2), ops(v[1])),
			rw("onerma", "selftest-handover", "read_bw", 64, cores(2), ops(v[2])))
	}
	s, ok := selftestScalingShare(rows)
	if !ok || !near(s.got, 1.7) || !near(s.ceiling, 2) || s.rounds != 3 || !near(s.share(), 0.85) {
		t.Fatalf("share %+v, %v", s, ok)
	}
	if m, _ := scalingMetric(rows); m.verdict != notMet {
		t.Errorf("metric %+v", m)
	}
}

func TestKVComparisons(t *testing.T) {
	var rows []Row
	for k := range 3 {
		f := float64(k + 1)
		rows = append(rows,
			rw("memcached", "kv-ycsb-c", "get", 32, ops(100*f), p99us(100), cpu(10)),
			rw("onerma-kv", "kv-ycsb-c", "get", 32, ops(1200*f), p99us(10*f), cpu(2)),
			rw("onerma-kv", "kv-ycsb-c-memif", "get", 32, ops(500*f), p99us(30), cpu(4)),
			rw("memcached", "kv-ycsb-c", "get", 1024, ops(100), p99us(100), cpu(10)),
		)
	}
	rows = append(rows, rw("redis", "kv-redis-benchmark-P16", "get", 32, ops(1e6), cpu(1)))
	groups := kvGroups(rows)
	if len(groups) != 2 || len(groups[0].series) != 3 {
		t.Fatalf("%d groups, first of %d series", len(groups), len(groups[0].series))
	}
	vs := groups[0].vsRef()
	if len(vs) != 2 || vs[0].name != "onerma-kv" || vs[1].name != "onerma-kv-memif" {
		t.Fatalf("against memcached: %+v", vs)
	}
	if !equalF(vs[0].ops, []float64{12, 12, 12}) || !equalF(vs[0].lat, []float64{0.1, 0.2, 0.3}) || !equalF(vs[0].cpu, []float64{0.2, 0.2, 0.2}) {
		t.Errorf("onerma-kv/memcached %+v", vs[0])
	}
	for _, c := range []struct {
		m       func([]Row) (measure, bool)
		value   string
		verdict verdict
	}{
		{kvOpsMetric("onerma-kv"), "×12.00 (3 rounds)", met},
		{kvP99Metric("onerma-kv"), "×0.20 (3 rounds)", met},
		{kvOpsMetric("onerma-kv-memif"), "×5.00 (3 rounds)", notMet},
		{kvP99Metric("onerma-kv-memif"), "×0.30 (3 rounds)", notMet},
		// 1e6 / 2 s per M GETs against 1e6 / 1.
		{kvToolMetric("onerma-kv"), "×0.50 (500 k / 1.00 M)", notMet},
	} {
		m, ok := c.m(rows)
		if !ok || m.value != c.value || m.verdict != c.verdict {
			t.Errorf("got %+v (%v), want %q %v", m, ok, c.value, c.verdict)
		}
	}
}

func TestTestpmdRatios(t *testing.T) {
	var rows []Row
	for k := range 3 {
		f := float64(k + 1)
		rows = append(rows,
			rw("dpdk-testpmd", "port-net_ring", "io-fwd", 64, ops(1000)),
			rw("dpdk-testpmd", "port-net_ring", "macswap-fwd", 64, ops(500)),
			rw("onerma", "port-net_ring", "read_bw", 64, ops(5*f)),
			rw("onerma", "port-net_ring", "rx-frames", 64, ops(10*f)))
	}
	tr := testpmdRatios(rows)
	if len(tr) != 2 || tr[0].mode != "io" || !equalF(tr[0].ratios, []float64{0.01, 0.02, 0.03}) || !equalF(tr[1].ratios, []float64{0.02, 0.04, 0.06}) {
		t.Fatalf("%+v", tr)
	}
	m, ok := testpmdMetric("port-net_ring")(rows)
	if !ok || m.value != "0.0200 (io), 0.0400 (macswap)" || m.verdict != noGoal {
		t.Errorf("metric %+v", m)
	}
	if _, ok := testpmdMetric("port-memif")(rows); ok {
		t.Error("a memif metric without memif rows")
	}
}

func TestWritePairsRatios(t *testing.T) {
	var rows []Row
	for _, v := range []float64{1000, 1200, 1100} {
		for _, s := range writePairsSetups {
			mb := map[string]float64{"write-pairs": v, "write-pairs-jumbo": 2 * v, "write-pairs-tcp": 400, "write-pairs-cpu": 2000, "write-pairs-cpu-ipsec-mb": 4000}[s]
			rows = append(rows, rw("onerma", s, "write_bw", 4096, mbps(mb)))
		}
	}
	rounds := writePairsRounds(rows)
	if got := writePairsRatios(rounds, "write-pairs", "write-pairs-tcp"); !equalF(got, []float64{2.5, 3, 2.75}) {
		t.Errorf("against tcp %v", got)
	}
	m, ok := writePairsMetric("write-pairs-cpu-ipsec-mb", writeGoodputGoal, "")(rows)
	if !ok || m.value != "0.28 (3 rounds)" || m.verdict != notMet {
		t.Errorf("metric %+v", m)
	}
}

// TestCLoopback: each round pairs the Go and the C row of a size in the
// order measured (even rounds Go first, odd rounds C first); a row without
// cpu_ns_per_op, or of another setup, counts in no round.
func TestCLoopback(t *testing.T) {
	var rows []Row
	for k, c := range []float64{500, 800, 700} {
		g := rw("onerma", "c-loopback", "read_bw", 64, depth(64), ops(1e6), cpuNs(1000))
		cr := rw("onerma-c", "c-loopback", "read_bw", 64, depth(64), ops(1.1e6), cpuNs(c))
		big := rw("onerma", "c-loopback", "read_bw", 4096, depth(64), ops(5e5), cpuNs(2000))
		bigC := rw("onerma-c", "c-loopback", "read_bw", 4096, depth(64), ops(5e5), cpuNs(2400))
		round := []Row{g, cr, big, bigC}
		if k%2 == 1 {
			round = []Row{bigC, big, cr, g}
		}
		rows = append(rows, round...)
	}
	rows = append(rows, rw("onerma-c", "c-loopback", "read_bw", 64, depth(64), ops(1e6)), // no CPU time
		rw("onerma", "loopback", "read_bw", 64, depth(64), ops(1e6), cpuNs(1)))
	s, ok := summarizeCLoopback(rows, 64)
	if !ok || s.rounds != 3 || !equalF(s.ratios, []float64{0.5, 0.8, 0.7}) || !near(s.ratio, 0.7) || s.cpuC != 700 || s.cpuGo != 1000 || s.opsC != 1.1e6 {
		t.Fatalf("64 B: %+v", s)
	}
	m, ok := cLoopbackMetric(64)(rows)
	if !ok || m.value != "0.70 (3 rounds; 700 / 1000 ns; ops/s C 1.10 M, Go 1.00 M)" || m.goal != "≤ 1" || m.verdict != met {
		t.Errorf("64 B metric %+v", m)
	}
	if m, ok := cLoopbackMetric(4096)(rows); !ok || !strings.HasPrefix(m.value, "1.20 (3 rounds;") || m.verdict != notMet {
		t.Errorf("4 KB metric %+v", m)
	}
	if _, ok := cLoopbackMetric(128)(rows); ok {
		t.Error("a metric of a size never measured")
	}
	for _, u := range ucxRatios(append(rows, rw("ucx-tcp", "tcp", "read_bw", 64, depth(64), ops(1e5)))) {
		if u.row.Setup == "c-loopback" {
			t.Errorf("a c-loopback row paired with ucx-tcp: %+v", *u.row)
		}
	}
}

func TestGoodputGoals(t *testing.T) {
	rows := []Row{
		rw("aes-gcm-limit", "cpu", "seal_open", 4096, mbps(2000)),
		rw("aes-gcm-limit", "cpu-ipsec-mb", "seal_open", 4096, mbps(8000)),
		rw("onerma", "loopback", "read_bw", 4096, mbps(4400)),
		rw("onerma", "loopback", "write_bw", 4096, mbps(4000)),
		rw("onerma", "loopback-jumbo", "read_bw", 4096, mbps(5000)),
		rw("onerma", "loopback-pairs", "read_bw", 4096, mbps(5000)),
	}
	g := goodputRatios(rows)
	if len(g) != 6 {
		t.Fatalf("%d ratios, want 2 limits x 3 rows", len(g))
	}
	for _, x := range g {
		want := map[string]float64{"loopback read_bw": 0.55, "loopback write_bw": 0.60, "loopback-jumbo read_bw": 0.70}[x.row.Setup+" "+x.row.Test]
		if x.goal != want {
			t.Errorf("%s %s: goal %v, want %v", x.row.Setup, x.row.Test, x.goal, want)
		}
	}
	m, ok := goodputMetric("loopback", "read_bw")(rows)
	if !ok || m.value != "0.55 (4400 / 8000 MB/s)" || m.verdict != met {
		t.Errorf("metric %+v", m)
	}
	m, ok = goodputMetric("loopback-jumbo", "read_bw")(rows)
	if !ok || m.verdict != notMet {
		t.Errorf("jumbo metric %+v", m)
	}
}

// TestHeadlineNewestRun: each metric comes from the newest run that has
// its rows, whatever the order of the file.
func TestHeadlineNewestRun(t *testing.T) {
	rows := []Row{
		rw("onerma", "selftest", "read_bw", 64, ops(4.5e6), depth(64), runID("20261201T000000Z")),
		rw("aes-gcm-limit", "cpu-ipsec-mb", "seal_open", 4096, mbps(8000), runID("20261201T000000Z")),
		rw("onerma", "loopback", "read_bw", 4096, mbps(4000), depth(64), runID("20261130T000000Z")),
		rw("aes-gcm-limit", "cpu-ipsec-mb", "seal_open", 4096, mbps(10000), runID("20261130T000000Z")),
		rw("onerma", "selftest", "read_bw", 64, ops(3e6), depth(64), runID("20261130T000000Z")),
		rw("onerma", "selftest", "read_bw", 64, ops(1e6), depth(64), runID("20261129T000000Z")),
		rw("onerma", "selftest", "read_bw", 64, ops(9e6), depth(64)), // no run id: ignored
	}
	find := func(only, name string) headlineRow {
		for _, h := range headlineRows(rows) {
			if h.metric.only == only && strings.Contains(h.metric.name, name) {
				return h
			}
		}
		t.Fatalf("no metric %q of %s", name, only)
		return headlineRow{}
	}
	st := find("selftest", "64 B READ, loopback engine")
	if st.run != "20261201T000000Z" || st.value != "4.50 M ops/s" || st.verdict != met {
		t.Errorf("selftest: %+v", st)
	}
	gp := find("loopback,aes", "4 KB READ goodput")
	if gp.run != "20261130T000000Z" || gp.value != "0.40 (4000 / 10000 MB/s)" || gp.verdict != notMet {
		t.Errorf("goodput: %+v", gp)
	}
	sec := headlineSection(rows, "x.jsonl")
	if !strings.HasPrefix(sec, "<!-- headline: generated by rmabench results from x.jsonl; do not edit -->") || !strings.HasSuffix(sec, headlineEnd) {
		t.Errorf("section's markers:\n%s", sec)
	}
	if !strings.Contains(sec, "| not measured |") || strings.Count(sec, "\n| ") != len(headlineMetrics)+1 {
		t.Errorf("section's rows:\n%s", sec)
	}
}

func TestReplaceHeadline(t *testing.T) {
	sec := "<!-- headline: generated by rmabench results from a; do not edit -->\nT\n" + headlineEnd
	doc, err := replaceHeadline("# Title\n\nbody\n", sec)
	if want := "# Title\n\n" + sec + "\n\nbody\n"; err != nil || doc != want {
		t.Fatalf("inserted: %q, %v; want %q", doc, err, want)
	}
	sec2 := strings.Replace(sec, "T", "U", 1)
	doc2, err := replaceHeadline(doc, sec2)
	if want := "# Title\n\n" + sec2 + "\n\nbody\n"; err != nil || doc2 != want {
		t.Fatalf("replaced: %q, %v; want %q", doc2, err, want)
	}
	if _, err := replaceHeadline("# T\n<!-- headline: x -->\n", sec); err == nil {
		t.Error("a section without its end: no error")
	}
	if _, err := replaceHeadline("no title\n", sec); err == nil {
		t.Error("no section, no title: no error")
	}
}

func TestReadRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	data := `{"system":"a","setup":"s","test":"t","run":"r1"}` + "\n\n" + `{"system":"b","setup":"s","test":"t","run":"r1"}` + "\n" + `{"system":"c","se`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := readRows(path)
	if err != nil || len(rows) != 2 || rows[1].System != "b" {
		t.Fatalf("rows %+v, %v: want a and b, the cut last line skipped", rows, err)
	}
	if err := os.WriteFile(path, []byte("{bad\n"+data), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRows(path); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Errorf("a bad first line: %v", err)
	}
}

// TestStageTableSection: the first run's stage table beside the newest's,
// the newest's budgets; nothing without a stage table.
func TestStageTableSection(t *testing.T) {
	st := func(run, name string, ns float64, budget *float64) Row {
		return rw("onerma", "selftest-stages", "read_bw", 64, depth(64), runID(run), func(r *Row) {
			r.Stage, r.CPUNsPerOp, r.BudgetNs = name, benchrow.F(ns), budget
		})
	}
	rows := []Row{
		st("A", "build", 126, benchrow.F(19)), st("A", "total", 480, benchrow.F(250)),
		st("B", "build", 130, benchrow.F(20)), st("B", "total", 500, benchrow.F(250)),
		st("C", "build", 90, benchrow.F(21)), st("C", "total", 400, benchrow.F(250)),
		rw("onerma", "selftest-stages", "read_bw", 4096, depth(64), runID("D"), func(r *Row) { r.Stage, r.CPUNsPerOp = "build", benchrow.F(1) }),
	}
	s := stageTableSection(rows)
	for _, want := range []string{"first run that measured one (A) and the newest (C)", "| build | 21.0 | 126.0 | 90.0 |", "| total | 250.0 | 480.0 | 400.0 |"} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
	if s := stageTableSection(rows[len(rows)-1:]); s != "" {
		t.Errorf("a table from no 64 B stage rows:\n%s", s)
	}
}

// TestKVLookupMetric: onerma-kv-lookup over onerma-kv, round by round, in
// kv-ycsb-c only (not over memif, not kv-ycsb-b).
func TestKVLookupMetric(t *testing.T) {
	var rows []Row
	for _, f := range []float64{1.2, 1.5, 1.4} {
		run := runID("R")
		rows = append(rows,
			rw("onerma-kv", "kv-ycsb-c", "get", 1024, ops(1000), p50(10), run),
			rw("onerma-kv-lookup", "kv-ycsb-c", "get", 1024, ops(1000*f), p50(10/f), run),
			rw("onerma-kv-lookup", "kv-ycsb-c-memif", "get", 1024, ops(9999), p50(1), run),
			rw("onerma-kv-lookup", "kv-ycsb-b", "get", 1024, ops(1), p50(100), run))
	}
	m, ok := kvLookupMetric(1024, false)(rows)
	if !ok || m.value != "×1.40 (3 rounds)" || m.goal != "≥ ×1.30" || m.verdict != met {
		t.Errorf("GETs/s %+v", m)
	}
	m, ok = kvLookupMetric(1024, true)(rows)
	if !ok || !strings.HasPrefix(m.value, "×0.71 (3 rounds)") || m.goal != "≤ ×0.65" || m.verdict != notMet {
		t.Errorf("p50 %+v", m)
	}
	if _, ok := kvLookupMetric(32, false)(rows); ok {
		t.Error("a 32 B metric from 1 KB rows")
	}
}
