package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/tsc"
	"golang.org/x/sys/unix"
)

// Port is one rx/tx queue pair as the loop sees it. The Core writes frames
// through the embedded engine.Tx; the loop calls Recv once per iteration
// and Flush after the core has run. One goroutine (the loop's) uses it.
type Port interface {
	engine.Tx
	// Recv releases the previous burst and returns the next one: at most
	// a burst (32) of received frames, possibly none, and, on an engine of
	// several cores whose port hands frames between them, at most a burst
	// more that other cores handed to this one. The frames are valid
	// until the next Recv.
	Recv() [][]byte
	// Flush transmits every frame queued with Send.
	Flush()
}

// SendsOnRecv is implemented by a Port whose Recv transmits what Send
// queued, in the same crossing into C as the receive (the DPDK port:
// dpdk.PortIO.Do sends, then receives). The loop then leaves the frames
// an iteration queued to the next iteration's Recv, right after it,
// instead of flushing them in a crossing of their own; it flushes only
// before it runs control-plane closures, sleeps, yields or stops.
type SendsOnRecv interface {
	SendsOnRecv()
}

// Crosser is implemented by a Port that calls into C (cgo): Crossings is
// how many calls it has made. The loop adds the core's own
// (engine.Core.Crossings) and counts them per iteration (Stats).
type Crosser interface {
	Crossings() uint64
}

// MaxCrossings is the most cgo crossings an iteration is meant to make:
// one for the port's poll step (with the seals of the frames it sends, and
// the frames this core hands to others), one for the opens of the burst
// it received. Stats.CrossingsOver counts the iterations that made more.
const MaxCrossings = 2

// Mode is the loop's idle policy.
type Mode int

const (
	// Busy polls without ever sleeping (a dedicated, pinned CPU).
	Busy Mode = iota
	// Backoff sleeps when idle (shared CPUs, tests).
	Backoff
	// Yield polls without sleeping but gives the CPU to any other runnable
	// thread (sched_yield) after IdleSpins idle iterations: for an engine
	// pinned to a CPU it shares with its latency-critical application,
	// which spins with sched_yield too (a small host where the application
	// and its engine get one core between them). With nothing else
	// runnable it is Busy. The application must be in the engine's
	// scheduling group (the same session under autogroup scheduling, the
	// same cgroup): on EEVDF kernels sched_yield moves the thread back
	// only within its group, and does not hand the CPU to another's.
	Yield
)

func (m Mode) String() string {
	switch m {
	case Busy:
		return "busy"
	case Backoff:
		return "backoff"
	case Yield:
		return "yield"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config tunes a Runner.
type Config struct {
	Mode Mode
	// IdleSpins is the number of consecutive idle iterations (nothing
	// received, polled or executed) before Backoff sleeps.
	IdleSpins int
	// MinSleep and MaxSleep bound Backoff's exponential sleep.
	MinSleep, MaxSleep time.Duration
	// ExecQueue is the capacity of the control-plane queue; Exec blocks
	// while it is full.
	ExecQueue int
	// ThreadStart, if set, runs on the loop's goroutine, locked to its OS
	// thread, before the first iteration (pin the thread, register it with
	// the EAL). An error aborts Start.
	ThreadStart func() error
	// ThreadExit, if set, runs on the same thread after the last
	// iteration (unregister from the EAL).
	ThreadExit func()
	// Clock returns monotonic nanoseconds; nil: Monotonic, which the
	// loop itself reads through an internal/tsc.Clock where the kernel
	// keeps its clock on the CPU's counter (tsc.Stable): the two agree
	// to the bound tsc.Clock states.
	Clock func() int64
	// Lend lets a loop asleep in Backoff lend its core to a caller of
	// Exec, who runs the closure itself: neither the loop nor, once the
	// closure has run, the caller waits for a wake-up. The closure still
	// never runs beside an iteration (a loop that wakes meanwhile waits
	// for the core), but not on the loop's thread, and the loop sees
	// what it changed when its sleep ends (at most MaxSleep, or the
	// core's next deadline as it was). Off, every closure runs on the
	// loop's thread (ThreadStart's). Busy and Yield loops never sleep, so
	// never lend.
	Lend bool
	// ExecSpin is how long Exec's caller of a Busy loop watches for its
	// closure to have run before it blocks (0: it blocks at once). The
	// loop runs closures between two iterations, within microseconds, but
	// closing the caller's channel makes the caller runnable on the loop's
	// own P, which a busy loop never gives up: the caller then waits for
	// another thread to wake and steal it, tens of microseconds. Watching
	// a flag instead, it returns as soon as the closure has run. Set it
	// only for a loop with a CPU of its own: where the loop shares its CPU
	// with the caller's thread, the watching delays the loop.
	ExecSpin time.Duration
	// StallThreshold: when more than this passes between two iterations
	// beyond the sleep the loop asked for (its thread was preempted or
	// descheduled, or an Exec closure ran long), the loop counts a stall
	// and tells the core (Core.Stalled), which moves its own ops'
	// deadlines by the gap. 0: no stall detection.
	StallThreshold time.Duration
	// Stages, if set, is the cost accounting of the loop (package
	// engine/stage): the loop resets it when it starts and marks its own
	// boundaries on it: Receive from the rx poll on (EmptyRx if it
	// found nothing, and then EmptyPoll for the rest of the iteration if
	// Poll found nothing to do), Transmit from the end of Poll through
	// Flush (a port flushed every iteration), Clock from there (or from
	// the end of Poll, for a port that sends on Recv) through the top of
	// the next iteration (its clock read), Loop around control-plane
	// closures, Idle around sleeps and yields. The core and the port mark
	// theirs when given the same Stages (engine.Core.SetStages,
	// dpdkport.Port.SetStages); a port that sends on Recv (SendsOnRecv)
	// marks the transmit and seal parts of its Recv's crossing, and its
	// Flush, itself. It belongs to the loop's goroutine. The marks read
	// the Stages' own counter, never Clock: the invariants' clock reads
	// (Stats.ClockReads) are the same with and without it.
	Stages *stage.Stages
}

// DefaultConfig is Backoff with 64 idle spins and sleeps from 1µs to 200µs.
func DefaultConfig() Config {
	return Config{
		Mode:      Backoff,
		IdleSpins: 64,
		MinSleep:  time.Microsecond,
		MaxSleep:  200 * time.Microsecond,
		ExecQueue: 64,
		// Iterations take microseconds, and a hypervisor's usual
		// stalls tens of them; rmad's TIMEOUT is at least 2 ms
		// (tools/rmad/timeout.go).
		StallThreshold: time.Millisecond,
	}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("runner: invalid config")

// Validate checks every field.
func (c *Config) Validate() error {
	switch {
	case c.Mode != Busy && c.Mode != Backoff && c.Mode != Yield:
		return fmt.Errorf("%w: Mode = %v", ErrConfig, c.Mode)
	case c.IdleSpins < 0:
		return fmt.Errorf("%w: IdleSpins = %d", ErrConfig, c.IdleSpins)
	case c.Mode == Backoff && (c.MinSleep <= 0 || c.MaxSleep < c.MinSleep || c.MaxSleep > time.Second):
		return fmt.Errorf("%w: MinSleep = %v, MaxSleep = %v", ErrConfig, c.MinSleep, c.MaxSleep)
	case c.ExecQueue < 1:
		return fmt.Errorf("%w: ExecQueue = %d", ErrConfig, c.ExecQueue)
	case c.StallThreshold < 0:
		return fmt.Errorf("%w: StallThreshold = %v", ErrConfig, c.StallThreshold)
	}
	return nil
}

// Errors of Start, Exec and Stop.
var (
	ErrStopped    = errors.New("runner: stopped")
	ErrNotStarted = errors.New("runner: not started")
	ErrStarted    = errors.New("runner: already started")
)

var epoch = time.Now()

// Monotonic is the default clock: nanoseconds on the monotonic clock since
// the package was loaded, plus one second, so it is never 0 or small
// (which a core could take for "unset").
func Monotonic() int64 { return int64(time.Since(epoch)) + int64(time.Second) }

// Stats are a Runner's counters. They are published by the loop every few
// hundred iterations, before each sleep and when it stops.
//
// The loop's invariants are counted here, never timed: per iteration one
// clock read (ClockReads: Iterations, plus one per sleep cut short, plus
// one at stop), at most MaxCrossings calls into C (Crossings,
// CrossingsMax, CrossingsOver), and no look at a portal's command ring
// with nothing new outside the engine's fallback scans (the Ring*
// counters, engine.PathCounters).
type Stats struct {
	Iterations uint64 // loop iterations
	IdleSleeps uint64 // Backoff sleeps
	Yields     uint64 // Yield: CPU given up when idle
	SleptNs    uint64 // total sleep asked for
	RxFrames   uint64 // frames handed to Core.ReceiveBurst
	Execs      uint64 // control-plane closures run
	Stalls     uint64 // gaps between iterations over StallThreshold
	StalledNs  uint64 // their total length

	WorkIterations uint64 // iterations that did work (received, posted, sent, expired, ...)
	ClockReads     uint64 // reads of the clock by the loop
	WokenEarly     uint64 // sleeps cut short (Exec, Stop, a signal): each reads the clock once more
	// Crossings are the calls into C of the port (Crosser) and the core
	// (engine.Core.Crossings) in iterations; CrossingsMax the most of
	// one iteration, CrossingsOver the iterations with more than
	// MaxCrossings. Crossings between iterations (a flush before the
	// loop sleeps or runs closures, a closure's own) are not counted
	// here: the port's and the core's own counters have them.
	Crossings, CrossingsMax, CrossingsOver uint64
	// The core's looks at its portals' command rings
	// (engine.PathCounters): RingLooks, those that found nothing new
	// (RingLooksIdle), the fallback scans (RingScans) and the idle looks
	// the summary doorbell asked for (RingRungIdle).
	RingLooks, RingLooksIdle, RingScans, RingRungIdle uint64
}

type execReq struct {
	fn   func(*engine.Core)
	done chan struct{}
	ran  atomic.Bool // set before done is closed
}

// Runner drives one engine.Core over one Port.
type Runner struct {
	core *engine.Core
	port Port
	cfg  Config
	now  func() int64 // Config.Clock, or Monotonic
	// tclk is the loop's own clock when now is the default one, on a
	// machine whose kernel keeps its clock on the CPU's counter: a
	// tsc.Clock that follows Monotonic, a counter read in place of a
	// vDSO call each iteration (nil: the loop reads now).
	tclk *tsc.Clock

	execs   chan *execReq
	pending atomic.Int32 // execs sent or being sent, not yet taken by the loop
	stop    atomic.Bool
	// state says who may touch the core (awake, asleep, lent, reclaim).
	// The loop sets asleep just before it sleeps, and Exec and Stop check
	// it after they publish their request (pending, stop): with
	// sequentially consistent atomics either the loop sees the request
	// before sleeping or the requester sees it asleep and wakes it.
	state atomic.Int32
	efdMu sync.Mutex // serialises wake's write with Start and the close at exit
	efd   int        // eventfd the loop sleeps on (Backoff); -1: none (Busy, or closed)

	startOnce sync.Once
	started   atomic.Bool
	done      chan struct{} // closed when the loop has exited

	// published counters
	iterations, idleSleeps, yields, sleptNs, rxFrames, nExecs, stalls, stalledNs atomic.Uint64
	lentExecs                                                                    atomic.Uint64 // closures run by Exec's caller on a sleeping loop's core
	workIters, clockReads, wokenEarly, crossings, crossingsMax, crossingsOver    atomic.Uint64
	ringLooks, ringLooksIdle, ringScans, ringRungIdle                            atomic.Uint64

	fused bool    // the port sends in Recv (SendsOnRecv)
	xport Crosser // the port's crossings (nil: it makes none)

	// loop-local state (the loop goroutine only)
	stg *stage.Stages // cfg.Stages
	pfd [1]unix.PollFd
	buf [8]byte
	lc  Stats
}

// New prepares a runner for core, which must write its frames to port (it
// was created with engine.New(cfg, port)). Start runs it.
func New(core *engine.Core, port Port, cfg Config) (*Runner, error) {
	if core == nil || port == nil {
		return nil, fmt.Errorf("%w: nil core or port", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{
		core:  core,
		port:  port,
		cfg:   cfg,
		now:   cfg.Clock,
		execs: make(chan *execReq, cfg.ExecQueue),
		efd:   -1,
		done:  make(chan struct{}),
		stg:   cfg.Stages,
	}
	if r.now == nil {
		r.now = Monotonic
		if tsc.Stable() {
			r.tclk = tsc.NewClock(Monotonic)
		}
	}
	_, r.fused = port.(SendsOnRecv)
	r.xport, _ = port.(Crosser)
	return r, nil
}

// Now reads the runner's clock (any goroutine).
func (r *Runner) Now() int64 { return r.now() }

// Start starts the loop on a new goroutine locked to its OS thread, runs
// ThreadStart there, and returns once the loop runs (or ThreadStart's
// error).
func (r *Runner) Start() error {
	err := ErrStarted
	r.startOnce.Do(func() {
		if r.cfg.Mode == Backoff {
			fd, e := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
			if e != nil {
				err = fmt.Errorf("runner: eventfd: %w", e)
				close(r.done)
				return
			}
			r.efdMu.Lock()
			r.efd = fd
			r.efdMu.Unlock()
			r.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		ready := make(chan error)
		go r.loop(ready)
		err = <-ready
		if err == nil {
			r.started.Store(true)
		}
	})
	return err
}

// Done is closed when the loop has exited.
func (r *Runner) Done() <-chan struct{} { return r.done }

// The loop's states (Runner.state). Only the loop moves from awake, and
// only to asleep; a caller of Exec moves asleep to lent and back; the
// loop, woken while the core is lent, moves lent to reclaim and waits, and
// the caller then hands the core back (awake) and wakes it.
const (
	awake   int32 = iota // the loop iterates: the core is the loop's
	asleep               // the loop sleeps (Backoff) or is about to; the core is free to lend
	lent                 // Exec's caller runs a closure on the core; the loop must not touch it
	reclaim              // lent, and the loop woke and waits for the core
)

// Exec runs fn between two iterations of the loop, with the core to itself,
// and returns once it has run, or ErrStopped if the runner stopped first
// (fn then never runs). fn runs on the loop's goroutine, or, with
// Config.Lend when the loop sleeps (Backoff), on the caller's: the
// sleeping loop lends its core and holds off until fn has returned
// (waking meanwhile, it waits for the core), so fn never runs beside an
// iteration either way, and a lent core needs no wake-up of the loop nor
// of the caller. fn must not call Exec or Stop of the same runner
// (deadlock). Exec before Start returns ErrNotStarted.
func (r *Runner) Exec(fn func(c *engine.Core)) error {
	if !r.started.Load() {
		select {
		case <-r.done:
			return ErrStopped
		default:
			return ErrNotStarted
		}
	}
	if r.cfg.Lend && r.state.CompareAndSwap(asleep, lent) {
		fn(r.core)
		r.lentExecs.Add(1)
		if !r.state.CompareAndSwap(lent, asleep) {
			// The loop woke meanwhile (its sleep ended, an Exec or Stop
			// woke it) and waits for the core: hand it back.
			r.state.Store(awake)
			r.kick()
		}
		return nil
	}
	req := &execReq{fn: fn, done: make(chan struct{})}
	r.pending.Add(1)
	select {
	case r.execs <- req:
	case <-r.done:
		r.pending.Add(-1)
		return ErrStopped
	}
	r.wake()
	if r.cfg.Mode == Busy && r.cfg.ExecSpin > 0 {
		for t0 := time.Now(); time.Since(t0) < r.cfg.ExecSpin; {
			if req.ran.Load() {
				return nil
			}
			runtime.Gosched()
		}
	}
	select {
	case <-req.done:
		return nil
	case <-r.done:
		select {
		case <-req.done: // ran just before the loop exited
			return nil
		default:
			return ErrStopped
		}
	}
}

// Stop asks the loop to finish: Core.Shutdown completes every op of the
// core with StatusAborted, except WRITEs whose data another engine may
// still commit, which the loop keeps serving until they complete (at most
// the longest TIMEOUT); then it flushes the port, runs ThreadExit and
// exits. Stop waits for that or for ctx. Pending and later Execs return
// ErrStopped. Stop may be called more than once, and before Start.
func (r *Runner) Stop(ctx context.Context) error {
	r.stop.Store(true)
	if !r.started.Load() {
		r.startOnce.Do(func() { close(r.done) }) // never started: nothing runs
	}
	r.wake()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runner: stop: %w", ctx.Err())
	}
}

// Stats returns the counters last published by the loop (any goroutine).
func (r *Runner) Stats() Stats {
	return Stats{
		Iterations: r.iterations.Load(),
		IdleSleeps: r.idleSleeps.Load(),
		Yields:     r.yields.Load(),
		SleptNs:    r.sleptNs.Load(),
		RxFrames:   r.rxFrames.Load(),
		Execs:      r.nExecs.Load() + r.lentExecs.Load(),
		Stalls:     r.stalls.Load(),
		StalledNs:  r.stalledNs.Load(),

		WorkIterations: r.workIters.Load(),
		ClockReads:     r.clockReads.Load(),
		WokenEarly:     r.wokenEarly.Load(),
		Crossings:      r.crossings.Load(),
		CrossingsMax:   r.crossingsMax.Load(),
		CrossingsOver:  r.crossingsOver.Load(),
		RingLooks:      r.ringLooks.Load(),
		RingLooksIdle:  r.ringLooksIdle.Load(),
		RingScans:      r.ringScans.Load(),
		RingRungIdle:   r.ringRungIdle.Load(),
	}
}

// wake interrupts a sleeping loop (any goroutine; control path).
func (r *Runner) wake() {
	if r.state.Load() == awake {
		return
	}
	r.kick()
}

// kick writes the eventfd the loop sleeps on.
func (r *Runner) kick() {
	r.efdMu.Lock()
	if r.efd >= 0 {
		one := [8]byte{1}
		_, _ = unix.Write(r.efd, one[:]) // EAGAIN: the counter is already set
	}
	r.efdMu.Unlock()
}

func (r *Runner) publish() {
	r.iterations.Store(r.lc.Iterations)
	r.idleSleeps.Store(r.lc.IdleSleeps)
	r.yields.Store(r.lc.Yields)
	r.sleptNs.Store(r.lc.SleptNs)
	r.rxFrames.Store(r.lc.RxFrames)
	r.nExecs.Store(r.lc.Execs)
	r.stalls.Store(r.lc.Stalls)
	r.stalledNs.Store(r.lc.StalledNs)
	r.workIters.Store(r.lc.WorkIterations)
	r.clockReads.Store(r.lc.ClockReads)
	r.wokenEarly.Store(r.lc.WokenEarly)
	r.crossings.Store(r.lc.Crossings)
	r.crossingsMax.Store(r.lc.CrossingsMax)
	r.crossingsOver.Store(r.lc.CrossingsOver)
	p := r.core.PathCounters()
	r.ringLooks.Store(p.RingLooks)
	r.ringLooksIdle.Store(p.RingLooksIdle)
	r.ringScans.Store(p.RingScans)
	r.ringRungIdle.Store(p.RingRungIdle)
}

// loop is the poll loop. Its goroutine stays locked to its OS thread until
// it exits, and then the runtime ends the thread: whatever ThreadStart did
// to it (affinity, EAL lcore id, timer slack) dies with it.
func (r *Runner) loop(ready chan<- error) {
	runtime.LockOSThread()
	if r.cfg.ThreadStart != nil {
		if err := r.cfg.ThreadStart(); err != nil {
			r.closeEventfd()
			close(r.done)
			ready <- fmt.Errorf("runner: thread start: %w", err)
			return
		}
	}
	if r.cfg.Mode == Backoff {
		// Short sleeps need a fine timer slack (default 50µs).
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	}
	ready <- nil

	var (
		idle  int
		sleep = r.cfg.MinSleep
		prev  int64 // the previous iteration's time
		asked int64 // sleep asked for since
		stall = int64(r.cfg.StallThreshold)
		stg   = r.stg
	)
	if stg != nil {
		stg.Reset()
		stg.Become(stage.Clock) // the top of the loop, through the clock read, to the rx poll
	}
	for {
		work := 0
		if r.pending.Load() > 0 {
			r.flush() // the frames of the last iteration wait for no closure
			if stg != nil {
				stg.Enter(stage.Loop)
			}
			work += r.runExecs()
			if stg != nil {
				stg.Enter(stage.Clock)
			}
		}
		if r.stop.Load() {
			break
		}
		now := r.clock()
		if gap := now - prev - asked; stall > 0 && prev != 0 && gap > stall {
			r.lc.Stalls++
			r.lc.StalledNs += uint64(gap)
			r.core.Stalled(gap)
		}
		prev, asked = now, 0
		work += r.iterate(now)
		if r.lc.Iterations&255 == 0 {
			r.publish()
		}
		if work > 0 {
			idle, sleep = 0, r.cfg.MinSleep
			continue
		}
		idle++
		switch {
		case idle < r.cfg.IdleSpins:
		case r.cfg.Mode == Backoff:
			r.flush()
			asked = r.sleep(now, sleep)
			sleep = min(2*sleep, r.cfg.MaxSleep)
		case r.cfg.Mode == Yield:
			r.flush()
			if stg != nil {
				stg.Enter(stage.Idle)
			}
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			if stg != nil {
				stg.Enter(stage.Clock)
			}
			r.lc.Yields++
		}
	}

	r.core.Shutdown(r.clock())
	// WRITEs whose data was all sent may still be committed by their
	// serving engines: they complete on their acknowledgment or at their
	// deadline (at most the longest TIMEOUT, under a second).
	for r.core.InFlight() > 0 {
		r.iterate(r.clock())
	}
	r.port.Flush()
	if r.cfg.ThreadExit != nil {
		r.cfg.ThreadExit()
	}
	r.publish()
	r.closeEventfd()
	close(r.done)
}

// iterate is one pass of the data path at time now: one rx burst into the
// core, one Poll, one Flush (none for a port that sends in its next Recv:
// SendsOnRecv). It returns the work done (frames received plus
// Core.Poll's count).
func (r *Runner) iterate(now int64) int {
	s := r.stg
	x := r.crossed()
	if s != nil {
		s.Enter(stage.Receive)
	}
	frames := r.port.Recv()
	if s != nil {
		if len(frames) == 0 { // and if Poll finds nothing to do either, the rest is EmptyPoll
			s.Mark(stage.EmptyRx, stage.Protocol)
			s.Provisional()
		}
		s.Frames(len(frames))
	}
	r.core.ReceiveBurst(now, frames)
	work := len(frames) + r.core.Poll(now)
	if !r.fused {
		if s != nil {
			s.Enter(stage.Transmit)
		}
		r.port.Flush()
	}
	if s != nil {
		s.Enter(stage.Clock) // through the top of the next iteration
		s.Settle(work == 0, stage.EmptyPoll)
	}
	r.lc.Iterations++
	r.lc.RxFrames += uint64(len(frames))
	r.count(work, r.crossed()-x)
	return work
}

// clock reads the clock for the loop, counted.
func (r *Runner) clock() int64 {
	r.lc.ClockReads++
	if r.tclk != nil {
		return r.tclk.Now()
	}
	return r.now()
}

// crossed is the calls into C the port and the core have made so far.
func (r *Runner) crossed() uint64 {
	n := r.core.Crossings()
	if r.xport != nil {
		n += r.xport.Crossings()
	}
	return n
}

// count counts an iteration's work and its x crossings.
func (r *Runner) count(work int, x uint64) {
	if work > 0 {
		r.lc.WorkIterations++
	}
	r.lc.Crossings += x
	if x > r.lc.CrossingsMax {
		r.lc.CrossingsMax = x
	}
	if x > MaxCrossings {
		r.lc.CrossingsOver++
	}
}

// flush sends what a port that sends in Recv still holds (SendsOnRecv):
// before the loop sleeps, yields or runs closures. Nothing for a port
// flushed every iteration.
func (r *Runner) flush() {
	if r.fused {
		r.port.Flush()
	}
}

// runExecs runs every queued closure and returns how many ran.
func (r *Runner) runExecs() int {
	n := 0
	for {
		select {
		case req := <-r.execs:
			r.pending.Add(-1)
			req.fn(r.core)
			req.ran.Store(true)
			close(req.done)
			n++
		default:
			r.lc.Execs += uint64(n)
			return n
		}
	}
}

// sleep blocks for d, or less when the core has a timer due earlier, or
// until Exec or Stop wakes it. It returns the sleep the next iteration's
// stall check allows for, in ns (0: it did not sleep): what it slept, at
// most what it asked. An Exec's wake-up ends the sleep early, and the
// closure's time after it is a stall; so is a wake-up later than asked.
//
// A sleep that lasts its whole timeout reads no clock: it slept d (a
// later wake-up shows in the next iteration's clock read as a stall). One
// cut short (Exec, Stop, a signal) reads the clock once to know how long
// it slept, measured from now, the iteration's own read (WokenEarly).
func (r *Runner) sleep(now int64, d time.Duration) int64 {
	if dl := r.core.NextDeadline(); dl != math.MaxInt64 {
		until := time.Duration(dl - now)
		if until <= 0 {
			return 0
		}
		d = min(d, until)
	}
	r.lc.IdleSleeps++
	r.lc.SleptNs += uint64(d)
	r.publish()
	r.state.Store(asleep)
	if r.pending.Load() > 0 || r.stop.Load() {
		r.rise()
		return 0
	}
	ts := unix.NsecToTimespec(int64(d))
	if r.stg != nil {
		r.stg.Enter(stage.Idle)
	}
	n, err := unix.Ppoll(r.pfd[:], &ts, nil) // EINTR: just an early wake-up
	if n > 0 {
		_, _ = unix.Read(r.efd, r.buf[:]) // reset the eventfd counter
	}
	r.rise() // waits, idle, while an Exec's caller has the core
	if r.stg != nil {
		r.stg.Enter(stage.Clock)
	}
	if n == 0 && err == nil {
		return int64(d) // timed out: slept (at least) d
	}
	r.lc.WokenEarly++
	return min(max(r.clock()-now, 0), int64(d))
}

// rise ends a sleep: it takes the core back (awake), first waiting, when
// an Exec's caller has it (lent), until the caller hands it back and
// wakes the loop. It sleeps on the eventfd, with no timeout, only in
// reclaim, which the caller always ends with a hand-back and a write of
// the eventfd (before or after the loop sleeps: either way it wakes).
func (r *Runner) rise() {
	for {
		switch s := r.state.Load(); s {
		case awake:
			return // handed back
		case asleep:
			if r.state.CompareAndSwap(asleep, awake) {
				return
			}
		case lent:
			r.state.CompareAndSwap(lent, reclaim) // or the caller gave it back: look again
		case reclaim:
			if n, _ := unix.Ppoll(r.pfd[:], nil, nil); n > 0 {
				_, _ = unix.Read(r.efd, r.buf[:])
			}
		}
	}
}

// closeEventfd closes the eventfd under efdMu, so a concurrent wake never
// writes to the descriptor number after it was closed (and maybe reused).
func (r *Runner) closeEventfd() {
	r.efdMu.Lock()
	if r.efd >= 0 {
		_ = unix.Close(r.efd)
		r.efd = -1
	}
	r.efdMu.Unlock()
}
