package ctl_test

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/portal"
)

// slowExec runs the control server's closures on the core late once
// armed, as a busy engine's loop may: what the server does before and
// after them shows.
type slowExec struct {
	inner ctl.Executor
	slow  atomic.Bool
}

func (s *slowExec) Exec(fn func(c *engine.Core)) error {
	if s.slow.Load() {
		time.Sleep(50 * time.Millisecond)
	}
	return s.inner.Exec(fn)
}

// The server closes an application's connection only after the core let
// go of its portal: the moment the application sees the hang-up, its
// slots and regions are already back, so nothing more is written into its
// rings or regions (the portal then reports its ops in flight failed).
func TestServerCloseReclaimsBeforeHangUp(t *testing.T) {
	ecfg := engineConfig()
	ecfg.LocalIP = engineIP
	drv, err := newLoopDriver(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Stop()
	slow := &slowExec{inner: drv}
	cfg := ctl.DefaultConfig()
	cfg.Sockets[0].Path = filepath.Join(t.TempDir(), "rmad.sock")
	srv, err := ctl.Listen(cfg, drv.g, []ctl.Executor{slow}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close()
	slotsInUse := func() uint64 {
		var st engine.Stats
		if err := drv.Exec(func(c *engine.Core) { st = c.Stats() }); err != nil {
			t.Fatal(err)
		}
		return st.SlotsInUse
	}

	p, err := portal.Dial(cfg.Sockets[0].Path, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.AllocSlots(7); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RegisterRegion(4096, abi.PermAll); err != nil {
		t.Fatal(err)
	}
	if got := slotsInUse(); got != 7 {
		t.Fatalf("SlotsInUse = %d, want 7", got)
	}
	slow.slow.Store(true) // the reclaim takes 50 ms more
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	deadline := time.Now().Add(5 * time.Second)
	for p.Gone() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the portal never saw its connection close")
		}
		time.Sleep(50 * time.Microsecond)
	}
	if got := slotsInUse(); got != 0 {
		t.Fatalf("SlotsInUse = %d when the application saw the hang-up, want 0", got)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := p.Gone(); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("Gone() = %v", err)
	}
}
