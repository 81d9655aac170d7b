// Package abi is the application binary interface shared by the engine (rmad)
// and the portal library: op codes, status codes, the 64-byte Command, the
// 32-byte Completion, and the lock-free single-producer/single-consumer rings
// that carry them through shared memory.
//
// It is a leaf package: it imports nothing of ours, so both sides of the
// shared-memory boundary depend on it and never on each other.
//
// Shared memory never holds pointers, only offsets and uint32 indices. Every
// value read from shared memory is untrusted by the engine: a Command is
// copied out of the ring before it is validated (no time-of-check to
// time-of-use window), and ring indices are range-checked on every read.
//
// Portal segment (one per open portal, created and sealed by the engine,
// mapped by both processes):
//
//	+--------------------------------------------+ 0
//	| SegmentHeader (64 B): magic "1RMA", version, |
//	| segment size, ring offsets and capacities    |
//	+--------------------------------------------+ 64
//	| arm word u32 (completion doorbell),          |
//	| summary flag word u32 (summary doorbell) 68, |
//	| padding                                      |
//	+--------------------------------------------+ 128
//	| command ring: RingHeader (128 B)             | CmdOff
//	|   +0   producer index (app writes)  64 B     |
//	|   +64  consumer index (engine writes) 64 B   |
//	|   entries: CmdCap x 64 B Command             |
//	+--------------------------------------------+
//	| completion ring: RingHeader (128 B)          | CplOff
//	|   +0   producer index (engine writes)        |
//	|   +64  consumer index (app writes)           |
//	|   entries: CplCap x 32 B Completion          |
//	+--------------------------------------------+ Size
//
// Indices are free-running uint32s (entry = index & mask). A producer
// publishes a batch with one store of its producer index; a consumer
// releases a batch with one store of its consumer index. The engine treats
// the application's indices as untrusted: an impossible index closes the
// portal (counted as RingsCorrupt).
//
// The completion doorbell (like ibv_req_notify_cq and a completion
// channel): an application that wants to sleep stores 1 in the arm word,
// re-checks the completion ring, and sleeps on an eventfd it got from the
// control socket; after publishing completions the engine swaps an armed
// word back to 0 and writes the eventfd. Sequentially consistent atomics on
// both sides mean no wake-up is lost. An engine never blocks on it, and a
// portal that never arms costs one load per publication.
//
// The summary doorbell (summary.go): reading a portal's producer index
// costs the engine a cache line the application's CPU holds, even when
// nothing was posted. Each engine core has a page of one bit per portal
// (Summary), which every application of the core maps (the summary
// control request): after publishing commands (a sequentially consistent
// store of the producer index) an application sets its bit, and the
// engine takes (swaps to 0) the words once per poll and reads only the
// rings whose bits were set, besides the rings it left commands in and a
// fallback scan of every ring at least every engine.Config.SummaryScan.
// An application says it rings by storing SummaryOn in its segment's
// summary flag word (SegmentSummaryOff), which the engine reads in its
// scans; a segment whose word stays 0 (an older client) has its ring read
// in every poll. The page is shared by every tenant of the core, so the
// engine trusts it only for where to look first: a bit set by another
// costs one idle read, a bit cleared by another delays a post to the next
// scan, and no post is ever lost (docs/protocol.md, The summary doorbell).
//
// The paper (1RMA, SIGCOMM 2020, §4.3-§4.5 and Appendix B) issues a command
// as four 16-byte MMIO stores into an on-NIC slot; here a command is one
// 64-byte cache line in a ring, published in batches by one store of the
// producer index (Kalia et al.: doorbell batching).
package abi
