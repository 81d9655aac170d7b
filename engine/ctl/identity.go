package ctl

import (
	"bufio"
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/engine"
)

// The identity an engine stamps on a process's requests (the "PID" of the
// wire header and of K_d = AES_Kr(address ‖ PID ‖ op)) is a 32-bit number
// the engine allocates, not a PID: PIDs are reused, and processes in PID
// namespaces the engine cannot see all have PID 0 to it. A process is
// known by the inode of its pidfd on pidfs (SO_PEERPIDFD), unique within
// a boot; the table maps (boot id, inode) to an identity, so every
// connection of a process gets the same one, and never another process's.
//
// Identities are handed out in increasing order and never again. The
// state is two files, each replaced whole and durably (temporary file,
// fsync, rename, directory fsync), each by its own goroutine (and by open
// and close), never under the mutex that pin, release and lookups take:
//
//   - The mark (path + ".mark"): no identity at or above it was handed
//     out. Identities are reserved in blocks of identBlock, as the IV
//     source reserves counters (aesni.IVSource): an identity is used only
//     below a mark that is durable, and the reserver writes the mark one
//     block further once fewer than half a block are left reserved. A new
//     identity thus costs no disk write. One that finds its block not yet
//     durable (a burst that outran the reserver) waits for that mark's
//     write alone: never for a write of the table, and never holding the
//     mutex, so pins, releases and new identities within the durable block
//     go on meanwhile.
//   - The table (path): the processes' identities, so that a process that
//     outlives an engine restart keeps its identity (and the K_d it holds
//     for it). A writer rewrites it after the table changes, at most one
//     write in flight: changes made during a write go into the next. Close
//     writes it last. A process whose entry was not yet written when the
//     engine stopped gets a new identity when it comes back, which costs
//     it only new keys (as a forgotten one: entries of processes with no
//     connection are forgotten, oldest first, when the table is full).
//
// A restart starts at the durable mark (or above the table's next, if
// larger), skipping what was reserved and not used. A crash thus forfeits
// fewer than 1.5 blocks (the reserver writes a block ahead once half a
// block is left); Close writes the mark down to the first identity never
// handed out, so a clean stop forfeits none, and a start that hands out
// no identity reserves none. That is fine: the space of 2^32 - 2^22
// identities holds over 2.7 million crashes of an engine that handed out
// identities before each (one a minute for five years), on top of what
// the processes use; a tenant's own rate is bounded (Config.IdentityRate);
// and running out is never silent: rmad warns from 1/16 left, then refuses
// new processes (ErrIdentitiesExhausted).
//
// File formats (text; a torn or edited file fails its checksum and stops
// the engine rather than restart identities that may have been used):
//
//	onerma-identities 2
//	boot <boot id>
//	next <first identity not handed out when the table was written>
//	<pidfs inode> <identity>      one line per process, least recently used first
//	crc32c <hex of the CRC-32C of every byte before this line>
//
//	onerma-identity-mark 1
//	mark <no identity at or above it was handed out>
//	crc32c <hex of the CRC-32C of every byte before this line>
//
// A table of version 1 ("onerma-identities 1", the same lines) was the
// whole state: its next was durable before any identity below it was
// used. It is read as a table and its next taken as the mark; the first
// start writes the mark, then the table of version 2. An engine of the
// version before refuses a table of version 2, whose next is not a mark.
// A table of version 2 without its mark stops the engine: identities
// below the lost mark may have been handed out.
const (
	identMagic     = "onerma-identities 2"
	identMagicV1   = "onerma-identities 1"
	identMarkMagic = "onerma-identity-mark 1"
	// FirstIdentity is the first identity of a new state file: above
	// every PID (PID_MAX_LIMIT is 2^22), so no identity equals a PID an
	// engine of an earlier version stamped under the same address and
	// region keys.
	FirstIdentity = 1 << 22
	// identLimit is one past the last identity (the wire field is 32
	// bits, and its last value is the engine's own op source's).
	identLimit = engine.SelfTestPID
	// identBlock is how many identities one write of the mark reserves.
	// Half a block is what the reserver has to write the next one: some
	// 500 new processes, each a connect and a request, against one small
	// file and two fsyncs; and a crash forfeits fewer than 1.5 blocks of
	// the space (above).
	identBlock = 1024
)

// ErrIdentities: the identity state file cannot be used (corrupt, locked,
// or not durable); ErrIdentitiesExhausted: every 32-bit identity was
// handed out.
var (
	ErrIdentities          = errors.New("ctl: identity state")
	ErrIdentitiesExhausted = errors.New("ctl: every identity was handed out: rotate every region key on every engine that trusts this one's, then remove the identity state file")
)

// IdentityMarkPath is where the identity state at path (Config.IdentityPath)
// keeps its high-water mark.
func IdentityMarkPath(path string) string { return path + ".mark" }

// errIdentitiesClosed: an identity asked for after close (whose mark may
// be written down to next: nothing more may be handed out).
var errIdentitiesClosed = errors.New("the identity state is closed")

type identEntry struct {
	ino  uint64
	id   uint32
	refs int           // connections using it now, or waiting for it to be durable
	el   *list.Element // in identities.idle while refs == 0, else in inUse
	err  error         // why id could not be made durable (the entry is dropped)
}

// identPair is one line of the table.
type identPair struct {
	ino uint64
	id  uint32
}

// identConfig configures the identity state.
type identConfig struct {
	path  string // the table (the mark: IdentityMarkPath); "": volatile (tests), nothing persisted
	boot  string // the kernel's boot id (bootID)
	max   int    // entries kept (pinned ones beyond it are kept too)
	block uint64 // identities one write of the mark reserves (0: identBlock)
	// log reports background writes that failed (sampled: a client that
	// makes new processes makes writes).
	log zerolog.Logger
	// sync makes a written file, or a directory, durable (nil:
	// (*os.File).Sync). Tests block or fail it.
	sync func(*os.File) error
}

// identities is the engine's table of process identities. Safe for
// concurrent use (control-plane goroutines only).
type identities struct {
	cfg      identConfig
	markPath string
	lock     *os.File // held open with an exclusive flock for the engine's life

	// resMu serialises writes of the mark and is held across one, so a
	// new identity whose block is not yet durable waits here for that
	// write only. Taken before mu, never with mu held.
	resMu sync.Mutex

	mu      sync.Mutex // never held across I/O
	next    uint64     // first identity never handed out
	durable uint64     // the durable mark: identities below it may be used (volatile: identLimit)
	byIno   map[uint64]*identEntry
	idle    *list.List // entries with refs == 0, least recently used at the front
	inUse   *list.List // entries with refs > 0, first used at the front
	dirty   bool       // the table changed since the writer last took it
	closed  bool
	sync    func(*os.File) error // cfg.sync, replaced by tests under mu

	lines       []identPair   // the table's lines, reused by writeTable
	writeKick   chan struct{} // cap 1: the table changed
	reserveKick chan struct{} // cap 1: fewer than half a block reserved ahead
	stop        chan struct{}
	wg          sync.WaitGroup // the writer and the reserver
}

// openIdentities loads (or creates) the identity state at cfg.path and
// starts its writer and reserver; path "" makes a volatile table starting
// at FirstIdentity.
func openIdentities(cfg identConfig) (*identities, error) {
	if cfg.block == 0 {
		cfg.block = identBlock
	}
	if cfg.sync == nil {
		cfg.sync = (*os.File).Sync
	}
	s := &identities{cfg: cfg, markPath: IdentityMarkPath(cfg.path), next: FirstIdentity, sync: cfg.sync,
		byIno: make(map[uint64]*identEntry), idle: list.New(), inUse: list.New()}
	if cfg.path == "" {
		s.durable = identLimit
		return s, nil
	}
	lf, err := os.OpenFile(cfg.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentities, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %s is in use by another engine: %v", ErrIdentities, cfg.path, err)
	}
	s.lock = lf
	if err := s.load(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %v", ErrIdentities, err)
	}
	s.writeKick, s.reserveKick, s.stop = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	s.wg.Add(2)
	go s.writer()
	go s.reserver()
	return s, nil
}

// load reads the mark and the table. Entries of another boot are dropped
// (their inodes mean nothing now). A state without a mark (a new one, or
// a table of version 1) gets one, then a table of version 2, durably
// before any identity is used.
func (s *identities) load() error {
	mb, merr := os.ReadFile(s.markPath)
	tb, terr := os.ReadFile(s.cfg.path)
	switch {
	case merr != nil && !errors.Is(merr, os.ErrNotExist):
		return merr
	case terr != nil && !errors.Is(terr, os.ErrNotExist):
		return terr
	}
	hasMark, hasTable := merr == nil, terr == nil
	start := uint64(FirstIdentity)
	if hasMark {
		m, err := decodeMark(mb)
		if err != nil {
			return fmt.Errorf("%s: %v", s.markPath, err)
		}
		start = m
	}
	var t identTable
	if hasTable {
		var err error
		if t, err = decodeTable(tb); err != nil {
			return fmt.Errorf("%s: %v", s.cfg.path, err)
		}
		if t.version != 1 && !hasMark {
			return fmt.Errorf("%s is missing beside its table %s: identities below it may have been handed out; rotate every region key on every engine that trusts this one's, then remove %s", s.markPath, s.cfg.path, s.cfg.path)
		}
		// A table may list identities whose block was not yet durable
		// when it was written: start above them too.
		start = max(start, t.next)
		if t.boot == s.cfg.boot {
			for _, p := range t.entries {
				e := &identEntry{ino: p.ino, id: p.id}
				e.el = s.idle.PushBack(e)
				s.byIno[p.ino] = e
			}
		}
	}
	s.next, s.durable = start, start
	for len(s.byIno) > s.cfg.max { // a smaller table than the file's
		s.forget()
		s.dirty = true
	}
	if !hasMark {
		if err := writeDurably(s.markPath, encodeMark(start), s.sync); err != nil {
			return fmt.Errorf("%s: %v", s.markPath, err)
		}
	}
	if !hasTable || t.version == 1 {
		if err := writeDurably(s.cfg.path, encodeTable(s.cfg.boot, s.next, s.entries(nil)), s.sync); err != nil {
			return fmt.Errorf("%s: %v", s.cfg.path, err)
		}
		s.dirty = false
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// signed checks the checksum line ending b and returns what it covers.
func signed(b []byte) ([]byte, error) {
	i := bytes.LastIndex(b, []byte("crc32c "))
	if i < 0 || (i > 0 && b[i-1] != '\n') {
		return nil, errors.New("corrupt: no checksum line")
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(b[i+len("crc32c "):])), 16, 32)
	if err != nil || uint32(want) != crc32.Checksum(b[:i], castagnoli) {
		return nil, errors.New("corrupt: checksum mismatch")
	}
	return b[:i], nil
}

func sign(b *bytes.Buffer) []byte {
	fmt.Fprintf(b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// parseBound parses v, found (ok) after a line's prefix, as a bound of
// identities: FirstIdentity..identLimit.
func parseBound(v string, ok bool) (uint64, bool) {
	n, err := strconv.ParseUint(v, 10, 64)
	return n, ok && err == nil && n >= FirstIdentity && n <= identLimit
}

// identTable is a decoded table.
type identTable struct {
	version int
	boot    string
	next    uint64
	entries []identPair // least recently used first
}

// decodeTable parses a table of version 1 or 2.
func decodeTable(b []byte) (identTable, error) {
	var t identTable
	body, err := signed(b)
	if err != nil {
		return t, err
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return sc.Text(), true
	}
	switch l, _ := line(); l {
	case identMagic:
		t.version = 2
	case identMagicV1:
		t.version = 1
	default:
		return t, fmt.Errorf("corrupt: first line %q, want %q", l, identMagic)
	}
	l, _ := line()
	boot, ok := strings.CutPrefix(l, "boot ")
	if !ok {
		return t, fmt.Errorf("corrupt: %q, want the boot line", l)
	}
	t.boot = boot
	l, _ = line()
	v, ok := strings.CutPrefix(l, "next ")
	if t.next, ok = parseBound(v, ok); !ok {
		return t, fmt.Errorf("corrupt: %q, want next %d..%d", l, FirstIdentity, uint64(identLimit))
	}
	ids, inos := make(map[uint32]bool), make(map[uint64]bool)
	for n := 4; ; n++ {
		l, ok := line()
		if !ok {
			break
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			return t, fmt.Errorf("corrupt: line %d %q", n, l)
		}
		ino, err1 := strconv.ParseUint(f[0], 10, 64)
		id, err2 := strconv.ParseUint(f[1], 10, 32)
		if err1 != nil || err2 != nil || ino == 0 || id < FirstIdentity || id >= t.next || ids[uint32(id)] || inos[ino] {
			return t, fmt.Errorf("corrupt: line %d %q", n, l)
		}
		ids[uint32(id)], inos[ino] = true, true
		t.entries = append(t.entries, identPair{ino: ino, id: uint32(id)})
	}
	return t, nil
}

// encodeTable renders a table of version 2.
func encodeTable(boot string, next uint64, entries []identPair) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nboot %s\nnext %d\n", identMagic, boot, next)
	for _, p := range entries {
		fmt.Fprintf(&b, "%d %d\n", p.ino, p.id)
	}
	return sign(&b)
}

// decodeMark parses a mark.
func decodeMark(b []byte) (uint64, error) {
	body, err := signed(b)
	if err != nil {
		return 0, err
	}
	magic, rest, _ := strings.Cut(string(body), "\n")
	if magic != identMarkMagic {
		return 0, fmt.Errorf("corrupt: first line %q, want %q", magic, identMarkMagic)
	}
	v, ok := strings.CutPrefix(rest, "mark ")
	v, ok2 := strings.CutSuffix(v, "\n")
	m, ok := parseBound(v, ok && ok2)
	if !ok {
		return 0, fmt.Errorf("corrupt: %q, want mark %d..%d", rest, FirstIdentity, uint64(identLimit))
	}
	return m, nil
}

func encodeMark(mark uint64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nmark %d\n", identMarkMagic, mark)
	return sign(&b)
}

// writeDurably replaces the file at path with b: a temporary file beside
// it, fsynced, renamed over it, and the directory fsynced. After a
// failure path holds its old content or b, whole.
func writeDurably(path string, b []byte, sync func(*os.File) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path), sync)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func syncDir(dir string, sync func(*os.File) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = sync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// entries appends the table's lines to buf: idle entries least recently
// used first, then the ones in use (the most recent). s.mu is held: two
// list walks into a buffer the writer reuses, no map iteration and no
// allocation, since pins and releases wait meanwhile.
func (s *identities) entries(buf []identPair) []identPair {
	for _, l := range [2]*list.List{s.idle, s.inUse} {
		for el := l.Front(); el != nil; el = el.Next() {
			e := el.Value.(*identEntry)
			buf = append(buf, identPair{ino: e.ino, id: e.id})
		}
	}
	return buf
}

// forget drops the least recently used idle entry (false: none).
func (s *identities) forget() bool {
	el := s.idle.Front()
	if el == nil {
		return false
	}
	e := s.idle.Remove(el).(*identEntry)
	delete(s.byIno, e.ino)
	return true
}

// hold adds a connection's hold on e; s.mu is held.
func (s *identities) hold(e *identEntry) {
	if e.refs == 0 {
		s.idle.Remove(e.el)
		e.el = s.inUse.PushBack(e)
	}
	e.refs++
}

// changed marks the table for the writer; s.mu is held.
func (s *identities) changed() {
	s.dirty = true
	if s.writeKick != nil {
		select {
		case s.writeKick <- struct{}{}:
		default: // a wake-up is pending: that write takes this change too
		}
	}
}

// pin returns the identity of the process with pidfs inode ino and holds
// it for one more connection, if the table knows the process. It waits
// for no disk write, but one: if another connection of the same process
// is waiting for its new identity's block to be durable, pin waits for
// that too (the identity is not used before); if that fails, the process
// is not known.
func (s *identities) pin(ino uint64) (uint32, bool) {
	s.mu.Lock()
	e := s.byIno[ino]
	if e == nil {
		s.mu.Unlock()
		return 0, false
	}
	s.hold(e)
	durable := uint64(e.id) < s.durable
	s.mu.Unlock()
	if durable || s.await(e) == nil {
		return e.id, true
	}
	return 0, false
}

// acquire is pin, allocating a new identity for a process the table does
// not know. The new identity is used only once a mark above it is durable:
// at once within the reserved block, else after the mark's write.
func (s *identities) acquire(ino uint64) (uint32, error) {
	if id, ok := s.pin(ino); ok {
		return id, nil
	}
	s.mu.Lock()
	e := s.byIno[ino]
	switch {
	case e != nil: // another connection of it won the race
		s.hold(e)
	case s.closed:
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %v", ErrIdentities, errIdentitiesClosed)
	case s.next >= identLimit:
		s.mu.Unlock()
		return 0, ErrIdentitiesExhausted
	default:
		e = &identEntry{ino: ino, id: uint32(s.next), refs: 1}
		e.el = s.inUse.PushBack(e)
		s.next++ // never handed out again, even if it is never made durable
		s.byIno[ino] = e
		for len(s.byIno) > s.cfg.max && s.forget() {
		}
		s.changed()
		if s.durable < identLimit && s.next+s.cfg.block/2 > s.durable {
			select {
			case s.reserveKick <- struct{}{}:
			default:
			}
		}
	}
	durable := uint64(e.id) < s.durable
	s.mu.Unlock()
	if !durable {
		if err := s.await(e); err != nil {
			return 0, err
		}
	}
	return e.id, nil
}

// await makes e's identity durable (reserve) and reports whether it is.
// If it is not, e is dropped: every connection waiting for it fails, and
// its identity is never used.
func (s *identities) await(e *identEntry) error {
	rerr := s.reserve(uint64(e.id) + 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e.err != nil: // dropped by another connection of the process
		return e.err
	case uint64(e.id) < s.durable: // whoever wrote the mark
		return nil
	}
	if rerr == nil {
		panic("ctl: a reservation returned below the identity it was for")
	}
	e.err = fmt.Errorf("%w: %s not durable: %v", ErrIdentities, s.markPath, rerr)
	delete(s.byIno, e.ino)
	s.inUse.Remove(e.el) // refs > 0: not idle
	s.changed()
	return e.err
}

// reserve makes the mark durable at need or above: if it is not, it
// writes the mark whole blocks further, past every identity handed out
// (the waiting ones too). It holds resMu across the write, and takes mu
// only to read and publish.
func (s *identities) reserve(need uint64) error {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	s.mu.Lock()
	durable, next, closed, sync := s.durable, s.next, s.closed, s.sync
	s.mu.Unlock()
	switch {
	case durable >= need:
		return nil
	case closed:
		return errIdentitiesClosed
	}
	blocks := (max(need, next) - durable + s.cfg.block - 1) / s.cfg.block
	mark := min(uint64(identLimit), durable+blocks*s.cfg.block)
	if err := writeDurably(s.markPath, encodeMark(mark), sync); err != nil {
		return err
	}
	s.mu.Lock()
	s.durable = mark
	s.mu.Unlock()
	return nil
}

// reserver keeps half a block reserved ahead of next, woken by acquire.
func (s *identities) reserver() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.reserveKick:
		}
		s.mu.Lock()
		need := min(uint64(identLimit), s.next+s.cfg.block/2)
		s.mu.Unlock()
		if err := s.reserve(need); err != nil && !errors.Is(err, errIdentitiesClosed) {
			s.cfg.log.Warn().Err(err).Str("path", s.markPath).
				Msg("identities not reserved ahead: a new process waits for its own reservation, and fails if that fails too")
		}
	}
}

// writer writes the table each time it changed, one write at a time.
func (s *identities) writer() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.writeKick:
		}
		if err := s.writeTable(); err != nil {
			s.cfg.log.Warn().Err(err).Str("path", s.cfg.path).
				Msg("identity table not written (retried at its next change): a process that outlives an engine restart before then gets a new identity")
		}
	}
}

// writeTable writes the table if it changed since the last write. Only
// the writer calls it, and close once the writer is gone: one write at a
// time.
func (s *identities) writeTable() error {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	s.dirty = false
	s.lines = s.entries(s.lines[:0])
	next, sync := s.next, s.sync
	s.mu.Unlock()
	err := writeDurably(s.cfg.path, encodeTable(s.cfg.boot, next, s.lines), sync)
	if err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
	}
	return err
}

// release ends one connection's hold on the identity of ino.
func (s *identities) release(ino uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byIno[ino]
	if e == nil || e.refs == 0 {
		return
	}
	if e.refs--; e.refs == 0 {
		s.inUse.Remove(e.el)
		e.el = s.idle.PushBack(e)
	}
}

// usage reports the identities handed out so far (counted from
// FirstIdentity) and the entries in the table.
func (s *identities) usage() (handedOut uint64, entries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next - FirstIdentity, len(s.byIno)
}

// remaining is how many identities are left to hand out.
func (s *identities) remaining() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return identLimit - s.next
}

// close stops the writer and the reserver, writes the table, writes the
// mark down to the first identity never handed out (what was reserved
// beyond it is not lost), and releases the state file's lock. No identity
// is handed out after it.
func (s *identities) close() error {
	s.resMu.Lock() // a reservation in flight ends first
	s.mu.Lock()
	done := s.closed
	s.closed = true
	s.mu.Unlock()
	s.resMu.Unlock()
	if done || s.cfg.path == "" {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	err := s.writeTable()
	if err != nil {
		err = fmt.Errorf("%w: %s: %v", ErrIdentities, s.cfg.path, err)
	}
	s.mu.Lock()
	if s.idle.Len()+s.inUse.Len() != len(s.byIno) {
		panic(fmt.Sprintf("ctl: identity table of %d entries, %d idle and %d in use", len(s.byIno), s.idle.Len(), s.inUse.Len()))
	}
	next, durable, sync := s.next, s.durable, s.sync
	s.mu.Unlock()
	if durable > next {
		if merr := writeDurably(s.markPath, encodeMark(next), sync); merr != nil {
			err = errors.Join(err, fmt.Errorf("%w: %s: %v", ErrIdentities, s.markPath, merr))
		}
	}
	return errors.Join(err, s.lock.Close())
}
