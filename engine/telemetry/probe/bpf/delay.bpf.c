// SPDX-License-Identifier: (MIT OR GPL-2.0)
// rmatop's BPF program: an entry uprobe on the engine's telemetry hook
// (engine/telemetry.Hook(samples *[1024]Sample, n, core int), Go's register
// ABI: AX, BX, CX). It copies the batch out of the engine's memory in one
// read and adds each sample's issue, total and remote delay to log2
// histograms by op, status and kind: one array of counters, which rmatop
// reads through a memory mapping. One hit per batch, never per op: a
// uprobe trap costs 12-16 µs on this VM; array lookups are inlined by the
// verifier, so the 768 updates of a full batch cost a few µs more.
//
// Each engine core's completions are also counted apart (core_total,
// core_counts: CX, the hook's core argument): their total delay by op,
// every status together, and how many and how many bytes, so rmatop shows
// each core beside the sum.
//
// Built by `make bpf` (clang -target bpf); the object is committed next to
// this file (delay.bpf.o) and embedded by ../probe.go.
#include <linux/types.h>
#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>

#define BATCH_LEN 1024 // telemetry.BatchLen
#define NBUCKETS 33   // log2 buckets of a u32 ns delay: 0, [1,2), [2,4), ... [2^31,2^32)
#define NOPS 4        // abi.Op values 0-3
#define NSTATUS 64    // abi.Status values 0-63
#define NKINDS 3
#define NCORES 64     // wire.MaxCores

enum kind { KIND_ISSUE = 0, KIND_TOTAL = 1, KIND_REMOTE = 2 };

// telemetry.Sample: 16 bytes.
struct sample {
	__u32 issue_ns;
	__u32 total_ns;
	__u8 op;
	__u8 status;
	__u16 pad;
	__u32 length;
};

struct batch {
	struct sample s[BATCH_LEN];
};

// Counters (probe.go: counter indices). C_BAD_CORE: batches of a core
// beyond NCORES (in the histograms, not in the per-core counts).
enum { C_CALLS = 0, C_SAMPLES = 1, C_READ_ERRORS = 2, C_CLAMPED = 3, C_OUT_OF_RANGE = 4, C_BAD_CORE = 5, NCOUNTERS = 6 };

// Per core (probe.go: coreCounts): core_counts[core * CC_N + i].
enum { CC_CALLS = 0, CC_SAMPLES = 1, CC_BYTES = 2, CC_N = CC_BYTES + NOPS };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct batch);
} scratch SEC(".maps");

// hist[((op * NSTATUS + status) * NKINDS + kind) * NBUCKETS + bucket]
// (probe.go: histIndex), mapped by rmatop.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NOPS * NSTATUS * NKINDS * NBUCKETS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

// Bytes moved by OK ops, by op (index: abi.Op, < NOPS).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} bytes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// core_total[(core * NOPS + op) * NBUCKETS + bucket]: each core's total
// delay by op (probe.go: coreIndex), mapped by rmatop.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NCORES * NOPS * NBUCKETS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} core_total SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NCORES * CC_N);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} core_counts SEC(".maps");

static __always_inline void count(__u32 i, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &i);
	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void count_core(__u32 core, __u32 i, __u64 n)
{
	__u32 k = core * CC_N + i;
	__u64 *v = bpf_map_lookup_elem(&core_counts, &k);
	if (v)
		__sync_fetch_and_add(v, n);
}

// bucket: 0 for 0, else floor(log2(v)) + 1.
static __always_inline __u8 bucket(__u32 v)
{
	__u8 b = 0;
	if (v == 0)
		return 0;
	if (v >> 16) { v >>= 16; b += 16; }
	if (v >> 8) { v >>= 8; b += 8; }
	if (v >> 4) { v >>= 4; b += 4; }
	if (v >> 2) { v >>= 2; b += 2; }
	if (v >> 1) { b += 1; }
	return b + 1;
}

// add counts ns in histogram base (op and status's first bucket) + kind.
static __always_inline void add(__u32 base, __u32 kind, __u32 ns)
{
	__u32 i = base + kind * NBUCKETS + bucket(ns);
	__u64 *v = bpf_map_lookup_elem(&hist, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

// one aggregates sample i of the batch in scratch (a bpf_loop callback:
// verified once, not once per iteration); *corep is the batch's core, or
// NCORES or more for none.
static long one(__u32 i, void *corep)
{
	__u32 core = *(__u32 *)corep;
	__u32 zero = 0;
	struct batch *b = bpf_map_lookup_elem(&scratch, &zero);

	if (!b)
		return 1;
	// i < n <= BATCH_LEN (bpf_loop's count); the mask (BATCH_LEN is a
	// power of two) is the bound the verifier needs to see.
	struct sample *s = &b->s[i & (BATCH_LEN - 1)];
	if (s->op >= NOPS || s->status >= NSTATUS) {
		count(C_OUT_OF_RANGE, 1);
		return 0;
	}
	__u32 base = ((__u32)s->op * NSTATUS + s->status) * NKINDS * NBUCKETS;
	add(base, KIND_ISSUE, s->issue_ns);
	add(base, KIND_TOTAL, s->total_ns);
	add(base, KIND_REMOTE, s->total_ns >= s->issue_ns ? s->total_ns - s->issue_ns : 0);
	if (s->status == 0 && s->length) {
		__u32 op = s->op;
		__u64 *v = bpf_map_lookup_elem(&bytes, &op);
		if (v)
			__sync_fetch_and_add(v, s->length);
	}
	if (core < NCORES) {
		__u32 k = (core * NOPS + s->op) * NBUCKETS + bucket(s->total_ns);
		__u64 *v = bpf_map_lookup_elem(&core_total, &k);
		if (v)
			__sync_fetch_and_add(v, 1);
		if (s->status == 0 && s->length)
			count_core(core, CC_BYTES + s->op, s->length);
	}
	return 0;
}

SEC("uprobe")
int delay_batch(struct pt_regs *ctx)
{
	const void *src = (const void *)ctx->rax;
	__s64 n = (__s64)ctx->rbx;
	__u64 c = ctx->rcx;
	__u32 core = c < NCORES ? (__u32)c : NCORES;
	__u32 zero = 0;
	struct batch *b = bpf_map_lookup_elem(&scratch, &zero);

	count(C_CALLS, 1);
	if (core < NCORES)
		count_core(core, CC_CALLS, 1);
	else
		count(C_BAD_CORE, 1);
	if (!b || n <= 0)
		return 0;
	if (n > BATCH_LEN) {
		count(C_CLAMPED, 1);
		n = BATCH_LEN;
	}
	// Only the n samples written: the rest of the engine's batch may lie
	// in pages never touched, which a BPF program cannot fault in.
	__u32 size = (__u32)n * sizeof(struct sample);
	if (size > sizeof(*b))
		return 0;
	if (bpf_probe_read_user(b, size, src) != 0) {
		count(C_READ_ERRORS, 1);
		return 0;
	}
	bpf_loop(n, one, &core, 0);
	count(C_SAMPLES, n);
	if (core < NCORES)
		count_core(core, CC_SAMPLES, n);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
