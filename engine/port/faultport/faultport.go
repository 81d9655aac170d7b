package faultport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/runner"
)

var (
	_ runner.Port    = (*Port)(nil)
	_ runner.Crosser = (*Port)(nil)
)

// Directions a Config faults.
const (
	DirRx   = "rx"   // frames the inner port receives (Recv)
	DirTx   = "tx"   // frames the core sends (Send, Flush)
	DirBoth = "both" // both, with the same probabilities and separate random streams
)

// Limits of a Config.
const (
	MaxPool         = 4096 // held frames; each buffer is engine.MaxFrameBytes
	MaxBurst        = 512  // frames per Recv (dpdk.MaxBurst)
	MaxReorderDepth = 1 << 16
	MaxDelayNs      = int64(10 * time.Second) // DelayNs + JitterNs
)

// Config says which faults a Port injects. Probabilities apply to each
// frame of the faulted direction(s) independently.
type Config struct {
	// Direction is DirRx, DirTx or DirBoth.
	Direction string `json:"direction"`
	// Drop is the probability that a frame is lost.
	Drop float64 `json:"drop"`
	// Duplicate is the probability that a frame not dropped is delivered
	// twice (the copy after the original's burst).
	Duplicate float64 `json:"duplicate"`
	// Reorder is the probability that a frame neither dropped nor delayed
	// is held until ReorderDepth later frames have passed it (or its
	// direction goes idle).
	Reorder float64 `json:"reorder"`
	// ReorderDepth is how many later frames a reordered frame waits for.
	ReorderDepth int `json:"reorder_depth"`
	// Delay is the probability that a frame not dropped is held for
	// DelayNs plus a uniform jitter in [0, JitterNs].
	Delay    float64 `json:"delay"`
	DelayNs  int64   `json:"delay_ns"`
	JitterNs int64   `json:"jitter_ns"`
	// Pool is the number of frame buffers (engine.MaxFrameBytes each) for
	// held frames, shared by both directions; allocated by New only when
	// some probability is set.
	Pool int `json:"pool"`
	// Burst is the largest number of frames one Recv returns: set it to
	// the inner port's burst (more frames than Burst from one inner
	// Recv are held for the next Recv).
	Burst int `json:"burst"`
	// Seed seeds the random streams (one PCG per direction).
	Seed uint64 `json:"seed"`
}

// DefaultConfig faults nothing: direction rx, reorder depth 4, a pool of
// 256 frames, bursts of 32 (engine/runner's), seed 0. Set a probability
// to inject faults.
func DefaultConfig() Config {
	return Config{Direction: DirRx, ReorderDepth: 4, Pool: 256, Burst: 32}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("faultport: invalid config")

// Validate checks every field; the error names the first bad one.
func (c *Config) Validate() error {
	switch c.Direction {
	case DirRx, DirTx, DirBoth:
	default:
		return fmt.Errorf("%w: Direction = %q, want %q, %q or %q", ErrConfig, c.Direction, DirRx, DirTx, DirBoth)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"Drop", c.Drop}, {"Duplicate", c.Duplicate}, {"Reorder", c.Reorder}, {"Delay", c.Delay}} {
		if !(p.v >= 0 && p.v <= 1) { // NaN fails both
			return fmt.Errorf("%w: %s = %v, want a probability in [0, 1]", ErrConfig, p.name, p.v)
		}
	}
	switch {
	case c.ReorderDepth < 1 || c.ReorderDepth > MaxReorderDepth:
		return fmt.Errorf("%w: ReorderDepth = %d, want 1..%d", ErrConfig, c.ReorderDepth, MaxReorderDepth)
	case c.DelayNs < 0 || c.DelayNs > MaxDelayNs:
		return fmt.Errorf("%w: DelayNs = %d, want 0..%d", ErrConfig, c.DelayNs, MaxDelayNs)
	case c.JitterNs < 0 || c.JitterNs > MaxDelayNs-c.DelayNs:
		return fmt.Errorf("%w: JitterNs = %d, want 0..%d (DelayNs + JitterNs at most %d)",
			ErrConfig, c.JitterNs, MaxDelayNs-c.DelayNs, MaxDelayNs)
	case c.Delay > 0 && c.DelayNs == 0 && c.JitterNs == 0:
		return fmt.Errorf("%w: Delay = %v with DelayNs = JitterNs = 0 (no delay to apply)", ErrConfig, c.Delay)
	case c.Pool < 1 || c.Pool > MaxPool:
		return fmt.Errorf("%w: Pool = %d, want 1..%d", ErrConfig, c.Pool, MaxPool)
	case c.Burst < 1 || c.Burst > MaxBurst:
		return fmt.Errorf("%w: Burst = %d, want 1..%d", ErrConfig, c.Burst, MaxBurst)
	}
	return nil
}

// Active reports whether c injects any fault (some probability is set).
// A Port whose Config is not Active is a pure pass-through.
func (c *Config) Active() bool {
	return c.Drop > 0 || c.Duplicate > 0 || c.Reorder > 0 || c.Delay > 0
}

// DirStats are the counters of one direction. Every frame that enters is
// counted once in Frames and once in exactly one of Passed, Dropped,
// Delayed, Reordered, Deferred or Overflow; every held frame (Duplicated,
// Delayed, Reordered, Deferred) is eventually counted in Released, unless
// it is lost to Overflow (tx) or held when the port stops.
type DirStats struct {
	Frames     uint64 // frames in: received from the inner port (rx), sent by the core (tx)
	Passed     uint64 // delivered at once, unfaulted (PoolEmpty's frames included)
	Dropped    uint64 // lost on purpose
	Duplicated uint64 // copies made, delivered later
	Delayed    uint64 // frames held for a delay
	Reordered  uint64 // frames held to be overtaken
	Deferred   uint64 // rx: frames beyond Burst of one inner burst, held for the next Recv
	Released   uint64 // held frames delivered
	PoolEmpty  uint64 // faults not injected for want of a pool buffer (the frame passed; no copy made)
	Overflow   uint64 // frames lost for want of room: rx, beyond Burst with the pool empty; tx, longer than the inner port's buffer
	NoBuffer   uint64 // tx: Flushes that left held frames queued because the inner port had no buffer
}

// Stats are a Port's counters.
type Stats struct {
	Rx, Tx DirStats
	Held   uint64 // pool buffers in use now: held frames of both directions, and the last Recv's released ones
}

// Port wraps a runner.Port and injects the faults of its Config. It
// implements runner.Port. Not safe for concurrent use: one goroutine (the
// runner's loop) drives it.
type Port struct {
	inner runner.Port
	cfg   Config
	now   func() int64

	pool pool
	rx   dir
	tx   dir

	out  [][]byte // rx: the burst Recv returned (cap Burst)
	lent []int32  // rx: pool buffers in out, freed by the next Recv

	txBuf    []byte // tx: the inner buffer the last Buffer returned; nil after Send
	txActive bool   // tx: Send was called since the last Flush

	beforeTx func() // engine.TxHook
}

var _ engine.TxHook = (*Port)(nil)

// SetBeforeTx implements engine.TxHook: f runs before a tx frame is
// dropped, copied (held or duplicated) or passed on with tx faults on,
// before the inner port is flushed, and, if the inner port implements
// engine.TxHook too, wherever it transmits (f is passed on).
func (p *Port) SetBeforeTx(f func()) {
	p.beforeTx = f
	if h, ok := p.inner.(engine.TxHook); ok {
		h.SetBeforeTx(f)
	}
}

// TxMemory implements engine.TxMemory for an inner port that does (the
// buffers Buffer returns are the inner port's); nil otherwise.
func (p *Port) TxMemory() [][]byte {
	if m, ok := p.inner.(engine.TxMemory); ok {
		return m.TxMemory()
	}
	return nil
}

func (p *Port) hook() {
	if p.beforeTx != nil {
		p.beforeTx()
	}
}

// New wraps inner. now is the clock delays are measured on (monotonic
// nanoseconds); nil is runner.Monotonic, the runner's default clock.
func New(inner runner.Port, cfg Config, now func() int64) (*Port, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: nil inner port", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = runner.Monotonic
	}
	p := &Port{
		inner: inner,
		cfg:   cfg,
		now:   now,
		out:   make([][]byte, 0, cfg.Burst),
		lent:  make([]int32, 0, cfg.Burst),
	}
	if cfg.Active() {
		p.pool.init(cfg.Pool)
		p.rx.init(&p.pool, cfg.Seed, 0x72785f6661756c74) // "rx_fault"
		p.tx.init(&p.pool, cfg.Seed, 0x74785f6661756c74) // "tx_fault"
		p.rx.on = cfg.Direction != DirTx
		p.tx.on = cfg.Direction != DirRx
	}
	return p, nil
}

// Crossings implements runner.Crosser: the inner port's calls into C
// (0 for one that makes none), so a loop over a faulty DPDK port counts
// them. The wrapper is flushed every iteration (it is no
// runner.SendsOnRecv: its delayed frames are released in Flush).
func (p *Port) Crossings() uint64 {
	if c, ok := p.inner.(runner.Crosser); ok {
		return c.Crossings()
	}
	return 0
}

// Inner is the wrapped port (for its own counters and methods).
func (p *Port) Inner() runner.Port { return p.inner }

// Config is the Config the Port was made with.
func (p *Port) Config() Config { return p.cfg }

// Stats returns the counters. On the Port's goroutine (e.g. inside
// runner.Exec), or after the runner has stopped.
func (p *Port) Stats() Stats {
	return Stats{Rx: p.rx.st, Tx: p.tx.st, Held: uint64(len(p.pool.bufs) - len(p.pool.free))}
}

// Buffer returns the inner port's buffer for the next frame (nil when it
// has none). Until Send, repeated calls return the same buffer.
func (p *Port) Buffer() []byte {
	b := p.inner.Buffer()
	p.txBuf = b
	return b
}

// Send hands the first n bytes of the current buffer over: to the inner
// port at once, or (tx faulted) dropped, or copied and held, or sent and
// copied for a duplicate. A dropped or held frame is not sent, so its
// buffer stays the inner port's current one. Send without a current buffer
// or with n outside 1..len(buffer) panics (a bug in the caller).
func (p *Port) Send(n int) {
	d := &p.tx
	if !d.on {
		p.txBuf = nil
		p.inner.Send(n)
		d.st.Frames++
		d.st.Passed++
		return
	}
	b := p.txBuf
	if b == nil || n < 1 || n > len(b) {
		panic("faultport: Send without Buffer or with a bad length")
	}
	p.hook() // the frame is complete before it is dropped (its buffer is reused) or copied
	p.txBuf = nil
	p.txActive = true
	f := b[:n]
	act, dropped := p.dropOrDup(d, f)
	if dropped {
		return
	}
	var now int64
	if act == actDelay {
		now = p.now()
	}
	if p.hold(d, act, f, now) {
		return
	}
	p.inner.Send(n)
	d.passed++
	d.st.Passed++
}

// Flush releases the tx frames that are due (delayed frames whose time has
// come, reordered frames overtaken ReorderDepth times, or all reordered
// frames when nothing was sent since the last Flush, and copies) through
// the inner port's Buffer and Send, then flushes the inner port.
func (p *Port) Flush() {
	if d := &p.tx; d.on {
		if d.delayed.len() > 0 {
			d.releaseDue(p.now())
		}
		d.releaseReordered(!p.txActive)
		p.txActive = false
		if d.ready.n > 0 {
			p.txBuf = nil // the inner port's current buffer is used below
		}
		for d.ready.n > 0 {
			b := p.inner.Buffer()
			if b == nil {
				d.st.NoBuffer++
				break
			}
			i := d.ready.pop()
			f := p.pool.frame(i)
			if len(f) > len(b) {
				d.st.Overflow++
			} else {
				p.inner.Send(copy(b, f))
				d.st.Released++
			}
			p.pool.put(i)
		}
	}
	p.hook()
	p.inner.Flush()
}

// Recv returns the next burst, at most Burst frames, valid until the next
// Recv. With rx faulted: held frames that are due come first, without a
// call to the inner port; else the inner port's next burst, less the
// frames dropped or held, followed by due frames while there is room.
func (p *Port) Recv() [][]byte {
	for _, i := range p.lent {
		p.pool.put(i)
	}
	p.lent = p.lent[:0]
	d := &p.rx
	if !d.on {
		in := p.inner.Recv()
		d.st.Frames += uint64(len(in))
		d.st.Passed += uint64(len(in))
		return in
	}
	p.out = p.out[:0]
	var now int64
	if d.delayed.len() > 0 || p.cfg.Delay > 0 {
		now = p.now()
		d.releaseDue(now)
	}
	if d.ready.n == 0 {
		in := p.inner.Recv()
		for _, f := range in {
			p.recvFrame(d, f, now)
		}
		d.releaseReordered(len(in) == 0)
	}
	for d.ready.n > 0 && len(p.out) < cap(p.out) {
		i := d.ready.pop()
		p.out = append(p.out, p.pool.frame(i))
		p.lent = append(p.lent, i)
		d.st.Released++
	}
	return p.out
}

// recvFrame applies the faults to one received frame.
func (p *Port) recvFrame(d *dir, f []byte, now int64) {
	act, dropped := p.dropOrDup(d, f)
	if dropped {
		return
	}
	if p.hold(d, act, f, now) {
		return
	}
	if len(p.out) < cap(p.out) {
		p.out = append(p.out, f)
		d.passed++
		d.st.Passed++
		return
	}
	// More frames than Burst from one inner burst: the rest wait.
	if i, ok := p.pool.get(f); ok {
		d.ready.push(i)
		d.st.Deferred++
		return
	}
	d.st.Overflow++
}

// dropOrDup counts frame f into direction d and draws its fault: a drop
// (dropped), or what to do with it (act), after queuing a duplicate if one
// was drawn.
func (p *Port) dropOrDup(d *dir, f []byte) (act action, dropped bool) {
	d.st.Frames++
	act, dup := d.decide(&p.cfg)
	if act == actDrop {
		d.st.Dropped++
		return act, true
	}
	if dup {
		p.duplicate(d, f)
	}
	return act, false
}

// duplicate queues a copy of f for release.
func (p *Port) duplicate(d *dir, f []byte) {
	if i, ok := p.pool.get(f); ok {
		d.ready.push(i)
		d.st.Duplicated++
		return
	}
	d.st.PoolEmpty++
}

// hold copies f into the pool for a delay (due at now plus the delay) or
// a reorder, as act says. It returns false when the frame is to pass now:
// act is actPass, or the pool is empty.
func (p *Port) hold(d *dir, act action, f []byte, now int64) bool {
	if act == actPass {
		return false
	}
	i, ok := p.pool.get(f)
	if !ok {
		d.st.PoolEmpty++
		return false
	}
	if act == actDelay {
		due := now + p.cfg.DelayNs
		if p.cfg.JitterNs > 0 {
			due += d.rng.Int64N(p.cfg.JitterNs + 1)
		}
		p.pool.at[i] = due
		p.pool.seq[i] = d.seq
		d.seq++
		d.delayed.push(i)
		d.st.Delayed++
		return true
	}
	p.pool.at[i] = int64(d.passed) + int64(p.cfg.ReorderDepth)
	d.reordered.push(i)
	d.st.Reordered++
	return true
}

// Close returns every held frame to the pool (they are lost) and closes
// the inner port if it has a Close method (dpdkport.Port does). After the
// runner has stopped.
func (p *Port) Close() {
	for _, d := range []*dir{&p.rx, &p.tx} {
		for d.ready.n > 0 {
			p.pool.put(d.ready.pop())
		}
		for d.reordered.n > 0 {
			p.pool.put(d.reordered.pop())
		}
		for d.delayed.len() > 0 {
			p.pool.put(d.delayed.pop())
		}
	}
	for _, i := range p.lent {
		p.pool.put(i)
	}
	p.lent, p.out = p.lent[:0], p.out[:0]
	if c, ok := p.inner.(interface{ Close() }); ok {
		c.Close()
	}
}

type action uint8

const (
	actPass action = iota
	actDrop
	actDelay
	actReorder
)

// dir is the state of one direction.
type dir struct {
	on   bool // faults apply
	rng  *rand.Rand
	pcg  rand.PCG
	pool *pool

	passed uint64 // frames passed at once so far: the reorder clock
	seq    uint64 // delayed frames so far: ties of the delay heap

	ready     fifo    // held frames to deliver, in order
	reordered fifo    // frames held to be overtaken, release "time" (pool.at) non-decreasing
	delayed   dueHeap // frames held until pool.at
	st        DirStats
}

func (d *dir) init(pl *pool, seed, stream uint64) {
	d.pool = pl
	d.pcg = *rand.NewPCG(seed, stream)
	d.rng = rand.New(&d.pcg)
	n := len(pl.bufs)
	d.ready.init(n)
	d.reordered.init(n)
	d.delayed = dueHeap{h: make([]int32, 0, n), pool: pl}
}

// decide draws a frame's fate: what happens to it, and whether a copy is
// made as well. Only probabilities that are set consume random numbers.
func (d *dir) decide(c *Config) (act action, dup bool) {
	if c.Drop > 0 && d.rng.Float64() < c.Drop {
		return actDrop, false
	}
	dup = c.Duplicate > 0 && d.rng.Float64() < c.Duplicate
	switch {
	case c.Delay > 0 && d.rng.Float64() < c.Delay:
		return actDelay, dup
	case c.Reorder > 0 && d.rng.Float64() < c.Reorder:
		return actReorder, dup
	}
	return actPass, dup
}

// releaseDue moves the delayed frames due at now to ready, earliest first.
func (d *dir) releaseDue(now int64) {
	for d.delayed.len() > 0 && d.pool.at[d.delayed.min()] <= now {
		d.ready.push(d.delayed.pop())
	}
}

// releaseReordered moves reordered frames that ReorderDepth frames have
// overtaken, or all of them, to ready.
func (d *dir) releaseReordered(all bool) {
	for d.reordered.n > 0 && (all || d.pool.at[d.reordered.peek()] <= int64(d.passed)) {
		d.ready.push(d.reordered.pop())
	}
}

// pool is the fixed set of buffers for held frames.
type pool struct {
	bufs [][]byte // each engine.MaxFrameBytes
	lens []int32
	at   []int64  // delayed: due time; reordered: the dir.passed value that releases it
	seq  []uint64 // delayed: arrival order, for ties
	free []int32  // stack of free buffers
}

func (pl *pool) init(n int) {
	mem := make([]byte, n*engine.MaxFrameBytes)
	pl.bufs = make([][]byte, n)
	for i := range pl.bufs {
		pl.bufs[i] = mem[i*engine.MaxFrameBytes : (i+1)*engine.MaxFrameBytes : (i+1)*engine.MaxFrameBytes]
	}
	pl.lens = make([]int32, n)
	pl.at = make([]int64, n)
	pl.seq = make([]uint64, n)
	pl.free = make([]int32, n)
	for i := range pl.free {
		pl.free[i] = int32(n - 1 - i)
	}
}

// get copies f into a free buffer; false when none is free or f is longer
// than a buffer.
func (pl *pool) get(f []byte) (int32, bool) {
	k := len(pl.free)
	if k == 0 || len(f) > engine.MaxFrameBytes {
		return 0, false
	}
	i := pl.free[k-1]
	pl.free = pl.free[:k-1]
	pl.lens[i] = int32(copy(pl.bufs[i], f))
	return i, true
}

func (pl *pool) put(i int32) { pl.free = append(pl.free, i) } // cap is the pool size

func (pl *pool) frame(i int32) []byte { return pl.bufs[i][:pl.lens[i]] }

// fifo is a ring of pool indices; its capacity is the pool size, and an
// index is in at most one queue at a time, so it never overflows.
type fifo struct {
	s       []int32
	head, n int
}

func (q *fifo) init(n int) { q.s = make([]int32, n) }

func (q *fifo) push(i int32) {
	j := q.head + q.n
	if j >= len(q.s) {
		j -= len(q.s)
	}
	q.s[j] = i
	q.n++
}

func (q *fifo) peek() int32 { return q.s[q.head] }

func (q *fifo) pop() int32 {
	i := q.s[q.head]
	q.head++
	if q.head == len(q.s) {
		q.head = 0
	}
	q.n--
	return i
}

// dueHeap is a binary min-heap of pool indices by (pool.at, pool.seq).
type dueHeap struct {
	h    []int32 // cap is the pool size
	pool *pool
}

func (q *dueHeap) len() int { return len(q.h) }

func (q *dueHeap) min() int32 { return q.h[0] }

func (q *dueHeap) less(a, b int32) bool {
	if x, y := q.pool.at[a], q.pool.at[b]; x != y {
		return x < y
	}
	return q.pool.seq[a] < q.pool.seq[b]
}

func (q *dueHeap) push(i int32) {
	q.h = append(q.h, i)
	for j := len(q.h) - 1; j > 0; {
		parent := (j - 1) / 2
		if !q.less(q.h[j], q.h[parent]) {
			break
		}
		q.h[j], q.h[parent] = q.h[parent], q.h[j]
		j = parent
	}
}

func (q *dueHeap) pop() int32 {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	for j := 0; ; {
		l, r, m := 2*j+1, 2*j+2, j
		if l < last && q.less(q.h[l], q.h[m]) {
			m = l
		}
		if r < last && q.less(q.h[r], q.h[m]) {
			m = r
		}
		if m == j {
			break
		}
		q.h[j], q.h[m] = q.h[m], q.h[j]
		j = m
	}
	return top
}
