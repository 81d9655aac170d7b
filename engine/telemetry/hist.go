package telemetry

import (
	"math"
	"math/bits"
)

// Hist is a log-linear latency histogram (HDR-style): 64 linear
// sub-buckets per power of two, so any quantile is within 1/64 (1.6 %) of
// the true value. Fixed size (32 KB), no allocation per sample: the
// engine's op generator (engine/opgen.SelfTest) keeps one per core,
// rmaperf one per measurement.
type Hist struct {
	counts [64 * 64]uint64
	n      uint64
	max    uint64
}

const subBits = 6

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits // >= 1
	return e<<subBits | int(v>>(e-1))&(1<<subBits-1)
}

// lowOf is the smallest value in bucket b.
func lowOf(b int) uint64 {
	e, m := b>>subBits, uint64(b&(1<<subBits-1))
	if e == 0 {
		return m
	}
	return (1<<subBits | m) << (e - 1)
}

// Add counts one sample.
func (h *Hist) Add(v uint64) {
	b := bucketOf(v)
	if b >= len(h.counts) {
		b = len(h.counts) - 1
	}
	h.counts[b]++
	h.n++
	h.max = max(h.max, v)
}

// N is the number of samples.
func (h *Hist) N() uint64 { return h.n }

// Max is the largest sample (0: none).
func (h *Hist) Max() uint64 { return h.max }

// Quantile returns the value below which a fraction q of samples lie
// (bucket midpoint, at most Max; 0 without samples).
func (h *Hist) Quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := lowOf(b), lowOf(b+1)
			return min((lo+hi)/2, h.max)
		}
	}
	return h.max
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}
