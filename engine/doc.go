// Package engine is the sans-IO protocol core of the OneRMA soft NIC (the
// 1RMA NIC of Singhvi et al., SIGCOMM 2020, §3-§5): the command slot table
// (CST), the registered region table (RRT) with generations, the
// solicitation window with two FIFO arbiters, the bounded inbound request
// queue with its NACK threshold, DISPATCH_TIMEOUT and TIMEOUT, READ with
// out-of-order chunk placement tracked by a bitmap, ARP, ICMP echo and
// fragmentation needed, and completions carrying issue_delay and
// total_delay.
//
// The seam: a Core never does I/O, never reads a clock and never starts a
// goroutine. Its driver hands it
//
//	Receive(now, frame)  one received frame (borrowed for the call)
//	ReceiveBurst(now, frames)  a received burst, in order (opens batched with ipsec-mb;
//	                     short frames first while priority work is in progress)
//	Poll(now)            drain command rings, expire timers, arbitrate, serve,
//	                     pull, send WRITE data, publish completions
//
// and the Core writes outgoing frames into buffers it takes from a Tx the
// driver supplies (Tx.Buffer, Tx.Send). Commands and completions travel
// through abi rings whose memory the driver supplies (shared memory in rmad,
// plain slices in the simulator and tests). Three drivers run this same
// code: the DPDK poll loop (engine/runner + engine/port/dpdkport), the
// deterministic simulator (engine/sim) and unit tests.
//
// A Core is one engine core: single-goroutine. An engine of N cores (at
// most 64) is a Group (group.go): each core has its own partition of the
// slots (SlotBase + i*Slots), a full window, its own IV lane (its CoreID
// in the counters' top bits), UDP port for WRITE data (UDPPort+CoreID)
// and initiator ports (wire.InitiatorPort: 0xC000 | entropy<<6 | CoreID,
// a port per op for ECMP), so every frame names the core that must
// process it (Steer, steer.go). The cores share only the region table
// (regions.go: atomic descriptors, a quiescent point per Poll). The
// control plane (portals, slots, regions) is applied on a core's own
// goroutine between polls; nothing on the data path locks.
//
// Inside, a Core is a composition of parts that own their state: the
// initiator (initiator.go, initiator_rx.go, lists.go), the responder
// (responder.go, fairq.go, pull.go, replay.go, bounds.go), the portal table and its completions
// (portals.go), the region table (regions.go), the routing table
// (route.go), the neighbor table and ARP (neighbor.go), ICMP and the IPv4
// the engine does not take (icmp.go), the window and the class arbiter
// (arbiter.go), the tenants' shares of the window (shares.go, dests.go),
// the sender (sender.go) with its seal backend (sealer.go, seal_mb.go),
// an attached op source (source.go: the OpSource interface Poll calls;
// the generator itself, rmad -selftest's, is engine/opgen), and the
// generic ring they queue in (ring.go). core.go is the control plane and
// Poll; dispatch.go is the receive walk.
//
// # State (paper §4.3)
//
//   - CST: Config.Slots command slots per core. A slot is Free (in the
//     pool), Idle (owned by a portal), Queued (in an arbiter FIFO),
//     Resolving (waiting for ARP to resolve its next hop) or InService.
//     Global slot id = SlotBase + index, so the owning core of an answer is
//     known from its tag (slot << 32 | sequence) and from its UDP
//     destination port; the per-op sequence makes a late answer for an
//     earlier op on the same slot stale.
//   - RRT: one per engine, shared by its cores (regions.go). RegionID =
//     generation << 16 | index: deregistration frees the index, the next
//     registration there bumps the generation, so stale ids miss. The last
//     region to leave an index leaves a tombstone (its generation, K_r and
//     key epoch, no memory) until the next one leaves: a request for it
//     that authenticates with its key is answered REMOTE_REGION at once;
//     any other request for a region that is not live gets
//     REMOTE_AUTHENTICATION_FAILURE, so nobody without a key learns whether
//     a region exists.
//   - Solicitation window (arbiter.go): an op enters service only when
//     ArbitrationBytes (4 KB) are free, whatever its size, then debits the
//     bytes it solicits: a READ or LOOKUP its size, a WRITE 64 B (only the pull and
//     the acknowledgment come back). Completion, NACK, error and TIMEOUT
//     refund it. The serving side debits the same window when it pulls a
//     WRITE's data.
//   - Two FIFO arbiters (classArbiter): high class first; after HighBurst
//     consecutive high grants with a low op waiting, one low grant. A
//     portal's class is fixed at open, granted by the control server's
//     policy (engine/ctl), never by the portal's name.
//   - Tenants share the window (shares.go): each tenant with a portal on
//     the core (PortalSpec.Tenant, Weight) is guaranteed W × its weight /
//     the present tenants' weights (at least ArbitrationBytes). Ops wait
//     in a FIFO per tenant and class; a grant goes to tenants below their
//     share first, then to borrowing beyond it, and only toward
//     destinations that answered an op of the core within
//     Config.Responsive (a fixed table of Config.Destinations
//     destinations, least recently answered evicted: dests.go); in both
//     phases the class arbiter applies and a class's tenants take turns
//     by deficit round robin by weight, in bytes. Ops to a destination
//     that stops answering hold at most their tenant's share; a tenant
//     alone has the whole window, as before tenants. Per-tenant counters
//     (TenantCounters) say what its share delayed and what it borrowed.
//   - Inbound request queues, one per class (requests carry wire.FlagHigh,
//     authenticated with the header), served high first by the same
//     HighBurst rule. Within a class, requests wait in a FIFO per region
//     owner (the tenant of the region they name), and the owners take
//     turns by deficit round robin by the owner's weight, in bytes
//     (fairq.go): an owner whose queue was empty goes first with a
//     quantum, one owner alone is served FIFO with no turns, and a READ
//     partly streamed resumes before anything else of its class. So one
//     owner's backlog delays another owner's requests by about one turn
//     (4 KB at weight 1), not by the backlog. Each queue is bounded; a
//     request arriving when its class holds NackThreshold requests or
//     more, every owner's, gets an immediate NACK (paper §6.1;
//     DeriveNackThreshold is the paper's derivation, nack.go), and so
//     does one whose region's owner (its tenant), or whose source address
//     for that owner's regions, already has InboundPerOwner or
//     InboundPerSender requests queued (bounds.go: by default half the
//     threshold each, so neither one owner's traffic, from any addresses,
//     nor one initiator fills the queue for the rest). At
//     most ServeBudget requests are served per Poll; requests older than
//     TIMEOUT are dropped unserved. A Poll's frames are sealed, sent and
//     received together, so once a high-class frame has left in a Poll at
//     most LowAfterHigh low-class requests are served after it in that Poll
//     (0: no bound), unless the low class's turn comes by the HighBurst
//     rule or its oldest request has waited TIMEOUT/8: a high-class op then
//     crosses each hop behind about one low-class 4 KB READ's frames, not a
//     whole budget of them.
//   - Priority work and the bound on bulk work (bulk.go): an op of the
//     high class or of at most ShortBytes (256) is priority work, any
//     other is bulk. While the core has priority ops in flight or
//     priority requests queued, or saw one within Config.PriorityHold
//     (50 µs by default; Config.HighHold, 1 ms, after one of the high
//     class), each stage of a Poll that starts bulk work
//     (arbitrate's grants, serve's READ data, startPulls, the WRITE data
//     sent) starts at most Config.PollBytes of it (its first item always;
//     0: no bound, the default; rmad's is 4 KB), and ReceiveBurst takes a
//     burst's short frames first and publishes their completions before
//     it opens the bulk chunks. The rest waits for the next Poll, which
//     follows at once (Stats.BulkHeld counts what waited): a short op
//     waits about one or two 4 KB services of bulk work at each engine,
//     not a Poll of a window's or a ServeBudget's worth. A Poll that
//     begins with the bound off drains the rings that rang the summary
//     doorbell once more before it serves, and starts what it took: a
//     priority op posted during the Poll goes before the Poll's bulk work
//     and turns the bound on.
//   - Timers: intrusive lists ordered by time (all ops of a list share one
//     timeout), so an expiry check looks only at list heads.
//   - Exactly one completion per op: room in the completion ring is
//     reserved before a command is taken from the command ring; bad
//     commands complete at once with a precise status; a closed portal's
//     ops in flight are orphaned and free their slot and window when they
//     finish. Poll drains the portals' command rings starting from a
//     different portal each time, so no application's requests always reach
//     a busy server first.
//   - Summary doorbell (portals.go, abi.Summary): with one attached
//     (SetSummary), Poll takes its bits once and reads the command ring of
//     a portal that rings it (its segment's flag word, seen in a scan)
//     only when its bit was set, when its last read left commands behind,
//     and in a fallback scan of every live portal at the first Poll at or
//     after the last scan plus Config.SummaryScan; a portal that does not
//     ring is read in every Poll. Any tenant of the core may write the
//     summary: a stray bit costs one idle read, a cleared one delays the
//     portal's commands to the next scan, never longer. PathCounters count
//     the reads (RingLooks, RingLooksIdle, RingRungIdle) and the scans.
//
// # LOOKUP: two hops, one bucket scan and one hop (lookup.go)
//
// A READ whose range the serving core finds itself: the request names a
// bucket of a region registered with a bucket layout and a tag; the core
// scans the bucket for the first entry with the tag, follows its pointer
// once (into the region or its linked region, bounds checked), and
// streams the entry and the target like a READ's data, the answer's
// length in every chunk's header (wire Aux). The initiator debits the
// command's length, as for a READ, and completes with the answer's.
//
// # WRITE and REKEY: four hops (paper §5.1, §5.2)
//
// ① the write request (authenticated with the WRITE K_d), ② the serving
// core's pull when a pull context and window are free (a fresh IV, a
// handle, the server's TIMEOUT; curried with ①'s IV), ③ the data sealed
// straight from the source region and curried with ②'s IV, opened into the
// pull's staging buffer, ④ the acknowledgment after the commit: a copy from
// the staging buffer into the region, only when all of the data
// authenticated before the pull's deadline (pull.go, initiator_rx.go). The
// initiator resets its deadline on ② to the server's timeout counted from
// ②'s arrival, so it always times out last: a WRITE reported failed (any
// status, TIMEOUT included) never changes memory afterwards. Answers to ①
// (NACK, errors) are curried with ①'s IV and stop authenticating once the
// op was pulled. A serving engine killed during a commit's copy leaves that
// one range torn (old and new bytes); its WRITE ends TIMEOUT.
//
// WRITE and REKEY requests move from the inbound queues to per-class pull
// queues, so READs behind them are served while they wait for window; the
// pull queues' owners take turns as the inbound queues' do. Pulls
// live in a fixed table (Config.PullContexts, each with a 4 KB staging
// buffer) on two deadline-ordered lists: pulls awaiting their first chunk
// and pulls receiving data, both expiring at ② + TIMEOUT. A request that
// finds no context or window free first reclaims idle pulls older than
// PullIdleTimeout (TIMEOUT/4 by default), so a pull whose initiator does
// not answer holds what others need only that long. One region owner, and
// one sender to one owner's regions, holds at most PullsPerOwner
// (PullsPerSender) pulls at once (by default half of what the core can
// run): a write request beyond either waits while those behind it are
// pulled, and reclaims its owner's (sender's) idle pulls as a full pool
// does anyone's. Incomplete pulls expire
// silently. A pull whose data could not all be sent at once (no tx buffer)
// waits on a send queue drained in Poll. A remote REKEY takes the same
// hops: the pulled data is the new K_r, sealed under the REKEY K_d,
// installed at the commit, only while the region's key is still the one
// its request authenticated with (a local Rekey or another REKEY
// meanwhile: REMOTE_REGION, nothing installed; pull.go); its
// acknowledgment is sealed under the old K_d.
//
// # Seals and opens
//
// Seals run on Config.Crypto's backend, chosen once in New (sealer.go):
// "go" (crypto/cipher, one call per message: tests, the simulator) or
// "ipsec-mb" (seal_mb.go, rmad's default: seals queued in the core's
// aesni/mb Batch with the frame's tx buffer as output and region memory as
// plaintext, run before any of those frames is copied or transmitted: in
// the Tx's own crossing into C when it offers one (TxCHook, the DPDK
// port's poll step: seal and transmit are one cgo call, and Poll leaves
// the batch queued), else in one cgo call of its own (TxHook, and at the
// end of Poll); the rules are at sealer.go's TxHook and sealer.run). Opens:
// Receive and the self-loop prepare, open and finish each frame; with
// "ipsec-mb", ReceiveBurst queues a burst's opens in a second Batch, runs
// it once and finishes the frames in order, with the same counters,
// completions and frames as frame by frame (while the bulk bound is on, a
// burst of short frames and bulk chunks is taken in two passes: the short
// frames opened one by one with package aesni, no cgo call, then the bulk
// chunks as one batch, so a poll loop still crosses at most twice). The batch is ended early (and
// the frame prepared again) before a frame whose destination units, slot
// answer or pull have an open pending (duplicates, a forgery next to its
// genuine chunk), before a remote REKEY's data (opened alone: its commit
// changes the keys later requests are checked against), before a frame
// whose AEAD left its cache, and before ARP and ICMP (they answer at once);
// finish re-validates the slot's sequence and the pull's generation.
// PathCounters count the core's own cgo calls (the batches it runs
// itself) and the seal batches run in the Tx's crossing: a poll loop on a
// DPDK port crosses at most twice per iteration, once for its poll step
// (seals, tx, rx) and once for the opens of the burst received
// (engine/runner: Stats.Crossings).
//
// # Keys, IVs and replays
//
// Each core owns an aesni.IVLane drawn from the engine's durable IVSource:
// the lane holds only its current range and takes the next one from what
// the source has already reserved, with a compare-and-swap, so a draw never
// locks, waits or does I/O; a draw that finds nothing reserved fails at
// once (IVErrors: the message is not sent). The core keeps two caches of
// prepared AEADs: the initiating side's, keyed by remote region, address,
// identity and op and checked against the command's key bytes, and the
// serving side's, keyed by region, initiator, identity and op and
// invalidated on rekey and deregistration; and the reserved key's AEAD for
// REMOTE_AUTHENTICATION_FAILURE. The serving side keeps an anti-replay
// window per region owner, sender address and IV lane (replay.go: the
// highest request counter accepted and a bitmap of the 65,536 below it,
// in a fixed open-addressed table of ReplayPeers entries, each owner
// guaranteed its share, least recently active evicted among an owner's
// own); an authenticated request whose counter was seen is dropped before
// it is queued, and a request whose IV address is not its source address
// before it is authenticated. SECURITY.md has the threat model.
//
// # Engines of several cores
//
// Each core of a Group has a full Slots partition and a full WindowBytes:
// the window bounds the bytes a core has solicited, which land in its own
// rx queue and are opened by it alone, so a portal on a many-core engine
// gets what it gets on one core (the fabric's share is the congestion
// control's). A portal is bound to one core.
//
// Steer (steer.go) names the core of every frame with a few loads and no
// allocation: answers, READ data and pulls by their initiator port
// (wire.PortCore), WRITE data by UDPPort + core, requests by a hash of the
// sender's address and IV lane (so all requests of one sender lane, and its
// replay window, live on one core), ARP to every core (SteerAll: each takes
// only replies to its own requests; core 0 alone answers requests for the
// engine's address), ICMP and junk to the receiving core (SteerLocal). A
// port that cannot steer hands frames over (engine/port/dpdkport), through
// the one port.Steering the ports and the simulator share (engine/port).
//
// IV lanes: every core draws from its own lane of the engine's one IVSource
// and sets its CoreID in the counters' top six bits (a counter at or past
// 2^58 is refused as exhausted), so IVs stay unique across restarts
// whatever the number or list of cores. A one-core engine sends the same
// counters as before cores existed.
//
// Shared regions and quiescence: a region is registered once, by its
// portal's core, and served by every core. Each RRT entry is an atomic
// pointer to an immutable descriptor (memory, permissions, owner,
// generation, K_r and key epoch); a lookup is one atomic load. A rekey
// publishes a copy with a new K_r and epoch by compare-and-swap; each core
// caches its K_d per region index and key epoch, so a new key is in force
// on every core from its publication on, without a wait. Deregistration
// swaps the entry to nil. Memory is freed only after every core has passed
// a quiescent point: at the start of every Poll a core compares the table's
// version with the one it synced to and, when it changed, runs its queued
// seals, unregisters the memory of regions that left from its seal backend,
// and publishes the version (Group.Quiesced). The control server waits for
// every core before it unmaps anything (Group.Quiesce in an Exec closure
// for cores not there yet). Concurrent WRITEs to overlapping bytes from
// different initiators are unordered, as in 1RMA and RDMA; on several cores
// they may commit at once.
//
// Tests: group_test.go runs engines of several cores over a switch that
// lands frames on random rx cores; group_live_test.go drives each core from
// its own goroutine while regions are registered, rekeyed and deregistered
// under load (-race); engine/port/memport.Steered loops a group back
// through a steering NIC for engine/ctl, portal and internal/enginetest;
// engine/sim's multicore scenarios check every invariant per core and per
// node.
//
// # Frames to itself
//
// An op aimed at the engine's own address sends frames to its own MAC. A
// switch does not send a frame back out of the port it came in on, so by
// default the core loops such frames back itself, through a fixed ring of
// frame copies processed inside Poll. Config.HairpinSelf sends them out of
// the port instead, for ports that reflect them (a net_ring loopback, which
// measures one core's full cost per op including port I/O).
//
// # Routing and neighbors
//
// The core routes like a host (route.go): Config.Subnet, Config.Gateway and
// Config.Routes make a fixed table, built in New, longest prefix first
// (MaxRoutes static routes plus the subnet and the default route, scanned
// per op, no allocation). An op's destination gives its next hop (itself
// on-link, else the route's gateway) and its chunk size (the route's MTU,
// else the port's); no match is UNREACHABLE at once. Without Subnet every
// destination is on-link. The serving side never routes: it answers to the
// MAC a request came from and uses the table only for the chunk size of the
// READ data it streams back. Neighbor entries (neighbor.go) age
// (NeighborReachable): confirmed by a reply to the core's own request, re-
// asked by the first op that uses one past 3/4 of that time, expired when
// no reply came; ops waiting on the resolving list wait on their next hop,
// and end UNREACHABLE after ResolveTimeout. A MAC is taken only from a
// reply to an outstanding request of ours (SECURITY.md). An incomplete
// entry of an on-link destination is charged to the tenant whose op made
// it, at most NeighborsPerTenant at once; the engine's ARP requests, all
// cores together, stay within ARPRate and ARPBurst (a word the Group's
// cores share, touched only to send a request). Every frame of an op
// carries the DSCP of its class (Config.DSCP).
//
// # Cost accounting
//
// A core given a stage.Stages (SetStages, engine/stage; rmad -selftest
// -profile) marks the boundaries between the stages of its data path on
// it, per burst and per Poll phase (stages.go lists them; engine/stage
// says which code each stage covers), reading a counter its driver
// injected: the core itself reads no clock. Without one every boundary
// costs a nil check, and the simulator's cores have none.
//
// Imports: abi, wire, aesni (aesni/mb in cgo builds on linux/amd64),
// engine/telemetry and engine/stage. It must never import dpdk.
package engine
