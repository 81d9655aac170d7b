package main

import (
	"math"
	"strings"
	"testing"
)

// TestLoopShares: perf's report lines are sorted into the clock, the
// crossings, the yields (the kernel's [k] samples among them) and the
// rest, as shares of every sample listed; lines that are no samples are
// skipped.
func TestLoopShares(t *testing.T) {
	report := `
# comment
    40.00%  [.] aes_gcm_enc_128_vaes_avx512
    10.00%  [.] github.com/onerma/onerma/engine.(*Core).Poll
     5.00%  [.] __vdso_clock_gettime
     2.00%  [.] runtime.nanotime1.abi0
     3.00%  [.] github.com/onerma/onerma/internal/tsc.Read.abi0
     4.00%  [.] runtime.entersyscall
     2.00%  [.] runtime.cgoCheckArg
     1.00%  [.] runtime.inHeapOrStack
     1.00%  [.] _cgo_topofstack
     2.00%  [.] _cgo_fe4405694f6a_Cfunc_onerma_port_io_addr
     6.00%  [k] __schedule
     1.00%  [.] internal/runtime/syscall/linux.Syscall6
     3.00%  [.] runtime.memmove
`
	sh, err := loopShares([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	total := 80.0
	want := map[string]float64{loopClock: 10 / total, loopCrossings: 10 / total, loopYields: 7 / total, loopOther: 53 / total}
	for k, v := range want {
		if math.Abs(sh[k]-v) > 1e-9 {
			t.Errorf("%s: share %.4f, want %.4f", k, sh[k], v)
		}
	}
	if _, err := loopShares([]byte("no samples\n")); err == nil {
		t.Error("a report without samples gave shares")
	}
}

// TestABLoopRounds: a run's loop rows pair into rounds in the order they
// ran, whichever build ran first; the metric is the median over rounds
// of the new build's clock and crossings over the old build's.
func TestABLoopRounds(t *testing.T) {
	row := func(system string, clock, cross, yields float64) Row {
		return Row{System: system, Setup: abLoopSetup, Test: "read_bw", Size: 512, Outstanding: 16,
			LoopNs: map[string]float64{loopClock: clock, loopCrossings: cross, loopYields: yields, loopOther: 300, loopIteration: 300 + clock + cross + yields}}
	}
	rows := []Row{
		row(abOldSystem, 30, 30, 10), row(abNewSystem, 10, 20, 10), // 0.5
		{System: abNewSystem, Setup: "ab", Test: "read_bw", Size: 64}, // not a loop row
		row(abNewSystem, 15, 21, 10), row(abOldSystem, 30, 30, 10),    // 0.6
		row(abOldSystem, 40, 40, 10), row(abNewSystem, 10, 22, 10), // 0.4
	}
	rds := abLoopRounds(rows)
	if len(rds) != 3 {
		t.Fatalf("%d rounds, want 3", len(rds))
	}
	for i, rd := range rds {
		if rd.old.System != abOldSystem || rd.new.System != abNewSystem {
			t.Errorf("round %d: old %s, new %s", i+1, rd.old.System, rd.new.System)
		}
	}
	s, ok := summarizeABLoop(rows)
	if !ok || math.Abs(s.ratio-0.5) > 1e-9 {
		t.Fatalf("median ratio %.3f (%v), want 0.5", s.ratio, ok)
	}
	m, ok := abLoopMetric(rows)
	if !ok || m.verdict != met || !strings.HasPrefix(m.value, "0.50 (3 rounds") {
		t.Errorf("metric %+v", m)
	}
	if _, ok := abLoopMetric(rows[2:3]); ok {
		t.Error("a run without loop rows has the metric")
	}
}
