package engine

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/wire"
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
	ErrPortalDead  = errors.New("engine: portal disabled: its application wrote impossible ring indices")
)

type slotState uint8

const (
	slotFree      slotState = iota // in the core's free pool
	slotIdle                       // owned by a portal, no op
	slotQueued                     // op waiting in an arbiter FIFO for window
	slotResolving                  // op waiting for the peer's MAC (ARP)
	slotInService                  // op granted window, request sent
)

// slot is one CST entry: one in-flight op (paper §4.3).
type slot struct {
	state    slotState
	list     listID
	class    abi.Class
	orphan   bool // its portal closed while the op was in service
	op       abi.Op
	portal   PortalID
	prev     int32
	next     int32
	seq      uint32 // bumped per op: stale responses never match
	remoteIP uint32
	mac      wire.MAC
	remReg   uint32
	length   uint32
	debit    uint32
	remOff   uint64
	locReg   abi.RegionID
	locOff   uint64
	cookie   uint64
	postNs   int64 // seen by the engine: issue_delay and total_delay count from here
	queuedNs int64 // entered its arbiter FIFO: DISPATCH_TIMEOUT counts from here
	issueNs  int64
	deadline int64
	arrived  uint64 // one bit per 64-byte unit of the op
	want     uint64
	pending  uint64                // ReceiveBurst: units whose open is queued (all ones: an answer or pull)
	aead     *aesni.AEAD           // K_d of the command: seals the request, opens the answers
	ck       aesni.CacheKey        // what aead was looked up for: the next op on this slot may reuse it
	iv       [aesni.NonceSize]byte // the request's IV, curried into every answer
	newKey   aesni.Key             // REKEY: the new K_r, read from the local region at post
	// WRITE (paper §5.1): once the serving engine's pull (②) arrived, its
	// answers are curried with the pull's IV (the server's entropy), the
	// data goes to its core's port under its pull handle, and the deadline
	// is the server's timeout counted from the pull's arrival.
	pulled     bool
	pullPort   uint16
	pullHandle uint32
	pullIV     [aesni.NonceSize]byte
	sent       uint32 // data bytes sent so far
	dataBase   uint64 // first IV counter of the data chunks
	inSendq    bool   // on the send queue (see pushSend)
}

// region is one RRT entry.
type region struct {
	mem   []byte
	perm  abi.Perm
	owner PortalID
	gen   uint16
	valid bool
	kr    *aesni.Deriver // K_r, expanded: derives each initiator's K_d
}

type portal struct {
	used     bool
	dead     bool // rings corrupted: reclaimed, entry kept until ClosePortal
	class    abi.Class
	cmd      *abi.Consumer
	cpl      *abi.Producer
	maxSlots int
	slots    int            // slots it holds
	pending  int            // ops whose completion it is still owed
	pid      uint32         // stamped on its requests
	dirty    bool           // completions committed, not yet published
	arm      *atomic.Uint32 // doorbell arm word in shared memory (nil: no doorbell)
	bell     Doorbell
}

// inbound is one queued request at the serving side.
type inbound struct {
	op      abi.Op // OpRead, OpWrite or OpRekey
	ip      uint32
	mac     wire.MAC
	port    uint16
	pid     uint32
	tag     uint64
	region  uint32
	length  uint32
	offset  uint64
	arrival int64
	sent    uint32
	aead    *aesni.AEAD           // the request's K_d: seals every answer
	iv      [aesni.NonceSize]byte // the request's IV, curried into every answer
	base    uint64                // first server counter of its responses (0: none yet)
}

// Core is one engine core. Not safe for concurrent use: one goroutine runs
// Receive, Poll and the control-plane methods.
type Core struct {
	cfg        Config
	tx         Tx
	ip         uint32
	mac        wire.MAC
	myPort     uint16 // UDPPort+CoreID: responses to our ops come here
	maxPayload int

	slots    []slot
	freeSlot []int32 // stack of free slot indices
	lists    [numLists]slotList
	inflight int // ops posted and not completed (orphans included)

	regions    []region // index 0 unused: RegionID 0 is never valid
	freeRegion []uint16

	portals []portal
	live    []PortalID // open portals, in opening order: Poll drains these
	// pollRR rotates the portal Poll drains first: a fixed order would
	// queue one application's commands ahead of another's in every poll,
	// so its requests would reach a busy server first and the other's
	// would be the ones NACKed (found by e2e TestExecutorFairShareMemif:
	// the second portal got 2.7x the NACKs and 40 % less bandwidth).
	pollRR uint32
	dirty  []PortalID // portals with unpublished completions

	windowUsed int
	highStreak int
	closing    bool // Shutdown was called

	// The serving side's inbound request queues, one per class (the
	// request's wire.FlagHigh, set by the initiating engine from its
	// portal's class), served high first without starving low, as the
	// arbiters do (HighBurst).
	inq         [2]inRing
	serveStreak int
	// WRITE and REKEY requests taken from inq wait here, per class, for a
	// pull context and window (startPulls), so reads behind them are
	// served meanwhile: the pull is an op of the serving side, subject to
	// its window like the ops it initiates (paper §5.1).
	pullq      [2]inRing
	pullStreak int

	nbrs        []neighbor
	replay      *replayTable // serving side: anti-replay windows per sender (replay.go); nil when off
	nbrCount    int
	nextARPScan int64

	// Frames addressed to this engine itself loop back inside the core
	// (unless HairpinSelf): switches do not return a frame to the port it
	// came from. A fixed ring of frame copies.
	loop     [][]byte
	loopN    []int
	loopHead int
	loopLen  int

	// Security (paper §4.2, Appendix A): this core's IV counters, prepared
	// AEADs for the K_d of commands (ini) and for the K_d derived for
	// inbound requests (srv), kept apart so that a wrong key in a command
	// can never stand in for the serving side's derivation, and the
	// reserved key's AEAD for REMOTE_AUTHENTICATION_FAILURE answers.
	lane     *aesni.IVLane
	ipb      [4]byte
	ini, srv *aesni.Cache
	// srvLast memoizes the serving side's last lookup: a stream of
	// requests from one initiator to one region skips the cache probe.
	// Reset whenever a region's key changes or the region goes.
	srvLastKey  aesni.CacheKey
	srvLastAEAD *aesni.AEAD
	reserved    *aesni.AEAD
	mb          *mbSealer            // Config.Crypto "ipsec-mb": the batch of queued seals (seal.go); nil: "go"
	scratch     [abi.MaxOpBytes]byte // an orphan's data is authenticated here

	// Serving WRITEs (paper §5.1): pull contexts, each with a staging
	// buffer, kept in deadline order on two intrusive lists; and on the
	// initiating side, the WRITEs whose data is still to be sent.
	pulls    []pullCtx // index 0 unused: handle 0 is never valid
	freePull []uint16
	// plist: the pulls in progress, by deadline: plist[pullsIdle] those
	// awaiting their first chunk (reclaimable after pullIdle, pullRoom),
	// plist[pullsData] those receiving data.
	plist             [2]pullList
	pullIdle          int64 // min(PullIdleTimeout, Timeout), or Timeout/4, in ns
	pullBuf           []byte
	sendq             []int32 // slots of WRITEs with data to send (see pushSend)
	sendHead, sendLen int

	rxw rxWork // the frame being received (Receive, the self-loop)
	// ReceiveBurst's prepared frames whose opens are queued (open.go)
	rxq   [openBurst]rxWork
	rxn   int
	txf   wire.Fields // scratch for the frame being encoded
	stats Stats
	// delays batches a sample per completion for the telemetry hook
	// (rmatop): full batches and those over a millisecond old are flushed.
	delays *telemetry.Batch
}

// New allocates every table of a core from cfg. Nothing is allocated on
// the data path afterwards.
func New(cfg Config, tx Tx) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("%w: nil Tx", ErrConfig)
	}
	c := &Core{
		cfg:        cfg,
		tx:         tx,
		ip:         ip4(cfg.LocalIP.As4()),
		mac:        cfg.LocalMAC,
		myPort:     cfg.UDPPort + cfg.CoreID,
		maxPayload: wire.MaxPayload(cfg.MTU),
		slots:      make([]slot, cfg.Slots),
		freeSlot:   make([]int32, 0, cfg.Slots),
		regions:    make([]region, cfg.Regions+1),
		freeRegion: make([]uint16, 0, cfg.Regions),
		portals:    make([]portal, cfg.Portals),
		dirty:      make([]PortalID, 0, cfg.Portals),
		live:       make([]PortalID, 0, cfg.Portals),
		inq:        [2]inRing{{q: make([]inbound, cfg.InboundQueue)}, {q: make([]inbound, cfg.InboundQueue)}},
		pullq:      [2]inRing{{q: make([]inbound, cfg.InboundQueue)}, {q: make([]inbound, cfg.InboundQueue)}},
		nbrs:       make([]neighbor, cfg.NeighborTable),
		replay:     newReplayTable(cfg.ReplayPeers),
		pulls:      make([]pullCtx, cfg.PullContexts+1),
		freePull:   make([]uint16, 0, cfg.PullContexts),
		pullBuf:    make([]byte, cfg.PullContexts*abi.MaxOpBytes),
		plist:      [2]pullList{{-1, -1}, {-1, -1}},
		pullIdle:   int64(cfg.Timeout / 4),
		sendq:      make([]int32, cfg.Slots),
	}
	if cfg.PullIdleTimeout > 0 {
		c.pullIdle = min(int64(cfg.Timeout), int64(cfg.PullIdleTimeout))
	}
	for i := cfg.PullContexts; i >= 1; i-- {
		c.freePull = append(c.freePull, uint16(i))
		c.pulls[i].prev, c.pulls[i].next = -1, -1
	}
	if !cfg.HairpinSelf {
		c.loop = make([][]byte, selfLoopFrames)
		c.loopN = make([]int, selfLoopFrames)
		for i := range c.loop {
			c.loop[i] = make([]byte, wire.EthLen+cfg.MTU)
		}
	}
	c.ipb = cfg.LocalIP.As4()
	c.lane = cfg.IV.NewLane()
	c.delays = new(telemetry.Batch)
	c.delays.SetCore(cfg.CoreID)
	if err := c.lane.Refill(); err != nil {
		return nil, fmt.Errorf("%w: IV source: %v", ErrConfig, err)
	}
	seed := cfg.CacheSeed
	if seed == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		seed = binary.LittleEndian.Uint64(b[:])
	}
	c.ini = aesni.NewCache(cfg.KeyCache, seed)
	c.srv = aesni.NewCache(cfg.KeyCache, seed^0x9e3779b97f4a7c15)
	var err error
	if c.reserved, err = aesni.NewReservedAEAD(); err != nil {
		return nil, err
	}
	if err := c.setupCrypto(tx); err != nil {
		return nil, err
	}
	if c.maxPayload > abi.MaxOpBytes {
		c.maxPayload = abi.MaxOpBytes
	}
	for i := cfg.Slots - 1; i >= 0; i-- {
		c.slots[i].prev, c.slots[i].next = -1, -1
		c.freeSlot = append(c.freeSlot, int32(i))
	}
	for i := cfg.Regions; i >= 1; i-- {
		c.freeRegion = append(c.freeRegion, uint16(i))
	}
	c.listInit()
	for _, n := range cfg.Neighbors {
		e := c.nbrLookup(ip4(n.IP.As4()), true)
		e.mac, e.state = n.MAC, nbrStatic
	}
	return c, nil
}

func ip4(a [4]byte) uint32 { return binary.BigEndian.Uint32(a[:]) }

// Config returns the core's configuration.
func (c *Core) Config() Config { return c.cfg }

func fifoOf(cl abi.Class) listID {
	if cl == abi.ClassHigh {
		return listFIFOHigh
	}
	return listFIFOLow
}

// ---- control plane -------------------------------------------------------

// OpenPortal attaches a portal's rings. The rings' memory must stay mapped
// until ClosePortal returns.
func (c *Core) OpenPortal(spec PortalSpec) (PortalID, error) {
	cmd, err := abi.NewConsumer(spec.CmdRing, spec.CmdCap, abi.CommandSize)
	if err != nil {
		return 0, fmt.Errorf("%w: command ring: %v", ErrPortalRings, err)
	}
	cpl, err := abi.NewProducer(spec.CplRing, spec.CplCap, abi.CompletionSize)
	if err != nil {
		return 0, fmt.Errorf("%w: completion ring: %v", ErrPortalRings, err)
	}
	if spec.MaxSlots < 0 || spec.Class > abi.ClassHigh {
		return 0, fmt.Errorf("%w: MaxSlots %d class %d", ErrPortalRings, spec.MaxSlots, spec.Class)
	}
	for i := range c.portals {
		p := &c.portals[i]
		if !p.used {
			*p = portal{used: true, class: spec.Class, cmd: cmd, cpl: cpl, maxSlots: spec.MaxSlots, pid: spec.PID}
			c.live = append(c.live, PortalID(i))
			return PortalID(i), nil
		}
	}
	return 0, ErrPortalsFull
}

func (c *Core) portal(id PortalID) (*portal, error) {
	if int(id) >= len(c.portals) || !c.portals[id].used {
		return nil, fmt.Errorf("%w: %d", ErrNoPortal, id)
	}
	return &c.portals[id], nil
}

// livePortal is portal for operations a disabled portal may not do.
func (c *Core) livePortal(id PortalID) (*portal, error) {
	p, err := c.portal(id)
	if err == nil && p.dead {
		return nil, fmt.Errorf("%w: %d", ErrPortalDead, id)
	}
	return p, err
}

// AllocSlots gives n more slots to portal p, all or nothing, within its
// MaxSlots cap.
func (c *Core) AllocSlots(id PortalID, n int) ([]abi.SlotID, error) {
	p, err := c.livePortal(id)
	if err != nil {
		return nil, err
	}
	if n < 1 || p.slots+n > p.maxSlots {
		return nil, fmt.Errorf("%w: holds %d, asks %d more, cap %d", ErrSlotCap, p.slots, n, p.maxSlots)
	}
	if n > len(c.freeSlot) {
		return nil, fmt.Errorf("%w: asks %d, %d free", ErrNoSlots, n, len(c.freeSlot))
	}
	out := make([]abi.SlotID, n)
	for k := range out {
		i := c.freeSlot[len(c.freeSlot)-1]
		c.freeSlot = c.freeSlot[:len(c.freeSlot)-1]
		s := &c.slots[i]
		s.state, s.portal, s.orphan = slotIdle, id, false
		out[k] = c.cfg.SlotBase + abi.SlotID(i)
	}
	p.slots += n
	return out, nil
}

// ClosePortal reclaims everything of p: its regions are invalidated at once,
// its idle slots freed, its queued ops dropped, and its in-flight ops are
// orphaned (they free their slot and window when they finish, with no
// completion written). Once it returns the core never touches p's rings or
// regions again.
func (c *Core) ClosePortal(id PortalID) error {
	p, err := c.portal(id)
	if err != nil {
		return err
	}
	c.reclaim(id)
	*p = portal{}
	c.dropLive(id)
	return nil
}

func (c *Core) dropLive(id PortalID) {
	for k, l := range c.live {
		if l == id {
			c.live = append(c.live[:k], c.live[k+1:]...)
			return
		}
	}
}

// reclaim takes back everything portal id holds (see ClosePortal) without
// freeing its table entry.
func (c *Core) reclaim(id PortalID) {
	p := &c.portals[id]
	for i := range c.slots {
		s := &c.slots[i]
		if s.portal != id || s.state == slotFree || s.orphan {
			continue
		}
		switch s.state {
		case slotIdle:
			c.freeSlotIdx(int32(i))
		case slotQueued, slotResolving:
			c.unlink(int32(i))
			c.inflight--
			c.stats.Orphaned++
			c.freeSlotIdx(int32(i))
		case slotInService:
			s.orphan = true
		}
	}
	for i := 1; i < len(c.regions); i++ {
		if r := &c.regions[i]; r.valid && r.owner == id {
			c.dropRegion(uint16(i))
		}
	}
	p.slots, p.pending = 0, 0
	p.cmd, p.cpl = nil, nil
	p.arm, p.bell = nil, nil
	if p.dirty {
		p.dirty = false
		for k, d := range c.dirty {
			if d == id {
				c.dirty = append(c.dirty[:k], c.dirty[k+1:]...)
				break
			}
		}
	}
}

func (c *Core) freeSlotIdx(i int32) {
	s := &c.slots[i]
	s.state, s.orphan, s.op = slotFree, false, 0
	c.freeSlot = append(c.freeSlot, i)
}

// RegisterRegion enters mem into the RRT for portal p, protected by region
// key kr (K_r, chosen by the application: paper §4.2). The memory must stay
// mapped until DeregisterRegion (or ClosePortal) returns.
func (c *Core) RegisterRegion(id PortalID, mem []byte, perm abi.Perm, kr aesni.Key) (abi.RegionID, error) {
	if _, err := c.livePortal(id); err != nil {
		return 0, err
	}
	if len(mem) == 0 || uint64(len(mem)) > 1<<40 {
		return 0, fmt.Errorf("%w: %d", ErrRegionSize, len(mem))
	}
	if len(c.freeRegion) == 0 {
		return 0, ErrRegionsFull
	}
	idx := c.freeRegion[len(c.freeRegion)-1]
	c.freeRegion = c.freeRegion[:len(c.freeRegion)-1]
	r := &c.regions[idx]
	r.gen++
	if r.gen == 0 {
		r.gen = 1
	}
	r.mem, r.perm, r.owner, r.valid = mem, perm, id, true
	if c.mb != nil {
		c.mbRegister(mem)
	}
	r.kr = aesni.NewDeriver(kr)
	return abi.MakeRegionID(idx, r.gen), nil
}

// Rekey installs a new region key for a region portal p owns (the local
// path of paper §5.2, through the driver). Requests that arrive afterwards
// authenticate only with K_d derived from the new key; requests already
// authenticated and queued are still answered. Other regions are not
// touched.
func (c *Core) Rekey(id PortalID, rid abi.RegionID, kr aesni.Key) error {
	if _, err := c.livePortal(id); err != nil {
		return err
	}
	r, err := c.ownedRegion(id, rid)
	if err != nil {
		return err
	}
	c.installKey(rid, r, kr)
	return nil
}

// ownedRegion is portal id's live region rid.
func (c *Core) ownedRegion(id PortalID, rid abi.RegionID) (*region, error) {
	r := c.lookupRegion(rid)
	if r == nil {
		return nil, fmt.Errorf("%w: %#x", ErrNoRegion, uint32(rid))
	}
	if r.owner != id {
		return nil, fmt.Errorf("%w: %#x", ErrNotOwner, uint32(rid))
	}
	return r, nil
}

func (c *Core) installKey(rid abi.RegionID, r *region, kr aesni.Key) {
	r.kr = aesni.NewDeriver(kr)
	c.srv.Invalidate(uint32(rid))
	c.srvLastAEAD = nil
	c.stats.Rekeys++
}

// DeregisterRegion invalidates a region; once it returns the core never
// touches the region's memory again. Ops in flight that land in it lose
// their remaining responses and time out.
func (c *Core) DeregisterRegion(id PortalID, rid abi.RegionID) error {
	if _, err := c.portal(id); err != nil {
		return err
	}
	if _, err := c.ownedRegion(id, rid); err != nil {
		return err
	}
	c.dropRegion(rid.Index())
	return nil
}

func (c *Core) dropRegion(idx uint16) {
	c.runSeals() // queued seals may read the region's memory
	r := &c.regions[idx]
	if c.mb != nil {
		c.mbUnregister(r.mem)
	}
	c.srv.Invalidate(uint32(abi.MakeRegionID(idx, r.gen)))
	c.srvLastAEAD = nil
	r.valid, r.mem, r.kr = false, nil, nil
	c.freeRegion = append(c.freeRegion, idx)
}

func (c *Core) lookupRegion(rid abi.RegionID) *region {
	idx := int(rid.Index())
	if idx == 0 || idx >= len(c.regions) {
		return nil
	}
	r := &c.regions[idx]
	if !r.valid || r.gen != rid.Gen() {
		return nil
	}
	return r
}

// Stats returns a copy of the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.WindowInUse = uint64(c.windowUsed)
	s.SlotsInUse = uint64(len(c.slots) - len(c.freeSlot))
	s.OpsInFlight = uint64(c.inflight)
	s.DelayBatches, s.DelaySamples = c.delays.Flushes, c.delays.Samples
	s.PullsInUse = uint64(len(c.pulls) - 1 - len(c.freePull))
	if c.replay != nil {
		s.ReplayEvictions = c.replay.evictions
	}
	return s
}

// PortalStats describes the open portal id (control plane); false when no
// portal is open under that id.
func (c *Core) PortalStats(id PortalID) (PortalStats, bool) {
	if int(id) >= len(c.portals) || !c.portals[id].used {
		return PortalStats{}, false
	}
	p := &c.portals[id]
	return PortalStats{
		PID: p.pid, Class: p.class, Slots: p.slots, MaxSlots: p.maxSlots, Pending: p.pending,
		CmdDepth: p.cmd.Available(), CmdCap: p.cmd.Capacity(),
		CplDepth: p.cpl.Capacity() - p.cpl.Free(), CplCap: p.cpl.Capacity(),
		Dead: p.dead,
	}, true
}

// InFlight reports ops posted and not yet completed (orphans included).
func (c *Core) InFlight() int { return c.inflight }

// Audit checks the resource invariants and describes the first violation:
// the window debited equals the sum over ops in service; every slot is in
// exactly one state consistent with its list; slot counts per portal and
// pending completions add up; the window never exceeds its size.
func (c *Core) Audit() error {
	if c.windowUsed < 0 || c.windowUsed > c.cfg.WindowBytes {
		return fmt.Errorf("audit: window used %d of %d", c.windowUsed, c.cfg.WindowBytes)
	}
	debit, inflight, free := 0, 0, 0
	held := make([]int, len(c.portals))
	pend := make([]int, len(c.portals))
	var onList [numLists]int
	for i := range c.slots {
		s := &c.slots[i]
		want := listNone
		switch s.state {
		case slotFree:
			free++
		case slotQueued:
			want = fifoOf(s.class)
		case slotResolving:
			want = listResolving
		case slotInService:
			want = listInService
			debit += int(s.debit)
		}
		if s.list != want {
			return fmt.Errorf("audit: slot %d state %d on list %d, want %d", i, s.state, s.list, want)
		}
		onList[s.list]++
		if s.state >= slotQueued {
			inflight++
		}
		if s.state != slotFree && !s.orphan {
			if !c.portals[s.portal].used {
				return fmt.Errorf("audit: slot %d owned by closed portal %d", i, s.portal)
			}
			held[s.portal]++
			if s.state >= slotQueued {
				pend[s.portal]++
			}
		}
		if s.orphan && s.state != slotInService {
			return fmt.Errorf("audit: orphan slot %d in state %d", i, s.state)
		}
	}
	for l := listFIFOLow; l < numLists; l++ {
		if onList[l] != c.lists[l].n {
			return fmt.Errorf("audit: list %d counts %d, slots say %d", l, c.lists[l].n, onList[l])
		}
	}
	pd, err := c.auditPulls()
	if err != nil {
		return err
	}
	debit += pd
	if debit != c.windowUsed {
		return fmt.Errorf("audit: window used %d, ops in service hold %d", c.windowUsed, debit)
	}
	if inflight != c.inflight {
		return fmt.Errorf("audit: in flight %d, slots say %d", c.inflight, inflight)
	}
	if free != len(c.freeSlot) {
		return fmt.Errorf("audit: free pool %d, free slots %d", len(c.freeSlot), free)
	}
	for i := range c.portals {
		p := &c.portals[i]
		if !p.used {
			continue
		}
		if p.slots != held[i] || p.pending != pend[i] {
			return fmt.Errorf("audit: portal %d holds %d slots (table %d), owed %d completions (table %d)", i, p.slots, held[i], p.pending, pend[i])
		}
	}
	return nil
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
	c.runSeals()
	c.closing = true
	for l := listFIFOLow; l < numLists; l++ {
		for i := c.lists[l].head; i >= 0; {
			s := &c.slots[i]
			next := s.next
			if !(l == listInService && s.op != abi.OpRead && s.pulled && s.sent == s.length && s.remoteIP != c.ip) {
				c.complete(now, i, abi.StatusAborted)
			}
			i = next
		}
	}
	for c.sendLen > 0 {
		c.slots[c.sendq[c.sendHead]].inSendq = false
		c.sendHead = (c.sendHead + 1) % len(c.sendq)
		c.sendLen--
	}
	c.inq[0].n, c.inq[1].n, c.pullq[0].n, c.pullq[1].n, c.loopLen = 0, 0, 0, 0, 0
	for k := range c.plist {
		for c.plist[k].head >= 0 {
			c.endPull(c.plist[k].head)
		}
	}
	c.publish()
	c.delays.Flush() // the ABORTED completions: no Poll may follow
}

// NextDeadline is the earliest time a timer fires (math.MaxInt64: none).
// Queued requests and unread commands are not timers: the driver polls.
func (c *Core) NextDeadline() int64 {
	d := int64(math.MaxInt64)
	if i := c.lists[listInService].head; i >= 0 {
		d = min(d, c.slots[i].deadline)
	}
	for _, l := range [...]listID{listFIFOLow, listFIFOHigh} {
		if i := c.lists[l].head; i >= 0 {
			d = min(d, c.slots[i].queuedNs+int64(c.cfg.DispatchTimeout))
		}
	}
	if i := c.lists[listResolving].head; i >= 0 {
		d = min(d, c.slots[i].postNs+int64(c.cfg.ResolveTimeout), c.nextARPScan)
	}
	for k := range c.inq {
		if q := &c.inq[k]; q.n > 0 {
			d = min(d, q.q[q.head].arrival)
		}
	}
	for _, l := range c.plist {
		if l.head >= 0 {
			d = min(d, c.pulls[l.head].deadline)
		}
	}
	for k := range c.pullq { // waiting for window: due when it expires (a freed window comes with work)
		if q := &c.pullq[k]; q.n > 0 {
			d = min(d, q.q[q.head].arrival+int64(c.cfg.Timeout))
			if h := c.plist[pullsIdle].head; h >= 0 { // or when an idle pull becomes reclaimable (pullRoom)
				d = min(d, c.pulls[h].idleBy)
			}
		}
	}
	if c.loopLen > 0 || c.sendLen > 0 {
		d = math.MinInt64
	}
	return d
}

// ---- completions ---------------------------------------------------------

// complete finishes the op in slot i: refunds its window, takes it off its
// list, writes its completion (unless orphaned) and frees or idles the slot.
func (c *Core) complete(now int64, i int32, st abi.Status) {
	s := &c.slots[i]
	if s.state == slotInService {
		c.windowUsed -= int(s.debit)
		s.debit = 0
	}
	c.unlink(i)
	c.inflight--
	if s.orphan { // no completion is written for it: counted apart
		c.stats.Orphaned++
		c.freeSlotIdx(i)
		return
	}
	c.countCompletion(s.op, st)
	p := &c.portals[s.portal]
	p.pending--
	s.state = slotIdle
	var issue int64
	if s.issueNs != 0 {
		issue = s.issueNs - s.postNs
	}
	n := uint32(0)
	if st == abi.StatusOK {
		n = s.length
	}
	c.writeCompletion(now, s.portal, p, &abi.Completion{
		Cookie: s.cookie, Slot: c.cfg.SlotBase + abi.SlotID(i), Status: st, Op: s.op,
		IssueDelayNs: clampNs(issue), TotalDelayNs: clampNs(now - s.postNs), Length: n,
	})
}

// countCompletion counts one completion by status and by op.
func (c *Core) countCompletion(op abi.Op, st abi.Status) {
	c.stats.Completed[st]++
	if int(op) >= NumOpCounters {
		op = 0
	}
	c.stats.CompletedByOp[op][st]++
}

func clampNs(d int64) uint32 {
	if d < 0 {
		return 0
	}
	if d > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(d)
}

// writeCompletion commits a completion and records its delays for the
// telemetry hook; room was reserved when the command was taken from the
// ring (see drainPortal), so Reserve cannot fail unless the application
// corrupted the ring indices.
func (c *Core) writeCompletion(now int64, id PortalID, p *portal, cpl *abi.Completion) {
	b := p.cpl.Reserve()
	if b == nil {
		c.stats.RingsCorrupt++
		return
	}
	cpl.Encode(b)
	p.cpl.Commit()
	c.delays.Add(now, telemetry.Sample{
		IssueNs: cpl.IssueDelayNs, TotalNs: cpl.TotalDelayNs,
		Op: uint8(cpl.Op), Status: uint8(cpl.Status), Length: cpl.Length,
	})
	if !p.dirty {
		p.dirty = true
		c.dirty = append(c.dirty, id)
	}
}

func (c *Core) publish() {
	for _, id := range c.dirty {
		p := &c.portals[id]
		p.cpl.Publish()
		p.dirty = false
		// After the producer index store: an application that armed
		// before it is rung; one arming after it sees the completions
		// when it re-checks the ring (abi.SegmentArmOff).
		if p.arm != nil && p.arm.Load() != 0 && p.arm.CompareAndSwap(1, 0) {
			c.stats.Doorbells++
			p.bell.Ring()
		}
	}
	c.dirty = c.dirty[:0]
}

// Doorbell wakes an application sleeping on its completions. The driver
// supplies it (an eventfd write in rmad); the core calls Ring from Poll
// only for a portal whose application armed it, at most once per arming.
type Doorbell interface{ Ring() }

// SetDoorbell attaches a doorbell to portal p: arm is the 4-byte arm word
// in the portal's shared segment (abi.SegmentArmOff), 4-byte aligned.
func (c *Core) SetDoorbell(id PortalID, arm []byte, bell Doorbell) error {
	p, err := c.livePortal(id)
	if err != nil {
		return err
	}
	if len(arm) < 4 || uintptr(unsafe.Pointer(unsafe.SliceData(arm)))%4 != 0 || bell == nil {
		return fmt.Errorf("%w: doorbell arm word", ErrPortalRings)
	}
	p.arm, p.bell = (*atomic.Uint32)(unsafe.Pointer(unsafe.SliceData(arm))), bell
	return nil
}

// ---- Poll ----------------------------------------------------------------

// perPortalBurst bounds commands taken from one portal per Poll (fairness
// between portals; Kalia et al.: batches of 32 amortise the doorbell).
const perPortalBurst = 64

// Poll drains command rings, arbitrates the window, serves queued requests,
// expires timers and publishes completions. It returns the amount of work
// done (0: idle).
func (c *Core) Poll(now int64) int {
	work := 0
	if err := c.lane.Refill(); err != nil { // cheap unless the spare range ran out
		c.stats.IVErrors++
	}
	if n := len(c.live); n > 0 {
		start := int(c.pollRR % uint32(n))
		c.pollRR++
		dead := false
		for j := range n {
			id := c.live[(start+j)%n]
			work += c.drainPortal(now, id)
			dead = dead || c.portals[id].dead
		}
		for k := 0; dead && k < len(c.live); k++ {
			if id := c.live[k]; c.portals[id].dead { // its rings are corrupt: drained no more
				c.dropLive(id)
				k--
			}
		}
	}
	work += c.expire(now)
	work += c.arbitrate(now)
	work += c.runLoop(now) // requests to ourselves join the inbound queue
	work += c.serve(now)
	work += c.startPulls(now)
	work += c.sendData(now) // WRITE data for pulls that could not all be sent at once
	work += c.runLoop(now)  // responses to ourselves complete their ops
	c.runSeals()            // nothing waits for the next tx burst sealed
	c.publish()
	if c.delays.Due(now) || c.closing {
		c.delays.Flush()
	}
	return work
}

func (c *Core) drainPortal(now int64, id PortalID) int {
	p := &c.portals[id]
	// Completion entries not yet promised. The cached view avoids reading
	// the application's cache line on every Poll; it is refreshed only
	// when it looks too small.
	avail := int(p.cpl.FreeCached()) - p.pending
	if avail < perPortalBurst {
		avail = int(p.cpl.Free()) - p.pending
	}
	n := 0
	for n < perPortalBurst && avail > 0 {
		e := p.cmd.Peek()
		if e == nil {
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
		c.post(now, id, p, &cmd, err != nil)
		avail--
		n++
	}
	p.cmd.Release()
	if p.cmd.Corrupt() || p.cpl.Corrupt() {
		// Reclaim at once, but keep the entry (and its id) until the
		// control plane closes it, so the id cannot name a newer portal.
		c.stats.RingsCorrupt++
		c.reclaim(id)
		p.dead = true
	}
	return n
}

// fail completes a command that never got a slot.
func (c *Core) fail(now int64, id PortalID, p *portal, cmd *abi.Command, st abi.Status) {
	c.countCompletion(cmd.Op, st)
	c.writeCompletion(now, id, p, &abi.Completion{Cookie: cmd.Cookie, Slot: cmd.Slot, Status: st, Op: cmd.Op})
}

// post validates one command and queues its op. Every failure completes at
// once with a precise status and touches nothing.
func (c *Core) post(now int64, id PortalID, p *portal, cmd *abi.Command, malformed bool) {
	if c.closing {
		c.fail(now, id, p, cmd, abi.StatusAborted)
		return
	}
	idx := int64(cmd.Slot) - int64(c.cfg.SlotBase)
	if idx < 0 || idx >= int64(len(c.slots)) || c.slots[idx].state != slotIdle ||
		c.slots[idx].portal != id || c.slots[idx].orphan {
		c.fail(now, id, p, cmd, abi.StatusBadSlot)
		return
	}
	st := c.validate(id, cmd, malformed)
	if st != abi.StatusOK {
		c.fail(now, id, p, cmd, st)
		return
	}
	s := &c.slots[idx]
	ck := aesni.CacheKey{Region: uint32(cmd.RemoteRegion), PID: p.pid, Op: uint8(cmd.Op)}
	binary.BigEndian.PutUint32(ck.Peer[:], cmd.RemoteAddr)
	a := s.aead // the slot's previous op, very often to the same region with the same key
	if a == nil || s.ck != ck || !a.Matches((*aesni.Key)(&cmd.Key)) {
		a = c.ini.Get(ck)
	}
	if a == nil || !a.Matches((*aesni.Key)(&cmd.Key)) {
		var err error
		if a, err = c.ini.Put(ck, aesni.Key(cmd.Key)); err != nil {
			c.fail(now, id, p, cmd, abi.StatusBadCommand)
			return
		}
	}
	s.aead, s.ck = a, ck
	s.op, s.class, s.cookie = cmd.Op, p.class, cmd.Cookie
	s.remoteIP, s.remReg, s.remOff = cmd.RemoteAddr, uint32(cmd.RemoteRegion), cmd.RemoteOffset
	s.locReg, s.locOff, s.length = cmd.LocalRegion, cmd.LocalOffset, cmd.Length
	if cmd.Op == abi.OpRekey { // the key is taken now: the app may reuse its buffer at once
		r := c.lookupRegion(cmd.LocalRegion)
		s.newKey = aesni.Key(r.mem[cmd.LocalOffset : cmd.LocalOffset+aesni.KeySize])
	}
	s.seq++
	s.postNs, s.issueNs, s.deadline = now, 0, 0
	s.arrived = 0
	s.pulled, s.sent = false, 0
	s.want = unitMask(cmd.Length)
	p.pending++
	c.inflight++
	if cmd.RemoteAddr == c.ip {
		s.mac = c.mac
	} else if e := c.nbrLookup(cmd.RemoteAddr, true); e == nil {
		s.state = slotQueued // complete() expects an op state
		c.complete(now, int32(idx), abi.StatusUnreachable)
		return
	} else if e.state == nbrResolved || e.state == nbrStatic {
		s.mac = e.mac
	} else {
		s.state = slotResolving
		c.pushBack(listResolving, int32(idx))
		if now-e.lastReq >= int64(c.cfg.ARPRetry) {
			c.sendARPRequest(now, e)
		}
		if c.lists[listResolving].n == 1 {
			c.nextARPScan = now + int64(c.cfg.ARPRetry)
		}
		return
	}
	c.enqueue(now, int32(idx))
}

// enqueue puts a resolved op at the tail of its arbiter FIFO. Each FIFO is
// ordered by queuedNs, so DISPATCH_TIMEOUT is checked at its head only.
func (c *Core) enqueue(now int64, i int32) {
	s := &c.slots[i]
	s.state = slotQueued
	s.queuedNs = now
	c.pushBack(fifoOf(s.class), i)
}

func (c *Core) validate(id PortalID, cmd *abi.Command, malformed bool) abi.Status {
	if malformed || (cmd.Op != abi.OpRead && cmd.Op != abi.OpWrite && cmd.Op != abi.OpRekey) {
		return abi.StatusBadCommand
	}
	if cmd.Length == 0 || (cmd.Op == abi.OpRekey && cmd.Length != aesni.KeySize) {
		return abi.StatusBadCommand
	}
	if cmd.Length > abi.MaxOpBytes {
		return abi.StatusTooLarge
	}
	r := c.lookupRegion(cmd.LocalRegion)
	if r == nil || r.owner != id {
		return abi.StatusLocalRegion
	}
	if cmd.LocalOffset > uint64(len(r.mem)) || uint64(len(r.mem))-cmd.LocalOffset < uint64(cmd.Length) {
		return abi.StatusLocalBounds
	}
	// A READ writes its sink; a WRITE and a REKEY read their source.
	if (cmd.Op == abi.OpRead && r.perm&abi.PermLocalWrite == 0) || (cmd.Op != abi.OpRead && r.perm&abi.PermLocalRead == 0) {
		return abi.StatusLocalPermission
	}
	a := cmd.RemoteAddr
	if a == 0 || a == math.MaxUint32 || a>>28 == 0xe { // unspecified, broadcast, multicast
		return abi.StatusUnreachable
	}
	return abi.StatusOK
}

// expire fires TIMEOUT, DISPATCH_TIMEOUT and UNREACHABLE, and retries ARP.
func (c *Core) expire(now int64) int {
	n := c.expirePulls(now)
	for i := c.lists[listInService].head; i >= 0 && c.slots[i].deadline <= now; i = c.lists[listInService].head {
		c.complete(now, i, abi.StatusTimeout)
		n++
	}
	dt := int64(c.cfg.DispatchTimeout)
	for _, l := range [...]listID{listFIFOHigh, listFIFOLow} {
		for i := c.lists[l].head; i >= 0 && now-c.slots[i].queuedNs >= dt; i = c.lists[l].head {
			c.complete(now, i, abi.StatusDispatchTimeout)
			n++
		}
	}
	rt := int64(c.cfg.ResolveTimeout)
	for i := c.lists[listResolving].head; i >= 0 && now-c.slots[i].postNs >= rt; i = c.lists[listResolving].head {
		ip := c.slots[i].remoteIP
		c.complete(now, i, abi.StatusUnreachable)
		c.forgetIfUnwanted(ip)
		n++
	}
	if c.lists[listResolving].n > 0 && now >= c.nextARPScan {
		c.nextARPScan = now + int64(c.cfg.ARPRetry)
		for i := c.lists[listResolving].head; i >= 0; i = c.slots[i].next {
			e := c.nbrLookup(c.slots[i].remoteIP, false)
			if e != nil && e.state == nbrIncomplete && now-e.lastReq >= int64(c.cfg.ARPRetry) {
				c.sendARPRequest(now, e)
				n++
			}
		}
	}
	return n
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
	if gap <= 0 {
		return
	}
	for i := c.lists[listInService].head; i >= 0; i = c.slots[i].next {
		c.slots[i].deadline += gap // every one: the list stays in deadline order
	}
	for _, l := range [...]listID{listFIFOHigh, listFIFOLow} {
		for i := c.lists[l].head; i >= 0; i = c.slots[i].next {
			c.slots[i].queuedNs += gap
		}
	}
}

// arbitrate grants window to the heads of the two FIFOs (paper §4.3): the
// high class first, the low class after HighBurst consecutive high grants.
func (c *Core) arbitrate(now int64) int {
	n := 0
	for c.cfg.WindowBytes-c.windowUsed >= ArbitrationBytes {
		hi, lo := c.lists[listFIFOHigh].head, c.lists[listFIFOLow].head
		var i int32
		switch {
		case hi >= 0 && (lo < 0 || c.highStreak < c.cfg.HighBurst):
			i = hi
			if lo >= 0 {
				c.highStreak++
			}
		case lo >= 0:
			i = lo
			c.highStreak = 0
		default:
			return n
		}
		b := c.tx.Buffer()
		if b == nil {
			c.stats.TxNoBuffer++
			return n
		}
		c.unlink(i)
		s := &c.slots[i]
		s.state = slotInService
		s.debit = s.length
		if s.op != abi.OpRead { // WRITE, REKEY: it solicits only the pull and the acknowledgment
			s.debit = wire.ChunkAlign
		}
		c.windowUsed += int(s.debit)
		s.issueNs = now
		if s.issueNs == 0 { // 0 means "never issued"
			s.issueNs = 1
		}
		s.deadline = now + int64(c.cfg.Timeout)
		c.insertInService(i) // not always the tail: a pulled WRITE may have adopted a longer timeout
		c.stats.EnteredSvc++
		if !c.sendRequest(b, i) { // no IV counter: the op cannot be sealed
			c.complete(now, i, abi.StatusAborted)
		}
		n++
	}
	return n
}

// sendRequest seals and sends the request of op i: the header (with a
// fresh IV: our address ‖ our counter) is authenticated under the
// command's K_d, and the IV is kept in the slot to curry the answers.
func (c *Core) sendRequest(b []byte, i int32) bool {
	s := &c.slots[i]
	ctr, err := c.lane.Next()
	if err != nil {
		c.stats.IVErrors++
		return false
	}
	aesni.PutNonce(s.iv[:], c.ipb, ctr)
	f := &c.txf
	f.DstMAC, f.SrcMAC = s.mac, c.mac
	f.SrcIP, f.DstIP = c.ip, s.remoteIP
	f.SrcPort, f.DstPort = c.myPort, c.cfg.UDPPort
	f.Type, f.Status, f.Flags = wire.TypeReadReq, 0, 0
	if s.class == abi.ClassHigh { // the serving engine queues it ahead of low-class requests
		f.Flags = wire.FlagHigh
	}
	f.PID = c.portals[s.portal].pid
	f.Tag = uint64(c.cfg.SlotBase+abi.SlotID(i))<<32 | uint64(s.seq)
	f.Region, f.Length, f.Offset = s.remReg, s.length, s.remOff
	f.IV = s.iv
	switch s.op { // a WRITE and a REKEY are requests to read: their data is pulled (write.go)
	case abi.OpWrite:
		f.Type = wire.TypeWriteReq
	case abi.OpRekey:
		f.Type = wire.TypeRekeyReq
	}
	n := wire.Encode(b, f, 0)
	c.sealRequest(s.aead, wire.Trailer(b, 0), wire.IV(b), wire.AAD(b))
	c.emit(b, n)
	return true
}

// selfLoopFrames bounds frames in flight from the engine to itself: a
// request plus its responses for every op the window admits (64 x 4 KB ops
// at 1408 B per frame: 256 frames) fit with room to spare.
const selfLoopFrames = 512

// emit sends a finished frame: to the port, or, when it is addressed to
// this engine itself, into the self-loop ring. The tx buffer is not sent
// in that case and Tx.Buffer hands it out again for the next frame.
func (c *Core) emit(b []byte, n int) {
	if c.loop != nil && wire.MAC(b[0:6]) == c.mac {
		// The frame is copied (or dropped) and its buffer handed out
		// again: its seal must be done first.
		c.runSeals()
		if c.loopLen == len(c.loop) {
			c.stats.TxNoBuffer++
			return
		}
		k := c.loopHead + c.loopLen
		if k >= len(c.loop) {
			k -= len(c.loop)
		}
		copy(c.loop[k], b[:n])
		c.loopN[k] = n
		c.loopLen++
		c.stats.SelfLoop++
		return
	}
	c.tx.Send(n)
	c.stats.TxFrames++
}

// runLoop receives the frames the engine sent to itself, in order. Frames
// that processing adds are handled too, up to one ring's worth per call.
func (c *Core) runLoop(now int64) int {
	n := 0
	for c.loopLen > 0 && n < len(c.loop) {
		k := c.loopHead
		c.receive(now, c.loop[k][:c.loopN[k]]) // may append; never overwrites slot k
		c.loopHead++
		if c.loopHead == len(c.loop) {
			c.loopHead = 0
		}
		c.loopLen--
		n++
	}
	return n
}

// ---- Receive -------------------------------------------------------------

// Receive processes one received frame at time now (ns, monotonic). The
// frame is borrowed for the call only.
func (c *Core) Receive(now int64, frame []byte) {
	c.stats.RxFrames++
	c.receive(now, frame)
}

func (c *Core) receive(now int64, frame []byte) {
	w := &c.rxw
	if c.prepare(now, frame, w) {
		c.finish(now, w, c.openNow(w))
	}
}

// prepare does everything a received frame needs before its open: decode,
// checks, the lookups of its op, slot or pull, and of its AEAD; it fills w
// and returns true when the frame is to be opened (then finish), false
// when it was handled already (ARP) or dropped (counted). Apart from
// those counters it changes nothing, so that a frame can be prepared
// again (see ReceiveBurst).
func (c *Core) prepare(now int64, frame []byte, w *rxWork) bool {
	switch wire.EtherType(frame) {
	case wire.EtherTypeARP:
		c.receiveARP(now, frame)
		return false
	case wire.EtherTypeIPv4:
	default:
		c.stats.RxDropped++
		return false
	}
	f := &w.f
	payload, err := wire.Decode(frame, f)
	if err != nil || f.DstMAC != c.mac || f.DstIP != c.ip {
		c.stats.RxDropped++
		return false
	}
	w.frame = frame
	switch f.Type {
	case wire.TypeReadReq, wire.TypeWriteReq, wire.TypeRekeyReq:
		if f.DstPort != c.cfg.UDPPort || (f.Type == wire.TypeRekeyReq && f.Length != aesni.KeySize) || c.closing {
			c.stats.RxDropped++
			return false
		}
		c.prepRequest(frame, w)
		return true
	case wire.TypeWriteData:
		if f.DstPort != c.myPort {
			c.stats.RxDropped++
			return false
		}
		return c.prepWriteData(frame, payload, w)
	case wire.TypeReadResp, wire.TypeNack, wire.TypeError, wire.TypeAck, wire.TypePullReq:
		if f.DstPort != c.myPort {
			c.stats.RxDropped++
			return false
		}
		return c.prepResponse(frame, len(payload), w)
	}
	return false
}

// respSlot finds the op a response answers, or -1 (stale or foreign).
func (c *Core) respSlot(f *wire.Fields) int32 {
	idx := int64(f.Tag>>32) - int64(c.cfg.SlotBase)
	if idx < 0 || idx >= int64(len(c.slots)) {
		return -1
	}
	s := &c.slots[idx]
	if s.state != slotInService || s.seq != uint32(f.Tag) || s.remoteIP != f.SrcIP {
		return -1
	}
	return int32(idx)
}

// prepResponse prepares an answer to one of our ops: authenticated (by
// finish) against the op's K_d and its request's IV (curried). Answers
// that fail authentication are dropped and counted: the op still
// completes, by a genuine answer or by TIMEOUT.
func (c *Core) prepResponse(frame []byte, plen int, w *rxWork) bool {
	f := &w.f
	i := c.respSlot(f)
	if i < 0 {
		c.stats.RxStale++
		return false
	}
	s := &c.slots[i]
	if (f.Type == wire.TypeReadResp) != (s.op == abi.OpRead) && f.Type != wire.TypeNack && f.Type != wire.TypeError {
		c.stats.RxDropped++ // data for a WRITE, an Ack or a pull for a READ
		return false
	}
	w.idx, w.seq, w.a = i, s.seq, s.aead
	// A WRITE's (or REKEY's) answers after its pull are curried with the
	// pull's IV: an answer to the request itself (NACK, error) no longer
	// authenticates once the serving side may commit.
	w.curry = s.iv[:]
	if s.pulled {
		w.curry = s.pullIV[:]
	}
	switch f.Type {
	case wire.TypePullReq:
		return c.prepPull(frame, w)
	case wire.TypeNack, wire.TypeError, wire.TypeAck:
		if f.Type == wire.TypeAck && !s.pulled {
			c.stats.RxDropped++ // acknowledged only after the data was pulled
			return false
		}
		// After the pull the serving engine answers only with an Ack or
		// an error under K_d: it has authenticated the request and its
		// queue has taken it. A NACK or REMOTE_AUTHENTICATION_FAILURE
		// then is forged (the latter's reserved key is public, and the
		// pull's IV it would be curried with is in clear): accepting it
		// would report a failure for a write that may still commit.
		if s.pulled && (f.Type == wire.TypeNack || abi.Status(f.Status) == abi.StatusRemoteAuthFailure) {
			c.stats.RxDropped++
			return false
		}
		st := abi.StatusNack
		if f.Type == wire.TypeAck {
			st = abi.StatusOK
		}
		if f.Type == wire.TypeError {
			st = abi.Status(f.Status)
			if st != abi.StatusRemoteAuthFailure && (st < abi.StatusRemoteRegion || st > abi.StatusRemotePermission) {
				c.stats.RxDropped++
				return false
			}
		}
		w.open, w.then, w.st, w.in = openVerify, thenAnswer, st, wire.Trailer(frame, 0)
		if st == abi.StatusRemoteAuthFailure { // sealed with the reserved key
			w.open = openAuthFailure
		}
		return true
	}
	off, n := f.Offset, uint64(plen)
	bits, ok := chunkBits(off, n, s.length)
	if !ok {
		c.stats.RxDropped++
		return false
	}
	if s.arrived&bits != 0 {
		c.stats.RxDuplicate++
		return false
	}
	// Opened straight from the packet into the sink, in one pass fused
	// with the cipher. A forged chunk leaves zeros in a range that has not
	// arrived yet (its genuine chunk overwrites them); ranges that arrived
	// are never touched again (the bitmap check above), nor ranges whose
	// open is pending in a burst (ReceiveBurst).
	if s.orphan { // its data has nowhere to go, but it still finishes
		w.dst = c.scratch[:n]
	} else {
		r := c.lookupRegion(s.locReg)
		if r == nil { // the sink was deregistered: drop the data, the op times out
			c.stats.RxStale++
			return false
		}
		w.dst = r.mem[s.locOff+off : s.locOff+off+n]
	}
	w.open, w.then, w.bits = openDirect, thenChunk, bits
	w.in, w.curry = wire.Sealed(frame, plen), s.iv[:]
	return true
}

// slotStill reports whether w's op still holds its slot: always, unless
// an earlier frame of the same burst ended it (ReceiveBurst keeps such
// frames apart; this is the re-validation behind that rule).
func (c *Core) slotStill(w *rxWork) bool {
	s := &c.slots[w.idx]
	if s.state != slotInService || s.seq != w.seq {
		c.stats.RxStale++
		return false
	}
	return true
}

// finishAnswer completes op w.idx with a payload-free answer's status.
func (c *Core) finishAnswer(now int64, w *rxWork, ok bool) {
	if !c.slotStill(w) {
		return
	}
	if !ok {
		c.stats.RxAuthFailed++
		return
	}
	c.complete(now, w.idx, w.st)
}

// finishChunk records a READ's chunk, opened into its sink, and completes
// the op with its last one.
func (c *Core) finishChunk(now int64, w *rxWork, ok bool) {
	if !c.slotStill(w) {
		return
	}
	if !ok {
		c.stats.RxAuthFailed++
		return
	}
	s := &c.slots[w.idx]
	s.arrived |= w.bits
	if s.arrived == s.want {
		c.complete(now, w.idx, abi.StatusOK)
	}
}

// ---- serving side --------------------------------------------------------

// prepRequest prepares a request for its authentication (finishRequest
// queues it, or NACKs it). The serving side derives the initiator's K_d
// from the region's K_r and the request's own address, PID and op type
// (paper §4.2); a request it cannot authenticate (wrong key, unknown or
// stale region, tampered header) is answered at once with
// REMOTE_AUTHENTICATION_FAILURE sealed with the reserved key. The answer
// goes to the request's source MAC; the neighbor table learns nothing from
// requests, so forged sources cannot fill it.
func (c *Core) prepRequest(frame []byte, w *rxWork) {
	f := &w.f
	w.op = abi.OpRead
	switch f.Type {
	case wire.TypeWriteReq:
		w.op = abi.OpWrite
	case wire.TypeRekeyReq:
		w.op = abi.OpRekey
	}
	_, w.a = c.serverKey(w.op, f)
	w.open, w.then, w.in = openRequest, thenRequest, wire.Trailer(frame, 0)
	if w.a == nil {
		w.open = openFail
	}
}

func (c *Core) finishRequest(now int64, w *rxWork, ok bool) {
	f := &w.f
	if !ok {
		c.stats.ReqAuthFailed++
		c.reply(f.SrcMAC, f.SrcIP, f.SrcPort, f.PID, f.Tag, wire.TypeError, abi.StatusRemoteAuthFailure, nil, &f.IV)
		return
	}
	if c.replay != nil {
		addr, ctr := aesni.NonceCounter(f.IV[:])
		if !c.replay.accept(binary.BigEndian.Uint32(addr[:]), ctr, now) {
			c.stats.ReqReplayed++
			return // no answer: only the genuine request gets one
		}
	}
	a := w.a
	cl := abi.ClassLow
	if f.Flags&wire.FlagHigh != 0 {
		cl = abi.ClassHigh
	}
	q := &c.inq[cl]
	if q.n >= c.cfg.NackThreshold {
		c.reply(f.SrcMAC, f.SrcIP, f.SrcPort, f.PID, f.Tag, wire.TypeNack, 0, a, &f.IV)
		c.stats.ReqNacked++
		return
	}
	tail := q.head + q.n
	if tail >= len(q.q) {
		tail -= len(q.q)
	}
	e := &q.q[tail]
	q.n++
	if d := uint64(c.inq[0].n + c.inq[1].n); d > c.stats.ReqQueueMax {
		c.stats.ReqQueueMax = d
	}
	*e = inbound{
		op: w.op, ip: f.SrcIP, mac: f.SrcMAC, port: f.SrcPort, pid: f.PID, tag: f.Tag,
		region: f.Region, length: f.Length, offset: f.Offset, arrival: now,
		aead: a, iv: f.IV,
	}
}

// serverKey finds the region the received request names and the AEAD of
// the K_d its initiator must have used for op: derived from the region's
// K_r and the request's source address and PID (paper §4.2). Both are nil
// when the region does not exist.
func (c *Core) serverKey(op abi.Op, f *wire.Fields) (*region, *aesni.AEAD) {
	r := c.lookupRegion(abi.RegionID(f.Region))
	if r == nil {
		return nil, nil
	}
	ck := aesni.CacheKey{Region: f.Region, PID: f.PID, Op: uint8(op)}
	binary.BigEndian.PutUint32(ck.Peer[:], f.SrcIP)
	if c.srvLastAEAD != nil && c.srvLastKey == ck {
		return r, c.srvLastAEAD
	}
	a, err := c.srv.GetOrDerive(ck, r.kr)
	if err != nil {
		return r, nil
	}
	c.srvLastKey, c.srvLastAEAD = ck, a
	return r, a
}

// reply sends a payload-free answer (NACK or error status) to a request,
// sealed under the request's K_d a with its IV curried in, or, when a is
// nil, as REMOTE_AUTHENTICATION_FAILURE under the reserved key. It returns
// false when the answer could not be sent now (no tx buffer); an answer
// that can never be sealed (no IV counter) is dropped and counted.
func (c *Core) reply(mac wire.MAC, ip uint32, port uint16, pid uint32, tag uint64, t wire.Type, st abi.Status, a *aesni.AEAD, reqIV *[aesni.NonceSize]byte) bool {
	b := c.tx.Buffer()
	if b == nil {
		c.stats.TxNoBuffer++
		return false
	}
	ctr, err := c.lane.Next()
	if err != nil {
		c.stats.IVErrors++
		return true
	}
	f := &c.txf
	f.DstMAC, f.SrcMAC = mac, c.mac
	f.SrcIP, f.DstIP = c.ip, ip
	f.SrcPort, f.DstPort = c.cfg.UDPPort, port
	f.Type, f.Status, f.Flags = t, uint8(st), 0
	f.PID, f.Tag, f.Region, f.Length, f.Offset = pid, tag, 0, 0, 0
	aesni.PutNonce(f.IV[:], c.ipb, ctr)
	n := wire.Encode(b, f, 0)
	if a == nil {
		c.sealAuthFailure(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b), reqIV[:])
	} else {
		c.sealResponse(a, wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), reqIV[:])
	}
	c.emit(b, n)
	return true
}

// inRing is one inbound request queue (a ring of InboundQueue entries).
type inRing struct {
	q       []inbound
	head, n int
}

func (q *inRing) pop() {
	q.head++
	if q.head == len(q.q) {
		q.head = 0
	}
	q.n--
}

// nextInbound picks the queue to serve next: high first; after HighBurst
// consecutive high requests while low ones wait, one low request.
func (c *Core) nextInbound() *inRing {
	hi, lo := &c.inq[abi.ClassHigh], &c.inq[abi.ClassLow]
	switch {
	case hi.n > 0 && (lo.n == 0 || c.serveStreak < c.cfg.HighBurst):
		if lo.n > 0 {
			c.serveStreak++
		}
		return hi
	case lo.n > 0:
		c.serveStreak = 0
		return lo
	}
	return nil
}

// startPulls serves the WRITE and REKEY requests waiting for a pull
// context and window, each class in FIFO order, high first with the
// HighBurst rule. Requests older than TIMEOUT are dropped (their
// initiators have given up).
func (c *Core) startPulls(now int64) int {
	n := 0
	for {
		hi, lo := &c.pullq[abi.ClassHigh], &c.pullq[abi.ClassLow]
		var q *inRing
		switch {
		case hi.n > 0 && (lo.n == 0 || c.pullStreak < c.cfg.HighBurst):
			q = hi
		case lo.n > 0:
			q = lo
		default:
			return n
		}
		e := &q.q[q.head]
		if now-e.arrival > int64(c.cfg.Timeout) {
			c.stats.ReqExpired++
			q.pop()
			continue
		}
		switch c.startPull(now, e) {
		case pullWait: // no window, context or tx buffer now: resume next Poll
			return n
		case pullStarted:
			c.stats.PullsIssued++
		}
		if q == hi && lo.n > 0 {
			c.pullStreak++
		} else if q == lo {
			c.pullStreak = 0
		}
		q.pop()
		n++
	}
}

// serve answers queued requests, each class in FIFO order, at most
// ServeBudget per Poll, streaming each READ as MTU-sized responses straight
// from region memory.
func (c *Core) serve(now int64) int {
	served := 0
	for served < c.cfg.ServeBudget {
		q := c.nextInbound()
		if q == nil {
			break
		}
		e := &q.q[q.head]
		if now-e.arrival > int64(c.cfg.Timeout) { // its initiator has given up
			c.stats.ReqExpired++
			q.pop()
			continue
		}
		if e.op != abi.OpRead { // WRITE, REKEY: pulled when window allows (startPulls)
			pq := &c.pullq[abi.ClassLow]
			if q == &c.inq[abi.ClassHigh] {
				pq = &c.pullq[abi.ClassHigh]
			}
			if pq.n == len(pq.q) {
				return served // cannot happen: pullq is as large as inq
			}
			k := pq.head + pq.n
			if k >= len(pq.q) {
				k -= len(pq.q)
			}
			pq.q[k] = *e
			pq.n++
			q.pop()
			served++
			continue
		}
		if e.sent == 0 {
			if st := c.checkRequest(e); st != abi.StatusOK {
				if !c.reply(e.mac, e.ip, e.port, e.pid, e.tag, wire.TypeError, st, e.aead, &e.iv) {
					return served
				}
				c.stats.ReqErrors++
				q.pop()
				served++
				continue
			}
		}
		r := c.lookupRegion(abi.RegionID(e.region))
		if r == nil { // deregistered while partly sent: the initiator times out
			c.stats.ReqExpired++
			q.pop()
			continue
		}
		if e.base == 0 { // counters for every chunk offset: nonces follow from offsets
			base, err := c.lane.NextN(aesni.ResponseSpan(e.length))
			if err != nil {
				c.stats.IVErrors++
				q.pop()
				continue
			}
			e.base = base
		}
		for e.sent < e.length {
			b := c.tx.Buffer()
			if b == nil {
				c.stats.TxNoBuffer++
				return served // resume this request on the next Poll
			}
			n := min(int(e.length-e.sent), c.maxPayload)
			f := &c.txf
			f.DstMAC, f.SrcMAC = e.mac, c.mac
			f.SrcIP, f.DstIP = c.ip, e.ip
			f.SrcPort, f.DstPort = c.cfg.UDPPort, e.port
			f.Type, f.Status, f.Flags = wire.TypeReadResp, 0, 0
			f.PID, f.Tag, f.Region = e.pid, e.tag, e.region
			f.Length, f.Offset = uint32(n), uint64(e.sent)
			aesni.PutResponseNonce(f.IV[:], c.ipb, e.base, uint64(e.sent))
			fl := wire.Encode(b, f, n)
			// Sealed straight from region memory into the frame: the data
			// moves once, fused with the cipher.
			src := e.offset + uint64(e.sent)
			c.sealResponse(e.aead, wire.Sealed(b, n), r.mem[src:src+uint64(n)], wire.IV(b), wire.AAD(b), e.iv[:])
			c.emit(b, fl)
			e.sent += uint32(n)
		}
		c.stats.ReqServed++
		q.pop()
		served++
	}
	return served
}

// checkRequest decides whether a request may be served. A request whose
// region vanished while it was partly sent is cut short by the same check.
func (c *Core) checkRequest(e *inbound) abi.Status {
	if e.length == 0 || e.length > abi.MaxOpBytes {
		return abi.StatusRemoteBounds
	}
	r := c.lookupRegion(abi.RegionID(e.region))
	if r == nil {
		return abi.StatusRemoteRegion
	}
	need := abi.PermRemoteRead
	switch e.op {
	case abi.OpWrite:
		need = abi.PermRemoteWrite
	case abi.OpRekey:
		need = abi.PermRemoteRekey
	}
	if r.perm&need == 0 {
		return abi.StatusRemotePermission
	}
	if e.op == abi.OpRekey { // its data is the region's key, not bytes of the region
		return abi.StatusOK
	}
	if e.offset > uint64(len(r.mem)) || uint64(len(r.mem))-e.offset < uint64(e.length) {
		return abi.StatusRemoteBounds
	}
	return abi.StatusOK
}
