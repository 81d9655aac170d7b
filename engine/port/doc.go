// Package port is what the engine's ports share, and its subfolders are
// the ports: a runner.Port is what a core's poll loop (engine/runner)
// sends frames through and receives them from.
//
//   - dpdkport: a DPDK ethdev queue pair, one cgo call per burst, and the
//     hand-over between the cores of an engine (Queues); dpdkport/xdp is
//     the XDP program of its AF_XDP ports.
//   - memport: in memory, for tests and tools that run cores without
//     DPDK: two ports back to back, a port looped back to itself, and an
//     engine of several cores looped back through a steering NIC.
//   - faultport: drops, duplicates, reorders and delays the frames of any
//     other port.
//
// Steering (steering.go): every frame names the core of an engine of
// several that must process it (engine.Steer), and a port whose device
// does not put it on that core's queue delivers it there itself. The
// decision is the same everywhere (the core named, a copy for every core
// for ARP, the holding core for the rest); a Steering makes it, and the
// port supplies only how a frame reaches another core (a Handover): a ring
// of mbufs per pair of cores (dpdkport), a link per pair of ports
// (memport), or the simulator's hand-over ring per core (engine/sim).
//
// Place in the import graph: port imports engine only; the ports import
// it, and engine/sim does for its nodes of several cores. The protocol
// core never imports it.
package port
