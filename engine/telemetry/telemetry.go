// Package telemetry is the engine's delay telemetry hook: each
// engine core records one Sample per completion it writes (op, status,
// issue_delay, total_delay) into a Batch, and hands full batches, or the
// samples of the last millisecond, to Hook: a function that does nothing.
// rmatop attaches a uprobe to Hook (engine/telemetry/probe), whose BPF
// program reads the batch from the engine's memory and aggregates log2
// histograms in a map. A uprobe hit traps into the kernel (tens of µs:
// bench/RESULTS.md, "telemetry"), so the hook is called at most once per
// BatchLen completions or per FlushNs, never per op: at 2 M ops/s that is
// ~2k calls a second. With no probe attached a call is a call to an empty
// function.
//
// A Batch may also add each batch it flushes to Delays, log2 histograms
// of the delays by op that the driver reads on the core's goroutine and
// exports (rmad -metrics: engine/metrics): the engine never records a
// delay anywhere but in its batch.
//
// The package imports nothing of ours: the engine (whose core imports only
// leaves) and the probe (which links cilium/ebpf) share the layout
// through it.
package telemetry

import "unsafe"

// Sample is one completion's delays. Its layout is read by the BPF program
// (probe/bpf/delay.bpf.c, struct sample): 16 bytes, little endian.
type Sample struct {
	IssueNs uint32 // issue_delay: post to entering service
	TotalNs uint32 // total_delay: post to completion
	Op      uint8  // abi.Op
	Status  uint8  // abi.Status
	_       uint16
	Length  uint32 // bytes moved (0 unless OK)
}

// SampleSize is Sample's size in bytes, as the BPF program reads it.
const SampleSize = 16

// BatchLen is the number of samples a Batch holds; the BPF program walks
// at most this many per hook call.
const BatchLen = 1024

// FlushNs: a Batch holding samples older than this is due (Due).
const FlushNs = 1_000_000

// HookSymbol is Hook's symbol in the ELF of a binary that links it (rmad):
// where rmatop attaches its uprobe.
const HookSymbol = "github.com/onerma/onerma/engine/telemetry.Hook"

// Batch collects a core's samples. Zero value ready; owned by one
// goroutine (the core's).
type Batch struct {
	s     [BatchLen]Sample
	n     int
	since int64 // the clock when the oldest unflushed sample was added
	core  uint16
	// delays, if set, gets every batch before Hook does (SetDelays).
	delays *Delays

	// Flushes counts Hook calls, Samples the samples handed over.
	Flushes, Samples uint64
}

// SetCore names the core whose samples these are (Hook's third argument).
func (b *Batch) SetCore(core uint16) { b.core = core }

// SetDelays makes every Flush add its samples to d first (nil: none).
// Histograms kept this way cost the core one pass over each batch, not
// work per completion, and nothing more per sample than Delays.Add.
func (b *Batch) SetDelays(d *Delays) { b.delays = d }

// Add records one completion at time now (ns, the core's clock); a full
// batch is handed to Hook at once.
func (b *Batch) Add(now int64, s Sample) {
	if b.n == 0 {
		b.since = now
	}
	b.s[b.n] = s
	b.n++
	if b.n == BatchLen {
		b.Flush()
	}
}

// Due reports whether the batch holds samples added FlushNs or more ago.
func (b *Batch) Due(now int64) bool { return b.n > 0 && now-b.since >= FlushNs }

// Len is the number of samples not yet handed to Hook.
func (b *Batch) Len() int { return b.n }

// Pending are the samples not yet handed to Hook (valid until the next
// Add or Flush).
func (b *Batch) Pending() []Sample { return b.s[:b.n] }

// Oldest is the clock when the oldest pending sample was added.
func (b *Batch) Oldest() int64 { return b.since }

// Flush adds the samples recorded so far to the Delays given to
// SetDelays, hands them to Hook and empties the batch.
func (b *Batch) Flush() {
	if b.n == 0 {
		return
	}
	if b.delays != nil {
		b.delays.Add(b.s[:b.n])
	}
	Hook(&b.s, b.n, int(b.core))
	b.Flushes++
	b.Samples += uint64(b.n)
	b.n = 0
}

// Hook is where the probe attaches: samples[:n] are the batch (the BPF
// program reads them from AX and BX, Go's register ABI), core is the
// engine core's index (CX). noinline keeps it a real call with its
// arguments in registers: the compiler does not remove a call it may not
// inline, even to an empty function.
//
//go:noinline
func Hook(samples *[BatchLen]Sample, n, core int) {}

var _ [SampleSize - unsafe.Sizeof(Sample{})]struct{}
var _ [unsafe.Sizeof(Sample{}) - SampleSize]struct{}
