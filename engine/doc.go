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
//	ReceiveBurst(now, frames)  a received burst, in order (opens batched with ipsec-mb)
//	Poll(now)            drain command rings, arbitrate, serve, expire timers,
//	                     publish completions
//
// and the Core writes outgoing frames into buffers it takes from a Tx the
// driver supplies (Tx.Buffer, Tx.Send). Commands and completions travel
// through abi rings whose memory the driver supplies (shared memory in rmad,
// plain slices in the simulator and tests). Three drivers run this same
// code: the DPDK poll loop (engine/runner + engine/dpdkport), the
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
// (responder.go, pull.go, replay.go), the portal table and its completions
// (portals.go), the region table (regions.go), the routing table
// (route.go), the neighbor table and ARP (neighbor.go), ICMP and the IPv4
// the engine does not take (icmp.go), the window and the class arbiter
// (arbiter.go), the sender
// (sender.go) with its seal backend (sealer.go, seal_mb.go), the op
// source of a SelfTest (opsource.go, selftest.go: the engine's own op
// generator, rmad -selftest), and the generic ring they queue in
// (ring.go). core.go is the control plane and
// Poll; dispatch.go is the receive walk.
//
// Imports: abi, wire, aesni (aesni/mb in cgo builds on linux/amd64) and
// engine/telemetry. It must never import dpdk.
package engine
