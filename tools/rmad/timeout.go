package main

import (
	"strings"
	"time"
)

// TIMEOUT's default follows the port, as the paper's follows the fabric:
// "4-5× the fabric RTT" (§6.2), short enough that a dead or partitioned
// peer gives the ops' window back quickly and an application fails over
// in milliseconds, long enough that an op merely slowed down completes.
//
// A software engine's fabric RTT is the round trip an op sees in service:
// here the p99.9 of the initiating engine's total_delay of 4 KB READs
// with its whole solicitation window (rmad's 256 KB, 64 ops) in flight,
// which adds the serving engine's queue to the wire's round trip and
// covers the host's scheduling noise up to one op in a thousand. The
// default is 4 × that, rounded up to a millisecond, and never below 2 ms:
// the poll loop moves its own ops' deadlines over a gap of more than 1 ms
// between two iterations (a stall), not over a shorter one, so TIMEOUT
// stays above 1 ms and a round trip. `bin/rmabench -bin bin -only rtt`
// measures each port's RTT that way (two engines busy on two CPUs, the
// application sharing one; net_ring is a loopback engine serving itself,
// af_xdp (copy mode) and af_packet run on a veth pair, net_tap on two
// taps on a Linux bridge), and `-rtt-timeout default` counts the ops
// these defaults fail. bench/RESULTS.md, rtt, has the RTTs portTimeouts
// follows, the largest of four runs per port; rerun it and update the
// map when a port's path changes.
//
// On a shared host even the 2 ms ports see the serving engine's
// multi-millisecond scheduling stalls now and then, and a small fraction
// of a full window's ops end TIMEOUT, which the paper accepts as the
// price of failing fast (and the Executor retries).
//
// A NIC that DPDK drives itself (port.vdev empty) gets memif's 2 ms: its
// path has no kernel in it, as memif's, and a fabric adds microseconds
// (the rtt setups have no such NIC). Other vdevs keep 10 ms. An explicit
// engine.timeout (-timeout) always wins; it is what to set when the
// window is larger than the default (the queue an op waits behind grows
// with it) or when engines of different ports serve each other (the
// slower port's).
var portTimeouts = map[string]time.Duration{
	"net_memif":     2 * time.Millisecond,
	"net_ring":      2 * time.Millisecond,
	"net_af_xdp":    6 * time.Millisecond,
	"net_tap":       7 * time.Millisecond,
	"net_af_packet": 8 * time.Millisecond,
	portNIC:         2 * time.Millisecond,
}

// otherPortTimeout is TIMEOUT's default on a port of another kind.
const otherPortTimeout = 10 * time.Millisecond

// portNIC is the kind of a port the EAL finds itself (no vdev).
const portNIC = "nic"

// portKind is the kind of port p creates: its vdev's driver (the vdev's
// name without its instance number: net_memif0 → net_memif), or portNIC
// for a device the EAL finds itself.
func portKind(p *PortConfig) string {
	if p.Vdev == "" {
		return portNIC
	}
	name, _, _ := strings.Cut(p.Vdev, ",")
	return strings.TrimRight(name, "0123456789")
}

// defaultTimeout is TIMEOUT's default on port p with poll mode mode.
// The table's round trips are those of busy-polling engines; an engine
// that sleeps when idle (backoff, the mode of tests and demos on shared
// CPUs) adds its sleep and the scheduler's wake-up to every hop, so its
// default is never below otherPortTimeout.
func defaultTimeout(p *PortConfig, mode string) time.Duration {
	d, ok := portTimeouts[portKind(p)]
	if !ok {
		d = otherPortTimeout
	}
	if mode == "backoff" {
		d = max(d, otherPortTimeout)
	}
	return d
}
