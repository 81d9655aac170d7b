package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/wire"
)

// Neighbor is a static IPv4 -> MAC entry (no ARP needed for it).
type Neighbor struct {
	IP  netip.Addr
	MAC wire.MAC
}

// Config sizes and tunes one engine core. Every table is allocated once in
// New from these numbers; nothing grows afterwards.
type Config struct {
	// CoreID is this core's index within its engine (below
	// wire.MaxCores): its ops leave from and are answered on its
	// initiator ports (wire.InitiatorPort: the low six bits are CoreID),
	// the WRITE data of the pulls it serves comes to UDP port
	// UDPPort+CoreID, and its slots are SlotBase .. SlotBase+Slots-1.
	CoreID   uint16
	LocalIP  netip.Addr
	LocalMAC wire.MAC
	// UDPPort is the engine's base UDP port (default 4792): requests
	// come to it; UDPPort+63 must lie below wire.InitiatorPortBase.
	UDPPort uint16
	MTU     int // IPv4 MTU of the port (default 1500)

	// Routing (route.go), as a host does it: Subnet is the on-link
	// prefix LocalIP lies in (zero: every destination is on-link, ARP
	// asks for the destination itself); Gateway, which must be on-link,
	// is the next hop of every destination no longer prefix matches
	// (zero: none, such ops are UNREACHABLE at once); Routes are static
	// routes, at most MaxRoutes. The connected Subnet, the default route
	// through Gateway and Routes take part in one longest-prefix match.
	Subnet  netip.Prefix
	Gateway netip.Addr
	Routes  []Route
	// DSCP is the IPv4 DSCP (0..63) of every frame of an op, indexed by
	// its class of service (abi.ClassLow, abi.ClassHigh): the request,
	// and the answers, data and pulls of either engine, so a fabric can
	// honour the two classes.
	DSCP [abi.NumClass]uint8

	Slots    int        // command slots owned by this core (CST partition)
	SlotBase abi.SlotID // global id of this core's first slot
	Regions  int        // registered region table entries (RRT); at most 65535
	Portals  int        // portals this core serves at once
	// SummaryScan bounds how long the summary doorbell can hide a post
	// (portals.go): Poll looks at the command ring of every live portal,
	// whatever the summary says, at least this often (on its own clock:
	// the first Poll at or after the last scan plus SummaryScan). A
	// tenant that clears another's bits in the shared summary delays that
	// portal's commands by at most this much (and one iteration).
	SummaryScan time.Duration
	// DoorbellGap is the least time between two rings of one portal's
	// completion doorbell (0: none), as a NIC's interrupt throttle: a
	// completion published sooner after the last ring is rung at the
	// gap's end, if its application is still armed. A ring costs the
	// polling thread a system call (and, where inter-processor interrupts
	// trap, several µs), so this bounds what the rings of one portal that
	// sleeps after every completion take from the core, at most
	// 1/DoorbellGap rings a second, whatever its application does. At
	// most MaxModerationPeriod.
	DoorbellGap time.Duration
	// Tenants bounds the tenants whose portals an engine serves at once
	// (PortalSpec.Tenant is below it): the per-tenant state of the data
	// path is a fixed array of this many entries per core.
	Tenants int

	// WindowBytes is this core's share of the solicitation window: bytes of
	// inbound response data it may have promised to land at once. An op
	// enters service only when ArbitrationBytes are free. The tenants
	// with portals on the core share it (shares.go): each is guaranteed
	// WindowBytes × its weight / the present tenants' weights, and may
	// borrow beyond that only for ops to destinations that answer.
	WindowBytes int
	// Responsive: a destination that answered an op of this core (any
	// authenticated answer) within this long is responsive, and a
	// tenant may borrow window beyond its share for ops to it (0:
	// Timeout/4). Destinations bounds the destinations whose last answer
	// the core remembers (the least recently answered is forgotten to
	// make room: unresponsive until it answers again).
	Responsive   time.Duration
	Destinations int
	// HighBurst: after this many consecutive high-class grants while a
	// low-class op waits, the low class gets one grant (no starvation).
	HighBurst int
	// InboundQueue is the serving side's request queue capacity;
	// NackThreshold is the depth at or above which a new request is NACKed
	// at once (paper §6.1: (TIMEOUT-RTT-DISPATCH_TIMEOUT) x service rate).
	InboundQueue  int
	NackThreshold int
	// ServeBudget bounds requests served per Poll, so a flood of requests
	// cannot starve the initiator side of the same core.
	ServeBudget int
	// LowAfterHigh bounds the low-class requests the serving side serves
	// in a Poll once a high-class frame (request or response) has left in
	// it: the frames of one Poll are sealed, sent and received together,
	// so a high-class op would otherwise wait for a whole ServeBudget of
	// low-class responses at each of its hops. 0: no bound (the default
	// here; rmad's configuration sets 1).
	LowAfterHigh int
	// PollBytes bounds the bulk work a Poll starts while priority work is
	// in progress on the core (bulk.go): an op of the high class or of at
	// most ShortBytes in flight at its initiator, or such a request queued
	// at its serving side, or one seen within PriorityHold (HighHold for
	// the high class). Bulk work is a
	// low-class op of more than ShortBytes: the window granted to it, its
	// READ data served, its pull started, its WRITE data sent. Once a
	// stage of a Poll has started PollBytes of it, the rest waits for the
	// next Poll, which follows at once (each stage's first item of a Poll
	// always starts, and a request or a WRITE's data that has waited
	// TIMEOUT/2 is never held: nothing starves); a short op then waits about
	// PollBytes of bulk service at each hop, not a whole ServeBudget or
	// window of it. While the bound is on, ReceiveBurst takes a burst's
	// short frames before its bulk chunks; while it is off, Poll drains
	// the rings that rang the summary doorbell again before it serves.
	// With PollBytes set, the initiator also grants a short op before the
	// bulk ops of its own tenant and class queued ahead of it, and the
	// serving side serves a short request before the bulk requests of its
	// region's owner queued ahead of it (8 in a row at most before a bulk
	// one's turn, at each).
	// With no priority work the bound is off. 0: no bound, and none of
	// this (the default here, and the simulator's; rmad's is 4096: a
	// high-class op beside a low-class 4 KB load waits about one 4 KB
	// READ's service at the engine, and the load loses a tenth to a
	// sixth of its goodput while the high class is active;
	// docs/tenants.md).
	PollBytes int
	// PriorityHold is how long PollBytes stays in force after the latest
	// priority op was posted or priority request queued (0:
	// DefaultPriorityHold, 50 µs): short ops that follow one another at
	// shorter intervals find the bound on before they arrive.
	PriorityHold time.Duration
	// HighHold is how long PollBytes stays in force after the latest op
	// or request of the high class (0: DefaultHighHold, 1 ms): a
	// high-class application that pauses, or that the host deschedules,
	// for less than that finds the bound on when it posts again, and its
	// op waits for a Poll of PollBytes of bulk work, not for a window's.
	// Bulk work pays for it only while a high-class application is
	// active.
	HighHold time.Duration
	// PullContexts is the number of WRITEs this core serves at once: each
	// holds one MaxOpBytes staging buffer, where the pulled data lands
	// until all of it has authenticated and is committed to the region
	// (paper §5.1). A write request waits in the inbound queue until a
	// context and ArbitrationBytes of window are free.
	PullContexts int

	// The serving side's bounds per region owner (the tenant whose
	// portal registered the region a request names) and per sender (a
	// request's source address, counted apart for each owner whose
	// regions it names: the owner's K_r vouches for the address), so that
	// neither one owner's traffic, from any addresses, nor one initiator
	// takes what other owners' readers need (bounds.go). Each is per core;
	// 0 derives it from the totals (ServingBounds), so one owner or one
	// sender holds at most half of them.
	//
	// InboundPerOwner and InboundPerSender bound the requests of one
	// owner, and of one sender for one owner's regions, queued at once
	// (waiting to be served or pulled); a request beyond either is NACKed
	// at once, whatever the class queue's depth. 0: NackThreshold/2 (at
	// least 1).
	InboundPerOwner  int
	InboundPerSender int
	// PullsPerOwner and PullsPerSender bound the pull contexts (the
	// WRITEs and REKEYs being served) one owner, and one sender for one
	// owner's regions, holds at once; a write request beyond either waits, in the pull queue,
	// while the requests of others behind it are pulled (startPulls).
	// 0: half of the pulls the core can run at once, the fewer of
	// PullContexts and WindowBytes/ArbitrationBytes (at least 1).
	PullsPerOwner  int
	PullsPerSender int

	DispatchTimeout time.Duration // op waiting for window longer than this: DISPATCH_TIMEOUT
	Timeout         time.Duration // op in service longer than this: TIMEOUT
	// PullIdleTimeout: a WRITE being served whose first data chunk has
	// not authenticated this long after ② may be abandoned, uncommitted,
	// when a new request finds no pull context or window free (0:
	// Timeout/4; above Timeout: Timeout). A write request replayed after
	// its op ended makes this engine pull from an initiator that no
	// longer answers; under pressure, this, not Timeout, is how long such
	// a replay holds a context and its length of window. Without
	// pressure, idle pulls keep their whole Timeout.
	PullIdleTimeout time.Duration
	ResolveTimeout  time.Duration // peer MAC unknown for this long: UNREACHABLE
	ARPRetry        time.Duration // interval between ARP requests for one address
	// NeighborReachable is how long a neighbor's MAC is good for after
	// a reply to this core's own ARP request confirmed it (neighbor.go).
	// An op that uses it past 3/4 of that time sends a new request
	// (at most one per ARPRetry) while it and others keep using the MAC;
	// when no reply came by the end, the entry expires and ops wait for
	// resolution as for a new neighbor. Static entries never age.
	NeighborReachable time.Duration

	// ICMPRate is how many ICMP echo requests to the engine's address the
	// core answers per second at most (a token bucket on the time the
	// core is given), ICMPBurst how many at once after a quiet spell. 0
	// turns echo replies off. Every echo request is counted, answered or
	// not (Stats.ICMPEchoReplies, ICMPRateLimited).
	ICMPRate  int
	ICMPBurst int

	// HairpinSelf sends frames addressed to this engine itself out of the
	// port, for ports that reflect them (net_ring loopback: the benchmark
	// that measures one core's full per-op cost including port I/O).
	// Otherwise such frames loop back inside the core, as they must on a
	// switched network.
	HairpinSelf bool

	Neighbors     []Neighbor // static neighbor entries
	NeighborTable int        // neighbor table capacity (power of two); half of it may be used
	// NeighborsPerTenant bounds the incomplete neighbor entries one
	// tenant's ops hold at once on the core (1 .. NeighborTable/2): an
	// op to a new on-link address the table has no entry for creates
	// one, charged to the op's tenant until it resolves or is
	// forgotten (at the latest ResolveTimeout after its last op);
	// beyond the bound the op ends UNREACHABLE at once
	// (TenantCounters.NeighborRefused). Gateways' entries, static and
	// resolved ones are charged to nobody (neighbor.go). The default,
	// 16 of the default table's 128 usable entries, is eight tenants'
	// worth; an application that resolves more new neighbors at once
	// sees the excess refused (not queued) and retries once its first
	// ones have resolved (a round trip on a live link).
	NeighborsPerTenant int
	// ARPRate bounds the ARP requests the engine sends, all its cores
	// together: ARPRate a second, ARPBurst at once after a quiet spell
	// (a token bucket). A request over it is deferred to its entry's
	// next retry (Stats.ARPRateLimited); retries of unanswered requests
	// leave the last ARPBurst/2 tokens to first requests. ARPRetry still
	// bounds the requests for one address. The default, 1000 a second
	// (64 at once), is far above what resolving and refreshing a full
	// table needs (128 entries, each re-asked every 3/4 of 30 s) and
	// the first requests of a tenant cycling through unused addresses
	// (NeighborsPerTenant per ResolveTimeout: 320 a second by default),
	// and well below what such a tenant's retries would send unbounded
	// (NeighborsPerTenant every ARPRetry: 3200 a second per core).
	ARPRate  int
	ARPBurst int

	// ReplayPeers is how many senders' anti-replay windows the serving
	// side keeps (replay.go: 8 KB each; at most 8192): a request whose IV
	// counter it has seen is dropped. 0 turns replay detection off:
	// replayed requests are served again (fresh ciphertext, pulls that
	// expire uncommitted).
	//
	// The windows are kept per region owner: a request's window is that
	// of its region's owner tenant, its IV address and its lane tag, so
	// the requests for one owner's regions never touch the windows of
	// another's. Each owner is guaranteed ReplayPeers/Tenants entries:
	// beyond that it borrows free ones, and when the table is full an
	// owner at or above its share forgets its own least recently active
	// lane, one below it the least recently active lane of the owner
	// that borrowed most (replay.go).
	ReplayPeers int
	// ReplayLanesPerSender bounds the windows one sender address takes
	// of one owner's entries (an engine tags its IV counters with its
	// core id: one lane per core); a request of a further lane is
	// dropped (Stats.ReplayLanesRefused). 0: wire.MaxCores, every lane
	// an engine can use.
	ReplayLanesPerSender int

	// IV is the engine's source of IV counters (paper Appendix A); each
	// core draws from its own lane. It must be durable in production
	// (aesni.OpenIVSource: counters never repeat across restarts); tests
	// and the simulator may use aesni.NewVolatileIVSource. Required.
	IV *aesni.IVSource
	// KeyCache is the capacity of each of the core's two caches of
	// prepared AEADs (initiating side, serving side).
	KeyCache int
	// CacheSeed seeds the caches' hash (0: random), so that peers cannot
	// aim collisions at them. The simulator fixes it.
	CacheSeed uint64

	// Crypto chooses who computes the seals (the send side; opens always
	// use package aesni): CryptoGo ("go", also ""), crypto/cipher one
	// message at a time, or CryptoIPsecMB ("ipsec-mb"), the seals of a
	// burst queued in an aesni/mb Batch and run with one cgo call before
	// the frames leave (see sealer.go). The bytes on the wire are the same.
	// CryptoIPsecMB needs a Tx that implements TxHook and a build with
	// cgo on linux/amd64.
	Crypto string

	// Delays, if set, receives the delays of every completion the core
	// writes, as log2 histograms by op (telemetry.Delays), a batch at a
	// time: the core adds its telemetry batch to it when it hands the
	// batch to the hook (full, or its oldest sample 1 ms old), so no
	// completion costs more than one pass over its 16-byte sample. It
	// belongs to the core's goroutine: the driver reads it there
	// (runner.Exec) and copies it out (rmad -metrics). One per core.
	Delays *telemetry.Delays
}

// The backends of Config.Crypto.
const (
	CryptoGo      = "go"
	CryptoIPsecMB = "ipsec-mb"
)

// Limits of Config.ARPRate and ARPBurst: a token is at least 1 µs, and
// the bucket's arithmetic (ns in an int64) stays far from overflow.
const (
	maxARPRate  = 1_000_000
	maxARPBurst = 1_000_000
)

// DefaultSummaryScan is Config.SummaryScan's default: a few round trips of
// a loopback READ, a fraction of the smallest TIMEOUT rmad allows. 0 in
// a Config means it too.
const DefaultSummaryScan = 20 * time.Microsecond

// ArbitrationBytes: an op needs this much free window to enter service,
// whatever its size, so small ops cannot starve big ones (paper §3.1).
const ArbitrationBytes = abi.MaxOpBytes

// DefaultConfig returns defaults tuned for a software engine on a shared
// 2-core VM (RTTs of tens of microseconds, scheduling jitter of a few ms in
// idle-backoff mode). Benchmarks and the simulator override the timeouts.
func DefaultConfig() Config {
	return Config{
		LocalIP:            netip.MustParseAddr("10.0.0.1"),
		LocalMAC:           wire.MAC{0x02, 0, 0, 0, 0, 1},
		UDPPort:            4792,
		MTU:                1500,
		Slots:              1024,
		Regions:            1024,
		Portals:            64,
		SummaryScan:        DefaultSummaryScan,
		Tenants:            64,
		WindowBytes:        256 << 10,
		Destinations:       256,
		HighBurst:          8,
		InboundQueue:       1024,
		NackThreshold:      768,
		ServeBudget:        64,
		PullContexts:       128,
		DispatchTimeout:    2 * time.Millisecond,
		Timeout:            10 * time.Millisecond,
		ResolveTimeout:     50 * time.Millisecond,
		ARPRetry:           5 * time.Millisecond,
		ICMPRate:           1000,
		ICMPBurst:          50,
		NeighborReachable:  30 * time.Second,
		NeighborTable:      256,
		NeighborsPerTenant: 16,
		ARPRate:            1000,
		ARPBurst:           64,
		ReplayPeers:        256,
		KeyCache:           4096,
		Crypto:             CryptoGo,
	}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("engine: invalid config")

// Validate checks every field; the error names the first bad one.
func (c *Config) Validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: %s = %v", ErrConfig, f, v) }
	switch {
	case !c.LocalIP.Is4():
		return bad("LocalIP", c.LocalIP)
	case c.LocalMAC == (wire.MAC{}) || c.LocalMAC[0]&1 != 0:
		return bad("LocalMAC (zero or multicast)", c.LocalMAC)
	case c.CoreID >= wire.MaxCores:
		return bad("CoreID (at most 63: the low six bits of an initiator port)", c.CoreID)
	case c.UDPPort == 0 || int(c.UDPPort)+wire.MaxCores > wire.InitiatorPortBase:
		return bad("UDPPort (1..49088: UDPPort+63 below the initiator ports)", c.UDPPort)
	case c.MTU < 576 || c.MTU > 9000 || wire.MaxPayload(c.MTU) < wire.ChunkAlign:
		return bad("MTU", c.MTU)
	case c.Slots < 1 || c.Slots > 1<<20:
		return bad("Slots", c.Slots)
	case uint64(c.SlotBase)+uint64(c.Slots) > 1<<31:
		return bad("SlotBase", c.SlotBase)
	case c.Regions < 1 || c.Regions > 65535:
		return bad("Regions", c.Regions)
	case c.Portals < 1 || c.Portals > 65535:
		return bad("Portals", c.Portals)
	case c.SummaryScan < 0 || c.SummaryScan > time.Second:
		return bad("SummaryScan", c.SummaryScan)
	case c.Tenants < 1 || c.Tenants > MaxTenants:
		return bad("Tenants", c.Tenants)
	case c.WindowBytes < ArbitrationBytes:
		return bad("WindowBytes", c.WindowBytes)
	case c.Responsive < 0 || c.Responsive > time.Second:
		return bad("Responsive", c.Responsive)
	case c.Destinations < 1 || c.Destinations > 1<<16:
		return bad("Destinations", c.Destinations)
	case c.HighBurst < 1:
		return bad("HighBurst", c.HighBurst)
	case c.InboundQueue < 1:
		return bad("InboundQueue", c.InboundQueue)
	case c.NackThreshold < 0 || c.NackThreshold > c.InboundQueue:
		return bad("NackThreshold", c.NackThreshold)
	case c.ServeBudget < 1:
		return bad("ServeBudget", c.ServeBudget)
	case c.LowAfterHigh < 0:
		return bad("LowAfterHigh", c.LowAfterHigh)
	case c.PollBytes < 0:
		return bad("PollBytes", c.PollBytes)
	case c.PriorityHold < 0 || c.PriorityHold > time.Second:
		return bad("PriorityHold", c.PriorityHold)
	case c.HighHold < 0 || c.HighHold > time.Second:
		return bad("HighHold", c.HighHold)
	case c.PullContexts < 1 || c.PullContexts > 65535:
		return bad("PullContexts", c.PullContexts)
	case c.DispatchTimeout <= 0:
		return bad("DispatchTimeout", c.DispatchTimeout)
	case c.Timeout <= 0 || c.Timeout > time.Second:
		return bad("Timeout", c.Timeout)
	case c.PullIdleTimeout < 0:
		return bad("PullIdleTimeout", c.PullIdleTimeout)
	case c.ResolveTimeout <= 0:
		return bad("ResolveTimeout", c.ResolveTimeout)
	case c.DoorbellGap < 0 || c.DoorbellGap > MaxModerationPeriod:
		return bad("DoorbellGap", c.DoorbellGap)
	case c.ARPRetry <= 0:
		return bad("ARPRetry", c.ARPRetry)
	case c.ICMPRate < 0 || c.ICMPRate > maxICMPRate:
		return bad("ICMPRate", c.ICMPRate)
	case c.ICMPBurst < 0 || c.ICMPBurst > maxICMPBurst || (c.ICMPRate > 0 && c.ICMPBurst < 1):
		return bad("ICMPBurst", c.ICMPBurst)
	case c.NeighborReachable <= 0:
		return bad("NeighborReachable", c.NeighborReachable)
	case c.IV == nil:
		return bad("IV", "nil (no IV source)")
	case c.KeyCache < 1 || c.KeyCache > 1<<20:
		return bad("KeyCache", c.KeyCache)
	case c.Crypto != "" && c.Crypto != CryptoGo && c.Crypto != CryptoIPsecMB:
		return bad("Crypto (want \"go\" or \"ipsec-mb\")", fmt.Sprintf("%q", c.Crypto))
	case c.Crypto == CryptoIPsecMB && !mbBuilt:
		return bad("Crypto (ipsec-mb needs a cgo build on linux/amd64)", c.Crypto)
	case c.NeighborTable < 2 || c.NeighborTable&(c.NeighborTable-1) != 0 || len(c.Neighbors) > c.NeighborTable/2:
		return bad("NeighborTable", c.NeighborTable)
	case c.NeighborsPerTenant < 1 || c.NeighborsPerTenant > c.NeighborTable/2:
		return bad("NeighborsPerTenant (1 .. NeighborTable/2)", c.NeighborsPerTenant)
	case c.ARPRate < 1 || c.ARPRate > maxARPRate:
		return bad("ARPRate", c.ARPRate)
	case c.ARPBurst < 1 || c.ARPBurst > maxARPBurst:
		return bad("ARPBurst", c.ARPBurst)
	case c.ReplayPeers < 0 || c.ReplayPeers > 1<<13: // 8 KB each: at most 64 MB
		return bad("ReplayPeers", c.ReplayPeers)
	case c.ReplayLanesPerSender < 0 || c.ReplayLanesPerSender > wire.MaxCores:
		return bad("ReplayLanesPerSender (0..64)", c.ReplayLanesPerSender)
	case c.InboundPerOwner < 0 || c.InboundPerOwner > maxBound:
		return bad("InboundPerOwner", c.InboundPerOwner)
	case c.InboundPerSender < 0 || c.InboundPerSender > maxBound:
		return bad("InboundPerSender", c.InboundPerSender)
	case c.PullsPerOwner < 0 || c.PullsPerOwner > maxBound:
		return bad("PullsPerOwner", c.PullsPerOwner)
	case c.PullsPerSender < 0 || c.PullsPerSender > maxBound:
		return bad("PullsPerSender", c.PullsPerSender)
	}
	for _, n := range c.Neighbors {
		if !n.IP.Is4() {
			return bad("Neighbors", n.IP)
		}
	}
	for k, d := range c.DSCP {
		if d > 63 {
			return bad(fmt.Sprintf("DSCP[%v] (0..63)", abi.Class(k)), d)
		}
	}
	return c.validateRoutes(bad)
}

// Unbounded, set as a per-owner or per-sender bound of a Config, is no
// bound: it is above anything the queues and the pull contexts can hold.
// The largest a Config accepts.
const Unbounded = 1 << 24

// maxBound bounds the per-owner and per-sender bounds a Config sets.
const maxBound = Unbounded

// Unbound sets every per-owner and per-sender bound of c to Unbounded:
// one owner or one sender may take every queue entry and pull context,
// as suits an engine that serves a single tenant (the simulator's
// scenarios of one tenant, the paper's experiments, benchmarks).
func (c *Config) Unbound() {
	c.InboundPerOwner, c.InboundPerSender = Unbounded, Unbounded
	c.PullsPerOwner, c.PullsPerSender = Unbounded, Unbounded
}

// ServingBounds are the serving side's bounds per region owner and per
// sender in force on a core (Config's, or derived from the totals where
// it leaves them 0), and each owner's guaranteed share of the replay
// table. rmad logs them at start.
type ServingBounds struct {
	InboundPerOwner, InboundPerSender int
	PullsPerOwner, PullsPerSender     int
	ReplayLanesPerSender              int
	// ReplayPerOwner is each owner's guaranteed share of the replay
	// windows: ReplayPeers/Tenants.
	ReplayPerOwner int
}

// ServingBounds returns the bounds c puts in force (see the fields of
// Config that name them).
func (c *Config) ServingBounds() ServingBounds {
	or := func(v, derived int) int {
		if v > 0 {
			return v
		}
		return max(1, derived)
	}
	pulls := min(c.PullContexts, c.WindowBytes/ArbitrationBytes)
	b := ServingBounds{
		InboundPerOwner:      or(c.InboundPerOwner, c.NackThreshold/2),
		InboundPerSender:     or(c.InboundPerSender, c.NackThreshold/2),
		PullsPerOwner:        or(c.PullsPerOwner, pulls/2),
		PullsPerSender:       or(c.PullsPerSender, pulls/2),
		ReplayLanesPerSender: or(c.ReplayLanesPerSender, wire.MaxCores),
	}
	if c.Tenants > 0 {
		b.ReplayPerOwner = c.ReplayPeers / c.Tenants
	}
	return b
}
