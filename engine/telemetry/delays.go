package telemetry

import (
	"math/bits"
	"strconv"
)

// DelayKind is which delay of a completion a histogram counts.
type DelayKind uint8

const (
	DelayIssue  DelayKind = 0 // issue_delay: post to entering service (local queueing)
	DelayTotal  DelayKind = 1 // total_delay: post to completion
	DelayRemote DelayKind = 2 // total - issue (0 when issue exceeds total): the fabric and the remote engine
	// NumDelayKinds bounds DelayKind values.
	NumDelayKinds = 3
)

func (k DelayKind) String() string {
	switch k {
	case DelayIssue:
		return "issue"
	case DelayTotal:
		return "total"
	case DelayRemote:
		return "remote"
	}
	return "DelayKind(" + strconv.Itoa(int(k)) + ")"
}

// DelayOps is the number of ops Delays keeps apart: abi.Op values 0-4
// (READ 1, WRITE 2, REKEY 3, LOOKUP 4). A sample of any other op is
// counted as op 0, as Stats.CompletedByOp counts commands that named no
// valid op.
const DelayOps = 5

// DelayBuckets is the number of log2 buckets of a Delays histogram:
// bucket 0 counts delays of at most 1 ns, bucket b > 0 delays d with
// 2^(b-1) < d <= 2^b ns, so bucket b's inclusive upper bound is 2^b ns
// (Prometheus's "le") and bucket 32 holds everything up to the largest
// uint32 delay (4.3 s).
const DelayBuckets = 33

// Delays are one engine core's delay histograms: per op and kind, log2
// buckets (DelayBuckets) and the sum of the delays. A Batch given one
// with SetDelays adds each batch to it as it hands the batch to Hook, so
// the histograms trail the completions by at most BatchLen completions
// or FlushNs. Like the Batch, it is owned by the core's goroutine: read
// it there (runner.Exec) and copy it out; the copy is a plain value.
type Delays struct {
	Buckets [DelayOps][NumDelayKinds][DelayBuckets]uint64
	SumNs   [DelayOps][NumDelayKinds]uint64 // 2^64 ns is 584 years
}

// DelayBucket is the bucket a delay of ns falls in.
func DelayBucket(ns uint32) int {
	if ns <= 1 {
		return 0
	}
	return bits.Len32(ns - 1)
}

// DelayBucketLeNs is bucket b's inclusive upper bound in ns.
func DelayBucketLeNs(b int) uint64 { return 1 << b }

// Add counts samples. It is the engine's per-batch cost of the
// histograms: a few ns a sample, no allocation (TestDelaysAddAllocs,
// BenchmarkDelaysAdd).
func (d *Delays) Add(samples []Sample) {
	for i := range samples {
		s := &samples[i]
		op := s.Op
		if op >= DelayOps {
			op = 0
		}
		issue, total := s.IssueNs, s.TotalNs
		remote := uint32(0)
		if total > issue {
			remote = total - issue
		}
		b, sum := &d.Buckets[op], &d.SumNs[op]
		b[DelayIssue][DelayBucket(issue)]++
		b[DelayTotal][DelayBucket(total)]++
		b[DelayRemote][DelayBucket(remote)]++
		sum[DelayIssue] += uint64(issue)
		sum[DelayTotal] += uint64(total)
		sum[DelayRemote] += uint64(remote)
	}
}

// Count is the number of samples of op counted (every kind counts each
// sample once).
func (d *Delays) Count(op int) uint64 {
	var n uint64
	for _, c := range d.Buckets[op][DelayTotal] {
		n += c
	}
	return n
}
