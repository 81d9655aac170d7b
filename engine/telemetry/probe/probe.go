// Package probe loads rmatop's BPF program (bpf/delay.bpf.c) into the kernel
// and attaches it as an entry uprobe to the telemetry hook
// (engine/telemetry.Hook) of a running engine: every batch of delay
// samples the engine hands to the hook is added, in the kernel, to log2
// histograms of issue, total and remote delay per op and status. A
// Snapshot reads them out; two snapshots' difference is an interval's.
//
// The program reads only the n samples the engine wrote: the rest of a
// fresh batch may be pages never touched, which a BPF program cannot fault
// in. Its map hist is a plain array (BPF_F_MMAPABLE) of op (4) × status
// (64) × delay kind (3) × 33 log2 buckets: the verifier inlines array
// lookups, and a Snapshot reads all of it with one copy from the mapping.
// Samples outside that range are counted (out_of_range), as are batches
// that could not be read. Beside it, core_total (core (64) × op × 33
// buckets of total delay, every status) and core_counts (each core's
// batches, completions and OK bytes by op) count every batch by the core
// the hook names, so rmatop shows each core beside the engine. The
// engine's own side of the count is delay_batches and delay_samples in
// its stats.
//
// Needs root (CAP_BPF and CAP_PERFMON) and a kernel with uprobes; the BPF
// object is compiled by `make bpf` and embedded.
package probe

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/onerma/onerma/engine/telemetry"
)

//go:embed bpf/delay.bpf.o
var object []byte

// NumBuckets is the number of log2 buckets of a histogram: bucket 0 holds
// 0 ns, bucket b > 0 holds [2^(b-1), 2^b) ns.
const NumBuckets = 33

// Kind is which delay a histogram measures.
type Kind uint8

const (
	Issue  Kind = 0 // issue_delay: post to entering service (local queueing)
	Total  Kind = 1 // total_delay: post to completion
	Remote Kind = 2 // total - issue: the fabric and the remote engine
)

func (k Kind) String() string {
	switch k {
	case Issue:
		return "issue"
	case Total:
		return "total"
	case Remote:
		return "remote"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Key names one histogram.
type Key struct {
	Op     uint8 // abi.Op
	Status uint8 // abi.Status
	Kind   Kind
}

// Histogram counts samples per log2 bucket (NumBuckets).
type Histogram [NumBuckets]uint64

// Count is the number of samples.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Add counts one delay of ns, in the bucket the BPF program would put it
// in (bpf/delay.bpf.c: bucket): 0 for 0, else floor(log2(ns)) + 1.
func (h *Histogram) Add(ns uint32) { h[bits.Len32(ns)]++ }

// BucketRange is bucket b's range in ns: [lo, hi).
func BucketRange(b int) (lo, hi uint64) {
	if b == 0 {
		return 0, 1
	}
	return 1 << (b - 1), 1 << b
}

// Quantile is an upper bound of the q-quantile (0 < q <= 1) in ns: the
// upper end of the bucket it falls in; 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) uint64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for b, c := range h {
		if seen += c; seen >= want && c > 0 {
			_, hi := BucketRange(b)
			return hi
		}
	}
	_, hi := BucketRange(NumBuckets - 1)
	return hi
}

// The histograms' range (bpf/delay.bpf.c): ops and statuses beyond it are
// counted in Snapshot.OutOfRange, not in a histogram; batches of cores
// beyond it in Snapshot.BadCore, not per core.
const (
	NumOps    = 4  // abi.Op values 0-3
	NumStatus = 64 // abi.Status values 0-63
	NumCores  = 64 // wire.MaxCores
	numKinds  = 3
)

// Core is one engine core's share of a Snapshot.
type Core struct {
	Calls, Samples uint64            // hook hits and completions of this core
	Bytes          [NumOps]uint64    // moved by OK ops, by op
	Total          [NumOps]Histogram // total delay by op, every status
}

// Snapshot is the probe's state at one moment.
type Snapshot struct {
	Hist map[Key]*Histogram // the non-empty histograms
	// Bytes moved by OK ops, by op.
	Bytes [NumOps]uint64
	// Calls: hook hits; Samples: completions read; ReadErrors: batches
	// the program could not read; Clamped: hook calls with n over
	// BatchLen; OutOfRange: samples with an op or status beyond the
	// histograms' range (none from a well-formed engine); BadCore: hook
	// calls naming a core beyond NumCores.
	Calls, Samples, ReadErrors, Clamped, OutOfRange, BadCore uint64
	// Cores are the cores that reported, by core index.
	Cores map[int]*Core
}

// Sub returns s minus an earlier snapshot of the same probe.
func (s *Snapshot) Sub(prev *Snapshot) *Snapshot {
	d := &Snapshot{
		Hist:       make(map[Key]*Histogram, len(s.Hist)),
		Calls:      s.Calls - prev.Calls,
		Samples:    s.Samples - prev.Samples,
		ReadErrors: s.ReadErrors - prev.ReadErrors,
		Clamped:    s.Clamped - prev.Clamped,
		OutOfRange: s.OutOfRange - prev.OutOfRange,
		BadCore:    s.BadCore - prev.BadCore,
		Cores:      make(map[int]*Core, len(s.Cores)),
	}
	for i := range s.Bytes {
		d.Bytes[i] = s.Bytes[i] - prev.Bytes[i]
	}
	for k, c := range s.Cores {
		p := prev.Cores[k]
		if p == nil {
			p = new(Core)
		}
		dc := &Core{Calls: c.Calls - p.Calls, Samples: c.Samples - p.Samples}
		for op := range NumOps {
			dc.Bytes[op] = c.Bytes[op] - p.Bytes[op]
			for b := range NumBuckets {
				dc.Total[op][b] = c.Total[op][b] - p.Total[op][b]
			}
		}
		if dc.Calls > 0 {
			d.Cores[k] = dc
		}
	}
	for k, h := range s.Hist {
		var dh Histogram
		p := prev.Hist[k]
		for b := range h {
			if dh[b] = h[b]; p != nil {
				dh[b] -= p[b]
			}
		}
		if dh.Count() > 0 {
			d.Hist[k] = &dh
		}
	}
	return d
}

// histIndex is a histogram's first counter in the hist array.
func histIndex(k Key) int {
	return ((int(k.Op)*NumStatus+int(k.Status))*numKinds + int(k.Kind)) * NumBuckets
}

// Counter indices in the counters map (bpf/delay.bpf.c).
const (
	cCalls = iota
	cSamples
	cReadErrors
	cClamped
	cOutOfRange
	cBadCore
	numCounters
)

// Per-core counters: core_counts[core*ccN + i] (bpf/delay.bpf.c).
const (
	ccCalls = iota
	ccSamples
	ccBytes // NumOps of them, by op
	ccN     = ccBytes + NumOps
)

// coreIndex is core's first total-delay counter of op in core_total.
func coreIndex(core, op int) int { return (core*NumOps + op) * NumBuckets }

// Probe is the BPF program attached to one engine process.
type Probe struct {
	coll       *ebpf.Collection
	up         link.Link
	hist       *ebpf.Memory // the hist array, mapped
	coreTotal  *ebpf.Memory // core_total, mapped
	coreCounts *ebpf.Memory // core_counts, mapped
	buf        []byte
	coreBuf    []byte
}

// Attach loads the program and attaches it to the telemetry hook in the
// executable exe (found by its symbol, HookSymbol), for process pid only
// (0: every process running exe).
func Attach(exe string, pid int) (*Probe, error) { return attach(exe, pid, 0) }

// AttachAt is Attach for an executable without a symbol table (`go test`
// strips the binaries it runs): the hook is at file offset off of exe.
func AttachAt(exe string, pid int, off uint64) (*Probe, error) {
	if off == 0 {
		return nil, errors.New("probe: file offset 0")
	}
	return attach(exe, pid, off)
}

func attach(exe string, pid int, off uint64) (*Probe, error) {
	if err := rlimit.RemoveMemlock(); err != nil { // kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK
		return nil, fmt.Errorf("probe: memlock: %w", err)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(object))
	if err != nil {
		return nil, fmt.Errorf("probe: BPF object: %w", err)
	}
	if got := spec.Maps["scratch"].ValueSize; got != telemetry.BatchLen*telemetry.SampleSize {
		return nil, fmt.Errorf("probe: BPF object's batch is %d bytes, the engine's %d: rebuild it (make bpf)", got, telemetry.BatchLen*telemetry.SampleSize)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("probe: the verifier refused the program: %+v", ve)
		}
		return nil, fmt.Errorf("probe: load: %w", err)
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("probe: %w", err)
	}
	up, err := ex.Uprobe(telemetry.HookSymbol, coll.Programs["delay_batch"], &link.UprobeOptions{PID: pid, Address: off})
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("probe: uprobe on %s in %s: %w", telemetry.HookSymbol, exe, err)
	}
	p := &Probe{coll: coll, up: up}
	for _, m := range []struct {
		name string
		mem  **ebpf.Memory
		want int
	}{
		{"hist", &p.hist, NumOps * NumStatus * numKinds * NumBuckets * 8},
		{"core_total", &p.coreTotal, NumCores * NumOps * NumBuckets * 8},
		{"core_counts", &p.coreCounts, NumCores * ccN * 8},
	} {
		if *m.mem, err = coll.Maps[m.name].Memory(); err == nil && int((*m.mem).Size()) < m.want {
			err = fmt.Errorf("%d bytes, want %d", (*m.mem).Size(), m.want)
		}
		if err != nil {
			up.Close()
			coll.Close()
			return nil, fmt.Errorf("probe: map %s: %w", m.name, err)
		}
	}
	p.buf = make([]byte, p.hist.Size())
	p.coreBuf = make([]byte, max(p.coreTotal.Size(), p.coreCounts.Size()))
	return p, nil
}

// Close detaches the probe and frees its maps.
func (p *Probe) Close() error {
	err := p.up.Close()
	p.coll.Close()
	return err
}

// Snapshot reads the histograms and counters. The program counts a
// batch's samples after it has added them to the histograms, so the
// counters are read first: every sample they count is in the histograms
// read after them.
func (p *Probe) Snapshot() (*Snapshot, error) {
	s := &Snapshot{Hist: make(map[Key]*Histogram), Cores: make(map[int]*Core)}
	var c [numCounters]uint64
	for i := range c {
		if err := p.coll.Maps["counters"].Lookup(uint32(i), &c[i]); err != nil {
			return nil, fmt.Errorf("probe: read counters: %w", err)
		}
	}
	s.Calls, s.Samples, s.ReadErrors, s.Clamped, s.OutOfRange, s.BadCore = c[cCalls], c[cSamples], c[cReadErrors], c[cClamped], c[cOutOfRange], c[cBadCore]
	if err := p.readCores(s); err != nil {
		return nil, err
	}
	for i := range s.Bytes {
		if err := p.coll.Maps["bytes"].Lookup(uint32(i), &s.Bytes[i]); err != nil {
			return nil, fmt.Errorf("probe: read bytes: %w", err)
		}
	}
	if _, err := p.hist.ReadAt(p.buf, 0); err != nil {
		return nil, fmt.Errorf("probe: read histograms: %w", err)
	}
	for op := range NumOps {
		for st := range NumStatus {
			for kind := range Kind(numKinds) {
				k := Key{Op: uint8(op), Status: uint8(st), Kind: kind}
				var h Histogram
				for b, i := 0, histIndex(k); b < NumBuckets; b, i = b+1, i+1 {
					h[b] = binary.NativeEndian.Uint64(p.buf[8*i:])
				}
				if h.Count() > 0 {
					s.Hist[k] = &h
				}
			}
		}
	}
	return s, nil
}

// readCores reads the per-core counters into s.Cores (the cores that have
// called the hook), counts before histograms as Snapshot does.
func (p *Probe) readCores(s *Snapshot) error {
	u := func(i int) uint64 { return binary.NativeEndian.Uint64(p.coreBuf[8*i:]) }
	if _, err := p.coreCounts.ReadAt(p.coreBuf[:p.coreCounts.Size()], 0); err != nil {
		return fmt.Errorf("probe: read per-core counters: %w", err)
	}
	for k := range NumCores {
		if calls := u(k*ccN + ccCalls); calls > 0 {
			c := &Core{Calls: calls, Samples: u(k*ccN + ccSamples)}
			for op := range NumOps {
				c.Bytes[op] = u(k*ccN + ccBytes + op)
			}
			s.Cores[k] = c
		}
	}
	if _, err := p.coreTotal.ReadAt(p.coreBuf[:p.coreTotal.Size()], 0); err != nil {
		return fmt.Errorf("probe: read per-core histograms: %w", err)
	}
	for k, c := range s.Cores {
		for op := range NumOps {
			for b, i := 0, coreIndex(k, op); b < NumBuckets; b, i = b+1, i+1 {
				c.Total[op][b] = u(i)
			}
		}
	}
	return nil
}
