// Package runner is the per-core poll loop that drives an engine.Core over
// a Port (DPDK's examples/l2fwd main loop, without DPDK): each iteration
// runs queued control-plane closures, reads the clock once, receives one
// burst and hands it to Core.ReceiveBurst, calls Core.Poll, and flushes
// the frames the core wrote (a SendsOnRecv port sends them with the next
// iteration's receive instead, in the same crossing into C).
//
// # Invariants, counted
//
// The loop keeps counters of what its iterations cost (Stats), so that
// tests assert them as counts, never as timings:
//
//   - one clock read per iteration (ClockReads = Iterations, plus one per
//     sleep cut short by Exec, Stop or a signal, WokenEarly, and one at
//     stop): a sleep that lasts its timeout reads no clock (the next
//     iteration's read shows a late wake-up as a stall). With the
//     default clock, on a machine whose kernel keeps its own clock on
//     the CPU's time-stamp counter, a read is the counter's
//     (internal/tsc.Clock: RDTSC and a multiplication, anchored to
//     Monotonic every tsc.Span), not a vDSO call;
//   - at most MaxCrossings (2) calls into C per iteration (Crossings,
//     CrossingsMax, CrossingsOver; the port's, Crosser, and the core's
//     own, engine.Core.Crossings): on a DPDK port with ipsec-mb, one poll
//     step that seals and sends the last iteration's frames, hands frames
//     to other cores and receives, and one batch of opens for the burst
//     received; an iteration whose frames fill a tx burst crosses once
//     more per burst (dpdkport's TxFullCalls);
//   - no read of a portal's command ring with nothing new outside the
//     core's fallback scans (RingLooks, RingLooksIdle, RingScans,
//     RingRungIdle: engine.PathCounters, the summary doorbell);
//   - no allocation per op (TestIterateOpsAllocs, TestLoopInvariants).
//
// Three modes (Yield is described at its constant):
//
//   - Busy: the loop never sleeps. Its goroutine is locked to an OS thread
//     and a ThreadStart hook may pin that thread and register it with the
//     DPDK EAL (engine/port/dpdkport.PinThread), without this package
//     importing dpdk.
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
// Cost accounting: with Config.Stages the loop marks its own stages on
// the engine/stage accumulator its core and port mark theirs on: the rx
// poll (Receive, or EmptyRx when it found nothing, and then EmptyPoll for
// the whole iteration if Poll found nothing to do), Transmit from the end
// of Poll through Flush for a port flushed every iteration, Clock from
// there (from the end of Poll, for a SendsOnRecv port) through the next
// clock read, Loop around closures, Idle around sleeps and yields. A
// SendsOnRecv port charges the parts of its Recv's crossing that send and
// seal the last iteration's frames to Transmit and Seal itself, out of
// the rx poll's section (stage.Stages.Charge; dpdkport measures them in
// C), and marks its Flush as Transmit. The marks read the Stages' own
// counter (rmad: the CPU's time-stamp counter, only with -profile), never
// Config.Clock: they are no clock reads in the invariants' sense, cross
// into nothing and allocate nothing, so the invariants above hold with
// and without them (TestLoopInvariants and TestIterateOpsAllocs run
// both).
//
// The control plane never touches a Core directly: Exec queues a closure
// that the loop runs between iterations, on the core's own goroutine, so
// nothing on the data path locks (Machnet's ChannelsUpdate). The caller
// waits on a channel the loop closes, which makes it runnable on the
// loop's own P; a Busy loop never gives that P up, so the caller would
// wait for another thread to steal it. With Config.ExecSpin (rmad: a busy
// loop pinned to a CPU of its own) the caller watches a flag the loop
// sets instead, for that long, before it blocks.
//
// Lending (Config.Lend; rmad's loops lend): a loop asleep in Backoff lends
// its core to the caller of Exec that finds it so, who runs the closure
// there and then. Waking the loop, then the caller, would cost two thread
// wake-ups per control call, most of a rekey's time through the control
// socket (engine/ctl BenchmarkDriverHops). The loop's state word says who
// holds the core: the loop (awake), nobody (asleep: the loop sleeps, or is
// about to), a caller (lent), or a caller while the loop, its sleep over,
// waits for the core (reclaim: no other caller may take it then, and the
// caller hands it back and wakes the loop when its closure returns). A
// lent closure is thus one more call into the core between two
// iterations, ordered with them by that word's atomics, as the engine's
// "on the core's goroutine" asks; only its thread differs (not
// ThreadStart's). The loop's hot path is unchanged: one atomic load per
// iteration; lending costs the sleep a compare-and-swap.
//
// # Threads
//
// Each core's loop goroutine is locked to its OS thread. rmad gives each
// busy loop a CPU (poll.cpus: core i's is the i-th): the ThreadStart hook
// pins the thread there and registers it with the EAL
// (dpdkport.ThreadHooks), and every other thread of the process (Go
// runtime threads, the control plane, DPDK's control threads) is moved off
// that CPU (dpdk.KeepOthersOff); threads started later inherit that.
// Before the loops start rmad raises GOMAXPROCS to at least the cores plus
// two (tools/rmad setGOMAXPROCS: a P for the control plane and scrapes,
// one for the garbage collector's mark worker): a busy loop holds its P
// for good, and with no P idle the runtime takes a loop's P during its
// cgo calls, or a preempted loop waits for one. GOMAXPROCS then stays
// fixed: the runtime would otherwise recount CPUs from a moved thread's
// affinity and take the loops' Ps away during their cgo calls.
//
// In busy mode with a CPU, the loop thread alone runs at nice poll.nice
// (default -20, dpdk.SetNice): other processes the kernel places on its CPU
// get short slices rarely and are balanced away, where at nice 0 such a
// process would share the CPU in slices long enough to time the engine's
// ops out. A setup where an application shares the engine's CPU sets 0.
// Whatever the mode, a stall (above) moves only the core's own deadlines;
// the serving side's do not move, so a stalled serving engine can still
// end a pull.
//
// Place in the import graph: runner imports engine and engine/stage only
// (and x/sys/unix).
// Ports: engine/port/dpdkport (DPDK ethdev queue), engine/port/memport
// (in memory). Binaries (tools/rmad) wire port, core and runner together.
package runner
