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
	// reserves. The source's reserver goroutine keeps at least half a
	// block reserved ahead of the lanes (IVSource.low): 2^31 counters,
	// which last over 2 s even at 1e9 counters a second (beyond any
	// engine: a 4 KB READ served and initiated on one core uses 65
	// counters, so 500 k READs/s on a core is ~2^25 counters a second),
	// against a reserver that looks every reservePeriod (50 ms) and an
	// fsync of milliseconds. At ~1e8 counters a second a block lasts
	// ~40 s, so the fsync comes about once a minute, never on a core; a
	// crash forfeits less than 1.5 blocks plus a Span per lane of the 2^64
	// counters.
	DefaultIVBlock = 1 << 32
	// DefaultIVSpan is how many counters a lane takes from the source at
	// once: one compare-and-swap on the source's next counter, without a
	// lock or I/O (every ~30 ms at 2^25 counters a second, so the shared
	// cache line is rarely touched), and small enough that what a NextN
	// skips at a range end and what a lane holds at a crash do not matter.
	DefaultIVSpan = 1 << 20
)

// reservePeriod is how often the reserver of a durable source wakes to
// keep at least the low-water mark (IVSource.low) of counters reserved
// ahead. It must be far shorter than the time the lanes take to use up
// that margin: with the default Block (margin 2^31 counters) that is over
// 2 s at 1e9 counters a second, 40 periods. And it must be rare: the
// engine's threads other than the busy loops share a CPU with the
// application, whose posting bounds the loopback engine's 64 B
// throughput: a reserver waking every millisecond takes a visible share of
// it (bench/RESULTS.md, ab: the IV refill variants, `rmabench -only ab`).
// At 50 ms the reserver wakes 20 times a second, and does I/O once per
// Block.
const reservePeriod = 50 * time.Millisecond

// dryPoll is the reserver's period while it is behind: when a lane found
// the source dry (IVSource.dry), or when at the rate counters were taken
// since its previous wake the reserved margin would not last two periods
// (a Block configured too small for the rate). Then it wakes this often
// until it keeps up; with the default Block it never is behind.
const dryPoll = time.Millisecond

// IV errors. Draws (Next, NextN) return ErrIVPending or the error that
// stopped the source (one of the others, or ErrIVState wrapping the I/O
// error); test them with errors.Is. OpenIVSource wraps them with context.
var (
	// ErrIVExhausted: the 64-bit counter space is used up. Counters never
	// wrap: rotate every key (and remove the state file) to go on.
	ErrIVExhausted = errors.New("aesni: IV counter exhausted")
	// ErrIVPending: the lane's range is used up and the source has no
	// reserved counters left for a new one: its reserver has not yet
	// persisted the next mark (a slow disk, or draws faster than the
	// reserver's margin allows). Transient: the draw is not retried, the
	// next one may succeed.
	ErrIVPending = errors.New("aesni: IV range pending")
	// ErrIVState: a reservation could not be made durable (write or fsync
	// failed). It is sticky: after a failed fsync the file's state is
	// unknown, so the source reserves nothing more until a restart.
	// Counters already reserved stay usable: lanes go on taking them.
	ErrIVState = errors.New("aesni: IV state file not durable")
	// ErrIVCorrupt: the state file exists but holds no valid record.
	ErrIVCorrupt = errors.New("aesni: IV state file corrupt")
	// ErrIVClosed: the source was closed (a lane keeps the range it holds;
	// no lane takes a new one).
	ErrIVClosed = errors.New("aesni: IV source closed")
)

// IVConfig configures an IVSource.
type IVConfig struct {
	// Path of the state file holding the high-water mark. It must live as
	// long as the engine's keys: losing it restarts counters at 1 and
	// repeats IVs, so rotate every region key if it is ever lost.
	Path string
	// Block is how many counters one durable write reserves (0: default).
	// The source keeps at least half a Block (and at least a Span)
	// reserved ahead, renewed by its reserver every reservePeriod (50 ms):
	// lanes that together use more than that per period plus an fsync run
	// dry (ErrIVPending), so keep Block well above twice the engine's
	// counter rate times 50 ms. A crash loses at most the unused part of
	// the reserved counters: less than 1.5 Blocks (2 if Span > Block/2)
	// plus a Span per lane.
	Block uint64
	// Span is how many counters a lane takes from the source at once
	// (0: default); at most Block. Taking one is a compare-and-swap, so a
	// small Span costs little; NextN skips the rest of a range it does not
	// fit in.
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
// never handed out twice, also across restarts and crashes: no counter is
// handed out before a high-water mark above it is written to the state
// file and fsynced; a new process starts at the persisted mark. A crash
// thus skips unused counters, never repeats one. The space is 2^64 and
// never wraps (ErrIVExhausted).
//
// One source per engine (the file is locked against a second process);
// each core draws through its own IVLane, which takes ranges of Span
// counters from the source. Taking a range never blocks: it is a
// compare-and-swap on next, bounded by hw, the mark below which counters
// may be handed out; it does no I/O, takes no lock and allocates nothing,
// from any number of lanes at once. If the range would pass hw, the take
// fails at once (ErrIVPending, or the source's failure).
//
// Only a durable source (OpenIVSource) has anything that blocks: moving
// hw, one write and fsync of the next mark per Block. Its reserver
// goroutine does it off the engine's loops: it wakes every reservePeriod
// (50 ms), and when fewer than a low-water mark (half a Block) of counters
// are reserved ahead of next, it persists the mark one Block further and
// only then publishes it in hw. That is the double buffering: the block in
// use and the next one, reserved ahead, off the loop. The lanes never wake
// it: a lane that finds the source dry only sets a flag (dry) that the
// reserver reads when it wakes. A volatile source (NewVolatileIVSource)
// has nothing to persist: its hw is the end of the counter space.
//
// A crash forfeits the counters reserved but not yet used: less than
// 1.5 Blocks (2 if Span > Block/2) plus the rest of each lane's range.
type IVSource struct {
	volatile bool
	block    uint64
	span     uint64
	// low is the low-water mark: the reserver reserves when hw - next is
	// below it. Half a Block, and at least a Span, so that a reserver that
	// keeps up leaves room for the next take of every lane.
	low uint64

	// next is the next counter not yet handed out; lanes move it by
	// compare-and-swap (take). next <= hw.
	next atomic.Uint64
	// hw: counters below it may be handed out. Durable: the persisted,
	// fsynced high-water mark, stored only after the fsync, under mu.
	// Volatile: MaxUint64, the end of the space (counter MaxUint64 itself
	// is never handed out: a mark must exceed every counter used).
	hw atomic.Uint64
	// failed is set once no more counters can be reserved (sticky
	// ErrIVState; ErrIVExhausted once the space is used up).
	failed atomic.Pointer[ivFailure]
	// closed: Close was called; takes fail with ErrIVClosed.
	closed atomic.Bool
	// dry: a take found too few counters reserved (ErrIVPending). Lanes
	// only set it; the reserver reads and clears it when it wakes, and
	// then wakes again after dryPoll rather than reservePeriod.
	dry atomic.Bool
	// reservations counts durable writes (fsyncs) of new marks; wakes
	// counts the reserver's wake-ups (tests check that it stays rare).
	reservations atomic.Uint64
	wakes        atomic.Uint64

	// Reserver goroutine of a durable source: stop and done end it.
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	mu   sync.Mutex // durable sources: the fields below and every reservation
	f    stateFile
	slot int64 // slot that holds hw
	rec  [recordLen]byte
}

// ivFailure boxes the error that stopped a source, for an atomic pointer.
type ivFailure struct{ err error }

// OpenIVSource opens (creating it if missing) and locks the state file and
// returns a source that starts after every counter a previous process
// could have used. Before it returns it reserves (write and fsync) one
// Block, and it starts the source's reserver goroutine (Close stops it).
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
	if err == nil {
		err = s.start(reservePeriod)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("aesni: IV state %s: %w", c.Path, err)
	}
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
// where this process starts. It reserves nothing, and the reserver is not
// running (start): tests play the reserver with wake and reserveAhead.
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
	s := newSource(c)
	s.f = f
	var hw uint64
	switch {
	case ok0 && (!ok1 || hw0 >= hw1):
		hw, s.slot = hw0, 0
	case ok1:
		hw, s.slot = hw1, 1
	default:
		return nil, ErrIVCorrupt
	}
	// Counter 0 is never handed out, so an all-zero counter field marks an
	// IV that was never set. hw is raised with next (in memory only) so
	// that [next, hw) stays the reserved range: empty.
	hw = max(hw, 1)
	s.hw.Store(hw)
	s.next.Store(hw)
	return s, nil
}

func newSource(c IVConfig) *IVSource {
	return &IVSource{block: c.Block, span: c.Span, low: max(c.Block/2, c.Span)}
}

// NewVolatileIVSource returns a source without a state file, starting at
// counter 1: for tests and the simulator only. Its counters repeat after a
// restart, so it must never seal with a key that outlives the process. It
// runs no goroutine: every counter up to the end of the space is available
// to its lanes' takes.
func NewVolatileIVSource(cfg IVConfig) *IVSource {
	if cfg.Path == "" {
		cfg.Path = "(volatile)"
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	s := newSource(cfg.withDefaults())
	s.volatile = true
	s.hw.Store(math.MaxUint64)
	s.next.Store(1)
	return s
}

// fail records err as the reason no more counters can be reserved, unless
// an earlier reason is recorded, and returns the recorded reason.
func (s *IVSource) fail(err error) error {
	s.failed.CompareAndSwap(nil, &ivFailure{err})
	return s.failure()
}

// failure returns the recorded reason, or nil.
func (s *IVSource) failure() error {
	if f := s.failed.Load(); f != nil {
		return f.err
	}
	return nil
}

// take hands out the range [start, end) of n counters (fewer only at the
// very end of the counter space) from what is reserved: a compare-and-swap
// loop on next, bounded by hw. It never blocks, does no I/O and takes no
// lock. If fewer than n counters are reserved it fails at once: with the
// source's failure if it has one, else with ErrIVPending, and it sets dry
// for the reserver.
func (s *IVSource) take(n uint64) (start, end uint64, err error) {
	if s.closed.Load() {
		return 0, 0, ErrIVClosed
	}
	for {
		start = s.next.Load()
		hw := s.hw.Load() // loaded after next: hw only grows, so start <= hw
		m := n
		if hw-start < n {
			if hw != math.MaxUint64 || hw == start {
				return 0, 0, s.dryErr(hw)
			}
			m = hw - start // the last, short range of the space
		}
		if s.next.CompareAndSwap(start, start+m) {
			return start, start + m, nil
		}
	}
}

// dryErr is why a take found fewer counters than it needs below hw.
func (s *IVSource) dryErr(hw uint64) error {
	if err := s.failure(); err != nil {
		return err
	}
	if hw == math.MaxUint64 {
		return s.fail(ErrIVExhausted)
	}
	if !s.dry.Load() { // no write to the shared line while it is set
		s.dry.Store(true)
	}
	return ErrIVPending
}

// start reserves synchronously so that a Block is available (the lanes'
// first takes then never wait for the reserver) and starts the reserver,
// waking every period.
func (s *IVSource) start(period time.Duration) error {
	if err := s.reserveAhead(s.block); err != nil {
		return err
	}
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	go s.reserver(period)
	return nil
}

// reserver runs wake every period, until Close; when it is behind it comes
// back after dryPoll instead (reserverWait). The period is a Go timer, not
// a signal from the lanes: a lane that woke a goroutine would make its
// busy-polling thread do a futex syscall, and the woken goroutine would
// land on the busy loop's P.
func (s *IVSource) reserver(period time.Duration) {
	defer close(s.done)
	t := time.NewTimer(period)
	defer t.Stop()
	last, lastAt := s.next.Load(), time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		dry := s.wake()
		next, now := s.next.Load(), time.Now()
		wait := period
		if s.failure() == nil && !s.closed.Load() {
			wait = reserverWait(period, dry, next-last, now.Sub(lastAt), s.hw.Load()-next)
		}
		last, lastAt = next, now
		t.Reset(wait)
	}
}

// reserverWait is how long the reserver sleeps after a wake: period,
// unless a lane found the source dry since the previous wake, or unless at
// the rate counters were taken since then (used in elapsed) the margin
// still reserved would not last two periods; then dryPoll. The margin of
// a source reserved to the end of the space is huge: nothing to hurry.
func reserverWait(period time.Duration, dry bool, used uint64, elapsed time.Duration, margin uint64) time.Duration {
	if dry {
		return dryPoll
	}
	if elapsed > 0 && float64(used)*float64(2*period)/float64(elapsed) > float64(margin) {
		return dryPoll
	}
	return period
}

// wake is one round of the reserver: it clears dry and, if fewer than the
// low-water mark of counters are reserved ahead of next, reserves. It
// reports whether a lane had found the source dry. A failure is recorded
// in the source (lanes see it when they run dry), so it is not returned.
func (s *IVSource) wake() (dry bool) {
	s.wakes.Add(1)
	if dry = s.dry.Load(); dry {
		s.dry.Store(false)
	}
	s.reserveAhead(s.low)
	return dry
}

// reserveAhead makes sure that at least want counters are reserved ahead
// of next (unless the space is reserved to its end), persisting marks one
// Block further each. It takes s.mu, so it may wait for a reservation in
// progress, and it does the write and fsync: never on the data path.
// Durable sources only.
func (s *IVSource) reserveAhead(want uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed.Load() {
			return ErrIVClosed
		}
		if err := s.failure(); err != nil {
			return err
		}
		hw := s.hw.Load() // only changed under s.mu
		if hw == math.MaxUint64 || hw-s.next.Load() >= want {
			return nil
		}
		if err := s.reserveLocked(hw); err != nil {
			return s.fail(err)
		}
	}
}

// reserveLocked persists the mark one Block above hw (the last, partial
// block ends at MaxUint64) in the slot that does not hold hw, fsyncs it,
// and only then publishes it in s.hw; s.mu is held. Any error must make
// the source sticky-failed (the caller records it): after a failed write
// or fsync the file's state is unknown.
func (s *IVSource) reserveLocked(hw uint64) error {
	mark := hw + s.block
	if mark < hw {
		mark = math.MaxUint64
	}
	slot := 1 - s.slot
	encodeRecord(s.rec[:], mark)
	if _, err := s.f.WriteAt(s.rec[:], slot*slotStride); err != nil {
		return fmt.Errorf("%w: write: %w", ErrIVState, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("%w: fsync: %w", ErrIVState, err)
	}
	s.slot = slot
	s.reservations.Add(1)
	s.hw.Store(mark)
	return nil
}

// Close stops the reserver (waiting for a reservation it is making) and
// releases the state file (and its lock). It writes nothing: the persisted
// mark covers every counter handed out, and the next process starts at
// it. From Close on every take fails with ErrIVClosed at once, even if
// counters are still reserved (they are forfeited); a lane goes on using
// the range it holds (a take racing with Close may still succeed: its
// counters are covered by the mark too). Close is idempotent.
func (s *IVSource) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		if s.f != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.closeErr = s.f.Close()
		}
	})
	return s.closeErr
}

// IVSourceStats is a snapshot of a source.
type IVSourceStats struct {
	Next uint64 // next counter a lane would get
	// HighWater: counters below it may be handed out. Durable: the
	// persisted mark (HighWater - Next are reserved ahead; a crash
	// forfeits them). Volatile: MaxUint64.
	HighWater    uint64
	Reservations uint64 // durable writes (fsyncs) of a new mark by this process (volatile: 0)
}

// Stats returns a snapshot, without locking (it never waits for a
// reservation in progress).
func (s *IVSource) Stats() IVSourceStats {
	return IVSourceStats{Next: s.next.Load(), HighWater: s.hw.Load(), Reservations: s.reservations.Load()}
}

// NewLane returns a lane for one engine core. It holds no counters until
// its first draw. The source keeps no reference to its lanes.
func (s *IVSource) NewLane() *IVLane {
	return &IVLane{src: s, span: s.span}
}

// IVLane is one engine core's view of the IVSource: its current range,
// used only by the goroutine that owns the lane, so that Next, NextN and
// NextNonce never lock, never do I/O and never allocate. Not safe for
// concurrent use.
//
// A draw that finds its range too short takes a new Span from the source
// (IVSource.take: a compare-and-swap on the source's next counter, bounded
// by what is reserved) and skips the rest of the old range (Wasted). The
// lane's range comes from the block in use; the next block is reserved
// ahead by the source's reserver, off the loop. If the source has too few
// counters reserved, the draw fails at once with ErrIVPending (the
// reserver has not caught up), or with the source's failure if none will
// come, counts a stall and keeps the current range: it never waits.
//
// The ranges a lane uses are, in order, the ranges it took from its
// source. A lane alone on a volatile source thus hands out counters that
// depend only on its sequence of draws (Refill changes nothing): its
// ranges are the source's consecutive Span-sized ranges from counter 1.
type IVLane struct {
	src  *IVSource
	span uint64
	// current range
	next, end uint64
	// counters
	issued, stalls, wasted uint64
	// The lane is 128 bytes: an allocation size class of its own, so its
	// fields, written on every draw, own an aligned pair of cache lines.
	// The cores' lanes are allocated one after the other, and a lane
	// sharing a line (or the pair a prefetcher fetches together) with
	// another core's would cost every draw (BenchmarkIVLaneNext shows it
	// even on one core: an unpadded 56-byte lane draws slower).
	_ [128 - 7*8]byte
}

// Next returns a counter never returned before by any lane of any process
// on this state file. It fails with ErrIVPending if the lane's range is
// used up and the source's reserver has not yet reserved the counters for
// a new one, or with the source's failure (errors.Is ErrIVState,
// ErrIVExhausted or ErrIVClosed) if none will come.
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
		if err := l.take(n); err != nil {
			return 0, err
		}
	}
	c := l.next
	l.next += n
	l.issued += n
	return c, nil
}

// take replaces the current range, shorter than n, with a new Span from
// the source. If the source has none it fails (a stall) and keeps the
// current range.
func (l *IVLane) take(n uint64) error {
	start, end, err := l.src.take(l.span)
	if err != nil {
		l.stalls++
		return err
	}
	l.wasted += l.end - l.next
	l.next, l.end = start, end
	if end-start < n { // the last range of the counter space
		l.stalls++
		return ErrIVExhausted
	}
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

// Refill makes sure the source can give the lane a new range and reports
// a source that cannot: for a durable source, if less than a Span is
// reserved ahead, it reserves synchronously (it may wait for the source's
// mutex and does the write and fsync). It returns the source's failure if
// it has one (a sticky ErrIVState even though reserved counters may
// remain), or ErrIVClosed. Control path only: call it once when a core is
// built, to learn early that the source is broken; the data path never
// needs it (the reserver keeps counters reserved ahead). It takes nothing
// for the lane, so the lane's counters do not depend on it. For a volatile
// source it only reports a failure.
func (l *IVLane) Refill() error {
	s := l.src
	if s.closed.Load() {
		return ErrIVClosed
	}
	if s.volatile {
		return s.failure()
	}
	return s.reserveAhead(l.span)
}

// IVLaneStats counts a lane's activity.
type IVLaneStats struct {
	Issued uint64 // counters handed out
	// Stalls counts draws (Next, NextN) that failed because the lane's
	// range was too short and no new one could be taken: ErrIVPending (on
	// a durable source: the reserver had not yet reserved more, so it
	// woke too late or the disk is slow), or the source's failure.
	Stalls uint64
	Wasted uint64 // counters skipped at range ends by NextN
}

// Stats returns the lane's counters (its owner only).
func (l *IVLane) Stats() IVLaneStats {
	return IVLaneStats{Issued: l.issued, Stalls: l.stalls, Wasted: l.wasted}
}
