package dpdk

/*
#include <stdlib.h>
#include "onerma_dpdk.h"
*/
import "C"

import (
	"unsafe"
)

// Mbuf is a DPDK packet buffer (struct rte_mbuf) in C memory. Its methods
// read and write the few fields the data path needs through offsets taken
// from C at compile time: no cgo call per packet. Only single-segment
// mbufs are supported by Data/Room/SetLen.
type Mbuf C.struct_rte_mbuf

// Field offsets inside struct rte_mbuf (in Debian's 22.11 build: buf_addr
// 0, data_off 16, pkt_len 36, data_len 40, sizeof 128).
const (
	offBufAddr = C.ONERMA_MBUF_OFF_BUF_ADDR
	offDataOff = C.ONERMA_MBUF_OFF_DATA_OFF
	offNbSegs  = C.ONERMA_MBUF_OFF_NB_SEGS
	offRefcnt  = C.ONERMA_MBUF_OFF_REFCNT
	offPort    = C.ONERMA_MBUF_OFF_PORT
	offPktLen  = C.ONERMA_MBUF_OFF_PKT_LEN
	offDataLen = C.ONERMA_MBUF_OFF_DATA_LEN
	offBufLen  = C.ONERMA_MBUF_OFF_BUF_LEN
	// MbufSize is sizeof(struct rte_mbuf).
	MbufSize = C.ONERMA_MBUF_SIZE
)

// Compile-time checks that cgo's view of struct rte_mbuf agrees with C.
var (
	_ [MbufSize - unsafe.Sizeof(Mbuf{})]byte
	_ [unsafe.Sizeof(Mbuf{}) - MbufSize]byte
)

func (m *Mbuf) field(off uintptr) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(m), off) }

func (m *Mbuf) bufAddr() unsafe.Pointer { return *(*unsafe.Pointer)(m.field(offBufAddr)) }

// DataOff is the offset of the data in the buffer (data_off).
func (m *Mbuf) DataOff() int { return int(*(*uint16)(m.field(offDataOff))) }

// DataLen is the length of the data of this segment (data_len).
func (m *Mbuf) DataLen() int { return int(*(*uint16)(m.field(offDataLen))) }

// PktLen is the length of the packet over all segments (pkt_len).
func (m *Mbuf) PktLen() int { return int(*(*uint32)(m.field(offPktLen))) }

// BufLen is the size of the buffer, headroom included (buf_len).
func (m *Mbuf) BufLen() int { return int(*(*uint16)(m.field(offBufLen))) }

// Segs is the number of segments of the packet (nb_segs).
func (m *Mbuf) Segs() int { return int(*(*uint16)(m.field(offNbSegs))) }

// Refs is the mbuf's reference count (refcnt): a snapshot, which other
// threads holding references may change at any time.
func (m *Mbuf) Refs() int { return int(*(*uint16)(m.field(offRefcnt))) }

// Port is the input port of a received mbuf.
func (m *Mbuf) Port() PortID { return PortID(*(*uint16)(m.field(offPort))) }

// Data is a view of the mbuf's data (data_len bytes at data_off), in C
// memory, without a copy. It is valid while the caller owns the mbuf.
func (m *Mbuf) Data() []byte {
	p := unsafe.Add(m.bufAddr(), m.DataOff())
	return unsafe.Slice((*byte)(p), m.DataLen())
}

// Room is a view of everything from data_off to the end of the buffer: the
// space a frame can be written into (tailroom of an empty mbuf). Valid
// while the caller owns the mbuf.
func (m *Mbuf) Room() []byte {
	off := m.DataOff()
	p := unsafe.Add(m.bufAddr(), off)
	return unsafe.Slice((*byte)(p), m.BufLen()-off)
}

// SetLen makes the mbuf a single-segment packet of n bytes (data_len and
// pkt_len). n must fit in Room; SetLen panics otherwise.
func (m *Mbuf) SetLen(n int) {
	if n < 0 || n > m.BufLen()-m.DataOff() {
		panic("dpdk: Mbuf.SetLen beyond the buffer")
	}
	*(*uint16)(m.field(offDataLen)) = uint16(n)
	*(*uint32)(m.field(offPktLen)) = uint32(n)
}

// Free returns the mbuf (all its segments) to its pool
// (rte_pktmbuf_free). One cgo call: for the control path; the data path
// frees in bursts.
func (m *Mbuf) Free() { C.onerma_pktmbuf_free((*C.struct_rte_mbuf)(m)) }

// Burst is an array of mbuf pointers in C memory, so it crosses into C
// without cgo pointer checks. Mbufs holds all of it.
type Burst struct {
	c     **C.struct_rte_mbuf
	Mbufs []*Mbuf
}

// NewBurst allocates a burst array of n pointers (all nil).
func NewBurst(n int) (*Burst, error) {
	if n <= 0 || n > 1<<16-1 {
		panic("dpdk: NewBurst size out of range")
	}
	c := (**C.struct_rte_mbuf)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(uintptr(0)))))
	if c == nil {
		return nil, ErrNoMemory
	}
	return &Burst{c: c, Mbufs: unsafe.Slice((**Mbuf)(unsafe.Pointer(c)), n)}, nil
}

// Free releases the array (not the mbufs it points to).
func (b *Burst) Free() {
	if b.c != nil {
		C.free(unsafe.Pointer(b.c))
		b.c, b.Mbufs = nil, nil
	}
}

// at is the C address of b.Mbufs[i].
func (b *Burst) at(i int) **C.struct_rte_mbuf {
	return (**C.struct_rte_mbuf)(unsafe.Add(unsafe.Pointer(b.c), uintptr(i)*unsafe.Sizeof(uintptr(0))))
}

// RxBurst receives up to n packets from queue q of port into
// b.Mbufs[off:off+n] (rte_eth_rx_burst) and returns how many it received.
// n is best a multiple of 8 (vector drivers).
func RxBurst(port PortID, q uint16, b *Burst, off, n int) int {
	if off < 0 || n < 0 || off+n > len(b.Mbufs) {
		panic("dpdk: RxBurst out of range")
	}
	return int(C.onerma_rx_burst(C.uint16_t(port), C.uint16_t(q), b.at(off), C.uint16_t(n)))
}

// TxBurst queues b.Mbufs[off:off+n] on queue q of port
// (rte_eth_tx_burst) and returns how many it took; the port owns those,
// the caller still owns the rest.
func TxBurst(port PortID, q uint16, b *Burst, off, n int) int {
	if off < 0 || n < 0 || off+n > len(b.Mbufs) {
		panic("dpdk: TxBurst out of range")
	}
	return int(C.onerma_tx_burst(C.uint16_t(port), C.uint16_t(q), b.at(off), C.uint16_t(n)))
}

// AllocBurst fills b.Mbufs[off:off+n] from pool, all or nothing
// (rte_pktmbuf_alloc_bulk), and reports whether it did.
func AllocBurst(pool *Mempool, b *Burst, off, n int) bool {
	if off < 0 || n < 0 || off+n > len(b.Mbufs) {
		panic("dpdk: AllocBurst out of range")
	}
	return C.onerma_alloc_bulk(pool.p, b.at(off), C.uint(n)) == 0
}

// FreeBurst returns b.Mbufs[off:off+n] to their pools
// (rte_pktmbuf_free_bulk).
func FreeBurst(b *Burst, off, n int) {
	if off < 0 || n < 0 || off+n > len(b.Mbufs) {
		panic("dpdk: FreeBurst out of range")
	}
	C.onerma_free_bulk(b.at(off), C.uint(n))
}

// Noop is one cgo call to an empty C function, to measure the crossing.
func Noop() { C.onerma_noop() }
