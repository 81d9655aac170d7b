package ctl_test

import (
	"context"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
)

// loopDriver is an engine driven by engine/runner, one runner per core,
// over a loopback engine/port/memport port (several cores: memport.Steered,
// which delivers each frame to the core it is steered to): every frame
// the engine sends comes back to it, so a READ addressed to the engine's
// own IP crosses the whole request/response path without DPDK. Its
// embedded Runner is core 0's.
type loopDriver struct {
	*runner.Runner
	g       *engine.Group
	runners []*runner.Runner
}

func newLoopDriver(cfg engine.Config) (*loopDriver, error) { return newLoopDrivers(cfg, 1) }

func newLoopDrivers(cfg engine.Config, cores int, mode ...runner.Mode) (*loopDriver, error) {
	var ports []runner.Port
	if cores == 1 {
		p, err := memport.Loopback(memport.DefaultConfig())
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	} else {
		sp, err := memport.Steered(memport.Config{Frames: 128, FrameBytes: engine.MaxFrameBytes, Burst: 32}, cores, cfg.UDPPort)
		if err != nil {
			return nil, err
		}
		for _, p := range sp {
			ports = append(ports, p)
		}
	}
	txs := make([]engine.Tx, len(ports))
	for i, p := range ports {
		txs[i] = p
	}
	g, err := engine.NewGroup(cfg, txs)
	if err != nil {
		return nil, err
	}
	d := &loopDriver{g: g}
	for i, p := range ports {
		rc := runner.DefaultConfig()
		rc.Lend = true // as rmad's loops

		if len(mode) > 0 { // one mode for every core, or one per core
			rc.Mode = mode[min(i, len(mode)-1)]
		}
		r, err := runner.New(g.Core(i), p, rc)
		if err == nil {
			err = r.Start()
		}
		if err != nil {
			d.Stop()
			return nil, err
		}
		d.runners = append(d.runners, r)
	}
	d.Runner = d.runners[0]
	return d, nil
}

// execs are the runners as the control server takes them.
func (d *loopDriver) execs() []ctl.Executor {
	out := make([]ctl.Executor, len(d.runners))
	for i, r := range d.runners {
		out[i] = r
	}
	return out
}

// Stop stops the runners (Core.Shutdown aborts what is left).
func (d *loopDriver) Stop() {
	for _, r := range d.runners {
		r.Stop(context.Background())
	}
}

var _ ctl.Executor = (*runner.Runner)(nil)
