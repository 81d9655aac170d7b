package ctlmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/onerma/onerma/abi"
)

// Code classifies a failed request so clients can match it without parsing
// the message. The message (Response.Error) is the precise, human text.
type Code string

const (
	CodeBadRequest Code = "bad_request"  // the request did not decode or validate
	CodeState      Code = "state"        // not valid now (e.g. alloc before open, second open)
	CodeSlotCap    Code = "slot_cap"     // over the application's slot cap
	CodeClass      Code = "class"        // the application's policy does not grant the class it asked for
	CodeNoSlots    Code = "no_slots"     // the engine has no free slots
	CodeLimit      Code = "limit"        // another policy limit (regions, bytes, connections)
	CodeQuota      Code = "quota"        // over one of the tenant's quotas; Response.Quota names it
	CodeNoRegion   Code = "no_region"    // unknown region, or another portal's (deregister_region, rekey)
	CodeResource   Code = "resource"     // memory, fds, engine tables exhausted
	CodeUnavail    Code = "unavailable"  // the engine is shutting down
	CodeInternal   Code = "internal"     // a bug or an unexpected system error
	CodeTooLarge   Code = "too_large"    // the request datagram exceeds MaxRequestBytes
	CodeFDs        Code = "fds_rejected" // the request carried file descriptors
)

// Response answers one request. Exactly one of Error or the op's result is
// set. A response to open, create_region, doorbell or summary carries one
// file descriptor as SCM_RIGHTS when (and only when) it succeeds.
type Response struct {
	V     uint32 `json:"v"`
	ID    uint64 `json:"id,omitempty"`
	Op    Op     `json:"op,omitempty"`
	Code  Code   `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Quota names the quota a CodeQuota refusal is about (one of the
	// Quota* names).
	Quota string `json:"quota,omitempty"`

	Open     *OpenReply    `json:"open,omitempty"`
	Attach   *AttachReply  `json:"attach,omitempty"`
	Slots    []uint32      `json:"slots,omitempty"`
	Memory   *MemoryReply  `json:"memory,omitempty"`
	Region   *RegionReply  `json:"region,omitempty"`
	Identity *Identity     `json:"identity,omitempty"`
	Stats    *Stats        `json:"stats,omitempty"`
	Summary  *SummaryReply `json:"summary,omitempty"`
}

// Names of the pools a tenant is held to a quota and a guarantee of
// (Response.Quota, and the keys of rmad's ctl.quota and ctl.guarantee).
const (
	QuotaMemoryBytes   = "memory_bytes"   // shared memory: regions and portal segments, as mapped
	QuotaHugepageBytes = "hugepage_bytes" // of which on huge pages
	QuotaPortals       = "portals"        // portals open at once
	QuotaSlots         = "slots"          // command slots held at once
	QuotaConns         = "conns"          // control connections open at once
	QuotaRegions       = "regions"        // region memory objects: registered, created and not yet registered, or alive after deregistration
)

// OpenReply describes the portal segment whose fd comes with the response.
// The segment header (and so the portal id) is written at attach.
type OpenReply struct {
	Size     uint64 `json:"size"`      // segment bytes in use (abi.Layout.Size)
	MapSize  uint64 `json:"map_size"`  // bytes to map (Size rounded to the page size)
	CmdCap   uint32 `json:"cmd_cap"`   // command ring capacity
	CplCap   uint32 `json:"cpl_cap"`   // completion ring capacity
	Class    string `json:"class"`     // class of service granted: abi.Class.String()
	MaxSlots int    `json:"max_slots"` // this application's slot cap
	Hugetlb  bool   `json:"hugetlb"`   // backed by huge pages
	Identity
}

// AttachReply answers attach: the portal is open on one of the engine's
// cores, which serves all of its ops.
type AttachReply struct {
	Portal uint32 `json:"portal"` // its id on that core (also in the segment header)
	Core   uint32 `json:"core"`   // the core (0 on an engine of one core)
}

// MemoryReply describes the memory create_region made, whose fd comes with
// the response.
type MemoryReply struct {
	Memory  uint32 `json:"memory"`   // handle to name in register_region
	Size    uint64 `json:"size"`     // bytes asked for
	MapSize uint64 `json:"map_size"` // bytes to map (Size rounded up to the page size)
	Hugetlb bool   `json:"hugetlb"`  // backed by huge pages
}

// SummaryReply describes the summary doorbell whose memfd comes with the
// response (OpSummary): the portal's bit is attach's portal (bit p%64 of
// the little-endian u64 word p/64).
type SummaryReply struct {
	Size    uint64 `json:"size"`     // bytes of summary words (a multiple of 8, covering every portal of the core)
	MapSize uint64 `json:"map_size"` // bytes to map (Size rounded up to the page size)
}

// RegionReply describes a registered region (its memory is the one
// create_region handed out).
type RegionReply struct {
	Region  uint32   `json:"region"`   // abi.RegionID
	Size    uint64   `json:"size"`     // registered bytes (as requested)
	MapSize uint64   `json:"map_size"` // bytes to map (Size rounded to the page size)
	Perm    abi.Perm `json:"perm"`
	Hugetlb bool     `json:"hugetlb"`
}

// Identity is what the engine stamps on this connection's requests. PID is
// not the process's PID in any namespace: it is the identity the engine
// allocated to the peer process (found by its pidfd, SO_PEERPIDFD), the
// same for every connection of that process and never given to another.
type Identity struct {
	Addr   string `json:"addr"` // engine IPv4 address
	PID    uint32 `json:"pid"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Name   string `json:"name,omitempty"`   // portal name (after open): a label, never a credential
	Tenant string `json:"tenant,omitempty"` // the tenant the connection is charged to (socket and uid)
}

// Stats are the engine's counters (engine.Stats, field for field).
// Completed counts completions by status name; zero counts are left out.
type Stats struct {
	Posted    uint64            `json:"posted"`
	Completed map[string]uint64 `json:"completed"`
	// CompletedByOp counts completions by op name (READ, WRITE, REKEY;
	// OTHER for commands naming no valid op) and status name.
	CompletedByOp map[string]map[string]uint64 `json:"completed_by_op,omitempty"`
	// CompletedLookup counts LOOKUPs' completions by status name.
	CompletedLookup   map[string]uint64 `json:"completed_lookup,omitempty"`
	Orphaned          uint64            `json:"orphaned"`
	EnteredSvc        uint64            `json:"entered_service"`
	RxFrames          uint64            `json:"rx_frames"`
	RxDropped         uint64            `json:"rx_dropped"`
	RxAuthFailed      uint64            `json:"rx_auth_failed"` // answers to our ops that failed authentication (dropped)
	RxStale           uint64            `json:"rx_stale"`
	RxDuplicate       uint64            `json:"rx_duplicate"`
	RxIPOptions       uint64            `json:"rx_ip_options"`             // IPv4 with options to the engine: dropped
	RxFragments       uint64            `json:"rx_fragments"`              // IPv4 fragments to the engine: dropped
	RxTTLZero         uint64            `json:"rx_ttl_zero"`               // IPv4 with TTL 0 to the engine: dropped
	RxICMPMalformed   uint64            `json:"rx_icmp_malformed"`         // ICMP dropped: truncated, bad checksum, an echo from a source no reply may go to
	RxICMPOther       uint64            `json:"rx_icmp_other"`             // ICMP of other kinds (fragmentation needed about datagrams not the engine's among them)
	ICMPEchoReplies   uint64            `json:"icmp_echo_replies"`         // echo requests (ping) answered
	ICMPRateLimited   uint64            `json:"icmp_rate_limited"`         // echo requests over engine.icmp_rate / icmp_burst: not answered
	ICMPEchoTooBig    uint64            `json:"icmp_echo_too_big"`         // echo requests whose reply would exceed the MTU: not answered
	ICMPFragNeeded    uint64            `json:"icmp_frag_needed"`          // fragmentation needed about the engine's datagrams (the path MTU toward a destination is smaller)
	FragNeededDst     string            `json:"frag_needed_dst,omitempty"` // the latest one's destination ("": none yet)
	FragNeededMTU     uint64            `json:"frag_needed_mtu"`           // the next-hop MTU it reported (0: not given)
	TxFrames          uint64            `json:"tx_frames"`
	TxNoBuffer        uint64            `json:"tx_no_buffer"`
	ReqServed         uint64            `json:"req_served"`
	ReqNacked         uint64            `json:"req_nacked"`
	ReqErrors         uint64            `json:"req_errors"`
	ReqAuthFailed     uint64            `json:"req_auth_failed"` // requests answered REMOTE_AUTHENTICATION_FAILURE
	ReqReplayed       uint64            `json:"req_replayed"`    // authenticated requests dropped as replays
	ReplayEvictions   uint64            `json:"replay_evictions"`
	Rekeys            uint64            `json:"rekeys"`        // region keys replaced (local and remote)
	RemoteRekeys      uint64            `json:"remote_rekeys"` // of which by REKEY ops from the network
	IVErrors          uint64            `json:"iv_errors"`     // messages not sent: no IV counter available
	ReqExpired        uint64            `json:"req_expired"`
	PullsIssued       uint64            `json:"pulls_issued"`     // WRITEs served: data pulled from their initiators
	WritesCommitted   uint64            `json:"writes_committed"` // WRITEs whose data all authenticated and was committed
	PullsExpired      uint64            `json:"pulls_expired"`    // WRITEs abandoned uncommitted (data incomplete within TIMEOUT)
	PullsInUse        uint64            `json:"pulls_in_use"`     // WRITEs being served now
	ReqQueueMax       uint64            `json:"req_queue_max"`
	BulkHeld          uint64            `json:"bulk_held"` // bulk work held back for the next poll while priority work was in progress (poll_bytes)
	RxSplit           uint64            `json:"rx_split"`  // received bursts taken in two passes, short frames first (poll_bytes)
	ARPRequests       uint64            `json:"arp_requests"`
	ARPReplies        uint64            `json:"arp_replies"`
	ARPUnsolicited    uint64            `json:"arp_unsolicited"`     // ARP replies ignored: no request of ours was waiting for them
	ARPGratuitous     uint64            `json:"arp_gratuitous"`      // gratuitous ARP seen: never learned, a resolved neighbor's is asked again
	NeighborRefreshes uint64            `json:"neighbor_refreshes"`  // ARP requests re-asking a resolved neighbor (aged 3/4, or its gratuitous ARP)
	NeighborExpiries  uint64            `json:"neighbor_expiries"`   // neighbor entries expired unconfirmed
	NeighborChanges   uint64            `json:"neighbor_changes"`    // neighbor MACs changed by a reply to our request
	NoRoute           uint64            `json:"no_route"`            // ops completed UNREACHABLE at once: no route to their destination
	ARPRateLimited    uint64            `json:"arp_rate_limited"`    // ARP requests deferred to their entry's next retry: over engine.arp_rate / arp_burst
	NeighborRefused   uint64            `json:"neighbor_refused"`    // ops completed UNREACHABLE at once: their tenant held engine.neighbors_per_tenant incomplete neighbor entries
	NeighborTableFull uint64            `json:"neighbor_table_full"` // ops completed UNREACHABLE at once: the neighbor table was full
	WindowInUse       uint64            `json:"window_in_use"`
	SlotsInUse        uint64            `json:"slots_in_use"`
	OpsInFlight       uint64            `json:"ops_in_flight"`
	RingsCorrupt      uint64            `json:"rings_corrupt"`
	SelfLoop          uint64            `json:"self_loop"`
	Doorbells         uint64            `json:"doorbells"`
	DoorbellsDeferred uint64            `json:"doorbells_deferred"`
	DelayBatches      uint64            `json:"delay_batches"` // delay-sample batches handed to the telemetry hook
	DelaySamples      uint64            `json:"delay_samples"` // completions in them
	// The serving side's bounds per region owner and per sender (engine
	// Config.InboundPerOwner, ...): requests NACKed at once (part of
	// req_nacked) as their region's owner, or their source address for
	// that owner's regions, had its bound queued; requests queued from senders beyond the table of
	// senders (its shared bucket); write requests that waited for a pull
	// context behind their owner's or sender's bound; requests dropped
	// before authentication as their IV named another address than their
	// source; requests dropped as their sender already had its bound of
	// replay lanes of their owner's.
	ReqNackedOwner      uint64 `json:"req_nacked_owner"`
	ReqNackedSender     uint64 `json:"req_nacked_sender"`
	SenderOverflow      uint64 `json:"sender_overflow"`
	PullsDeferredOwner  uint64 `json:"pulls_deferred_owner"`
	PullsDeferredSender uint64 `json:"pulls_deferred_sender"`
	ReqIVMismatch       uint64 `json:"req_iv_mismatch"`
	ReplayLanesRefused  uint64 `json:"replay_lanes_refused"`
	// RekeysSuperseded: remote REKEYs answered REMOTE_REGION, their key
	// not installed, because the region's key changed (its owner's rekey,
	// or another REKEY) after their request authenticated (part of
	// req_errors).
	RekeysSuperseded uint64 `json:"rekeys_superseded"`
	// Fault are the counters of the fault-injecting port wrapper
	// (engine/port/faultport) in front of the engine's port; absent when the
	// engine runs without one (the usual case).
	Fault *FaultStats `json:"fault,omitempty"`
	// Loop are the poll loop's counters (engine/runner), published by the
	// loop every 256 iterations; absent when the server has no loop.
	Loop *LoopStats `json:"loop,omitempty"`
	// Port are the counters of the core's port; absent when the server
	// was given none (engines in tests).
	Port *PortStats `json:"port,omitempty"`
	// Portals are the open portals, by core and in id order, with their
	// ring depths: every tenant's in an operator's reply, else only the
	// asking tenant's (TenantOnly).
	Portals []PortalStats `json:"portals,omitempty"`
	// Cores are each core's counters, loop, port and fault injector, on
	// an engine of more than one core (absent on one core); the counters
	// above are then their sums (the gauges too: window, slots and ops in
	// flight over every core; req_queue_max is the deepest core's,
	// frag_needed_* those of the core that counted the most), Loop
	// and Fault sum the cores' too, and Port is core 0's with every
	// core's driver and device counters summed (each core's device
	// counters are its queue pair's: PortDevStats).
	Cores []CoreStats `json:"cores,omitempty"`
	// Tenants are the tenants holding a connection or resources, by
	// name, with their usage against their quotas (at most the 64 that
	// hold the most memory); only the asking tenant's (TenantOnly).
	Tenants []TenantStats `json:"tenants,omitempty"`
	// TenantOnly: Portals and Tenants are the asking tenant's only (the
	// asker is not an operator). The engine-wide counters are everyone's.
	TenantOnly bool `json:"tenant_only,omitempty"`
	// NackThreshold is the serving side's NACK threshold and how it was
	// derived; absent when the server was not told (engines in tests).
	NackThreshold *NackThreshold `json:"nack_threshold,omitempty"`
}

// NackThreshold is the inbound queue depth at or above which a request
// is NACKed at once (each class queue of each core), and its derivation
// (paper §6.1: (TIMEOUT − RTT − DISPATCH_TIMEOUT) × requests served per
// second, within [1, inbound_queue]; engine.NackDerivation).
type NackThreshold struct {
	Threshold int `json:"threshold"`
	// Source is "derived" (engine.nack_threshold 0: the formula's), or
	// "engine.nack_threshold" (set: the formula's result is what it
	// would be).
	Source       string  `json:"source"`
	Derived      int     `json:"derived"` // the formula's threshold
	Formula      string  `json:"formula"` // the arithmetic: "(7ms − 1.532ms − 0s) × 155340/s = 849.4 → 849 (within [1, 1024])"
	Inputs       string  `json:"inputs"`  // where each input comes from
	TimeoutNs    int64   `json:"timeout_ns"`
	RTTNs        int64   `json:"rtt_ns"`
	DispatchNs   int64   `json:"dispatch_ns"`
	ServePerSec  float64 `json:"serve_per_sec"`
	InboundQueue int     `json:"inbound_queue"`
}

// CoreStats are one core's counters (its Portals, Tenants and Cores are
// left out: the engine-wide lists hold them).
type CoreStats struct {
	Core int `json:"core"`
	Stats
}

// TenantStats are one tenant's usage and the quotas it is held to. A
// tenant is a control socket, or a uid on a socket that splits its
// tenants by uid.
type TenantStats struct {
	Name   string `json:"name"`          // socket name, and "uid N" (or "other uids") where the socket splits tenants by uid
	Socket string `json:"socket"`        // the control socket's path
	UID    *int64 `json:"uid,omitempty"` // the uid the tenant stands for; absent: the socket is one tenant, or its other uids
	TenantUsage
	// Quota are the tenant's limits (its socket's quotas): the most it
	// may hold of each pool.
	Quota TenantUsage `json:"quota"`
	// Guarantee are the tenant's minimums (its socket's guarantees):
	// what it is given of each pool however much the others hold.
	Guarantee TenantUsage `json:"guarantee"`
	// Datapath are its counters in the engine's data path, summed over
	// the cores; absent while it is not active (it holds nothing).
	Datapath *TenantDatapath `json:"datapath,omitempty"`
}

// TenantDatapath are a tenant's counters in the engine's data path
// (engine.TenantCounters, field for field), summed over the cores since
// the tenant became active: what its own share of a pool delayed or
// refused, and its use of the solicitation window.
type TenantDatapath struct {
	Posted uint64 `json:"posted"` // ops its portals posted
	// ShareWaits: ops that waited for window while the tenant was at its
	// share (window was free, the op did not fit in the share, and its
	// destination had not answered recently enough to borrow);
	// ShareDispatchTimeouts: DISPATCH_TIMEOUTs of ops that did not fit in
	// the share when they expired.
	ShareWaits            uint64 `json:"share_waits"`
	ShareDispatchTimeouts uint64 `json:"share_dispatch_timeouts"`
	// Borrowed, BorrowedBytes: ops that entered service beyond the
	// share (toward destinations that answer), and their window.
	Borrowed      uint64 `json:"borrowed"`
	BorrowedBytes uint64 `json:"borrowed_bytes"`
	// Gauges: window its ops in service hold, its guaranteed share
	// (summed over the cores it has portals on) and ops waiting for
	// window.
	WindowHeld  uint64 `json:"window_held"`
	WindowShare uint64 `json:"window_share"`
	Queued      uint64 `json:"queued"`
	// The serving side, for requests naming the tenant's regions: NACKed
	// at once at the class queue's threshold (Nacked), at the bound of
	// requests queued per owner (NackedOwner) or per sender
	// (NackedSender); WRITEs and REKEYs that waited for a pull context at
	// the owner's or sender's bound (PullsDeferred); requests dropped
	// for an IV naming another address than their source (IVMismatch),
	// or for a sender's lanes beyond the bound (ReplayLanesRefused); its
	// replay windows evicted (ReplayEvictions).
	Nacked             uint64 `json:"nacked"`
	NackedOwner        uint64 `json:"nacked_owner"`
	NackedSender       uint64 `json:"nacked_sender"`
	PullsDeferred      uint64 `json:"pulls_deferred"`
	IVMismatch         uint64 `json:"iv_mismatch"`
	ReplayLanesRefused uint64 `json:"replay_lanes_refused"`
	ReplayEvictions    uint64 `json:"replay_evictions"`
	// NeighborRefused: its ops ended UNREACHABLE at once, to a new
	// on-link address, while it held its bound of incomplete neighbour
	// entries.
	NeighborRefused uint64 `json:"neighbor_refused"`
}

// TenantUsage counts what a tenant holds of each pool, in the units of
// its quotas. Memory objects (region and portal memory) count from their
// creation until the last descriptor and mapping of them is gone, in the
// application too.
type TenantUsage struct {
	Conns         int    `json:"conns"`   // control connections open
	Portals       int    `json:"portals"` // portals, each until its segment is gone
	Slots         int    `json:"slots"`
	Regions       int    `json:"regions"` // region memory objects
	MemoryBytes   uint64 `json:"memory_bytes"`
	HugepageBytes uint64 `json:"hugepage_bytes"`
}

// PortStats are a DPDK port's counters: the engine's driver's and the
// device's.
type PortStats struct {
	Name   string          `json:"name"`
	Driver PortDriverStats `json:"driver"`
	Dev    PortDevStats    `json:"dev"`
	DevErr string          `json:"dev_error,omitempty"` // the device's counters could not be read
	// XDP: an AF_XDP port's XDP program and sockets; absent for other
	// ports.
	XDP *PortXDPStats `json:"xdp,omitempty"`
}

// PortXDPStats describe an AF_XDP port (DPDK's net_af_xdp): the XDP
// program that steers the engine's frames to its sockets and passes the
// rest to the kernel, and the sockets.
type PortXDPStats struct {
	Iface    string         `json:"iface"`
	ProgID   uint32         `json:"prog_id"`   // rmad's steering program (0: the operator's own, whose counters rmad does not know)
	Mode     string         `json:"mode"`      // how it runs: native (in the driver) or generic
	Sockets  int            `json:"sockets"`   // AF_XDP sockets of the port
	ZeroCopy bool           `json:"zero_copy"` // the sockets run in zero-copy mode (else copy mode)
	Steer    XDPSteerStats  `json:"steer"`
	Socket   XDPSocketStats `json:"socket"`          // summed over the sockets
	Err      string         `json:"error,omitempty"` // some counters could not be read
}

// XDPSteerStats are the steering program's counters
// (engine/port/dpdkport/xdp.Stats, field for field).
type XDPSteerStats struct {
	ToEngine uint64 `json:"to_engine"` // frames for the engine, to its sockets
	NoSocket uint64 `json:"no_socket"` // frames for the engine on an rx queue without a socket (to the kernel, which drops them)
	ToKernel uint64 `json:"to_kernel"` // every other frame, left to the kernel
}

// XDPSocketStats are the kernel's counters of AF_XDP sockets
// (XDP_STATISTICS, struct xdp_statistics, field for field).
type XDPSocketStats struct {
	RxDropped            uint64 `json:"rx_dropped"`
	RxInvalidDescs       uint64 `json:"rx_invalid_descs"`
	TxInvalidDescs       uint64 `json:"tx_invalid_descs"`
	RxRingFull           uint64 `json:"rx_ring_full"`
	RxFillRingEmptyDescs uint64 `json:"rx_fill_ring_empty_descs"`
	TxRingEmptyDescs     uint64 `json:"tx_ring_empty_descs"`
}

// PortDriverStats are the engine's port driver's counters
// (engine/port/dpdkport.Stats, field for field).
type PortDriverStats struct {
	TxFrames   uint64 `json:"tx_frames"`    // accepted by the tx queue
	TxDropped  uint64 `json:"tx_dropped"`   // refused by the tx queue after all retries
	TxNoBuffer uint64 `json:"tx_no_buffer"` // no free mbuf for a frame
	RxFrames   uint64 `json:"rx_frames"`
	RxMultiSeg uint64 `json:"rx_multi_seg"` // multi-segment frames dropped
	AllocFails uint64 `json:"alloc_fails"`  // mbuf stash refills that fell short
	IOCalls    uint64 `json:"io_calls"`     // cgo crossings
	// TxFullCalls are those made in the middle of an iteration: its
	// frames filled a tx burst (or the mbuf stash) before the next poll
	// step could send them.
	TxFullCalls uint64 `json:"tx_full_calls"`
	// Frames handed between the cores of an engine of several: those this
	// core's queue received for another core and put in its ring, those
	// it took from the other cores' rings (part of rx_frames), and those
	// lost to a full ring (an ARP frame counts once per core).
	HandedOut    uint64 `json:"handed_out"`
	HandedIn     uint64 `json:"handed_in"`
	HandOverFull uint64 `json:"handover_full"`
}

// PortDevStats are the device's counters (dpdk.EthStats: rte_eth_stats,
// field for field); on an engine of several cores, each core's are its
// queue pair's (rx and tx packets, bytes and rx errors), and core 0's
// also the device's missed, no-mbuf and tx error counts, so that their
// sum is the device's. Some drivers count wrongly (memif in DPDK 22.11).
type PortDevStats struct {
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxMissed  uint64 `json:"rx_missed"` // dropped by the device: rx queue full
	RxErrors  uint64 `json:"rx_errors"`
	TxErrors  uint64 `json:"tx_errors"`
	RxNoMbuf  uint64 `json:"rx_nombuf"` // rx mbuf allocation failures
}

// PortalStats describe one open portal: who holds it and how full its
// rings are.
type PortalStats struct {
	ID       uint32 `json:"id"`   // its id on its core
	Core     uint32 `json:"core"` // the core that serves it
	Name     string `json:"name"`
	PID      uint32 `json:"pid"`    // the identity stamped on its requests
	Tenant   string `json:"tenant"` // the tenant it is charged to
	Class    string `json:"class"`
	Slots    int    `json:"slots"`
	MaxSlots int    `json:"max_slots"`
	InFlight int    `json:"in_flight"` // ops posted, completion still owed
	CmdDepth uint32 `json:"cmd_depth"` // commands posted, not yet taken by the engine
	CmdCap   uint32 `json:"cmd_cap"`
	CplDepth uint32 `json:"cpl_depth"` // completions written, not yet consumed by the application
	CplCap   uint32 `json:"cpl_cap"`
	Closed   bool   `json:"closed,omitempty"` // closed by the engine: its rings were corrupt
	// UID is the uid of the process that opened it (SO_PEERCRED).
	UID uint32 `json:"uid"`
	// Regions and RegionBytes are the regions it has registered.
	Regions     int    `json:"regions"`
	RegionBytes uint64 `json:"region_bytes"`
}

// LoopStats are the poll loop's counters (runner.Stats, field for field).
// rx_frames / iterations under load is the mean receive burst.
type LoopStats struct {
	Iterations uint64 `json:"iterations"`  // passes of the data path
	RxFrames   uint64 `json:"rx_frames"`   // frames received
	IdleSleeps uint64 `json:"idle_sleeps"` // backoff sleeps
	Yields     uint64 `json:"yields"`      // sched_yield calls (yield mode)
	SleptNs    uint64 `json:"slept_ns"`    // time asleep
	Execs      uint64 `json:"execs"`       // control-plane closures run on the loop
	Stalls     uint64 `json:"stalls"`      // gaps between iterations over the stall threshold (the loop could not run)
	StalledNs  uint64 `json:"stalled_ns"`  // their total length

	// The loop's invariants, counted (runner.Stats): one clock read per
	// iteration (and one more per sleep cut short), at most 2 cgo
	// crossings per iteration, no look at a command ring with nothing new
	// outside the fallback scans.
	WorkIterations uint64 `json:"work_iterations"` // iterations that did work
	ClockReads     uint64 `json:"clock_reads"`     // clock reads of the loop
	WokenEarly     uint64 `json:"woken_early"`     // sleeps cut short (a control-plane call, stop, a signal)
	Crossings      uint64 `json:"crossings"`       // cgo calls of the port and the core in iterations
	CrossingsMax   uint64 `json:"crossings_max"`   // the most of one iteration (summed over cores: the most of any)
	CrossingsOver  uint64 `json:"crossings_over"`  // iterations with more than 2
	RingLooks      uint64 `json:"ring_looks"`      // command rings read
	RingLooksIdle  uint64 `json:"ring_looks_idle"` // of those, with nothing new
	RingScans      uint64 `json:"ring_scans"`      // fallback scans of every portal (summary doorbell)
	RingRungIdle   uint64 `json:"ring_rung_idle"`  // idle looks the summary asked for (a lost race, or another tenant's bit)
}

// FaultStats are a fault-injecting port wrapper's counters
// (faultport.Stats, field for field), per direction: rx is what the port
// received, tx what the engine sent.
type FaultStats struct {
	Rx   FaultDirStats `json:"rx"`
	Tx   FaultDirStats `json:"tx"`
	Held uint64        `json:"held"` // frames in the wrapper's pool now
}

// FaultDirStats are one direction's counters (faultport.DirStats).
type FaultDirStats struct {
	Frames     uint64 `json:"frames"`     // frames that entered the wrapper
	Passed     uint64 `json:"passed"`     // delivered at once, unfaulted
	Dropped    uint64 `json:"dropped"`    // lost on purpose
	Duplicated uint64 `json:"duplicated"` // extra copies delivered later
	Delayed    uint64 `json:"delayed"`    // held for a delay
	Reordered  uint64 `json:"reordered"`  // held to be overtaken
	Deferred   uint64 `json:"deferred"`   // rx: beyond a burst, held for the next one
	Released   uint64 `json:"released"`   // held frames delivered
	PoolEmpty  uint64 `json:"pool_empty"` // faults not injected: no pool buffer
	Overflow   uint64 `json:"overflow"`   // frames lost for want of room
	NoBuffer   uint64 `json:"no_buffer"`  // tx: releases postponed, the port had no buffer
}

// EncodeResponse renders r. It fails only if the result exceeds
// MaxResponseBytes.
func EncodeResponse(r *Response) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxResponseBytes {
		return nil, fmt.Errorf("ctl: response of %d bytes exceeds %d", len(b), MaxResponseBytes)
	}
	return b, nil
}

// ErrResponse wraps every DecodeResponse failure.
var ErrResponse = errors.New("ctl: bad response")

// DecodeResponse parses a response. Unknown keys are tolerated (a newer
// engine may add results); the version must match.
func DecodeResponse(b []byte) (Response, error) {
	if len(b) > MaxResponseBytes {
		return Response{}, fmt.Errorf("%w: %d bytes, limit %d", ErrResponse, len(b), MaxResponseBytes)
	}
	if r, ok := decodeFlatResponse(b); ok {
		return r, nil
	}
	return decodeResponse(b)
}

// decodeResponse decodes a response with encoding/json.
func decodeResponse(b []byte) (Response, error) {
	var r Response
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&r); err != nil {
		return Response{}, fmt.Errorf("%w: %v", ErrResponse, err)
	}
	if d.More() {
		return Response{}, fmt.Errorf("%w: trailing data", ErrResponse)
	}
	if r.V != Version {
		return Response{}, fmt.Errorf("%w: version %d, want %d", ErrResponse, r.V, Version)
	}
	if (r.Error == "") != (r.Code == "") {
		return Response{}, fmt.Errorf("%w: error %q with code %q", ErrResponse, r.Error, r.Code)
	}
	return r, nil
}

// decodeFlatResponse decodes the replies of most control calls (v, id,
// op, and code, error and quota for a refusal: one flat object of
// unsigned decimal integers and strings of printable ASCII without
// escapes) without encoding/json, which costs a control call about a
// microsecond. It reports false for anything else (other keys, key names
// in another case, repeated keys, any error), leaving it to
// decodeResponse, so that what it accepts is decodeResponse's
// (FuzzDecodeFlatResponse compares them).
func decodeFlatResponse(b []byte) (Response, bool) {
	var r Response
	const (
		kV = 1 << iota
		kID
		kOp
		kCode
		kError
		kQuota
	)
	seen := 0
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return Response{}, false
	}
	i = skipSpace(b, i+1)
	for first := true; ; first = false {
		if i < len(b) && b[i] == '}' && first {
			break
		}
		k0, k1, ok := flatString(b, i)
		if !ok {
			return Response{}, false
		}
		i = skipSpace(b, k1+1)
		if i == len(b) || b[i] != ':' {
			return Response{}, false
		}
		i = skipSpace(b, i+1)
		var bit int
		switch string(b[k0:k1]) {
		case "v", "id":
			n := flatNumber(b, i)
			v, err := strconv.ParseUint(string(b[i:n]), 10, 64)
			if n == i || err != nil {
				return Response{}, false
			}
			if b[k0] == 'v' {
				if v > 1<<32-1 {
					return Response{}, false
				}
				bit, r.V = kV, uint32(v)
			} else {
				bit, r.ID = kID, v
			}
			i = n
		case "op", "code", "error", "quota":
			v0, v1, ok := flatString(b, i)
			if !ok {
				return Response{}, false
			}
			switch v := string(b[v0:v1]); b[k0] {
			case 'o':
				bit, r.Op = kOp, Op(v)
			case 'c':
				bit, r.Code = kCode, Code(v)
			case 'e':
				bit, r.Error = kError, v
			default:
				bit, r.Quota = kQuota, v
			}
			i = v1 + 1
		default:
			return Response{}, false
		}
		if seen&bit != 0 {
			return Response{}, false
		}
		seen |= bit
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			break
		}
		return Response{}, false
	}
	if skipSpace(b, i+1) != len(b) || r.V != Version || (r.Error == "") != (r.Code == "") {
		return Response{}, false
	}
	return r, true
}
