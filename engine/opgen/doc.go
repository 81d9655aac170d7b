// Package opgen is the engine's own op generator (rmad -selftest), as
// testpmd's forwarding modes measure a port without an application: a
// SelfTest attaches an op source to every core of an engine.Group, and
// each core's Poll lets its source post READs or WRITEs of one size,
// keeping a number in flight, with no application process and no portal
// ring; it checks the data of every op as it completes, and counts and
// times them (selftest.go: the run, its configuration and its results;
// opsource.go: one core's part).
//
// The protocol core knows only the interface it calls (engine.OpSource:
// Poll once per Core.Poll, Completed per completion) and the entry it
// gives an attached source in its portal table (engine.SourcePort: slots,
// regions, Post, Detach); the phases of a run, the checks and the counts
// are this package's. Once attached, nothing here allocates, locks or
// makes a system call on the data path. With Config.Stages each core's
// source snapshots its core's cost accounting (engine/stage) when its
// measured window opens and closes (CoreResult.Stages): rmad -selftest
// -profile divides it by the window's ops.
//
// Place in the import graph: opgen imports engine, abi, aesni,
// engine/telemetry (the latency histograms) and engine/stage; tools/rmad
// runs it. The engine never imports it.
package opgen
