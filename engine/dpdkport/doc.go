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
//   - Recv frees the previous rx burst and returns views of a new one.
//
// Each of these that needs DPDK makes exactly one cgo call, dpdk.PortIO.Do,
// which fuses tx, free, rx and stash refill: an iteration of the poll loop
// costs one crossing when nothing is sent and two when something is.
//
// An engine of several cores (engine.NewGroup) runs on Queues: a Port per
// queue pair of one device, core i on queue i. The devices here cannot put
// a frame on the queue of the core it names (engine.Steer), so each core's
// Recv hands the frames of other cores over to them through lock-free
// rte_rings, one per ordered pair of cores (handover.go), ARP to every
// core, and returns its own with those handed to it: one crossing more per
// receive, and only when something is handed out.
//
// A Port is owned by one goroutine, the runner's loop, which should be
// pinned and registered with the EAL (ThreadHooks) so the mempool's
// per-lcore cache serves the refills.
//
// Place in the import graph: dpdkport imports dpdk, engine (engine.Tx,
// MaxFrameBytes) and engine/runner (the Port interface it implements);
// tools/rmad wires it to a core and a runner. The protocol core never
// imports it.
package dpdkport
