// Package memport is an in-memory runner.Port for tests and tools that run
// engine cores without DPDK (the role of gVisor's link/channel endpoints):
// Pair connects two ports back to back, Loopback connects a port to
// itself, and Steered gives each core of an engine of several cores a
// port, looped back through a NIC that delivers every frame to the core
// engine.Steer names (it copies each frame once, at Flush).
//
// Each direction of a link owns a fixed set of frame buffers allocated in
// New: a sender writes a frame straight into a free buffer (Buffer/Send),
// Flush publishes the batch with one atomic store, and the receiver gets
// views of those same buffers (Recv) and hands them back to the sender on
// its next Recv. Nothing is copied and nothing is allocated per frame. The
// two sides synchronise through two single-producer/single-consumer index
// rings per direction, so each Port may run on its own goroutine (one
// goroutine per Port).
//
// Place in the import graph: memport imports engine (for engine.Tx and
// MaxFrameBytes) and engine/port (Steered's port.Steering); tests of
// engine/runner and anything that wants a wire between two cores import
// it. It is never imported by the engine.
package memport
