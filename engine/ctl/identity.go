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
// Identities are handed out in increasing order and never again: the
// state file records the next one, and a new identity is used only after
// the file saying so is durable (temporary file, fsync, rename, directory
// fsync). The table itself is in the file too, so a process that outlives
// an engine restart keeps its identity (and the K_d it holds for it).
// Entries of processes with no connection are forgotten, oldest first,
// when the table is full: such a process gets a new identity if it comes
// back, which costs it only new keys.
//
// File format (text; a torn or edited file fails its checksum and stops
// the engine rather than restart identities that may have been used):
//
//	onerma-identities 1
//	boot <boot id>
//	next <first identity never handed out>
//	<pidfs inode> <identity>      one line per process, least recently used first
//	crc32c <hex of the CRC-32C of every byte before this line>
const (
	identMagic = "onerma-identities 1"
	// FirstIdentity is the first identity of a new state file: above
	// every PID (PID_MAX_LIMIT is 2^22), so no identity equals a PID an
	// engine of an earlier version stamped under the same address and
	// region keys.
	FirstIdentity = 1 << 22
	// identLimit is one past the last identity (the wire field is 32
	// bits, and its last value is the engine's own op source's).
	identLimit = engine.SelfTestPID
)

// ErrIdentities: the identity state file cannot be used (corrupt, locked,
// or not durable); ErrIdentitiesExhausted: every 32-bit identity was
// handed out.
var (
	ErrIdentities          = errors.New("ctl: identity state")
	ErrIdentitiesExhausted = errors.New("ctl: every identity was handed out: rotate every region key on every engine that trusts this one's, then remove the identity state file")
)

type identEntry struct {
	ino  uint64
	id   uint32
	refs int           // connections using it now
	idle *list.Element // in identities.idle while refs == 0
}

// identities is the engine's table of process identities. Safe for
// concurrent use (control-plane goroutines only).
type identities struct {
	path string   // "" : volatile (tests), nothing persisted
	lock *os.File // held open with an exclusive flock for the engine's life
	boot string
	max  int // entries kept (pinned ones beyond it are kept too)

	mu    sync.Mutex
	next  uint64 // first identity never handed out: durable before any below it is used
	byIno map[uint64]*identEntry
	idle  *list.List // entries with refs == 0, least recently used at the front
}

// openIdentities loads (or creates) the identity state at path, for the
// boot boot; path "" makes a volatile table starting at FirstIdentity.
func openIdentities(path, boot string, max int) (*identities, error) {
	s := &identities{path: path, boot: boot, max: max, next: FirstIdentity,
		byIno: make(map[uint64]*identEntry), idle: list.New()}
	if path == "" {
		return s, nil
	}
	lf, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentities, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %s is in use by another engine: %v", ErrIdentities, path, err)
	}
	s.lock = lf
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = s.persist() // durable before any identity is used
	case err == nil:
		err = s.load(b)
	}
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrIdentities, path, err)
	}
	return s, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// load parses a state file. Entries of another boot are dropped (their
// inodes mean nothing now); next is kept whatever the boot.
func (s *identities) load(b []byte) error {
	i := bytes.LastIndex(b, []byte("crc32c "))
	if i < 0 || (i > 0 && b[i-1] != '\n') {
		return errors.New("corrupt: no checksum line")
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(b[i+len("crc32c "):])), 16, 32)
	if err != nil || uint32(want) != crc32.Checksum(b[:i], castagnoli) {
		return errors.New("corrupt: checksum mismatch")
	}
	sc := bufio.NewScanner(bytes.NewReader(b[:i]))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return sc.Text(), true
	}
	if l, _ := line(); l != identMagic {
		return fmt.Errorf("corrupt: first line %q, want %q", l, identMagic)
	}
	l, _ := line()
	boot, ok := strings.CutPrefix(l, "boot ")
	if !ok {
		return fmt.Errorf("corrupt: %q, want the boot line", l)
	}
	l, _ = line()
	v, ok := strings.CutPrefix(l, "next ")
	next, err := strconv.ParseUint(v, 10, 64)
	if !ok || err != nil || next < FirstIdentity || next > identLimit {
		return fmt.Errorf("corrupt: %q, want next %d..%d", l, FirstIdentity, uint64(identLimit))
	}
	s.next = next
	ids := make(map[uint32]bool)
	for n := 4; ; n++ {
		l, ok := line()
		if !ok {
			break
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			return fmt.Errorf("corrupt: line %d %q", n, l)
		}
		ino, err1 := strconv.ParseUint(f[0], 10, 64)
		id, err2 := strconv.ParseUint(f[1], 10, 32)
		if err1 != nil || err2 != nil || ino == 0 || id < FirstIdentity || id >= next || ids[uint32(id)] || s.byIno[ino] != nil {
			return fmt.Errorf("corrupt: line %d %q", n, l)
		}
		ids[uint32(id)] = true
		if boot != s.boot {
			continue
		}
		e := &identEntry{ino: ino, id: uint32(id)}
		e.idle = s.idle.PushBack(e)
		s.byIno[ino] = e
	}
	for len(s.byIno) > s.max { // a smaller table than the file's
		s.forget()
	}
	return nil
}

// encode renders the table, least recently used first.
func (s *identities) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nboot %s\nnext %d\n", identMagic, s.boot, s.next)
	for el := s.idle.Front(); el != nil; el = el.Next() {
		e := el.Value.(*identEntry)
		fmt.Fprintf(&b, "%d %d\n", e.ino, e.id)
	}
	for _, e := range s.byIno { // pinned entries: in use, most recent
		if e.refs > 0 {
			fmt.Fprintf(&b, "%d %d\n", e.ino, e.id)
		}
	}
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// persist replaces the state file with the table, durably.
func (s *identities) persist() error {
	if s.path == "" {
		return nil
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(s.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
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

// pin returns the identity of the process with pidfs inode ino and holds
// it for one more connection, if the table knows the process.
func (s *identities) pin(ino uint64) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byIno[ino]
	if e == nil {
		return 0, false
	}
	if e.refs == 0 {
		s.idle.Remove(e.idle)
		e.idle = nil
	}
	e.refs++
	return e.id, true
}

// acquire is pin, allocating a new identity (durably) for a process the
// table does not know.
func (s *identities) acquire(ino uint64) (uint32, error) {
	if id, ok := s.pin(ino); ok {
		return id, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byIno[ino]; e != nil { // another connection of it won the race
		if e.refs == 0 {
			s.idle.Remove(e.idle)
			e.idle = nil
		}
		e.refs++
		return e.id, nil
	}
	if s.next >= identLimit {
		return 0, ErrIdentitiesExhausted
	}
	id := uint32(s.next)
	s.next++ // never handed out again, even if the write below fails
	e := &identEntry{ino: ino, id: id, refs: 1}
	s.byIno[ino] = e
	for len(s.byIno) > s.max && s.forget() {
	}
	if err := s.persist(); err != nil {
		// The file holds the previous next or this one: either way id is
		// not used, and a later write records a next beyond it.
		delete(s.byIno, ino)
		return 0, fmt.Errorf("%w: %s not durable: %v", ErrIdentities, s.path, err)
	}
	return id, nil
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
		e.idle = s.idle.PushBack(e)
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

// close releases the state file's lock.
func (s *identities) close() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}
