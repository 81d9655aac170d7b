package telemetry_test

import (
	"math"
	"testing"

	"github.com/onerma/onerma/engine/telemetry"
)

// TestDelayBucket: every bucket's bounds, as Prometheus reads them (an
// inclusive upper bound le = 2^b ns), at and around each power of two.
func TestDelayBucket(t *testing.T) {
	for _, c := range []struct {
		ns   uint32
		want int
	}{{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {1000, 10}, {1024, 10}, {1025, 11}, {1 << 31, 31}, {1<<31 + 1, 32}, {math.MaxUint32, 32}} {
		if got := telemetry.DelayBucket(c.ns); got != c.want {
			t.Errorf("DelayBucket(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
	for b := range telemetry.DelayBuckets {
		le := telemetry.DelayBucketLeNs(b)
		if le <= math.MaxUint32 && telemetry.DelayBucket(uint32(le)) != b {
			t.Errorf("bucket %d: its upper bound %d ns falls in bucket %d", b, le, telemetry.DelayBucket(uint32(le)))
		}
		if b > 0 && telemetry.DelayBucket(uint32(le/2+1)) != b {
			t.Errorf("bucket %d: %d ns (just above the bucket below) falls in %d", b, le/2+1, telemetry.DelayBucket(uint32(le/2+1)))
		}
	}
}

// TestBatchFeedsDelays: a batch adds exactly the samples it flushes to
// its Delays, by op (ops beyond the range as op 0) and kind, with remote
// = total - issue (0 when issue is the larger), and nothing before it
// flushes.
func TestBatchFeedsDelays(t *testing.T) {
	var (
		b    telemetry.Batch
		d    telemetry.Delays
		want telemetry.Delays
	)
	b.SetDelays(&d)
	add := func(op int, kind telemetry.DelayKind, ns uint32) {
		want.Buckets[op][kind][telemetry.DelayBucket(ns)]++
		want.SumNs[op][kind] += uint64(ns)
	}
	const n = telemetry.BatchLen + 300 // one full batch flushed by Add, then a partial one
	for i := range n {
		s := telemetry.Sample{IssueNs: uint32(i * 37), TotalNs: uint32(i*i*11 + 5), Op: uint8(i % 6), Status: uint8(i % 3)}
		if i%50 == 0 {
			s.TotalNs = s.IssueNs / 2 // a total below issue: remote 0
		}
		b.Add(int64(i), s)
		op := int(s.Op)
		if op >= telemetry.DelayOps {
			op = 0
		}
		add(op, telemetry.DelayIssue, s.IssueNs)
		add(op, telemetry.DelayTotal, s.TotalNs)
		remote := uint32(0)
		if s.TotalNs > s.IssueNs {
			remote = s.TotalNs - s.IssueNs
		}
		add(op, telemetry.DelayRemote, remote)
	}
	var total uint64
	for op := range telemetry.DelayOps {
		total += d.Count(op)
	}
	if total != telemetry.BatchLen || b.Len() != 300 {
		t.Fatalf("before the second flush: %d samples in the histograms, %d pending; want %d and 300", total, b.Len(), telemetry.BatchLen)
	}
	b.Flush()
	if d != want {
		t.Fatalf("histograms differ from the samples'\n got %v\nwant %v", d, want)
	}
	if got := d.Count(0) + d.Count(1) + d.Count(2) + d.Count(3) + d.Count(4); got != n || b.Samples != n {
		t.Fatalf("%d samples counted, batch handed over %d; want %d", got, b.Samples, n)
	}
}

// TestDelaysAddAllocs: the core's per-batch cost allocates nothing.
func TestDelaysAddAllocs(t *testing.T) {
	var (
		b telemetry.Batch
		d telemetry.Delays
	)
	b.SetDelays(&d)
	if a := testing.AllocsPerRun(100, func() {
		for i := range telemetry.BatchLen {
			b.Add(int64(i), telemetry.Sample{IssueNs: 800, TotalNs: 9000, Op: 1})
		}
	}); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

// BenchmarkDelaysAdd is what keeping the histograms costs the engine per
// completion (one full batch per iteration, reported per sample).
func BenchmarkDelaysAdd(b *testing.B) {
	s := make([]telemetry.Sample, telemetry.BatchLen)
	for i := range s {
		s[i] = telemetry.Sample{IssueNs: uint32(300 + i*7), TotalNs: uint32(4000 + i*131), Op: uint8(1 + i%2)}
	}
	var d telemetry.Delays
	b.ReportAllocs()
	for b.Loop() {
		d.Add(s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(s)), "ns/sample")
}
