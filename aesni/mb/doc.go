// Package mb is a batched AES-128-GCM backend for OneRMA's messages on
// intel-ipsec-mb (libIPSec_MB, Debian's libipsec-mb-dev 1.3): the lever
// that package aesni's doc points at. An engine core queues the seals and
// opens of a burst (32-64 messages) in a Batch and runs them with one cgo
// call, instead of one crypto/cipher call per message. The bytes are the
// same as aesni.AEAD's (message formats, nonces, AAD and curried AAD are
// described there); only who computes them changes.
//
// # Place in the import graph
//
// cgo: it imports package aesni (sizes, Key, ErrAuth) and links
// -lIPSec_MB; package engine imports it for Config.Crypto "ipsec-mb" (its
// seals, in cgo builds on linux/amd64 only). aesni stays the pure-Go leaf that
// the simulator and cross-builds use (this package passes -race too).
//
// # API
//
//	k, _ := mb.NewKey(kd)          // expanded key (struct gcm_key_data) in C memory
//	r, _ := mb.NewReservedKey()    // the reserved key: SealAuthFailure / OpenAuthFailure
//	b, _ := mb.NewBatch(64)        // descriptors, AAD scratch, results: C memory, once
//	i, ok := b.OpenResponse(k, dst, in, nonce, aad, reqIV)   // ok false: batch full
//	...                            // more Adds, any keys, any kinds
//	failed := b.Run()              // one cgo call for the whole batch
//	if b.Err(i) != nil { ... }     // nil or aesni.ErrAuth, readable until the next Add
//
// Every aesni.AEAD method has a Batch counterpart with the key as first
// argument and the same buffers (SealRequest, OpenRequest, SealResponse,
// OpenResponse, OpenResponseDirect, SealAuthFailure, OpenAuthFailure): the
// same assertions (a caller bug panics, before anything is queued), the
// same bytes written on success and on failure. An Add returns the job's
// index; an open whose input is too short for a tag (a length off the
// wire) is queued as a job that fails, so every message gets its answer
// from Run. Run returns the number of failed jobs; OK(i) and Err(i) read
// each result from C memory without allocating. A full batch refuses the
// Add, queues nothing, and returns (-1, false): the caller runs it first.
//
// Nonce, AAD (with the request IV it is curried with: aad ‖ reqIV goes
// into the job's scratch, as aesni copies it into its own) and a received
// tag are copied at Add; payloads are read and outputs written by Run, so
// those buffers must stay valid and untouched until Run returns.
//
// # Inside Run
//
// One ipsec-mb manager for the process (alloc_mb_mgr + init_mb_mgr_auto,
// so the library picks SSE, AVX, AVX2 or AVX-512 with VAES and VPCLMULQDQ
// from the CPU at run time; ONERMA_IPSEC_MB_ARCH forces one, see ArchEnv).
// Its direct GCM functions (gcm128_enc / gcm128_dec) keep no state in it,
// so Batches on different cores run at once. The C loop (mb.c) walks the
// descriptors: a seal encrypts straight from the plaintext into out and
// writes the tag after it; an open decrypts, computes the tag into a local
// that starts as the complement of the received one (a call that wrote
// nothing can never verify), compares the two in constant time (no branch
// on the data), and checks ipsec-mb's thread-local errno after every call
// (an error fails the job, and Run panics: every argument was checked at
// Add, so it would be a bug here).
//
// # Runs inside another crossing
//
// Run is one cgo crossing. A caller that crosses into C anyway right
// after queuing (an engine core's port, whose poll step transmits the
// frames the seals finish) can run the batch inside that crossing
// instead: Hook gives a C function and its argument (the batch's C
// memory), which the other library calls from its own C code
// (dpdk.PortIO.SetPreTx) when the batch has jobs queued (Go keeps the
// count in C memory at every Add); after the crossing the caller calls
// Settle, which does what Run does after its call (results, pins, keys)
// and counts the run (HookRuns). Add and Run settle first on their own,
// so a run nobody settled is never run twice. Runs counts the batch's own
// crossings.
//
// OpenResponse must never write dst with a forgery, but ipsec-mb verifies
// only after it has written its output. Two ways out: decrypt in place,
// in the packet, and copy to dst once the tag matched (aesni's way), or a
// GHASH pass over the ciphertext first and decryption after. A GHASH pass
// alone costs about half a decryption at every size, a memcpy of the
// plaintext a small part of one (bench/RESULTS.md, "Go benchmarks of the
// pieces", timed in C against ipsec-mb). So the copy: on
// success Run memmoves the plaintext to dst; on failure it zeroes in's
// ciphertext, like aesni, and dst is untouched. OpenResponseDirect decrypts into dst
// and zeroes it on failure (crypto/cipher's behaviour).
//
// # Keys and their owners
//
// A Key is ipsec-mb's struct gcm_key_data (round keys and GHASH powers,
// 1 KB, 64-byte aligned) in C memory, with no finalizer. NewKey allocates
// (the C block and a small Go struct) and expands, about as fast as
// aesni.NewAEAD, which makes 3 allocations; Set re-expands in place in
// under half that time, allocating nothing (BenchmarkNewKey,
// BenchmarkKeySet). A Key
// counts the queued jobs that refer to it, which gives a cache entry a
// safe way to own one: on eviction, invalidation (rekey) or purge the cache
// calls Release, which frees the C memory at once if no job refers to the
// key and otherwise when the Run (or Discard) that finishes its last job
// returns. Free refuses (panics) while jobs are queued; so does Set. A
// cache that recycles entries can Set the evicted entry's key in place
// when it has no queued job (Pending() == 0), and Release it otherwise.
//
// # Go pointers in C memory
//
// Buffers may be C memory (DPDK mbufs), mmap'd memory (regions, portal
// shared memory) or Go memory (tests, the simulator). A job's descriptor
// lives in C memory and holds the buffers' addresses, so a Go buffer must
// be pinned: each Batch owns runtime.Pinners and pins every buffer at Add
// (Pin does nothing for memory the Go runtime does not manage), unpinning
// them all in Run. A runtime.Pinner keeps 5 pins inline and drops any
// larger slice on Unpin, so one Pinner per batch would allocate on every
// batch: the batch spreads its pins over ceil(3·cap/5) Pinners (3 buffers
// per job at most) and allocates nothing in steady state (TestAllocs, with
// Go, mmap'd and registered buffers). A buffer inside one already pinned
// by the batch (the same backing array, e.g. the same region) is not
// pinned twice.
//
// What pinning costs: Pin + Unpin of a Go buffer tens of nanoseconds, Pin
// of mmap'd memory (a no-op, still a call) about ten (BenchmarkPin). Per
// job (two buffers) that is most of the gap between a batch of Go buffers
// and one of registered memory: at 64 B, Go buffers make a batched seal
// slower than crypto/cipher. Hence Register: memory registered with a batch (at most
// MaxRegistered ranges: an engine's mbuf pool, its staging buffers, every
// region) is pinned once if it is Go memory, only recorded otherwise, and
// a job's buffer inside it costs two compares (the range of the last hit)
// or a binary search over the sorted ranges instead of a Pin.
//
// The rules are checked by the runtime with
//
//	GOEXPERIMENT=cgocheck2 go test ./aesni/mb
//
// which passes (slowly: it rebuilds the runtime) and crashes with
// "unpinned Go pointer stored into non-Go memory" when the Pin is left out.
//
// # Portability
//
// The code path is chosen at run time, so the same binary runs on CPUs
// with and without AVX-512 or VAES (CI may be an AMD EPYC without VAES:
// it gets the AVX2 or AVX path). TestArchs re-runs the equivalence, tamper
// and known-answer tests in child processes on every path the CPU can run
// (sse, avx, avx2, avx512). Debian ships ipsec-mb for
// x86-64 only: elsewhere this package does not build, aesni still does.
//
// # Performance
//
// With registered memory, the engine's case, a burst of 32 in one Run is
// several times faster per message than crypto/cipher (aesni.AEAD,
// one message at a time) from 64 B to 4 KB, on a CPU where ipsec-mb takes
// its VAES/AVX-512 path; requests, which are only a GMAC over 64 B, gain
// little; Go buffers pinned per job lose most of the gain. The table
// (per operation and size: aesni, mb with Go buffers, with mmap'd
// buffers, with registered memory) is in bench/RESULTS.md, "Go benchmarks
// of the pieces"; it is measured with
//
//	go test -run '^$' -bench '^Benchmark(SealResponse|OpenResponseDirect|OpenResponse|SealRequest|OpenRequest|GCMLimit|NewKey|KeySet|Pin|NewAEAD|Copy)$' -count 5 -cpu 1 ./aesni ./aesni/mb
//
// # Ownership and concurrency
//
// A Batch and the Keys it uses belong to one engine core (goroutine); a
// Key's job count is not synchronized. Batches on different cores run
// concurrently. Nothing here locks, and beyond NewKey, NewBatch and
// Register nothing allocates in steady state (a Batch's Pinners come back
// from the runtime's per-P cache; TestAllocs).
package mb
