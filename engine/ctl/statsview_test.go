package ctl

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/ctlmsg"
)

// fakeCache is a statsCache on a clock the test moves, whose collections
// the test counts and may hold.
type fakeCache struct {
	*statsCache
	mu      sync.Mutex
	now     time.Time
	slept   []time.Duration
	gen     atomic.Uint64 // the changes counted
	n       atomic.Int32
	entered chan struct{} // a collection started
	release chan struct{} // nil: collections end at once
}

func newFakeCache() *fakeCache {
	f := &fakeCache{now: time.Unix(1000, 0), entered: make(chan struct{}, 100)}
	f.statsCache = newStatsCache(func() (*statsSnap, error) {
		f.n.Add(1)
		f.entered <- struct{}{}
		if f.release != nil {
			<-f.release
		}
		return &statsSnap{st: &ctlmsg.Stats{}}, nil
	}, f.gen.Load)
	f.statsCache.now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	f.statsCache.sleep = func(d time.Duration) { f.advance(d); f.mu.Lock(); f.slept = append(f.slept, d); f.mu.Unlock() }
	return f
}

func (f *fakeCache) advance(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

// TestStatsConcurrentAskersOneCollection: askers that come while a
// collection runs, or soon after it, share it: the cores are read once.
func TestStatsConcurrentAskersOneCollection(t *testing.T) {
	f := newFakeCache()
	f.release = make(chan struct{})
	const askers = 16
	got := make(chan uint64, askers)
	ask := func() {
		s, err := f.get(0, 0)
		if err != nil {
			t.Error(err)
		}
		got <- s.seq
	}
	go ask()
	<-f.entered // the first asker collects; the others come meanwhile
	for range askers - 1 {
		go ask()
	}
	close(f.release)
	for range askers {
		if seq := <-got; seq != 1 {
			t.Errorf("an asker got snapshot %d, want 1", seq)
		}
	}
	if n := f.n.Load(); n != 1 {
		t.Fatalf("%d askers at once made %d collections, want 1", askers, n)
	}
}

// TestStatsSnapshotReuse: a snapshot younger than statsReuse answers
// every connection that has not had it; one that had it gets a new one,
// collected statsMinInterval or more after the previous began; an old
// snapshot answers nobody.
func TestStatsSnapshotReuse(t *testing.T) {
	f := newFakeCache()
	a, _ := f.get(0, 0) // connection A
	f.advance(statsReuse / 2)
	if b, _ := f.get(0, 0); b != a { // connection B, new: shares it
		t.Fatalf("a second asker within %v got snapshot %d, want %d", statsReuse, b.seq, a.seq)
	}
	// A again: not the same numbers twice. The next collection waits for
	// the spacing (none left here: statsReuse/2 has passed).
	a2, _ := f.get(a.seq, 0)
	if a2.seq != 2 || f.n.Load() != 2 {
		t.Fatalf("an asker that had snapshot %d got %d (%d collections)", a.seq, a2.seq, f.n.Load())
	}
	// A at once again: the new collection waits for the spacing.
	a3, _ := f.get(a2.seq, 0)
	if a3.seq != 3 || len(f.slept) != 1 || f.slept[0] != statsMinInterval {
		t.Fatalf("snapshot %d after sleeping %v, want 3 after %v", a3.seq, f.slept, statsMinInterval)
	}
	if d := a3.at.Sub(a2.at); d < statsMinInterval {
		t.Fatalf("collections %v apart, want at least %v", d, statsMinInterval)
	}
	// Too old for anyone.
	f.advance(statsReuse)
	if c, _ := f.get(0, 0); c.seq != 4 {
		t.Fatalf("a snapshot %v old was reused (got %d)", statsReuse, c.seq)
	}
}

// TestStatsSnapshotNotBeforeChange: a snapshot that began before a
// change the asker must see is not reused, however young; the one
// collected for it is, by askers that must see no more.
func TestStatsSnapshotNotBeforeChange(t *testing.T) {
	f := newFakeCache()
	a, _ := f.get(0, 0)
	f.gen.Store(1) // a change, done on the cores
	f.advance(statsMinInterval)
	if b, _ := f.get(0, 0); b != a {
		t.Fatalf("an asker that must see no change got snapshot %d, want %d", b.seq, a.seq)
	}
	b, _ := f.get(0, 1)
	if b.seq != 2 || b.gen != 1 || f.n.Load() != 2 {
		t.Fatalf("an asker that must see change 1 got snapshot %d of changes %d (%d collections)", b.seq, b.gen, f.n.Load())
	}
	if c, _ := f.get(0, 1); c != b {
		t.Fatalf("another asker that must see change 1 got snapshot %d, want %d", c.seq, b.seq)
	}
	// A change counted while a collection runs is not in it: the asker
	// waiting for it gets a new one.
	for len(f.entered) > 0 { // the collections so far
		<-f.entered
	}
	f.release = make(chan struct{})
	got := make(chan *statsSnap)
	go func() { s, _ := f.get(b.seq, 1); got <- s }()
	<-f.entered
	f.gen.Store(2)
	go func() { s, _ := f.get(0, 2); got <- s }()
	f.release <- struct{}{} // the first collection ends
	first := <-got
	<-f.entered
	f.release <- struct{}{}
	second := <-got
	if first.seq != 3 || first.gen != 1 || second.seq != 4 || second.gen != 2 {
		t.Fatalf("snapshots %d (changes %d) and %d (changes %d), want 3 (1) and 4 (2)", first.seq, first.gen, second.seq, second.gen)
	}
}

// TestStatsBucket: StatsBurst requests at once, then StatsRate a second.
func TestStatsBucket(t *testing.T) {
	var b bucket
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := b.take(now, 2, 3); !ok {
			t.Fatalf("request %d of a burst of 3 refused", i+1)
		}
	}
	ok, wait := b.take(now, 2, 3)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th request: %v, wait %v; want refused, 500ms", ok, wait)
	}
	if b.full(now.Add(time.Second), 2, 3) {
		t.Fatal("full after 1 s at 2 a second from empty")
	}
	if ok, _ := b.take(now.Add(500*time.Millisecond), 2, 3); !ok {
		t.Fatal("refused after the wait it was told")
	}
	if !b.full(now.Add(2*time.Second), 2, 3) {
		t.Fatal("not full 1.5 s after, at 2 a second")
	}
}
