package portal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/cc"
)

// ExecutorConfig tunes an Executor. Zero values take the defaults of
// DefaultExecutorConfig.
type ExecutorConfig struct {
	// CC are the congestion control parameters (paper §6, SPEC §4). The
	// zero value means cc.DefaultParams(); to change some, start from
	// DefaultExecutorConfig() (or cc.DefaultParams()).
	CC cc.Params
	// Slots is how many command slots the executor uses: it takes the
	// portal's free slots first and asks the engine (AllocSlots) for the
	// rest. 0: every slot free in the portal at NewExecutor, or, if none
	// is, DefaultExecutorSlots (capped by the application's slot cap).
	Slots int
	// ChunkBytes is the size transfers are split into (1..abi.MaxOpBytes;
	// default abi.MaxOpBytes).
	ChunkBytes int
	// BackoffBase and BackoffMax bound the backoff before a chunk that
	// completed NACK or DISPATCH_TIMEOUT is posted again: the k-th such
	// completion of one chunk waits min(BackoffBase·2^(k-1), BackoffMax),
	// jittered uniformly over its upper half (defaults 20 µs and 1 ms).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// TimeoutRetries is how many times a chunk that completed TIMEOUT is
	// posted again before the transfer fails (default 16; negative: never).
	// The retry is immediate, subject to the congestion window, which the
	// TIMEOUT has cut.
	TimeoutRetries int
	// MaxAttempts bounds how many times one chunk is posted, whatever the
	// statuses (default 10000; negative: no bound, only the context ends
	// a transfer that is NACKed for ever).
	MaxAttempts int
	// SpinWait: the driver spins rather than sleeps for a pacing or backoff
	// wait shorter than this (default 50 µs, about the kernel's timer
	// slack).
	SpinWait time.Duration
	// ShortFirst gives short transfers precedence over long ones (paper
	// §7.2, Fig. 12): while a transfer of at most one chunk is in progress,
	// or finished less than ShortHold ago, transfers of more than one
	// chunk keep at most ShortFirst ops in flight in all, so a short op
	// queues behind at most that many chunks in the engines instead of
	// behind the whole congestion window (default 4; negative: no
	// precedence, short and long transfers share the window round-robin).
	ShortFirst int
	// ShortHold keeps the long transfers capped for a while after a
	// short transfer finished, so an application that issues short ops
	// back to back does not find a full window in front of each (default
	// 50 µs).
	ShortHold time.Duration
}

// Executor defaults.
const (
	DefaultExecutorSlots  = 64
	DefaultTimeoutRetries = 16
	DefaultMaxAttempts    = 10000
	DefaultBackoffBase    = 20 * time.Microsecond
	DefaultBackoffMax     = time.Millisecond
	DefaultSpinWait       = 50 * time.Microsecond
	DefaultShortFirst     = 4
	DefaultShortHold      = 50 * time.Microsecond
)

// DefaultExecutorConfig returns the defaults, every field filled in.
func DefaultExecutorConfig() ExecutorConfig {
	return ExecutorConfig{
		CC:             cc.DefaultParams(),
		ChunkBytes:     abi.MaxOpBytes,
		BackoffBase:    DefaultBackoffBase,
		BackoffMax:     DefaultBackoffMax,
		TimeoutRetries: DefaultTimeoutRetries,
		MaxAttempts:    DefaultMaxAttempts,
		SpinWait:       DefaultSpinWait,
		ShortFirst:     DefaultShortFirst,
		ShortHold:      DefaultShortHold,
	}
}

// withDefaults fills zero fields in.
func (c ExecutorConfig) withDefaults() ExecutorConfig {
	d := DefaultExecutorConfig()
	if c.CC == (cc.Params{}) {
		c.CC = d.CC
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = d.ChunkBytes
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = d.BackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(d.BackoffMax, c.BackoffBase)
	}
	switch {
	case c.TimeoutRetries == 0:
		c.TimeoutRetries = d.TimeoutRetries
	case c.TimeoutRetries < 0:
		c.TimeoutRetries = 0
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.SpinWait == 0 {
		c.SpinWait = d.SpinWait
	}
	if c.ShortFirst == 0 {
		c.ShortFirst = d.ShortFirst
	}
	if c.ShortHold == 0 {
		c.ShortHold = d.ShortHold
	}
	return c
}

// Validate reports the first field that makes no sense (after defaults
// are applied: NewExecutor validates what it will use).
func (c *ExecutorConfig) Validate() error {
	if err := c.CC.Validate(); err != nil {
		return fmt.Errorf("portal: executor config: %w", err)
	}
	bad := func(name string, v any, why string) error {
		return fmt.Errorf("portal: executor config: %s = %v: %s", name, v, why)
	}
	switch {
	case c.Slots < 0 || c.Slots > 1<<20:
		return bad("Slots", c.Slots, "want 0..2^20")
	case c.ChunkBytes < 1 || c.ChunkBytes > abi.MaxOpBytes:
		return bad("ChunkBytes", c.ChunkBytes, fmt.Sprintf("want 1..%d", abi.MaxOpBytes))
	case c.BackoffBase < 0:
		return bad("BackoffBase", c.BackoffBase, "must be >= 0")
	case c.BackoffMax < c.BackoffBase:
		return bad("BackoffMax", c.BackoffMax, "must be >= BackoffBase")
	case c.BackoffMax > time.Minute:
		return bad("BackoffMax", c.BackoffMax, "must be <= 1m")
	case c.TimeoutRetries > 1<<20:
		return bad("TimeoutRetries", c.TimeoutRetries, "want <= 2^20")
	case c.SpinWait < 0 || c.SpinWait > time.Second:
		return bad("SpinWait", c.SpinWait, "want 0..1s")
	case c.ShortFirst > 1<<20:
		return bad("ShortFirst", c.ShortFirst, "want <= 2^20")
	case c.ShortHold < 0 || c.ShortHold > time.Second:
		return bad("ShortHold", c.ShortHold, "want 0..1s")
	}
	return nil
}

// Sentinels a *ChunkError matches with errors.Is, one per class of
// completion status (ChunkError.Status has the exact one).
var (
	// ErrRemoteAuth: REMOTE_AUTHENTICATION_FAILURE. The key is wrong or
	// was rotated (fetch a new K_d), or the server holds no such region.
	// Never retried.
	ErrRemoteAuth = errors.New("portal: remote authentication failure")
	// ErrTimeout: a chunk completed TIMEOUT more than TimeoutRetries times.
	ErrTimeout = errors.New("portal: op timed out")
	// ErrCongestion: a chunk was NACKed or dispatch-timed-out until it
	// reached MaxAttempts.
	ErrCongestion = errors.New("portal: op retried MaxAttempts times under congestion")
	// ErrRemoteAccess: REMOTE_REGION, REMOTE_BOUNDS or REMOTE_PERMISSION.
	ErrRemoteAccess = errors.New("portal: remote region refused the access")
	// ErrLocalAccess: LOCAL_REGION, LOCAL_BOUNDS or LOCAL_PERMISSION.
	ErrLocalAccess = errors.New("portal: local region refused the access")
	// ErrUnreachable: UNREACHABLE (the remote engine's address did not
	// resolve).
	ErrUnreachable = errors.New("portal: remote engine unreachable")
	// ErrAborted: ABORTED (the engine is shutting down).
	ErrAborted = errors.New("portal: op aborted by the engine")
	// ErrBadCommand: BAD_COMMAND, TOO_LARGE, BAD_SLOT or a status this
	// library does not know.
	ErrBadCommand = errors.New("portal: the engine refused the command")

	// ErrExecutorClosed: the Executor was closed (transfers in progress
	// when Close was called end with it too).
	ErrExecutorClosed = errors.New("portal: executor closed")
)

// statusClass is the sentinel of a failure status.
func statusClass(st abi.Status) error {
	switch st {
	case abi.StatusRemoteAuthFailure:
		return ErrRemoteAuth
	case abi.StatusTimeout:
		return ErrTimeout
	case abi.StatusNack, abi.StatusDispatchTimeout:
		return ErrCongestion
	case abi.StatusRemoteRegion, abi.StatusRemoteBounds, abi.StatusRemotePermission:
		return ErrRemoteAccess
	case abi.StatusLocalRegion, abi.StatusLocalBounds, abi.StatusLocalPermission:
		return ErrLocalAccess
	case abi.StatusUnreachable:
		return ErrUnreachable
	case abi.StatusAborted:
		return ErrAborted
	}
	return ErrBadCommand
}

// ChunkError is how a transfer fails on a completion status: it names the
// chunk (its op, remote and local offsets, length), the status of its
// last completion and how many times it was posted. errors.Is matches it
// against the status's class (ErrRemoteAuth, ErrTimeout, ...).
type ChunkError struct {
	Op           abi.Op
	Remote       netip.Addr
	Region       abi.RegionID
	RemoteOffset uint64 // the chunk's offset in the remote region
	LocalOffset  uint64 // the chunk's offset in the local region
	Length       uint32 // the chunk's length
	Status       abi.Status
	Attempts     int // times the chunk was posted
	// Transfer: the transfer's length; Done: its bytes that completed OK
	// (not necessarily a prefix: chunks complete out of order).
	Transfer, Done uint64
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("portal: executor: %v of %d bytes: chunk of %d bytes at remote offset %d (region %#x on %v), local offset %d: %v after %d attempt(s) (%d bytes done)",
		e.Op, e.Transfer, e.Length, e.RemoteOffset, uint32(e.Region), e.Remote, e.LocalOffset, e.Status, e.Attempts, e.Done)
}

// Is matches the sentinel of the status's class.
func (e *ChunkError) Is(target error) bool { return target == statusClass(e.Status) }

// ExecutorStats are an Executor's counters (Stats reads them from any
// goroutine).
type ExecutorStats struct {
	Transfers        uint64 // transfers finished
	Failed           uint64 // of which with an error (status, context, close)
	Ops              uint64 // ops posted (retries included)
	Retries          uint64 // of which posts of a chunk already posted
	Nacks            uint64 // NACK completions
	DispatchTimeouts uint64 // DISPATCH_TIMEOUT completions
	Timeouts         uint64 // TIMEOUT completions
	Stray            uint64 // completions naming no op of this executor
}

// Executor moves transfers of any size between a local region and a
// remote one (the CommandExecutor of paper §4.4, Fig. 4): it splits each
// into ops of at most ChunkBytes, keeps up to the congestion window of
// package cc in flight per remote engine and direction, paced, retries
// per status, and shares its slots and windows fairly among transfers.
// See the package doc. All methods are safe for concurrent use.
type Executor struct {
	p     *Portal
	cfg   ExecutorConfig
	epoch time.Time
	chunk uint64
	spin  int64 // SpinWait in ns

	// Submission side, under qmu.
	qmu      sync.Mutex
	incoming []*transfer
	driving  bool          // some goroutine drives (or is being handed the drive)
	closed   bool          // Close was called
	idle     chan struct{} // closed by the last driver once closed
	closedCh chan struct{} // closed when Close has finished

	pending  atomic.Bool   // incoming is not empty
	closing  atomic.Bool   // Close was called
	cancels  atomic.Uint32 // bumped by every transfer whose context ended
	sleeping atomic.Bool   // the driver is (about to be) asleep in ppoll
	wakeFD   int           // eventfd that wakes a sleeping driver

	st struct {
		transfers, failed, ops, retries, nacks, dispatch, timeouts, stray atomic.Uint64
	}

	// Driver state: only the goroutine that drives touches it. The drive
	// passes from goroutine to goroutine through qmu and transfer.drive.
	self     *transfer // the driving goroutine's own transfer
	ctl      *cc.Controller
	peers    map[cc.Key]*peerState
	active   []*transfer
	rr       int // round-robin cursor into active
	ops      []op
	freeOps  []int32
	inflight int // ops posted and not completed
	// Short-first precedence (ExecutorConfig.ShortFirst).
	longInflight int   // ops of long transfers posted and not completed
	shortActive  int   // short transfers in progress
	shortUntil   int64 // long transfers stay capped until then
	seen         uint32
	fatal        error // the portal is unusable: no completion will come
	timer        int64 // earliest pacing or backoff deadline seen by the last issue pass
	ringFull     bool
	nap          time.Duration // sleep between polls without a doorbell
	yield        bool          // the driver woke another transfer's goroutine: Gosched once
	cpl          [64]abi.Completion
	pfd          [2]unix.PollFd
	ts           unix.Timespec
	evbuf        [8]byte
}

const noTimer = math.MaxInt64

// peer is the state of one cc.Key: ops in flight and the pacer.
type peerState struct {
	key      cc.Key
	inflight int
	pacer    cc.Pacer
}

// op is one command slot's chunk, from its first post until it completes
// OK or its transfer gives up on it (in between it may wait for a retry).
type op struct {
	t        *transfer // nil: free
	off      uint64    // offset within the transfer
	readyAt  int64     // waiting for a retry: not before
	slot     abi.SlotID
	gen      uint32 // bumped on every post: the cookie's high half
	length   uint32
	attempts int32
	timeouts int32
	congest  int32 // NACK and DISPATCH_TIMEOUT completions
	next     int32 // retry list link
	posted   bool
}

// transfer is one Read or Write call.
type transfer struct {
	e         *Executor
	op        abi.Op
	addr      netip.Addr
	key       cc.Key
	region    abi.RegionID
	remoteOff uint64
	kd        aesni.Key
	local     *Region
	localOff  uint64
	length    uint64
	ctx       context.Context
	stop      func() bool // context.AfterFunc's; nil if ctx cannot end

	// Driver state.
	peer      *peerState
	issued    uint64 // bytes handed to first posts
	okBytes   uint64
	inflight  int
	retryHead int32
	retryTail int32
	nretry    int
	short     bool // at most one chunk (ExecutorConfig.ShortFirst)
	stopped   bool // issue nothing more; err is set
	finished  bool
	err       error

	cancelled atomic.Bool
	done      chan struct{} // the driver finished this transfer (not the driver's own)
	drive     chan struct{} // this transfer's goroutine drives now
}

var transferPool = sync.Pool{New: func() any {
	return &transfer{done: make(chan struct{}, 1), drive: make(chan struct{}, 1)}
}}

// cancel runs (context.AfterFunc) when the transfer's context ends.
func (t *transfer) cancel() {
	e := t.e
	t.cancelled.Store(true)
	e.cancels.Add(1)
	e.wake()
}

// NewExecutor returns an executor moving data through p. From now on the
// executor owns p's data path: the application must not Post, Flush,
// Poll, Wait, Slot or Release on p until Close has returned (the
// executor's slots go back to p's free list then). p must outlive the
// executor: Close the executor before the portal.
func NewExecutor(p *Portal, cfg ExecutorConfig) (*Executor, error) {
	if p == nil || p.closed {
		return nil, ErrClosed
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctl, err := cc.New(cfg.CC)
	if err != nil {
		return nil, fmt.Errorf("portal: executor config: %w", err)
	}
	want := cfg.Slots
	if want == 0 {
		want = len(p.free)
		if want == 0 {
			want = DefaultExecutorSlots
			if p.maxSlots > 0 {
				want = min(want, p.maxSlots-p.Slots())
			}
			if want < 1 {
				return nil, fmt.Errorf("portal: executor: no free slot and the application's cap (%d) is used up: %w", p.maxSlots, ErrSlotCap)
			}
		}
	}
	if short := want - len(p.free); short > 0 {
		if _, err := p.AllocSlots(short); err != nil {
			return nil, fmt.Errorf("portal: executor: %d slots: %w", want, err)
		}
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("portal: executor: eventfd: %w", err)
	}
	e := &Executor{
		p:        p,
		cfg:      cfg,
		epoch:    time.Now(),
		chunk:    uint64(cfg.ChunkBytes),
		spin:     int64(cfg.SpinWait),
		wakeFD:   fd,
		idle:     make(chan struct{}),
		closedCh: make(chan struct{}),
		ctl:      ctl,
		peers:    make(map[cc.Key]*peerState),
		ops:      make([]op, want),
		freeOps:  make([]int32, 0, want),
		incoming: make([]*transfer, 0, 16),
		active:   make([]*transfer, 0, 16),
		nap:      waitSleepMin,
	}
	for i := range e.ops {
		s, _ := p.Slot()
		e.ops[i] = op{slot: s, next: -1}
	}
	for i := len(e.ops) - 1; i >= 0; i-- {
		e.freeOps = append(e.freeOps, int32(i))
	}
	e.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	if p.arm != nil {
		e.pfd[1] = unix.PollFd{Fd: int32(p.bellFD), Events: unix.POLLIN}
	}
	return e, nil
}

// Slots is how many command slots the executor uses.
func (e *Executor) Slots() int { return len(e.ops) }

// Stats returns the executor's counters.
func (e *Executor) Stats() ExecutorStats {
	return ExecutorStats{
		Transfers: e.st.transfers.Load(), Failed: e.st.failed.Load(), Ops: e.st.ops.Load(), Retries: e.st.retries.Load(),
		Nacks: e.st.nacks.Load(), DispatchTimeouts: e.st.dispatch.Load(), Timeouts: e.st.timeouts.Load(), Stray: e.st.stray.Load(),
	}
}

// Read copies length bytes of the remote region (region at remoteOffset on
// the engine at remote) into local at localOffset, with the K_d key the
// region's owner derived for this portal's Identity and abi.OpRead. It
// returns nil once every byte has arrived, or the first failure: a
// *ChunkError naming the chunk and its status, ctx's error (wrapped,
// errors.Is works), ErrExecutorClosed, or an argument error (ErrRegion,
// ErrBounds, ErrAddr) before anything is posted. It returns only once
// none of its ops is in flight any more; after a failure the local range
// holds undefined bytes. A length of 0 does nothing.
func (e *Executor) Read(ctx context.Context, remote netip.Addr, region abi.RegionID, remoteOffset uint64,
	key aesni.Key, local *Region, localOffset, length uint64) error {
	return e.transfer(ctx, abi.OpRead, remote, region, remoteOffset, &key, local, localOffset, length)
}

// Write copies length bytes of local at localOffset into the remote
// region at remoteOffset, with the K_d derived for abi.OpWrite; local must
// allow abi.PermLocalRead and stay unchanged until Write returns. Like Read
// otherwise. Each chunk is committed remotely all at once or not at all;
// after a failure some chunks may have been written (a chunk that ended in
// TIMEOUT may have been too: PostWrite).
func (e *Executor) Write(ctx context.Context, remote netip.Addr, region abi.RegionID, remoteOffset uint64,
	key aesni.Key, local *Region, localOffset, length uint64) error {
	return e.transfer(ctx, abi.OpWrite, remote, region, remoteOffset, &key, local, localOffset, length)
}

func (e *Executor) transfer(ctx context.Context, opc abi.Op, remote netip.Addr, region abi.RegionID, remoteOffset uint64,
	key *aesni.Key, local *Region, localOffset, length uint64) error {
	remote = remote.Unmap()
	switch {
	case local == nil || local.p != e.p || local.mem == nil:
		return ErrRegion
	case localOffset > local.size || length > local.size-localOffset:
		return ErrBounds
	case !remote.Is4():
		return ErrAddr
	case remoteOffset+length < remoteOffset:
		return fmt.Errorf("portal: executor: remote range of %d bytes at %d overflows", length, remoteOffset)
	}
	if length == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a := remote.As4()
	t := transferPool.Get().(*transfer)
	*t = transfer{
		e: e, op: opc, addr: remote, key: cc.Key{Peer: binary.BigEndian.Uint32(a[:]), Dir: cc.DirOf(opc)},
		region: region, remoteOff: remoteOffset, kd: *key, local: local, localOff: localOffset, length: length,
		ctx: ctx, retryHead: -1, retryTail: -1, done: t.done, drive: t.drive,
	}
	if ctx.Done() != nil {
		t.stop = context.AfterFunc(ctx, t.cancel)
	}
	e.qmu.Lock()
	if e.closed {
		e.qmu.Unlock()
		t.release()
		return ErrExecutorClosed
	}
	e.incoming = append(e.incoming, t)
	e.pending.Store(true)
	drive := !e.driving
	e.driving = true
	e.qmu.Unlock()
	if drive {
		e.drive(t)
	} else {
		e.wake()
		select {
		case <-t.done:
		case <-t.drive:
			e.drive(t)
		}
	}
	err := t.err
	t.release()
	return err
}

// release returns t to the pool, unless its context's AfterFunc may still
// run (then the garbage collector takes it).
func (t *transfer) release() {
	if t.stop != nil && !t.stop() {
		return
	}
	kd := &t.kd
	clear(kd[:])
	t.ctx, t.local, t.err, t.peer, t.e = nil, nil, nil, nil, nil
	transferPool.Put(t)
}

// ctxErr is the error of a transfer whose context ended: the context's
// error, wrapped with how far the transfer got.
func (t *transfer) ctxErr() error {
	return fmt.Errorf("portal: executor: %v of %d bytes at remote offset %d stopped with %d bytes done: %w",
		t.op, t.length, t.remoteOff, t.okBytes, t.ctx.Err())
}

// wake rouses a sleeping driver.
func (e *Executor) wake() {
	if e.sleeping.Load() {
		one := [8]byte{1}
		unix.Write(e.wakeFD, one[:])
	}
}

// Close fails transfers in progress with ErrExecutorClosed (each returns
// once its ops in flight have completed), waits for them, and gives the
// executor's slots back to the portal's free list. Read and Write called
// afterwards return ErrExecutorClosed. Close is idempotent.
func (e *Executor) Close() error {
	e.qmu.Lock()
	if e.closed {
		e.qmu.Unlock()
		<-e.closedCh
		return nil
	}
	e.closed = true
	e.closing.Store(true)
	driving := e.driving
	e.qmu.Unlock()
	if driving {
		e.wake() // the driver sees closing before it sleeps, or is woken
		<-e.idle
	}
	// No driver any more, and none will come: the data path is ours.
	var err error
	if e.fatal == nil {
		for i := range e.ops {
			if rerr := e.p.Release(e.ops[i].slot); rerr != nil && err == nil {
				err = fmt.Errorf("portal: executor: releasing slot %d: %w", e.ops[i].slot, rerr)
			}
		}
	}
	unix.Close(e.wakeFD)
	close(e.closedCh)
	return err
}

// now is the executor's clock in ns.
func (e *Executor) now() int64 { return int64(time.Since(e.epoch)) }

// drive runs the data path until self has finished, then hands the drive
// to another transfer's goroutine (or stops driving if none is left).
func (e *Executor) drive(self *transfer) {
	e.self = self
	spins := 0
	dirty := true // something changed since the last issue pass
	for {
		if e.pending.Load() {
			e.qmu.Lock()
			e.absorbLocked()
			e.qmu.Unlock()
			dirty = true
		}
		if e.closing.Load() || e.cancels.Load() != e.seen {
			e.checkStops()
			dirty = true
		}
		busy := false
		now := int64(-1)
		if e.fatal == nil {
			if n := e.p.Poll(e.cpl[:]); n > 0 {
				now = e.now()
				for i := range n {
					e.complete(now, &e.cpl[i])
				}
				busy, dirty = true, true
			}
		}
		if e.timer != noTimer && !dirty {
			if now < 0 {
				now = e.now()
			}
			dirty = now >= e.timer
		}
		// The issue pass runs only when it may find something to post: a
		// window or slot freed, a new transfer, a pacer or backoff due.
		if dirty && e.fatal == nil {
			if now < 0 {
				now = e.now()
			}
			if e.issue(now) > 0 {
				e.p.Flush()
				busy = true
			}
			dirty = e.ringFull // try again at once: the engine is draining the ring
		}
		if self.finished {
			e.handoff()
			return
		}
		if e.yield {
			// A transfer of another goroutine finished: let it run now.
			// The driver spins on the completion ring, and on a single
			// CPU (GOMAXPROCS 1, or an application pinned to one CPU)
			// the goroutine it woke would otherwise wait for the Go
			// scheduler's 10 ms preemption (measured: a 64 B READ behind
			// a 4 MB transfer took 20 ms at p50).
			e.yield = false
			runtime.Gosched()
		}
		if busy {
			spins = 0
			e.nap = waitSleepMin
			continue
		}
		if e.fatal == nil && (e.p.closed || e.p.Corrupt()) {
			err := ErrClosed
			if !e.p.closed {
				err = ErrRingCorrupt
			}
			e.die(err)
			dirty = true
			continue
		}
		if e.timer != noTimer && now < 0 {
			now = e.now()
		}
		if (e.timer != noTimer && e.timer-now < e.spin) || (e.inflight > 0 && spins < e.p.spins) || e.ringFull {
			spins++
			if spins%64 == 0 {
				runtime.Gosched() // callers submitting transfers may share this CPU
			}
			continue
		}
		e.sleep(now)
		spins = 0
	}
}

// handoff gives the drive to the goroutine of an unfinished transfer, or
// stops driving.
func (e *Executor) handoff() {
	e.self = nil
	e.qmu.Lock()
	e.absorbLocked()
	var next *transfer
	if len(e.active) > 0 {
		next = e.active[0]
	} else {
		e.driving = false
		if e.closed {
			close(e.idle)
		}
	}
	e.qmu.Unlock()
	if next != nil {
		next.drive <- struct{}{}
	}
}

// absorbLocked moves new transfers to the active list (qmu held).
func (e *Executor) absorbLocked() {
	for i, t := range e.incoming {
		e.incoming[i] = nil
		p := e.peers[t.key]
		if p == nil {
			p = &peerState{key: t.key}
			e.peers[t.key] = p
		}
		t.peer = p
		if t.short = t.length <= e.chunk; t.short {
			e.shortActive++
		}
		e.active = append(e.active, t)
		switch {
		case e.fatal != nil:
			e.stop(t, e.fatal)
		case e.closing.Load():
			e.stop(t, ErrExecutorClosed)
		case t.cancelled.Load(): // its context ended before the driver saw it
			e.stop(t, t.ctxErr())
		}
	}
	e.incoming = e.incoming[:0]
	e.pending.Store(false)
}

// checkStops stops transfers whose context ended, or all on Close.
func (e *Executor) checkStops() {
	e.seen = e.cancels.Load()
	closing := e.closing.Load()
	for i := len(e.active) - 1; i >= 0; i-- {
		if i >= len(e.active) {
			continue
		}
		t := e.active[i]
		switch {
		case t.stopped:
		case closing:
			e.stop(t, ErrExecutorClosed)
		case t.cancelled.Load():
			e.stop(t, t.ctxErr())
		}
	}
}

// stop makes t issue nothing more and fail with err once its ops in
// flight have completed.
func (e *Executor) stop(t *transfer, err error) {
	if t.stopped {
		return
	}
	t.stopped, t.err = true, err
	for i := t.retryHead; i >= 0; {
		next := e.ops[i].next
		e.freeOp(i)
		i = next
	}
	t.retryHead, t.retryTail, t.nretry = -1, -1, 0
	e.maybeFinish(t)
}

// die: the portal is closed or corrupt. No completion will come, so every
// transfer fails at once.
func (e *Executor) die(err error) {
	e.fatal = err
	for i := range e.ops {
		if o := &e.ops[i]; o.t != nil && o.posted {
			o.t.inflight--
			o.t.peer.inflight--
			if !o.t.short {
				e.longInflight--
			}
			e.freeOp(int32(i))
		}
	}
	e.inflight = 0
	for i := len(e.active) - 1; i >= 0; i-- {
		if i < len(e.active) {
			e.stop(e.active[i], err)
		}
	}
}

func (e *Executor) maybeFinish(t *transfer) {
	if t.inflight > 0 || t.nretry > 0 || (!t.stopped && t.okBytes < t.length) {
		return
	}
	for i, u := range e.active {
		if u == t {
			copy(e.active[i:], e.active[i+1:])
			e.active[len(e.active)-1] = nil
			e.active = e.active[:len(e.active)-1]
			if e.rr > i {
				e.rr--
			}
			break
		}
	}
	if t.short {
		e.shortActive--
		if e.shortActive == 0 {
			e.shortUntil = e.now() + int64(e.cfg.ShortHold)
		}
	}
	e.st.transfers.Add(1)
	if t.err != nil {
		e.st.failed.Add(1)
		if ce, ok := t.err.(*ChunkError); ok {
			ce.Done = t.okBytes
		}
	}
	t.finished = true
	if t != e.self {
		t.done <- struct{}{}
		e.yield = true
	}
}

func (e *Executor) freeOp(i int32) {
	o := &e.ops[i]
	o.t, o.posted, o.next = nil, false, -1
	e.freeOps = append(e.freeOps, i)
}

// backoff is the wait before the k-th NACK or DISPATCH_TIMEOUT retry of a
// chunk (k >= 1): min(base·2^(k-1), max), jittered over its upper half.
func (e *Executor) backoff(k int32) int64 {
	d := int64(e.cfg.BackoffMax)
	if k <= 32 {
		d = min(int64(e.cfg.BackoffBase)<<(k-1), d)
	}
	if d < 2 {
		return d
	}
	return d/2 + rand.Int64N(d-d/2)
}

// complete handles one completion.
func (e *Executor) complete(now int64, c *abi.Completion) {
	i := int32(uint32(c.Cookie))
	if i < 0 || int(i) >= len(e.ops) || e.ops[i].gen != uint32(c.Cookie>>32) || !e.ops[i].posted || e.ops[i].slot != c.Slot {
		e.st.stray.Add(1)
		return
	}
	o := &e.ops[i]
	t, ps := o.t, o.t.peer
	o.posted = false
	ps.inflight--
	t.inflight--
	e.inflight--
	if !t.short {
		e.longInflight--
	}
	e.ctl.OnCompletion(now, ps.key, c.Status, int64(c.IssueDelayNs), int64(c.TotalDelayNs))
	retry := false
	switch c.Status {
	case abi.StatusOK:
		t.okBytes += uint64(o.length)
	case abi.StatusNack, abi.StatusDispatchTimeout:
		if c.Status == abi.StatusNack {
			e.st.nacks.Add(1)
		} else {
			e.st.dispatch.Add(1)
		}
		o.congest++
		if !t.stopped && (e.cfg.MaxAttempts < 0 || int(o.attempts) < e.cfg.MaxAttempts) {
			o.readyAt = now + e.backoff(o.congest)
			retry = true
		}
	case abi.StatusTimeout:
		e.st.timeouts.Add(1)
		o.timeouts++
		if !t.stopped && int(o.timeouts) <= e.cfg.TimeoutRetries && (e.cfg.MaxAttempts < 0 || int(o.attempts) < e.cfg.MaxAttempts) {
			o.readyAt = now
			retry = true
		}
	}
	switch {
	case retry:
		o.next = -1
		if t.retryTail < 0 {
			t.retryHead = i
		} else {
			e.ops[t.retryTail].next = i
		}
		t.retryTail = i
		t.nretry++
	case c.Status == abi.StatusOK || t.stopped:
		e.freeOp(i)
	default:
		err := &ChunkError{Op: t.op, Remote: t.addr, Region: t.region, RemoteOffset: t.remoteOff + o.off,
			LocalOffset: t.localOff + o.off, Length: o.length, Status: c.Status, Attempts: int(o.attempts), Transfer: t.length}
		e.freeOp(i)
		e.stop(t, err)
		return
	}
	e.maybeFinish(t)
}

// issue posts ops round-robin over the active transfers, one per
// transfer per turn, while windows, pacers, slots and the ring allow. It
// returns how many it posted and leaves in e.timer the earliest time a
// pacer or a backoff lets a blocked transfer go on.
func (e *Executor) issue(now int64) int {
	e.timer = noTimer
	e.ringFull = false
	n, posted := len(e.active), 0
	for idle := 0; idle < n && !e.ringFull; {
		if e.rr >= n {
			e.rr = 0
		}
		t := e.active[e.rr]
		e.rr++
		if e.issueOne(now, t) {
			posted++
			idle = 0
		} else {
			idle++
		}
	}
	return posted
}

func (e *Executor) issueOne(now int64, t *transfer) bool {
	if t.stopped || (t.nretry == 0 && t.issued == t.length) {
		return false
	}
	ps := t.peer
	// The local window bounds every op in flight, whatever its remote
	// engine (local congestion is this engine's); the remote one bounds
	// the ops to one engine and direction (MaxInFlight: the smaller).
	if ps.inflight >= e.ctl.MaxInFlight(ps.key) || e.inflight >= max(1, int(e.ctl.Local())) {
		return false
	}
	if !t.short && e.cfg.ShortFirst >= 0 && e.longInflight >= e.cfg.ShortFirst && (e.shortActive > 0 || now < e.shortUntil) {
		if e.shortActive == 0 {
			e.timer = min(e.timer, e.shortUntil) // the hold ends
		}
		return false
	}
	if w := ps.pacer.Wait(now); w > 0 {
		e.timer = min(e.timer, now+w)
		return false
	}
	// A retry whose backoff is over goes first.
	idx, prev := int32(-1), int32(-1)
	for i := t.retryHead; i >= 0; prev, i = i, e.ops[i].next {
		if at := e.ops[i].readyAt; at > now {
			e.timer = min(e.timer, at)
			continue
		}
		idx = i
		break
	}
	if idx < 0 && (t.issued == t.length || len(e.freeOps) == 0) {
		return false
	}
	b := e.p.cmd.Reserve()
	if b == nil {
		e.ringFull = true
		return false
	}
	var o *op
	if idx >= 0 {
		o = &e.ops[idx]
		if prev < 0 {
			t.retryHead = o.next
		} else {
			e.ops[prev].next = o.next
		}
		if t.retryTail == idx {
			t.retryTail = prev
		}
		o.next = -1
		t.nretry--
		e.st.retries.Add(1)
	} else {
		idx = e.freeOps[len(e.freeOps)-1]
		e.freeOps = e.freeOps[:len(e.freeOps)-1]
		o = &e.ops[idx]
		o.t, o.off = t, t.issued
		o.length = uint32(min(e.chunk, t.length-t.issued))
		o.attempts, o.timeouts, o.congest = 0, 0, 0
		t.issued += uint64(o.length)
	}
	o.gen++
	o.attempts++
	o.posted = true
	cmd := abi.Command{
		Op:           t.op,
		Slot:         o.slot,
		Cookie:       uint64(o.gen)<<32 | uint64(uint32(idx)),
		RemoteAddr:   t.key.Peer,
		RemoteRegion: t.region,
		RemoteOffset: t.remoteOff + o.off,
		LocalRegion:  t.local.id,
		Length:       o.length,
		LocalOffset:  t.localOff + o.off,
		Key:          t.kd,
	}
	cmd.Encode(b)
	e.p.cmd.Commit()
	ps.inflight++
	t.inflight++
	e.inflight++
	if !t.short {
		e.longInflight++
	}
	ps.pacer.Issued(now, e.ctl.Gap(ps.key, int(o.length)))
	e.st.ops.Add(1)
	return true
}

// sleep waits for a completion (on the engine's doorbell), a new
// transfer, a cancellation or Close (on wakeFD), or the next pacing or
// backoff deadline, whichever comes first.
func (e *Executor) sleep(now int64) {
	timeout := int64(waitBellMaxMs) * int64(time.Millisecond)
	if e.timer != noTimer { // now was read
		timeout = min(timeout, max(e.timer-now, 0))
	}
	bell := e.p.arm != nil && e.inflight > 0
	if e.inflight > 0 && !bell {
		// No doorbell: poll the ring with backoff, as Wait does.
		timeout = min(timeout, int64(e.nap))
		e.nap = min(2*e.nap, waitSleepMax)
	}
	e.sleeping.Store(true)
	if e.pending.Load() || e.closing.Load() || e.cancels.Load() != e.seen {
		e.sleeping.Store(false)
		return
	}
	nfd := 1
	if bell {
		e.p.arm.Store(1) // pairs with the engine's CompareAndSwap after it publishes
		if e.p.cpl.Peek() != nil {
			e.p.arm.Store(0)
			e.sleeping.Store(false)
			return
		}
		nfd = 2
	}
	e.ts = unix.NsecToTimespec(timeout)
	e.pfd[0].Revents, e.pfd[1].Revents = 0, 0
	if n, _ := unix.Ppoll(e.pfd[:nfd], &e.ts, nil); n > 0 {
		if e.pfd[0].Revents&unix.POLLIN != 0 {
			unix.Read(e.wakeFD, e.evbuf[:])
		}
		if bell && e.pfd[1].Revents&unix.POLLIN != 0 {
			unix.Read(e.p.bellFD, e.evbuf[:])
		}
	}
	if bell {
		e.p.arm.Store(0)
	}
	e.sleeping.Store(false)
}
