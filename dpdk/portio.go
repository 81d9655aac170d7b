package dpdk

/*
#include <stdlib.h>
#include "onerma_dpdk.h"

// onerma_port_io with its state's address as an integer and no result
// (the burst's size is in the state, n_rx): Do, once an iteration, then
// skips cgo's check of pointer arguments (cgocheck, a heap lookup: the
// state is C memory, there is nothing to find) and its wrapper's
// re-reading of the goroutine's stack to store a result.
static inline void onerma_port_io_addr(uintptr_t io, int flags)
{
	onerma_port_io((struct onerma_io *)io, flags);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// PortIO is the fused per-burst I/O of one rx/tx queue pair. Its state
// lives in C memory (struct onerma_io): a tx burst being filled, the rx
// burst last received, and a stash of free mbufs for future frames. The Go
// side reads and writes that state directly; only Do crosses into C, once
// per burst, and does in that one crossing
//
//  1. send what the outbound Fanout holds (SetOutbound), run the
//     pre-transmit hook (SetPreTx) and transmit the queued tx burst
//     (retrying frames the queue refused up to TxRetries times, then
//     freeing them and counting them as dropped),
//  2. with rx: free the previous rx burst and receive a new one, then
//     (SetInbound) take what other threads handed over in rings,
//  3. refill the stash when it is below half full (bulk alloc; near pool
//     exhaustion, whatever is left); with rx, between freeing the
//     previous burst and receiving the next,
//
// and, asked to (SetStamps), records the CPU's time-stamp counter at the
// boundaries of those phases (Stamps).
//
// A PortIO is owned by one goroutine, which should be locked to an OS
// thread registered with the EAL (RegisterThread) so the mempool's
// per-lcore cache is used.
type PortIO struct {
	c     *C.struct_onerma_io
	tx    []*Mbuf // views over the C arrays
	rx    []*Mbuf
	stash []*Mbuf
}

// MaxBurst bounds the burst size of a PortIO.
const MaxBurst = 512

// NewPortIO sets up fused I/O on queue q of port, allocating tx frames from
// pool. burst is the largest tx and rx burst (at most MaxBurst; a multiple
// of 8 suits every driver); stash is how many free mbufs it keeps ready
// (>= 1). The port must be started; NewPortIO does not configure it.
func NewPortIO(port PortID, q uint16, pool *Mempool, burst, stash, txRetries int) (*PortIO, error) {
	if burst < 1 || burst > MaxBurst || stash < 1 || stash > 1<<16-1 || txRetries < 0 || txRetries > 1<<16-1 {
		return nil, fmt.Errorf("port %d queue %d: io burst %d, stash %d, retries %d out of range", port, q, burst, stash, txRetries)
	}
	if pool == nil || pool.p == nil {
		return nil, fmt.Errorf("port %d queue %d: io needs a mempool", port, q)
	}
	c := C.onerma_io_new(C.uint16_t(port), C.uint16_t(q), pool.p, C.uint16_t(burst), C.uint16_t(stash))
	if c == nil {
		return nil, ErrNoMemory
	}
	c.tx_retries = C.uint16_t(txRetries)
	return &PortIO{
		c:     c,
		tx:    unsafe.Slice((**Mbuf)(unsafe.Pointer(c.tx)), burst),
		rx:    unsafe.Slice((**Mbuf)(unsafe.Pointer(c.rx)), 2*burst),
		stash: unsafe.Slice((**Mbuf)(unsafe.Pointer(c.stash)), stash),
	}, nil
}

// Close frees every mbuf the PortIO still holds (queued tx, last rx burst,
// stash) and its C memory. Any goroutine, once the owner has stopped.
func (io *PortIO) Close() {
	if io.c != nil {
		C.onerma_io_free(io.c)
		io.c, io.tx, io.rx, io.stash = nil, nil, nil, nil
	}
}

// Burst is the capacity of the tx and rx bursts.
func (io *PortIO) Burst() int { return len(io.tx) }

// SetPreTx installs a pre-transmit hook: fn, a C function of type
// void (*)(void *), runs with arg inside every Do that has frames to
// send, on the caller's thread, right before they are transmitted (after
// the outbound Fanout's send). It lets another cgo library finish the
// queued frames (seal them, say) in the same crossing as the burst that
// sends them: this package knows nothing of what fn does. arg must be C
// memory (or nil), and both must stay valid until SetPreTx(nil, nil).
// fn must not call back into Go.
func (io *PortIO) SetPreTx(fn, arg unsafe.Pointer) {
	io.c.pre_tx = (*[0]byte)(fn)
	io.c.pre_tx_arg = arg
}

// CountingHook is a pre-transmit hook for tests and benchmarks of
// SetPreTx: fn adds one to a counter in C memory, arg, which count reads
// (on the goroutine that runs Do). Each call allocates a counter that is
// never freed.
func CountingHook() (fn, arg unsafe.Pointer, count func() uint64) {
	c := (*C.uint64_t)(C.calloc(1, 8))
	if c == nil {
		panic("dpdk: CountingHook: out of memory")
	}
	return unsafe.Pointer(C.onerma_count_hook), unsafe.Pointer(c), func() uint64 { return uint64(*c) }
}

// Calls is the number of crossings Do has made (Counters().Calls),
// without reading the other counters.
func (io *PortIO) Calls() uint64 { return uint64(io.c.calls) }

// Stamps are the CPU's time-stamp counter (rte_rdtsc) at the phase
// boundaries of the last Do, recorded when SetStamps asked for them: for a
// caller that charges the parts of the one crossing to what it spends them
// on. A phase the Do skipped (no tx burst, no rx) lasts about as long as
// two reads of the counter. The spans are in the counter's units.
type Stamps struct {
	Start    uint64 // the crossing begins
	PreTx    uint64 // the outbound Fanout sent: the pre-transmit hook begins
	Tx       uint64 // the hook returned: the tx burst begins
	Sent     uint64 // the tx burst sent (retries and drops included)
	Freed    uint64 // the previous rx burst freed: the stash's refill begins
	Refilled uint64 // the stash refilled: the rx burst begins
	End      uint64 // the rx burst and the inbound rings' mbufs received: the crossing ends
}

// Outbound is the span of the outbound Fanout's send (SetOutbound).
func (s *Stamps) Outbound() uint64 { return s.PreTx - s.Start }

// PreTxHook is the span of the pre-transmit hook (SetPreTx).
func (s *Stamps) PreTxHook() uint64 { return s.Tx - s.PreTx }

// Send is the span of the tx burst.
func (s *Stamps) Send() uint64 { return s.Sent - s.Tx }

// FreeRx is the span of freeing the previous rx burst.
func (s *Stamps) FreeRx() uint64 { return s.Freed - s.Sent }

// Refill is the span of the stash's refill.
func (s *Stamps) Refill() uint64 { return s.Refilled - s.Freed }

// Receive is the span of the rx burst and the inbound rings.
func (s *Stamps) Receive() uint64 { return s.End - s.Refilled }

// SetStamps makes every Do record the time-stamp counter at its phase
// boundaries (Stamps) when on: a few reads of the counter per crossing.
// Off (the default), Do pays one branch for it.
func (io *PortIO) SetStamps(on bool) {
	io.c.stamp = 0
	if on {
		io.c.stamp = 1
	}
}

// Stamps returns the stamps of the last Do (zero before SetStamps(true)
// and a Do). No crossing: they are read from the PortIO's C memory.
func (io *PortIO) Stamps() Stamps {
	t := &io.c.tsc
	return Stamps{
		Start:    uint64(t[C.ONERMA_IO_T_START]),
		PreTx:    uint64(t[C.ONERMA_IO_T_PRE_TX]),
		Tx:       uint64(t[C.ONERMA_IO_T_TX]),
		Sent:     uint64(t[C.ONERMA_IO_T_SENT]),
		Freed:    uint64(t[C.ONERMA_IO_T_FREED]),
		Refilled: uint64(t[C.ONERMA_IO_T_REFILLED]),
		End:      uint64(t[C.ONERMA_IO_T_END]),
	}
}

// Do runs one fused step (see PortIO) and returns the number of mbufs
// received (0 when rx is false). With rx, the previous rx burst is freed:
// views into it become invalid.
func (io *PortIO) Do(rx bool) int {
	if !rx {
		C.onerma_port_io_addr(C.uintptr_t(uintptr(unsafe.Pointer(io.c))), 0)
		return 0
	}
	C.onerma_port_io_addr(C.uintptr_t(uintptr(unsafe.Pointer(io.c))), C.ONERMA_IO_RX)
	return int(io.c.n_rx)
}

// Rx is the burst received by the last Do(true), owned by the PortIO until
// the next Do(true): first the port's frames (RxPort of them), then those
// taken from the inbound rings (SetInbound). The caller may reorder its
// entries and give some away (TrimRx).
func (io *PortIO) Rx() []*Mbuf { return io.rx[:io.c.n_rx] }

// RxPort is how many of Rx came from the port itself.
func (io *PortIO) RxPort() int { return int(io.c.n_rx_port) }

// TrimRx keeps Rx()[:n] for the PortIO to free at the next Do(true): the
// caller has given the others away (to a Fanout, say), having moved
// every mbuf it keeps into the first n entries. n must not exceed
// len(Rx()).
func (io *PortIO) TrimRx(n int) {
	if n < 0 || n > int(io.c.n_rx) {
		panic("dpdk: PortIO.TrimRx beyond the burst")
	}
	io.c.n_rx = C.uint16_t(n)
}

// TxLen is the number of frames queued for the next Do.
func (io *PortIO) TxLen() int { return int(io.c.n_tx) }

// QueueTx appends m to the tx burst; the PortIO owns it from now on. It
// reports whether the burst is now full (the caller should Do).
// QueueTx panics if the burst was already full.
func (io *PortIO) QueueTx(m *Mbuf) (full bool) {
	n := int(io.c.n_tx)
	io.tx[n] = m // bounds check: a full burst panics here
	n++
	io.c.n_tx = C.uint16_t(n)
	return n == len(io.tx)
}

// StashLen is the number of free mbufs ready in the stash.
func (io *PortIO) StashLen() int { return int(io.c.n_stash) }

// TakeStash removes a free mbuf from the stash and gives it to the caller,
// or returns nil when the stash is empty (a Do refills it). The mbuf is
// freshly allocated (single segment, data at Headroom) or was given back
// with ReturnStash.
func (io *PortIO) TakeStash() *Mbuf {
	n := int(io.c.n_stash)
	if n == 0 {
		return nil
	}
	n--
	io.c.n_stash = C.uint16_t(n)
	return io.stash[n]
}

// ReturnStash gives back an mbuf taken with TakeStash and not sent, if the
// stash has room (a refill may have filled it meanwhile), and reports
// whether it did; if not, the caller still owns m (Mbuf.Free). The caller
// must not have changed m beyond its data bytes and lengths.
func (io *PortIO) ReturnStash(m *Mbuf) bool {
	n := int(io.c.n_stash)
	if n == len(io.stash) {
		return false
	}
	io.stash[n] = m
	io.c.n_stash = C.uint16_t(n + 1)
	return true
}

// IOCounters are cumulative counters of a PortIO.
type IOCounters struct {
	Calls      uint64 // crossings into C (Do)
	TxPackets  uint64 // frames the queue accepted
	TxDropped  uint64 // frames refused after all retries (freed)
	RxPackets  uint64 // from the port
	RxRing     uint64 // from the inbound rings (SetInbound)
	AllocFails uint64 // stash refills that could not fill the stash
}

// Counters reads the counters. Same goroutine as Do.
func (io *PortIO) Counters() IOCounters {
	return IOCounters{
		Calls:      uint64(io.c.calls),
		TxPackets:  uint64(io.c.tx_pkts),
		TxDropped:  uint64(io.c.tx_dropped),
		RxPackets:  uint64(io.c.rx_pkts),
		RxRing:     uint64(io.c.in_pkts),
		AllocFails: uint64(io.c.alloc_fails),
	}
}
