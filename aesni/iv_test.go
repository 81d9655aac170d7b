package aesni

import (
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

var ivSeeds = flag.Int("iv.seeds", 40, "seeds of the IV crash simulation (reproduce one with -iv.seed=N)")
var ivSeed = flag.Uint64("iv.seed", 0, "run the IV crash simulation with this seed only")

// crashFile models a state file under a page cache: writes land in cache,
// Sync copies cache to disk, and a crash keeps an arbitrary subset of the
// unsynced bytes (each dirty byte independently persisted or lost), which
// covers lost, partial and torn writes. A new process sees disk.
type crashFile struct {
	disk, cache [stateLen]byte
	failWrite   int // if >= 0: the next WriteAt writes this many bytes, then fails
	failSync    bool
	closed      bool
	writes      int
}

func newCrashFile() *crashFile {
	f := &crashFile{failWrite: -1}
	encodeRecord(f.disk[0:], 0)
	encodeRecord(f.disk[slotStride:], 0)
	f.cache = f.disk
	return f
}

var errInjected = errors.New("injected I/O error")

func (f *crashFile) ReadAt(p []byte, off int64) (int, error) { return copy(p, f.cache[off:]), nil }

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.writes++
	if f.failWrite >= 0 {
		n := copy(f.cache[off:], p[:f.failWrite])
		f.failWrite = -1
		return n, errInjected
	}
	return copy(f.cache[off:], p), nil
}

func (f *crashFile) Sync() error {
	if f.failSync {
		f.failSync = false
		return errInjected
	}
	f.disk = f.cache
	return nil
}

func (f *crashFile) Close() error { f.closed = true; return nil }

// crash ends the process: unsynced bytes survive at random.
func (f *crashFile) crash(rng *rand.Rand) {
	for i := range f.cache {
		if f.cache[i] != f.disk[i] && rng.IntN(2) == 0 {
			f.disk[i] = f.cache[i]
		}
	}
	f.cache = f.disk
	f.closed = false
}

// TestIVNoRepeatAcrossCrashes runs processes one after another on one
// state file; each draws counters through a few lanes (Next, NextN,
// sometimes Refill), may suffer a failed write or fsync, and then exits
// cleanly or crashes. The reserver is played by the test, so that a seed
// repeats: one of its rounds (wake) runs at random steps, so draws also
// find the source dry (ErrIVPending). No counter may ever repeat, and each
// process starts above every counter used before it.
func TestIVNoRepeatAcrossCrashes(t *testing.T) {
	seeds := make([]uint64, 0, *ivSeeds)
	if *ivSeed != 0 {
		seeds = append(seeds, *ivSeed)
	} else {
		for i := range *ivSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		if !simulateIV(t, seed) {
			t.Fatalf("reproduce with -run TestIVNoRepeatAcrossCrashes -iv.seed=%d", seed)
		}
	}
}

func simulateIV(t *testing.T, seed uint64) bool {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x1a5))
	f := newCrashFile()
	used := make(map[uint64]struct{})
	maxUsed := uint64(0)
	cfg := IVConfig{Path: "sim", Block: 1 + rng.Uint64N(200)}
	cfg.Span = 1 + rng.Uint64N(cfg.Block)
	var crashes, stateErrs, pending int
	for proc := range 30 {
		s, err := openSource(f, cfg)
		if errors.Is(err, ErrIVState) {
			// A fault injected into the previous process but not hit
			// there failed this start's fsync: start again.
			s, err = openSource(f, cfg)
		}
		if err != nil {
			t.Errorf("seed %d proc %d: open: %v", seed, proc, err)
			return false
		}
		lanes := make([]*IVLane, 1+rng.IntN(3))
		for i := range lanes {
			lanes[i] = s.NewLane()
		}
		minThis := uint64(math.MaxUint64)
		injectAt := -1
		if rng.IntN(3) == 0 {
			injectAt = rng.IntN(200)
		}
		for step := range 50 + rng.IntN(300) {
			if step == injectAt {
				if rng.IntN(2) == 0 {
					f.failWrite = rng.IntN(recordLen)
				} else {
					f.failSync = true
				}
			}
			if rng.IntN(4) == 0 {
				s.wake()
			}
			l := lanes[rng.IntN(len(lanes))]
			var c, n uint64
			switch r := rng.IntN(10); {
			case r == 0:
				if err := l.Refill(); err != nil && !errors.Is(err, ErrIVState) {
					t.Errorf("seed %d: Refill: %v", seed, err)
					return false
				}
				continue
			case r < 3:
				n = 1 + rng.Uint64N(cfg.Span)
				c, err = l.NextN(n)
			default:
				n = 1
				c, err = l.Next()
			}
			if errors.Is(err, ErrIVPending) {
				pending++
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrIVState) {
					t.Errorf("seed %d: draw: %v", seed, err)
					return false
				}
				stateErrs++
				continue
			}
			for i := range n {
				if _, dup := used[c+i]; dup {
					t.Errorf("seed %d proc %d: counter %d repeated", seed, proc, c+i)
					return false
				}
				used[c+i] = struct{}{}
				minThis = min(minThis, c+i)
			}
		}
		if minThis != math.MaxUint64 && minThis <= maxUsed {
			t.Errorf("seed %d proc %d: started at %d, below %d used before", seed, proc, minThis, maxUsed)
			return false
		}
		for c := range used {
			maxUsed = max(maxUsed, c)
		}
		if rng.IntN(2) == 0 {
			if err := s.Close(); err != nil {
				t.Errorf("seed %d: Close: %v", seed, err)
				return false
			}
			f.closed = false
		} else {
			f.crash(rng)
			crashes++
		}
	}
	if crashes == 0 || len(used) == 0 || pending == 0 {
		t.Errorf("seed %d: simulation exercised nothing (crashes %d, counters %d, pending draws %d)", seed, crashes, len(used), pending)
		return false
	}
	return true
}

// drawRefilled draws n counters (Next if n is 1) from a lane of a source
// whose reserver the test plays: if the source is dry, it runs the
// reserver's round that the lane flagged (dry) and draws again.
func drawRefilled(s *IVSource, l *IVLane, n uint64) (uint64, error) {
	draw := func() (uint64, error) {
		if n == 1 {
			return l.Next()
		}
		return l.NextN(n)
	}
	c, err := draw()
	if errors.Is(err, ErrIVPending) {
		if !s.dry.Load() {
			return 0, errors.New("a dry take did not flag the source")
		}
		if !s.wake() {
			return 0, errors.New("the reserver's round did not see the flag")
		}
		c, err = draw()
	}
	return c, err
}

// After a failed reservation the source is sticky-failed: it never writes
// again and a take past the persisted mark fails with ErrIVState, but the
// counters already reserved are still handed out, to new ranges too.
func TestIVStickyFailure(t *testing.T) {
	for _, fail := range []string{"write", "sync"} {
		t.Run(fail, func(t *testing.T) {
			f := newCrashFile()
			s, err := openSource(f, IVConfig{Block: 8, Span: 2}) // low-water 4
			if err != nil {
				t.Fatal(err)
			}
			l := s.NewLane()
			if err := l.Refill(); err != nil { // reserves [1,9)
				t.Fatal(err)
			}
			var ls [5]*IVLane
			for i, want := range []uint64{1, 3, 5} { // ranges [1,3) [3,5) [5,7)
				ls[i] = s.NewLane()
				if c, err := ls[i].Next(); c != want || err != nil {
					t.Fatalf("lane %d: first draw %d, %v; want %d", i, c, err, want)
				}
			}
			if fail == "write" {
				f.failWrite = 3
			} else {
				f.failSync = true
			}
			s.wake() // 2 reserved ahead, below the low-water mark: the reservation fails
			if err := s.failure(); !errors.Is(err, ErrIVState) || !errors.Is(err, errInjected) {
				t.Fatalf("after a failed %s: failure %v", fail, err)
			}
			if st := s.Stats(); st.HighWater != 9 || st.Reservations != 1 {
				t.Fatalf("source stats after the failure %+v", st)
			}
			writes := f.writes
			ls[3] = s.NewLane()
			if c, err := ls[3].Next(); c != 7 || err != nil { // [7,9): still reserved
				t.Fatalf("reserved counters after the failure: %d, %v; want 7", c, err)
			}
			ls[4] = s.NewLane()
			if _, err := ls[4].Next(); !errors.Is(err, ErrIVState) {
				t.Fatalf("draw past the mark after a failed %s: %v, want ErrIVState", fail, err)
			}
			if err := ls[4].Refill(); !errors.Is(err, ErrIVState) {
				t.Fatalf("failure not sticky: Refill %v", err)
			}
			if s.dry.Load() {
				t.Fatal("a failed source was flagged dry")
			}
			if c, err := ls[0].Next(); c != 2 || err != nil { // the rest of [1,3)
				t.Fatalf("held counter: %d, %v; want 2", c, err)
			}
			s.wake()
			if _, err := ls[0].NextN(2); !errors.Is(err, ErrIVState) {
				t.Fatalf("draw past the reserved counters: %v", err)
			}
			if c, err := ls[3].Next(); c != 8 || err != nil {
				t.Fatalf("held counter: %d, %v; want 8", c, err)
			}
			if f.writes != writes {
				t.Fatal("sticky-failed source wrote again")
			}
			if st := ls[0].Stats(); st.Issued != 2 || st.Stalls != 1 || st.Wasted != 0 {
				t.Fatalf("lane stats %+v", st)
			}
			if st := ls[4].Stats(); st.Issued != 0 || st.Stalls != 1 {
				t.Fatalf("failed lane stats %+v", st)
			}
		})
	}
}

func TestIVExhaustion(t *testing.T) {
	f := newCrashFile()
	// A previous process reserved up to 10 below the end of the space.
	encodeRecord(f.cache[slotStride:], math.MaxUint64-10)
	f.disk = f.cache
	s, err := openSource(f, IVConfig{Block: 4, Span: 3})
	if err != nil {
		t.Fatal(err)
	}
	l := s.NewLane()
	var got []uint64
	for {
		c, err := drawRefilled(s, l, 1)
		if errors.Is(err, ErrIVExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
		if len(got) > 20 {
			t.Fatal("no exhaustion")
		}
	}
	// Counters MaxUint64-10 .. MaxUint64-1, then exhaustion; never a wrap.
	if len(got) != 10 || got[0] != math.MaxUint64-10 || got[9] != math.MaxUint64-1 {
		t.Fatalf("counters near the end: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("counters near the end: %v", got)
		}
	}
	if _, err := drawRefilled(s, l, 2); !errors.Is(err, ErrIVExhausted) {
		t.Fatalf("NextN after exhaustion: %v", err)
	}
	if hw := s.Stats().HighWater; hw != math.MaxUint64 {
		t.Fatalf("high-water %d", hw)
	}
	// A restart is exhausted too.
	f.crash(rand.New(rand.NewPCG(1, 1)))
	s, err = openSource(f, IVConfig{Block: 4, Span: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drawRefilled(s, s.NewLane(), 1); !errors.Is(err, ErrIVExhausted) {
		t.Fatalf("after restart: %v", err)
	}
}

// NextN never returns a span that crosses the end of the space.
func TestIVExhaustionNextN(t *testing.T) {
	f := newCrashFile()
	encodeRecord(f.cache[0:], math.MaxUint64-5)
	f.disk = f.cache
	s, _ := openSource(f, IVConfig{Block: 64, Span: 64})
	l := s.NewLane()
	c, err := drawRefilled(s, l, 4)
	if err != nil || c != math.MaxUint64-5 {
		t.Fatalf("NextN(4) = %d, %v", c, err)
	}
	if _, err := drawRefilled(s, l, 4); !errors.Is(err, ErrIVExhausted) { // only MaxUint64-1 is left
		t.Fatalf("NextN(4) over the end: %v", err)
	}
	if c, err := l.Next(); err != nil || c != math.MaxUint64-1 {
		t.Fatalf("Next after NextN over the end: %d, %v; want the last counter", c, err)
	}
}

// drawWait draws from a lane of a source whose reserver runs, waiting
// while the source is dry.
func drawWait(t testing.TB, l *IVLane, n uint64) uint64 {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var c uint64
		var err error
		if n == 1 {
			c, err = l.Next()
		} else {
			c, err = l.NextN(n)
		}
		if err == nil {
			return c
		}
		if !errors.Is(err, ErrIVPending) {
			t.Errorf("draw: %v", err)
			return 0
		}
		if time.Now().After(deadline) {
			t.Errorf("lane still dry after 10 s (stats %+v)", l.Stats())
			return 0
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func TestIVStateFile(t *testing.T) {
	dir := t.TempDir()
	cfg := IVConfig{Path: filepath.Join(dir, "iv.state"), Block: 1000, Span: 100}
	used := map[uint64]bool{}
	last, start := uint64(0), uint64(1)
	for proc := range 4 {
		s, err := OpenIVSource(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := OpenIVSource(cfg); err == nil {
			t.Fatal("a second source opened a locked state file")
		}
		lanes := []*IVLane{s.NewLane(), s.NewLane()}
		for i := range 2500 {
			c := drawWait(t, lanes[i%2], 1)
			if t.Failed() {
				t.FailNow()
			}
			if used[c] || c < start || c <= last && i == 0 {
				t.Fatalf("proc %d: counter %d repeated or below the previous run", proc, c)
			}
			used[c] = true
		}
		// The lanes took 26 ranges of 100: 3 blocks, and the reserver
		// may have reserved a fourth (fewer than 500 left ahead), until
		// Close stops it: the next process starts at the mark read after
		// Close.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if st.Reservations < 3 || st.Reservations > 4 || st.HighWater != start+1000*st.Reservations || st.Next != start+2600 {
			t.Fatalf("proc %d: stats %+v for 2500 counters in blocks of 1000 from %d", proc, st, start)
		}
		start = st.HighWater
		for c := range used {
			last = max(last, c)
		}
	}
	if _, err := os.Stat(cfg.Path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

func TestIVStateFileCorrupt(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		"empty":   {},
		"short":   make([]byte, 100),
		"garbage": make([]byte, stateLen),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenIVSource(IVConfig{Path: path}); !errors.Is(err, ErrIVCorrupt) {
			t.Errorf("%s: %v, want ErrIVCorrupt", name, err)
		}
	}
	// One torn record: the other one is used.
	f := newCrashFile()
	encodeRecord(f.cache[0:], 5000)
	encodeRecord(f.cache[slotStride:], 7000)
	f.cache[slotStride+9] ^= 0x40
	s, err := openSource(f, IVConfig{Block: 10})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := drawRefilled(s, s.NewLane(), 1); c != 5000 {
		t.Fatalf("started at %d (%v), want 5000", c, err)
	}
}

func TestIVConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg IVConfig
		ok  bool
	}{
		{IVConfig{Path: "x"}, true},
		{IVConfig{Path: "x", Block: 8}, true}, // default span clipped to Block
		{IVConfig{}, false},
		{IVConfig{Path: "x", Block: 8, Span: 9}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%+v) = %v", c.cfg, err)
		}
	}
}

func TestIVLaneAllocs(t *testing.T) {
	if n := unsafe.Sizeof(IVLane{}); n != 128 {
		t.Errorf("IVLane is %d bytes, want 128 (adjust its padding)", n)
	}
	s := NewVolatileIVSource(IVConfig{})
	l := s.NewLane()
	if err := l.Refill(); err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, NonceSize)
	if a := testing.AllocsPerRun(1000, func() {
		if l.NextNonce(nonce, [4]byte{10, 0, 0, 1}) != nil {
			panic("next")
		}
	}); a != 0 {
		t.Errorf("NextNonce: %v allocs per run", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := l.NextN(64); err != nil {
			panic("nextn")
		}
	}); a != 0 {
		t.Errorf("NextN: %v allocs per run", a)
	}
	if st := l.Stats(); st.Stalls != 0 {
		t.Errorf("%d stalls, want 0: a volatile source is never dry", st.Stalls)
	}
}

// refLane is the lane algorithm the volatile lane must reproduce counter
// for counter: ranges are consecutive Span-sized ranges of the source,
// taken when Refill finds no spare or when a draw finds both ranges dry
// (synchronously), used in the order taken; NextN skips the rest of the
// current range when n does not fit.
type refLane struct {
	span, srcNext       uint64 // a source of its own: lanes do not share one
	next, end           uint64
	spareNext, spareEnd uint64
	issued, wasted      uint64
}

func (l *refLane) take() (uint64, uint64) {
	start := l.srcNext
	l.srcNext += l.span
	return start, l.srcNext
}

func (l *refLane) nextN(n uint64) uint64 {
	if l.end-l.next < n {
		l.wasted += l.end - l.next
		l.next, l.end = l.spareNext, l.spareEnd
		l.spareNext, l.spareEnd = 0, 0
		if l.end-l.next < n {
			l.wasted += l.end - l.next
			l.next, l.end = l.take()
		}
	}
	c := l.next
	l.next += n
	l.issued += n
	return c
}

func (l *refLane) refill() {
	if l.spareNext >= l.spareEnd {
		l.spareNext, l.spareEnd = l.take()
	}
}

// A lane of a volatile source hands out exactly the counters of the
// reference algorithm, for random sequences of Next, NextN and Refill
// (with and without a Refill before every few draws, as an engine core
// calls it at the start of each Poll, and without any), never stalls and
// never allocates.
func TestIVVolatileLaneMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x17e))
		span := 1 + rng.Uint64N(8)
		block := span + rng.Uint64N(20)
		refillEvery := rng.IntN(6) // 0: never
		ref := &refLane{span: span, srcNext: 1}
		l := NewVolatileIVSource(IVConfig{Block: block, Span: span}).NewLane()
		if rng.IntN(2) == 0 {
			ref.refill()
			if err := l.Refill(); err != nil {
				t.Fatal(err)
			}
		}
		for step := range 2000 {
			if refillEvery != 0 && step%refillEvery == 0 {
				ref.refill()
				if err := l.Refill(); err != nil {
					t.Fatal(err)
				}
			}
			n := uint64(1)
			if rng.IntN(3) == 0 {
				n = 1 + rng.Uint64N(span)
			}
			want := ref.nextN(n)
			var got uint64
			var err error
			if n == 1 && rng.IntN(2) == 0 {
				got, err = l.Next()
			} else {
				got, err = l.NextN(n)
			}
			if err != nil || got != want {
				t.Fatalf("seed %d (span %d, Refill every %d) step %d: NextN(%d) = %d, %v; reference %d",
					seed, span, refillEvery, step, n, got, err, want)
			}
		}
		if st := l.Stats(); st.Issued != ref.issued || st.Wasted != ref.wasted || st.Stalls != 0 {
			t.Fatalf("seed %d: stats %+v, reference issued %d wasted %d", seed, st, ref.issued, ref.wasted)
		}
	}
}

// gateFile is a state file in memory whose Sync, once gated, announces
// itself on entered and waits for release: a disk as slow as the test
// wants.
type gateFile struct {
	mu      sync.Mutex
	b       [stateLen]byte
	gated   atomic.Bool
	entered chan struct{}
	release chan struct{}
	syncs   atomic.Int64
}

func newGateFile() *gateFile {
	f := &gateFile{entered: make(chan struct{}, 1), release: make(chan struct{})}
	encodeRecord(f.b[0:], 0)
	encodeRecord(f.b[slotStride:], 0)
	return f
}

func (f *gateFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return copy(p, f.b[off:]), nil
}

func (f *gateFile) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return copy(f.b[off:], p), nil
}

func (f *gateFile) Sync() error {
	if f.gated.Load() {
		f.entered <- struct{}{}
		<-f.release
	}
	f.syncs.Add(1)
	return nil
}

func (f *gateFile) Close() error { return nil }

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// within runs f and fails the test if it does not return within 5 s: a
// draw that blocked on the reserver would hang there.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked", what)
		panic("unreachable")
	}
}

// While the reserver waits for a slow fsync (holding the source's mutex),
// a lane keeps drawing from the reserved block without blocking, fails at
// once with ErrIVPending (a stall) when it passes the persisted mark, and
// recovers as soon as the fsync returns and the reserver publishes the
// new mark. Stats never waits. Close waits for the reservation in
// progress and stops the reserver; the lane keeps its range, and takes
// fail with ErrIVClosed at once.
func TestIVLaneSlowFsync(t *testing.T) {
	f := newGateFile()
	s, err := openSource(f, IVConfig{Block: 8, Span: 4}) // low-water 4
	if err != nil {
		t.Fatal(err)
	}
	if err := s.start(time.Millisecond); err != nil { // reserves [1,9)
		t.Fatal(err)
	}
	f.gated.Store(true)
	l := s.NewLane()
	type result struct {
		c   uint64
		err error
	}
	next := func() result { c, err := l.Next(); return result{c, err} }
	for want := uint64(1); want <= 8; want++ { // 5: takes [5,9), the reserver reserves [9,17)
		if r := within(t, "Next", next); r.c != want || r.err != nil {
			t.Fatalf("draw: %d, %v; want %d", r.c, r.err, want)
		}
		if want == 5 {
			<-f.entered // the reserver is in fsync, holding the source's mutex
		}
	}
	for range 3 {
		if r := within(t, "Next past the mark", next); !errors.Is(r.err, ErrIVPending) {
			t.Fatalf("past the mark: %d, %v; want ErrIVPending", r.c, r.err)
		}
		r := within(t, "NextN past the mark", func() result { c, err := l.NextN(2); return result{c, err} })
		if !errors.Is(r.err, ErrIVPending) {
			t.Fatalf("past the mark: %d, %v; want ErrIVPending", r.c, r.err)
		}
	}
	if st := l.Stats(); st.Stalls != 6 || st.Issued != 8 {
		t.Fatalf("lane stats while the fsync waits %+v", st)
	}
	if st := within(t, "Stats", s.Stats); st.HighWater != 9 || st.Next != 9 || st.Reservations != 1 {
		t.Fatalf("source stats while the fsync waits %+v", st)
	}
	if !s.dry.Load() {
		t.Fatal("the dry take did not flag the source")
	}

	f.release <- struct{}{}
	if c := drawWait(t, l, 1); c != 9 { // takes [9,13)
		t.Fatalf("after the fsync: %d, want 9", c)
	}
	if st := l.Stats(); st.Issued != 9 || st.Wasted != 0 || st.Stalls < 6 { // drawWait may stall until the mark is published
		t.Fatalf("lane stats after recovery %+v", st)
	}

	// Close while the reserver is in fsync: Close waits for it.
	for want := uint64(10); want <= 13; want++ { // 13: takes [13,17), the reserver reserves [17,25)
		if r := within(t, "Next", next); r.c != want || r.err != nil {
			t.Fatalf("draw: %d, %v; want %d", r.c, r.err, want)
		}
	}
	<-f.entered
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while the reserver was in fsync")
	case <-time.After(50 * time.Millisecond):
	}
	f.release <- struct{}{}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("reserver still running after Close")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The lane's range is still its own; then it is dry for good, although
	// [17,25) is reserved.
	for want := uint64(14); want <= 16; want++ {
		if c, err := l.Next(); c != want || err != nil {
			t.Fatalf("draw after Close: %d, %v; want %d", c, err, want)
		}
	}
	if _, err := l.Next(); !errors.Is(err, ErrIVClosed) {
		t.Fatalf("dry lane of a closed source: %v", err)
	}
	if err := l.Refill(); !errors.Is(err, ErrIVClosed) {
		t.Fatalf("Refill of a closed source: %v", err)
	}
	if st := s.Stats(); st.HighWater != 25 || st.Next != 17 || st.Reservations != 3 || f.syncs.Load() != 4 {
		t.Fatalf("source stats after Close %+v (%d fsyncs)", st, f.syncs.Load())
	}
}

// The reserver keeps counters reserved ahead without any lane asking: a
// lane drawing steadily through several blocks, at a rate far below a
// Block per period, never finds the source dry. The margins are wide: the
// lane uses 1/32 of the low-water mark per period (the reserver may lag
// by 32 periods before the lane could stall). Once the lane stops, the
// reserver writes nothing more.
func TestIVReserverKeepsAhead(t *testing.T) {
	const period = time.Millisecond
	f := newGateFile()
	s, err := openSource(f, IVConfig{Block: 1 << 16, Span: 256}) // low-water 1<<15
	if err != nil {
		t.Fatal(err)
	}
	if err := s.start(period); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := s.NewLane()
	const perStep = 1024 // four ranges per period
	steps := 0
	for l.Stats().Issued < 4<<16 {
		for range perStep / 64 {
			if _, err := l.NextN(64); err != nil {
				t.Fatalf("step %d: %v (lane %+v, source %+v)", steps, err, l.Stats(), s.Stats())
			}
		}
		steps++
		time.Sleep(period)
	}
	st := s.Stats()
	if st.Reservations < 4 || l.Stats().Stalls != 0 || s.dry.Load() {
		t.Fatalf("after %d steps: source %+v, lane %+v", steps, st, l.Stats())
	}
	if st.HighWater-st.Next < 1<<15 {
		waitFor(t, "the reserver to catch up", func() bool { st = s.Stats(); return st.HighWater-st.Next >= 1<<15 })
	}
	time.Sleep(20 * period)
	if got := s.Stats(); got.Reservations != st.Reservations || f.syncs.Load() != int64(st.Reservations)+1 {
		t.Fatalf("idle source reserved again: %+v then %+v", st, got)
	}
}

// The reserver of an idle source wakes once per reservePeriod, no more,
// and reserves nothing.
func TestIVReserverIdle(t *testing.T) {
	s, err := OpenIVSource(IVConfig{Path: filepath.Join(t.TempDir(), "iv.state")})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(4 * reservePeriod)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	maxWakes := uint64(time.Since(t0)/reservePeriod) + 1
	if w := s.wakes.Load(); w > maxWakes {
		t.Fatalf("%d wakes in %v (period %v)", w, time.Since(t0), reservePeriod)
	}
	if st := s.Stats(); st.Reservations != 1 || st.HighWater != 1+DefaultIVBlock {
		t.Fatalf("idle source: %+v", st)
	}
}

// The reserver sleeps a full period unless it is behind.
func TestIVReserverWait(t *testing.T) {
	const p = 50 * time.Millisecond
	for _, c := range []struct {
		dry     bool
		used    uint64
		elapsed time.Duration
		margin  uint64
		want    time.Duration
	}{
		{false, 0, p, 1 << 31, p},
		{false, 1 << 24, p, 1 << 31, p},        // ~3e8 counters/s: the margin lasts 64 periods
		{false, 1 << 30, p, 1 << 30, dryPoll},  // the margin lasts 1 period: hurry
		{false, 1 << 28, 10 * p, 1 << 27, p},   // a burst spread over a longer sleep
		{true, 0, p, 1 << 31, dryPoll},         // a lane found the source dry
		{false, 1 << 40, p, math.MaxUint64, p}, // reserved to the end of the space
		{false, 1 << 20, 0, 1, p},              // no time measured
	} {
		if got := reserverWait(p, c.dry, c.used, c.elapsed, c.margin); got != c.want {
			t.Errorf("reserverWait(dry %v, %d used in %v, margin %d) = %v, want %v", c.dry, c.used, c.elapsed, c.margin, got, c.want)
		}
	}
}

// Several lanes, each drawn by its own goroutine while the reserver
// reserves ahead and an observer reads the source's stats, hand out unique
// counters, increasing within each lane, across Close and reopen too; run
// it with -race to check the takes against the reservations. Every Close
// stops the reserver goroutine.
func TestIVLanesConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "iv.state")
	cfg := IVConfig{Path: path, Block: 1 << 14, Span: 256}
	const lanes, draws = 4, 6000
	before := runtime.NumGoroutine()
	used := make(map[uint64]int)
	var maxPrev uint64
	for proc := range 3 {
		s, err := OpenIVSource(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]uint64, lanes)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var observer sync.WaitGroup
		observer.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					s.Stats()
					runtime.Gosched()
				}
			}
		})
		for i := range lanes {
			l := s.NewLane()
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(proc), uint64(i)))
				for range draws {
					if rng.IntN(500) == 0 {
						if err := l.Refill(); err != nil {
							t.Error(err)
							return
						}
					}
					n := uint64(1)
					if rng.IntN(4) == 0 {
						n = 1 + rng.Uint64N(16)
					}
					c := drawWait(t, l, n)
					if k := len(got[i]); k > 0 && c <= got[i][k-1] {
						t.Errorf("lane %d: counter %d after %d", i, c, got[i][k-1])
						return
					}
					for k := range n {
						got[i] = append(got[i], c+k)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		observer.Wait()
		if t.Failed() {
			t.FailNow()
		}
		minThis := uint64(math.MaxUint64)
		for i := range got {
			for _, c := range got[i] {
				if p, dup := used[c]; dup {
					t.Fatalf("proc %d: counter %d repeated (first in proc %d)", proc, c, p)
				}
				used[c] = proc
				minThis = min(minThis, c)
			}
		}
		if minThis <= maxPrev {
			t.Fatalf("proc %d: started at %d, below %d used before", proc, minThis, maxPrev)
		}
		for c := range used {
			maxPrev = max(maxPrev, c)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	waitFor(t, "the reserver goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

// A draw from a dry source (the ErrIVPending path, which flags the source
// for the reserver) does not allocate either, nor does a take.
func TestIVLaneDryAllocs(t *testing.T) {
	s, err := openSource(newCrashFile(), IVConfig{Block: 8, Span: 4})
	if err != nil {
		t.Fatal(err)
	}
	l := s.NewLane()
	if a := testing.AllocsPerRun(100, func() {
		if _, err := l.Next(); !errors.Is(err, ErrIVPending) {
			panic(err)
		}
		s.dry.Store(false) // as the reserver would, so that every run flags it
	}); a != 0 {
		t.Errorf("dry Next: %v allocs per run", a)
	}
	s, err = openSource(newCrashFile(), IVConfig{Block: 1 << 20, Span: 4})
	if err != nil {
		t.Fatal(err)
	}
	l = s.NewLane()
	if err := l.Refill(); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := l.NextN(4); err != nil { // a take every time
			panic(err)
		}
	}); a != 0 {
		t.Errorf("NextN taking a range: %v allocs per run", a)
	}
}
