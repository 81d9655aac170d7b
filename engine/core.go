package engine

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/stage"
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
	ErrPortalSpec  = errors.New("engine: invalid portal tenant or weight")
	ErrPortalDead  = errors.New("engine: portal disabled: its application wrote impossible ring indices")
	ErrModeration  = errors.New("engine: invalid doorbell moderation")
)

// Core is one engine core. Not safe for concurrent use: one goroutine runs
// Receive, Poll and the control-plane methods.
//
// A Core is a composition of parts that each own their state: the
// initiator (the CST, its lists and arbiter, the ops' timers and answers),
// the responder (inbound queues, serving, pulls, replay windows), the
// portals and their completions, its view of the engine's region table
// (shared by the cores of a Group), the routing table,
// the neighbor table and ARP, ICMP, the window both sides debit, the
// sender (Tx, IV lane, seal backend, self-loop), and when one is attached
// an op source (OpSource), which posts ops with no application. The Core
// itself dispatches (Poll, the receive walk of dispatch.go) and runs the
// control plane.
type Core struct {
	cfg      Config
	out      *sender
	win      *window
	bulk     *bulkBound  // priority work in progress and the Poll's bound on bulk work (bulk.go)
	regions  *regionView // this core's view of its engine's shared RRT
	portals  *portalTable
	routes   *routeTable
	nbr      *nbrTable
	arp      *arp
	icmp     *icmp // IPv4 below OneRMA: echo replies, fragmentation needed, hygiene counters
	ini      *initiator
	srv      *responder
	reserved *aesni.AEAD // the reserved key: REMOTE_AUTHENTICATION_FAILURE answers
	closing  bool        // Shutdown was called
	// src is the op source attached to this core (source.go; nil: none):
	// Poll lets it post its ops.
	src OpSource
	// stg is the cost accounting the core marks its stages on
	// (stages.go; nil: none).
	stg *stage.Stages

	// The receive walk (dispatch.go): the frame being received (Receive,
	// the self-loop); with CryptoIPsecMB, the burst's prepared frames
	// whose opens are queued in opens. burst is ReceiveBurst's
	// implementation, chosen in New from Config.Crypto.
	rxw   rxWork
	rxq   [openBurst]rxWork
	rxn   int
	opens openBatch
	// rxBulk holds the bulk chunks of a burst taken in two passes
	// (ReceiveBurst), for the second.
	rxBulk [openBurst][]byte
	burst  func(now int64, frames [][]byte)

	stats Stats
	// tgen is the engine's tenant generations (tenants.go), shared by its
	// cores: OpenPortal and ClosePortal keep it.
	tgen *tenantGens
	// tstats are the per-tenant counters, by PortalSpec.Tenant
	// (Config.Tenants of them): a refusal or delay a tenant's own share
	// caused is counted here, not only in Stats.
	tstats []TenantCounters
}

// New allocates every table of a core from cfg: an engine of one core
// (NewGroup builds several), whose id is cfg.CoreID. Nothing is allocated
// on the data path afterwards.
func New(cfg Config, tx Tx) (*Core, error) {
	g, err := newGroup(cfg, []Tx{tx}, cfg.CoreID)
	if err != nil {
		return nil, err
	}
	return g.cores[0], nil
}

// buildCore builds core idx of group g from its own config (CoreID,
// SlotBase and CacheSeed already set).
func buildCore(cfg Config, tx Tx, g *Group, idx int) (*Core, error) {
	c := &Core{cfg: cfg, tgen: g.tenants, tstats: make([]TenantCounters, cfg.Tenants)}
	c.out = newSender(&c.cfg, tx, &c.stats)
	if err := c.out.lane.Refill(); err != nil {
		return nil, fmt.Errorf("%w: IV source: %v", ErrConfig, err)
	}
	c.win = &window{size: cfg.WindowBytes}
	c.bulk = newBulkBound(&cfg, &c.stats)
	c.regions = newRegionView(g.regions, cfg.CoreID, cfg.Portals, &g.quiet[idx].v, c.out)
	c.portals = newPortalTable(cfg.Portals, cfg.Tenants, cfg.CoreID, cfg.SummaryScan, cfg.Delays, &c.stats)
	c.portals.gap = int64(cfg.DoorbellGap)
	c.routes = newRouteTable(&c.cfg)
	c.nbr = newNbrTable(cfg.NeighborTable, cfg.Tenants, cfg.NeighborsPerTenant, cfg.Neighbors)
	c.arp = newARP(&c.cfg, c.nbr, c.out, &c.stats, g.arpLimit, idx == 0)
	c.icmp = newICMP(&c.cfg, c.out, &c.stats)
	seed := cfg.CacheSeed
	if seed == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		seed = binary.LittleEndian.Uint64(b[:])
	}
	c.ini = newInitiator(&c.cfg, aesni.NewCache(cfg.KeyCache, seed), c)
	c.srv = newResponder(&c.cfg, aesni.NewCache(cfg.KeyCache, seed^0x9e3779b97f4a7c15), seed^0x7f4a7c159e3779b9, c)
	var err error
	if c.reserved, err = aesni.NewReservedAEAD(); err != nil {
		return nil, err
	}
	if err := setupCrypto(c, tx); err != nil {
		return nil, err
	}
	return c, nil
}

func ip4(a [4]byte) uint32 { return binary.BigEndian.Uint32(a[:]) }

// Config returns the core's configuration.
func (c *Core) Config() Config { return c.cfg }

// ---- control plane -------------------------------------------------------

// OpenPortal attaches a portal's rings. The rings' memory must stay mapped
// until ClosePortal returns.
func (c *Core) OpenPortal(spec PortalSpec) (PortalID, error) {
	id, err := c.portals.open(spec)
	if err == nil {
		if tc := &c.tstats[spec.Tenant]; tc.Epoch != spec.TenantEpoch { // a new tenant under the index
			*tc = TenantCounters{Epoch: spec.TenantEpoch}
		}
		c.ini.join(spec.Tenant, max(spec.Weight, 1)) // its tenant is present: the shares change
		c.tgen.opened(spec.Tenant, max(spec.Weight, 1))
	}
	return id, err
}

// AllocSlots gives n more slots to portal p, all or nothing, within its
// MaxSlots cap.
func (c *Core) AllocSlots(id PortalID, n int) ([]abi.SlotID, error) {
	p, err := c.portals.getLive(id)
	if err != nil {
		return nil, err
	}
	return c.ini.alloc(id, p, n)
}

// ClosePortal reclaims everything of p: its regions are invalidated at once,
// its idle slots freed, its queued ops dropped, and its in-flight ops are
// orphaned (they free their slot and window when they finish, with no
// completion written). Once it returns the core never touches p's rings or
// regions again.
func (c *Core) ClosePortal(id PortalID) error {
	p, err := c.portals.get(id)
	if err != nil {
		return err
	}
	c.reclaim(id, true)
	c.regions.sync() // a quiescent point of this core: its part of the change is done
	c.ini.leave(int(p.tenant))
	c.tgen.closed(int(p.tenant))
	*p = portal{}
	c.portals.dropLive(id)
	return nil
}

// reclaim takes back everything portal id holds (see ClosePortal) without
// freeing its table entry. From the control plane (closed) it frees the
// portal's region indices; from Poll (its rings are corrupt) it only
// takes its regions out of the engine's table, lock-free, and the indices
// stay held until the control plane closes the portal.
func (c *Core) reclaim(id PortalID, closed bool) {
	c.ini.reclaim(id)
	gone := func(idx uint16, r *region) {
		c.regions.gone(idx, r)
		c.srv.forgetKeys(abi.MakeRegionID(idx, r.gen))
	}
	if closed {
		c.regions.t.release(ownerOf(c.cfg.CoreID, id), gone)
	} else {
		t := c.regions.t
		for i := 1; i < len(t.r); i++ {
			if r := t.r[i].Load(); r != nil && c.regions.mine(r, id) && t.takeAway(uint16(i), r) {
				gone(uint16(i), r)
			}
		}
	}
	c.portals.detach(id)
}

// RegisterRegion enters mem into the engine's RRT for portal p of this
// core, protected by region key kr (K_r, chosen by the application: paper
// §4.2); every core of the engine serves it from then on. The memory must
// stay mapped until DeregisterRegion (or ClosePortal) has returned and,
// on an engine of several cores, until every core has passed a quiescent
// point since (Group.Quiesced).
func (c *Core) RegisterRegion(id PortalID, mem []byte, perm abi.Perm, kr aesni.Key) (abi.RegionID, error) {
	p, err := c.portals.getLive(id)
	if err != nil {
		return 0, err
	}
	if len(mem) == 0 || uint64(len(mem)) > 1<<40 {
		return 0, fmt.Errorf("%w: %d", ErrRegionSize, len(mem))
	}
	if perm&abi.PermRemoteLookup != 0 {
		return 0, fmt.Errorf("%w: PermRemoteLookup without a bucket layout (RegisterLookupRegion)", ErrLayout)
	}
	return c.regions.add(id, p.tenant, mem, perm, kr, nil)
}

// Rekey installs a new region key for a region portal p owns (the local
// path of paper §5.2, through the driver). Requests that arrive afterwards,
// at any core of the engine, authenticate only with K_d derived from the
// new key; requests already authenticated and queued are still answered,
// except remote REKEYs: every one whose request authenticated under an
// earlier key, queued or pulled, on any core, is cancelled (answered
// REMOTE_REGION, its key never installed: pull.go), so no REKEY holder's
// key lands after its owner's revoking Rekey. Other regions are not
// touched.
func (c *Core) Rekey(id PortalID, rid abi.RegionID, kr aesni.Key) error {
	if _, err := c.portals.getLive(id); err != nil {
		return err
	}
	if _, err := c.regions.owned(id, rid); err != nil {
		return err
	}
	if c.srv.installKey(rid, kr, 0) != keyInstalled {
		return fmt.Errorf("%w: %#x", ErrNoRegion, uint32(rid))
	}
	return nil
}

// DeregisterRegion invalidates a region on every core of the engine; once
// it returns this core never touches the region's memory again, and the
// other cores of the engine once each has passed a quiescent point since
// (Group.Quiesced). Ops in flight that land in it lose their remaining
// responses and time out.
func (c *Core) DeregisterRegion(id PortalID, rid abi.RegionID) error {
	if _, err := c.portals.get(id); err != nil {
		return err
	}
	if _, err := c.regions.owned(id, rid); err != nil {
		return err
	}
	if r := c.regions.t.remove(rid.Index()); r != nil {
		c.regions.gone(rid.Index(), r)
		c.srv.forgetKeys(rid)
	}
	c.regions.sync()
	return nil
}

// Doorbell wakes an application sleeping on its completions. The driver
// supplies it (an eventfd write in rmad); the core calls Ring from Poll
// only for a portal whose application armed it, at most once per arming.
type Doorbell interface{ Ring() }

// SetDoorbell attaches a doorbell to portal p: arm is the 4-byte arm word
// in the portal's shared segment (abi.SegmentArmOff), 4-byte aligned.
func (c *Core) SetDoorbell(id PortalID, arm []byte, bell Doorbell) error {
	p, err := c.portals.getLive(id)
	if err != nil {
		return err
	}
	if len(arm) < 4 || uintptr(unsafe.Pointer(unsafe.SliceData(arm)))%4 != 0 || bell == nil {
		return fmt.Errorf("%w: doorbell arm word", ErrPortalRings)
	}
	p.arm, p.bell = (*atomic.Uint32)(unsafe.Pointer(unsafe.SliceData(arm))), bell
	return nil
}

// MaxModerationPeriod bounds the period of a doorbell's moderation: the
// longest an application that asked for it sleeps past its first
// completion.
const MaxModerationPeriod = time.Millisecond

// SetModeration moderates portal p's doorbell, as ibv_modify_cq moderates
// a completion queue's events: once armed, it rings when count
// completions are unread in the ring, or period after the first
// completion it was armed for, whichever comes first. An application that
// sleeps on its doorbell with many ops in flight is woken, and the core
// pays a ring, once per count completions instead of once per
// publication; one with fewer in flight than count waits out the period.
// count 1 (period 0) rings at every publication, as without moderation.
// count is 1 .. the completion ring's capacity and period at most
// MaxModerationPeriod, non-zero when count > 1. The portal needs a
// doorbell (SetDoorbell).
func (c *Core) SetModeration(id PortalID, count int, period time.Duration) error {
	p, err := c.portals.getLive(id)
	if err != nil {
		return err
	}
	switch {
	case p.arm == nil:
		return fmt.Errorf("%w: moderation: the portal has no doorbell", ErrModeration)
	case count < 1 || count > int(p.cpl.Capacity()):
		return fmt.Errorf("%w: count %d, want 1 .. %d (the completion ring's capacity)", ErrModeration, count, p.cpl.Capacity())
	case period < 0 || period > MaxModerationPeriod:
		return fmt.Errorf("%w: period %v, want 0 .. %v", ErrModeration, period, MaxModerationPeriod)
	case count > 1 && period == 0:
		return fmt.Errorf("%w: count %d needs a period (an application with fewer ops in flight would never be rung)", ErrModeration, count)
	}
	p.modCount, p.modPeriod = uint32(count), int64(period)
	return nil
}

// Crossings is PathCounters().Crossings, for a loop that reads it every
// iteration: the cgo calls the core has made itself.
func (c *Core) Crossings() uint64 {
	own, _ := c.out.seal.crossings()
	return own
}

// PathCounters returns the data path's cost counters (on the core's
// goroutine: its loop, or Exec).
func (c *Core) PathCounters() PathCounters {
	p := c.portals.path
	p.Crossings, p.SealsInTx = c.out.seal.crossings()
	return p
}

// SetSummary attaches the core's summary doorbell (abi.Summary): mem,
// shared memory every application of the core may map and write, at
// least abi.SummaryBytes(Config.Portals) bytes, 8-byte aligned, mapped
// until the core is gone. Portals whose segments say they ring it
// (PortalSpec.SummaryFlag) are then looked at only when rung, besides the
// fallback scans (Config.SummaryScan).
func (c *Core) SetSummary(mem []byte) error {
	s, err := abi.NewSummary(mem)
	if err != nil || s.Portals() < len(c.portals.p) {
		return fmt.Errorf("%w: summary doorbell of %d bytes for %d portals", ErrPortalRings, len(mem), len(c.portals.p))
	}
	c.portals.sum = s
	return nil
}

// Stats returns a copy of the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.WindowInUse = uint64(c.win.used)
	s.SlotsInUse = uint64(len(c.ini.slots) - len(c.ini.free))
	s.OpsInFlight = uint64(c.ini.inflight)
	s.DelayBatches, s.DelaySamples = c.portals.delays.Flushes, c.portals.delays.Samples
	s.PullsInUse = uint64(len(c.srv.pulls) - 1 - len(c.srv.freePull))
	if c.srv.replay != nil {
		s.ReplayEvictions = c.srv.replay.evictions
	}
	return s
}

// PortalStats describes the open portal id (control plane); false when no
// portal is open under that id.
func (c *Core) PortalStats(id PortalID) (PortalStats, bool) {
	p, err := c.portals.get(id)
	if err != nil {
		return PortalStats{}, false
	}
	u := c.regions.use[id]
	return PortalStats{
		PID: p.pid, Tenant: int(p.tenant), Weight: int(p.weight), Class: p.class, Slots: p.slots, MaxSlots: p.maxSlots, Pending: p.pending,
		Regions: u.n, RegionBytes: u.bytes,
		CmdDepth: p.cmd.Available(), CmdCap: p.cmd.Capacity(),
		CplDepth: p.cpl.Capacity() - p.cpl.Free(), CplCap: p.cpl.Capacity(),
		Dead: p.dead,
	}, true
}

// InFlight reports ops posted and not yet completed (orphans included).
func (c *Core) InFlight() int { return c.ini.inflight }

// Audit checks the resource invariants and describes the first violation:
// the window debited equals the sum over ops in service and pulls; every
// slot is in exactly one state consistent with its list; slot counts per
// portal and pending completions add up; the pull lists are whole and in
// deadline order; the serving side's queues by owner are whole (each
// request queued once, in its owner's FIFO, the rings of owners right);
// the window never exceeds its size; the regions counted per portal are
// the table's.
func (c *Core) Audit() error {
	if c.win.used < 0 || c.win.used > c.win.size {
		return fmt.Errorf("audit: window used %d of %d", c.win.used, c.win.size)
	}
	debit, err := c.ini.audit()
	if err != nil {
		return err
	}
	pd, err := c.srv.auditPulls()
	if err != nil {
		return err
	}
	if debit+pd != c.win.used {
		return fmt.Errorf("audit: window used %d, ops in service hold %d", c.win.used, debit+pd)
	}
	if err := c.srv.auditQueues(); err != nil {
		return err
	}
	if err := c.srv.auditBounds(); err != nil {
		return err
	}
	if err := c.nbr.audit(); err != nil {
		return err
	}
	return c.regions.audit()
}

// Shutdown stops the core: from now on every command completes at once
// with ABORTED and requests from the network are dropped unanswered. Every
// queued op and every op in service completes with ABORTED, queued
// requests and the WRITEs this core was serving are dropped (none of them
// commits any more), and the completions are published.
//
// Except one kind: a WRITE or REKEY whose data was all sent to another
// engine may still be committed there, until that engine's deadline. It
// stays in service and completes as usual, OK on its acknowledgment or
// TIMEOUT at its deadline (after its server's): a completion never claims
// the op failed while it can still take effect. The driver keeps calling
// Receive and Poll until InFlight is 0 (at most the longest TIMEOUT).
func (c *Core) Shutdown(now int64) {
	c.out.seal.run()
	c.closing = true
	c.ini.shutdown(now)
	c.out.loop.clear()
	c.srv.shutdown()
	c.portals.publish(now)
	c.portals.delays.Flush() // the ABORTED completions: no Poll may follow
}

// NextDeadline is the earliest time a timer fires (math.MaxInt64: none).
// Queued requests and unread commands are not timers: the driver polls.
func (c *Core) NextDeadline() int64 {
	if c.out.loop.len() > 0 || c.ini.sendq.len() > 0 {
		return math.MinInt64
	}
	return min(c.ini.nextDeadline(), c.srv.nextDeadline(), c.portals.nextDue)
}

// Stalled tells the core that its loop could not run for the gap ns
// just past (the thread was preempted or descheduled, or the control
// plane held the loop): answers that arrived meanwhile wait in the port
// unread. The ops this core initiated get gap ns more before TIMEOUT, and
// those waiting for window before DISPATCH_TIMEOUT, so none fails for
// time in which the engine could not look: a NIC does not stall, and a
// TIMEOUT is to say the remote did not answer. Moving an initiator's
// deadline later is always safe (a WRITE's initiator must time out last);
// the serving side's timers (pulls, queued requests) stay where they are
// for that reason. The delays an op reports still include the gap.
func (c *Core) Stalled(gap int64) {
	if gap > 0 {
		c.ini.stalled(gap)
	}
}

// ---- Poll ----------------------------------------------------------------

// perPortalBurst bounds commands taken from one portal per Poll (fairness
// between portals; Kalia et al.: batches of 32 amortise the doorbell).
const perPortalBurst = 64

// Poll drains command rings, expires timers, arbitrates the window, serves
// queued requests, starts pulls, sends WRITE data held back and publishes
// completions. While priority work is in progress each stage that starts
// bulk work starts at most Config.PollBytes of it (bulk.go); what it holds
// back waits for the next Poll, which the driver runs at once, as it does
// whenever Poll did work. When none is, and PollBytes is set, Poll takes
// the commands of the portals that rang the summary doorbell since it
// began once more before it serves (redrain), and starts them: a priority
// op posted meanwhile then goes before, and bounds, the bulk work that
// follows. It returns the amount of work done (0: idle).
func (c *Core) Poll(now int64) int {
	s := c.stg
	if s != nil && s.Current() != stage.Protocol {
		s.Enter(stage.Protocol)
	}
	c.regions.sync() // the quiescent point of the engine's shared region table
	c.out.highOut = false
	work := 0
	pt := c.portals
	if n := len(pt.live); n > 0 {
		if s != nil {
			s.Enter(stage.EmptyRings) // Protocol from the first command on
		}
		pt.beginPoll(now) // the summary doorbell's words, a fallback scan
		start := int(pt.rr % uint32(n))
		pt.rr++
		dead := false
		for j := range n {
			id := pt.live[(start+j)%n]
			look, rung := pt.due(id)
			if !look {
				continue
			}
			work += c.drainPortal(now, id, rung)
			dead = dead || pt.p[id].dead
		}
		if s != nil {
			if work == 0 {
				s.Mark(stage.EmptyRings, stage.Protocol)
			} else {
				s.Become(stage.Protocol)
			}
		}
		for k := 0; dead && k < len(pt.live); k++ {
			if id := pt.live[k]; pt.p[id].dead { // its rings are corrupt: drained no more
				pt.dropLive(id)
				k--
			}
		}
	}
	if c.src != nil && !c.closing {
		work += c.src.Poll(now)
	}
	work += c.srv.expirePulls(now)
	work += c.ini.expire(now)
	if s != nil {
		s.Enter(stage.Build)
	}
	work += c.ini.arbitrate(now)
	work += c.runLoop(now) // requests to ourselves join the inbound queue
	if c.bulk.limit > 0 && !c.bulk.on(now) {
		// Before bulk work that nothing bounds: commands posted since the
		// Poll began, which may be priority work (bulk.go), are started
		// first, and bound what follows.
		if k := c.redrain(now); k > 0 {
			work += k + c.ini.arbitrate(now)
			work += c.runLoop(now)
		}
	}
	work += c.srv.serve(now)
	work += c.srv.startPulls(now)
	work += c.ini.sendData(now) // WRITE data for pulls that could not all be sent at once
	work += c.runLoop(now)      // responses to ourselves complete their ops
	c.out.seal.endPoll()        // sealed by the next tx burst's crossing, or now
	flush := pt.delays.Due(now) || c.closing
	if s != nil && (flush || len(pt.dirty) > 0) {
		s.Enter(stage.Completion)
	}
	pt.publish(now)
	if flush {
		pt.delays.Flush()
	}
	c.bulk.reset() // the next Poll's, and the frames received before it
	return work
}

// redrain takes the commands of the portals that rang the summary
// doorbell since the Poll began (its bits, taken again; portals that do
// not ring it wait for the next Poll), and reports how many it took.
func (c *Core) redrain(now int64) int {
	pt := c.portals
	if pt.ringing == 0 {
		return 0
	}
	n, dead := 0, false
	for i := range pt.taken {
		for w := pt.sum.Take(i); w != 0; w &= w - 1 {
			id := PortalID(i*abi.SummaryWordBits + bits.TrailingZeros64(w))
			if int(id) >= len(pt.p) {
				break
			}
			if p := &pt.p[id]; p.used && p.rings && !p.dead && p.src == nil {
				n += c.drainPortal(now, id, true)
				dead = dead || p.dead
			}
		}
	}
	for k := 0; dead && k < len(pt.live); k++ {
		if id := pt.live[k]; pt.p[id].dead {
			pt.dropLive(id)
			k--
		}
	}
	return n
}

// drainPortal takes up to perPortalBurst commands from portal id's ring,
// as its completion ring has room for. rung: only the summary doorbell
// asked for this look.
func (c *Core) drainPortal(now int64, id PortalID, rung bool) int {
	pt := c.portals
	p := &pt.p[id]
	pt.path.RingLooks++
	// Completion entries not yet promised. The cached view avoids reading
	// the application's cache line on every Poll; it is refreshed only
	// when it looks too small.
	avail := int(p.cpl.FreeCached()) - p.pending
	if avail < perPortalBurst {
		avail = int(p.cpl.Free()) - p.pending
	}
	n := 0
	empty := false // the ring had no command left
	for n < perPortalBurst && avail > 0 {
		e := p.cmd.Peek()
		if e == nil {
			empty = true
			break
		}
		var cmd abi.Command
		err := cmd.Decode(e)
		if err != nil { // keep the slot and cookie the app wrote, for its completion
			cmd.Slot = abi.SlotID(binary.LittleEndian.Uint32(e[4:]))
			cmd.Cookie = binary.LittleEndian.Uint64(e[8:])
		}
		p.cmd.Advance()
		c.stats.Posted++
		if c.closing {
			c.portals.fail(now, id, p, &cmd, abi.StatusAborted)
		} else {
			c.ini.post(now, id, p, &cmd, err != nil)
		}
		avail--
		n++
	}
	// Commands left behind are looked for again next Poll without a
	// ring: those seen and not taken (the burst was used up), and any
	// when completion room ran out before the ring was seen empty (its
	// bit may have been taken by this Poll). Commands published after
	// the last look at the producer index ring for themselves.
	p.again = !empty && (p.cmd.Seen() > 0 || avail <= 0)
	if n == 0 && empty {
		pt.path.RingLooksIdle++
		if rung {
			pt.path.RingRungIdle++
		}
	}
	p.cmd.Release()
	if p.cmd.Corrupt() || p.cpl.Corrupt() {
		// Reclaim at once, but keep the entry (and its id) until the
		// control plane closes it, so the id cannot name a newer portal.
		c.stats.RingsCorrupt++
		c.reclaim(id, false)
		p.dead = true
	}
	return n
}
