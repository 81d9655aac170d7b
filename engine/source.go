package engine

import (
	"errors"
	"fmt"
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// OpSource is an op generator a core runs in place of an application
// (engine/opgen, rmad -selftest's): attached to the core (AttachSource),
// it stands in the core's portal table as an entry with no rings, posts
// its ops straight into the initiator from Poll (SourcePort.Post), as
// the core does an application's commands, and takes their completions
// from the portal table as the core makes them. Its methods run on the
// core's goroutine.
type OpSource interface {
	// Poll runs once per Core.Poll, after the portals' commands are
	// drained, unless the core is shutting down: it posts the source's
	// ops and returns the work it did (0: none).
	Poll(now int64) int
	// Completed takes the completion of one of the source's ops, from
	// Receive or Poll: a copy, so that the core's own stays where it is
	// (no completion escapes to the heap). It must not post (the
	// initiator may be walking one of its lists): an op is posted from
	// Poll only.
	Completed(now int64, cpl abi.Completion)
}

// SelfTestPID is the identity an op source stamps on its requests (the
// header's PID): no application has it (engine/ctl hands identities out
// from 2^22 up, below this one), so a K_d derived for it serves only an
// engine's own op source. An owner grants it as any other (keyx).
const SelfTestPID = math.MaxUint32

// ErrSourceAttached: the core has an op source attached already.
var ErrSourceAttached = errors.New("engine: an op source is attached already")

// SourcePort is an attached OpSource's entry in its core's portal table:
// what the source holds (slots, regions) is the entry's, as an
// application's is its portal's, and its ops stamp SelfTestPID. Its
// regions and its share of the window are tenant 0's, weight 1.
// AllocSlots, RegisterRegion and Detach are control-plane calls (on the
// core's goroutine, or while its driver is stopped); Post is the data
// path's, from the source's Poll.
type SourcePort struct {
	c   *Core
	ini *initiator
	id  PortalID
	p   *portal
}

// AttachSource enters src in c's portal table, under the first free id,
// as an entry that holds at most maxSlots slots: from then on c's Poll
// lets src post and c hands it its ops' completions. The control plane
// sees no portal there. One source per core (ErrSourceAttached).
func (c *Core) AttachSource(src OpSource, maxSlots int) (*SourcePort, error) {
	if c.src != nil {
		return nil, ErrSourceAttached
	}
	id, err := c.portals.attachSource(src, maxSlots, SelfTestPID)
	if err != nil {
		return nil, err
	}
	c.tgen.opened(0, 1) // its regions are tenant 0's, as long as it is attached
	c.src = src
	c.ini.join(0, 1) // tenant 0's, weight 1
	return &SourcePort{c: c, ini: c.ini, id: id, p: &c.portals.p[id]}, nil
}

// AllocSlots gives the source n more slots, within the cap AttachSource
// set.
func (s *SourcePort) AllocSlots(n int) ([]abi.SlotID, error) {
	return s.ini.alloc(s.id, s.p, n)
}

// RegisterRegion enters mem into the engine's RRT as a region of the
// source, protected by kr, as Core.RegisterRegion does for a portal.
func (s *SourcePort) RegisterRegion(mem []byte, perm abi.Perm, kr aesni.Key) (abi.RegionID, error) {
	if perm&abi.PermRemoteLookup != 0 {
		return 0, fmt.Errorf("%w: PermRemoteLookup without a bucket layout", ErrLayout)
	}
	return s.c.regions.add(s.id, 0, mem, perm, kr, nil)
}

// Post hands cmd to the initiator, as Poll hands an application's
// command (counted in Stats.Posted); the op may complete at once
// (OpSource.Completed). cmd is read before Post returns.
func (s *SourcePort) Post(now int64, cmd *abi.Command) {
	s.ini.st.Posted++
	s.ini.post(now, s.id, s.p, cmd, false)
}

// Detach takes the source away from its core: its slots, its regions and
// its portal table entry.
func (s *SourcePort) Detach() {
	c := s.c
	c.reclaim(s.id, true)
	c.regions.sync()
	c.ini.leave(0)
	c.tgen.closed(0)
	c.portals.p[s.id] = portal{}
	c.src = nil
}
