// Package portal is the library applications link to use a OneRMA engine
// (rmad): the CommandPortal of the 1RMA paper (§4.3-§4.5). An application
// needs no other package of ours for it: the types it shares with the
// engine (OpType, Perm, Status, Completion, Key, ...) are aliases of
// package abi's and aesni's, which stay importable for code that works on
// the ABI itself.
//
// A Portal is one control connection to the engine plus one shared-memory
// segment holding a command ring (application -> engine) and a completion
// ring (engine -> application). One op, from Dial to its completion:
//
//	p, err := portal.Dial(portal.DefaultSocket, "kv-client")
//	_, err = p.AllocSlots(32) // capped per application
//	sink, err := p.RegisterRegion(1<<20, portal.PermLocalWrite)
//	kd := ... // K_d from the region's owner for p.Identity() (package keyx)
//	s, _ := p.Slot()
//	err = p.Post(&portal.Op{
//		Type: portal.OpRead, Slot: s, Cookie: 1,
//		Remote: server, RemoteRegion: region, Key: kd,
//		Local: sink, Length: 4096,
//	})
//	p.Flush()                  // one store publishes every op posted
//	n, err := p.Wait(ctx, cpl) // or p.Poll(cpl), which never blocks
//	p.Release(cpl[0].Slot)     // after reading cpl[0].Status
//
// Example runs it; ExamplePortal_Submit_write, ExampleExecutor,
// ExamplePortal_Rekey and Example_keyx show a WRITE, a transfer of any
// size, a rekey and fetching K_d from the owner.
//
// Control operations (Dial, AllocSlots, RegisterRegion, RegisterRegionKey,
// Rekey, DeregisterRegion, Stats, Close) are messages on the engine's unix control socket (package
// ctlmsg). The engine creates every byte of shared memory as a
// sealed memfd (huge pages when it has them) and passes it here with
// SCM_RIGHTS; the portal maps it and faults it in (this process pays for
// it), then tells the engine, which seals it against hole punching and
// only then uses it (attach for the segment, register_region for a
// region). The portal validates the segment header with abi.DecodeLayout
// before it touches the rings. Over one of its tenant's quotas the engine
// refuses with ErrQuota (Error.Quota names it).
//
// Data path (Post, Submit, Flush, Poll, Wait, Slot, Release): no system
// calls, no locks and no allocations (Wait sleeps in poll(2) once it has
// spun). An op is one 64-byte Command, a cache line written into the
// command ring (abi.Producer). Post checks an Op against what the portal
// knows (its own region, length, bounds, an IPv4 address), writes its
// Command and stages it; Flush publishes every staged command with one
// store of the producer index (doorbell batching, Kalia et al.); Submit is
// Post and Flush in one call. PostCommand stages a Command as it is, for
// tools and tests that craft one. A full command ring is reported at once
// with ErrRingFull: the engine drains it as it polls, so retry after Poll;
// nothing blocks.
//
// Ops (see Op): a READ copies up to MaxOpBytes of a remote region into a
// local one (two hops); a WRITE copies a local range into a remote region,
// committed there all at once or not at all (four hops: the serving
// engine pulls the data); a REKEY installs a new region key K_r in a
// remote region (four hops); a LOOKUP scans one bucket of a remote region
// registered with a bucket layout (RegisterLookupRegion) for a tag and
// brings back the entry and the bytes it points to (two hops: RedN's
// offloaded lookup, done by the serving engine). The local range belongs
// to the op until its completion.
//
// Every posted command yields exactly one Completion naming its slot and
// echoing its cookie, whatever happens (OK, NACK, TIMEOUT, a precise local
// or remote access error, ...). The application owns its slots: Slot takes
// a free one, Release returns it once its completion has been read.
//
// Identity: the engine, not the application, decides the identity (the
// PID field) stamped on this portal's requests: a number it allocated to
// this process, found by its pidfd (SO_PEERPIDFD on the control
// connection), the same for every portal of the process and never given
// to another process, whatever PID namespace either runs in. Identity
// reports it with the engine's address, so the application can ask a
// server for the derived key K_d that names exactly that (address,
// identity) (paper §4.2).
//
// Keys (paper §4.2, Fig. 5): every region has a region key K_r, chosen by
// its owner (RegisterRegionKey) or drawn at random (RegisterRegion), kept
// by the owner's engine and never sent on the network. The owner gives
// each authorised reader its derived key K_d = Region.DeriveKey(reader's
// Identity().Addr, Identity().PID, OpRead), over a channel the
// applications trust (package keyx: TLS with client certificates); the
// reader passes K_d in every Op. A K_d is good for one op type: a WRITE
// needs the K_d derived for OpWrite, a REKEY the one for OpRekey. Rekey
// replaces K_r (local rekey, §5.2): every K_d derived from the old key
// stops working at once, so readers fetch a new one. A read with a wrong
// key, or of a region the server does not hold, completes with
// REMOTE_AUTHENTICATION_FAILURE (the server cannot tell the two apart
// without the key, and does not say which region ids exist).
//
// Crash safety: if the application exits or crashes, the engine sees the
// control connection close and reclaims the portal, its slots and its
// regions.
//
// # When the engine goes away
//
// An engine that exits, is killed or restarts closes every control
// connection (the kernel does it for a dead process; an engine shutting
// down reclaims each portal first, so nothing is written into its rings
// or regions after its connection closes). Each Portal has a goroutine
// asleep in the runtime's network poller on an epoll instance that
// watches a second descriptor of its connection for a hang-up alone (so
// control replies do not wake it); it notices the hang-up as soon as the
// poller wakes it, records an *EngineGoneError (Gone) and rings the
// completion doorbell, so a Wait or an Executor asleep on it wakes at
// once. The data path pays one atomic load per Post and per Poll, and no
// system call.
//
// From then on Poll and Wait return the completions the engine wrote
// before it went, then one completion with StatusEngineGone for every
// other op posted through this portal (flushed or only staged), so every
// op posted still gets exactly one completion, and then an error matching
// ErrEngineGone (errors.As gives the *EngineGoneError: when, and what the
// connection showed). Post and control requests return it at once, and an
// Executor fails its transfers with it. A READ that ends ENGINE_GONE
// leaves its sink undefined; a WRITE or REKEY may have been committed,
// or be committed by the serving engine within its TIMEOUT.
//
// The application reconnects with Redial: a new portal on the same
// socket, with the same name and options, retried while the engine
// restarts. The new portal holds nothing: allocate slots and register
// regions again (their ids change: tell the peers; the old portal's
// regions stay mapped until its Close, so their contents can be copied
// over), and fetch new K_d if Identity changed. See ExamplePortal_Redial.
//
// # Executor: transfers of any size
//
// An Executor is the CommandExecutor of paper §4.4 (Fig. 4): Read and
// Write move any number of bytes (one to gigabytes) between a local region
// and a remote one, and return when all of it has moved or the transfer
// failed:
//
//	e, err := portal.NewExecutor(p, portal.ExecutorConfig{}) // defaults: cc.DefaultParams, all free slots
//	defer e.Close()
//	err = e.Read(ctx, portal.Transfer{
//		Remote: server, RemoteRegion: region, Key: kd,
//		Local: sink, Length: 4 << 20,
//	})
//	var ce *portal.ChunkError
//	if errors.As(err, &ce) { ... ce.Status, ce.RemoteOffset ... }  // or errors.Is(err, portal.ErrRemoteAuth)
//
// Each transfer is split into ops of at most MaxOpBytes
// (ExecutorConfig.ChunkBytes). Ops to one remote engine in one direction
// (a cc.Key: its IPv4 address, READ or WRITE) share that key's window: at
// most cc.Controller.MaxInFlight = min(local, remote CWND) of them are in
// flight, and issues are spaced by a cc.Pacer with the controller's Gap,
// so ops leave at OpSize × CWND / RTT (paper §6). Every completion is fed
// to the controller with the engine's issue_delay and total_delay.
// Concurrent transfers share the slots and windows round-robin, one op per
// transfer per turn: a 64 B read issued while a 4 MB transfer runs waits
// for about one op completion, not for the transfer (head-of-line
// isolation, paper §7.2). Once posted, though, an op queues in the engines
// behind whatever the window keeps in flight, the delay Algorithm 1 holds
// near its targets; so short transfers (one chunk) take precedence: while
// one is in progress, and for a hold after it (ExecutorConfig.ShortHold,
// or four mean gaps between short transfers' starts, up to
// ExecutorConfig.ShortHoldMax, so short transfers arriving at random still
// find it on), transfers of more than one chunk keep at most
// ExecutorConfig.ShortFirst ops in flight in all (default 4): a short
// transfer then queues in the engines behind at most that many ops of the
// long ones, and the long ones keep their window the rest of the time.
// What that is worth (the short transfer's wait, the long ones' goodput)
// depends on the host: rmabench's loopback-hol rows measure it,
// bench/RESULTS.md has the numbers, and rmaperf compares by hand (a
// negative -short-first turns the precedence off):
//
//	rmaperf read_lat -s 64 -exec -bg 4194304 -short-first N
//
// Retry policy, per completion status of a chunk:
//
//   - OK: done.
//   - NACK, DISPATCH_TIMEOUT: congestion (remote, local). Posted again after
//     an exponential, jittered backoff (BackoffBase .. BackoffMax), within
//     the window the controller has just cut.
//   - TIMEOUT: posted again at once (within the cut window), at most
//     TimeoutRetries times; then the transfer fails (ErrTimeout).
//   - REMOTE_AUTHENTICATION_FAILURE: fails the transfer at once (the key is
//     wrong or was rotated: fetch a new K_d), as does every refusal
//     (local or remote region, bounds, permission, bad command,
//     UNREACHABLE, ABORTED).
//
// MaxAttempts bounds the posts of one chunk whatever the statuses. A
// failure is a *ChunkError naming the chunk (op, remote and local offset,
// length), its status and its attempts; errors.Is matches it against one
// sentinel per class of status (ErrRemoteAuth, ErrTimeout, ErrCongestion,
// ErrRemoteAccess, ErrLocalAccess, ErrUnreachable, ErrAborted,
// ErrBadCommand, ErrEngineGone). When ctx ends, the transfer stops
// issuing and returns ctx's error (wrapped; errors.Is works). When the
// engine goes away, every transfer fails at once, since none of its ops
// will complete, with an error naming the transfer and matching
// ErrEngineGone; so do later transfers and NewExecutor. A failed or cancelled transfer
// stops issuing at once but returns only when none of its ops is in
// flight: the local range belongs to an op until its completion, and
// every posted op completes (TIMEOUT bounds it).
//
// Ownership: the executor owns its portal's data path. Between
// NewExecutor and Close the application must not Post, Flush, Poll,
// Wait, Slot or Release on the portal itself; the executor takes the
// portal's free slots (and allocates more if ExecutorConfig.Slots asks),
// and Close gives them back. Control operations (RegisterRegion, Stats,
// Rekey, ...) stay usable, but do not deregister a region a transfer is
// using, and close the executor before the portal. Congestion state (the
// local window, one remote window per key) lives in the executor:
// transfers of one executor share it.
//
// Driving: there is no executor goroutine. The goroutine of a transfer
// that finds nobody driving drives the portal for every transfer (posts,
// polls, hands completions to the others, which sleep on a channel) until
// its own transfer is over, then hands the drive to the goroutine of
// another unfinished transfer. While ops are in flight the driver polls
// the completion ring, spinning as Wait does (Options.WaitSpins polls)
// and then sleeping on the engine's completion doorbell; a pacing or
// backoff wait shorter than ExecutorConfig.SpinWait is spun, a longer one
// slept. With nothing in flight nobody spins, and with no transfer
// nothing runs. The per-op path allocates nothing; in steady state a
// transfer allocates only if its context can end (context.AfterFunc) or
// it fails (transfers are pooled).
//
// Concurrency: a Portal is not safe for concurrent use. Use it from one
// goroutine (the rings are single-producer, single-consumer), or serialize
// calls yourself. An Executor is safe for concurrent use: many goroutines
// may call Read and Write on one executor (and so on one portal) at once.
//
// Imports: abi, aesni, cc and ctlmsg (packages that import
// nothing of ours but abi); never the engine.
package portal
