package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/enginetest"
	"golang.org/x/sys/unix"
)

// newRunner builds a core on one end of a memport pair and a runner for it;
// the other end is returned for the test to drive. The runner is stopped
// at cleanup.
func newRunner(t *testing.T, cfg runner.Config) (*runner.Runner, *memport.Port) {
	t.Helper()
	a, b, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(core, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return r, b
}

func TestExec(t *testing.T) {
	for _, c := range []struct {
		mode runner.Mode
		spin time.Duration
	}{{runner.Busy, 0}, {runner.Busy, 50 * time.Microsecond}, {runner.Backoff, 0}, {runner.Yield, 0}} {
		mode, name := c.mode, c.mode.String()
		if c.spin > 0 {
			name += "/spin"
		}
		t.Run(name, func(t *testing.T) {
			cfg := runner.DefaultConfig()
			cfg.Mode, cfg.ExecSpin = mode, c.spin
			r, _ := newRunner(t, cfg)
			if err := r.Exec(func(*engine.Core) {}); !errors.Is(err, runner.ErrNotStarted) {
				t.Fatalf("Exec before Start = %v, want ErrNotStarted", err)
			}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(); !errors.Is(err, runner.ErrStarted) {
				t.Errorf("second Start = %v, want ErrStarted", err)
			}
			var got engine.Config
			ran := false
			if err := r.Exec(func(c *engine.Core) { got, ran = c.Config(), true }); err != nil {
				t.Fatal(err)
			}
			if !ran || got.UDPPort != engine.DefaultConfig().UDPPort {
				t.Fatalf("Exec returned before fn ran (ran=%v)", ran)
			}
			// A closure that outlasts ExecSpin: its caller blocks, and
			// returns after it.
			ran = false
			if err := r.Exec(func(*engine.Core) { time.Sleep(4 * c.spin); ran = true }); err != nil || !ran {
				t.Fatalf("Exec of a long closure = %v, returned before it ran: %v", err, !ran)
			}
			// Many concurrent callers: each closure runs exactly once.
			var n atomic.Int64
			errs := make(chan error, 100)
			for range 100 {
				go func() { errs <- r.Exec(func(*engine.Core) { n.Add(1) }) }()
			}
			for range 100 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if n.Load() != 100 {
				t.Fatalf("%d closures ran, want 100", n.Load())
			}
			enginetest.Eventually(t, "Execs counter", func() bool { return r.Stats().Execs >= 101 })
			if mode == runner.Yield {
				enginetest.Eventually(t, "idle yields", func() bool { return r.Stats().Yields > 0 })
			}
		})
	}
}

func TestStop(t *testing.T) {
	r, _ := newRunner(t, runner.DefaultConfig())
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if err := r.Exec(func(*engine.Core) { t.Error("closure ran after Stop") }); !errors.Is(err, runner.ErrStopped) {
		t.Errorf("Exec after Stop = %v, want ErrStopped", err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v", err)
	}
}

func TestStopBeforeStart(t *testing.T) {
	r, _ := newRunner(t, runner.DefaultConfig())
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err == nil {
		t.Error("Start after Stop succeeded")
	}
	if err := r.Exec(func(*engine.Core) {}); !errors.Is(err, runner.ErrStopped) {
		t.Errorf("Exec = %v, want ErrStopped", err)
	}
}

// TestStopUnblocksExec: Execs racing with Stop either run or return
// ErrStopped; none hangs.
func TestStopUnblocksExec(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.ExecQueue = 1
	r, _ := newRunner(t, cfg)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 50)
	for range 50 {
		go func() { errs <- r.Exec(func(*engine.Core) { time.Sleep(100 * time.Microsecond) }) }()
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if err := <-errs; err != nil && !errors.Is(err, runner.ErrStopped) {
			t.Fatal(err)
		}
	}
}

func TestBackoffSleepsWhenIdle(t *testing.T) {
	r, _ := newRunner(t, runner.DefaultConfig())
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "idle sleeps", func() bool { return r.Stats().IdleSleeps > 10 })
	s := r.Stats()
	if s.SleptNs == 0 || s.Iterations < s.IdleSleeps {
		t.Errorf("stats %+v", s)
	}
}

func TestBusyNeverSleeps(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.Mode = runner.Busy
	r, _ := newRunner(t, cfg)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "iterations", func() bool { return r.Stats().Iterations > 10000 })
	if s := r.Stats(); s.IdleSleeps != 0 {
		t.Errorf("busy loop slept: %+v", s)
	}
}

// TestExecWakesSleeper: a loop sleeping up to 1 s runs an Exec at once.
func TestExecWakesSleeper(t *testing.T) {
	cfg := runner.DefaultConfig()
	cfg.IdleSpins, cfg.MinSleep, cfg.MaxSleep = 0, time.Second, time.Second
	r, _ := newRunner(t, cfg)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the first sleep", func() bool { return r.Stats().IdleSleeps > 0 })
	time.Sleep(10 * time.Millisecond) // well inside the 1 s sleep
	start := time.Now()
	if err := r.Exec(func(*engine.Core) {}); err != nil {
		t.Fatal(err)
	}
	// Functional bound, not a performance claim: without the wake-up the
	// Exec would wait for the rest of the 1 s sleep.
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Exec on a sleeping loop took %v", d)
	}
	start = time.Now()
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Stop of a sleeping loop took %v", d)
	}
}

// TestFramesReachCore: frames sent on the other end of the pair are handed
// to the core.
func TestFramesReachCore(t *testing.T) {
	r, peer := newRunner(t, runner.DefaultConfig())
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	const frames = 100
	for i := 0; i < frames; {
		b := peer.Buffer()
		if b == nil {
			peer.Flush()
			peer.Recv()
			continue
		}
		clear(b[:60])
		peer.Send(60) // junk: the core drops it, the runner counts it
		i++
	}
	peer.Flush()
	enginetest.Eventually(t, "frames received", func() bool { return r.Stats().RxFrames == frames })
}

// TestThreadHooks: ThreadStart, every Exec and ThreadExit run on the same
// locked OS thread.
func TestThreadHooks(t *testing.T) {
	var startTid, exitTid atomic.Int64
	cfg := runner.DefaultConfig()
	cfg.ThreadStart = func() error { startTid.Store(int64(unix.Gettid())); return nil }
	cfg.ThreadExit = func() { exitTid.Store(int64(unix.Gettid())) }
	r, _ := newRunner(t, cfg)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		var tid int
		if err := r.Exec(func(*engine.Core) { tid = unix.Gettid() }); err != nil {
			t.Fatal(err)
		}
		if int64(tid) != startTid.Load() {
			t.Fatalf("Exec ran on thread %d, ThreadStart on %d", tid, startTid.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exitTid.Load() != startTid.Load() {
		t.Errorf("ThreadExit on thread %d, ThreadStart on %d", exitTid.Load(), startTid.Load())
	}
}

func TestThreadStartError(t *testing.T) {
	boom := errors.New("boom")
	cfg := runner.DefaultConfig()
	cfg.ThreadStart = func() error { return boom }
	r, _ := newRunner(t, cfg)
	if err := r.Start(); !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want boom", err)
	}
	if err := r.Exec(func(*engine.Core) {}); !errors.Is(err, runner.ErrStopped) {
		t.Errorf("Exec = %v, want ErrStopped", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*runner.Config){
		func(c *runner.Config) { c.Mode = 7 },
		func(c *runner.Config) { c.IdleSpins = -1 },
		func(c *runner.Config) { c.MinSleep = 0 },
		func(c *runner.Config) { c.MaxSleep = c.MinSleep / 2 },
		func(c *runner.Config) { c.MaxSleep = 2 * time.Second },
		func(c *runner.Config) { c.ExecQueue = 0 },
		func(c *runner.Config) { c.StallThreshold = -1 },
	}
	for i, mutate := range bad {
		c := runner.DefaultConfig()
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, runner.ErrConfig) {
			t.Errorf("case %d: Validate(%+v) = %v, want ErrConfig", i, c, err)
		}
	}
	c := runner.DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if _, err := runner.New(nil, nil, c); err == nil {
		t.Error("New(nil, nil) succeeded")
	}
}

func TestMonotonic(t *testing.T) {
	a := runner.Monotonic()
	b := runner.Monotonic()
	if a < int64(time.Second) || b < a {
		t.Errorf("Monotonic() = %d then %d", a, b)
	}
}

// TestStalls: a gap between iterations longer than StallThreshold beyond
// the sleep asked for counts as a stall, with its length: a clock that
// jumps 50 ms (busy), and an Exec that holds the loop for 30 ms (backoff,
// which also sleeps between iterations: the sleeps are not stalls).
func TestStalls(t *testing.T) {
	t.Run("clock", func(t *testing.T) {
		var n, jump atomic.Int64
		cfg := runner.DefaultConfig()
		cfg.Mode = runner.Busy
		cfg.Clock = func() int64 { return int64(time.Second) + n.Add(1000) + jump.Load() }
		r, _ := newRunner(t, cfg)
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, "iterations", func() bool { return r.Stats().Iterations > 1000 })
		if s := r.Stats(); s.Stalls != 0 {
			t.Fatalf("stalls without a gap: %+v", s)
		}
		jump.Store(int64(50 * time.Millisecond))
		enginetest.Eventually(t, "the stall", func() bool { return r.Stats().Stalls > 0 })
		time.Sleep(10 * time.Millisecond)
		if s := r.Stats(); s.Stalls != 1 || s.StalledNs < uint64(50*time.Millisecond) || s.StalledNs > uint64(51*time.Millisecond) {
			t.Fatalf("want one stall of 50 ms: %+v", s)
		}
	})
	t.Run("exec", func(t *testing.T) {
		r, _ := newRunner(t, runner.DefaultConfig())
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, "idle sleeps", func() bool { return r.Stats().IdleSleeps > 10 })
		before := r.Stats()
		if err := r.Exec(func(*engine.Core) { time.Sleep(30 * time.Millisecond) }); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, "the stall", func() bool { return r.Stats().Stalls > before.Stalls })
		if s := r.Stats(); s.StalledNs-before.StalledNs < uint64(30*time.Millisecond) {
			t.Fatalf("stall shorter than the 30 ms the loop was held: %+v, before %+v", s, before)
		}
	})
	t.Run("off", func(t *testing.T) {
		var n, jump atomic.Int64
		cfg := runner.DefaultConfig()
		cfg.Mode, cfg.StallThreshold = runner.Busy, 0
		cfg.Clock = func() int64 { return int64(time.Second) + n.Add(1000) + jump.Load() }
		r, _ := newRunner(t, cfg)
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		jump.Store(int64(50 * time.Millisecond))
		enginetest.Eventually(t, "iterations", func() bool { return r.Stats().Iterations > 1000 })
		if s := r.Stats(); s.Stalls != 0 {
			t.Fatalf("stall detection off, yet: %+v", s)
		}
	})
}
