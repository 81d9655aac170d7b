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
	"syscall"
)

// Defaults of IVConfig.
const (
	// DefaultIVBlock is how many counters one durable write (one fsync)
	// reserves. A 4 KB READ served and initiated on one core uses 65
	// counters, so at 500 k READs/s a core uses ~2^25 counters a second:
	// with 2^32 per block the fsync (milliseconds on a VM disk, taken on
	// the core that runs dry) comes every couple of minutes, and a crash
	// forfeits at most 2^32 of the 2^64 counters.
	DefaultIVBlock = 1 << 32
	// DefaultIVSpan is how many counters a lane takes from the source at
	// once (one mutex acquisition, every ~30 ms at that rate).
	DefaultIVSpan = 1 << 20
)

// IV errors. The hot path returns only these sentinels; the control path
// (OpenIVSource, Refill) wraps them with %w and context.
var (
	// ErrIVExhausted: the 64-bit counter space is used up. Counters never
	// wrap: rotate every key (and remove the state file) to go on.
	ErrIVExhausted = errors.New("aesni: IV counter exhausted")
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
	// (0: default); at most Block.
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

// stateFile is what the source needs of its file; tests model crashes with
// their own.
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
// each core draws through its own IVLane. Only lanes touch the source, at
// most once per Span counters, under its mutex.
type IVSource struct {
	mu    sync.Mutex
	f     stateFile
	block uint64
	span  uint64
	next  uint64 // the next counter not yet given to a lane
	hw    uint64 // persisted high-water: [next, hw) is reserved and free
	slot  int64  // slot that holds hw
	err   error  // sticky ErrIVState, or ErrIVClosed
	rec   [recordLen]byte
	// counters, under mu
	reservations uint64
}

// OpenIVSource opens (creating it if missing) and locks the state file and
// returns a source that starts after every counter a previous process
// could have used. A created file is made durable (temporary file, fsync,
// rename, directory fsync) before it is used.
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
// where this process starts.
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
	s.next = max(s.hw, 1)
	s.hw = s.next
	return s, nil
}

// NewVolatileIVSource returns a source without a state file, starting at
// counter 1: for tests and the simulator only. Its counters repeat after a
// restart, so it must never seal with a key that outlives the process.
func NewVolatileIVSource(cfg IVConfig) *IVSource {
	if cfg.Path == "" {
		cfg.Path = "(volatile)"
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := cfg.withDefaults()
	s, err := openSource(newVolatileFile(), c)
	if err != nil {
		panic(err)
	}
	return s
}

// reserve makes [s.next, s.hw) cover at least want counters: it persists a
// new high-water mark one Block further and fsyncs it before returning.
func (s *IVSource) reserve(want uint64) error {
	for s.hw-s.next < want {
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
			s.err = fmt.Errorf("%w: write: %w", ErrIVState, err)
			return s.err
		}
		if err := s.f.Sync(); err != nil {
			s.err = fmt.Errorf("%w: fsync: %w", ErrIVState, err)
			return s.err
		}
		s.hw, s.slot = hw, slot
		s.reservations++
	}
	return nil
}

// take hands out the range [start, end) of up to n counters (fewer only at
// the very end of the counter space).
func (s *IVSource) take(n uint64) (start, end uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, 0, s.err
	}
	// Counter MaxUint64 is never handed out: the mark must exceed every
	// counter used. Near the end, the last range is shorter than n.
	n = min(n, math.MaxUint64-s.next)
	if n == 0 {
		return 0, 0, ErrIVExhausted
	}
	if err := s.reserve(n); err != nil {
		return 0, 0, err
	}
	start = s.next
	s.next += n
	return start, s.next, nil
}

// Close releases the state file (and its lock). It writes nothing: the
// persisted mark already covers every counter a lane holds, so lanes may
// even go on using the ranges they took, and the next process starts after
// them.
func (s *IVSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == ErrIVClosed {
		return nil
	}
	s.err = ErrIVClosed
	return s.f.Close()
}

// IVSourceStats is a snapshot of a source.
type IVSourceStats struct {
	Next         uint64 // next counter a lane would get
	HighWater    uint64 // persisted mark
	Reservations uint64 // durable writes (fsyncs) by this process
}

// Stats returns a snapshot (control path).
func (s *IVSource) Stats() IVSourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return IVSourceStats{Next: s.next, HighWater: s.hw, Reservations: s.reservations}
}

// NewLane returns a lane for one engine core. It holds no counters until
// its first Refill or Next.
func (s *IVSource) NewLane() *IVLane {
	return &IVLane{src: s}
}

// IVLane is one engine core's view of the IVSource: a current range and a
// spare one, so that Next is an increment with no lock and no I/O. The
// core calls Refill on its slow tick to keep a spare; if both ranges run
// dry, Next takes a new range synchronously (lock, maybe an fsync) and
// counts a stall. Not safe for concurrent use.
type IVLane struct {
	src                 *IVSource
	next, end           uint64 // current range
	spareNext, spareEnd uint64 // spare range
	// counters
	issued, stalls, wasted uint64
}

// Next returns a counter never returned before by any lane of any process
// on this state file.
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
// current range are skipped.
func (l *IVLane) NextN(n uint64) (uint64, error) {
	if n == 0 || n > l.src.span {
		panic("aesni: NextN count out of range")
	}
	if l.end-l.next < n {
		l.wasted += l.end - l.next
		l.next, l.end = l.spareNext, l.spareEnd
		l.spareNext, l.spareEnd = 0, 0
		if l.end-l.next < n {
			l.wasted += l.end - l.next
			l.stalls++
			start, end, err := l.src.take(l.src.span)
			if err != nil {
				l.next, l.end = 0, 0
				return 0, err
			}
			l.next, l.end = start, end
			if l.end-l.next < n { // end of the counter space
				return 0, ErrIVExhausted
			}
		}
	}
	c := l.next
	l.next += n
	l.issued += n
	return c, nil
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

// Refill takes a spare range if the lane has none (slow path: may write
// and fsync the state file). Call it on every slow tick of the core.
func (l *IVLane) Refill() error {
	if l.spareNext < l.spareEnd {
		return nil
	}
	start, end, err := l.src.take(l.src.span)
	if err != nil {
		return err
	}
	l.spareNext, l.spareEnd = start, end
	return nil
}

// IVLaneStats counts a lane's activity.
type IVLaneStats struct {
	Issued uint64 // counters handed out
	Stalls uint64 // synchronous takes in Next/NextN (Refill was not called often enough)
	Wasted uint64 // counters skipped at range ends by NextN
}

// Stats returns the lane's counters.
func (l *IVLane) Stats() IVLaneStats {
	return IVLaneStats{Issued: l.issued, Stalls: l.stalls, Wasted: l.wasted}
}

// volatileFile is an in-memory stateFile (NewVolatileIVSource).
type volatileFile struct{ b [stateLen]byte }

func newVolatileFile() *volatileFile {
	f := &volatileFile{}
	encodeRecord(f.b[0:], 0)
	encodeRecord(f.b[slotStride:], 0)
	return f
}

func (f *volatileFile) ReadAt(p []byte, off int64) (int, error) {
	return copy(p, f.b[off:]), nil
}

func (f *volatileFile) WriteAt(p []byte, off int64) (int, error) {
	return copy(f.b[off:], p), nil
}

func (f *volatileFile) Sync() error  { return nil }
func (f *volatileFile) Close() error { return nil }
