// Package soak runs OneRMA for a long time under faults and checks that
// nothing is lost: the soak of `make soak` (lab/rmasoak; 30 minutes by
// default, 1 minute in `make test`).
//
// # The testbed
//
// internal/testbed's routed topology: two subnets joined by a Linux
// router in network namespaces, four rmad engines in backoff polling
// (no pinned CPU: the host has two) on af_packet (e1, e3), AF_XDP (e2)
// and net_tap (e4) ports, TIMEOUT 1 s. The applications are this
// process's portals.
//
// # The load
//
// On each engine:
//
//   - an owner application registers a data region (1.4 MB: 256 blocks
//     it writes once, then a lane per other engine) and an exec region
//     (a 16 MB partition per other engine), each under a random key,
//     and serves K_d for them over keyx (TLS 1.3, client certificates
//     from a throwaway CA);
//   - a raw application keeps 8 slots toward each other engine, each
//     cycling WRITE of its own lane block, READ of it back, READ of one
//     of the owner's blocks, at 64 B, 1 KB and 4 KB in turn, paced
//     (Config.Rate, by default DefaultRate over all engines);
//   - an executor application (portal.Executor, 32 slots, congestion
//     control tuned for backoff engines) WRITEs 1 to 16 MB to its
//     partition of each other engine's exec region in turn and READs it
//     back.
//
// Every op is checked: each posted op gets exactly one completion with
// its cookie and slot (counted posted against completed, by kind, size
// and status); an OK READ's bytes are those the owner or the last WRITE
// put there (content.go: a block's bytes are a function of the block and
// its generation); an OK WRITE's bytes are in the owner's memory at once
// and are read back over the network. A WRITE that ended TIMEOUT or
// ENGINE_GONE may have been committed: its block then holds either
// generation, and the READ back says which.
//
// # The faults
//
// Spread over the run between a quiet lead and tail (schedule.go), one
// at a time: an engine SIGKILLed and restarted on its IV state (its
// owner redials and registers its regions anew, copying their bytes;
// its raw and executor applications see ENGINE_GONE, redial
// themselves, take slots and memory again and fetch new K_d), a router
// link down for 2 s and up, an owner's local Rekey, and a remote REKEY
// of an owner's data region sent from another engine (the soak then
// serves K_d of the new key). Every failed op must be explained by a
// fault window that overlaps it and can cause its status (faults.go):
// ENGINE_GONE by its own engine's kill; TIMEOUT and UNREACHABLE by a kill
// of either engine or a flap of either's subnet; REMOTE_AUTHENTICATION_
// FAILURE by a rekey of the region, or a restart of its engine, after
// its K_d was fetched. Anything else is an error. One fault the soak
// does not inject but a shared host does: an engine starved of CPU for
// a second or more (a WRITE it initiated then times out: the serving
// engine's pull expires). The engine measures its loop's stalls; the
// soak reads them every second and opens a stall window, which explains
// TIMEOUT and UNREACHABLE, for a loop that stalled for at least half a
// second and half the time since the previous reading (stalls.go). The
// report lists every stall window; a quiet host has none.
//
// # The checks
//
//   - Floors (FloorsFor): 10 M verified ops, 5 kills, 10 flaps, 40 local
//     and 20 remote rekeys per 30 minutes, scaled linearly with the
//     duration and rounded up, with at least 1 kill, 2 flaps, 2 local and
//     1 remote rekey. Verified ops are raw ops completed OK and checked,
//     and the 4 KB chunks of executor transfers completed OK and checked
//     byte for byte (printed apart).
//   - No error, and as many completions as ops posted.
//   - Nothing leaked: once the load has stopped and a quiet spell
//     passed, `rmactl stats` of every engine shows nothing in flight, no
//     window or pull context in use, exactly the slots and regions the
//     applications hold, every op posted completed (or orphaned); once
//     the applications closed, no portal, slot, region or tenant memory
//     beyond what the engine held before any application.
//   - Memory (rss.go): after its warm-up (an eighth of the run, 15 s to
//     4 minutes) each engine incarnation's anonymous memory stays within
//     8 MB of its value then; and over the second half of its life, when
//     that spans 4 minutes or more, the least-squares slopes of its Go
//     live heap and of its anonymous memory beyond the Go heap's pages
//     are at most 4 MB an hour each. A 1-minute run checks the ceiling
//     alone. The engines serve their metrics (rmad -metrics) in their
//     namespaces, where the soak reads the Go runtime's figures; with
//     Config.Profiles it also takes heap profiles and memory maps.
//   - Nonces (nonces.go, capture.go): an AF_PACKET socket in the router's
//     namespace sees every frame every engine sends, for the whole run;
//     no (sender address, counter) nonce repeats, a nonce names its
//     frame's sender, and each incarnation of an engine uses only
//     counters above those of the incarnation before its SIGKILL.
//
// # How the checks know
//
// Every application is a portal of this process; each engine's owner, raw
// worker and executor are separate portals (an Executor owns its portal's
// data path), and each worker's goroutine owns its portal. A raw slot's
// lane blocks, and an executor's partition, are written only by that slot
// or executor, so their expected bytes follow from a generation number (a
// WRITE that may or may not have committed leaves two candidates, which
// the READ back settles). A fault's window runs from its start to its end
// plus a grace of TIMEOUT + the resolve timeout + 1 s, and is closed only
// when the engine's applications have reconnected. The capture sees each
// frame once, on the router-side port it entered by (the veth end, or the
// net_tap engine's tap, which the unbound socket sees again after every
// restart); a frame's engine incarnation is given by its kernel timestamp
// against the times its engine was seen dead.
//
// The report (Report.Print) prints what was counted and ends with
// "soak: ok" only when all of it held.
package soak
