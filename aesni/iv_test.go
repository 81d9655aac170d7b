package aesni

import (
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
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
// cleanly or crashes. No counter may ever repeat, and each process starts
// above every counter used before it.
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
	var crashes, stateErrs int
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
	if crashes == 0 || len(used) == 0 {
		t.Errorf("seed %d: simulation exercised nothing (crashes %d, counters %d)", seed, crashes, len(used))
		return false
	}
	return true
}

// After a failed reservation the source is sticky-failed, but counters a
// lane already holds stay usable.
func TestIVStickyFailure(t *testing.T) {
	for _, fail := range []string{"write", "sync"} {
		t.Run(fail, func(t *testing.T) {
			f := newCrashFile()
			s, err := openSource(f, IVConfig{Block: 8, Span: 4})
			if err != nil {
				t.Fatal(err)
			}
			l := s.NewLane()
			if _, err := l.Next(); err != nil { // takes [1,5), reserves [1,9)
				t.Fatal(err)
			}
			if err := l.Refill(); err != nil { // spare [5,9)
				t.Fatal(err)
			}
			if fail == "write" {
				f.failWrite = 3
			} else {
				f.failSync = true
			}
			l2 := s.NewLane()
			if _, err := l2.Next(); !errors.Is(err, ErrIVState) {
				t.Fatalf("draw after failed %s: %v, want ErrIVState", fail, err)
			}
			if _, err := l2.Next(); !errors.Is(err, ErrIVState) {
				t.Fatalf("failure not sticky: %v", err)
			}
			writes := f.writes
			for want := uint64(2); want < 9; want++ { // the rest of l's ranges
				c, err := l.Next()
				if err != nil || c != want {
					t.Fatalf("reserved counter: got %d, %v; want %d", c, err, want)
				}
			}
			if _, err := l.Next(); !errors.Is(err, ErrIVState) {
				t.Fatalf("draw past the reserved ranges: %v", err)
			}
			if f.writes != writes {
				t.Fatal("sticky-failed source wrote again")
			}
			if st := l.Stats(); st.Issued != 8 || st.Stalls != 2 {
				t.Fatalf("lane stats %+v", st)
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
		c, err := l.Next()
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
	if _, err := l.NextN(2); !errors.Is(err, ErrIVExhausted) {
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
	if _, err := s.NewLane().Next(); !errors.Is(err, ErrIVExhausted) {
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
	c, err := l.NextN(4)
	if err != nil || c != math.MaxUint64-5 {
		t.Fatalf("NextN(4) = %d, %v", c, err)
	}
	if _, err := l.NextN(4); !errors.Is(err, ErrIVExhausted) { // only MaxUint64-1 is left
		t.Fatalf("NextN(4) over the end: %v", err)
	}
}

func TestIVStateFile(t *testing.T) {
	dir := t.TempDir()
	cfg := IVConfig{Path: filepath.Join(dir, "iv.state"), Block: 1000, Span: 100}
	used := map[uint64]bool{}
	last := uint64(0)
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
			c, err := lanes[i%2].Next()
			if err != nil {
				t.Fatal(err)
			}
			if used[c] || c <= last && i == 0 {
				t.Fatalf("proc %d: counter %d repeated or below the previous run", proc, c)
			}
			used[c] = true
		}
		if st := s.Stats(); st.Reservations != 3 {
			t.Fatalf("proc %d: %d reservations for 2500 counters in blocks of 1000", proc, st.Reservations)
		}
		for c := range used {
			last = max(last, c)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
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
	if c, _ := s.NewLane().Next(); c != 5000 {
		t.Fatalf("started at %d, want 5000", c)
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
		t.Errorf("%d stalls, want 0: Refill kept a spare range", st.Stalls)
	}
}
