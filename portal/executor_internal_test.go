package portal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
)

// These tests drive an Executor against a scripted engine (the fakeEngine
// of data_test.go on its own goroutine): every completion status can be
// chosen per chunk and attempt, so the retry policy is tested exactly.

// scripted answers each command with status(cmd, attempt) (attempt counts
// posts of the same remote offset from 1), unless hold is set: then it
// keeps the commands until release.
type scripted struct {
	fe     *fakeEngine
	status func(c abi.Command, attempt int) abi.Status

	mu       sync.Mutex
	attempts map[uint64]int // remote offset -> posts
	posted   []time.Time    // when each command was seen, in order
	cmds     []abi.Command
	hold     bool
	held     []abi.Command
	stop     chan struct{}
	stopped  chan struct{}
}

func startScripted(t *testing.T, fe *fakeEngine, status func(abi.Command, int) abi.Status) *scripted {
	s := &scripted{fe: fe, status: status, attempts: map[uint64]int{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go s.run()
	t.Cleanup(func() { close(s.stop); <-s.stopped })
	return s
}

func (s *scripted) run() {
	defer close(s.stopped)
	var queue []abi.Completion
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		cmds := s.fe.take()
		s.mu.Lock()
		for _, c := range cmds {
			s.attempts[c.RemoteOffset]++
			s.posted = append(s.posted, time.Now())
			s.cmds = append(s.cmds, c)
			if s.hold {
				s.held = append(s.held, c)
				continue
			}
			queue = append(queue, s.answer(c))
		}
		if !s.hold {
			for _, c := range s.held {
				queue = append(queue, s.answer(c))
			}
			s.held = nil
		}
		s.mu.Unlock()
		for len(queue) > 0 && s.fe.complete(queue[0]) {
			queue = queue[1:]
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// answer is called with mu held.
func (s *scripted) answer(c abi.Command) abi.Completion {
	st := s.status(c, s.attempts[c.RemoteOffset])
	cp := abi.Completion{Cookie: c.Cookie, Slot: c.Slot, Status: st, Op: c.Op, IssueDelayNs: 1000, TotalDelayNs: 5000}
	if st == abi.StatusOK {
		cp.Length = c.Length
	}
	return cp
}

func (s *scripted) setHold(h bool) {
	s.mu.Lock()
	s.hold = h
	s.mu.Unlock()
}

func (s *scripted) commands() []abi.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]abi.Command(nil), s.cmds...)
}

func fakeExecutor(t *testing.T, cfg ExecutorConfig, status func(abi.Command, int) abi.Status) (*Executor, *Region, *scripted) {
	t.Helper()
	p, fe, r := newTestPortal(t, 64, 64)
	if cfg.CC == (cc.Params{}) {
		cfg.CC = cc.DefaultParams()
		cfg.CC.CwndInit = 4 // the fake portal has 4 slots
	}
	e, err := NewExecutor(p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, r, startScripted(t, fe, status)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The executor splits a transfer into chunks of ChunkBytes at the right
// offsets, each posted exactly once when every completion is OK, with
// cookies that come back to it.
func TestExecutorChunksFake(t *testing.T) {
	e, r, s := fakeExecutor(t, ExecutorConfig{ChunkBytes: 1024}, func(abi.Command, int) abi.Status { return abi.StatusOK })
	if err := e.Read(ctxT(t), Transfer{
		Remote: peer, RemoteRegion: 0x10002, RemoteOffset: 1000, Key: testKd,
		Local: r, LocalOffset: 7, Length: 3*1024 + 5,
	}); err != nil {
		t.Fatal(err)
	}
	cmds := s.commands()
	if len(cmds) != 4 {
		t.Fatalf("%d commands, want 4", len(cmds))
	}
	seen := map[uint64]bool{}
	for _, c := range cmds {
		k := c.RemoteOffset - 1000
		want := uint32(1024)
		if k == 3*1024 {
			want = 5
		}
		if k%1024 != 0 || k > 3*1024 || seen[k] || c.Length != want || c.LocalOffset != 7+k || c.Op != abi.OpRead ||
			c.RemoteRegion != 0x10002 || c.RemoteAddr != 0x0a010203 || c.LocalRegion != r.ID() || c.Key != testKd {
			t.Errorf("unexpected command %+v", c)
		}
		seen[k] = true
	}
	if st := e.Stats(); st.Ops != 4 || st.Retries != 0 || st.Transfers != 1 || st.Failed != 0 || st.Stray != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// NACK and DISPATCH_TIMEOUT are retried after a backoff; the transfer then
// succeeds.
func TestExecutorCongestionRetriedFake(t *testing.T) {
	cfg := ExecutorConfig{BackoffBase: 2 * time.Millisecond, BackoffMax: 4 * time.Millisecond}
	e, r, s := fakeExecutor(t, cfg, func(c abi.Command, attempt int) abi.Status {
		switch {
		case c.RemoteOffset == 4096 && attempt == 1:
			return abi.StatusNack
		case c.RemoteOffset == 4096 && attempt == 2:
			return abi.StatusDispatchTimeout
		}
		return abi.StatusOK
	})
	if err := e.Write(ctxT(t), Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 8192}); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Nacks != 1 || st.DispatchTimeouts != 1 || st.Retries != 2 || st.Ops != 4 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Posts of offset 4096: the 2nd at least BackoffBase/2 after the 1st
	// (the NACK completed after the post), the 3rd at least BackoffBase
	// (2^1 · base, jittered over its upper half) after the 2nd.
	s.mu.Lock()
	var at []time.Time
	for i, c := range s.cmds {
		if c.RemoteOffset == 4096 {
			at = append(at, s.posted[i])
		}
	}
	s.mu.Unlock()
	if len(at) != 3 {
		t.Fatalf("offset 4096 posted %d times, want 3", len(at))
	}
	if d := at[1].Sub(at[0]); d < time.Millisecond {
		t.Errorf("retry after NACK %v after the post, want >= BackoffBase/2", d)
	}
	if d := at[2].Sub(at[1]); d < 2*time.Millisecond {
		t.Errorf("retry after the 2nd congestion signal %v after the post, want >= BackoffBase", d)
	}
}

// TIMEOUT is retried TimeoutRetries times, then the transfer fails with a
// ChunkError naming the chunk; the other chunks are not retried.
func TestExecutorTimeoutBoundedFake(t *testing.T) {
	for _, retries := range []int{-1, 3} {
		e, r, s := fakeExecutor(t, ExecutorConfig{TimeoutRetries: retries, ChunkBytes: 2048}, func(c abi.Command, attempt int) abi.Status {
			if c.RemoteOffset == 100+2*2048 {
				return abi.StatusTimeout
			}
			return abi.StatusOK
		})
		err := e.Read(ctxT(t), Transfer{
			Remote: peer, RemoteRegion: 0x10002, RemoteOffset: 100, Key: testKd,
			Local: r, LocalOffset: 50, Length: 3 * 2048,
		})
		var ce *ChunkError
		if !errors.As(err, &ce) || !errors.Is(err, ErrTimeout) {
			t.Fatalf("retries %d: %v", retries, err)
		}
		want := max(retries, 0) + 1
		if ce.Status != abi.StatusTimeout || ce.Attempts != want || ce.RemoteOffset != 100+2*2048 || ce.LocalOffset != 50+2*2048 ||
			ce.Length != 2048 || ce.Op != abi.OpRead || ce.Remote != peer || ce.Region != 0x10002 || ce.Transfer != 3*2048 || ce.Done != 2*2048 {
			t.Fatalf("retries %d: %+v", retries, ce)
		}
		for _, w := range []string{"READ", "TIMEOUT", "remote offset 4196", "local offset 4146", fmt.Sprint(want, " attempt")} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
		if n := len(s.commands()); n != 2+want {
			t.Fatalf("retries %d: %d commands, want %d", retries, n, 2+want)
		}
	}
}

// Refusals fail the transfer at once (one attempt), with the status's
// sentinel; MaxAttempts bounds congestion retries.
func TestExecutorRefusalsFake(t *testing.T) {
	for _, tt := range []struct {
		st   abi.Status
		want error
	}{
		{abi.StatusRemoteAuthFailure, ErrRemoteAuth},
		{abi.StatusRemoteBounds, ErrRemoteAccess},
		{abi.StatusRemoteRegion, ErrRemoteAccess},
		{abi.StatusRemotePermission, ErrRemoteAccess},
		{abi.StatusLocalPermission, ErrLocalAccess},
		{abi.StatusLocalBounds, ErrLocalAccess},
		{abi.StatusUnreachable, ErrUnreachable},
		{abi.StatusAborted, ErrAborted},
		{abi.StatusBadCommand, ErrBadCommand},
		{abi.Status(60), ErrBadCommand},
	} {
		e, r, s := fakeExecutor(t, ExecutorConfig{}, func(c abi.Command, attempt int) abi.Status { return tt.st })
		err := e.Read(ctxT(t), Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 4096})
		var ce *ChunkError
		if !errors.As(err, &ce) || !errors.Is(err, tt.want) || ce.Status != tt.st || ce.Attempts != 1 {
			t.Errorf("%v: %v", tt.st, err)
			continue
		}
		for _, other := range []error{ErrRemoteAuth, ErrTimeout, ErrCongestion, ErrRemoteAccess, ErrLocalAccess, ErrUnreachable, ErrAborted, ErrBadCommand} {
			if other != tt.want && errors.Is(err, other) {
				t.Errorf("%v matches %v too", tt.st, other)
			}
		}
		if n := len(s.commands()); n != 1 {
			t.Errorf("%v: %d posts, want 1", tt.st, n)
		}
	}
	e, r, s := fakeExecutor(t, ExecutorConfig{MaxAttempts: 5, BackoffBase: time.Microsecond, BackoffMax: 10 * time.Microsecond},
		func(abi.Command, int) abi.Status { return abi.StatusNack })
	err := e.Read(ctxT(t), Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 4096})
	var ce *ChunkError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCongestion) || ce.Status != abi.StatusNack || ce.Attempts != 5 || len(s.commands()) != 5 {
		t.Fatalf("NACK for ever with MaxAttempts 5: %v (%d posts)", err, len(s.commands()))
	}
}

// A cancelled transfer returns ctx's error, but only once its ops in
// flight have completed (their ranges belong to the engine until then).
// A completion that names no op of the executor is counted and ignored.
func TestExecutorCancelWaitsForInFlightFake(t *testing.T) {
	e, r, s := fakeExecutor(t, ExecutorConfig{}, func(abi.Command, int) abi.Status { return abi.StatusOK })
	s.setHold(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.Read(ctx, Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 8192})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.commands()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if len(s.commands()) != 2 {
		t.Fatalf("%d commands posted, want 2", len(s.commands()))
	}
	// A stray completion: a cookie the executor never issued.
	s.mu.Lock()
	ok := s.fe.complete(abi.Completion{Cookie: 0xdead_0000_0003, Slot: 999, Status: abi.StatusOK})
	s.mu.Unlock()
	if !ok {
		t.Fatal("completion ring full")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("returned %v with 2 ops in flight", err)
	case <-time.After(30 * time.Millisecond):
	}
	s.setHold(false)
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	if st := e.Stats(); st.Stray != 1 || st.Failed != 1 || st.Ops != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Still usable.
	if err := e.Read(ctxT(t), Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 100}); err != nil {
		t.Fatal(err)
	}
}

func TestExecutorConfigValidate(t *testing.T) {
	good := DefaultExecutorConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*ExecutorConfig){
		"ChunkBytes":   func(c *ExecutorConfig) { c.ChunkBytes = abi.MaxOpBytes + 1 },
		"BackoffMax":   func(c *ExecutorConfig) { c.BackoffMax = c.BackoffBase - 1 },
		"BackoffBase":  func(c *ExecutorConfig) { c.BackoffBase = -1 },
		"Slots":        func(c *ExecutorConfig) { c.Slots = -1 },
		"SpinWait":     func(c *ExecutorConfig) { c.SpinWait = -1 },
		"ShortHold":    func(c *ExecutorConfig) { c.ShortHold = -1 },
		"ShortHoldMax": func(c *ExecutorConfig) { c.ShortHoldMax = 2 * time.Second },
		"AI":           func(c *ExecutorConfig) { c.CC.AI = 0 },
	} {
		c := DefaultExecutorConfig()
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Zero values take the defaults.
	if c := (ExecutorConfig{}).withDefaults(); c != DefaultExecutorConfig() {
		t.Fatalf("zero config with defaults %+v", c)
	}
}

// Two transfers share the slots round-robin: once both are running, their
// posts alternate (neither gets ahead by more than the slots' worth).
func TestExecutorRoundRobinFake(t *testing.T) {
	e, r, s := fakeExecutor(t, ExecutorConfig{ChunkBytes: 128}, func(abi.Command, int) abi.Status { return abi.StatusOK })
	const bRemote = 1 << 20
	s.setHold(true)
	errs := make(chan error, 2)
	go func() {
		errs <- e.Read(ctxT(t), Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 4096})
	}()
	for len(s.commands()) < 4 { // all 4 slots busy with A
		time.Sleep(100 * time.Microsecond)
	}
	go func() {
		errs <- e.Read(ctxT(t), Transfer{
			Remote: peer, RemoteRegion: 0x10002, RemoteOffset: bRemote, Key: testKd,
			Local: r, LocalOffset: 4096, Length: 4096,
		})
	}()
	time.Sleep(5 * time.Millisecond) // B is queued behind A's ops
	s.setHold(false)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var a, b, firstB, d0 int
	cmds := s.commands()
	for i, c := range cmds {
		if c.RemoteOffset >= bRemote {
			if b == 0 {
				firstB, d0 = i, a
			}
			b++
		} else {
			a++
		}
		// From B's first post on, A stays d0 posts ahead, give or take one.
		if b > 0 && a < 32 && b < 32 {
			if d := (a - d0) - b; d > 1 || d < -1 {
				t.Fatalf("post %d: A %d, B %d: not round-robin (%v)", i, a, b, cmds[firstB:i+1])
			}
		}
	}
	if a != 32 || b != 32 || d0 > 4+4 {
		t.Fatalf("A %d, B %d posts, B first at %d", a, b, firstB)
	}
}

// ShortFirst: while a one-chunk transfer is in progress, and for
// ShortHold after it, a long transfer keeps at most ShortFirst ops in
// flight; the short transfer's op takes the first free slot.
func TestExecutorShortFirstFake(t *testing.T) {
	const hold = 30 * time.Millisecond
	e, r, s := fakeExecutor(t, ExecutorConfig{ChunkBytes: 128, ShortFirst: 2, ShortHold: hold}, func(abi.Command, int) abi.Status { return abi.StatusOK })
	// A failed test must not leave ops held: the scripted engine stops
	// before the executor's Close would run (cleanups run last first).
	t.Cleanup(func() { s.setHold(false); e.Close() })
	const bRemote = 1 << 20
	waitCmds := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(s.commands()) < n; time.Sleep(50 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d commands posted, want %d", len(s.commands()), n)
			}
		}
	}
	// completeHeld answers the held command at remote offset off.
	completeHeld := func(off uint64) {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, c := range s.held {
			if c.RemoteOffset == off {
				s.held = append(s.held[:i], s.held[i+1:]...)
				if !s.fe.complete(s.answer(c)) {
					t.Fatal("completion ring full")
				}
				return
			}
		}
		t.Fatalf("no held command at remote offset %d", off)
	}
	quiet := func(n int, d time.Duration, what string) {
		t.Helper()
		time.Sleep(d)
		if got := len(s.commands()); got != n {
			t.Fatalf("%s: %d commands posted, want %d: %v", what, got, n, s.commands()[n:])
		}
	}
	s.setHold(true)
	errs := make(chan error, 2)
	go func() {
		errs <- e.Read(ctxT(t), Transfer{Remote: peer, RemoteRegion: 0x10002, Key: testKd, Local: r, Length: 4096})
	}()
	waitCmds(4) // the long transfer fills the 4 slots
	go func() {
		errs <- e.Read(ctxT(t), Transfer{
			Remote: peer, RemoteRegion: 0x10002, RemoteOffset: bRemote, Key: testKd,
			Local: r, LocalOffset: 4096, Length: 100,
		})
	}()
	quiet(4, 5*time.Millisecond, "no free slot")
	completeHeld(0) // a slot frees: the short op takes it
	waitCmds(5)
	if c := s.commands()[4]; c.RemoteOffset != bRemote {
		t.Fatalf("5th post %+v, want the short transfer's", c)
	}
	completeHeld(128) // the long one is down to 2 in flight: at its cap
	quiet(5, 5*time.Millisecond, "long transfer at its cap while the short one runs")
	completeHeld(bRemote) // the short one finishes: the cap holds for ShortHold
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	finished := time.Now()
	quiet(5, hold/3, "within ShortHold")
	waitCmds(6) // then the long transfer takes its window again
	if waited := time.Since(finished); waited < hold*9/10 {
		t.Fatalf("long transfer posted %v after the short one finished, ShortHold is %v", waited, hold)
	}
	s.setHold(false)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if c := s.commands(); len(c) != 32+1 {
		t.Fatalf("%d posts, want 33", len(c))
	}
}

// The hold after a short transfer follows how often short transfers
// start: shortHoldGaps mean gaps, within ShortHold..ShortHoldMax.
func TestExecutorShortHoldFollowsGaps(t *testing.T) {
	const us = int64(time.Microsecond)
	for _, tc := range []struct {
		name     string
		hold     time.Duration
		holdMax  time.Duration
		gapUs    []int64 // gaps between short starts
		wantHold int64
	}{
		{"one short: ShortHold", 50 * time.Microsecond, time.Millisecond, nil, 50 * us},
		{"every 100 us", 50 * time.Microsecond, time.Millisecond, []int64{100, 100, 100}, 400 * us},
		{"capped by ShortHoldMax", 50 * time.Microsecond, 300 * time.Microsecond, []int64{100, 100}, 300 * us},
		{"no less than ShortHold", 50 * time.Microsecond, time.Millisecond, []int64{5, 5}, 50 * us},
		{"ShortHoldMax below ShortHold", 50 * time.Microsecond, 10 * time.Microsecond, []int64{100}, 50 * us},
		{"the mean moves an eighth", 0, time.Second, []int64{100, 900}, 4 * (100 + 800/8) * us},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Executor{cfg: ExecutorConfig{ShortHold: tc.hold, ShortHoldMax: tc.holdMax}}
			now := 1000 * us
			e.shortStarted(now)
			for _, g := range tc.gapUs {
				now += g * us
				e.shortStarted(now)
			}
			if got := e.shortHold(); got != tc.wantHold {
				t.Fatalf("hold %v, want %v", time.Duration(got), time.Duration(tc.wantHold))
			}
		})
	}
}
