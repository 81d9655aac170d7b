// Package dpdkport is the runner.Port of a DPDK ethdev rx/tx queue pair:
// the engine core writes its frames straight into mbufs and reads received
// frames straight from them, with no copy and no allocation per packet or
// per burst.
//
//   - Buffer returns a view of the data room of a pre-allocated mbuf, taken
//     from a stash that is refilled in bulk (rte_pktmbuf_alloc_bulk).
//   - Send sets the mbuf's lengths and appends it to the tx burst; a full
//     burst is sent at once (l2fwd's MAX_PKT_BURST).
//   - Flush sends the tx burst. Frames the queue refuses are retried a
//     bounded number of times, then freed and counted as dropped.
//   - Recv sends the tx burst, frees the previous rx burst and returns
//     views of a new one.
//
// Each of these that needs DPDK makes exactly one cgo call, dpdk.PortIO.Do,
// which fuses tx, free, rx and stash refill. The Port is a
// runner.SendsOnRecv: the loop leaves the frames an iteration queued to
// the next iteration's Recv, so an iteration costs one crossing whether it
// sends or not (Flush runs only before the loop sleeps, yields or runs
// control-plane closures, and at the end). With the engine's ipsec-mb
// seals the Port is an engine.TxCHook: the seal batch runs inside that
// same crossing, right before the burst leaves (dpdk.PortIO.SetPreTx with
// aesni/mb's Batch.Hook), so seal and transmit are one crossing; the opens
// of the burst received are the iteration's second (runner.MaxCrossings).
// A crossing in the middle of an iteration happens only when its frames
// fill a tx burst (or the mbuf stash) first (Stats.TxFullCalls).
//
// Cost accounting (SetStages, rmad -selftest -profile): the one crossing
// of Recv seals, transmits and receives, so it is split, not charged
// whole to the rx poll's stage. Its C side stamps the time-stamp counter
// at its phase boundaries (dpdk.PortIO.SetStamps: the outbound hand-over,
// the pre-transmit hook, the tx burst, freeing the rx burst, the refill,
// the rx burst); the Port charges the hook's span and the settling of its
// run to Seal, the hand-over, tx burst and refill to Transmit (when it
// sent anything), and leaves the rest (entering and leaving C, freeing
// and receiving the rx burst) to the section it runs in: Receive, or
// EmptyRx when nothing came (engine/stage.Stages.Charge). The crossings
// that only transmit (Flush, a full burst in mid-iteration) are sections
// of Transmit, their hook's span charged to Seal the same way. Without
// stages the stamps cost the crossing one branch.
//
// An engine of several cores (engine.NewGroup) runs on Queues: a Port per
// queue pair of one device, core i on queue i. The devices here cannot put
// a frame on the queue of the core it names (engine.Steer), so each core's
// Recv hands the frames of other cores over to them through lock-free
// rte_rings, one per ordered pair of cores (handover.go), ARP to every
// core, and returns its own with those handed to it. The hand-over rides
// the core's next crossing (the Fanout is the PortIO's outbound,
// dpdk.PortIO.SetOutbound): no crossing of its own, at the cost of the
// rest of the iteration (its opens and Poll) before the frames leave.
//
// # The hand-over (handover.go)
//
// rmad sets a port up with one rx/tx queue pair per core
// (dpdk.PortConfig{Queues: N, RSS: true}) and binds Queues: core i's Port
// is queue pair i. No device here puts a frame on the queue of the core it
// names: memif's queue i receives what the peer sent on its queue i;
// net_tap, af_packet (qpairs=N: the kernel's fanout by flow hash) and
// AF_XDP (a socket per queue) get what the kernel hashed to them; a NIC's
// RSS spreads flows, it does not steer them. So every core's Recv steers
// the frames its own queue received (a port.Steering, the one the other
// ports share): frames of its own (and those engine.Steer leaves to the
// receiving core) are returned with those handed in; a frame of core j goes, as the mbuf itself (zero copy), on the ring
// i→j; an ARP frame is returned and goes on every ring, with a reference
// per ring (rte_mbuf_refcnt_update) taken before any ring holds it. The
// sends ride the core's next crossing (its next receive's, or a Flush's),
// before the burst they came in is freed; what a full ring refuses is
// freed and counted.
//
// The rings are DPDK rte_rings of mbuf pointers (dpdk.Ring), one per
// ordered pair of cores, single-producer and single-consumer: N(N-1) rings
// of port.handover_ring entries. Neither end ever waits for the other:
// each moves only its own head and tail (release stores, acquire loads).
// One multi-producer ring per destination would be N rings, but its
// producers serialise on a compare-and-swap of the head and each then
// waits for those before it to publish the tail: a producer thread
// preempted in between would hold up every other core's hand-over to that
// destination. The consumer reads each ring's producer index once per
// receive, inside the crossing it makes anyway.
//
// Counters: each core counts what it handed out, what it took in (part of
// its rx frames) and what a full ring lost (handed_out, handed_in,
// handover_full; an ARP frame once per destination), so over an engine
// handed out = handed in + lost + in the rings. A frame handed over is
// processed in its core's next receive after the handing core's next
// crossing. Each core's device counters are
// its queue pair's (rte_eth_stats q_*; core 0 also carries the device's
// missed, no-mbuf and tx-error counts), so their sum is the device's.
//
// Not done: rte_flow rules that would put each frame on its core's queue
// (a flow per UDP destination port: UDPPort + c for WRITE data, the
// initiator ports for answers; requests would still be handed over, since
// their core is a hash of the sender's IV lane, which a NIC cannot
// compute). rmad asks an AF_XDP port for queue_count equal to its cores;
// the XDP program sends each frame to the socket of its rx queue
// (engine/port/dpdkport/xdp).
//
// A Port is owned by one goroutine, the runner's loop, which should be
// pinned and registered with the EAL (ThreadHooks) so the mempool's
// per-lcore cache serves the refills.
//
// Place in the import graph: dpdkport imports dpdk, engine (engine.Tx,
// MaxFrameBytes), engine/port (the Steering of the hand-over) and
// engine/runner (the Port interface it implements), and engine/stage (the
// parts of its crossings charged to their stages: SetStages); tools/rmad
// wires it to a core and a runner. The protocol core never imports it.
package dpdkport
