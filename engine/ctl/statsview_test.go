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
	})
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
		s, err := f.get(0)
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
	a, _ := f.get(0) // connection A
	f.advance(statsReuse / 2)
	if b, _ := f.get(0); b != a { // connection B, new: shares it
		t.Fatalf("a second asker within %v got snapshot %d, want %d", statsReuse, b.seq, a.seq)
	}
	// A again: not the same numbers twice. The next collection waits for
	// the spacing (none left here: statsReuse/2 has passed).
	a2, _ := f.get(a.seq)
	if a2.seq != 2 || f.n.Load() != 2 {
		t.Fatalf("an asker that had snapshot %d got %d (%d collections)", a.seq, a2.seq, f.n.Load())
	}
	// A at once again: the new collection waits for the spacing.
	a3, _ := f.get(a2.seq)
	if a3.seq != 3 || len(f.slept) != 1 || f.slept[0] != statsMinInterval {
		t.Fatalf("snapshot %d after sleeping %v, want 3 after %v", a3.seq, f.slept, statsMinInterval)
	}
	if d := a3.at.Sub(a2.at); d < statsMinInterval {
		t.Fatalf("collections %v apart, want at least %v", d, statsMinInterval)
	}
	// Too old for anyone.
	f.advance(statsReuse)
	if c, _ := f.get(0); c.seq != 4 {
		t.Fatalf("a snapshot %v old was reused (got %d)", statsReuse, c.seq)
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
