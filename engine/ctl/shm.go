package ctl

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// shm is one engine-created shared memory object: a sealed memfd and the
// engine's own mapping of it.
type shm struct {
	fd      int    // -1 once closed (after it was passed to the application)
	mem     []byte // the engine's mapping, MapSize bytes
	hugetlb bool
}

// seals the engine puts on every shared memfd: its size is fixed for good.
// F_SEAL_WRITE is deliberately absent: both sides write.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newShm creates, sizes, seals and maps a memfd of at least size bytes.
// With hugePage > 0 it first tries MFD_HUGETLB (size rounded up to
// hugePage), falling back to a plain memfd (rounded up to the base page)
// when the kernel has no huge pages to give. The mapping is populated so
// the engine core never takes a page fault on it.
func newShm(name string, size uint64, hugePage uint64) (*shm, error) {
	if hugePage > 0 {
		if m, err := makeShm(name, roundUp(size, hugePage), unix.MFD_HUGETLB); err == nil {
			m.hugetlb = true
			return m, nil
		}
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
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap", err)
	}
	return &shm{fd: fd, mem: mem}, nil
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
