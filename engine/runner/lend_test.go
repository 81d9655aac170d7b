package runner_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/enginetest"
	"golang.org/x/sys/unix"
)

// watchPort is a port that receives nothing and records whether the loop
// iterates (between Recv and Flush) while a closure it watches runs.
type watchPort struct {
	buf     []byte
	inIter  atomic.Bool
	running atomic.Int32 // closures running (the test's)
	beside  atomic.Int64 // iterations started while one ran
	iters   atomic.Int64
}

func (p *watchPort) Buffer() []byte { return p.buf }
func (p *watchPort) Send(int)       {}
func (p *watchPort) Recv() [][]byte {
	if p.running.Load() != 0 {
		p.beside.Add(1)
	}
	p.inIter.Store(true)
	p.iters.Add(1)
	return nil
}
func (p *watchPort) Flush() { p.inIter.Store(false) }

// closure marks a closure running on p's core for the test's checks; it
// reports whether an iteration was under way when it started.
func (p *watchPort) closure(body func()) (inIteration bool) {
	p.running.Add(1)
	inIteration = p.inIter.Load()
	body()
	p.running.Add(-1)
	return inIteration
}

// newWatched starts a runner of cfg over a watchPort; it is stopped at
// cleanup. It returns the loop's thread id too.
func newWatched(t *testing.T, cfg runner.Config) (*runner.Runner, *watchPort, int) {
	t.Helper()
	p := &watchPort{buf: make([]byte, engine.MaxFrameBytes)}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, p)
	if err != nil {
		t.Fatal(err)
	}
	var tid atomic.Int64
	cfg.ThreadStart = func() error { tid.Store(int64(unix.Gettid())); return nil }
	r, err := runner.New(core, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return r, p, int(tid.Load())
}

// TestLendRunsOnCaller: a loop asleep in Backoff with Lend runs an Exec's
// closure on the caller's thread, without waking: no iteration runs for
// it, and the Execs counter counts it.
func TestLendRunsOnCaller(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.Lend = true
	cfg.IdleSpins, cfg.MinSleep, cfg.MaxSleep = 0, time.Second, time.Second
	r, p, loopTid := newWatched(t, cfg)
	enginetest.Eventually(t, "the first sleep", func() bool { return r.Stats().IdleSleeps > 0 })
	time.Sleep(10 * time.Millisecond) // well inside the 1 s sleep
	iters, execs := p.iters.Load(), r.Stats().Execs
	for range 10 {
		var tid int
		var cfgSeen engine.Config
		if err := r.Exec(func(c *engine.Core) { tid, cfgSeen = unix.Gettid(), c.Config() }); err != nil {
			t.Fatal(err)
		}
		if tid == loopTid || cfgSeen.UDPPort != engine.DefaultConfig().UDPPort {
			t.Fatalf("lent closure ran on thread %d (the loop's: %d), saw UDP port %d", tid, loopTid, cfgSeen.UDPPort)
		}
	}
	if got := p.iters.Load(); got != iters {
		t.Errorf("%d iterations during 10 lent closures, want none (the loop sleeps 1 s)", got-iters)
	}
	if got := r.Stats().Execs; got != execs+10 {
		t.Errorf("Execs %d, want %d", got, execs+10)
	}
}

// TestLendNeverBesideIteration: with many callers of Exec and a loop that
// sleeps, wakes and iterates all the time, no closure, lent or run by the
// loop, ever runs beside an iteration or beside another closure.
func TestLendNeverBesideIteration(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.Lend = true
	cfg.IdleSpins, cfg.MinSleep, cfg.MaxSleep = 0, time.Microsecond, 20*time.Microsecond
	r, p, loopTid := newWatched(t, cfg)
	var (
		wg              sync.WaitGroup
		lent, loop, bad atomic.Int64
		overlap         atomic.Int64
		deadline        = time.Now().Add(300 * time.Millisecond)
		callers         = 4
		failed          = make(chan error, callers)
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				err := r.Exec(func(*engine.Core) {
					if p.running.Load() != 0 {
						overlap.Add(1)
					}
					in := p.closure(func() {
						if (n+i)%7 == 0 {
							time.Sleep(50 * time.Microsecond) // past the loop's sleep: it wakes, waits
						}
					})
					if in {
						bad.Add(1)
					}
					if unix.Gettid() == loopTid {
						loop.Add(1)
					} else {
						lent.Add(1)
					}
				})
				if err != nil {
					failed <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	if bad.Load() != 0 || p.beside.Load() != 0 || overlap.Load() != 0 {
		t.Fatalf("closures started in an iteration %d times, iterations started beside a closure %d times, closures overlapped %d times",
			bad.Load(), p.beside.Load(), overlap.Load())
	}
	if lent.Load() == 0 || p.iters.Load() < 100 {
		t.Fatalf("%d closures lent the core, %d run by the loop, %d iterations: the test exercised too little", lent.Load(), loop.Load(), p.iters.Load())
	}
	t.Logf("%d closures lent, %d run by the loop, %d iterations", lent.Load(), loop.Load(), p.iters.Load())
}

// TestLendHoldsOffLoopAndStop: while a lent closure runs, the loop does
// not iterate even when its sleep ends, and Stop waits for the closure;
// the loop then goes on (iterates) until it stops.
func TestLendHoldsOffLoopAndStop(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.Lend = true
	cfg.IdleSpins, cfg.MinSleep, cfg.MaxSleep = 0, 100*time.Microsecond, 100*time.Microsecond
	r, p, loopTid := newWatched(t, cfg)
	enginetest.Eventually(t, "the first sleep", func() bool { return r.Stats().IdleSleeps > 0 })
	release, inside := make(chan struct{}), make(chan int64)
	execDone := make(chan error)
	go func() {
		for { // until a closure is lent the core (the loop may be awake)
			lentTo := false
			err := r.Exec(func(*engine.Core) {
				if lentTo = unix.Gettid() != loopTid; lentTo {
					p.closure(func() {
						inside <- p.iters.Load()
						<-release
					})
				}
			})
			if err != nil || lentTo {
				execDone <- err
				return
			}
		}
	}()
	before := <-inside
	time.Sleep(20 * time.Millisecond) // 200 of the loop's sleeps
	if got := p.iters.Load(); got != before {
		t.Fatalf("%d iterations while a closure held the core", got-before)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a closure held the core", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-execDone; err != nil {
		t.Fatalf("Exec of the closure that held the core: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if p.beside.Load() != 0 {
		t.Fatalf("%d iterations beside a closure", p.beside.Load())
	}
}

// TestLendLoopNeverStuck: however a caller's hand-back and the loop's
// waking interleave, the loop goes on iterating once the callers stop:
// nothing but a closure holds it.
func TestLendLoopNeverStuck(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.Lend = true
	cfg.IdleSpins, cfg.MinSleep, cfg.MaxSleep = 0, time.Microsecond, 2*time.Microsecond
	r, p, _ := newWatched(t, cfg)
	for burst := 0; burst < 300; burst++ {
		for range 20 {
			if err := r.Exec(func(*engine.Core) {}); err != nil {
				t.Fatal(err)
			}
		}
		before := p.iters.Load()
		deadline := time.Now().Add(time.Second)
		for p.iters.Load() < before+2 {
			if time.Now().After(deadline) {
				t.Fatalf("burst %d: the loop did not iterate for 1 s after the callers stopped (state stuck)", burst)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// TestExecLongClosure: a caller whose closure the loop runs waits until
// it has run, however long it takes, on loops of every mode; without
// Lend it runs on the loop's thread.
func TestExecLongClosure(t *testing.T) {
	for _, mode := range []runner.Mode{runner.Busy, runner.Backoff, runner.Yield} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := runner.DefaultConfig()
			cfg.Mode = mode
			r, _, loopTid := newWatched(t, cfg)
			start := time.Now()
			var tid int
			ran := false
			if err := r.Exec(func(*engine.Core) {
				tid = unix.Gettid()
				time.Sleep(35 * time.Millisecond)
				ran = true
			}); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); !ran || d < 35*time.Millisecond {
				t.Fatalf("Exec returned after %v, closure ran: %v", d, ran)
			}
			if tid != loopTid {
				t.Fatalf("the closure ran on thread %d, not the loop's %d (Lend is off)", tid, loopTid)
			}
		})
	}
}
