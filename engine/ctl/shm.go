package ctl

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shm is one engine-created shared memory object: a memfd and the
// engine's own mapping of it. It lives in two stages. Created (newShm):
// sized and sealed against growing and shrinking, mapped by the engine
// without touching a page, and handed to the application, which maps it
// and faults it in. Attached (attach): sealed against writes through new
// mappings, which also forbids punching holes (fallocate PUNCH_HOLE,
// madvise MADV_REMOVE) for everyone, then populated and locked in the
// engine's mapping. Only then may the engine core use it: from there on
// its pages stay where they are, so the poll loop takes no page fault on
// it (what the kernel may still do is in SECURITY.md).
type shm struct {
	fd       int    // -1 once closed (after attach)
	mem      []byte // the engine's mapping, MapSize bytes
	hugetlb  bool
	attached bool
	locked   bool // mlock succeeded
}

// seals the engine puts on every shared memfd at creation: its size is
// fixed for good. F_SEAL_WRITE is deliberately absent: both sides write.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// attachSeals the engine adds once the application has mapped the memory:
// no new writable mapping, and so no hole punching, by anyone; and no more
// seals (F_SEAL_SEAL), so nobody can add F_SEAL_WRITE under the engine.
const attachSeals = unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL

// newShm creates, sizes, seals and maps (without populating) a memfd of at
// least size bytes: with hugePage > 0 an MFD_HUGETLB one (size rounded up
// to hugePage), whose mapping by the engine reserves its huge pages, so
// the application's faults cannot fail later (and it fails when they
// cannot be reserved); else a plain one (rounded up to the base page).
func newShm(name string, size uint64, hugePage uint64) (*shm, error) {
	if hugePage > 0 {
		m, err := makeShm(name, roundUp(size, hugePage), unix.MFD_HUGETLB)
		if err == nil {
			m.hugetlb = true
		}
		return m, err
	}
	return makeShm(name, roundUp(size, uint64(os.Getpagesize())), 0)
}

func makeShm(name string, size uint64, flags int) (*shm, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|flags)
	if err != nil {
		return nil, fmt.Errorf("memfd_create(%q): %w", name, err)
	}
	fail := func(what string, err error) (*shm, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s of %d-byte memfd %q: %w", what, size, name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("sealing", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return &shm{fd: fd, mem: mem}, nil
}

// dupFD returns a copy of the memfd to hand the application (reply closes
// it once sent); the engine keeps its own until attach.
func (m *shm) dupFD() (int, error) {
	return unix.FcntlInt(uintptr(m.fd), unix.F_DUPFD_CLOEXEC, 0)
}

// errNotResident: the application registered memory it had not faulted in.
var errNotResident = errors.New("not resident")

// attach seals the memory against hole punching and makes every page of
// the engine's mapping present and, if the engine may, locked. With
// requireResident, memory on ordinary pages must already be in memory,
// faulted in by the application (so its memory cgroup, not the engine's,
// is charged for it): the first page that is not fails with
// errNotResident. Huge pages were reserved at creation; those the
// application did not touch are allocated here.
func (m *shm) attach(requireResident bool) error {
	if _, err := unix.FcntlInt(uintptr(m.fd), unix.F_ADD_SEALS, attachSeals); err != nil {
		return fmt.Errorf("sealing: %w", err)
	}
	m.closeFD()
	if requireResident && !m.hugetlb {
		if off, ok := resident(m.mem); !ok {
			return fmt.Errorf("%w: page at offset %d", errNotResident, off)
		}
	}
	if err := unix.Madvise(m.mem, unix.MADV_POPULATE_WRITE); err != nil {
		return fmt.Errorf("populating: %w", err)
	}
	m.locked = unix.Mlock(m.mem) == nil
	m.attached = true
	return nil
}

// resident reports whether every page of mem is in memory (mincore; for a
// page the engine has not mapped yet it asks the memfd's page cache), and
// else the offset of the first that is not.
func resident(mem []byte) (uint64, bool) {
	page := os.Getpagesize()
	var vec [4096]byte
	for off := 0; off < len(mem); off += len(vec) * page {
		end := min(len(mem), off+len(vec)*page)
		n := (end - off + page - 1) / page
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[off])), uintptr(end-off), uintptr(unsafe.Pointer(&vec[0])))
		if e != 0 {
			return uint64(off), false
		}
		for i := range n {
			if vec[i]&1 == 0 {
				return uint64(off + i*page), false
			}
		}
	}
	return 0, true
}

// closeFD drops the engine's descriptor; the mapping stays.
func (m *shm) closeFD() {
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
}

// release unmaps and closes. Call only once the core can no longer touch
// the memory.
func (m *shm) release() error {
	m.closeFD()
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	return err
}

func roundUp(v, to uint64) uint64 { return (v + to - 1) / to * to }

// hugePageSize reads the default huge page size from /proc/meminfo
// (0: unknown, so huge pages are not tried).
func hugePageSize() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Hugepagesize:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
