package dpdkport

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
)

var (
	_ runner.Port        = (*Port)(nil)
	_ runner.SendsOnRecv = (*Port)(nil)
	_ runner.Crosser     = (*Port)(nil)
	_ engine.TxHook      = (*Port)(nil)
	_ engine.TxCHook     = (*Port)(nil)
	_ engine.TxMemory    = (*Port)(nil)
)

// Config tunes a Port.
type Config struct {
	// Burst is the largest rx and tx burst (a multiple of 8 suits every
	// driver).
	Burst int
	// Stash is the number of free tx mbufs kept ready; refilled in bulk
	// when below half.
	Stash int
	// TxRetries is the number of extra tx attempts for frames the queue
	// refused before they are dropped.
	TxRetries int
	// FrameBytes is the smallest buffer Buffer may return: New checks the
	// pool's data room against it. engine.Tx promises
	// engine.MaxFrameBytes; a core with a smaller MTU writes at most
	// 14+MTU bytes, and a port sized for that may use smaller mbufs.
	FrameBytes int
	// HandOverRing is the number of frames each ring from one core to
	// another holds (Queues; N(N-1) rings for N cores): rx mbufs a core
	// has handed over and its destination has not yet received.
	HandOverRing int
}

// DefaultConfig: bursts of 32, a stash of 64, 4 retries, frames up to
// engine.MaxFrameBytes (jumbo mbufs), hand-over rings of 512 frames (16
// bursts).
func DefaultConfig() Config {
	return Config{Burst: 32, Stash: 64, TxRetries: 4, FrameBytes: engine.MaxFrameBytes, HandOverRing: 512}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("dpdkport: invalid config")

// Validate checks every field.
func (c *Config) Validate() error {
	switch {
	case c.Burst < 1 || c.Burst > dpdk.MaxBurst:
		return fmt.Errorf("%w: Burst = %d", ErrConfig, c.Burst)
	case c.Stash < 1 || c.Stash > 1<<15:
		return fmt.Errorf("%w: Stash = %d", ErrConfig, c.Stash)
	case c.TxRetries < 0 || c.TxRetries > 1<<10:
		return fmt.Errorf("%w: TxRetries = %d", ErrConfig, c.TxRetries)
	case c.FrameBytes < 60 || c.FrameBytes > 1<<16-1-dpdk.Headroom:
		return fmt.Errorf("%w: FrameBytes = %d", ErrConfig, c.FrameBytes)
	case c.HandOverRing < c.Burst || c.HandOverRing > 1<<16:
		return fmt.Errorf("%w: HandOverRing = %d (a burst, %d, to 65536)", ErrConfig, c.HandOverRing, c.Burst)
	}
	return nil
}

// Stats are a Port's counters.
type Stats struct {
	TxFrames    uint64 // accepted by the tx queue
	TxDropped   uint64 // refused by the tx queue after all retries
	TxNoBuffer  uint64 // Buffer found no free mbuf (pool exhausted)
	RxFrames    uint64 // returned by Recv
	RxMultiSeg  uint64 // multi-segment frames dropped (scatter is never enabled)
	AllocFails  uint64 // stash refills that could not fill the stash
	IOCalls     uint64 // cgo crossings (dpdk.PortIO.Do; the hand-over and the seals ride in them)
	TxFullCalls uint64 // of those, made in the middle of an iteration: a tx burst or the stash ran out

	// Hand-over between the cores of an engine (Queues): frames this
	// core's queue received for another core, and frames other cores
	// handed to this one. An ARP frame counts once per core it went to.
	HandedOut    uint64 // put in another core's ring
	HandedIn     uint64 // taken from the other cores' rings (part of RxFrames)
	HandOverFull uint64 // lost: the destination's ring was full (freed)
}

// Port is one rx/tx queue pair of a started DPDK port. It implements
// runner.Port and engine.Tx. Not safe for concurrent use.
type Port struct {
	id    dpdk.PortID
	queue uint16
	io    *dpdk.PortIO
	mac   [6]byte
	pool  *dpdk.Mempool

	cur    *dpdk.Mbuf // handed out by Buffer, not yet sent
	curBuf []byte     // its data room
	views  [][]byte   // the last rx burst, as returned by Recv

	noBuffer, multiSeg, rxFrames, fullCalls uint64

	beforeTx func() // engine.TxHook: runs before every crossing that transmits
	settle   func() // engine.TxCHook: runs after every crossing (its C hook may have run)
	cHook    bool   // engine.TxCHook: a C hook is set

	ho *handover // its part in a Queues (nil: a port of its own)

	stg    *stage.Stages // cost accounting (SetStages; nil: none)
	stamps bool          // the crossings record the time-stamp counter (SetStages)
}

// stampsCount says whether the time-stamp counter dpdk's crossing reads
// (rte_rdtsc) counts as the Stages' counter does: RDTSC both, on amd64,
// where rmad's counter (internal/tsc.Read) is RDTSC. Elsewhere a crossing
// is not split: its seals and transmits stay in the stage it runs in.
const stampsCount = runtime.GOARCH == "amd64"

// SetStages makes the port mark the Stages of the loop that drives it on
// s (nil: no marks). The crossings that only transmit (Flush, and the one
// it makes from within the core's Poll when the core asks for a buffer and
// the tx burst is full or the stash empty) are sections of Transmit, and
// are left in the caller's Transmit when it is in one. Recv's crossing
// runs in its caller's section (the runner's Receive, which ends as
// EmptyRx when nothing came), and since Recv also sends the frames queued
// since the last crossing, the parts of it that are not receiving are
// charged apart (stage.Stages.Charge): Transmit the outbound hand-over,
// the tx burst and the stash's refill; Seal the C pre-transmit hook's run
// (engine.TxCHook: the core's seal batch) and its settle. The crossings of
// Flush and Buffer charge their hook's run to Seal the same way. The
// spans are measured in the crossing: dpdk.PortIO.SetStamps (on amd64,
// where they count as s's counter must, the CPU's time-stamp counter: see
// stampsCount). Before the loop runs.
func (p *Port) SetStages(s *stage.Stages) {
	p.stg = s
	p.stamps = s != nil && stampsCount
	if p.io != nil {
		p.io.SetStamps(p.stamps)
	}
}

// SetBeforeTx implements engine.TxHook: f runs right before queued frames
// are transmitted (the crossings of Buffer with a full burst, Flush and
// Recv), so a core that seals lazily finishes the frames first.
func (p *Port) SetBeforeTx(f func()) { p.beforeTx = f }

func (p *Port) hook() {
	if p.beforeTx != nil {
		p.beforeTx()
	}
}

// SetCBeforeTx implements engine.TxCHook: fn(arg), a C function, runs
// inside every crossing that transmits, right before the burst leaves
// (dpdk.PortIO.SetPreTx), and settle after every crossing.
// After Close it only forgets settle.
func (p *Port) SetCBeforeTx(fn, arg unsafe.Pointer, settle func()) {
	if p.io != nil {
		p.io.SetPreTx(fn, arg)
	}
	p.settle, p.cHook = settle, fn != nil
}

// do is the one crossing: dpdk.PortIO.Do, then the TxCHook's settle.
func (p *Port) do(rx bool) int {
	if p.stamps {
		return p.doStaged(rx)
	}
	n := p.io.Do(rx)
	if p.settle != nil {
		p.settle()
	}
	return n
}

// doStaged is do with the crossing's parts charged apart (SetStages): the
// C hook's run and its settle to Seal; with rx, when it sends something,
// the outbound hand-over, the tx burst and the refill to Transmit. The
// rest (entering and leaving C, freeing the last rx burst, the rx burst)
// stays in the section running (Recv's caller's; Transmit's for a
// crossing that only transmits).
func (p *Port) doStaged(rx bool) int {
	s := p.stg
	tx := p.io.TxLen() > 0
	out := p.ho != nil && p.ho.fan.Len() > 0
	n := p.io.Do(rx)
	t := p.io.Stamps()
	if tx && p.cHook {
		s.Charge(stage.Seal, t.PreTxHook(), p.settle)
	} else if p.settle != nil {
		p.settle()
	}
	if rx && (tx || out) {
		s.Charge(stage.Transmit, t.Outbound()+t.Send()+t.Refill(), nil)
	}
	return n
}

// transmit is a crossing that transmits and receives nothing (Flush, a
// full tx burst or an empty stash): with stages, a section of Transmit,
// or a part of the caller's.
func (p *Port) transmit() {
	s := p.stg
	if s == nil || s.Current() == stage.Transmit {
		p.hook()
		p.do(false)
		return
	}
	prev := s.Enter(stage.Transmit)
	p.hook()
	p.do(false)
	s.Enter(prev)
}

// SendsOnRecv implements runner.SendsOnRecv: Recv transmits what Send
// queued, in the crossing that receives.
func (p *Port) SendsOnRecv() {}

// Crossings implements runner.Crosser: the crossings into C so far.
func (p *Port) Crossings() uint64 {
	n := p.io.Calls()
	if p.ho != nil {
		n += p.ho.fan.Counters().Calls
	}
	return n
}

// New binds a Port to queue q of the started port called name (the name
// given to --vdev, or a PCI address), taking tx mbufs from pool. New does
// not configure the device: dpdk.PortID.Setup does, once for all queues.
func New(name string, pool *dpdk.Mempool, q uint16, cfg Config) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrConfig)
	}
	if room := pool.DataRoom() - dpdk.Headroom; room < cfg.FrameBytes {
		return nil, fmt.Errorf("%w: pool %s has %d bytes of data room after the headroom, FrameBytes is %d",
			ErrConfig, pool.Name(), room, cfg.FrameBytes)
	}
	id, err := dpdk.PortByName(name)
	if err != nil {
		return nil, err
	}
	mac, err := id.MACAddr()
	if err != nil {
		return nil, err
	}
	io, err := dpdk.NewPortIO(id, q, pool, cfg.Burst, cfg.Stash, cfg.TxRetries)
	if err != nil {
		return nil, err
	}
	// Room for a burst from the port and one handed in (Queues).
	return &Port{id: id, queue: q, io: io, mac: mac, pool: pool, views: make([][]byte, 0, 2*cfg.Burst)}, nil
}

// TxMemory implements engine.TxMemory: the tx pool's memory ranges
// (dpdk.Mempool.Memory joins the pool's adjacent per-page chunks, so a
// pool in one memzone of hugepages is one range). Every buffer Buffer
// hands out lies in them, and so does every received frame when the rx
// queue takes its mbufs from the same pool, as rmad sets it up: registered
// once with the core's ipsec-mb batch, no buffer is looked up for pinning
// per seal or open (C memory needs no pin, but looking it up per message
// is a visible part of a 64 B READ's cost).
func (p *Port) TxMemory() [][]byte { return p.pool.Memory() }

// ID is the DPDK port id.
func (p *Port) ID() dpdk.PortID { return p.id }

// Queue is the queue pair index.
func (p *Port) Queue() uint16 { return p.queue }

// MAC is the port's Ethernet address.
func (p *Port) MAC() [6]byte { return p.mac }

// Buffer returns the data room of a free mbuf for the next frame (at least
// FrameBytes), or nil when the pool is exhausted. Until Send, repeated
// calls return the same buffer.
func (p *Port) Buffer() []byte {
	if p.cur == nil {
		p.take()
	}
	return p.curBuf
}

// take makes a stash mbuf the current buffer (kept out of Buffer so that
// Buffer's common case, the same buffer again, inlines).
func (p *Port) take() {
	if p.io.StashLen() == 0 || p.io.TxLen() == p.io.Burst() {
		// Send the full tx burst and refill the stash: one crossing.
		p.transmit()
		p.fullCalls++
	}
	m := p.io.TakeStash()
	if m == nil {
		p.noBuffer++
		return
	}
	p.cur, p.curBuf = m, m.Room()
}

// Send queues the first n bytes of the current buffer for transmission. A
// full burst goes out with the next Buffer, Flush or Recv, whichever comes
// first (each is one crossing anyway). Send without a current buffer or
// with n outside 1..len(buffer) panics (a bug in the caller).
func (p *Port) Send(n int) {
	m := p.cur
	if m == nil || n < 1 || n > len(p.curBuf) {
		panic("dpdkport: Send without Buffer or with a bad length")
	}
	m.SetLen(n)
	p.cur, p.curBuf = nil, nil
	p.io.QueueTx(m) // Buffer made room: never full here
}

// Flush sends the queued tx burst and the frames handed to other cores
// (no crossing when there are none).
func (p *Port) Flush() {
	if p.io.TxLen() > 0 || (p.ho != nil && p.ho.fan.Len() > 0) {
		p.transmit()
	}
}

// Recv frees the previous rx burst and returns views of the next one,
// valid until the next Recv. Queued tx frames are sent in the same
// crossing, and so are the frames the last Recv handed to other cores. A
// Port of Queues returns its queue's frames for its own core and those
// other cores handed to it (at most a burst of each), and hands the
// others over (Queues).
func (p *Port) Recv() [][]byte {
	if p.io.TxLen() > 0 {
		p.hook()
	}
	n := p.do(true)
	if p.ho != nil {
		p.views = p.steer(p.io.Rx())
		p.rxFrames += uint64(len(p.views))
		return p.views
	}
	views := p.views[:n] // n <= Burst <= cap(p.views)
	k := 0
	for _, m := range p.io.Rx() {
		if m.Segs() != 1 {
			p.multiSeg++
			continue
		}
		views[k] = m.Data()
		k++
	}
	p.views = views[:k]
	p.rxFrames += uint64(k)
	return p.views
}

// Stats returns the counters. On the Port's goroutine (e.g. inside
// runner.Exec).
func (p *Port) Stats() Stats {
	c := p.io.Counters()
	s := Stats{
		TxFrames:    c.TxPackets,
		TxDropped:   c.TxDropped,
		TxNoBuffer:  p.noBuffer,
		RxFrames:    p.rxFrames,
		RxMultiSeg:  p.multiSeg,
		AllocFails:  c.AllocFails,
		IOCalls:     c.Calls,
		TxFullCalls: p.fullCalls,
		HandedIn:    c.RxRing,
	}
	if p.ho != nil {
		f := p.ho.fan.Counters()
		s.IOCalls += f.Calls
		s.HandedOut, s.HandOverFull = f.Sent, f.Dropped
	}
	return s
}

// Close returns every mbuf the Port holds to the pool: the current buffer,
// queued tx frames (not sent), the last rx burst and the stash. After the
// runner has stopped; the device itself stays up.
func (p *Port) Close() {
	if p.io == nil {
		return
	}
	if p.cur != nil {
		if !p.io.ReturnStash(p.cur) {
			p.cur.Free()
		}
		p.cur, p.curBuf = nil, nil
	}
	p.io.Close()
	p.io = nil
	p.views = p.views[:0]
	if p.ho != nil {
		p.ho.fan.Close()
	}
}

// ThreadHooks returns runner.Config ThreadStart/ThreadExit hooks for a loop
// that drives DPDK ports: start pins the loop's thread to cpus (none: leave
// the affinity alone), moves the process's other threads off them
// (dpdk.KeepOthersOff) and registers the thread with the EAL, so the
// mempool's per-lcore cache serves it; exit unregisters it.
func ThreadHooks(cpus ...int) (start func() error, exit func()) {
	start = func() error {
		if len(cpus) > 0 {
			if err := dpdk.SetAffinity(cpus...); err != nil {
				return err
			}
			// The rest of the process (runtime threads woken by the
			// loop's syscalls, the control plane, DPDK's control
			// threads) runs elsewhere when it can.
			if _, err := dpdk.KeepOthersOff(cpus...); err != nil {
				return err
			}
		}
		_, err := dpdk.RegisterThread()
		return err
	}
	return start, dpdk.UnregisterThread
}
