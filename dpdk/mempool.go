package dpdk

/*
#include <stdlib.h>
#include "onerma_dpdk.h"
*/
import "C"

import (
	"cmp"
	"fmt"
	"slices"
	"unsafe"
)

// Mbuf sizing constants of the linked DPDK build.
const (
	// Headroom is RTE_PKTMBUF_HEADROOM: bytes reserved before the data of a
	// freshly allocated mbuf.
	Headroom = C.ONERMA_PKTMBUF_HEADROOM
	// DefaultDataRoom is RTE_MBUF_DEFAULT_BUF_SIZE: 2048 bytes of data
	// after the headroom.
	DefaultDataRoom = C.ONERMA_MBUF_DEFAULT_BUF_SIZE
	// MaxCacheSize is RTE_MEMPOOL_CACHE_MAX_SIZE.
	MaxCacheSize = C.ONERMA_MEMPOOL_CACHE_MAX
)

// Mempool is a DPDK packet mbuf pool (struct rte_mempool).
type Mempool struct {
	p    *C.struct_rte_mempool
	name string
}

// NewPktmbufPool creates a pool of n packet mbufs (rte_pktmbuf_pool_create).
// cacheSize mbufs are cached per lcore (registered threads included; 0
// disables the caches); privSize bytes of application data follow each
// struct rte_mbuf; dataRoom is the buffer size including Headroom, so a
// frame of F bytes needs dataRoom >= Headroom+F. n is best 2^k-1. The name
// must be unique in the process. socket is a NUMA socket or SocketAny.
func NewPktmbufPool(name string, n, cacheSize uint32, privSize, dataRoom uint16, socket int) (*Mempool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	r := C.onerma_pktmbuf_pool_create(cname, C.uint(n), C.uint(cacheSize), C.uint16_t(privSize), C.uint16_t(dataRoom), C.int(socket))
	if r.p == nil {
		return nil, fmt.Errorf("mempool %q (%d mbufs of %d bytes): %w", name, n, dataRoom, newError("rte_pktmbuf_pool_create", int(r.err)))
	}
	return &Mempool{p: (*C.struct_rte_mempool)(r.p), name: name}, nil
}

// NewPackedPktmbufPool is NewPktmbufPool for a consumer that addresses
// the pool as one array of objects, such as DPDK 22.11's net_af_xdp (its
// AF_XDP umem is the array from the pool's first object on: see
// OutsideArray). The objects lie back to back in one memory zone
// (RTE_MEMPOOL_F_NO_IOVA_CONTIG: none is kept from straddling a page, so
// their IO addresses mean nothing; for ports that use none). A pool that
// did not fit in one memory zone is an error.
func NewPackedPktmbufPool(name string, n, cacheSize uint32, privSize, dataRoom uint16, socket int) (*Mempool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	r := C.onerma_pktmbuf_pool_create_packed(cname, C.uint(n), C.uint(cacheSize), C.uint16_t(privSize), C.uint16_t(dataRoom), C.int(socket))
	if r.p == nil {
		return nil, fmt.Errorf("mempool %q (%d packed mbufs of %d bytes): %w", name, n, dataRoom, newError("rte_mempool_populate_default", int(r.err)))
	}
	m := &Mempool{p: (*C.struct_rte_mempool)(r.p), name: name}
	if k := C.onerma_mempool_nb_chunks(m.p); k != 1 {
		m.Free()
		return nil, fmt.Errorf("mempool %q (%d packed mbufs of %d bytes): in %d memory chunks, want one (free memory is fragmented: fewer mbufs, or more memory for the EAL)", name, n, dataRoom, k)
	}
	return m, nil
}

// PackedObjectSize is the ObjectSize of the mbufs of a pool
// NewPackedPktmbufPool would make with privSize and dataRoom (the EAL's
// memory channels are part of the layout: call it after Init).
func PackedObjectSize(privSize, dataRoom uint16) int {
	return int(C.onerma_packed_pktmbuf_obj_size(C.uint16_t(privSize), C.uint16_t(dataRoom)))
}

// ObjectSize is the bytes one object of the pool takes: its header, the
// mbuf, private area and data room, and its trailer.
func (m *Mempool) ObjectSize() int { return int(C.onerma_mempool_obj_size(m.p)) }

// OutsideArray counts the pool's objects that lie, wholly or in part,
// outside the array of its objects (as many as it holds, ObjectSize bytes
// each) that starts at its first memory chunk (from that chunk's page). DPDK 22.11's net_af_xdp
// registers exactly that array as the AF_XDP umem of a pool it fills its
// rx rings from (xdp_umem_configure): the kernel refuses the buffers of
// objects outside it, and those mbufs never come back. A pool in pages
// whose objects each stay within a page leaves a gap at every page's end
// and has some; a packed pool (NewPackedPktmbufPool) none.
func (m *Mempool) OutsideArray() int { return int(C.onerma_mempool_outside_array(m.p)) }

// Name is the pool's name.
func (m *Mempool) Name() string { return m.name }

// Free releases the pool (rte_mempool_free). Every mbuf must have been
// returned and no port queue may still use it.
func (m *Mempool) Free() {
	if m.p != nil {
		C.onerma_mempool_free(m.p)
		m.p = nil
	}
}

// Avail is the number of mbufs in the pool (per-lcore caches included).
func (m *Mempool) Avail() int { return int(C.onerma_mempool_avail(m.p)) }

// InUse is the number of mbufs taken from the pool.
func (m *Mempool) InUse() int { return int(C.onerma_mempool_in_use(m.p)) }

// DataRoom is the buffer size of the pool's mbufs, headroom included.
func (m *Mempool) DataRoom() int { return int(C.onerma_pktmbuf_data_room_size(m.p)) }

// Memory returns the virtual memory the pool's objects (mbuf headers and
// data rooms) lie in (rte_mempool_mem_iter), one slice per run of
// adjacent chunks, lowest address first. DPDK populates a pool by chunks
// that are contiguous in IO addresses, so a pool in 2 MB hugepages that
// are not physically contiguous has one chunk per page; the pages of one
// memzone are adjacent in virtual memory, and Memory joins them. The
// slices alias C memory that lives until Free: for registering the range
// with a consumer that would otherwise check or pin every buffer
// (aesni/mb's Batch.Register).
func (m *Mempool) Memory() [][]byte {
	n := int(C.onerma_mempool_mem_chunks(m.p, nil, 0))
	if n == 0 {
		return nil
	}
	buf := make([]C.struct_onerma_mem_chunk, n)
	n = min(n, int(C.onerma_mempool_mem_chunks(m.p, &buf[0], C.uint(n))))
	chunks := make([][]byte, 0, n)
	for _, c := range buf[:n] {
		chunks = append(chunks, unsafe.Slice((*byte)(c.addr), int(c.len)))
	}
	return joinChunks(chunks)
}

// joinChunks sorts chunks by address and joins each run of adjacent ones
// (one's end is the next one's start) into one slice, in place.
func joinChunks(chunks [][]byte) [][]byte {
	if len(chunks) == 0 {
		return chunks
	}
	start := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	slices.SortFunc(chunks, func(a, b []byte) int { return cmp.Compare(start(a), start(b)) })
	joined := chunks[:1]
	for _, c := range chunks[1:] {
		last := &joined[len(joined)-1]
		if start(*last)+uintptr(len(*last)) == start(c) {
			*last = unsafe.Slice(unsafe.SliceData(*last), len(*last)+len(c))
		} else {
			joined = append(joined, c)
		}
	}
	return joined
}
