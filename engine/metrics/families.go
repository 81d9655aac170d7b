package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onerma/onerma/ctlmsg"
)

const (
	ctr = prometheus.CounterValue
	gge = prometheus.GaugeValue
)

type st = ctlmsg.Stats

// u is a uint64 field as a sample value.
func u(v uint64) float64 { return float64(v) }

// seconds is a count of ns in seconds.
func seconds(ns uint64) float64 { return float64(ns) / 1e9 }

// statsFamilies are a core's counters and gauges (ctlmsg.Stats, the
// stats reply) but its completions (CompletedByOp: onerma_completions_total)
// and portals. TestEveryCounterExported keeps them in step with
// ctlmsg.Stats: a counter added there and not here fails it.
var statsFamilies = []family[st]{
	one("commands_posted_total", "Commands taken from the portals' command rings.", ctr, func(s *st) float64 { return u(s.Posted) }),
	one("ops_entered_service_total", "Ops granted solicitation window.", ctr, func(s *st) float64 { return u(s.EnteredSvc) }),
	one("ops_orphaned_total", "Ops that finished after their portal closed (no completion written).", ctr, func(s *st) float64 { return u(s.Orphaned) }),
	by("frames_total", "Frames received from and sent to the port, and sent by the core to itself.", ctr, "dir",
		sv("rx", func(s *st) float64 { return u(s.RxFrames) }),
		sv("tx", func(s *st) float64 { return u(s.TxFrames) }),
		sv("self", func(s *st) float64 { return u(s.SelfLoop) })),
	by("rx_dropped_total", "Frames and requests dropped on receipt, by reason.", ctr, "reason",
		sv("invalid", func(s *st) float64 { return u(s.RxDropped) }), // malformed or not for this engine
		sv("auth_failed", func(s *st) float64 { return u(s.RxAuthFailed) }),
		sv("stale", func(s *st) float64 { return u(s.RxStale) }),
		sv("duplicate", func(s *st) float64 { return u(s.RxDuplicate) }),
		sv("ip_options", func(s *st) float64 { return u(s.RxIPOptions) }),
		sv("ip_fragment", func(s *st) float64 { return u(s.RxFragments) }),
		sv("ttl_zero", func(s *st) float64 { return u(s.RxTTLZero) }),
		sv("icmp_malformed", func(s *st) float64 { return u(s.RxICMPMalformed) }),
		sv("icmp_other", func(s *st) float64 { return u(s.RxICMPOther) }),
		sv("replayed", func(s *st) float64 { return u(s.ReqReplayed) }),
		sv("request_expired", func(s *st) float64 { return u(s.ReqExpired) }),
		sv("iv_mismatch", func(s *st) float64 { return u(s.ReqIVMismatch) }),               // a request's IV address not its source
		sv("replay_lane_refused", func(s *st) float64 { return u(s.ReplayLanesRefused) })), // its sender's lanes of the owner's windows at their bound
	by("tx_dropped_total", "Messages the core could not send, by reason.", ctr, "reason",
		sv("no_buffer", func(s *st) float64 { return u(s.TxNoBuffer) }),
		sv("no_iv", func(s *st) float64 { return u(s.IVErrors) })),
	by("auth_failures_total", "Messages that failed authentication: requests (answered REMOTE_AUTHENTICATION_FAILURE) and responses to this engine's ops (dropped).", ctr, "message",
		sv("request", func(s *st) float64 { return u(s.ReqAuthFailed) }),
		sv("response", func(s *st) float64 { return u(s.RxAuthFailed) })),
	one("requests_served_total", "READ requests served (their data sent; WRITEs served count in onerma_pulls_issued_total).", ctr, func(s *st) float64 { return u(s.ReqServed) }),
	one("nacks_sent_total", "Requests answered NACK: their inbound queue was at its NACK threshold, or their region's owner or their source address at its bound of requests queued.", ctr, func(s *st) float64 { return u(s.ReqNacked) }),
	by("nacks_bound_total", "Requests answered NACK (part of onerma_nacks_sent_total) because their region's owner, or their source address, already had its bound of requests queued.", ctr, "bound",
		sv("owner", func(s *st) float64 { return u(s.ReqNackedOwner) }),
		sv("sender", func(s *st) float64 { return u(s.ReqNackedSender) })),
	one("sender_overflow_total", "Requests queued from source addresses the core's table of senders had no room for (one shared bucket, bounded as one sender).", ctr, func(s *st) float64 { return u(s.SenderOverflow) }),
	by("pulls_deferred_total", "WRITE and REKEY requests that waited for a pull context because their region's owner, or their source address, held its bound of pulls.", ctr, "bound",
		sv("owner", func(s *st) float64 { return u(s.PullsDeferredOwner) }),
		sv("sender", func(s *st) float64 { return u(s.PullsDeferredSender) })),
	one("request_errors_total", "Requests answered with a remote error status.", ctr, func(s *st) float64 { return u(s.ReqErrors) }),
	one("replay_evictions_total", "Senders whose anti-replay windows were forgotten to make room.", ctr, func(s *st) float64 { return u(s.ReplayEvictions) }),
	one("rekeys_total", "Region keys replaced, locally and by REKEY ops.", ctr, func(s *st) float64 { return u(s.Rekeys) }),
	one("remote_rekeys_total", "Region keys replaced by REKEY ops from the network (part of onerma_rekeys_total).", ctr, func(s *st) float64 { return u(s.RemoteRekeys) }),
	one("rekeys_superseded_total", "REKEY ops answered REMOTE_REGION, their key not installed: the region's key changed after their request authenticated (part of onerma_request_errors_total).", ctr, func(s *st) float64 { return u(s.RekeysSuperseded) }),
	one("pulls_issued_total", "WRITEs served: data pulled from their initiators.", ctr, func(s *st) float64 { return u(s.PullsIssued) }),
	one("writes_committed_total", "WRITEs whose data all authenticated and was committed.", ctr, func(s *st) float64 { return u(s.WritesCommitted) }),
	one("pulls_expired_total", "WRITEs abandoned uncommitted: their data was incomplete within TIMEOUT.", ctr, func(s *st) float64 { return u(s.PullsExpired) }),
	one("bulk_held_total", "Bulk work (window grants, READ data, pulls, WRITE data) a poll held back for the next while high-class or short work was in progress (engine.poll_bytes).", ctr, func(s *st) float64 { return u(s.BulkHeld) }),
	one("rx_split_total", "Received bursts taken in two passes, short frames before bulk chunks (engine.poll_bytes).", ctr, func(s *st) float64 { return u(s.RxSplit) }),
	by("arp_sent_total", "ARP messages sent: requests for next hops, replies for this engine's address.", ctr, "type",
		sv("request", func(s *st) float64 { return u(s.ARPRequests) }),
		sv("reply", func(s *st) float64 { return u(s.ARPReplies) })),
	by("arp_ignored_total", "ARP replies ignored as no request of this engine's waited for them, and gratuitous ARP (never learned).", ctr, "reason",
		sv("unsolicited", func(s *st) float64 { return u(s.ARPUnsolicited) }),
		sv("gratuitous", func(s *st) float64 { return u(s.ARPGratuitous) })),
	one("arp_rate_limited_total", "ARP requests deferred to their entry's next retry: over the engine's ARP rate bound.", ctr, func(s *st) float64 { return u(s.ARPRateLimited) }),
	by("neighbor_refused_total", "Ops completed UNREACHABLE at once for want of a neighbor entry: their tenant held its bound of incomplete entries, or the table was full.", ctr, "reason",
		sv("tenant_bound", func(s *st) float64 { return u(s.NeighborRefused) }),
		sv("table_full", func(s *st) float64 { return u(s.NeighborTableFull) })),
	by("neighbor_events_total", "Neighbor table events: resolved entries asked again, entries expired unconfirmed, MACs changed.", ctr, "event",
		sv("refresh", func(s *st) float64 { return u(s.NeighborRefreshes) }),
		sv("expiry", func(s *st) float64 { return u(s.NeighborExpiries) }),
		sv("change", func(s *st) float64 { return u(s.NeighborChanges) })),
	one("icmp_echo_replies_total", "ICMP echo requests to the engine's address answered.", ctr, func(s *st) float64 { return u(s.ICMPEchoReplies) }),
	by("icmp_echo_unanswered_total", "ICMP echo requests not answered: over the rate limit, or the reply would exceed the MTU.", ctr, "reason",
		sv("rate_limited", func(s *st) float64 { return u(s.ICMPRateLimited) }),
		sv("too_big", func(s *st) float64 { return u(s.ICMPEchoTooBig) })),
	one("icmp_frag_needed_total", "ICMP fragmentation needed about the engine's datagrams (rmad logs the destination; the MTU is not changed).", ctr, func(s *st) float64 { return u(s.ICMPFragNeeded) }),
	one("icmp_frag_needed_mtu", "The next-hop MTU the latest fragmentation needed reported (0: none, or not given).", gge, func(s *st) float64 { return u(s.FragNeededMTU) }),
	one("no_route_total", "Ops completed UNREACHABLE at once: no route to their destination.", ctr, func(s *st) float64 { return u(s.NoRoute) }),
	one("rings_corrupt_total", "Portals closed by the engine because their application wrote impossible ring indices.", ctr, func(s *st) float64 { return u(s.RingsCorrupt) }),
	one("doorbells_total", "Doorbells rung for applications waiting on completions.", ctr, func(s *st) float64 { return u(s.Doorbells) }),
	one("doorbells_deferred_total", "Doorbell rings held back by a portal's moderation or the engine's doorbell gap (rung later, or not at all when the application woke by itself).", ctr, func(s *st) float64 { return u(s.DoorbellsDeferred) }),
	one("delay_batches_total", "Delay-sample batches handed to the telemetry hook (and added to the delay histograms).", ctr, func(s *st) float64 { return u(s.DelayBatches) }),
	one("delay_samples_total", "Completions in those batches.", ctr, func(s *st) float64 { return u(s.DelaySamples) }),
	one("window_used_bytes", "Solicitation window bytes debited now.", gge, func(s *st) float64 { return u(s.WindowInUse) }),
	one("slots_in_use", "Command slots allocated to portals now.", gge, func(s *st) float64 { return u(s.SlotsInUse) }),
	one("ops_in_flight", "Ops posted and not completed now.", gge, func(s *st) float64 { return u(s.OpsInFlight) }),
	one("pulls_in_use", "WRITEs being served now (pull contexts held).", gge, func(s *st) float64 { return u(s.PullsInUse) }),
	one("request_queue_max", "Deepest inbound request queue seen since the engine started.", gge, func(s *st) float64 { return u(s.ReqQueueMax) }),
}

// loopFamilies are the poll loop's counters (ctlmsg.LoopStats).
var loopFamilies = []family[ctlmsg.LoopStats]{
	one("loop_iterations_total", "Passes of the poll loop.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.Iterations) }),
	one("loop_rx_frames_total", "Frames the poll loop received from the port.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.RxFrames) }),
	one("loop_idle_sleeps_total", "Backoff sleeps of an idle loop.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.IdleSleeps) }),
	one("loop_yields_total", "sched_yield calls of an idle loop (yield mode).", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.Yields) }),
	one("loop_slept_seconds_total", "Time the loop slept.", ctr, func(s *ctlmsg.LoopStats) float64 { return seconds(s.SleptNs) }),
	one("loop_execs_total", "Control-plane closures run on the loop (each scrape runs one).", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.Execs) }),
	one("loop_stalls_total", "Gaps between two iterations over the stall threshold: the loop could not run.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.Stalls) }),
	one("loop_stalled_seconds_total", "The stalls' total length.", ctr, func(s *ctlmsg.LoopStats) float64 { return seconds(s.StalledNs) }),
	one("loop_work_iterations_total", "Passes of the poll loop that did work.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.WorkIterations) }),
	one("loop_clock_reads_total", "Clock reads of the poll loop: one per pass, one more per sleep cut short.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.ClockReads) }),
	one("loop_woken_early_total", "Sleeps of the poll loop cut short (a control-plane call, stop, a signal).", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.WokenEarly) }),
	one("loop_crossings_total", "cgo calls of the port and the core in the poll loop's passes.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.Crossings) }),
	one("loop_crossings_max", "The most cgo calls of one pass of the poll loop (meant: at most 2).", gge, func(s *ctlmsg.LoopStats) float64 { return u(s.CrossingsMax) }),
	one("loop_crossings_over_total", "Passes of the poll loop with more than 2 cgo calls.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.CrossingsOver) }),
	by("loop_ring_looks_total", "Reads of portals' command rings by the poll loop: all, those that found nothing new, and of those the ones the summary doorbell asked for.", ctr, "result",
		sv("all", func(s *ctlmsg.LoopStats) float64 { return u(s.RingLooks) }),
		sv("idle", func(s *ctlmsg.LoopStats) float64 { return u(s.RingLooksIdle) }),
		sv("rung_idle", func(s *ctlmsg.LoopStats) float64 { return u(s.RingRungIdle) })),
	one("loop_ring_scans_total", "Fallback scans of every portal's command ring, whatever the summary doorbell says.", ctr, func(s *ctlmsg.LoopStats) float64 { return u(s.RingScans) }),
}

type ps = ctlmsg.PortStats

// portFamilies are the port's counters, the driver's and the device's
// (ctlmsg.PortStats), labelled port (its ethdev name) after core. On an
// engine of several cores each core's device counters are its queue
// pair's (its port_packets_total and port_bytes_total add up to the
// device's).
var portFamilies = []family[ps]{
	by("port_packets_total", "Packets the device received and sent (rte_eth_stats).", ctr, "dir",
		sv("rx", func(p *ps) float64 { return u(p.Dev.RxPackets) }),
		sv("tx", func(p *ps) float64 { return u(p.Dev.TxPackets) })),
	by("port_bytes_total", "Bytes the device received and sent.", ctr, "dir",
		sv("rx", func(p *ps) float64 { return u(p.Dev.RxBytes) }),
		sv("tx", func(p *ps) float64 { return u(p.Dev.TxBytes) })),
	by("port_errors_total", "Device receive and transmit errors.", ctr, "dir",
		sv("rx", func(p *ps) float64 { return u(p.Dev.RxErrors) }),
		sv("tx", func(p *ps) float64 { return u(p.Dev.TxErrors) })),
	by("port_dropped_total", "Frames the port dropped, by reason: the device's rx queue was full (rx_missed), no rx mbuf (rx_nombuf), the tx queue refused them after all retries, no free mbuf for a frame to send, a multi-segment frame received.", ctr, "reason",
		sv("rx_missed", func(p *ps) float64 { return u(p.Dev.RxMissed) }),
		sv("rx_nombuf", func(p *ps) float64 { return u(p.Dev.RxNoMbuf) }),
		sv("tx_refused", func(p *ps) float64 { return u(p.Driver.TxDropped) }),
		sv("tx_no_mbuf", func(p *ps) float64 { return u(p.Driver.TxNoBuffer) }),
		sv("rx_multi_segment", func(p *ps) float64 { return u(p.Driver.RxMultiSeg) })),
	by("port_driver_frames_total", "Frames the engine's port driver took from the rx queue and gave to the tx queue.", ctr, "dir",
		sv("rx", func(p *ps) float64 { return u(p.Driver.RxFrames) }),
		sv("tx", func(p *ps) float64 { return u(p.Driver.TxFrames) })),
	one("port_alloc_failures_total", "mbuf stash refills that fell short.", ctr, func(p *ps) float64 { return u(p.Driver.AllocFails) }),
	one("port_io_calls_total", "cgo crossings of the port driver.", ctr, func(p *ps) float64 { return u(p.Driver.IOCalls) }),
	one("port_tx_full_calls_total", "cgo crossings of the port driver in the middle of a pass of the poll loop: its frames filled a tx burst.", ctr, func(p *ps) float64 { return u(p.Driver.TxFullCalls) }),
	by("port_handover_frames_total", "Frames handed between the engine's cores (a port's queues cannot put a frame on its core's): out, received on this core's queue for another; in, taken from the others; full, lost to a full ring. An ARP frame counts once per core.", ctr, "dir",
		sv("out", func(p *ps) float64 { return u(p.Driver.HandedOut) }),
		sv("in", func(p *ps) float64 { return u(p.Driver.HandedIn) }),
		sv("full", func(p *ps) float64 { return u(p.Driver.HandOverFull) })),
}

type xs = ctlmsg.PortXDPStats

// xdpFamilies are an AF_XDP port's counters (ctlmsg.PortXDPStats),
// labelled port after core.
var xdpFamilies = []family[xs]{
	by("xdp_steered_total", "Frames the steering XDP program sent to the engine's sockets, to the kernel, and for the engine on a queue without a socket.", ctr, "to",
		sv("engine", func(x *xs) float64 { return u(x.Steer.ToEngine) }),
		sv("kernel", func(x *xs) float64 { return u(x.Steer.ToKernel) }),
		sv("no_socket", func(x *xs) float64 { return u(x.Steer.NoSocket) })),
	by("xdp_socket_events_total", "The kernel's AF_XDP socket counters (XDP_STATISTICS), summed over the port's sockets.", ctr, "event",
		sv("rx_dropped", func(x *xs) float64 { return u(x.Socket.RxDropped) }),
		sv("rx_invalid_descs", func(x *xs) float64 { return u(x.Socket.RxInvalidDescs) }),
		sv("tx_invalid_descs", func(x *xs) float64 { return u(x.Socket.TxInvalidDescs) }),
		sv("rx_ring_full", func(x *xs) float64 { return u(x.Socket.RxRingFull) }),
		sv("rx_fill_ring_empty_descs", func(x *xs) float64 { return u(x.Socket.RxFillRingEmptyDescs) }),
		sv("tx_ring_empty_descs", func(x *xs) float64 { return u(x.Socket.TxRingEmptyDescs) })),
}

// descs are every metric's description.
type descs struct {
	stats, loop, port, xdp []*prometheus.Desc

	up, completions                        *prometheus.Desc
	issueDelay, totalDelay, remoteDelay    *prometheus.Desc
	windowSize, slots, portals, portalsMax *prometheus.Desc
	regions, regionsMax                    *prometheus.Desc

	portalSlots, portalSlotsLimit, portalInFlight    *prometheus.Desc
	portalCmdDepth, portalCmdCap, portalCplDepth     *prometheus.Desc
	portalCplCap, portalRegions, portalRegionsLimit  *prometheus.Desc
	portalRegionBytes, portalRegionBytesLimit        *prometheus.Desc
	portalClosed                                     *prometheus.Desc
	uidPortals, uidSlots, uidRegions, uidRegionBytes *prometheus.Desc
	tenantUsage, tenantQuota, tenantGuarantee        *prometheus.Desc
	tenantDatapath                                   []*prometheus.Desc
}

// portalLabels label a portal's gauges after core.
var portalLabels = []string{"core", "portal", "name", "uid", "pid", "class", "tenant"}

func newDescs() descs {
	core := []string{"core"}
	d := func(name, help string, labels []string, more ...string) *prometheus.Desc {
		return prometheus.NewDesc("onerma_"+name, help, append(append([]string(nil), labels...), more...), nil)
	}
	delayHelp := func(what string) string {
		return "Delay of the core's ops, by op, from their completions: " + what + ". Buckets are powers of two of nanoseconds, the first 256 ns."
	}
	return descs{
		stats:          describe(statsFamilies),
		tenantDatapath: describeBy(tenantDatapathFamilies, "tenant"),
		loop:           describe(loopFamilies),
		port:           describe(portFamilies, "port"),
		xdp:            describe(xdpFamilies, "port"),

		up:          d("core_up", "1 if the engine core answered this scrape, 0 if its poll loop is not running.", core),
		completions: d("completions_total", "Completions written, by op and status as the abi names them (op OTHER: commands that named no valid op).", core, "op", "status"),
		issueDelay:  d("op_issue_delay_seconds", delayHelp("issue_delay, post to entering service"), core, "op"),
		totalDelay:  d("op_total_delay_seconds", delayHelp("total_delay, post to completion"), core, "op"),
		remoteDelay: d("op_remote_delay_seconds", delayHelp("total_delay - issue_delay, the fabric and the remote engine"), core, "op"),
		windowSize:  d("window_size_bytes", "Solicitation window size.", core),
		slots:       d("slots", "Command slots of the core (onerma_slots_in_use are allocated).", core),
		portals:     d("portals", "Open portals.", core),
		portalsMax:  d("portals_max", "Portals the core serves at once.", core),
		regions:     d("regions", "Registered regions.", core),
		regionsMax:  d("regions_max", "Region table size.", core),

		portalSlots:            d("portal_slots", "Command slots a portal holds.", portalLabels),
		portalSlotsLimit:       d("portal_slots_limit", "The most command slots the slot policy lets a portal hold.", portalLabels),
		portalInFlight:         d("portal_ops_in_flight", "A portal's ops posted whose completion it is still owed.", portalLabels),
		portalCmdDepth:         d("portal_command_ring_depth", "Commands in a portal's ring not yet taken by the engine.", portalLabels),
		portalCmdCap:           d("portal_command_ring_capacity", "A portal's command ring capacity.", portalLabels),
		portalCplDepth:         d("portal_completion_ring_depth", "Completions in a portal's ring its application has not consumed.", portalLabels),
		portalCplCap:           d("portal_completion_ring_capacity", "A portal's completion ring capacity.", portalLabels),
		portalRegions:          d("portal_regions", "Regions a portal has registered.", portalLabels),
		portalRegionsLimit:     d("portal_regions_limit", "The most regions a portal may register.", portalLabels),
		portalRegionBytes:      d("portal_region_bytes", "Bytes of a portal's registered regions.", portalLabels),
		portalRegionBytesLimit: d("portal_region_bytes_limit", "The most region bytes a portal may register.", portalLabels),
		portalClosed:           d("portal_closed", "1 if the engine closed the portal because its application corrupted its rings.", portalLabels),
		uidPortals:             d("uid_portals", "Open portals of a uid, over every core.", []string{"uid"}),
		uidSlots:               d("uid_slots", "Command slots held by a uid's portals.", []string{"uid"}),
		uidRegions:             d("uid_regions", "Regions registered by a uid's portals.", []string{"uid"}),
		uidRegionBytes:         d("uid_region_bytes", "Bytes of the regions registered by a uid's portals.", []string{"uid"}),
		tenantUsage:            d("tenant_usage", "What a tenant holds of a pool (control connections, portals, slots, region memory objects, bytes of memory or huge pages).", []string{"tenant", "resource"}),
		tenantQuota:            d("tenant_quota", "A tenant's quota of a pool: the most it may hold (0: none).", []string{"tenant", "resource"}),
		tenantGuarantee:        d("tenant_guarantee", "A tenant's guarantee of a pool: what it is given however much the other tenants hold.", []string{"tenant", "resource"}),
	}
}

// all are every description.
func (d *descs) all() []*prometheus.Desc {
	out := append(append(append(append(append([]*prometheus.Desc(nil), d.stats...), d.loop...), d.port...), d.xdp...), d.tenantDatapath...)
	return append(out, d.up, d.completions, d.issueDelay, d.totalDelay, d.remoteDelay,
		d.windowSize, d.slots, d.portals, d.portalsMax, d.regions, d.regionsMax,
		d.portalSlots, d.portalSlotsLimit, d.portalInFlight, d.portalCmdDepth, d.portalCmdCap,
		d.portalCplDepth, d.portalCplCap, d.portalRegions, d.portalRegionsLimit,
		d.portalRegionBytes, d.portalRegionBytesLimit, d.portalClosed,
		d.uidPortals, d.uidSlots, d.uidRegions, d.uidRegionBytes, d.tenantUsage, d.tenantQuota, d.tenantGuarantee)
}

type tdp = ctlmsg.TenantDatapath

// tenantDatapathFamilies are a tenant's counters in the data path
// (ctlmsg.TenantDatapath), summed over the cores, labelled with the
// tenant only. TestEveryTenantCounterExported keeps them in step with
// ctlmsg.TenantDatapath.
var tenantDatapathFamilies = []family[tdp]{
	one("tenant_ops_posted_total", "Ops a tenant's portals posted.", ctr, func(t *tdp) float64 { return u(t.Posted) }),
	one("tenant_share_waits_total", "A tenant's ops that waited for window while it was at its guaranteed share (their destination had not answered recently enough to borrow).", ctr, func(t *tdp) float64 { return u(t.ShareWaits) }),
	one("tenant_share_dispatch_timeouts_total", "A tenant's ops that ended DISPATCH_TIMEOUT not fitting in its share.", ctr, func(t *tdp) float64 { return u(t.ShareDispatchTimeouts) }),
	one("tenant_window_borrowed_total", "A tenant's ops that entered service beyond its share, toward destinations that answer.", ctr, func(t *tdp) float64 { return u(t.Borrowed) }),
	one("tenant_window_borrowed_bytes_total", "Window bytes a tenant's ops borrowed beyond its share.", ctr, func(t *tdp) float64 { return u(t.BorrowedBytes) }),
	one("tenant_window_held_bytes", "Window bytes a tenant's ops in service hold.", gge, func(t *tdp) float64 { return u(t.WindowHeld) }),
	one("tenant_window_share_bytes", "A tenant's guaranteed share of the window, summed over the cores it has portals on.", gge, func(t *tdp) float64 { return u(t.WindowShare) }),
	one("tenant_ops_queued", "A tenant's ops waiting for window.", gge, func(t *tdp) float64 { return u(t.Queued) }),
	one("tenant_requests_nacked_total", "Requests for a tenant's regions NACKed at once, their class queue at the NACK threshold.", ctr, func(t *tdp) float64 { return u(t.Nacked) }),
	one("tenant_requests_nacked_owner_total", "Requests for a tenant's regions NACKed at once, the tenant's regions holding their bound of queued requests.", ctr, func(t *tdp) float64 { return u(t.NackedOwner) }),
	one("tenant_requests_nacked_sender_total", "Requests for a tenant's regions NACKed at once, their sender holding its bound of queued requests.", ctr, func(t *tdp) float64 { return u(t.NackedSender) }),
	one("tenant_pulls_deferred_total", "WRITEs and REKEYs to a tenant's regions that waited for a pull context at the owner's or the sender's bound.", ctr, func(t *tdp) float64 { return u(t.PullsDeferred) }),
	one("tenant_requests_iv_mismatch_total", "Requests for a tenant's regions dropped, their IV naming another address than their source.", ctr, func(t *tdp) float64 { return u(t.IVMismatch) }),
	one("tenant_replay_lanes_refused_total", "Requests for a tenant's regions dropped, their sender holding its bound of replay lanes.", ctr, func(t *tdp) float64 { return u(t.ReplayLanesRefused) }),
	one("tenant_replay_evictions_total", "A tenant's replay windows forgotten to make room.", ctr, func(t *tdp) float64 { return u(t.ReplayEvictions) }),
	one("tenant_neighbor_refused_total", "A tenant's ops ended UNREACHABLE at once, it holding its bound of incomplete neighbour entries.", ctr, func(t *tdp) float64 { return u(t.NeighborRefused) }),
}
