// Package sim is OneRMA's deterministic network simulator: it runs many
// real engine.Core instances (the sans-IO protocol core the DPDK poll loop
// runs, not a model of it) on a virtual clock, in one goroutine, with every
// fault derived from a seed, and checks the system's invariants at every
// step (TigerBeetle's simulator/VOPR, gVisor's link/channel + faketime).
//
// # What runs
//
//	app ──cmd ring──▶ Core ──Tx──▶ uplink ─▶ switch ─▶ downlink ──▶ rx ring ──Receive──▶ Core
//	app ◀──cpl ring── Core                 (faults per copy)
//
// Each node is one engine, of one Core (or of several: below, Engines of
// several cores), with an IPv4 address 10.0.x.y and a
// MAC 02:00:00:00:x:y, its own volatile IV source
// (aesni.NewVolatileIVSource; small Block/Span in some seeds, so lanes
// refill often) and a key-cache hash seed fixed from the run's seed (and
// key caches of 1 to 4096 entries, so small ones evict all the time). Its
// application opens portals on the core exactly as the portal library
// does over shared memory, but in plain (64-byte aligned) Go memory:
// abi.NewLayout, an abi.Producer on the command ring, an abi.Consumer on
// the completion ring, Core.AllocSlots, Core.RegisterRegion for four
// regions, each with its own region key K_r drawn from the seed: a
// remote-readable region filled with a deterministic pattern, a sink
// filled with poison (one area per slot), a remote-writable region (also
// remote-readable: the target of other nodes' writes and of reads) and a
// write source (local-read only, poison, one area per slot). It posts
// READs and, with probability App.WriteFrac (20-50% per seed), WRITEs of
// random sizes and offsets to random remote regions, with probability
// App.RekeyFrac (1-3% per seed) remote REKEYs (see Remote REKEYs), plus
// commands of every type with exactly one thing wrong (out of bounds locally or
// remotely, offsets that wrap, another portal's or a stale region, a
// region without the permission, length 0 or above 4 KB, an unknown op
// code, a slot that is not its own or is busy, an address nobody has, a
// wrong key).
//
// # Keys (paper §4.2)
//
// The region directory every application reads holds each region's keys:
// every K_r it ever had, when the owner installed it, and when each node
// learns it. A command carries K_d = aesni.DeriveKey(K_r, the poster's
// IPv4 address, its portal's PID, READ or WRITE) for the newest K_r the
// poster knows (REKEY for a remote REKEY). A fraction (App.WrongKeyRate) of the ops carry a wrong
// K_d instead: a random key, the K_d of another initiator (another PID, or
// another node's address) or of another op type (a READ's K_d on a
// WRITE, a WRITE's on a READ, REKEY's, 0, 0xff). Fault "rekey"
// (Faults.Rekeys): at a random time an owner replaces one of its regions'
// K_r (Core.Rekey; a Rekey by another portal or of a deregistered region
// must be refused first; remote-writable regions are rekeyed most); the
// other nodes learn the new key within Faults.KeyDelayNs, and their ops
// posted before that carry a K_d of the old key (stale-key ops). A command naming a region the server does not
// have (unknown, stale generation) cannot authenticate either: the server
// has no K_r for it.
//
// The fabric is one switch. A frame a core sends is checked (well formed,
// from the node's own addresses, within the MTU, to the MAC of the node
// that owns the destination IP; its nonce is the sender's address and a
// counter > 0 the sender never used before), copied into a pooled sim-owned buffer,
// serialised on the sender's uplink (bounded queue), forwarded (broadcast
// to every other node, unicast by MAC), serialised on the receiver's
// downlink (bounded queue: incast drops) and put in the receiver's bounded
// rx ring. Per delivered copy the fabric may drop, duplicate, delay
// (jitter, reordering, or straggling past TIMEOUT so a response lands after
// its op failed and its slot was reused) or corrupt it. Corruption flips 1-3 bits or one
// burst of up to 4 bytes after the Ethernet header of an IPv4 frame. The
// fabric holds no keys and checks only structure: detecting damage is the
// receiving core's job, by AES-GCM (a damaged answer fails authentication
// and is dropped, Stats.RxAuthFailed; a damaged request is answered
// REMOTE_AUTHENTICATION_FAILURE, Stats.ReqAuthFailed, sent to the source
// the request claims, which may be an address nobody has). Every byte a
// core uses is covered by the tag or checked by wire.Decode; the rest
// (TOS, ID, checksums, a TTL other than 0) it ignores. (Ethernet headers and ARP are left
// alone: a real link's FCS protects them; TestCorruptionIsDetectable
// checks the claim with real seals.) Links go down and up; cores
// stall (not polled: a descheduled thread), and at its next step a
// stalled core is told the stall's length (Core.Stalled), as engine/runner
// does; Tx.Buffer sometimes has no buffer. The switch does not hairpin (a frame to its sender's own MAC is
// dropped), like real switches and bridges.
//
// # The driver loop
//
// Time is int64 nanoseconds, starting at a seed-dependent nonzero value.
// Each iteration advances to the earliest of: the next event (a frame
// reaching the switch or a node, an application tick, a fault) and each
// core's next run time. A core runs when it has received frames, when its
// application published commands, when its last step did work, or at its
// NextDeadline(). A step is one poll-loop iteration: Receive for a burst of
// up to 32 frames, one Poll, then the application reads its completions.
// A step costs virtual CPU time (per frame received, per frame sent, per
// poll), so a core serves at a finite rate and a server can be overloaded.
// Ties are broken by scheduling order: a seed and a Config reproduce a run
// exactly (Result.Digest folds every event; TestDeterminism checks it).
//
// # Invariants
//
// After every call into a core: Audit() is nil; window in use within
// WindowBytes; slots in use within the partition; Stats.OpsInFlight equals
// InFlight(); TxFrames and RxFrames equal what the simulator saw; the
// completion counters add up to the completions the applications read
// (summed over a node's cores, as are commits and REKEY installs; the
// shared region table's books audit clean).
// For every op posted: exactly one completion, on the portal that posted
// it, naming its slot and cookie, within its bound (the next poll for local
// errors; DISPATCH_TIMEOUT + TIMEOUT, plus the resolve timeout when ARP is
// involved, for the rest; plus CPU and stall slack); its status the
// precise one for a bad command, OK for a valid op on a clean network (or
// NACK / TIMEOUT / DISPATCH_TIMEOUT / UNREACHABLE where the scenario allows
// failures); no DISPATCH_TIMEOUT or TIMEOUT before its time; delays
// consistent.
//
// REMOTE_AUTHENTICATION_FAILURE: a read with a wrong key, a stale-key read
// and a read of a region the server does not have must get exactly it (or,
// under faults, TIMEOUT / DISPATCH_TIMEOUT / UNREACHABLE: never OK, NACK or
// another remote status, which all need an authenticated request) and
// leave its sink untouched. Another op may get it only when its key stopped
// opening before it completed (its region was rekeyed or deregistered
// meanwhile) or the fabric damaged a copy of its request (the fabric tags
// each request with its op): ops on other regions never see it. A read
// posted with the then-current key may still end OK after a rekey (its
// request was authenticated and queued before). Stats.Rekeys counts the
// application's rekeys plus the remote REKEYs installed (Stats.RemoteRekeys
// equals the installs seen); Stats.IVErrors stays 0; Stats.RxAuthFailed stays 0
// until the fabric has damaged or forged a frame (a genuine answer always
// opens, but for answers to a WRITE's request after its pull: see Writes). The corrupt scenario must show RxAuthFailed, ReqAuthFailed and
// damaged requests answered REMOTE_AUTHENTICATION_FAILURE.
//
// An OK read's bytes equal the remote pattern exactly; a failed read's
// bytes are each either the right byte or untouched, or zero once its node
// dropped an answer that failed authentication (the core opens a chunk
// straight into the sink and zeroes it on a tag mismatch:
// Config.StrictFailedSink forbids that, TestStrictFailedSink);
// nothing outside an op's range is written, and an idle slot's area stays untouched (no
// late response lands after its op completed). A portal closed mid-run (an
// application crash) gets no completion afterwards and its memory is never
// written again; a deregistered region is never served again (its memory is
// scribbled: serving it would fail the data check). At the end, after a
// drain and a grace period (or after Core.Shutdown): no op outstanding,
// window 0, no op in flight, the slots in use exactly those the live
// portals hold; after closing every portal, 0 slots in use. Scenarios built
// to exercise a mechanism (NACK, DISPATCH_TIMEOUT, TIMEOUT) fail unless it
// fired. A violation stops the run with a Failure naming the seed. Upper
// bounds on TIMEOUT and DISPATCH_TIMEOUT catch timers that fire late, and
// an UNREACHABLE for a node that exists must have waited ResolveTimeout.
//
// The checker is checked too: TestSimCatchesForgedData alters responses
// and reseals them as a holder of the K_d would (the simulator knows every
// K_r and the IV of every request) and expects the data invariant to fire.
// TestSimCatchesForgedWrite does the same to a WRITE's data (with the
// pull's IV), TestSimCatchesStrayWrite changes a byte of a remote-writable
// region behind the engine's back, and TestSimCatchesEarlyWriteTimeout
// forges a pull whose timeout is shorter than the server's: the pull check
// fires, and without it the commit check (a commit after the initiator
// reported TIMEOUT).
//
// # Writes
//
// A WRITE is four hops (engine/pull.go): ① request, ② the serving core's
// pull when its window and a pull context allow (it carries the server's
// timeout, which the initiator adopts from ②'s arrival), ③ the data,
// sealed from the source, ④ the acknowledgment after the commit (a copy
// from the pull's staging buffer into the region, only when all the data
// authenticated before the pull's deadline).
//
// Workload. Writes go to the remote-writable regions of other nodes (4 to
// 16 KB, so concurrent writes of up to 4 KB overlap often; never to the
// poster's own node: the core loops those frames inside, where the
// simulator cannot see ④). Overlap is not restricted: several writers may
// write overlapping ranges at once. Every WRITE has a stamp of its own (a
// pattern id): byte j of the target becomes patByte(stamp, j), and the
// application stages exactly those bytes in its slot's area of its write
// source before posting (the rest of the source stays poison). Bad
// commands of every kind are WRITEs too (a local region without
// PermLocalRead is the sink; a remote one without PermRemoteWrite is a
// pattern region or a sink).
//
// Commits are seen, not guessed. The serving core commits and sends ④ in
// the same call (it commits only with a tx buffer for ④), so the
// simulator sees each commit in Tx.Send of the ④, names its WRITE by
// initiator and tag (recorded when ① was sent; kept after the completion)
// and checks it there: the WRITE is a valid one, not committed before,
// not completed yet, into a live region of that node; its range holds
// exactly its stamp bytes; and the whole region equals the model: a
// shadow copy of each remote-writable region (its initial pattern, then
// every commit seen, in order). Stats.WritesCommitted must equal the
// commits seen (no commit without ④). Because the model follows the
// commits in their real order, overlapping concurrent writes are checked
// exactly.
//
// Completions. Exactly one per WRITE (as for reads). OK only if its commit
// was seen and its core accepted a pull; TIMEOUT whether or not (an ④
// lost: Result.TimeoutCommitted); any other status (NACK, REMOTE_*,
// DISPATCH_TIMEOUT, local errors, UNREACHABLE, ABORTED) only if it was
// never committed; and no commit may come after any completion (a WRITE
// reported failed never changes memory afterwards). Orphans (the writer's
// portal closed) have no completion and may still commit, with their
// exact data. At every completion the target region equals the model.
// TIMEOUT bounds: without an accepted pull, the initiator's own Timeout
// from issue; with one (the simulator hands each pull to the core and
// sees whether it was accepted: no refusal counter moved), the pull must
// carry its server's Timeout, and the TIMEOUT must come no earlier than
// that long after the pull's arrival (the server gave up first) and no
// later than that plus slack. Core.Shutdown completes a WRITE whose data
// was all sent TIMEOUT at once. The op's overall bound is DISPATCH_TIMEOUT
// + its Timeout + the largest server Timeout.
//
// Reads of written regions. A READ is not atomic against WRITEs (nor is
// it in RDMA): the server seals each response chunk straight from region
// memory, so one read may show different writes in different chunks. A
// valid READ of a remote-writable region records, when posted, the
// model's bytes of its range and the region's commit count; at completion
// every chunk of an OK read (chunk boundaries: multiples of the MTU's
// payload from the op's start) must equal one version of the range: that
// snapshot, or it after some prefix of the commits into the range since
// (Result.ReadsMixed counts reads whose chunks show different versions).
// A failed read's bytes must each belong to some version, or be untouched
// (or zero, as above).
//
// Write sources. An idle slot's source area is poison; at a WRITE's
// completion its staged bytes are unchanged (the engine only reads a
// source) and the rest of the area is poison. Deregistered and closed
// write sources are poisoned (so data sent from them would fail the
// commit check) and must stay so.
//
// Faults specific to writes: churn deregisters a remote-writable region
// while writes to it are in flight (REMOTE_REGION when the data arrives,
// REMOTE_AUTHENTICATION_FAILURE when the request does, nothing
// committed: its memory is scribbled) or a write source (LOCAL_REGION
// when the pull comes; a write whose data was all sent may still be OK);
// crashes close portals whose regions are targets, and orphan writes;
// rekeys of remote-writable regions make stale-key writes (a write
// authenticated before the rekey may still commit); duplicated requests
// make the server pull twice (the initiator answers one pull; the other
// expires: Stats.PullsExpired), and genuine answers to a duplicated
// request that arrive after the pull fail authentication (counted apart,
// so that Stats.RxAuthFailed still needs a damaged frame otherwise).
// Base configurations draw PullContexts from 1 to 128, so write requests
// wait for a context; Clean gives every node room for a pull of every slot.
//
// Window and pulls. Audit (which includes the pull contexts' window
// debits) runs after every call into a core; PullsInUse stays within
// PullContexts and PullsInUse + PullsExpired + WritesCommitted within
// PullsIssued; at the end, and after closing every portal, PullsInUse and
// WindowInUse are 0.
//
// Config.VaryTimeouts gives nodes different Timeouts (1, 1.5 or 2 times
// the template's), so a pull brings a timeout longer or shorter than the
// initiator's own (a third of the seeds).
//
// # Remote REKEYs
//
// A remote REKEY (paper §5.2; engine/pull.go) takes a WRITE's four hops
// and is tracked like one (its request by tag, the pull its core
// accepted, its commit at ④): ③ carries the new K_r sealed under
// K_d(REKEY), and the commit installs it (the responder's installKey) and sends ④ in
// the same call.
//
// Workload. Every other remote-readable or remote-writable region (by
// pattern id: a new portal's two get consecutive ids, so one of them)
// allows PermRemoteRekey. A REKEY targets a live region with it on
// another server node (never its own: looped frames show no ④); its new
// K_r is drawn from the key stream and staged at its local offset in its
// slot's area of the write source (the engine copies it when it takes the
// command); its remote offset is arbitrary (the engine ignores it, even
// far out of bounds); its K_d is derived for abi.OpRekey from the newest
// K_r the poster knows. Bad REKEYs: a region without PermRemoteRekey
// (one valid REKEY in six becomes one: REMOTE_PERMISSION), wrong keys
// (another op type's K_d among them), stale keys, a stale remote region,
// local defects, bad slots, an unknown address, and a length other than
// 16 (BAD_COMMAND, before TOO_LARGE). Result.RekeyOps, RekeyKinds and
// RekeyStatus count them apart from READs and WRITEs.
//
// Installs are seen, not guessed. At the ④ of a REKEY the simulator
// checks: a valid REKEY, not installed before, not completed yet (a REKEY
// reported failed never takes effect afterwards), into a live region of
// that node that allows it, whose current key is still the one the
// REKEY's K_d was derived from (a REKEY installs only under the key it
// was asked under: never after its owner's Rekey or another REKEY's
// install, however its frames were delayed; one that lost that race ends
// REMOTE_REGION). Then the region directory gets the new K_r as
// the region's current key from that virtual time: the owner knows it at
// once, every other node (the poster too: it learns of the install like
// everyone else) within Faults.KeyDelayNs, as for Core.Rekey. So later
// READs, WRITEs and REKEYs with a K_d of an older key are stale-key ops
// (REMOTE_AUTHENTICATION_FAILURE), ops in flight with the old key may get
// it, and ops with the new key must authenticate: on a clean network
// they end OK, which checks that the core installed exactly the staged
// key. Completions follow the WRITE rules: exactly one; OK only after an
// install seen (and a pull accepted); any status but OK and TIMEOUT only
// without one; TIMEOUT either way (Result.TimeoutRekeyed), bounded by the
// pull's server timeout as for writes. Stats.RemoteRekeys equals the
// installs seen on every node; the staged key in the source area is
// unchanged at the completion. Orphan REKEYs may still install
// (Result.OrphanRekeys). rekey_test.go holds scripted cases (an install
// then old- and new-key reads, a stale-key REKEY, REMOTE_PERMISSION; a
// lost ④: TIMEOUT but installed; a lost ③: TIMEOUT, nothing installed).
//
// # Engines of several cores
//
// Config.Cores gives every node (CoresVary: each its own count, from 1) an
// engine of up to 4 polling cores (engine.NewGroup, core.go), each a
// virtual CPU of its own with its rx queue and Tx. A frame reaching the
// node lands on one core's rx queue, by a hash of its addresses and UDP
// ports (RSS) or, with probability Net.RxRandom, at random (the kernel
// moved the flow); that core steers it (engine.Steer, through the
// port.Steering of engine/port) and hands it to its core's bounded
// hand-over ring (NetStats.HandedOver, HandoverDrops), ARP to every core.
// Portals are bound to the core with the fewest, or to any (as an
// application may ask). Every invariant holds per core (audit, window,
// slots, frames, pulls: a WRITE's data comes back to the core that pulled
// it) and per node (commits, installs, completions, the shared region
// table's books); each core's IV counters carry its id in their top bits
// and no counter repeats on a node. A rekey must be refused through a
// core other than the region's portal's.
// Result.CrossCore counts READ data served from a region a portal of
// another core registered. On every node, of one core or several, no READ
// request is served twice (its answer's counters come from one range): a
// duplicate, landing on any rx queue, must be caught by the one replay
// window of its sender lane. TestSimCatchesUnsteeredFrames checks that
// cores which skip the hand-over fail the run. The scenarios multicore (Mixed's faults) and
// multicore-clean (Clean's strictness) always run engines of 2-4 cores;
// their draws come from streams of their own (Sim.mcRng), so one-core
// runs draw exactly what they drew before.
//
// # Tenants' shares of the window
//
// The scenarios tenant-shares and tenant-shares-weighted (shares.go) run
// flow applications instead of the random workload: three tenants of
// one client engine, one reading from a node whose link is down the
// whole run (FlowExperiment.Silent), one saturating a live server, one
// light, each a portal of its own tenant and weight (FlowSpec.Tenant,
// Weight, High). Checked at every step of the client's core: the dead
// destination's tenant holds at most its guaranteed share (the
// simulator's own count of its requests in service, equal to the
// engine's TenantCounters), the light tenant's ops enter service within
// ShareCheck.LightBoundNs and all end OK, and no window is left free
// after a Poll while a tenant has an op queued that could enter (unless
// that Poll held bulk work back for the next: engine.Config.PollBytes).
//
// # Isolation by construction
//
// isolation_test.go measures a high-class 64 B READ, one at a time, beside
// a low-class transfer that keeps the window full of 4 KB READs, and
// beside a hostile tenant whose share of the window, in flight toward a
// dead node, times out in one lump, and a low-class 64 B READ of its own
// tenant's object (FlowSpec.ServerTenant) beside another tenant's
// transfer; the engines' cost is mostly per byte
// sent (CostConfig.TxBytePs), as a seal's is. With engine.Config.PollBytes
// every short op after the first two takes at most its idle time plus two
// 4 KB READs' service; without it the worst takes more than ten.
// TestPollBytesSeeds runs every scenario with the bound (from one byte to
// 64 KB, by seed) and checks every invariant.
//
// # A hostile initiator
//
// Scenario hostile-initiator (hostile.go) puts an attacker on the fabric:
// a tenant of the server node (node 0) with a remote-writable region of
// its own there, whose K_r it holds, so that it derives K_d for any
// source address. It injects raw frames at the switch (checkTx lets the
// server answer its phantom sources, 10.1.x.y, at its MAC, which no node
// has) and takes the frames sent to that MAC, and in bursts past the
// server's NACK threshold it floods the inbound queue with requests for
// its own region, keeps Hostile.Large 4 KB READs of it outstanding (a
// backlog queued at the server), holds pull contexts with WRITEs whose
// pulls it answers with one chunk (then never again) or not at all,
// pushes the victims' replay windows (requests as a victim, its address
// in the IV and as the source, counters far ahead on its lane), forges IV
// addresses, and mints lanes. The victims, the other nodes' applications,
// read and write the server's regions of another tenant (App.Tenant) in a
// strict run: every valid op completes OK within TIMEOUT
// (Config.OpBoundNs), none NACKed; a victim's READ that finds no request
// of its owner of its class waiting on its core goes ahead of the
// attacker's backlog (engine/fairq.go): at most 8 KB of the attacker's
// READ data of its class (the rest of its turn, one READ partly sent)
// leaves that core before the READ's first answer (HostileStats
// LoneReads, LoneBehindBytes); at the end the server's TenantCounters
// show nothing refused to the victims' owner, and each attack refused to
// the attacker's (its flood NACKed at its owner's bound, its writes
// deferred behind its bound of pulls, every forged IV dropped, lanes
// refused, its own windows evicted). The server runs its default bounds (engine
// Config.ServingBounds); TestHostileInitiatorNeedsBounds runs it without
// them and expects the victims' ops to fail.
//
// # LOOKUPs
//
// Scenario lookup (lookup.go) gives every portal an index (buckets of a
// bucket layout, PermRemoteLookup) linked to a slab, and its owner changes
// one entry of one bucket at every tick, RCU-style: a new record in a free
// slab area, then the entry switched to it (or removed); an area is
// written again only a grace period longer than any op's life after its
// entry left it. Every state of every bucket is kept with when it held.
// The applications post LOOKUPs (App.LookupFrac) of the other nodes'
// buckets, of tags they hold or not, some asking for the bucket on a miss,
// some with a length the answer may not fit, some with a wrong key (a
// READ's K_d among them), under loss, duplication, reordering, stragglers,
// flaps, stalls, application crashes, rekeys of the indexes and engine
// restarts. The invariant: an answer is of one state of the index and slab, never a
// mix: an OK LOOKUP's entry is the first with its tag in a state its
// bucket held while the op was in flight, and its target is exactly that
// entry's record; REMOTE_NOT_FOUND needs a state without the tag (with
// the bucket in the sink: that state's bytes), REMOTE_LOOKUP_TOO_LARGE one
// whose answer exceeds the op's length; anything else but the network's
// and the region's failures is a violation.
//
// # Engine restarts
//
// Fault "restart" (Faults.EngineRestarts; restart.go): at a random time
// of the posting phase a node's engine dies and a new one starts, as rmad
// killed and restarted. Every core of the node is replaced by a fresh
// engine.Core built from the node's engine config: no region, portal,
// slot, key, replay window, sender state or learnt neighbour survives
// (static neighbours come back from the config). The node's IV source
// does, as a real engine reopens its state file: no counter repeats
// (the per-node nonce check spans the restart) and the other nodes'
// replay windows must accept the new engine's frames. The new engine's
// slots start above the old engine's, so the tags of its requests are
// new. The application sees the engine go as the portal library does:
// the completions already written, then exactly one ENGINE_GONE for every
// other op it posted (a READ's or LOOKUP's sink undefined; a WRITE or
// REKEY may still be committed, like an orphan); its portals are closed
// and their memory must never be written again. Within 200 µs it
// redials: a new portal for each, slots, its regions registered again
// (new keys; the new engine's region ids often equal the old engine's)
// with their contents copied over (pattern, remote-writable bytes, an
// index's buckets and slab: the index's model goes on from its last
// state). The directory lists the new regions for each other node from
// when it learns of them (within Faults.KeyDelayNs) and the old ones
// until then: ops posted to an old region are stale-key ops, which must
// end REMOTE_AUTHENTICATION_FAILURE (or a network failure), and ops in
// flight at the restart may end so too, or TIMEOUT, never REMOTE_REGION.
// A node that sends any answer but REMOTE_AUTHENTICATION_FAILURE to a
// request naming a region of its engine before the current one fails the
// run (the new engine cannot have authenticated it: a region that took
// the old id has another key). The node's checks restart with its cores
// (Result.Retired keeps the dead cores' counters). Scenario lookup
// restarts one or two engines per run. TestEngineRestart scripts one;
// TestSimCatchesRestartKeyReuse checks the checker (an application that
// registers its regions again under their old keys).
//
// # Scripted repros
//
// Tests in this package can replace the random applications by scripts
// (ops posted at fixed times; stalls, crashes, rekeys; a hook that damages
// chosen frames) and keep every invariant. The TestCoreBug* tests are
// regression tests, each a minimal scripted repro of a core bug.
// TestStrictFailedSink (skipped unless -sim.bugs) holds failed reads to a
// stricter sink contract than the core's documented one, which the core
// does not meet (it zeroes a chunk that fails authentication).
// write_test.go holds the scripted WRITE cases (refusals, a target or
// source deregistered in flight, lost data, a lost acknowledgment,
// orphans, duplicates).
//
// # Running
//
//	go test ./engine/sim                                  # a few seeds per scenario
//	go test ./engine/sim -run TestSimSeeds -sim.seeds=5000  # thousands
//	go test ./engine/sim -run 'TestSimSeeds/lossy$' -sim.seed=123  # replay one, with its trace
//	go test ./engine/sim -run TestSimSeeds -sim.seeds=1000 -sim.random
//	go test ./engine/sim -run TestStrictFailedSink -sim.bugs -v  # the strict sink variant (fails)
//
// -sim.base sets the first seed of the range (default 1), -sim.jobs how
// many seeds run in parallel (default GOMAXPROCS; each run is one
// goroutine). A failure replays its seed with tracing on and prints the
// last events before the violation.
//
// # Files
//
//	sim.go       Run, Result, the Sim, its event queue and driver loop, the end of a run
//	config.go    Config and the scenarios
//	net.go       nodes and the fabric: Tx, the switch, per-copy faults
//	core.go      a node's cores: rx queues, steering and hand-over, a core's step
//	check.go     the checks after every call into a core
//	app.go       the applications and their portals: open, tick, crash, close
//	op.go        op kinds, the op record, the deadline heap
//	post.go      the random workload: posting READs, WRITEs, REKEYs and LOOKUPs
//	badcmd.go    commands with exactly one thing wrong
//	keys.go      region keys: the directory, K_d, Core.Rekey (fault "rekey")
//	region.go    regions: registration, deregistration, churn
//	memory.go    the slot-area layout, data patterns, poison
//	complete.go  completions and their checks; the memory checks at the end
//	write.go     WRITEs: requests, pulls, commits, the region model, reads of written regions
//	rekey.go     remote REKEYs: installs
//	restart.go   engine restarts: the new engine, ENGINE_GONE, the redial, stale directory entries
//	lookup.go    LOOKUPs: the owners' indexes and slabs, their updates, the answers' checks
//	flow.go      flow experiments: their API and measures
//	flowrun.go   a flow experiment's state, setup and result
//	flowops.go   flow ops: issue and completion
//	figures.go   the paper's Fig. 15 and 16 as flow experiments, and their analyses
//	shares.go    the tenant-shares scenarios: three tenants' flows and the checks of their shares
//	hostile.go   the attacker of scenario hostile-initiator: raw frames at the switch
//
// Imports: engine, engine/port (the steering of a node's cores), abi,
// aesni, wire, cc (flow experiments). Nothing imports sim but tests and
// tools.
package sim
