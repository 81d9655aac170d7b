package aesni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of IVConfig.
const (
	// DefaultIVBlock is how many counters one durable write (one fsync)
	// reserves. A 4 KB READ served and initiated on one core uses 65
	// counters, so at 500 k READs/s a core uses ~2^25 counters a second:
	// with 2^32 per block the fsync (milliseconds on a VM disk, taken by
	// the source's refiller goroutine, never by a core) comes every couple
	// of minutes, and a crash forfeits at most 2^32 of the 2^64 counters.
	DefaultIVBlock = 1 << 32
	// DefaultIVSpan is how many counters a lane takes from the source at
	// once (one take by the refiller, every ~30 ms at that rate: ample
	// time to publish the next spare before the current range runs out).
	DefaultIVSpan = 1 << 20
)

// refillPoll is how often the refiller of a durable source looks for lanes
// that asked for a spare. A lane must not use up a Span in less than this
// plus one take (with a block's fsync), or it runs dry (ErrIVPending).
const refillPoll = time.Millisecond

// IV errors. Draws (Next, NextN) return ErrIVPending or the error that
// stopped the source (one of the others, or ErrIVState wrapping the I/O
// error); test them with errors.Is. OpenIVSource wraps them with context.
var (
	// ErrIVExhausted: the 64-bit counter space is used up. Counters never
	// wrap: rotate every key (and remove the state file) to go on.
	ErrIVExhausted = errors.New("aesni: IV counter exhausted")
	// ErrIVPending: both of a lane's ranges are used up and the refiller
	// has not yet published a new spare (a slow disk, or draws faster than
	// one Span per refill). Transient: the draw is not retried, the next
	// one may succeed.
	ErrIVPending = errors.New("aesni: IV range pending")
	// ErrIVState: a reservation could not be made durable (write or fsync
	// failed). It is sticky: after a failed fsync the file's state is
	// unknown, so the source reserves nothing more until a restart.
	// Counters already reserved stay usable.
	ErrIVState = errors.New("aesni: IV state file not durable")
	// ErrIVCorrupt: the state file exists but holds no valid record.
	ErrIVCorrupt = errors.New("aesni: IV state file corrupt")
	// ErrIVClosed: the source was closed.
	ErrIVClosed = errors.New("aesni: IV source closed")
)

// IVConfig configures an IVSource.
type IVConfig struct {
	// Path of the state file holding the high-water mark. It must live as
	// long as the engine's keys: losing it restarts counters at 1 and
	// repeats IVs, so rotate every region key if it is ever lost.
	Path string
	// Block is how many counters one durable write reserves (0: default).
	// A crash loses at most the unused part of the reserved counters: about
	// one Block plus two Spans per lane.
	Block uint64
	// Span is how many counters a lane takes from the source at once
	// (0: default); at most Block. A lane that uses up a Span faster than
	// the refiller can take one (a millisecond, plus an fsync when a new
	// block is reserved) runs dry.
	Span uint64
}

func (c *IVConfig) withDefaults() IVConfig {
	d := *c
	if d.Block == 0 {
		d.Block = DefaultIVBlock
	}
	if d.Span == 0 {
		d.Span = DefaultIVSpan
		if d.Span > d.Block {
			d.Span = d.Block
		}
	}
	return d
}

// Validate reports a configuration that OpenIVSource would refuse.
func (c IVConfig) Validate() error {
	d := c.withDefaults()
	if d.Path == "" {
		return errors.New("aesni: IVConfig.Path is empty")
	}
	if d.Span > d.Block {
		return fmt.Errorf("aesni: IVConfig.Span %d > Block %d", d.Span, d.Block)
	}
	return nil
}

// State file layout: two 32-byte records, at offsets 0 and slotStride (in
// different 512-byte sectors). Reservations alternate between them, so a
// torn write destroys at most the record being written, and that record's
// range was never used (counters are used only after the write's fsync
// returned). On open the larger valid high-water wins.
//
//	0  magic "1RMAIVC1"
//	8  high-water u64 BE: no counter >= it was ever handed out
//	16 reserved zero (12 B)
//	28 CRC-32C of bytes 0..28, u32 BE
const (
	recordLen  = 32
	slotStride = 512
	stateLen   = slotStride + recordLen
	recordMag  = "1RMAIVC1"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeRecord(b []byte, hw uint64) {
	clear(b[:recordLen])
	copy(b[0:8], recordMag)
	binary.BigEndian.PutUint64(b[8:16], hw)
	binary.BigEndian.PutUint32(b[28:32], crc32.Checksum(b[0:28], castagnoli))
}

func decodeRecord(b []byte) (hw uint64, ok bool) {
	if string(b[0:8]) != recordMag ||
		binary.BigEndian.Uint32(b[28:32]) != crc32.Checksum(b[0:28], castagnoli) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[8:16]), true
}

// stateFile is what the source needs of its file; tests model crashes and
// slow disks with their own.
type stateFile interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// IVSource hands out the engine's 64-bit message counters: the second half
// of every IV (sender address ‖ counter, paper Appendix A). A counter is
// never handed out twice, also across restarts and crashes: before any
// counter of a new block is used, the end of that block (the high-water
// mark) is written to the state file and fsynced; a new process starts at
// the persisted mark. A crash thus skips unused counters, never repeats
// one. The space is 2^64 and never wraps (ErrIVExhausted).
//
// One source per engine (the file is locked against a second process);
// each core draws through its own IVLane, which holds a current range and
// a spare one of Span counters each. The drawing goroutine never takes a
// range itself: a durable source (OpenIVSource) runs one refiller
// goroutine that, when a lane has asked, takes a range for every lane
// whose spare is empty, under the source's mutex and with the write and
// fsync a new block needs, and hands it to the lane through atomics. A
// volatile source (NewVolatileIVSource) has nothing to persist: a range is
// one compare-and-swap on the next counter, and its lanes refill their
// spare inline.
type IVSource struct {
	volatile bool
	block    uint64
	span     uint64
	// next is the next counter not yet given to a lane. A durable source
	// changes it under mu; a volatile one by compare-and-swap.
	next atomic.Uint64
	// failed is set once no range can be taken any more (sticky
	// ErrIVState, ErrIVExhausted, ErrIVClosed); lanes read it when they
	// run dry, without the mutex.
	failed atomic.Pointer[ivFailure]

	// Refiller of a durable source: a lane sets asked (IVLane.ask); stop
	// and done end the goroutine.
	asked     atomic.Bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	mu    sync.Mutex // durable sources: the fields below and every take
	f     stateFile
	hw    uint64    // persisted high-water: [next, hw) is reserved and free
	slot  int64     // slot that holds hw
	lanes []*IVLane // lanes the refiller serves
	rec   [recordLen]byte
	// counters, under mu
	reservations uint64
}

// ivFailure boxes the error that stopped a source, for an atomic pointer.
type ivFailure struct{ err error }

// OpenIVSource opens (creating it if missing) and locks the state file and
// returns a source that starts after every counter a previous process
// could have used, with its refiller goroutine running (Close stops it).
// A created file is made durable (temporary file, fsync, rename, directory
// fsync) before it is used.
func OpenIVSource(cfg IVConfig) (*IVSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if err := createStateFile(c.Path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(c.Path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("aesni: open IV state: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("aesni: IV state %s is in use by another engine: %w", c.Path, err)
	}
	s, err := openSource(f, c)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("aesni: IV state %s: %w", c.Path, err)
	}
	s.startRefiller()
	return s, nil
}

// createStateFile creates path holding two records of high-water 0, unless
// it exists. The rename makes creation atomic: path either does not exist
// or holds valid records.
func createStateFile(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("aesni: IV state: %w", err)
	}
	var b [stateLen]byte
	encodeRecord(b[0:], 0)
	encodeRecord(b[slotStride:], 0)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("aesni: create IV state: %w", err)
	}
	_, err = f.WriteAt(b[:], 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("aesni: create IV state: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// openSource reads the two records of f; the larger valid high-water is
// where this process starts. The source's refiller is not running
// (startRefiller): tests drive refillLanes themselves.
//
// It first fsyncs what it read. A previous process may have died with a
// record written but not synced (its fsync failed, or it crashed before
// the dirty page was written back); reads see that record in the page
// cache. If this process trusted it and then crashed while writing the
// other slot, both slots could be torn on disk. Syncing first makes the
// record this process starts from durable, so the slot it does not write
// is always valid on disk.
func openSource(f stateFile, cfg IVConfig) (*IVSource, error) {
	c := cfg.withDefaults()
	var b [stateLen]byte
	if n, err := f.ReadAt(b[:], 0); n != stateLen {
		if err == nil || err == io.EOF {
			err = ErrIVCorrupt
		}
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("%w: fsync: %w", ErrIVState, err)
	}
	hw0, ok0 := decodeRecord(b[0:])
	hw1, ok1 := decodeRecord(b[slotStride:])
	s := &IVSource{f: f, block: c.Block, span: c.Span}
	switch {
	case ok0 && (!ok1 || hw0 >= hw1):
		s.hw, s.slot = hw0, 0
	case ok1:
		s.hw, s.slot = hw1, 1
	default:
		return nil, ErrIVCorrupt
	}
	// Counter 0 is never handed out, so an all-zero counter field marks an
	// IV that was never set. hw is raised with next (in memory only) so
	// that [next, hw) stays the reserved range: empty.
	s.hw = max(s.hw, 1)
	s.next.Store(s.hw)
	return s, nil
}

// NewVolatileIVSource returns a source without a state file, starting at
// counter 1: for tests and the simulator only. Its counters repeat after a
// restart, so it must never seal with a key that outlives the process. It
// runs no goroutine: its lanes take ranges inline, without a lock.
func NewVolatileIVSource(cfg IVConfig) *IVSource {
	if cfg.Path == "" {
		cfg.Path = "(volatile)"
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := cfg.withDefaults()
	s := &IVSource{volatile: true, block: c.Block, span: c.Span}
	s.next.Store(1)
	return s
}

// fail records err as the reason no range can be taken any more, unless
// an earlier reason is recorded.
func (s *IVSource) fail(err error) error {
	s.failed.CompareAndSwap(nil, &ivFailure{err})
	return err
}

// failure returns the recorded reason, or nil.
func (s *IVSource) failure() error {
	if f := s.failed.Load(); f != nil {
		return f.err
	}
	return nil
}

// reserve makes [s.next, s.hw) cover at least want counters: it persists a
// new high-water mark one Block further and fsyncs it before returning.
// s.mu is held.
func (s *IVSource) reserve(want uint64) error {
	next := s.next.Load()
	for s.hw-next < want {
		if s.hw == math.MaxUint64 {
			return ErrIVExhausted
		}
		hw := s.hw + s.block
		if hw < s.hw { // the last, partial block
			hw = math.MaxUint64
		}
		slot := 1 - s.slot
		encodeRecord(s.rec[:], hw)
		if _, err := s.f.WriteAt(s.rec[:], slot*slotStride); err != nil {
			return fmt.Errorf("%w: write: %w", ErrIVState, err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("%w: fsync: %w", ErrIVState, err)
		}
		s.hw, s.slot = hw, slot
		s.reservations++
	}
	return nil
}

// takeLocked hands out the range [start, end) of up to n counters (fewer
// only at the very end of the counter space) from a durable source; s.mu
// is held. Every error is recorded (fail): after a failed write or fsync
// the file's state is unknown, so the source reserves nothing more until a
// restart.
func (s *IVSource) takeLocked(n uint64) (start, end uint64, err error) {
	if err := s.failure(); err != nil {
		return 0, 0, err
	}
	start = s.next.Load()
	// Counter MaxUint64 is never handed out: the mark must exceed every
	// counter used. Near the end, the last range is shorter than n.
	n = min(n, math.MaxUint64-start)
	if n == 0 {
		return 0, 0, s.fail(ErrIVExhausted)
	}
	if err := s.reserve(n); err != nil {
		return 0, 0, s.fail(err)
	}
	s.next.Store(start + n)
	return start, start + n, nil
}

// takeVolatile is takeLocked for a volatile source: one compare-and-swap,
// no lock.
func (s *IVSource) takeVolatile(n uint64) (start, end uint64, err error) {
	for {
		if err := s.failure(); err != nil {
			return 0, 0, err
		}
		start = s.next.Load()
		m := min(n, math.MaxUint64-start)
		if m == 0 {
			return 0, 0, s.fail(ErrIVExhausted)
		}
		if s.next.CompareAndSwap(start, start+m) {
			return start, start + m, nil
		}
	}
}

// startRefiller starts the goroutine that fills the lanes' spares.
func (s *IVSource) startRefiller() {
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	go s.refiller()
}

// refiller looks every refillPoll for a lane that asked (IVLane.ask) and
// fills every empty spare, until Close. Requests made during a round (a
// round may wait for an fsync) are served by another round at once.
func (s *IVSource) refiller() {
	defer close(s.done)
	t := time.NewTicker(refillPoll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		for s.asked.Load() {
			s.refillLanes()
		}
	}
}

// refillLanes takes a range for every lane whose spare is empty and
// publishes it. It clears asked first: a lane that empties its spare after
// that point sees asked false and sets it again, and one that emptied it
// before is filled in this round.
func (s *IVSource) refillLanes() {
	s.asked.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lanes {
		if l.spare.CompareAndSwap(spareEmpty, spareFilling) {
			if l.fillLocked() != nil {
				return // recorded in s.failed: every lane sees it
			}
		}
	}
}

// Close stops the refiller (waiting for a take it is making) and releases
// the state file (and its lock). It writes nothing: the persisted mark
// already covers every counter a lane holds, so lanes may even go on using
// the ranges they hold, and the next process starts after them. A lane
// that runs dry afterwards gets ErrIVClosed.
func (s *IVSource) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		if s.volatile {
			s.failed.Store(&ivFailure{ErrIVClosed})
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.failed.Store(&ivFailure{ErrIVClosed})
		s.closeErr = s.f.Close()
	})
	return s.closeErr
}

// IVSourceStats is a snapshot of a source.
type IVSourceStats struct {
	Next         uint64 // next counter a lane would get
	HighWater    uint64 // persisted mark (a volatile source: Next)
	Reservations uint64 // durable writes (fsyncs) by this process (a volatile source: 0)
}

// Stats returns a snapshot (control path: it waits for a take in
// progress).
func (s *IVSource) Stats() IVSourceStats {
	if s.volatile {
		n := s.next.Load()
		return IVSourceStats{Next: n, HighWater: n}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return IVSourceStats{Next: s.next.Load(), HighWater: s.hw, Reservations: s.reservations}
}

// NewLane returns a lane for one engine core. It holds no counters until
// its first Refill (or, from a volatile source, its first draw). A durable
// source keeps every lane it made, to refill it, until Close: make one per
// core, not one per use.
func (s *IVSource) NewLane() *IVLane {
	l := &IVLane{src: s, span: s.span, volatile: s.volatile}
	if !s.volatile {
		s.mu.Lock()
		s.lanes = append(s.lanes, l)
		s.mu.Unlock()
	}
	return l
}

// States of IVLane.spare.
const (
	spareEmpty   uint32 = iota // the owner used it; a filler may claim it
	spareFilling               // a filler claimed it and is taking a range
	spareFull                  // spareNext, spareEnd hold a range for the owner
)

// IVLane is one engine core's view of the IVSource: a current range, used
// only by the goroutine that owns the lane, and a spare one handed over
// through atomics, so that Next, NextN and NextNonce never lock, never do
// I/O and never allocate. Not safe for concurrent use, except that the
// source's refiller fills the spare alongside the owner.
//
// The spare is a small state machine (spare): a filler (the refiller or
// Refill) moves it empty → filling by compare-and-swap, writes spareNext
// and spareEnd, and stores full; the owner, on finding its current range
// too short, loads full, copies the range and stores empty. Each side only
// leaves the states the other one enters, so the plain fields are written
// by one side at a time and the atomic store that hands them over orders
// them.
//
// When the owner swaps the spare in, a lane of a durable source asks the
// refiller for a new spare (ask: an atomic flag the refiller polls); a
// lane of a volatile source takes it inline, at once. If both ranges are
// dry, a draw fails at once with ErrIVPending (the refiller has not caught
// up) or the source's failure, and counts a stall: it never waits for a
// range.
//
// The ranges a lane uses are, in order, the ranges it took from its
// source; a draw that does not fit the rest of the current range skips
// that rest (Wasted). The counters of a lane alone on a volatile source
// thus depend only on its sequence of draws (Refill changes nothing): its
// ranges are the source's consecutive Span-sized ranges.
type IVLane struct {
	src      *IVSource
	span     uint64
	volatile bool
	// current range, owner only
	next, end uint64
	// counters, owner only
	issued, stalls, wasted uint64

	// The filler's writes stay off the cache line of the fields above.
	_                   [64]byte
	spare               atomic.Uint32 // spareEmpty, spareFilling, spareFull
	spareNext, spareEnd uint64        // valid while spare is spareFull
}

// Next returns a counter never returned before by any lane of any process
// on this state file. It fails with ErrIVPending if both of the lane's
// ranges are used up and the refiller has not yet published a new spare,
// or with the source's failure (errors.Is ErrIVState, ErrIVExhausted or
// ErrIVClosed) if none will come.
func (l *IVLane) Next() (uint64, error) {
	if l.next < l.end {
		c := l.next
		l.next++
		l.issued++
		return c, nil
	}
	return l.NextN(1)
}

// NextN returns the first of n consecutive counters (1 <= n <= Span), for
// a response's span (see ResponseSpan). Unused counters at the end of the
// current range are skipped. Errors as for Next.
func (l *IVLane) NextN(n uint64) (uint64, error) {
	if n == 0 || n > l.span {
		panic("aesni: NextN count out of range")
	}
	if l.end-l.next < n {
		if err := l.swap(n); err != nil {
			return 0, err
		}
	}
	c := l.next
	l.next += n
	l.issued += n
	return c, nil
}

// swap replaces the current range, shorter than n, with the spare and asks
// for a new spare. With no spare it fails (a stall) and keeps the current
// range.
func (l *IVLane) swap(n uint64) error {
	if l.spare.Load() != spareFull && !(l.volatile && l.fillVolatile() == nil) {
		l.stalls++
		if err := l.src.failure(); err != nil {
			return err
		}
		l.ask()
		return ErrIVPending
	}
	l.wasted += l.end - l.next
	l.next, l.end = l.spareNext, l.spareEnd
	l.spare.Store(spareEmpty)
	if l.volatile {
		l.fillVolatile() // a failure is recorded in the source and seen by the next swap
	} else {
		l.ask()
	}
	if l.end-l.next < n { // the last range of the counter space
		l.stalls++
		return ErrIVExhausted
	}
	return nil
}

// ask tells the refiller of a durable source that the lane's spare is
// empty: it sets asked, which the refiller polls. A lane that finds asked
// already set leaves it (no write to the shared line): the refiller clears
// it only at the start of a round, which then sees this lane's empty
// spare. The lane wakes no goroutine: waking one would make the drawing
// thread wake another OS thread (a futex syscall) that the kernel may run
// in its place.
func (l *IVLane) ask() {
	if s := l.src; !s.asked.Load() {
		s.asked.Store(true)
	}
}

// fillVolatile takes a spare inline from a volatile source. Only the owner
// fills a volatile lane, so the spare is empty or full here.
func (l *IVLane) fillVolatile() error {
	if !l.spare.CompareAndSwap(spareEmpty, spareFilling) {
		return nil // full
	}
	start, end, err := l.src.takeVolatile(l.span)
	return l.publish(start, end, err)
}

// fillLocked takes a spare from a durable source, which the caller moved
// from empty to filling; s.mu is held.
func (l *IVLane) fillLocked() error {
	start, end, err := l.src.takeLocked(l.span)
	return l.publish(start, end, err)
}

// publish hands the range [start, end) over to the owner (spare full), or
// after a failed take releases the spare (empty).
func (l *IVLane) publish(start, end uint64, err error) error {
	if err != nil {
		l.spare.Store(spareEmpty)
		return err
	}
	l.spareNext, l.spareEnd = start, end
	l.spare.Store(spareFull)
	return nil
}

// NextNonce writes addr ‖ Next() into nonce.
func (l *IVLane) NextNonce(nonce []byte, addr [4]byte) error {
	c, err := l.Next()
	if err != nil {
		return err
	}
	PutNonce(nonce, addr, c)
	return nil
}

// Refill makes sure the lane has a spare range: it returns at once if it
// has one; otherwise it takes one itself, under the source's mutex, with
// the write and fsync a new block may need, after waiting for a take the
// refiller is making. It is a control-path call, not for the data path
// (which never needs it: the refiller or, on a volatile source, the lane
// itself keeps the spare): call it once when a core is built, to learn
// early that the source is broken. It is safe while the refiller runs: it
// claims the spare by the same compare-and-swap, under the same mutex.
// Like every lane method it belongs to the lane's owner.
func (l *IVLane) Refill() error {
	if l.spare.Load() == spareFull {
		return nil
	}
	if l.volatile {
		return l.fillVolatile()
	}
	s := l.src
	s.mu.Lock()
	defer s.mu.Unlock()
	// The refiller claims and publishes a spare while holding s.mu, so
	// here the spare is empty or full.
	if !l.spare.CompareAndSwap(spareEmpty, spareFilling) {
		return nil
	}
	return l.fillLocked()
}

// IVLaneStats counts a lane's activity.
type IVLaneStats struct {
	Issued uint64 // counters handed out
	// Stalls counts draws (Next, NextN) that failed because neither range
	// held enough counters: ErrIVPending (on a durable source: the
	// refiller had not yet published a spare, so the spare was asked for
	// too late or the disk is slow), or the source's failure.
	Stalls uint64
	Wasted uint64 // counters skipped at range ends by NextN
}

// Stats returns the lane's counters (its owner only).
func (l *IVLane) Stats() IVLaneStats {
	return IVLaneStats{Issued: l.issued, Stalls: l.stalls, Wasted: l.wasted}
}
