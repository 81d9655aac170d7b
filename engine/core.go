package engine

import (
	"errors"
	"math"

	"github.com/onerma/onerma/abi"
)

// Control-plane errors.
var (
	ErrNoPortal    = errors.New("engine: no such portal")
	ErrPortalsFull = errors.New("engine: portal table full")
	ErrSlotCap     = errors.New("engine: request exceeds the portal's slot cap")
	ErrNoSlots     = errors.New("engine: no free command slots")
	ErrRegionsFull = errors.New("engine: region table full")
	ErrNoRegion    = errors.New("engine: no such region")
	ErrNotOwner    = errors.New("engine: region owned by another portal")
	ErrRegionSize  = errors.New("engine: region size must be 1 byte .. 2^40 bytes")
	ErrPortalRings = errors.New("engine: invalid portal rings")
)

// Core is one engine core. Not safe for concurrent use: one goroutine runs
// Receive, Poll and the control-plane methods.
type Core struct {
	cfg Config
	tx  Tx
}

// New allocates every table of a core from cfg.
func New(cfg Config, tx Tx) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, tx: tx}, nil
}

// Config returns the core's configuration.
func (c *Core) Config() Config { return c.cfg }

// Receive processes one received frame at time now (ns, monotonic). The
// frame is borrowed for the call only.
func (c *Core) Receive(now int64, frame []byte) {}

// Poll drains command rings, arbitrates the window, serves queued requests,
// expires timers and publishes completions. It returns the amount of work
// done (0: idle).
func (c *Core) Poll(now int64) int { return 0 }

// NextDeadline is the earliest time a timer fires (math.MaxInt64: none).
func (c *Core) NextDeadline() int64 { return math.MaxInt64 }

// OpenPortal attaches a portal's rings.
func (c *Core) OpenPortal(spec PortalSpec) (PortalID, error) { return 0, ErrPortalsFull }

// AllocSlots gives n more slots to portal p (capped by its MaxSlots).
func (c *Core) AllocSlots(p PortalID, n int) ([]abi.SlotID, error) { return nil, ErrNoSlots }

// ClosePortal reclaims everything of p: its regions are invalidated at once,
// its idle slots freed, its queued ops dropped, and its in-flight ops are
// orphaned (they free their slot and window when they finish, with no
// completion written).
func (c *Core) ClosePortal(p PortalID) error { return ErrNoPortal }

// RegisterRegion enters mem into the RRT for portal p.
func (c *Core) RegisterRegion(p PortalID, mem []byte, perm Perm) (abi.RegionID, error) {
	return 0, ErrRegionsFull
}

// DeregisterRegion invalidates a region; once it returns the core never
// touches the region's memory again.
func (c *Core) DeregisterRegion(p PortalID, id abi.RegionID) error { return ErrNoRegion }

// Stats returns a copy of the counters.
func (c *Core) Stats() Stats { return Stats{} }

// InFlight reports ops posted and not yet completed (orphans included).
func (c *Core) InFlight() int { return 0 }

// Audit checks the resource invariants (window bytes, slot states, list
// membership) and describes the first violation.
func (c *Core) Audit() error { return nil }

// Shutdown completes every queued and in-flight op with StatusAborted.
func (c *Core) Shutdown(now int64) {}
