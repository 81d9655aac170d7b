package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onerma/onerma/internal/benchrow"
)

// TestFig8 draws Figure 8 from the newest run of kv-fig8 rows among
// others, and says so without failing when there are none.
func TestFig8(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	var lines []string
	add := func(r benchrow.Row) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	point := func(run, system string, offered, p50 float64, note string) benchrow.Row {
		return benchrow.Row{System: system, Setup: "kv-fig8", Test: "get", Size: 32, Outstanding: 16, Run: run,
			OfferedOpsPerSec: offered, OpsPerSec: offered, P50us: p50, P99us: benchrow.F(3 * p50), P999us: benchrow.F(5 * p50), Note: note}
	}
	add(point("20260101T000000Z", "memcached", 1000, 999, ""))
	add(benchrow.Row{System: "onerma", Setup: "loopback", Test: "read_bw", Run: "20270101T000000Z"})
	for i, f := range []float64{1000, 5000, 20000} {
		note := ""
		if i == 2 {
			note = "saturated"
		}
		add(point("20261126T010000Z", "memcached", f, 50+float64(i), note))
		add(point("20261126T010000Z", "redis", f, 60+float64(i), ""))
		kb := point("20261126T010000Z", "onerma-kv-lookup", f, 20+float64(i), "")
		kb.Size = 1024
		add(kb)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFig8(dir, path); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "fig8.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run 20261126T010000Z", "memcached: 5000 GETs/s served unsaturated, saturated at 20000 offered", "redis: 20000 GETs/s served unsaturated, never saturated", "## onerma-kv-lookup 1024 B"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("fig8.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "999.0") {
		t.Error("fig8.md holds a row of an older run")
	}
	if st, err := os.Stat(filepath.Join(dir, "fig8.png")); err != nil || st.Size() == 0 {
		t.Errorf("fig8.png: %v", err)
	}
	empty := filepath.Join(dir, "none.jsonl")
	os.WriteFile(empty, []byte(lines[1]+"\n"), 0o644)
	if err := writeFig8(t.TempDir(), empty); err != nil {
		t.Errorf("no kv-fig8 rows: %v, want nothing done", err)
	}
}
