package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onerma/onerma/internal/benchrow"
)

// TestFig14Reads: a READ runs from the probe after an OK to the next OK,
// the failures between retried; each failure is a point of its own.
func TestFig14Reads(t *testing.T) {
	tl := []benchrow.Probe{
		{AtUs: -40, LatUs: 20, Status: "OK"},
		{AtUs: -20, LatUs: 20, Status: "OK"},
		{AtUs: 0, LatUs: 8, Status: "REMOTE_AUTHENTICATION_FAILURE"},
		{AtUs: 8, LatUs: 9, Status: "REMOTE_AUTHENTICATION_FAILURE", New: true},
		{AtUs: 17, LatUs: 20, Status: "OK", New: true},
		{AtUs: 37, LatUs: 20, Status: "OK", New: true},
	}
	reads, failed := fig14Reads(tl)
	want := [][2]float64{{-40, 20}, {-20, 20}, {0, 37}, {37, 20}}
	if len(reads) != len(want) || len(failed) != 2 || failed[1].X != 8 || failed[1].Y != 9 {
		t.Fatalf("reads %v failed %v", reads, failed)
	}
	for i, w := range want {
		if reads[i].X != w[0] || reads[i].Y != w[1] {
			t.Errorf("read %d: %v, want %v", i, reads[i], w)
		}
	}
}

// TestFig14 draws Figure 14 from the newest run of fig14 rows among
// others, and says so without failing when there are none.
func TestFig14(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(path, []byte(`{"system":"onerma","setup":"memif","test":"read_lat","run":"20270101T000000Z"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFig14(dir, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "fig14.md")); !os.IsNotExist(err) {
		t.Fatalf("fig14.md written without fig14 rows: %v", err)
	}
	var lines []string
	add := func(r benchrow.Row) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	tl := func(gap float64) []benchrow.Probe {
		return []benchrow.Probe{{AtUs: -20, LatUs: 20, Status: "OK"}, {AtUs: 0, LatUs: 10, Status: "REMOTE_AUTHENTICATION_FAILURE"},
			{AtUs: gap, LatUs: 20, Status: "OK", New: true}, {AtUs: gap + 20, LatUs: 20, Status: "OK", New: true}}
	}
	old := "20261101T000000Z"
	add(benchrow.Row{System: "onerma", Setup: "fig14-driver", Test: "unavail", Run: old, P50us: 999, Timeline: tl(999)})
	run := "20261201T000000Z"
	for i, s := range []string{"fig14-driver", "fig14-rekey-op", "fig14-keyx"} {
		gap := []float64{11, 12, 3100}[i]
		add(benchrow.Row{System: "onerma", Setup: s, Test: "unavail", Run: run, P50us: gap, P99us: benchrow.F(gap + 1), P999us: benchrow.F(gap + 2), Ops: 50, Timeline: tl(gap)})
		add(benchrow.Row{System: "onerma", Setup: s, Test: "unavail_raw", Run: run, P50us: gap + 20, P999us: benchrow.F(gap + 30), Ops: 50})
		add(benchrow.Row{System: "onerma", Setup: s, Test: "probe_lat", Run: run, P50us: 20})
	}
	add(benchrow.Row{System: "onerma", Setup: "fig14-driver", Test: "rekey_call", Run: run, P50us: 45, P99us: benchrow.F(90)})
	add(benchrow.Row{System: "onerma", Setup: "fig14-keyx", Test: "keyx_fetch", Run: run, P50us: 3000, P99us: benchrow.F(4000)})
	add(benchrow.Row{System: "onerma", Setup: "fig14-rekey-op-neither", Test: "neither", Run: run, P50us: 0.7, P99us: benchrow.F(2), P999us: benchrow.F(2), Ops: 50, Errors: 0})
	add(benchrow.Row{System: "onerma", Setup: "fig14-rekey-call", Test: "rekey_call", Run: run, Cores: 2, P50us: 24, P99us: benchrow.F(80), P999us: benchrow.F(300), Ops: 2000})
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFig14(dir, path); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "fig14.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run " + run, "| 3100.0 / 3101.0 / 3102.0 | 3120.0 / 3130.0 | 20.0 | keyx_fetch 3000.0 / 4000.0 |",
		"rekey_call 45.0 / 90.0", "| fig14-rekey-op-neither | 0.70 / 2.0 / 2.0 | 0 | 50 |", "| 2 | 24.0 | 80.0 | 300.0 | 2000 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("fig14.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "999.0") {
		t.Error("fig14.md holds a row of an older run")
	}
	if st, err := os.Stat(filepath.Join(dir, "fig14.png")); err != nil || st.Size() == 0 {
		t.Errorf("fig14.png: %v", err)
	}
}

// TestFig14Flag: -fig14 names the rows to draw Figure 14 from, with -kv
// or alone.
func TestFig14Flag(t *testing.T) {
	o, err := parse([]string{"-out", "f", "-kv", "a.jsonl", "-fig14", "b.jsonl"}, &strings.Builder{})
	if err != nil || *o != (options{out: "f", kv: "a.jsonl", fig14: "b.jsonl", jobs: o.jobs}) {
		t.Errorf("%+v, %v", o, err)
	}
}
