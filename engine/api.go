package engine

import "github.com/onerma/onerma/abi"

// Tx is where a Core writes outgoing frames. Implementations: the DPDK port
// (mbufs), the simulator's links, in-memory test ports.
type Tx interface {
	// Buffer returns a writable buffer for the next outgoing frame, at
	// least 14+Config.MTU bytes long (the core never writes more), or nil
	// when none is available (tx ring full,
	// buffer pool empty). Until Send is called, repeated calls return the
	// same buffer. The Core never keeps the buffer after Send.
	Buffer() []byte
	// Send queues the first n bytes of the current buffer for transmission
	// and takes ownership of it.
	Send(n int)
}

// MaxFrameBytes is the largest frame any Core writes: Ethernet header plus
// the largest IPv4 MTU a Config accepts. A core with MTU m writes at most
// 14+m bytes.
const MaxFrameBytes = 14 + 9000

// PortalID names a portal within a core.
type PortalID uint16

// PortalSpec is what the control plane knows when it opens a portal.
type PortalSpec struct {
	CmdRing  []byte // memory of the command ring (abi.RingBytes(CmdCap, abi.CommandSize))
	CmdCap   uint32
	CplRing  []byte // memory of the completion ring
	CplCap   uint32
	Class    abi.Class
	MaxSlots int    // cap on slots this portal may hold
	PID      uint32 // initiator PID stamped on its requests (from SO_PEERCRED)
	// Tenant is the engine-local index (0..Config.Tenants-1) of the
	// tenant the portal belongs to, which the control plane assigns;
	// the regions the portal registers are that tenant's (their owner).
	Tenant int
	// Weight is the tenant's weight in the data path's shares (1..
	// MaxWeight; 0 means 1).
	Weight int
	// SummaryFlag is the 4 bytes of the portal's summary flag word in
	// its segment (abi.SegmentSummaryOff), 4-byte aligned: the core reads
	// it in its fallback scans, and once its application has stored
	// abi.SummaryOn there, looks at the command ring only when the
	// portal's bit in the core's summary doorbell (Core.SetSummary) is
	// rung, besides those scans. nil: the portal never rings, and its
	// command ring is looked at in every Poll.
	SummaryFlag []byte
	// TenantEpoch names the tenant's tenure of its index (the control
	// plane's count of the tenants it admitted, 0: none): a portal of a
	// new epoch for its index starts the index's counters on the core
	// afresh (TenantCounters.Epoch), so a tenant never inherits the
	// counters of the one that had its index before.
	TenantEpoch uint64
}

// MaxTenants bounds Config.Tenants; MaxWeight bounds PortalSpec.Weight.
const (
	MaxTenants = 4096
	MaxWeight  = 1000
)

// NumOpCounters bounds Stats.CompletedByOp's op index: abi.OpRead,
// OpWrite and OpRekey, and 0 for any other op a command named.
const NumOpCounters = 4

// PortalStats describe one open portal (Core.PortalStats).
type PortalStats struct {
	PID      uint32
	Tenant   int // PortalSpec.Tenant
	Weight   int // PortalSpec.Weight (1 when it was 0)
	Class    abi.Class
	Slots    int    // slots it holds
	MaxSlots int    // its cap
	Pending  int    // ops posted whose completion it is still owed
	CmdDepth uint32 // commands in its ring not yet taken by the core
	CmdCap   uint32
	CplDepth uint32 // completions in its ring the application has not consumed
	CplCap   uint32
	Dead     bool // closed by the core: its application corrupted its rings

	Regions     int    // regions it has registered
	RegionBytes uint64 // their bytes
}

// PathCounters are what a core's data path costs in the units its poll
// loop's invariants count (engine/runner: its Stats): calls into C the
// core makes itself, and cache lines of applications' rings it reads. They
// are kept apart from Stats, which count what the engine did (and which
// the simulator's golden digests cover), and read with Core.PathCounters
// (or Core.Crossings) on the core's goroutine.
type PathCounters struct {
	// Crossings are the cgo calls the core made itself: runs of the
	// ipsec-mb batches (seals and opens, CryptoIPsecMB) outside the Tx's
	// own crossings. 0 with CryptoGo.
	Crossings uint64
	// SealsInTx are the seal batches run inside the Tx's crossing, at no
	// crossing of their own (a TxCHook: the DPDK port's poll step).
	SealsInTx uint64
	// RingLooks are command rings Poll looked at: a read of the producer
	// index its application writes (a cache line the application's CPU
	// holds when it has posted). RingLooksIdle are those that found no
	// command the core had not seen; RingScans the fallback scans that
	// look at every live portal whatever the summary doorbell says
	// (portals.go). Portals whose applications ring the summary are looked
	// at only when they rang, when the core left commands in them, and in
	// scans: with honest applications every idle look is a scan's, or one
	// the summary asked for after a look had already taken the commands
	// (a race the look loses to an earlier one; RingRungIdle counts those,
	// and whatever a hostile tenant's bits cost).
	RingLooks, RingLooksIdle, RingScans, RingRungIdle uint64
}

// Stats are a core's counters. Read them with Core.Stats (control plane).
type Stats struct {
	Posted    uint64                // commands taken from rings, and ops an op source posted (SourcePort.Post)
	Completed [abi.NumStatus]uint64 // completions written, by status
	// CompletedByOp counts them by op and status: index abi.Op (READ,
	// WRITE, REKEY); 0 for commands whose op was not one of those.
	CompletedByOp [NumOpCounters][abi.NumStatus]uint64
	// CompletedLookup counts the LOOKUPs' completions by status (apart
	// from CompletedByOp, whose shape predates the op).
	CompletedLookup [abi.NumStatus]uint64
	Orphaned        uint64 // ops that finished after their portal closed
	EnteredSvc      uint64 // ops granted window
	RxFrames        uint64
	RxDropped       uint64 // malformed or not for us
	RxAuthFailed    uint64 // answers to our ops that failed authentication: dropped
	RxStale         uint64 // responses for a slot no longer waiting for them
	RxDuplicate     uint64 // response chunks already placed
	RxIPOptions     uint64 // IPv4 with options: dropped (from here to FragNeededMTU: frames to the engine's MAC and address only; icmp.go)
	RxFragments     uint64 // IPv4 fragments: dropped
	RxTTLZero       uint64 // IPv4 with TTL 0: dropped
	RxICMPMalformed uint64 // ICMP dropped: truncated, bad checksum, or an echo from a source no reply may go to (multicast, broadcast, unspecified, the engine's own)
	RxICMPOther     uint64 // ICMP of other kinds dropped, fragmentation needed about a datagram the engine did not send among them
	ICMPEchoReplies uint64 // echo requests answered
	ICMPRateLimited uint64 // echo requests not answered: over Config.ICMPRate and ICMPBurst (every one when ICMPRate is 0)
	ICMPEchoTooBig  uint64 // echo requests not answered: the reply would exceed the MTU
	ICMPFragNeeded  uint64 // fragmentation needed about a datagram the engine sent; its MTU is not changed (SECURITY.md)
	FragNeededDst   uint32 // the latest one's destination (IPv4 as a big-endian integer; 0: none yet)
	FragNeededMTU   uint64 // the next-hop MTU the latest one reported (0: not given, as by RFC 792 routers)
	TxFrames        uint64
	TxNoBuffer      uint64 // a frame could not be sent: no tx buffer
	ReqServed       uint64
	ReqNacked       uint64 // requests NACKed at once: the class queue at its threshold, or a bound (ReqNackedOwner, ReqNackedSender)
	ReqErrors       uint64 // requests answered with a remote error status
	ReqAuthFailed   uint64 // requests that failed authentication: answered REMOTE_AUTHENTICATION_FAILURE
	ReqReplayed     uint64 // authenticated requests dropped as replays (IV counter seen, or a window too old)
	ReplayEvictions uint64 // senders whose replay windows were forgotten to make room
	Rekeys          uint64 // region keys replaced (local and remote)
	RemoteRekeys    uint64 // of which by REKEY ops from the network
	IVErrors        uint64 // IV counters unavailable (state file not durable, exhausted): messages not sent
	ReqExpired      uint64 // requests dropped because they waited longer than TIMEOUT
	PullsIssued     uint64 // WRITEs served: data pulled from their initiators (②)
	WritesCommitted uint64 // WRITEs whose data all authenticated and was committed (④ sent)
	PullsExpired    uint64 // WRITEs abandoned uncommitted: data incomplete within TIMEOUT
	PullsInUse      uint64 // WRITEs being served now (pull contexts held)
	ReqQueueMax     uint64 // deepest inbound queue seen
	BulkHeld        uint64 // bulk work held back for the next Poll while priority work was in progress (Config.PollBytes)
	RxSplit         uint64 // received bursts taken in two passes, short frames before bulk chunks (Config.PollBytes)
	ARPRequests     uint64
	ARPReplies      uint64
	// ARPUnsolicited: ARP replies ignored, as no request of ours was
	// waiting for them (unsolicited, late, duplicate, or not addressed
	// to our MAC and address).
	ARPUnsolicited uint64
	// ARPGratuitous: gratuitous ARP seen (sender address = target
	// address), never learned; a resolved neighbor's is asked again.
	ARPGratuitous     uint64
	NeighborRefreshes uint64 // ARP requests re-asking a resolved neighbor (aged 3/4, or its gratuitous ARP)
	NeighborExpiries  uint64 // neighbor entries expired unconfirmed: their next ops waited for resolution
	NeighborChanges   uint64 // neighbor MACs changed by a reply to our request
	NoRoute           uint64 // ops completed UNREACHABLE at once: no route to their destination
	// ARPRateLimited: ARP requests deferred to their entry's next retry,
	// over Config.ARPRate and ARPBurst (the engine's, all cores together).
	ARPRateLimited uint64
	// NeighborRefused: ops completed UNREACHABLE at once, their tenant
	// holding Config.NeighborsPerTenant incomplete neighbor entries
	// already (TenantCounters.NeighborRefused says whose).
	NeighborRefused uint64
	// NeighborTableFull: ops completed UNREACHABLE at once, the
	// neighbor table holding NeighborTable/2 entries already.
	NeighborTableFull uint64
	WindowInUse       uint64 // bytes debited now
	SlotsInUse        uint64 // slots allocated to portals now
	OpsInFlight       uint64 // ops posted and not completed now
	RingsCorrupt      uint64 // portals closed because the app wrote impossible ring indices
	SelfLoop          uint64 // frames the engine sent to itself inside the core (not counted in Tx/RxFrames)
	Doorbells         uint64 // doorbells rung for applications waiting on completions
	DoorbellsDeferred uint64 // rings held back by a portal's moderation (Core.SetModeration) or the gap (Config.DoorbellGap)
	DelayBatches      uint64 // delay-sample batches handed to the telemetry hook (rmatop's uprobe)
	DelaySamples      uint64 // completions in them

	// The serving side's bounds per region owner and per sender
	// (bounds.go, replay.go; per owner: TenantCounters).
	//
	// ReqNackedOwner and ReqNackedSender: requests NACKed at once (also
	// in ReqNacked) because their region's owner already had
	// Config.InboundPerOwner queued, or their source address
	// InboundPerSender for that owner's regions.
	ReqNackedOwner  uint64
	ReqNackedSender uint64
	// SenderOverflow: requests queued whose sender (source address and
	// owner) the core's table of senders had no room for: counted, and
	// bounded, in its one shared bucket.
	SenderOverflow uint64
	// PullsDeferredOwner and PullsDeferredSender: write requests that
	// waited for a pull context because their region's owner, or their
	// source address for that owner's regions, held Config.PullsPerOwner
	// (PullsPerSender) of them (each counted once).
	PullsDeferredOwner  uint64
	PullsDeferredSender uint64
	// ReqIVMismatch: requests dropped unanswered, before authentication,
	// whose IV names another address than the frame's source.
	ReqIVMismatch uint64
	// ReplayLanesRefused: authenticated requests dropped because their
	// sender address already had Config.ReplayLanesPerSender lanes'
	// windows of their region's owner.
	ReplayLanesRefused uint64

	// RekeysSuperseded: remote REKEYs answered REMOTE_REGION, their key
	// not installed, because the region's key changed after their request
	// authenticated (its owner's Rekey, or another REKEY: pull.go). Also
	// in ReqErrors.
	RekeysSuperseded uint64
}
