package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry/probe"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"-pid", "7", "-delays", "remote, issue", "-count", "2"}, io.Discard)
	if err != nil || o.pid != 7 || o.count != 2 || len(o.kinds) != 2 || o.kinds[0] != probe.Remote || o.kinds[1] != probe.Issue {
		t.Fatalf("%+v, %v", o, err)
	}
	for _, bad := range [][]string{{"-delays", "total,queue"}, {"-interval", "0s"}, {"-count", "-1"}, {"-pid", "-3"}, {"extra"}} {
		if _, err := parse(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestReport: histograms come out ordered by op, status and delay, only
// the delays asked for, with their quantiles; the text form draws each
// from its first to its last non-empty bucket.
func TestReport(t *testing.T) {
	s := &probe.Snapshot{Hist: map[probe.Key]*probe.Histogram{}, Calls: 3, Samples: 30}
	add := func(op abi.Op, st abi.Status, k probe.Kind, counts map[int]uint64) {
		h := new(probe.Histogram)
		for b, c := range counts {
			h[b] = c
		}
		s.Hist[probe.Key{Op: uint8(op), Status: uint8(st), Kind: k}] = h
	}
	add(abi.OpWrite, abi.StatusOK, probe.Total, map[int]uint64{12: 10})
	add(abi.OpRead, abi.StatusTimeout, probe.Total, map[int]uint64{25: 2})
	add(abi.OpRead, abi.StatusOK, probe.Total, map[int]uint64{11: 8, 14: 2})
	add(abi.OpRead, abi.StatusOK, probe.Issue, map[int]uint64{3: 10})
	s.Bytes[abi.OpRead] = 2_000_000
	s.Cores = map[int]*probe.Core{1: {Calls: 1, Samples: 10}, 0: {Calls: 2, Samples: 20}}
	s.Cores[0].Bytes[abi.OpRead] = 2_000_000
	s.Cores[0].Total[abi.OpRead][11] = 20
	s.Cores[1].Total[abi.OpWrite][12] = 10

	r := report(time.Unix(0, 0), 2*time.Second, 42, s, []probe.Kind{probe.Total})
	var got []string
	for _, h := range r.Hist {
		got = append(got, h.Op+" "+h.Status+" "+h.Delay)
	}
	if want := "READ OK total,READ TIMEOUT total,WRITE OK total"; strings.Join(got, ",") != want {
		t.Fatalf("order %q, want %q", strings.Join(got, ","), want)
	}
	if h := r.Hist[0]; h.Count != 10 || h.P50Ns != 2048 || h.P99Ns != 16384 || len(h.Buckets) != probe.NumBuckets {
		t.Fatalf("READ OK: %+v", h)
	}
	if r.Bytes["READ"] != 2_000_000 || len(r.Bytes) != 1 || r.Samples != 30 || r.Batches != 3 {
		t.Fatalf("%+v", r)
	}
	if len(r.Cores) != 2 || r.Cores[0].Core != 0 || r.Cores[1].Core != 1 || r.Cores[0].Samples != 20 ||
		len(r.Cores[0].Total) != 1 || r.Cores[0].Total[0].Op != "READ" || r.Cores[0].Total[0].P99Ns != 2048 {
		t.Fatalf("cores %+v", r.Cores)
	}

	var b strings.Builder
	r.print(&b)
	out := b.String()
	for _, w := range []string{
		"engine 42  30 completions in 3 batches over 2.00s",
		"READ OK: 1.0 MB/s",
		"op = READ, status = OK: total delay, 10 ops, p50 < 2.05µs, p99 < 16.4µs",
		"      1024 -> 2047       : 8         |****************************************|",
		"      2048 -> 4095       : 0         |                                        |",
		"      8192 -> 16383      : 2         |**********                              |",
		"op = READ, status = TIMEOUT: total delay, 2 ops",
		"core 0: 20 completions in 2 batches; READ 1.0 MB/s, total delay p50 < 2.05µs, p99 < 2.05µs\n",
		"core 1: 10 completions in 1 batches; WRITE 0.0 MB/s, total delay p50 < 4.1µs, p99 < 4.1µs\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "  512 -> ") || strings.Contains(out, "16384 -> 32767") {
		t.Errorf("buckets outside the histogram's range drawn:\n%s", out)
	}
}
