package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/wire"
)

// Group is an engine of several cores: shared-nothing polling cores, each
// driven by its own goroutine (or the simulator), that share only the
// engine's region table (regions.go) and the bound on its ARP request
// rate (one word, touched only to send an ARP request: neighbor.go).
//
// Core i has CoreID i (its initiator ports and the WRITE data port
// UDPPort+i, wire/port.go), its own partition of the command slots
// (SlotBase + i*Slots: a full Slots each), a full WindowBytes window of
// its own, its own IV lane (tagged with i: sender.go), its own AEAD
// caches, telemetry batch, neighbor table, pull contexts, queues and
// replay windows. A portal is bound to one core (the control plane
// chooses); an application that wants more cores opens more portals.
//
// Why a full window and slot table per core rather than a share: the
// window bounds the bytes a core has solicited, which land in its own rx
// queue and are opened by it alone, and each core's queue has its own
// buffers, so the bound belongs to the core. One portal on a many-core
// engine thus gets what it gets on a one-core engine (its core is
// undivided), and portals spread over the cores each get a core's whole
// window; the engine's total solicitation is cores × WindowBytes, and
// the fabric's share between engines is the congestion control's
// (portal.Executor, package cc).
//
// Frames reach their core by Steer (steer.go): a driver whose port
// cannot steer (the kernel hashes flows to rx queues) hands frames to
// the core Steer names.
type Group struct {
	cores   []*Core
	regions *regionTable
	quiet   []quietWord
	tenants *tenantGens // the tenant indices' open portals and generations (tenants.go)
	// arpLimit bounds the ARP requests of all the cores together
	// (Config.ARPRate, ARPBurst: neighbor.go).
	arpLimit *arpLimit
}

// quietWord is a core's quiescence word: the version of the region table
// it has synced to (regionView.sync). Alone on its cache line: each core
// writes its own at every change.
type quietWord struct {
	v atomic.Uint64
	_ [56]byte
}

// NewGroup builds an engine of len(txs) cores (1 .. wire.MaxCores) from
// one config: core i writes its frames to txs[i] and gets CoreID i and
// SlotBase cfg.SlotBase + i*cfg.Slots (cfg.CoreID must be 0). cfg.Delays
// is core 0's (SetDelays gives the others theirs); cfg.CacheSeed, when
// set, seeds core i's caches with a value derived from it and i.
func NewGroup(cfg Config, txs []Tx) (*Group, error) {
	if cfg.CoreID != 0 {
		return nil, fmt.Errorf("%w: CoreID = %d (NewGroup numbers its cores from 0)", ErrConfig, cfg.CoreID)
	}
	return newGroup(cfg, txs, 0)
}

// newGroup builds the group, its cores numbered from first.
func newGroup(cfg Config, txs []Tx, first uint16) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := len(txs)
	switch {
	case n < 1 || int(first)+n > wire.MaxCores:
		return nil, fmt.Errorf("%w: %d cores from core %d (at most %d)", ErrConfig, n, first, wire.MaxCores)
	case uint64(cfg.SlotBase)+uint64(n)*uint64(cfg.Slots) > 1<<31:
		return nil, fmt.Errorf("%w: SlotBase %d + %d cores × %d slots above 2^31", ErrConfig, cfg.SlotBase, n, cfg.Slots)
	}
	for i, tx := range txs {
		if tx == nil {
			return nil, fmt.Errorf("%w: nil Tx of core %d", ErrConfig, i)
		}
	}
	g := &Group{regions: newRegionTable(cfg.Regions), quiet: make([]quietWord, n), cores: make([]*Core, n), tenants: newTenantGens(cfg.Tenants),
		arpLimit: newARPLimit(cfg.ARPRate, cfg.ARPBurst)}
	for i, tx := range txs {
		cc := cfg
		cc.CoreID = first + uint16(i)
		cc.SlotBase = cfg.SlotBase + abi.SlotID(i*cfg.Slots)
		if i > 0 {
			cc.Delays = nil
			if cfg.CacheSeed != 0 {
				cc.CacheSeed = cfg.CacheSeed ^ uint64(i)*0xbf58476d1ce4e5b9
			}
		}
		c, err := buildCore(cc, tx, g, i)
		if err != nil {
			return nil, fmt.Errorf("core %d: %w", i, err)
		}
		g.cores[i] = c
	}
	return g, nil
}

// Len is the number of cores.
func (g *Group) Len() int { return len(g.cores) }

// Core is core i (0 .. Len()-1). Each core belongs to the goroutine that
// drives it, as a Core made by New does.
func (g *Group) Core(i int) *Core { return g.cores[i] }

// SetDelays gives core i the histograms its completions' delays go to
// (see Config.Delays). Call it before core i runs, or on its goroutine.
func (g *Group) SetDelays(i int, d *telemetry.Delays) {
	g.cores[i].cfg.Delays = d
	g.cores[i].portals.delays.SetDelays(d)
}

// Version is the region table's version: it grows with every region
// registered, deregistered, or taken away from a portal (any goroutine).
// Pass it, read after a change, to Quiesced.
func (g *Group) Version() uint64 { return g.regions.version.Load() }

// Quiesced reports whether every core has passed a quiescent point (the
// start of a Poll) since the region table reached version v: from then
// on no core touches the memory of a region removed before v, and none
// holds it registered with its seal backend. The control plane waits for
// it before it unmaps a deregistered region's memory (any goroutine).
func (g *Group) Quiesced(v uint64) bool {
	for i := range g.quiet {
		if g.quiet[i].v.Load() < v {
			return false
		}
	}
	return true
}

// CoreQuiesced is Quiesced for core i alone.
func (g *Group) CoreQuiesced(i int, v uint64) bool { return g.quiet[i].v.Load() >= v }

// Quiesce runs core i's quiescent point now, as its next Poll would. Call
// it on core i's goroutine, between two calls into the core (a
// runner.Exec closure): the control plane need not wait for the core's
// next Poll.
func (g *Group) Quiesce(i int) { g.cores[i].regions.sync() }

// Audit checks the shared region table's books: free and held indices,
// generations and owners of the live regions (any goroutine; each core's
// own invariants are its Core.Audit).
func (g *Group) Audit() error { return g.regions.audit() }
