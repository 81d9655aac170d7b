package dpdk

/*
#include <stdlib.h>
#include "onerma_dpdk.h"
*/
import "C"

import (
	"fmt"
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
// data rooms) lie in, one slice per chunk (rte_mempool_mem_iter; a pool
// in hugepages is usually one chunk). The slices alias C memory that lives
// until Free: for registering the range with a consumer that would
// otherwise check or pin every buffer (aesni/mb's Batch.Register).
func (m *Mempool) Memory() [][]byte {
	var buf [16]C.struct_onerma_mem_chunk
	n := int(C.onerma_mempool_mem_chunks(m.p, &buf[0], C.uint(len(buf))))
	out := make([][]byte, 0, min(n, len(buf)))
	for _, c := range buf[:min(n, len(buf))] {
		out = append(out, unsafe.Slice((*byte)(c.addr), int(c.len)))
	}
	return out
}
