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

// NewPagedPktmbufPool makes a pool of n packet mbufs of one memory page
// each: every object (its header, the struct rte_mbuf and the data room,
// DataRoom bytes, no private area) is exactly a page, page-aligned, and
// the objects lie back to back in one memory zone. For a consumer that
// takes the pool for one array of buffers that never cross a page, such
// as DPDK 22.11's net_af_xdp: it registers the array as an AF_XDP umem,
// one chunk per mbuf (see OutsideArray), and a zero-copy driver refuses
// chunks that cross a page boundary its DMA mapping does not continue.
func NewPagedPktmbufPool(name string, n, cacheSize uint32, socket int) (*Mempool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	r := C.onerma_pktmbuf_pool_create_paged(cname, C.uint(n), C.uint(cacheSize), C.int(socket))
	if r.p == nil {
		return nil, fmt.Errorf("mempool %q (%d mbufs of a page): %w", name, n, newError("rte_mempool_populate_virt", int(r.err)))
	}
	return &Mempool{p: (*C.struct_rte_mempool)(r.p), name: name}, nil
}

// ObjectSize is the bytes one object of the pool takes: its header
// (HeaderSize), the mbuf, private area and data room, and its trailer.
func (m *Mempool) ObjectSize() int { return int(C.onerma_mempool_obj_size(m.p)) }

// HeaderSize is the bytes of an object before its mbuf (the mempool's
// object header).
func (m *Mempool) HeaderSize() int { return int(C.onerma_mempool_header_size(m.p)) }

// OutsideArray counts the pool's objects that lie, wholly or in part,
// outside the array of its objects (as many as it holds, ObjectSize bytes
// each) that starts at its first memory chunk (from that chunk's page).
// DPDK 22.11's net_af_xdp registers exactly that array as the AF_XDP umem
// of a pool it fills its rx rings from (xdp_umem_configure): the kernel
// refuses the buffers of objects outside it, and those mbufs never come
// back. A pool whose objects each stay within a page, but do not fill it,
// leaves a gap at every page's end and has some (rte_pktmbuf_pool_create's:
// half of them in 4 KB pages, a few in 2 MB pages); a NewPagedPktmbufPool
// none.
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
