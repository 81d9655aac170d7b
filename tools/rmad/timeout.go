package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
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
// these defaults fail. bench/HISTORY.md, rtt, has the RTTs portRTTs
// holds, the largest of four runs per port; rerun it and update the
// map when a port's path changes.
//
// On a shared host even the 2 ms ports see the serving engine's
// multi-millisecond scheduling stalls now and then, and a small fraction
// of a full window's ops end TIMEOUT, which the paper accepts as the
// price of failing fast (and the Executor retries).
//
// A NIC that DPDK drives itself (port.vdev empty) gets memif's RTT and
// so its 2 ms: its path has no kernel in it, as memif's, and a fabric
// adds microseconds (the rtt setups have no such NIC). Other vdevs keep
// 10 ms. An explicit engine.timeout (-timeout) always wins; it is what to
// set when the window is larger than the default (the queue an op waits
// behind grows with it) or when engines of different ports serve each
// other (the slower port's).
//
// The same measurements give the NACK threshold's default (nackDerivation).

// portRTT is what the rtt setups measured on a port type: the engine's
// total_delay of 4 KB READs with the whole default window in flight
// (rttWindowOps of them).
type portRTT struct {
	p999 time.Duration // the RTT: TIMEOUT's default is 4 × it
	p50  time.Duration // the typical op's: a full window's ops take this long each
}

// rttWindowOps is the window the rtt setups keep in flight: rmad's
// default 256 KB of 4 KB READs.
const rttWindowOps = 64

var portRTTs = map[string]portRTT{
	"net_memif":     {245 * time.Microsecond, 94700 * time.Nanosecond},
	"net_ring":      {118 * time.Microsecond, 58600 * time.Nanosecond},
	"net_af_xdp":    {1401 * time.Microsecond, 285 * time.Microsecond},
	"net_tap":       {1532 * time.Microsecond, 412 * time.Microsecond},
	"net_af_packet": {1925 * time.Microsecond, 518 * time.Microsecond},
}

// otherPortTimeout is TIMEOUT's default on a port of another kind.
const otherPortTimeout = 10 * time.Millisecond

// otherPortRTT stands in for a port of another kind: the RTT
// otherPortTimeout is 4 × of, and the table's slowest p50 (af_packet's).
var otherPortRTT = portRTT{otherPortTimeout / 4, 518 * time.Microsecond}

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

// rttOf is port p's measurements, and whether its kind was measured
// (a NIC DPDK drives: memif's).
func rttOf(p *PortConfig) (portRTT, bool) {
	k := portKind(p)
	if k == portNIC {
		k = "net_memif"
	}
	r, ok := portRTTs[k]
	if !ok {
		return otherPortRTT, false
	}
	return r, true
}

// defaultTimeout is TIMEOUT's default on port p with poll mode mode.
// The table's round trips are those of busy-polling engines; an engine
// that sleeps when idle (backoff, the mode of tests and demos on shared
// CPUs) adds its sleep and the scheduler's wake-up to every hop, so its
// default is never below otherPortTimeout.
func defaultTimeout(p *PortConfig, mode string) time.Duration {
	d := otherPortTimeout
	if r, ok := rttOf(p); ok {
		d = max(2*time.Millisecond, (4*r.p999 + time.Millisecond - 1).Truncate(time.Millisecond))
	}
	if mode == "backoff" {
		d = max(d, otherPortTimeout)
	}
	return d
}

// nackDerivation is the NACK threshold's derivation (engine.nack_threshold
// 0: its default), as the paper's §6.1 derives it (engine.NackDerivation):
// (TIMEOUT − RTT − 0) × the serving rate, within [1, inbound_queue], with
//
//   - TIMEOUT engine.timeout: the port type's default unless set;
//   - RTT the port type's, which TIMEOUT's default is 4 × of: the p99.9
//     round trip with a full window, so the serving queue of one
//     initiator's window is in it already (conservative);
//   - no DISPATCH_TIMEOUT: an op's TIMEOUT counts from its entry into
//     service, after its wait for window, so none of it is spent before
//     the request leaves (the paper's ops wait for window out of their
//     TIMEOUT: with rmad's DISPATCH_TIMEOUT, as long as the fast ports'
//     TIMEOUT, its subtraction would leave nothing);
//   - the serving rate engine.serve_rate, or the port type's (portRTTs):
//     a serving core kept busy by a full window of 4 KB READs
//     (rttWindowOps in flight, each taking the p50 round trip) serves
//     rttWindowOps / p50 a second (Little's law; had the application
//     kept fewer of its ops in the engine at a time, the rate was lower:
//     engine.serve_rate sets one known otherwise). 4 KB READs are the
//     largest requests to serve; smaller ones go faster, so on that
//     count the threshold errs low, where NACKs are shed load, not lost
//     goodput (paper Fig. 16d).
//
// A port type the table lacks gets otherPortRTT: a quarter of its
// TIMEOUT, and the table's slowest serving rate.
func (c *Config) nackDerivation() (d engine.NackDerivation, inputs string) {
	r, measured := rttOf(&c.Port)
	kind := portKind(&c.Port)
	def := defaultTimeout(&c.Port, c.Poll.Mode)
	d = engine.NackDerivation{Timeout: time.Duration(c.Engine.Timeout), RTT: r.p999, InboundQueue: c.Engine.InboundQueue,
		ServePerSec: rttWindowOps / r.p50.Seconds()}
	from := [3]string{"port " + kind + "'s default", "port " + kind + "'s measured", "port " + kind + "'s measured"}
	if d.Timeout == 0 || d.Timeout == def {
		d.Timeout = def
	} else {
		from[0] = "engine.timeout"
	}
	if !measured {
		from[1] = "a quarter of an unmeasured port's 10 ms"
		from[2] = "the slowest measured port's"
	}
	if c.Engine.ServeRate > 0 {
		d.ServePerSec, from[2] = c.Engine.ServeRate, "engine.serve_rate"
	}
	return engine.DeriveNackThreshold(d), fmt.Sprintf("timeout: %s; rtt: %s; serve rate: %s; no dispatch_timeout (TIMEOUT counts from service entry)", from[0], from[1], from[2])
}

// nackThresholdMsg is the NACK threshold the engine runs with and its
// derivation, for the stats reply and the start-up log.
func (c *Config) nackThresholdMsg() *ctlmsg.NackThreshold {
	d, inputs := c.nackDerivation()
	m := &ctlmsg.NackThreshold{Threshold: d.Threshold, Source: "derived", Derived: d.Threshold, Formula: d.String(), Inputs: inputs,
		TimeoutNs: int64(d.Timeout), RTTNs: int64(d.RTT), DispatchNs: int64(d.Dispatch), ServePerSec: d.ServePerSec, InboundQueue: d.InboundQueue}
	if c.Engine.NackThreshold != 0 {
		m.Threshold, m.Source = c.Engine.NackThreshold, "engine.nack_threshold"
	}
	return m
}

// logNackThreshold logs the NACK threshold and its derivation.
func logNackThreshold(log zerolog.Logger, m *ctlmsg.NackThreshold) {
	log.Info().Int("nack_threshold", m.Threshold).Str("source", m.Source).Int("derived", m.Derived).
		Str("formula", m.Formula).Str("inputs", m.Inputs).Msg("NACK threshold: (TIMEOUT − RTT − DISPATCH_TIMEOUT) × serve rate (paper §6.1)")
}
