package ctl_test

import (
	"context"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/memport"
	"github.com/onerma/onerma/engine/runner"
)

// loopDriver is an engine core driven by engine/runner over a loopback
// engine/memport port: every frame the core sends comes back to it, so a
// READ addressed to the engine's own IP crosses the whole request/response
// path without DPDK.
type loopDriver struct {
	*runner.Runner
}

func newLoopDriver(cfg engine.Config) (*loopDriver, error) {
	port, err := memport.Loopback(memport.DefaultConfig())
	if err != nil {
		return nil, err
	}
	core, err := engine.New(cfg, port)
	if err != nil {
		return nil, err
	}
	r, err := runner.New(core, port, runner.DefaultConfig())
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	return &loopDriver{r}, nil
}

// Stop stops the runner (Core.Shutdown aborts what is left).
func (d *loopDriver) Stop() { d.Runner.Stop(context.Background()) }

var _ ctl.Executor = (*runner.Runner)(nil)
