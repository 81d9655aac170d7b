// Package dpdk is OneRMA's own thin cgo binding to DPDK 22.11 (Debian's
// libdpdk-dev, linked through pkg-config). It knows nothing of 1RMA: it
// exposes the EAL, packet mbuf pools, ethdev ports and queues (RSS where
// the driver hashes), rx/tx bursts, rte_rings of mbuf pointers and lcore
// registration, and nothing else.
//
// Shape (after cilium/ebpf's internal/sys):
//
//   - One typed Go function per C call. Static inline DPDK functions
//     (rte_eth_rx_burst, rte_eth_tx_burst, rte_pktmbuf_alloc_bulk, ...)
//     get C wrappers in onerma_dpdk.c; so do functions that report through
//     the per-thread rte_errno, which must be read in the same C call (a
//     goroutine may change OS thread between two cgo calls).
//   - Failures are *Error values naming the C function, wrapping a
//     unix.Errno (errors.Is(err, unix.ENODEV) works), with context added by
//     the caller (fmt.Errorf %w).
//   - No Go pointer is kept by C. Burst arrays and the fused I/O state live
//     in C memory; strings are copied to C and freed.
//
// Hot path: one cgo crossing per burst, never per packet. Mbuf fields
// (buf_addr, data_off, data_len, pkt_len, buf_len, nb_segs) are read and
// written from Go through offsets compiled from C (offsetof), and Mbuf.Data
// and Mbuf.Room are []byte views of C memory made with unsafe.Slice: no
// copy, no cgo call. PortIO fuses a poll step into one call: send the tx
// burst (bounded retries, then drop and count), free the previous rx burst,
// receive a new one, refill a stash of free tx mbufs. A caller that must
// finish the queued frames in C first (another cgo library's seals, say)
// gives the step a pre-transmit hook (PortIO.SetPreTx: a C function
// pointer and its argument, which this package calls and knows nothing
// more of), so the two share the one crossing. Asked to (PortIO.SetStamps),
// the step records the CPU's time-stamp counter (rte_rdtsc) at the
// boundaries of its phases, for a caller that charges the parts of the one
// crossing to what it spends them on; otherwise that costs it one branch.
// A cgo call costs tens of nanoseconds (BenchmarkCgoNoop), a burst of 32
// frames about a microsecond.
//
// Hand-over between polling threads: a Ring is an rte_ring of mbuf
// pointers, lock-free on both ends when single-producer and
// single-consumer. PortIO.SetInbound makes the fused poll step also take
// up to a burst from such rings after its rx burst (no extra crossing);
// a Fanout gathers the mbufs a thread gives to others in C arrays and
// enqueues them on every destination's ring in one crossing, adding a
// reference per ring to an mbuf every destination must see; as a PortIO's
// outbound (PortIO.SetOutbound) it rides the next poll step's crossing
// instead of making its own.
//
// Threads: Init runs rte_eal_init on a dedicated goroutine locked to its OS
// thread, which stays parked as the EAL's main lcore thread, so the EAL's
// pinning never leaks to goroutines the Go scheduler moves around. A
// polling goroutine calls runtime.LockOSThread, SetAffinity and
// RegisterThread (rte_thread_register) so it gets an lcore id and the
// mempool's per-lcore cache, and never unlocks afterwards.
//
// Place in the import graph: a leaf (imports golang.org/x/sys/unix only).
// engine/port/dpdkport builds the engine's Port on it and tools/rmad
// initialises it; the protocol core (engine) never imports it.
// Subpackage dpdktest starts the EAL for tests.
package dpdk
