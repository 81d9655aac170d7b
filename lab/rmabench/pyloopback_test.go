package main

import (
	"testing"

	"github.com/onerma/onerma/internal/benchrow"
)

// TestPyLoopbackSummary: the medians of each client's rows of one test
// over the rounds, rows of other setups, tests and systems left out.
func TestPyLoopbackSummary(t *testing.T) {
	row := func(system, setup, test string, depth int, ops, p50, cpu float64) Row {
		return Row{System: system, Setup: setup, Test: test, Size: 64, Outstanding: depth, OpsPerSec: ops, P50us: p50, CPUNsPerOp: benchrow.F(cpu)}
	}
	bw := pyLoopbackSpecs[0]
	rows := []Row{
		row("onerma-python", "python-loopback", "read_bw", 64, 200e3, 300, 2000),
		row("onerma-c", "python-loopback", "read_bw", 64, 900e3, 60, 300),
		row("onerma-c", "python-loopback", "read_bw", 64, 1000e3, 50, 250),
		row("onerma-python", "python-loopback", "read_bw", 64, 100e3, 500, 3000),
		row("onerma-python", "python-loopback", "read_bw", 64, 150e3, 400, 2500),
		row("onerma-c", "python-loopback", "read_bw", 64, 800e3, 70, 350),
		row("onerma-python", "c-loopback", "read_bw", 64, 1, 1, 1),
		row("onerma-python", "python-loopback", "read_lat", 1, 50e3, 4, 9000),
		row("onerma", "python-loopback", "read_bw", 64, 1, 1, 1),
	}
	s, ok := summarizePyLoopback(rows, bw)
	want := pySummary{rounds: 3, opsPy: 150e3, opsC: 900e3, p50Py: 400, p50C: 60, cpuPy: 2500, cpuC: 300}
	if !ok || s != want {
		t.Fatalf("summary %+v, %v; want %+v", s, ok, want)
	}
	if _, ok := summarizePyLoopback(rows, pyLoopbackSpecs[1]); ok {
		t.Fatal("read_lat has no onerma-c row: no summary")
	}
}
