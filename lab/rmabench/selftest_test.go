package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/onerma/onerma/engine/stage"
)

// testReport is a stage table as rmad -selftest -profile makes it: 10 ops
// at 2 GHz, a 250 ns budget (seal 40, open 30 measured).
func testReport() *stage.Report {
	var d stage.Snapshot
	d.Cycles[stage.Receive], d.Sections[stage.Receive] = 3000, 10
	d.Cycles[stage.Open] = 800
	d.Cycles[stage.Protocol] = 1000
	d.Cycles[stage.Build] = 2000
	d.Cycles[stage.Seal] = 600
	d.Cycles[stage.Transmit] = 300
	d.Cycles[stage.Clock] = 100
	d.Frames = 20
	d.Now = 3900 // ns: all 7800 cycles charged
	r := stage.NewReport(d, 10, 2e9, stage.Budget{TargetNs: 250, Target: "4.0 M ops/s", SealNs: 40, OpenNs: 30})
	return &r
}

// TestParseSelfTest: rmad -selftest -json's line, with and without
// -profile's table.
func TestParseSelfTest(t *testing.T) {
	row := Row{System: "onerma", Test: "read_bw", Size: 64, Outstanding: 64, Cores: 1, OpsPerSec: 3e6, Ops: 9e6}
	b, _ := json.Marshal(struct {
		Row
		Stages *stage.Report `json:"stages,omitempty"`
	}{row, testReport()})
	r, st, err := parseSelfTest(b)
	if err != nil || r.OpsPerSec != 3e6 || r.Ops != 9e6 || st == nil || len(st.Rows) != len(testReport().Rows) || st.Budget.TargetNs != 250 {
		t.Fatalf("%v: %+v, %+v", err, r, st)
	}
	plain, _ := json.Marshal(row)
	if r, st, err := parseSelfTest(plain); err != nil || st != nil || r.Size != 64 {
		t.Fatalf("without stages: %v %+v %+v", err, r, st)
	}
	if _, _, err := parseSelfTest([]byte("rmad: no")); err == nil {
		t.Fatal("junk parsed")
	}
}

// TestStageRows: one row per line of the table, the run's fields
// repeated, the costs and budgets in their fields; and the summaries the
// headline and the run's printout take from them.
func TestStageRows(t *testing.T) {
	run := Row{System: "onerma", Setup: "selftest", Test: "read_bw", Size: 64, Outstanding: 64, Cores: 1, OpsPerSec: 3e6, Command: "rmad -selftest"}
	rows := stageRows(run, testReport())
	if len(rows) != len(testReport().Rows) {
		t.Fatalf("%d rows", len(rows))
	}
	byStage := map[string]Row{}
	for _, r := range rows {
		if r.Setup != "selftest-stages" || r.Test != "read_bw" || r.Size != 64 || r.Outstanding != 64 || r.OpsPerSec != 3e6 || r.Ops != 10 ||
			(r.Command != "") != (r.Stage == "total") || r.CPUNsPerOp == nil || r.CyclesPerOp == nil || r.Stage == "" {
			t.Errorf("row %+v", r)
		}
		byStage[r.Stage] = r
	}
	rc := byStage["receive"]
	if *rc.CyclesPerOp != 300 || *rc.CPUNsPerOp != 150 || *rc.BudgetNs != 30 || !strings.Contains(rc.Note, "+120.0 ns per op against its budget") {
		t.Errorf("receive %+v %v", rc, *rc.BudgetNs)
	}
	if tot := byStage["total"]; *tot.CPUNsPerOp != 390 || *tot.BudgetNs != 250 || !strings.Contains(tot.Note, "budget from 4.0 M ops/s") || tot.Command != run.Command {
		t.Errorf("total %+v", tot)
	}
	if byStage["idle"].BudgetNs != nil {
		t.Error("idle budgeted")
	}
	if stageRows(run, nil) != nil {
		t.Error("rows of no table")
	}

	// Two runs' tables in one list: each summarised on its own.
	rows2 := stageRows(run, testReport())
	*rows2[3].CPUNsPerOp = 500 // build, the second run: 470 over its 30
	all := append(append(append([]Row{run}, rows...), run), rows2...)
	ss := stageSummaries(all, "selftest-stages", "read_bw", 64, 64, 1)
	if len(ss) != 2 || ss[0].worst.Stage != "receive" || ss[0].over() != 120 || ss[1].worst.Stage != "build" || ss[1].over() != 470 {
		t.Fatalf("summaries %+v", ss)
	}
	if len(stageSummaries(all, "selftest-stages", "read_bw", 64, 16, 1)) != 0 {
		t.Error("a summary of another depth")
	}

	m, ok := stageMetric("selftest-stages")(all)
	if !ok || m.verdict != notMet || !strings.HasPrefix(m.value, "build: 500.0 ns per op, +470.0 over its 30.0") {
		t.Errorf("metric %+v %v", m, ok)
	}
	if _, ok := stageMetric("selftest-memif-stages")(all); ok {
		t.Error("a metric of no memif rows")
	}
}
