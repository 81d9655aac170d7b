package memport

import (
	"fmt"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port"
)

// SteeredPort is one core's queue pair of an engine of several cores
// looped back to itself through a NIC that steers every frame to its core
// (engine.Steer): what any core sends is received by the core the frame
// names, by every core for ARP, and by the sender itself for frames that
// name none. It implements runner.Port, engine.TxHook and
// engine.TxMemory; each SteeredPort runs on its own goroutine (its core's
// loop).
//
// Unlike Port it copies: a frame is written into a staging buffer of the
// sending port (its core does not know the destination before it has
// written the headers) and copied, at Flush, into a buffer of the link to
// its core. Each ordered pair of ports has a link of its own (a pipe:
// single producer, single consumer), so no two goroutines share a ring.
type SteeredPort struct {
	idx   int
	steer port.Steering[[]byte, *steeredLinks] // the NIC's: to the links in out
	out   []*pipe
	in    []*pipe
	stage []byte   // staging buffers, FrameBytes each
	free  []int32  // staging buffers not handed out
	cur   int32    // staging buffer handed out by Buffer; -1: none
	sent  []int32  // staged, sent, not yet flushed
	lens  []int32  // their lengths
	held  []uint32 // the last rx burst: buffer indices...
	from  []int32  // ...and the links they came from
	views [][]byte
	next  int // the link Recv starts from (round robin)
	fb    int // FrameBytes

	stats    SteeredStats
	beforeTx func()
}

// SteeredStats are a SteeredPort's counters (its goroutine only).
type SteeredStats struct {
	TxFrames   uint64 // frames sent (flushed)
	TxNoBuffer uint64 // Buffer calls that found no staging buffer
	Dropped    uint64 // frame copies lost: the link to their core was full
	Steered    uint64 // frame copies delivered to another core than the sender
	RxFrames   uint64
}

var (
	_ engine.TxHook   = (*SteeredPort)(nil)
	_ engine.TxMemory = (*SteeredPort)(nil)
)

// Steered returns the n ports of an engine of n cores (1 .. 64) whose base
// UDP port is basePort, looped back to itself: port i belongs to core i
// (engine.NewGroup's order). cfg sizes each link and each port's staging.
func Steered(cfg Config, n int, basePort uint16) ([]*SteeredPort, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n < 1 || n > 64 {
		return nil, fmt.Errorf("%w: %d cores", ErrConfig, n)
	}
	links := make([][]*pipe, n) // links[i][j]: from core i to core j
	for i := range links {
		for range n {
			links[i] = append(links[i], newPipe(cfg))
		}
	}
	ps := make([]*SteeredPort, n)
	for i := range ps {
		p := &SteeredPort{
			idx: i, out: links[i], cur: -1, fb: cfg.FrameBytes,
			stage: make([]byte, cfg.Frames*cfg.FrameBytes),
			sent:  make([]int32, 0, cfg.Frames), lens: make([]int32, 0, cfg.Frames),
			held: make([]uint32, 0, cfg.Burst), from: make([]int32, 0, cfg.Burst), views: make([][]byte, 0, cfg.Burst),
		}
		for j := range n {
			p.in = append(p.in, links[j][i])
		}
		for k := cfg.Frames - 1; k >= 0; k-- {
			p.free = append(p.free, int32(k))
		}
		p.steer = port.NewSteering(i, n, basePort, (*steeredLinks)(p))
		ps[i] = p
	}
	return ps, nil
}

func (p *SteeredPort) buf(k int32) []byte {
	return p.stage[int(k)*p.fb : (int(k)+1)*p.fb : (int(k)+1)*p.fb]
}

// TxMemory implements engine.TxMemory: the staging buffers.
func (p *SteeredPort) TxMemory() [][]byte { return [][]byte{p.stage} }

// SetBeforeTx implements engine.TxHook: f runs before Flush copies the
// frames sent since the last Flush.
func (p *SteeredPort) SetBeforeTx(f func()) { p.beforeTx = f }

// Buffer returns a staging buffer for the next frame, or nil when all are
// sent and not yet flushed.
func (p *SteeredPort) Buffer() []byte {
	if p.cur < 0 {
		if len(p.free) == 0 {
			p.stats.TxNoBuffer++
			return nil
		}
		p.cur = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	}
	return p.buf(p.cur)
}

// Send queues the first n bytes of the current buffer; Flush delivers it.
func (p *SteeredPort) Send(n int) {
	if p.cur < 0 || n < 1 || n > p.fb {
		panic("memport: Send without Buffer or with a bad length")
	}
	p.sent = append(p.sent, p.cur)
	p.lens = append(p.lens, int32(n))
	p.cur = -1
}

// Flush copies every frame sent since the last Flush to the core it is
// steered to and publishes each link once.
func (p *SteeredPort) Flush() {
	if p.beforeTx != nil {
		p.beforeTx()
	}
	for k, b := range p.sent {
		f := p.buf(b)[:p.lens[k]]
		if p.steer.Deliver(f, f) {
			p.deliver(p.idx, f)
		}
		p.free = append(p.free, b)
	}
	p.stats.TxFrames += uint64(len(p.sent))
	p.sent, p.lens = p.sent[:0], p.lens[:0]
	for _, l := range p.out {
		l.full.publish()
	}
}

// steeredLinks is a SteeredPort as its steering sees it: the
// port.Handover to the links of the other cores.
type steeredLinks SteeredPort

// Hand copies f to core j's link.
func (l *steeredLinks) Hand(j int, f []byte) { (*SteeredPort)(l).deliver(j, f) }

// HandOthers copies f to the link of every other core.
func (l *steeredLinks) HandOthers(f []byte) {
	p := (*SteeredPort)(l)
	for j := range p.out {
		if j != p.idx {
			p.deliver(j, f)
		}
	}
}

// deliver copies f into a free buffer of the link to core j.
func (p *SteeredPort) deliver(j int, f []byte) {
	l := p.out[j]
	i, ok := l.free.pop()
	if !ok {
		p.stats.Dropped++
		return
	}
	l.lens[i] = int32(copy(l.bufs[i], f))
	l.full.push(i)
	if j != p.idx {
		p.stats.Steered++
	}
}

// Recv hands the previous burst's buffers back to their links and returns
// up to a burst of received frames from every link, round robin, valid
// until the next Recv.
func (p *SteeredPort) Recv() [][]byte {
	for k, i := range p.held {
		p.in[p.from[k]].free.push(i)
	}
	for _, l := range p.in {
		l.free.publish()
	}
	p.held, p.from, p.views = p.held[:0], p.from[:0], p.views[:0]
	n := len(p.in)
	for idle := 0; len(p.held) < cap(p.held) && idle < n; {
		j := p.next
		i, ok := p.in[j].full.pop()
		if !ok {
			idle++
			p.next = (p.next + 1) % n
			continue
		}
		idle = 0
		p.held = append(p.held, i)
		p.from = append(p.from, int32(j))
		p.views = append(p.views, p.in[j].bufs[i][:p.in[j].lens[i]])
	}
	p.next = (p.next + 1) % n
	p.stats.RxFrames += uint64(len(p.views))
	return p.views
}

// Stats returns the counters.
func (p *SteeredPort) Stats() SteeredStats { return p.stats }
