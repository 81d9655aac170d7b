package dpdk

/*
#include <stdlib.h>
#include "onerma_ring.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// RingFlags choose a Ring's synchronisation.
type RingFlags uint

const (
	// SingleProducer: one thread enqueues (RING_F_SP_ENQ). Without it,
	// producers serialise on a compare-and-swap and wait for each other
	// to publish: a producer preempted in between holds the others up.
	SingleProducer RingFlags = C.ONERMA_RING_SP
	// SingleConsumer: one thread dequeues (RING_F_SC_DEQ).
	SingleConsumer RingFlags = C.ONERMA_RING_SC
)

// Ring is a DPDK rte_ring of mbuf pointers: a bounded lock-free FIFO in
// shared memory, for handing mbufs from one polling thread to another.
// With SingleProducer|SingleConsumer neither end waits for the other, ever:
// each moves only its own head and tail (release stores, acquire loads).
type Ring struct {
	r    *C.struct_rte_ring
	name string
}

// NewRing creates a ring holding exactly size mbuf pointers
// (rte_ring_create with RING_F_EXACT_SZ). The name must be unique in the
// process (at most 29 bytes). socket is a NUMA socket or SocketAny.
func NewRing(name string, size uint32, socket int, flags RingFlags) (*Ring, error) {
	if len(name) >= C.ONERMA_RING_NAMESIZE-3 { // rte_ring_create prefixes "RG_"
		return nil, fmt.Errorf("ring %q: name longer than %d bytes", name, C.ONERMA_RING_NAMESIZE-4)
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	r := C.onerma_ring_create(cname, C.uint(size), C.int(socket), C.uint(flags))
	if r.p == nil {
		return nil, fmt.Errorf("ring %q (%d entries): %w", name, size, newError("rte_ring_create", int(r.err)))
	}
	return &Ring{r: (*C.struct_rte_ring)(r.p), name: name}, nil
}

// Name is the name the ring was created with.
func (r *Ring) Name() string { return r.name }

// Free releases the ring (rte_ring_free) and returns every mbuf still in
// it to its pool. No thread may use the ring any more.
func (r *Ring) Free() {
	if r.r != nil {
		C.onerma_ring_drain(r.r)
		C.onerma_ring_free(r.r)
		r.r = nil
	}
}

// Drain dequeues every mbuf in the ring and frees it; it returns how many
// it freed. On the consumer's thread (or once the producer has stopped).
func (r *Ring) Drain() int { return int(C.onerma_ring_drain(r.r)) }

// Enqueue puts b.Mbufs[off:off+n] in the ring, as many as fit
// (rte_ring_enqueue_burst), and returns how many it took: the ring owns
// those, the caller still owns the rest. One cgo call.
func (r *Ring) Enqueue(b *Burst, off, n int) int {
	if off < 0 || n < 0 || off+n > len(b.Mbufs) {
		panic("dpdk: Ring.Enqueue out of range")
	}
	return int(C.onerma_ring_enqueue_burst(r.r, b.at(off), C.uint(n)))
}

// Dequeue takes up to n mbufs from the ring into b.Mbufs[off:off+n]
// (rte_ring_dequeue_burst) and returns how many: the caller owns them. One
// cgo call.
func (r *Ring) Dequeue(b *Burst, off, n int) int {
	if off < 0 || n < 0 || off+n > len(b.Mbufs) {
		panic("dpdk: Ring.Dequeue out of range")
	}
	return int(C.onerma_ring_dequeue_burst(r.r, b.at(off), C.uint(n)))
}

// Len is the number of mbufs in the ring (a snapshot).
func (r *Ring) Len() int { return int(C.onerma_ring_count(r.r)) }

// Cap is the number of mbufs the ring holds when full.
func (r *Ring) Cap() int { return int(C.onerma_ring_capacity(r.r)) }

// Fanout hands mbufs from one polling thread to the rings of others: the
// caller queues each mbuf for a destination (Add), or for every
// destination (AddAll), and Send enqueues all of it, ring by ring, in one
// cgo crossing. The queues are C arrays written from Go: no call and no
// allocation per mbuf. A Fanout is owned by one goroutine, the single
// producer of each of its rings.
type Fanout struct {
	c     *C.struct_onerma_fanout
	buf   []*Mbuf  // view of c.buf: destination j's queue at [j*cap, j*cap+len[j])
	len   []uint16 // view of c.len
	bcast []*Mbuf  // view of c.bcast
	has   []bool   // has[j]: destination j has a ring
	cap   int
}

// FanoutCounters are cumulative counters of a Fanout.
type FanoutCounters struct {
	Calls   uint64 // Send crossings (not the sends a PortIO's Do makes: SetOutbound)
	Sent    uint64 // mbuf references enqueued (an AddAll mbuf counts once per ring)
	Dropped uint64 // references a full ring refused (freed)
}

// NewFanout makes a Fanout to rings[j], destination j (nil: none, e.g. the
// caller's own index). capacity bounds the mbufs queued between two Sends
// (Add and AddAll together): one rx burst, say.
func NewFanout(rings []*Ring, capacity int) (*Fanout, error) {
	if len(rings) < 1 || len(rings) > 1<<10 || capacity < 1 || capacity > 1<<15 {
		return nil, fmt.Errorf("fanout to %d rings, capacity %d: out of range", len(rings), capacity)
	}
	cr := C.calloc(C.size_t(len(rings)), C.size_t(unsafe.Sizeof(uintptr(0))))
	if cr == nil {
		return nil, ErrNoMemory
	}
	defer C.free(cr)
	ptrs := unsafe.Slice((**C.struct_rte_ring)(cr), len(rings))
	has := make([]bool, len(rings))
	for j, r := range rings {
		if r != nil {
			ptrs[j], has[j] = r.r, true
		}
	}
	c := C.onerma_fanout_new((**C.struct_rte_ring)(cr), C.uint16_t(len(rings)), C.uint16_t(capacity))
	if c == nil {
		return nil, ErrNoMemory
	}
	return &Fanout{
		c:     c,
		buf:   unsafe.Slice((**Mbuf)(unsafe.Pointer(c.buf)), len(rings)*capacity),
		len:   unsafe.Slice((*uint16)(unsafe.Pointer(c.len)), len(rings)),
		bcast: unsafe.Slice((**Mbuf)(unsafe.Pointer(c.bcast)), capacity),
		has:   has,
		cap:   capacity,
	}, nil
}

// Add queues m for destination j: the Fanout owns it from now on. Add
// panics past the capacity or for a destination without a ring (bugs of
// the caller).
func (f *Fanout) Add(j int, m *Mbuf) {
	if int(f.c.queued) == f.cap || !f.has[j] {
		panic("dpdk: Fanout.Add past its capacity or to no ring")
	}
	k := f.len[j]
	f.buf[j*f.cap+int(k)] = m
	f.len[j] = k + 1
	f.c.queued++
}

// AddAll queues m for every destination with a ring. The caller keeps its
// reference to m and only reads m afterwards, as the receivers do: Send
// adds one reference per ring before any ring holds it. AddAll panics past
// the capacity.
func (f *Fanout) AddAll(m *Mbuf) {
	if int(f.c.queued) == f.cap {
		panic("dpdk: Fanout.AddAll past its capacity")
	}
	f.bcast[f.c.n_bcast] = m
	f.c.n_bcast++
	f.c.queued++
}

// Len is the number of mbufs queued since the last send (Send, or a
// PortIO's Do when the Fanout is its outbound).
func (f *Fanout) Len() int { return int(f.c.queued) }

// Send enqueues every queued mbuf on its ring (one cgo crossing for all
// rings); what a full ring refuses is freed and counted (Dropped). It
// returns the references enqueued.
func (f *Fanout) Send() int {
	return int(C.onerma_fanout_send(f.c))
}

// Counters reads the counters. Same goroutine as Send.
func (f *Fanout) Counters() FanoutCounters {
	return FanoutCounters{Calls: uint64(f.c.calls), Sent: uint64(f.c.sent), Dropped: uint64(f.c.dropped)}
}

// Close frees the mbufs queued by Add and not sent, and the C memory
// (AddAll's mbufs stay the caller's). Once the owner has stopped.
func (f *Fanout) Close() {
	if f.c != nil {
		C.onerma_fanout_free(f.c)
		f.c, f.buf, f.len, f.bcast = nil, nil, nil, nil
	}
}

// SetOutbound makes every Do send what f has queued first (when it has
// anything queued), inside the same crossing: the frames this queue's
// poller hands to others then leave with its next poll step, with no
// crossing of their own, before the rx burst they came in is freed (an
// AddAll mbuf's references are added first). f must belong to the same
// goroutine and outlive the PortIO, or be removed (SetOutbound(nil))
// first; Send still works and sends at once.
func (io *PortIO) SetOutbound(f *Fanout) {
	if f == nil {
		io.c.out = nil
		return
	}
	io.c.out = f.c
}

// SetInbound makes Do(true) also receive from rings (nil entries
// skipped): after the port's rx burst, up to max mbufs from the rings,
// starting from a different ring each time, appended to Rx. max is at most
// Burst. The PortIO does not own the rings; they must outlive it or be
// removed (SetInbound(nil, 0)) first.
func (io *PortIO) SetInbound(rings []*Ring, max int) error {
	if max < 0 || max > len(io.tx) {
		return fmt.Errorf("port io: inbound %d per receive, burst %d", max, len(io.tx))
	}
	var cr unsafe.Pointer
	if len(rings) > 0 {
		if cr = C.calloc(C.size_t(len(rings)), C.size_t(unsafe.Sizeof(uintptr(0)))); cr == nil {
			return ErrNoMemory
		}
		defer C.free(cr)
		ptrs := unsafe.Slice((**C.struct_rte_ring)(cr), len(rings))
		for j, r := range rings {
			if r != nil {
				ptrs[j] = r.r
			}
		}
	}
	if err := check("onerma_io_set_inbound", C.onerma_io_set_inbound(io.c, (**C.struct_rte_ring)(cr), C.uint16_t(len(rings)), C.uint16_t(max))); err != nil {
		return fmt.Errorf("port io: inbound rings: %w", err)
	}
	return nil
}
