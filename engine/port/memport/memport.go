package memport

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/onerma/onerma/engine"
)

// Config sizes one direction of a link.
type Config struct {
	// Frames is the number of buffers per direction: frames in flight
	// (sent and not yet released by the receiver) are bounded by it.
	Frames int
	// FrameBytes is the size of each buffer (engine.Tx promises at least
	// engine.MaxFrameBytes).
	FrameBytes int
	// Burst is the largest number of frames one Recv returns.
	Burst int
}

// DefaultConfig: 256 full-size frames per direction, bursts of 32.
func DefaultConfig() Config {
	return Config{Frames: 256, FrameBytes: engine.MaxFrameBytes, Burst: 32}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("memport: invalid config")

// Validate checks every field.
func (c *Config) Validate() error {
	switch {
	case c.Frames < 1 || c.Frames > 1<<20:
		return fmt.Errorf("%w: Frames = %d", ErrConfig, c.Frames)
	case c.FrameBytes < 64:
		return fmt.Errorf("%w: FrameBytes = %d", ErrConfig, c.FrameBytes)
	case c.Burst < 1 || c.Burst > c.Frames:
		return fmt.Errorf("%w: Burst = %d", ErrConfig, c.Burst)
	}
	return nil
}

// Stats are a Port's counters. Read them on the Port's goroutine.
type Stats struct {
	TxFrames   uint64 // frames published by Flush
	TxNoBuffer uint64 // Buffer calls that found no free buffer
	RxFrames   uint64
}

// Port is one end of a link. It implements runner.Port. Not safe for
// concurrent use: one goroutine drives it.
type Port struct {
	tx *pipe // frames this port sends
	rx *pipe // frames this port receives

	cur   int32    // buffer handed out by Buffer and not yet sent; -1: none
	held  []uint32 // buffers of the last rx burst, released by the next Recv
	views [][]byte // the last rx burst, as returned by Recv
	stats Stats

	beforeTx func() // engine.TxHook: runs before Flush publishes
}

var (
	_ engine.TxHook   = (*Port)(nil)
	_ engine.TxMemory = (*Port)(nil)
)

// TxMemory implements engine.TxMemory: the memory of every buffer Buffer
// returns.
func (p *Port) TxMemory() [][]byte { return [][]byte{p.tx.mem} }

// SetBeforeTx implements engine.TxHook: f runs before the frames sent
// since the last Flush become visible to the receiver.
func (p *Port) SetBeforeTx(f func()) { p.beforeTx = f }

// Pair returns two ports connected back to back: what a sends, b receives,
// and the other way round.
func Pair(cfg Config) (a, b *Port, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	ab, ba := newPipe(cfg), newPipe(cfg)
	return newPort(cfg, ab, ba), newPort(cfg, ba, ab), nil
}

// Loopback returns a port that receives what it sends.
func Loopback(cfg Config) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := newPipe(cfg)
	return newPort(cfg, p, p), nil
}

func newPort(cfg Config, tx, rx *pipe) *Port {
	return &Port{
		tx:    tx,
		rx:    rx,
		cur:   -1,
		held:  make([]uint32, 0, cfg.Burst),
		views: make([][]byte, 0, cfg.Burst),
	}
}

// Buffer returns the buffer for the next frame (FrameBytes long), or nil
// when every buffer of this direction is in flight. Until Send, repeated
// calls return the same buffer.
func (p *Port) Buffer() []byte {
	if p.cur >= 0 {
		return p.tx.bufs[p.cur]
	}
	i, ok := p.tx.free.pop()
	if !ok {
		p.stats.TxNoBuffer++
		return nil
	}
	p.cur = int32(i)
	return p.tx.bufs[i]
}

// Send queues the first n bytes of the current buffer; Flush publishes it.
// Send without a current buffer, or with n outside 1..FrameBytes, panics.
func (p *Port) Send(n int) {
	if p.cur < 0 || n < 1 || n > len(p.tx.bufs[p.cur]) {
		panic("memport: Send without Buffer or with a bad length")
	}
	p.tx.lens[p.cur] = int32(n)
	p.tx.full.push(uint32(p.cur)) // cannot fail: the ring holds every buffer
	p.cur = -1
}

// Flush makes every frame sent since the last Flush visible to the
// receiver, with one atomic store.
func (p *Port) Flush() {
	if p.beforeTx != nil {
		p.beforeTx()
	}
	p.stats.TxFrames += uint64(p.tx.full.publish())
}

// Recv hands the previous burst's buffers back to their sender and returns
// up to Burst received frames, valid until the next Recv.
func (p *Port) Recv() [][]byte {
	for _, i := range p.held {
		p.rx.free.push(i)
	}
	p.rx.free.publish()
	p.held, p.views = p.held[:0], p.views[:0]
	for len(p.held) < cap(p.held) {
		i, ok := p.rx.full.pop()
		if !ok {
			break
		}
		p.held = append(p.held, i)
		p.views = append(p.views, p.rx.bufs[i][:p.rx.lens[i]])
	}
	p.stats.RxFrames += uint64(len(p.views))
	return p.views
}

// Stats returns the counters.
func (p *Port) Stats() Stats { return p.stats }

// pipe is one direction of a link: its buffers, the ring of full buffers
// (sender -> receiver) and the ring of free buffers (receiver -> sender).
type pipe struct {
	mem  []byte // every buffer
	bufs [][]byte
	lens []int32 // written by the sender before publishing, read by the receiver after
	full ring
	free ring
}

func newPipe(cfg Config) *pipe {
	mem := make([]byte, cfg.Frames*cfg.FrameBytes)
	p := &pipe{mem: mem, bufs: make([][]byte, cfg.Frames), lens: make([]int32, cfg.Frames)}
	for i := range p.bufs {
		p.bufs[i] = mem[i*cfg.FrameBytes : (i+1)*cfg.FrameBytes : (i+1)*cfg.FrameBytes]
	}
	p.full.init(cfg.Frames)
	p.free.init(cfg.Frames)
	for i := range cfg.Frames {
		p.free.push(uint32(i))
	}
	p.free.publish()
	return p
}

// ring is a single-producer/single-consumer ring of buffer indices. The
// producer fills slots ahead of the published tail and publishes a batch
// with one store; the consumer reads up to the tail it last loaded. The
// consumer needs no published head: the ring has room for every buffer of
// its pipe and a buffer index is in at most one ring slot at a time, so the
// producer can never lap an unread slot.
type ring struct {
	tail atomic.Uint32 // published by the producer; loaded by the consumer in pop
	_    [60]byte      // the producer's and consumer's fields below on other lines

	slots []uint32
	mask  uint32

	next     uint32 // producer: next slot to fill (>= tail)
	headNext uint32 // consumer: next slot to read
	tailSeen uint32 // consumer: last tail loaded
}

func (r *ring) init(n int) {
	size := 1
	for size < n {
		size <<= 1
	}
	r.slots = make([]uint32, size)
	r.mask = uint32(size - 1)
}

// push fills the next slot (producer).
func (r *ring) push(v uint32) {
	r.slots[r.next&r.mask] = v
	r.next++
}

// publish makes pushed slots visible and returns how many it published
// (producer). The store pairs with the consumer's load in pop.
func (r *ring) publish() uint32 {
	n := r.next - r.tail.Load()
	if n > 0 {
		r.tail.Store(r.next)
	}
	return n
}

// pop takes the next published slot (consumer).
func (r *ring) pop() (uint32, bool) {
	if r.headNext == r.tailSeen {
		r.tailSeen = r.tail.Load() // pairs with publish
		if r.headNext == r.tailSeen {
			return 0, false
		}
	}
	v := r.slots[r.headNext&r.mask]
	r.headNext++
	return v, true
}
