package ctl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const testBoot = "1427f909-72b9-44d0-a888-a89428631cd1"

func mustAcquire(t *testing.T, s *identities, ino uint64) uint32 {
	t.Helper()
	id, err := s.acquire(ino)
	if err != nil {
		t.Fatalf("acquire(%d): %v", ino, err)
	}
	return id
}

// Identities are per process (inode), start above every PID, are never
// handed out twice, and survive a restart with the table: a process that
// outlives the engine keeps its identity; one of another boot does not.
func TestIdentitiesPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "iv.state.ids")
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8})
	if err != nil {
		t.Fatal(err)
	}
	a, b := mustAcquire(t, s, 100), mustAcquire(t, s, 200)
	if a != FirstIdentity || b != FirstIdentity+1 {
		t.Fatalf("identities %d, %d, want %d, %d", a, b, FirstIdentity, FirstIdentity+1)
	}
	if again := mustAcquire(t, s, 100); again != a {
		t.Fatalf("a second connection of process 100 got %d, its first %d", again, a)
	}
	if _, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8}); err == nil || !strings.Contains(err.Error(), "in use by another engine") {
		t.Fatalf("second open of a locked state: %v", err)
	}
	s.close()

	s, err = openIdentities(identConfig{path: path, boot: testBoot, max: 8})
	if err != nil {
		t.Fatal(err)
	}
	if id := mustAcquire(t, s, 200); id != b {
		t.Fatalf("process 200 after a restart: %d, want %d", id, b)
	}
	if id := mustAcquire(t, s, 300); id != FirstIdentity+2 {
		t.Fatalf("a new process after a restart: %d, want %d", id, FirstIdentity+2)
	}
	s.close()

	// Another boot: the same inode is another process now.
	s, err = openIdentities(identConfig{path: path, boot: "00000000-72b9-44d0-a888-a89428631cd1", max: 8})
	if err != nil {
		t.Fatal(err)
	}
	if id := mustAcquire(t, s, 100); id != FirstIdentity+3 {
		t.Fatalf("inode 100 of another boot: %d, want the new %d", id, FirstIdentity+3)
	}
	s.close()
}

// A full table forgets the least recently used process with no
// connection; one in use is never forgotten, and a forgotten process gets
// a new identity, never an old one.
func TestIdentitiesTableBound(t *testing.T) {
	s, err := openIdentities(identConfig{path: "", boot: testBoot, max: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := mustAcquire(t, s, 1) // held
	b := mustAcquire(t, s, 2)
	s.release(2)
	c := mustAcquire(t, s, 3) // forgets 2, not 1
	s.release(3)
	if id, ok := s.pin(1); !ok || id != a {
		t.Fatalf("process 1 (in use) forgotten: %d %v", id, ok)
	}
	if _, ok := s.pin(2); ok {
		t.Fatal("process 2 (idle, oldest) not forgotten")
	}
	if id := mustAcquire(t, s, 2); id == b || id <= c {
		t.Fatalf("process 2 came back as %d (had %d, last handed out %d)", id, b, c)
	}
}

// An identity whose allocation could not be made durable is not used,
// and not handed out later either. (Blocks of one identity: each new one
// needs a write of the mark.)
func TestIdentitiesNotDurable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	os.Mkdir(dir, 0o700)
	path := filepath.Join(dir, "ids")
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8, block: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	a := mustAcquire(t, s, 1)
	for os.RemoveAll(dir) != nil { // the table's writer may be creating a file in it
	}
	if _, err := s.acquire(2); !errors.Is(err, ErrIdentities) {
		t.Fatalf("acquire without a directory: %v", err)
	}
	os.Mkdir(dir, 0o700)
	if id := mustAcquire(t, s, 3); id != a+2 {
		t.Fatalf("after a failed write: %d, want %d (the failed one skipped)", id, a+2)
	}
}

// A damaged state file stops the engine rather than restart identities.
func TestIdentitiesCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8})
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, 1)
	s.close()
	good, _ := os.ReadFile(path)
	for name, b := range map[string][]byte{
		"flipped digit": []byte(strings.Replace(string(good), "next 4194305", "next 4194205", 1)),
		"truncated":     good[:len(good)-12],
		"empty":         {},
	} {
		os.WriteFile(path, b, 0o600)
		if _, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8}); !errors.Is(err, ErrIdentities) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestIdentitiesExhausted(t *testing.T) {
	s, _ := openIdentities(identConfig{path: "", boot: testBoot, max: 8})
	s.next = identLimit - 1
	if id := mustAcquire(t, s, 1); id != identLimit-1 {
		t.Fatalf("last identity %d", id)
	}
	if _, err := s.acquire(2); !errors.Is(err, ErrIdentitiesExhausted) {
		t.Fatalf("beyond the last: %v", err)
	}
}

func TestCheckPidfs(t *testing.T) {
	if err := checkPidfs(); err != nil {
		t.Fatalf("this kernel (the CI's) must name processes by pidfd: %v", err)
	}
	if id, err := bootID(); err != nil || len(id) != 36 {
		t.Fatalf("boot id %q: %v", id, err)
	}
}

// The memory a region lives in: once attached, nobody can punch a hole in
// it (the engine's loop would fault, or with huge pages take SIGBUS), and
// the engine refuses memory the application has not faulted in.
func TestShmAttach(t *testing.T) {
	m, err := newShm("onerma-test", 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.release()
	app, err := unix.Mmap(m.fd, 0, len(m.mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(app)
	// Before attach the application may still punch (its own memory, the
	// engine has not touched it): the engine then refuses it.
	if err := unix.Fallocate(m.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 64<<10, 4096); err != nil {
		t.Fatal(err)
	}
	if err := m.attach(true); !errors.Is(err, errNotResident) || !strings.Contains(err.Error(), "offset 65536") {
		t.Fatalf("attach of memory with a hole: %v", err)
	}

	m2, err := newShm("onerma-test", 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.release()
	fd, _ := m2.dupFD()
	defer unix.Close(fd)
	app2, err := unix.Mmap(fd, 0, len(m2.mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(app2)
	if err := m2.attach(true); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096); err != unix.EPERM {
		t.Fatalf("punching an attached region: %v, want EPERM", err)
	}
	if err := unix.Madvise(app2[:4096], unix.MADV_REMOVE); err != unix.EPERM {
		t.Fatalf("MADV_REMOVE on an attached region: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(fd, 0); err == nil {
		t.Fatal("truncated an attached region")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); err == nil {
		t.Fatal("sealed an attached region against the engine's writes")
	}
	app2[100] = 7 // the application's mapping still writes, the engine sees it
	if m2.mem[100] != 7 {
		t.Fatal("the engine does not see the application's write")
	}
	if !m2.locked {
		t.Log("region memory not locked here (no CAP_IPC_LOCK)")
	}
}
