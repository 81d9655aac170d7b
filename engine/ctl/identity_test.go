package ctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/portal"
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

// syncGate is a sync hook (identConfig.sync) that, while shut, blocks
// every fsync until opened, and says so on blocked.
type syncGate struct {
	shut    atomic.Bool
	open    chan struct{}
	blocked chan string // the name of each file or directory whose fsync is held
}

func newSyncGate() *syncGate {
	return &syncGate{open: make(chan struct{}), blocked: make(chan string, 16)}
}

func (g *syncGate) sync(f *os.File) error {
	if g.shut.Load() {
		g.blocked <- filepath.Base(f.Name())
		<-g.open
	}
	return f.Sync()
}

// release lets every held fsync and every later one through.
func (g *syncGate) release() {
	g.shut.Store(false)
	close(g.open)
}

// burstIno is the pidfs inode of the i-th process of a burst: far above
// the inodes of this boot's real processes.
func burstIno(i int) uint64 { return 1<<62 + uint64(i) }

// One tenant's burst of 1000 new identities while the disk holds every
// fsync: the table's writer and the reserver of the next block are both
// stuck, and another tenant's processes still pin, release and get new
// identities within the durable block. The burst's identities beyond that
// block wait for its mark alone, and the other tenant's pins go on beside
// them. Nothing is lost: after the disk lets go and the table is closed,
// a restart knows every process.
func TestIdentitiesBurstWriterBlocked(t *testing.T) {
	g := newSyncGate()
	path := filepath.Join(t.TempDir(), "ids")
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 4096, sync: g.sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if g.shut.Load() { // failed: let the writer and the reserver go
			g.release()
		}
	})
	first := mustAcquire(t, s, burstIno(0)) // reserves the first block
	other := mustAcquire(t, s, 7)           // the other tenant's process
	s.release(7)
	g.shut.Store(true)
	ids := map[uint64]uint32{burstIno(0): first, 7: other}
	for i := 1; i < 1000; i++ {
		ids[burstIno(i)] = mustAcquire(t, s, burstIno(i))
		if i%2 == 0 {
			s.release(burstIno(i))
		}
	}
	// Two fsyncs held: the reserver's (of the next block's mark), and the
	// table writer's (of its temporary file, or of the directory after
	// its rename).
	if a, b := <-g.blocked, <-g.blocked; a != "ids.mark.tmp" && b != "ids.mark.tmp" {
		t.Fatalf("fsyncs held: %s and %s, want the mark's among them", a, b)
	}

	// The other tenant, while both writes are held.
	if id, ok := s.pin(7); !ok || id != other {
		t.Fatalf("pin of a known process: %d %v, want %d", id, ok, other)
	}
	fresh := mustAcquire(t, s, 8)
	if fresh != first+1001 || uint64(fresh) >= uint64(first)+identBlock {
		t.Fatalf("a new process beside the burst: %d, want %d (within the first block)", fresh, first+1001)
	}
	ids[8] = fresh
	s.release(7)
	s.release(8)

	// The burst goes on past the durable block: those identities wait for
	// the next block's mark.
	var within atomic.Int32
	burst := make(chan error, 1)
	go func() {
		for i := 1000; i < 1030; i++ {
			id, err := s.acquire(burstIno(i))
			if err != nil || id != first+2+uint32(i) {
				burst <- fmt.Errorf("burst process %d: %d %v, want %d", i, id, err, first+2+uint32(i))
				return
			}
			if uint64(id) < uint64(first)+identBlock {
				within.Add(1)
			}
		}
		burst <- nil
	}()
	for within.Load() < identBlock-1002 { // the rest of the first block; then it waits
		select {
		case err := <-burst:
			t.Fatalf("the burst beyond the durable block ended while its mark could not be written: %v", err)
		default:
			runtime.Gosched()
		}
	}
	if id, ok := s.pin(7); !ok || id != other {
		t.Fatalf("pin beside identities waiting for their block: %d %v", id, ok)
	}
	s.release(7)
	select {
	case err := <-burst:
		t.Fatalf("an identity beyond the durable block was handed out while its mark could not be written: %v", err)
	default:
	}

	g.release()
	if err := <-burst; err != nil {
		t.Fatal(err)
	}
	for i := 1000; i < 1030; i++ {
		ids[burstIno(i)] = first + 2 + uint32(i)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	s, err = openIdentities(identConfig{path: path, boot: testBoot, max: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for ino, want := range ids {
		if id, ok := s.pin(ino); !ok || id != want {
			t.Fatalf("process %#x after a restart: %d %v, want %d", ino, id, ok, want)
		}
	}
	if id := mustAcquire(t, s, 9); id != first+1032 {
		t.Fatalf("a new process after the restart: %d, want %d", id, first+1032)
	}
}

// A crash leaves each file as one of its writes left it: the last whose
// rename an fsync of the directory made durable, or a later one. Reopened
// from every such state seen while four goroutines hand out identities
// (blocks of 4, so that reservations are many and new processes outrun
// them; a table of 16, so that processes are forgotten), an engine never
// hands an identity handed out before the crash to another process.
func TestIdentitiesCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	read := func() [2][]byte {
		tb, _ := os.ReadFile(path)
		mb, _ := os.ReadFile(path + ".mark")
		return [2][]byte{tb, mb}
	}
	var (
		mu      sync.Mutex
		durable [2][]byte // the table and the mark as the last directory fsync made them
		given   []identPair
		idsOf   = map[uint64]map[uint32]bool{} // every identity each process got
		states  = map[[2]string]int{}          // a state a crash could leave → identities handed out before
		owner   = map[uint32]uint64{}          // identity → its process
		note    = func(st [2][]byte, n int) { states[[2]string{string(st[0]), string(st[1])}] = n }
	)
	hook := func(f *os.File) error {
		if fi, err := f.Stat(); err != nil || !fi.IsDir() {
			return f.Sync()
		}
		mu.Lock() // one directory fsync at a time: each makes durable what is named before it
		defer mu.Unlock()
		st := read()
		if err := f.Sync(); err != nil {
			return err
		}
		durable = st
		return nil
	}
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 16, block: 4, sync: hook})
	if err != nil {
		t.Fatal(err)
	}
	record := func(ino uint64, id uint32) {
		mu.Lock()
		defer mu.Unlock()
		cur := read() // after durable's read: the same writes or later ones
		if m, err := decodeMark(durable[1]); err != nil || uint64(id) >= m {
			t.Errorf("identity %d handed out while the durable mark is %d (%v)", id, m, err)
		}
		if o, ok := owner[id]; ok && o != ino {
			t.Errorf("identity %d handed out to processes %d and %d", id, o, ino)
		}
		owner[id] = ino
		given = append(given, identPair{ino: ino, id: id})
		if idsOf[ino] == nil {
			idsOf[ino] = map[uint32]bool{}
		}
		idsOf[ino][id] = true
		n := len(given)
		note(durable, n)
		note([2][]byte{cur[0], durable[1]}, n) // a table renamed, not yet durable
		note([2][]byte{durable[0], cur[1]}, n) // a mark renamed, not yet durable
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 60 {
				ino := uint64(w)<<32 | uint64(i+1)
				id, err := s.acquire(ino)
				if err != nil {
					t.Error(err)
					return
				}
				record(ino, id)
				if i%3 == 2 {
					s.release(ino)
					s.release(ino - 1)
				}
				if i%5 == 4 { // a process comes back: its identity, or a new one if forgotten
					back := uint64(w)<<32 | uint64(i-3)
					id, err := s.acquire(back)
					if err != nil {
						t.Error(err)
						return
					}
					record(back, id)
					s.release(back)
				}
			}
		})
	}
	wg.Wait()
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	note(read(), len(given))
	if t.Failed() {
		return
	}

	fresh := uint64(1) << 50
	for st, n := range states {
		var before uint32
		for _, g := range given[:n] {
			before = max(before, g.id)
		}
		dir := t.TempDir()
		p := filepath.Join(dir, "ids")
		os.WriteFile(p, []byte(st[0]), 0o600)
		os.WriteFile(p+".mark", []byte(st[1]), 0o600)
		r, err := openIdentities(identConfig{path: p, boot: testBoot, max: 16, block: 4, sync: func(*os.File) error { return nil }})
		if err != nil {
			t.Fatalf("restart from a state a crash could leave: %v\n%s\n%s", err, st[0], st[1])
		}
		known := map[uint32]bool{} // the identities of the processes the restart knows
		for ino, ids := range idsOf {
			if id, ok := r.pin(ino); ok {
				if !ids[id] {
					t.Errorf("process %d after a restart: %d, not one it was given (%v)", ino, id, ids)
				}
				known[id] = true
			}
		}
		for range 3 {
			fresh++
			if id := mustAcquire(t, r, fresh); id <= before || known[id] {
				t.Errorf("a new process after a restart got %d; %d was handed out before the crash, and the table names %v\n%s\n%s", id, before, known, st[0], st[1])
			}
		}
		if err := r.close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d identities handed out, %d states a crash could leave", len(given), len(states))
}

// A state of version 1 (the table and its next in one file) is read: its
// processes keep their identities, and the first new one is its next. The
// first start writes the mark, then the table of version 2; a crash in
// between leaves the table of version 1 beside the mark, also read.
func TestIdentitiesVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	var b bytes.Buffer
	fmt.Fprintf(&b, "onerma-identities 1\nboot %s\nnext 4194310\n100 4194305\n200 4194308\n", testBoot)
	v1 := sign(&b)
	os.WriteFile(path, v1, 0o600)
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := s.pin(200); !ok || id != 4194308 {
		t.Fatalf("process 200 of a version 1 table: %d %v", id, ok)
	}
	if id := mustAcquire(t, s, 300); id != 4194310 {
		t.Fatalf("a new process: %d, want the version 1 table's next 4194310", id)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if tb, _ := os.ReadFile(path); !bytes.HasPrefix(tb, []byte(identMagic+"\n")) {
		t.Fatalf("table after a start: %q", tb)
	}
	if m, err := os.ReadFile(path + ".mark"); err != nil || !bytes.Contains(m, []byte("mark 4194311\n")) {
		t.Fatalf("mark after a start: %q %v", m, err)
	}

	os.WriteFile(path, v1, 0o600)
	s, err = openIdentities(identConfig{path: path, boot: testBoot, max: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if id, ok := s.pin(100); !ok || id != 4194305 {
		t.Fatalf("process 100 of a version 1 table beside a mark: %d %v", id, ok)
	}
	if id := mustAcquire(t, s, 400); id != 4194311 {
		t.Fatalf("a new process: %d, want the mark's 4194311", id)
	}
}

// A damaged or missing mark stops the engine rather than restart
// identities.
func TestIdentitiesMarkCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	s, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8})
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, 1)
	s.close()
	good, _ := os.ReadFile(path + ".mark")
	for name, b := range map[string][]byte{
		"flipped digit": []byte(strings.Replace(string(good), "mark 4194305", "mark 4194315", 1)),
		"out of range":  []byte(strings.Replace(string(good), "mark 4194305", "mark 4194205", 1)),
		"truncated":     good[:len(good)-12],
		"torn":          good[:10],
		"empty":         {},
	} {
		os.WriteFile(path+".mark", b, 0o600)
		if _, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8}); !errors.Is(err, ErrIdentities) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("%s: %v", name, err)
		}
	}
	os.Remove(path + ".mark")
	if _, err := openIdentities(identConfig{path: path, boot: testBoot, max: 8}); !errors.Is(err, ErrIdentities) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("no mark beside a table of version 2: %v", err)
	}
}

// One tenant's burst of 1000 new process identities, while the disk holds
// every fsync (the table's writer and the next block's reserver are
// stuck), beside another tenant, on a socket of its own, that opens a
// portal (a new process: a new identity within the durable block) and a
// second one (pinned). Its calls complete while the fsyncs are held; after
// the engine stops, a restart knows every process.
func TestIdentityBurstBesideOpen(t *testing.T) {
	dir := t.TempDir()
	ecfg := engine.DefaultConfig()
	ecfg.LocalIP = netip.MustParseAddr("10.9.0.1")
	ecfg.Slots, ecfg.Regions, ecfg.Portals = 64, 32, 4
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	port, err := memport.Loopback(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	g, err := engine.NewGroup(ecfg, []engine.Tx{port})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(g.Core(0), port, runner.DefaultConfig())
	if err == nil {
		err = r.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	cfg := DefaultConfig()
	cfg.Sockets[0].Path = filepath.Join(dir, "main.sock")
	pod := filepath.Join(dir, "pod.sock")
	cfg.Sockets = append(cfg.Sockets, SocketConfig{Path: pod, Mode: 0o600, Name: "pod", Tenant: TenantBySocket, Policy: AppPolicy{Default: 16}})
	cfg.Quota.Portals, cfg.Quota.Slots = Pct(100), Pct(100)
	// Two tenants on this small engine: guarantees both fit, no room
	// kept for more.
	cfg.ReserveTenants = 0
	cfg.Guarantee.Portals, cfg.Guarantee.Slots, cfg.Guarantee.Regions = Count(1), Count(16), Count(4)
	cfg.IdentityPath = filepath.Join(dir, "ids")
	srv, err := Listen(cfg, g, []Executor{r}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()

	gate := newSyncGate()
	t.Cleanup(func() {
		if gate.shut.Load() {
			gate.release()
		}
	})
	ids := srv.ids
	first := mustAcquire(t, ids, burstIno(0)) // reserves the first block
	ids.mu.Lock()
	ids.sync = gate.sync
	ids.mu.Unlock()
	gate.shut.Store(true)
	burst := map[uint64]uint32{burstIno(0): first}
	for i := 1; i < 1000; i++ { // the other tenant's processes (its token bucket is its own)
		burst[burstIno(i)] = mustAcquire(t, ids, burstIno(i))
	}
	<-gate.blocked
	<-gate.blocked

	p, err := portal.Dial(pod, "beside")
	if err != nil {
		t.Fatalf("open beside a burst: %v", err)
	}
	me := p.Identity()
	if me.PID != first+1000 || me.Tenant != "pod" {
		t.Fatalf("identity %+v: want %d, tenant pod", me, first+1000)
	}
	q, err := portal.Dial(pod, "again")
	if err != nil || q.Identity().PID != me.PID {
		t.Fatalf("a second open of the process beside a burst: %v %+v", err, q.Identity())
	}
	q.Close()
	if !gate.shut.Load() {
		t.Fatal("the fsyncs were let go")
	}

	gate.release()
	p.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	s, err := openIdentities(identConfig{path: cfg.IdentityPath, boot: ids.cfg.boot, max: cfg.MaxIdentities})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	burst[selfIno(t)] = me.PID
	for ino, want := range burst {
		if id, ok := s.pin(ino); !ok || id != want {
			t.Fatalf("process %#x after a restart: %d %v, want %d", ino, id, ok, want)
		}
	}
}

// selfIno is this process's pidfs inode.
func selfIno(t *testing.T) uint64 {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
