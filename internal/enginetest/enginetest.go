// Package enginetest starts a real engine in the test's own process: one
// engine core (engine/runner) over an engine/port/memport loopback port, which
// a test may wrap (to drop or reorder frames), or several cores
// (Opts.Cores) over memport's steered loopback, served by engine/ctl on a
// unix socket, so that a portal talks to it exactly as to rmad. Tests of
// packages that must not link the engine themselves (portal) and tests of
// port wrappers (engine/port/faultport) share it.
package enginetest

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
)

// IP is the engine's address unless Opts.Engine sets another.
var IP = netip.MustParseAddr("10.7.0.1")

// Opts adjust the engine Start runs; nil fields keep the defaults.
type Opts struct {
	Engine func(*engine.Config)            // core config, after Start's defaults
	Ctl    func(*ctl.Config)               // control server config
	Port   func(*memport.Port) runner.Port // wraps the loopback port (one core only)
	// Cores is the number of polling cores (0: one), each on its own
	// runner over its queue of memport.Steered.
	Cores int
}

// Engine is a running in-process engine.
type Engine struct {
	Socket  string           // its control socket
	Runner  *runner.Runner   // core 0's: Exec reads the core's (or a wrapper's) state on the loop
	Runners []*runner.Runner // every core's, by core
	Group   *engine.Group    // the engine's cores
	Server  *ctl.Server      // its control server (Stats: the stats reply)
	once    sync.Once
}

// Start starts an engine (LocalIP IP; 64 slots, 32 regions, 4 portals; a
// volatile IV source) and stops it when the test ends.
func Start(t testing.TB, o Opts) *Engine {
	t.Helper()
	e, err := New(o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// New starts an engine as Start does, its control socket in dir (unless
// Opts.Ctl sets another path), for callers that have no testing.TB (a
// runnable example). Close stops it.
func New(o Opts, dir string) (*Engine, error) {
	ecfg := engine.DefaultConfig()
	ecfg.LocalIP = IP
	ecfg.Slots, ecfg.Regions, ecfg.Portals = 64, 32, 4
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	if o.Engine != nil {
		o.Engine(&ecfg)
	}
	var ports []runner.Port
	if o.Cores > 1 {
		if o.Port != nil {
			return nil, errors.New("enginetest: Opts.Port wraps the one core's port")
		}
		sp, err := memport.Steered(memport.Config{Frames: 128, FrameBytes: engine.MaxFrameBytes, Burst: 32}, o.Cores, ecfg.UDPPort)
		if err != nil {
			return nil, err
		}
		for _, p := range sp {
			ports = append(ports, p)
		}
	} else {
		mp, err := memport.Loopback(memport.DefaultConfig())
		if err != nil {
			return nil, err
		}
		var port runner.Port = mp
		if o.Port != nil {
			port = o.Port(mp)
		}
		ports = append(ports, port)
	}
	txs := make([]engine.Tx, len(ports))
	for i, p := range ports {
		txs[i] = p
	}
	g, err := engine.NewGroup(ecfg, txs)
	if err != nil {
		return nil, err
	}
	e := &Engine{Group: g}
	execs := make([]ctl.Executor, len(ports))
	for i, p := range ports {
		rc := runner.DefaultConfig()
		rc.Lend = true // as rmad's
		r, err := runner.New(g.Core(i), p, rc)
		if err == nil {
			err = r.Start()
		}
		if err != nil {
			e.stopRunners()
			return nil, err
		}
		e.Runners, execs[i] = append(e.Runners, r), r
	}
	e.Runner = e.Runners[0]
	cfg := ctl.DefaultConfig()
	cfg.Sockets[0].Path = filepath.Join(dir, "rmad.sock")
	// A test's applications are one uid, one tenant: it may use every
	// portal, slot and region of the engine, and no room is kept for
	// tenants to come.
	cfg.Quota.Portals, cfg.Quota.Slots, cfg.Quota.Regions = ctl.Pct(100), ctl.Pct(100), ctl.Pct(100)
	cfg.ReserveTenants = 0
	cfg.Guarantee.Slots = ctl.Count(16)
	if o.Ctl != nil {
		o.Ctl(&cfg)
	}
	srv, err := ctl.Listen(cfg, g, execs, zerolog.Nop())
	if err != nil {
		e.stopRunners()
		return nil, err
	}
	go srv.Serve()
	e.Socket, e.Server = cfg.Sockets[0].Path, srv
	return e, nil
}

func (e *Engine) stopRunners() {
	for _, r := range e.Runners {
		r.Stop(context.Background())
	}
}

// Close stops the engine as rmad shuts down: the control server reclaims
// every portal and then closes its connection, and the poll loop stops.
// Applications see their engine gone. Close is idempotent.
func (e *Engine) Close() {
	e.once.Do(func() {
		e.Server.Close()
		e.stopRunners()
	})
}

// Eventually polls cond every millisecond for up to 5 s and fails the test
// if it never holds. Counters an engine publishes from its loop (runner
// Stats) lag the completions an application sees: wait for them with it.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
