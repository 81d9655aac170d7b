package portal

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
)

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
	shortLast    int64 // when the last short transfer started (0: none yet)
	shortGap     int64 // mean gap between short transfers' starts, ns (EWMA; 0: unknown)
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

// peerState is the state of one cc.Key: ops in flight and the pacer.
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
	kd        Key
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
	if g := p.gone.Load(); g != nil {
		return nil, fmt.Errorf("portal: executor: %w", g)
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

// Transfer names the bytes an Executor moves: Length bytes between Local at
// LocalOffset and the remote region RemoteRegion at RemoteOffset on the
// engine at Remote, with Key, the K_d the region's owner derived for this
// portal's Identity and the op (OpRead for Read, OpWrite for Write).
type Transfer struct {
	Remote       netip.Addr // the serving engine's IPv4 address
	RemoteRegion RegionID
	RemoteOffset uint64
	Key          Key     // K_d for OpRead (Read) or OpWrite (Write)
	Local        *Region // this portal's region: Read's sink, Write's source
	LocalOffset  uint64
	Length       uint64 // any number of bytes; 0 does nothing
}

// Read copies t.Length bytes of the remote region into t.Local; t.Local
// must allow PermLocalWrite. It returns nil once every byte has arrived,
// or the first failure: a *ChunkError naming the chunk and its status,
// ctx's error (wrapped, errors.Is works), ErrExecutorClosed, or an
// argument error (ErrRegion, ErrBounds, ErrAddr) before anything is
// posted. It returns only once none of its ops is in flight any more;
// after a failure the local range holds undefined bytes (as after a
// failed READ op: see Op).
func (e *Executor) Read(ctx context.Context, t Transfer) error {
	return e.transfer(ctx, abi.OpRead, &t)
}

// Write copies t.Length bytes of t.Local into the remote region; t.Local
// must allow PermLocalRead and its range stay unchanged until Write
// returns. Like Read otherwise. Each chunk is committed remotely all at
// once or not at all; after a failure some chunks may have been written
// (a chunk that ended in TIMEOUT may have been too: see Op).
func (e *Executor) Write(ctx context.Context, t Transfer) error {
	return e.transfer(ctx, abi.OpWrite, &t)
}

func (e *Executor) transfer(ctx context.Context, opc abi.Op, x *Transfer) error {
	remote, local, localOffset, remoteOffset, length := x.Remote.Unmap(), x.Local, x.LocalOffset, x.RemoteOffset, x.Length
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
		region: x.RemoteRegion, remoteOff: remoteOffset, kd: x.Key, local: local, localOff: localOffset, length: length,
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
