package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
)

// Config describes one simulation run. Every random choice of the run (the
// network's faults, the applications' ops, the fault schedule) is derived
// from Seed, so a Config and a seed reproduce a run exactly.
type Config struct {
	Name  string // scenario name (for messages)
	Seed  uint64
	Nodes int // engines, >= 2
	// Cores is how many polling cores each node's engine has (0 or 1:
	// one; at most 4: engine.NewGroup, core.go); with CoresVary each node
	// draws its own count from 1 to Cores.
	Cores     int
	CoresVary bool

	// Engine is the template of every node's engine.Config. The simulator
	// fills in the identity fields (LocalIP, LocalMAC, MTU, SlotBase,
	// Neighbors, NeighborTable, NeighborsPerTenant, ARPRate, ARPBurst,
	// IV, CacheSeed; each core's CoreID and SlotBase are
	// engine.NewGroup's) and, when zero, Slots, Regions and Portals
	// (sized from App and Faults).
	Engine engine.Config
	// IVBlock and IVSpan configure each node's (volatile) IV source
	// (aesni.IVConfig; 0: its defaults). Small values make the cores
	// refill their IV lanes often.
	IVBlock, IVSpan uint64
	MTU             int // IPv4 MTU of every node and of the fabric
	// StaticNeighbors gives every core a static entry for every other node
	// (no ARP between nodes). Otherwise cores resolve each other by ARP.
	StaticNeighbors bool
	// NeighborTable overrides the derived neighbor table size (0: derived).
	NeighborTable int
	// NeighborsPerTenant bounds each tenant's incomplete neighbor
	// entries (engine.Config.NeighborsPerTenant; 0: NeighborTable/2, no
	// bound but the table's).
	NeighborsPerTenant int
	// ARPRate and ARPBurst bound each node's ARP requests
	// (engine.Config.ARPRate, ARPBurst; 0: no bound that binds). The
	// simulator's timers are tens of times shorter than a real engine's,
	// so the engine's defaults would bind where a real engine's do not.
	ARPRate, ARPBurst int
	// VaryTimeouts gives each node its own Engine.Timeout (1, 1.5 or 2
	// times the template's): a WRITE's initiator adopts the serving
	// node's timeout on the pull (②), so its TIMEOUT follows the server's.
	VaryTimeouts bool

	Net    NetConfig
	Cost   CostConfig
	App    AppConfig
	Faults FaultConfig

	// PostNs is how long the applications post ops (virtual ns). Then the
	// simulator drains: it runs until every op has completed, plus a grace
	// period, and checks that every resource is back where it belongs.
	PostNs int64
	// ShutdownAtEnd ends the run with Core.Shutdown on every node instead
	// of draining: every op still queued or in flight must complete at once
	// (ABORTED or otherwise) and every resource must be free.
	ShutdownAtEnd bool

	// Strict: the network is clean and resources generous, so every valid
	// op must complete OK (any TIMEOUT, NACK, DISPATCH_TIMEOUT or
	// UNREACHABLE of a valid op is a failure).
	Strict bool
	// StrictFailedSink: a failed read's sink holds only its data and
	// untouched bytes. Otherwise zeros are tolerated too once the node
	// dropped an answer that failed authentication: the core opens
	// response chunks straight into the sink and zeroes a chunk whose tag
	// does not match (see TestStrictFailedSink).
	StrictFailedSink bool
	// MustSee lists statuses that must occur at least once in the run: a
	// targeted run built to exercise a mechanism proves the mechanism
	// fired.
	MustSee []abi.Status
	// Covers lists the statuses a scenario is built to exercise. They are
	// checked over all the seeds of a scenario (TestSimSeeds), not per
	// run: a random seed may draw a run in which one never happens (a
	// server that never crossed its NACK threshold), which is chance,
	// not a bug; a mechanism that no seed exercises is.
	Covers []abi.Status
	// OpBoundNs, when set, bounds how long after its posting every op
	// completes OK (scenario hostile-initiator: TIMEOUT, whatever the
	// attacker does; in a strict run every valid op must be OK but those
	// a fault of its own failed, a region deregistered under it).
	OpBoundNs int64
	// Hostile is an attacker on the fabric with a tenant of its own on
	// one node (hostile.go; nil: none).
	Hostile *HostileConfig
	// MaxSteps bounds driver steps (livelock guard); 0: derived.
	MaxSteps uint64
	// Trace keeps the last events of the run in a ring (slow); a Failure
	// then lists them. Used to replay a failing seed.
	Trace bool

	// scripts run at fixed times (tests in this package: targeted repros).
	scripts []scriptStep
	// netHook sees every copy the fabric queues towards node d, after the
	// random faults (tests in this package: targeted damage). It counts
	// what it damages in s.res.Net.
	netHook func(s *Sim, d *node, f *frame)
	// timeouts overrides Engine.Timeout per node (tests in this package).
	timeouts []time.Duration
	// lenientPulls skips the checks of a pull's timeout (self-tests of
	// the simulator: the commit check must catch what they would).
	lenientPulls bool
	// tenantPerPortal gives each portal of a node its own tenant (its
	// serial modulo Engine.Tenants); otherwise every portal is tenant 0.
	tenantPerPortal bool
	// costs overrides Cost per node (index: node; a zero entry or a
	// missing one: Cost). The congestion experiments (flow.go) give a
	// server its own serving cost.
	costs []CostConfig
	// noHandOver (self-test of the simulator): a core processes every
	// frame it takes from its rx queue, steered elsewhere or not.
	noHandOver bool
	// restartKeepsKeys (self-test of the simulator): a restarted node's
	// application registers its regions again under their old K_r, so
	// that stale requests authenticate at the new engine; the checks of
	// what it serves must then fail the run.
	restartKeepsKeys bool
	// flows: the congestion experiments' flow applications (flow.go),
	// run next to (instead of, when App.Clients is empty) the random
	// workload.
	flows *flowRun
}

type scriptStep struct {
	at int64 // ns after the start
	do func(s *Sim)
}

// NetConfig is the switch fabric: every node has one full-duplex link to a
// single switch. A frame is serialised on the sender's uplink, crosses the
// switch, is queued and serialised on the receiver's downlink, and lands in
// the receiver's rx ring. Faults apply per delivered copy.
type NetConfig struct {
	LatencyNs      int64 // propagation per hop (node->switch, switch->node)
	JitterNs       int64 // extra delay per delivery, uniform in [0, JitterNs)
	BitsPerSec     int64 // link speed; 0: infinitely fast (no queueing)
	UpQueueBytes   int   // sender egress queue; a frame beyond it is dropped
	DownQueueBytes int   // switch egress queue towards one node (incast drops)
	RxQueueFrames  int   // receiver's rx ring (each core's), and each core's hand-over ring; overflow drops
	// RxRandom: on a node of several cores, the probability a frame lands
	// on a random core's rx queue rather than the one its addresses and
	// ports hash to (a kernel moving flows between queues).
	RxRandom float64

	Drop       float64 // probability a delivered copy is lost
	Dup        float64 // probability a copy is delivered twice
	Reorder    float64 // probability a copy is held back by up to ReorderNs
	ReorderNs  int64
	Corrupt    float64 // probability a copy of an IPv4 frame has bits flipped
	TxNoBuffer float64 // probability Tx.Buffer returns nil (tx pool empty)

	// Straggle: probability a copy is held back by StraggleNs/2 plus up to
	// StraggleNs more: with StraggleNs around TIMEOUT, responses land after
	// their op timed out and its slot was reused (tags must not match).
	Straggle   float64
	StraggleNs int64
	// Hairpin: the switch sends a frame addressed to its sender's own MAC
	// back to it. Real switches and bridges do not (default off).
	Hairpin bool

	// Forge (self-test of the simulator only): with this probability a read
	// response's payload is altered and its trailer resealed, damage no
	// integrity check can see. The data invariant must then fail the run.
	Forge float64
	// ForgeWrites (self-test too): the same for a WRITE's data (③),
	// resealed under the write's K_d with the pull's IV curried in. The
	// commit check must then fail the run.
	ForgeWrites float64
}

// CostConfig is the virtual CPU time a core spends per step; it bounds the
// rate a core can serve at, which is what makes a server overload (incast).
type CostConfig struct {
	PollNs    int64 // every driver step (Receive burst + Poll)
	RxFrameNs int64 // per frame handed to Receive
	TxFrameNs int64 // per frame the core sends
	// TxBytePs: per byte of every frame the core sends, in picoseconds
	// (a serving cost proportional to the data, as copying or sealing
	// it is; a NACK then costs next to nothing). 0: none.
	TxBytePs int64
}

// AppConfig shapes the simulated applications.
type AppConfig struct {
	PortalsPerNode int
	SlotsPerPortal int
	CmdCap         uint32 // command ring capacity (power of two)
	TickNs         int64  // mean interval between application ticks per node
	BurstMax       int    // ops posted per portal per tick, at most
	BadRate        float64
	HighClass      float64 // probability a portal is of the high class
	SrcMinBytes    int     // size range of each portal's remote-readable region
	SrcMaxBytes    int
	// Clients post ops (nil: every node); Servers are the only targets of
	// valid ops (nil: every node but the poster).
	Clients []int
	Servers []int
	// FillSlots: at each tick a portal posts on all its idle slots (incast
	// bursts) instead of up to BurstMax.
	FillSlots bool
	// SelfReads: probability a valid op reads a region of its own node
	// (through its own address: loopback).
	SelfReads float64
	// WrongKeyRate: probability an op is a READ or WRITE of a live region
	// with a wrong K_d (a random key, the K_d of another PID, or that of
	// another op type); it must end REMOTE_AUTHENTICATION_FAILURE with its
	// sink (READ) or target (WRITE) untouched.
	WrongKeyRate float64
	// WriteFrac: probability an op is a WRITE (valid or with one thing
	// wrong, like reads) rather than a READ. Writes go to the
	// remote-writable regions of other nodes (never the poster's own).
	WriteFrac float64
	// DstMinBytes..DstMaxBytes: size range of each portal's remote-writable
	// region (the target of writes, read by readers too). Small regions
	// make concurrent writes overlap.
	DstMinBytes, DstMaxBytes int
	// Tenant is the PortalSpec.Tenant of every portal the applications
	// open (the owner tenant of their regions).
	Tenant int
	// RekeyFrac: probability an op is a remote REKEY (valid or with one
	// thing wrong) of a region of another node: its new K_r is drawn from
	// the seed and staged in the op's area of the write source.
	// Every other remote-readable or remote-writable region (by pattern
	// id) allows PermRemoteRekey.
	RekeyFrac float64
	// LookupFrac: probability an op is a LOOKUP (valid, or with a wrong
	// key) of another node's index (lookup.go). 0: no portal has an index
	// and nothing is drawn for them.
	LookupFrac float64
}

// FaultConfig schedules faults at random times of the posting phase.
type FaultConfig struct {
	LinkFlaps     int      // a node's link goes down for a while
	LinkDownNs    [2]int64 // duration range
	Stalls        int      // a core is not polled for a while (a descheduled thread)
	StallNs       int64    // longest stall
	PortalCrashes int      // an application dies: its portal is closed with ops in flight, then reopened
	RegionChurn   int      // a portal deregisters its remote-readable region and registers a new one
	// Rekeys: an owner replaces the key K_r of one of its regions
	// (Core.Rekey). Every other node learns the new key KeyDelayNs (at
	// most; uniform per node) later: until then its applications post
	// with the old key, and those ops must fail authentication.
	Rekeys     int
	KeyDelayNs int64
	// EngineRestarts: a node's engine dies and a new one starts, as rmad
	// killed and restarted (restart.go): every core is replaced by a fresh
	// engine.Core of the node's engine config (its IV source kept), every
	// op in flight on the node's portals completes ENGINE_GONE, and its
	// application redials: new portals, its regions registered again with
	// new ids and keys and their contents copied over, which the other
	// nodes learn within KeyDelayNs (until then they post with the old
	// ids and keys). Not with flow applications or an attacker.
	EngineRestarts int
}

// Validate checks the fields the simulator relies on.
func (c *Config) Validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("sim: invalid config: %s = %v", f, v) }
	switch {
	case c.Nodes < 2 || c.Nodes > 1000:
		return bad("Nodes", c.Nodes)
	case c.Cores < 0 || c.Cores > 4:
		return bad("Cores", c.Cores)
	case c.Net.RxRandom < 0 || c.Net.RxRandom > 1:
		return bad("Net.RxRandom", c.Net.RxRandom)
	case c.MTU < 576 || c.MTU > 9000:
		return bad("MTU", c.MTU)
	case c.App.PortalsPerNode < 1:
		return bad("App.PortalsPerNode", c.App.PortalsPerNode)
	case c.App.SlotsPerPortal < 1:
		return bad("App.SlotsPerPortal", c.App.SlotsPerPortal)
	case c.App.CmdCap < 2 || c.App.CmdCap&(c.App.CmdCap-1) != 0:
		return bad("App.CmdCap", c.App.CmdCap)
	case c.App.TickNs <= 0:
		return bad("App.TickNs", c.App.TickNs)
	case c.App.SrcMinBytes < 1 || c.App.SrcMaxBytes < c.App.SrcMinBytes:
		return bad("App.SrcMinBytes", c.App.SrcMinBytes)
	case c.App.DstMinBytes < 1 || c.App.DstMaxBytes < c.App.DstMinBytes:
		return bad("App.DstMinBytes", c.App.DstMinBytes)
	case c.App.WriteFrac < 0 || c.App.WriteFrac > 1:
		return bad("App.WriteFrac", c.App.WriteFrac)
	case c.App.RekeyFrac < 0 || c.App.RekeyFrac > 1:
		return bad("App.RekeyFrac", c.App.RekeyFrac)
	case c.App.LookupFrac < 0 || c.App.LookupFrac > 1:
		return bad("App.LookupFrac", c.App.LookupFrac)
	case c.Net.RxQueueFrames < 1:
		return bad("Net.RxQueueFrames", c.Net.RxQueueFrames)
	case c.Cost.PollNs < 1:
		return bad("Cost.PollNs", c.Cost.PollNs) // time must advance at every step
	case c.PostNs <= 0:
		return bad("PostNs", c.PostNs)
	case c.Faults.LinkFlaps > 0 && (c.Faults.LinkDownNs[0] <= 0 || c.Faults.LinkDownNs[1] < c.Faults.LinkDownNs[0]):
		return bad("Faults.LinkDownNs", c.Faults.LinkDownNs)
	case c.Faults.Stalls > 0 && c.Faults.StallNs <= 0:
		return bad("Faults.StallNs", c.Faults.StallNs)
	case c.Faults.KeyDelayNs < 0:
		return bad("Faults.KeyDelayNs", c.Faults.KeyDelayNs)
	case c.Faults.EngineRestarts < 0 || (c.Faults.EngineRestarts > 0 && (c.flows != nil || c.Hostile != nil)):
		return bad("Faults.EngineRestarts", c.Faults.EngineRestarts)
	case c.App.WrongKeyRate < 0 || c.App.WrongKeyRate+c.App.BadRate > 1:
		return bad("App.WrongKeyRate", c.App.WrongKeyRate)
	case c.IVSpan != 0 && (c.IVSpan < aesni.ResponseSpan(abi.MaxOpBytes) || c.IVBlock < c.IVSpan):
		return bad("IVSpan", c.IVSpan)
	}
	if h := c.Hostile; h != nil && (h.Server < 0 || h.Server >= c.Nodes || h.TickNs <= 0 || len(c.App.Clients) == 0 || h.Tenant == c.App.Tenant) {
		return bad("Hostile", *h)
	}
	for _, v := range append(append([]int(nil), c.App.Clients...), c.App.Servers...) {
		if v < 0 || v >= c.Nodes {
			return bad("App.Clients/Servers", v)
		}
	}
	return nil
}

// Scenario is a named family of configurations; Make derives one member
// from a seed (the seed also picks node counts, MTU, ARP mode, ...).
type Scenario struct {
	Name string
	Make func(seed uint64) Config
}

// Scenarios are the families the tests run.
var Scenarios = []Scenario{
	{"clean", Clean},
	{"lossy", Lossy},
	{"corrupt", Corrupting},
	{"flap", LinkFlap},
	{"incast", Incast},
	{"mixed", Mixed},
	{"multicore", MultiCore},
	{"multicore-clean", MultiCoreClean},
	{"tenant-shares", TenantShares},
	{"tenant-shares-weighted", TenantSharesWeighted},
	{"hostile-initiator", HostileInitiator},
	{"lookup", Lookup},
}

// ScenarioByName returns the scenario called name.
func ScenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// scenarioRand is the stream that shapes a scenario's parameters; the run
// itself uses other streams of the same seed.
func scenarioRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5ce9a110)) }

// base is the common starting point: a small, fast, clean fabric (25 Gb/s,
// ~1.5 µs per hop) and timeouts a few times the RTT, as the paper tunes them.
func base(name string, seed uint64, r *rand.Rand) Config {
	e := engine.DefaultConfig()
	e.WindowBytes = 64 << 10
	e.HighBurst = 1 + r.IntN(8)
	e.InboundQueue = 4096
	e.NackThreshold = 4096
	e.ServeBudget = 8 + r.IntN(57)
	e.DispatchTimeout = 400 * time.Microsecond
	e.Timeout = 300 * time.Microsecond
	e.ResolveTimeout = 1 * time.Millisecond
	e.ARPRetry = 150 * time.Microsecond
	// Small key caches evict all the time (an op's AEAD must outlive its
	// cache entry); large ones keep every key.
	e.KeyCache = []int{1, 3, 16, 4096}[r.IntN(4)]
	ivSpan := []uint64{0, 64, 256}[r.IntN(3)]
	ivBlock := uint64(0)
	if ivSpan != 0 {
		ivBlock = ivSpan * uint64(1+r.IntN(4))
	}
	// Pull contexts (WRITEs served at once): sometimes a single one, so
	// write requests wait in the inbound queue for one.
	e.PullContexts = []int{1, 2, 4, 16, 128}[r.IntN(5)]
	// Every region of these scenarios is one tenant's (PortalSpec.Tenant
	// 0) and nothing in them is hostile: the per-owner and per-sender
	// bounds would only cut that tenant's share of the queues and pulls
	// (scenario hostile-initiator puts them in force).
	e.Unbound()
	return Config{
		Name:            name,
		Seed:            seed,
		Nodes:           3 + r.IntN(4),
		Engine:          e,
		MTU:             []int{576, 1500, 1500, 4200, 9000}[r.IntN(5)],
		IVBlock:         ivBlock,
		IVSpan:          ivSpan,
		StaticNeighbors: r.IntN(2) == 0,
		Net: NetConfig{
			LatencyNs:      1000 + r.Int64N(1000),
			JitterNs:       0,
			BitsPerSec:     25e9,
			UpQueueBytes:   4 << 20,
			DownQueueBytes: 4 << 20,
			RxQueueFrames:  1 << 14,
		},
		Cost: CostConfig{PollNs: 100, RxFrameNs: 150, TxFrameNs: 150},
		App: AppConfig{
			PortalsPerNode: 1 + r.IntN(2),
			SlotsPerPortal: 8 + r.IntN(9),
			CmdCap:         64,
			TickNs:         5000 + r.Int64N(10000),
			BurstMax:       1 + r.IntN(6),
			BadRate:        0.08,
			HighClass:      0.3,
			SrcMinBytes:    4096,
			SrcMaxBytes:    48 << 10,
			WrongKeyRate:   0.03,
			WriteFrac:      0.2 + 0.3*r.Float64(),
			DstMinBytes:    4096,
			DstMaxBytes:    16 << 10,
			RekeyFrac:      0.01 * float64(1+seed%3), // (from the seed, not a draw from r: r's later draws do not depend on it)
		},
		Faults: FaultConfig{
			Rekeys:     1 + r.IntN(4),
			KeyDelayNs: 50_000 + r.Int64N(300_000),
		},
		PostNs:        1_500_000,
		ShutdownAtEnd: r.IntN(5) == 0,
		VaryTimeouts:  r.IntN(3) == 0,
	}
}

// Clean: no faults, generous window and queues: every valid op must be OK
// and every bad command (wrong keys and stale keys after a rekey included)
// must get its precise status.
func Clean(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("clean", seed, r)
	c.Strict = true
	c.Faults.PortalCrashes = r.IntN(2)
	c.Faults.RegionChurn = r.IntN(3)
	// Room for every slot of the node at once, and for a pull of every
	// slot of every node (reopened portals included): no op or pull ever
	// waits for window or a pull context.
	perNode := c.App.PortalsPerNode * c.App.SlotsPerPortal
	all := 2 * c.Nodes * perNode
	c.Engine.WindowBytes = (perNode + all) * abi.MaxOpBytes
	c.Engine.PullContexts = all
	c.Covers = []abi.Status{abi.StatusOK, abi.StatusRemoteAuthFailure}
	return c
}

// Lossy: drops, duplicates, reordering and jitter.
func Lossy(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("lossy", seed, r)
	c.Net.Drop = 0.005 + r.Float64()*0.03
	c.Net.Dup = r.Float64() * 0.03
	c.Net.Reorder = r.Float64() * 0.1
	c.Net.ReorderNs = 20_000
	c.Net.JitterNs = r.Int64N(5000)
	c.Net.TxNoBuffer = r.Float64() * 0.005
	c.Net.Straggle = r.Float64() * 0.005
	c.Net.StraggleNs = int64(c.Engine.Timeout)
	c.Faults.RegionChurn = r.IntN(2)
	c.Covers = []abi.Status{abi.StatusOK, abi.StatusTimeout}
	return c
}

// Corrupting: bits flipped in frames; the core must reject every damaged
// frame (the AES-GCM tag: answers that fail are dropped, requests answered
// REMOTE_AUTHENTICATION_FAILURE) and never accept a damaged byte.
func Corrupting(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("corrupt", seed, r)
	c.Net.Corrupt = 0.01 + r.Float64()*0.05
	c.Net.Reorder = r.Float64() * 0.02
	c.Net.ReorderNs = 5000
	c.Covers = []abi.Status{abi.StatusOK, abi.StatusTimeout}
	return c
}

// LinkFlap: nodes lose their link for a while (longer than TIMEOUT, often
// longer than the resolve timeout), and cores stall, up to three TIMEOUTs
// (Core.Stalled then moves the stalled initiator's deadlines, never a
// server's: no write may land after its initiator reported it failed).
func LinkFlap(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("flap", seed, r)
	c.Faults.LinkFlaps = 1 + r.IntN(3)
	c.Faults.LinkDownNs = [2]int64{200_000, 1_500_000}
	c.Faults.Stalls = r.IntN(3)
	c.Faults.StallNs = 3 * int64(c.Engine.Timeout)
	c.PostNs = 2_500_000
	c.Covers = []abi.Status{abi.StatusOK, abi.StatusTimeout}
	return c
}

// Incast: many clients read from and write to one server at once. The
// clients' small windows make ops wait (DISPATCH_TIMEOUT); the server's
// inbound queue crosses its threshold (NACK); its own small window and
// few pull contexts make write requests wait to be pulled (and expire).
func Incast(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("incast", seed, r)
	c.Nodes = 9 + r.IntN(8)
	c.StaticNeighbors = true
	c.MTU = 1500
	c.ShutdownAtEnd = false
	c.App.PortalsPerNode = 1
	c.App.SlotsPerPortal = 24 + r.IntN(25)
	c.App.FillSlots = true
	c.App.BadRate = 0.01
	c.App.TickNs = 20_000
	c.App.Servers = []int{0}
	for i := 1; i < c.Nodes; i++ {
		c.App.Clients = append(c.App.Clients, i)
	}
	// Small client windows (2-4 ops): most of a 24-48-op burst waits, and
	// waits longer than DISPATCH_TIMEOUT behind a saturated server.
	c.Engine.WindowBytes = (2 + r.IntN(3)) * abi.MaxOpBytes
	c.Engine.DispatchTimeout = time.Duration(60+r.IntN(100)) * time.Microsecond
	c.Engine.Timeout = 400 * time.Microsecond
	c.Engine.InboundQueue = 256
	c.Engine.NackThreshold = 12 + r.IntN(12)
	c.Engine.ServeBudget = 4
	// A slow server: ~1 µs per response frame.
	c.Cost = CostConfig{PollNs: 200, RxFrameNs: 300, TxFrameNs: 1000}
	c.Net.BitsPerSec = 10e9
	c.Net.DownQueueBytes = 256 << 10
	c.Net.RxQueueFrames = 512
	c.PostNs = 1_000_000
	c.Covers = []abi.Status{abi.StatusOK, abi.StatusNack, abi.StatusDispatchTimeout}
	return c
}

// Mixed: everything at once at lower rates.
func Mixed(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("mixed", seed, r)
	c.Nodes = 4 + r.IntN(5)
	c.Net.Drop = r.Float64() * 0.01
	c.Net.Dup = r.Float64() * 0.01
	c.Net.Reorder = r.Float64() * 0.05
	c.Net.ReorderNs = 10_000
	c.Net.JitterNs = r.Int64N(3000)
	c.Net.Corrupt = r.Float64() * 0.01
	c.Net.TxNoBuffer = r.Float64() * 0.002
	c.Net.Straggle = r.Float64() * 0.003
	c.Net.StraggleNs = int64(c.Engine.Timeout)
	c.Net.DownQueueBytes = 512 << 10
	c.Net.RxQueueFrames = 2048
	c.Engine.WindowBytes = (4 + r.IntN(12)) * abi.MaxOpBytes
	c.Engine.NackThreshold = 16 + r.IntN(64)
	c.Engine.InboundQueue = c.Engine.NackThreshold + r.IntN(64)
	c.App.BadRate = 0.1
	c.Faults.LinkFlaps = r.IntN(2)
	c.Faults.LinkDownNs = [2]int64{100_000, 1_200_000}
	c.Faults.Stalls = r.IntN(2)
	c.Faults.StallNs = 150_000
	c.Faults.PortalCrashes = r.IntN(2)
	c.Faults.RegionChurn = r.IntN(3)
	c.PostNs = 2_000_000
	c.Covers = []abi.Status{abi.StatusOK}
	return c
}

// Lookup: LOOKUPs of the owners' indexes beside READs and WRITEs, the
// owners changing their buckets all the time (lookup.go), under loss,
// duplication, reordering, stragglers, link flaps, stalls, application
// crashes (their indexes deregistered with ops in flight), rekeys of the
// indexes and engine restarts (one or two per run: the restarted node's
// ops end ENGINE_GONE, its indexes come back under new ids and keys,
// which the other nodes learn late): every answer is of one state of the
// index and slab, never a mix.
func Lookup(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("lookup", seed, r)
	c.Nodes = 3 + r.IntN(4)
	c.Net.Drop = r.Float64() * 0.02
	c.Net.Dup = r.Float64() * 0.03
	c.Net.Reorder = r.Float64() * 0.1
	c.Net.ReorderNs = 20_000
	c.Net.JitterNs = r.Int64N(5000)
	c.Net.TxNoBuffer = r.Float64() * 0.005
	c.Net.Straggle = r.Float64() * 0.005
	c.Net.StraggleNs = int64(c.Engine.Timeout)
	c.App.LookupFrac = 0.3 + r.Float64()*0.4
	c.App.WrongKeyRate = r.Float64() * 0.05
	c.Faults.LinkFlaps = r.IntN(2)
	c.Faults.LinkDownNs = [2]int64{100_000, 1_200_000}
	c.Faults.Stalls = r.IntN(2)
	c.Faults.StallNs = 150_000
	c.Faults.PortalCrashes = r.IntN(2)
	c.Faults.Rekeys = 1 + r.IntN(3)
	c.Faults.KeyDelayNs = r.Int64N(200_000)
	c.PostNs = 2_000_000
	c.Covers = []abi.Status{abi.StatusOK, abi.StatusRemoteNotFound, abi.StatusRemoteLookupTooLarge, abi.StatusTimeout,
		abi.StatusEngineGone}
	c.Faults.EngineRestarts = 1 + r.IntN(2) // drawn last: the draws above do not depend on it
	return c
}

// multiCore makes c an engine of 2 to 4 cores per node (every node alike,
// or each its own count from 1 up), frames landing on rx queues by their
// hash or, now and then, on any: the steering, the hand-over between cores
// and the region table shared by the cores are exercised, rekeys and
// region churn included. Its draws come from a stream of their own.
func multiCore(c *Config, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6d756c7469))
	c.Cores = 2 + r.IntN(3)
	c.CoresVary = r.IntN(3) == 0
	c.Net.RxRandom = []float64{0, 0.01, 0.2}[r.IntN(3)]
	c.App.PortalsPerNode = 1 + r.IntN(4) // portals spread over the cores
	c.Faults.Rekeys = 2 + r.IntN(4)
	c.Faults.RegionChurn = 1 + r.IntN(3)
}

// MultiCore: Mixed on engines of several cores.
func MultiCore(seed uint64) Config {
	c := Mixed(seed)
	c.Name = "multicore"
	multiCore(&c, seed)
	return c
}

// MultiCoreClean: Clean on engines of several cores: every valid op must
// be OK whichever core serves it.
func MultiCoreClean(seed uint64) Config {
	c := Clean(seed)
	c.Name = "multicore-clean"
	multiCore(&c, seed)
	perNode := c.App.PortalsPerNode * c.App.SlotsPerPortal
	all := 2 * c.Nodes * perNode
	c.Engine.WindowBytes = (perNode + all) * abi.MaxOpBytes
	c.Engine.PullContexts = all
	return c
}

// HostileInitiator: a tenant of the server node (node 0) attacks the
// other tenant's readers there from the fabric (hostile.go): it floods
// the inbound queue past its NACK threshold, keeps a backlog of 4 KB
// READs queued there, holds pull contexts with slow pulls, pushes the
// victims' replay windows with their own source and IV addresses and
// forged IV addresses, and mints lanes, each with K_d it derives from its
// own region's K_r. The victims (2 to 4 nodes, a portal each) read and
// write the server's regions of their owner in a strict run: every valid
// op must complete OK within TIMEOUT, none NACKed, a victim's READ alone
// of its owner's at the server waits behind at most 8 KB of the
// attacker's READs of its class, and the server's counters for their
// owner show no refusal while the attacker's show each attack refused
// (hostile.checkAtEnd). The
// server's bounds are its defaults (Config.ServingBounds), from a NACK
// threshold that the attacker's burst alone would pass.
func HostileInitiator(seed uint64) Config {
	r := scenarioRand(seed)
	c := base("hostile-initiator", seed, r)
	c.Strict = true
	c.Nodes = 3 + r.IntN(3)
	c.MTU = 1500
	c.VaryTimeouts = false
	c.App.PortalsPerNode = 1
	c.App.Servers = []int{0}
	for i := 1; i < c.Nodes; i++ {
		c.App.Clients = append(c.App.Clients, i)
	}
	c.App.Tenant = 1
	c.Faults.RegionChurn = r.IntN(2)
	perNode := c.App.PortalsPerNode * c.App.SlotsPerPortal
	all := 2 * c.Nodes * perNode
	e := &c.Engine
	e.WindowBytes, e.PullContexts = (perNode+all)*abi.MaxOpBytes, all
	e.InboundQueue, e.NackThreshold = 512, 192
	// Half an rx burst served per poll: a burst of requests fills the
	// queue. The per-owner and per-sender bounds are derived again:
	// half of the totals.
	e.ServeBudget = 16
	e.InboundPerOwner, e.InboundPerSender, e.PullsPerOwner, e.PullsPerSender = 0, 0, 0, 0
	e.Tenants, e.ReplayPeers, e.ReplayLanesPerSender = 4, 64, 4
	e.Regions = 4*c.App.PortalsPerNode + 3
	e.Portals = c.App.PortalsPerNode + 2
	c.OpBoundNs = int64(e.Timeout)
	// The server takes a frame in half the others' time: the attacker's
	// bursts cost it CPU (flooding it is out of scope), but leave it time
	// to serve its victims.
	c.costs = []CostConfig{{PollNs: c.Cost.PollNs, RxFrameNs: c.Cost.RxFrameNs / 2, TxFrameNs: c.Cost.TxFrameNs / 2}}
	c.Hostile = &HostileConfig{
		Server: 0, Tenant: 2, TickNs: 400_000,
		Flood: 500 + r.IntN(200), Large: 32, Writes: all + 16, Pushes: 8, IVForges: 8, Lanes: 32,
	}
	c.Covers = []abi.Status{abi.StatusOK}
	return c
}
