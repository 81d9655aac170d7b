// Package faultport is a runner.Port that injects faults into the frames
// crossing another runner.Port: it drops, duplicates, reorders and delays
// them, at random with configured probabilities, in the receive direction,
// the transmit direction or both. It stands in front of any port (a DPDK
// queue pair in rmad, an in-memory port in tests) where no network
// emulator (tc netem) is available, so the protocol's loss recovery can be
// tested against a real engine process. rmad wraps its DPDK port in one
// when its config's "fault" section sets a probability.
//
// What it models, per frame of a faulted direction, with one seeded
// math/rand/v2 PCG stream per direction (the same seed and the same
// frames give the same faults):
//
//   - Drop: the frame is lost.
//   - Duplicate: a byte-identical copy is delivered as well, after the
//     rest of the burst the original belongs to (rx) or with the next
//     Flush (tx).
//   - Delay: the frame is held for DelayNs plus a uniform jitter in
//     [0, JitterNs] and delivered by the first Recv (rx) or Flush (tx)
//     at or after its due time. With jitter, delayed frames overtake one
//     another.
//   - Reorder: the frame is held until ReorderDepth later frames of its
//     direction have passed, or until the direction goes idle (a Recv
//     that finds no frame, a Flush with nothing sent since the last one),
//     so it is overtaken by up to ReorderDepth frames and never lost.
//
// A frame is dropped, or else delayed, or else reordered, or else passed
// at once; independently of that it may be duplicated (a dropped frame is
// never duplicated). A direction whose probabilities are all zero, or that
// Direction leaves out, is a pure pass-through: the inner port's frames
// and buffers, no copy, no random draw.
//
// Timing. A delayed frame is released when the clock given to New reads
// at or after its due time, which is checked in Recv (rx) and Flush (tx).
// The runner calls both on every iteration of its loop, but in Backoff
// mode an idle loop sleeps up to runner.Config.MaxSleep between iterations
// (rmad: poll.max_sleep, 200µs by default) and its sleep is bounded by the
// core's timers only, not by the frames held here: a delayed frame may be
// released up to MaxSleep late. Busy and Yield loops release within one
// iteration. Frames still held when the runner stops are lost.
//
// Memory. Held frames (delayed, reordered, duplicated, and received frames
// beyond Burst) are copied into a pool of Pool buffers of
// engine.MaxFrameBytes allocated by New: received frames are only valid
// until the next Recv, and a transmitted frame's buffer belongs to the
// inner port once sent. When the pool is empty the frame passes through
// unfaulted (counted in PoolEmpty). A transmitted frame that is dropped or
// held is never handed to the inner port: its buffer stays the inner
// port's current one and Buffer returns it again. Held tx frames are sent
// later through the inner port's Buffer and Send, in Flush; when the inner
// port has no buffer they wait for the next Flush. Nothing is allocated
// per frame, per Recv, per Send or per Flush, and Recv returns at most
// Burst frames, in a slice it reuses.
//
// What it does not model: corruption (the simulator, engine/sim, flips
// bits; frames authenticated by AES-GCM would just be dropped), rate
// limits, bandwidth or queueing (no token bucket, no tail drop by
// occupancy), bursty (Gilbert-Elliott) loss, link failures, or faults that
// depend on a frame's contents: every frame of a faulted direction,
// ARP included, is treated alike.
//
// A Port is used by one goroutine, the runner's loop, like the port it
// wraps; Stats too (inside runner.Exec from other goroutines).
//
// Place in the import graph: faultport imports engine (MaxFrameBytes) and
// engine/runner (the Port interface it implements and wraps, and
// runner.Monotonic); tools/rmad wraps its dpdkport.Port in one. The
// protocol core never imports it.
package faultport
