// Package runner is the per-core poll loop that drives an engine.Core over
// a Port (DPDK's examples/l2fwd main loop, without DPDK): each iteration
// reads the clock once, runs queued control-plane closures, receives one
// burst and hands it to Core.ReceiveBurst, calls Core.Poll, and flushes
// the frames the core wrote.
//
// Three modes (Yield is described at its constant):
//
//   - Busy: the loop never sleeps. Its goroutine is locked to an OS thread
//     and a ThreadStart hook may pin that thread and register it with the
//     DPDK EAL (engine/dpdkport.PinThread), without this package importing
//     dpdk.
//   - Backoff: after IdleSpins idle iterations the loop sleeps, from
//     MinSleep doubling up to MaxSleep, never past the core's next timer
//     deadline, and wakes at once when Exec or Stop is called (ppoll on an
//     eventfd, with the thread's timer slack set to 1 ns: Go's own timers
//     round short sleeps up to a millisecond). Two engines and their
//     applications can then share a small machine.
//
// Stalls: when more than StallThreshold (1 ms) passes between two
// iterations beyond the sleep the loop asked for (the thread was
// preempted, the VM descheduled, an Exec closure ran long), answers may
// have waited unread in the port meanwhile. The loop counts the stall and
// calls Core.Stalled, which moves the deadlines of the core's own ops by
// the gap, so none times out for time in which the engine could not look
// (the serving side's timers stay: a WRITE's initiator must time out
// last).
//
// The control plane never touches a Core directly: Exec queues a closure
// that the loop runs between iterations, on the core's own goroutine, so
// nothing on the data path locks (Machnet's ChannelsUpdate).
//
// Place in the import graph: runner imports engine only (and x/sys/unix).
// Ports: engine/dpdkport (DPDK ethdev queue), engine/memport (in memory).
// Binaries (tools/rmad) wire port, core and runner together.
package runner
