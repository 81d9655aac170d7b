// Package portal is the library applications link to use a OneRMA engine
// (rmad): the CommandPortal of the 1RMA paper (§4.3-§4.5, SPEC §3).
//
// A Portal is one control connection to the engine plus one shared-memory
// segment holding a command ring (application -> engine) and a completion
// ring (engine -> application):
//
//	p, err := portal.Dial("/run/onerma/rmad.sock", "kv-client")
//	slots, err := p.AllocSlots(32)                    // capped per application
//	sink, err := p.RegisterRegion(1<<20, portal.PermLocalWrite)
//	s, _ := p.Slot()
//	kd := ...                                         // K_d from the region's owner, for p.Identity()
//	err = p.PostRead(s, server, remoteRegion, 0, kd, sink, 0, 4096, cookie)
//	p.Flush()                                         // one store publishes the batch
//	n := p.Poll(completions)                          // or p.Wait(ctx, completions)
//	p.Release(completions[0].Slot)
//
// Control operations (Dial, AllocSlots, RegisterRegion, RegisterRegionKey,
// Rekey, DeregisterRegion, Stats, Close) are messages on the engine's unix control socket (package
// engine/ctl/ctlmsg). The engine creates every byte of shared memory as a
// sealed memfd (huge pages when it has them) and passes it here with
// SCM_RIGHTS; the portal validates the segment header with
// abi.DecodeLayout before it touches the rings.
//
// Data path (Post*, Flush, Poll, Wait, Slot, Release): no system calls, no
// locks and no allocations. A command is one 64-byte cache line written
// into the command ring (abi.Producer); Post* stage commands and Flush
// publishes all staged commands with one store of the producer index
// (doorbell batching, Kalia et al.). The Submit* variants post and flush in
// one call. A full command ring is reported at once with ErrRingFull: the
// engine drains it as it polls, so retry after Poll; nothing blocks.
//
// Every posted command yields exactly one Completion naming its slot and
// echoing its cookie, whatever happens (OK, NACK, TIMEOUT, a precise local
// or remote access error, ...). The application owns its slots: Slot takes
// a free one, Release returns it once its completion has been read.
//
// Identity: the engine, not the application, decides the PID stamped on
// this portal's requests (SO_PEERCRED on the control connection, in the
// engine's PID namespace). Identity reports it with the engine's address,
// so the application can ask a server for the derived key K_d that names
// exactly that (address, PID) (paper §4.2).
//
// Keys (paper §4.2, Fig. 5): every region has a region key K_r, chosen by
// its owner (RegisterRegionKey) or drawn at random (RegisterRegion), kept
// by the owner's engine and never sent on the network. The owner gives
// each authorised reader its derived key K_d = Region.DeriveKey(reader's
// Identity().Addr, Identity().PID, abi.OpRead), over whatever channel the
// applications trust; the reader passes K_d with every PostRead. Rekey
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
// Concurrency: a Portal is not safe for concurrent use. Use it from one
// goroutine (the rings are single-producer, single-consumer), or serialize
// calls yourself.
//
// Imports: abi, aesni and engine/ctl/ctlmsg (leaf packages); never the
// engine.
package portal
