package abi

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// RingHeaderSize: the producer index and the consumer index each own a
// 64-byte cache line so the two sides never write the same line.
const RingHeaderSize = 128

const (
	ringProdOff = 0
	ringConsOff = 64
)

// RingBytes is the shared-memory size of a ring of capacity entries.
func RingBytes(capacity, entrySize uint32) int {
	return RingHeaderSize + int(capacity)*int(entrySize)
}

// Errors from NewProducer/NewConsumer.
var (
	ErrRingCapacity = errors.New("abi: ring capacity must be a power of two >= 2")
	ErrRingMemory   = errors.New("abi: ring memory too small or misaligned")
)

// ring is the view both sides share. Indices are free-running uint32s: an
// entry lives at index & mask, and prod-cons (mod 2^32) is the fill level,
// so wraparound needs no special case as long as capacity <= 2^31.
type ring struct {
	prod    *atomic.Uint32 // written by the producer only; read by the consumer
	cons    *atomic.Uint32 // written by the consumer only; read by the producer
	entries []byte
	mask    uint32
	esize   uint32
	cap     uint32
}

func newRing(mem []byte, capacity, entrySize uint32) (ring, error) {
	if capacity < 2 || capacity&(capacity-1) != 0 || capacity > 1<<30 {
		return ring{}, ErrRingCapacity
	}
	if len(mem) < RingBytes(capacity, entrySize) || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%64 != 0 {
		return ring{}, ErrRingMemory
	}
	return ring{
		prod:    (*atomic.Uint32)(unsafe.Pointer(&mem[ringProdOff])),
		cons:    (*atomic.Uint32)(unsafe.Pointer(&mem[ringConsOff])),
		entries: mem[RingHeaderSize:RingBytes(capacity, entrySize):RingBytes(capacity, entrySize)],
		mask:    capacity - 1,
		esize:   entrySize,
		cap:     capacity,
	}, nil
}

func (r *ring) entry(i uint32) []byte {
	off := (i & r.mask) * r.esize
	return r.entries[off : off+r.esize : off+r.esize]
}

// Producer is the writing side of a ring. Not safe for concurrent use: one
// goroutine (or one engine core) owns it.
type Producer struct {
	ring
	next      uint32 // next index to fill (local, not yet published beyond pub)
	consCache uint32 // last consumer index seen (refreshed when the ring looks full)
	corrupt   bool
}

// NewProducer attaches a producer to ring memory. The producer starts at the
// index currently published in shared memory.
func NewProducer(mem []byte, capacity, entrySize uint32) (*Producer, error) {
	r, err := newRing(mem, capacity, entrySize)
	if err != nil {
		return nil, err
	}
	p := &Producer{ring: r}
	p.next = r.prod.Load()
	p.consCache = r.cons.Load()
	return p, nil
}

// Free returns how many entries can be reserved now. It refreshes the
// consumer index from shared memory. A consumer index that is not within
// [published-cap, published] marks the ring corrupt and Free returns 0.
func (p *Producer) Free() uint32 {
	if p.corrupt {
		return 0
	}
	c := p.cons.Load() // pairs with the consumer's Release store
	if p.next-c > p.cap {
		p.corrupt = true
		return 0
	}
	p.consCache = c
	return p.cap - (p.next - c)
}

// FreeCached is Free as last seen, without reading the consumer index: a
// lower bound on the free entries (the consumer only ever frees more).
func (p *Producer) FreeCached() uint32 {
	if p.corrupt {
		return 0
	}
	return p.cap - (p.next - p.consCache)
}

// Reserve returns the buffer of the next entry, or nil when the ring is full
// (or corrupt). The entry becomes visible only after Commit and Publish.
func (p *Producer) Reserve() []byte {
	if p.next-p.consCache >= p.cap {
		if p.Free() == 0 {
			return nil
		}
	}
	return p.entry(p.next)
}

// Commit makes the entry returned by the last Reserve part of the batch.
func (p *Producer) Commit() { p.next++ }

// Publish makes every committed entry visible to the consumer with one
// store (batched publication; Kalia et al. doorbell batching), and
// reports whether it stored a new index (false: nothing was committed
// since the last Publish). The store is sequentially consistent (Go's
// atomics are), as a summary doorbell's ring after it needs
// (Summary.Ring).
func (p *Producer) Publish() bool {
	if p.prod.Load() != p.next {
		p.prod.Store(p.next) // pairs with the consumer's Load in Peek
		return true
	}
	return false
}

// Pending reports committed entries not yet consumed (as last seen).
func (p *Producer) Pending() uint32 { return p.next - p.consCache }

// Corrupt reports whether the peer wrote an impossible consumer index.
func (p *Producer) Corrupt() bool { return p.corrupt }

// Capacity is the number of entries.
func (p *Producer) Capacity() uint32 { return p.cap }

// Consumer is the reading side of a ring. Not safe for concurrent use.
type Consumer struct {
	ring
	next      uint32 // next index to read
	prodCache uint32 // last producer index seen
	corrupt   bool
}

// NewConsumer attaches a consumer to ring memory, starting at the consumer
// index currently in shared memory.
func NewConsumer(mem []byte, capacity, entrySize uint32) (*Consumer, error) {
	r, err := newRing(mem, capacity, entrySize)
	if err != nil {
		return nil, err
	}
	c := &Consumer{ring: r}
	c.next = r.cons.Load()
	c.prodCache = c.next
	return c, nil
}

// Peek returns the next published entry without consuming it, or nil when
// the ring is empty or corrupt. The caller must copy what it needs before
// Advance: once released the producer may overwrite the entry. A producer
// index more than capacity ahead of the consumer marks the ring corrupt.
func (c *Consumer) Peek() []byte {
	if c.next == c.prodCache {
		if c.corrupt {
			return nil
		}
		p := c.prod.Load() // pairs with the producer's Publish store
		if p-c.next > c.cap {
			c.corrupt = true
			return nil
		}
		c.prodCache = p
		if c.next == p {
			return nil
		}
	}
	return c.entry(c.next)
}

// Advance consumes the entry returned by the last Peek.
func (c *Consumer) Advance() { c.next++ }

// Release publishes the consumer index so the producer can reuse entries
// (batched, like Publish).
func (c *Consumer) Release() {
	if c.cons.Load() != c.next {
		c.cons.Store(c.next) // pairs with the producer's Load in Free
	}
}

// Available reports entries published and not yet consumed (refreshing the
// producer index).
func (c *Consumer) Available() uint32 {
	c.Peek()
	return c.prodCache - c.next
}

// Seen reports entries published and not yet consumed as last seen,
// without reading the producer index: what a later Peek returns for sure.
func (c *Consumer) Seen() uint32 { return c.prodCache - c.next }

// Corrupt reports whether the peer wrote an impossible producer index.
func (c *Consumer) Corrupt() bool { return c.corrupt }

// Capacity is the number of entries.
func (c *Consumer) Capacity() uint32 { return c.cap }
