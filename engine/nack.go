package engine

import (
	"fmt"
	"math"
	"time"
)

// The NACK threshold (Config.NackThreshold), as the paper derives it
// (§6.1): "(TIMEOUT − RTT − DISPATCH_TIMEOUT) / Bandwidth, so that NACKs
// are generated when a data response is unlikely to reach the initiator
// prior to a TIMEOUT". Bandwidth there is the time one request takes to
// serve: the threshold is the queue the serving core drains in the time
// an answer has left, (TIMEOUT − RTT − DISPATCH_TIMEOUT) × requests served
// per second. A request that finds that many queued ahead of it would be
// answered after its op gave up: it is NACKed at once, which gives the
// initiator its window back in a round trip and spares the serving core
// the work (paper Fig. 16d; engine/sim's TestFig16dNack). rmad derives
// its default this way (tools/rmad/timeout.go names its inputs), and the
// simulator's experiments print the paper's.

// NackDerivation is the NACK threshold and what it is derived from.
type NackDerivation struct {
	// Timeout is the initiator's TIMEOUT.
	Timeout time.Duration
	// RTT is the round trip an op sees in service, the serving queue
	// aside: the request's way there, the answer's way back.
	RTT time.Duration
	// Dispatch is the part of Timeout an op may have spent before its
	// request left: the paper's DISPATCH_TIMEOUT, which 1RMA's ops wait
	// for window out of their TIMEOUT. A OneRMA op's TIMEOUT counts from
	// its entry into service, after any wait for window (DISPATCH_TIMEOUT
	// bounds that wait apart), so for this engine it is 0.
	Dispatch time.Duration
	// ServePerSec is how many requests a serving core serves a second
	// (the class queue the threshold applies to is one core's).
	ServePerSec float64
	// InboundQueue is the queue's capacity: the threshold's upper bound.
	InboundQueue int
	// Threshold is the result: the formula rounded down, within
	// [1, InboundQueue].
	Threshold int
}

// NackThresholdFormula is §6.1's threshold before rounding and bounds:
// (timeout − rtt − dispatch) × servePerSec requests.
func NackThresholdFormula(timeout, rtt, dispatch time.Duration, servePerSec float64) float64 {
	return (timeout - rtt - dispatch).Seconds() * servePerSec
}

// DeriveNackThreshold returns d with its Threshold derived from its
// inputs: NackThresholdFormula rounded down, at least 1 (a queue that
// cannot hold one request in time still serves one at a time: refusing
// every request would serve none) and at most InboundQueue.
func DeriveNackThreshold(d NackDerivation) NackDerivation {
	f := NackThresholdFormula(d.Timeout, d.RTT, d.Dispatch, d.ServePerSec)
	switch {
	case math.IsNaN(f) || f < 1:
		d.Threshold = 1
	case f >= float64(d.InboundQueue):
		d.Threshold = d.InboundQueue
	default:
		d.Threshold = int(f)
	}
	d.Threshold = max(1, d.Threshold)
	return d
}

// String is the derivation as arithmetic: "(7ms − 1.532ms − 0s) ×
// 155340/s = 849.4 → 849 (within [1, 1024])".
func (d NackDerivation) String() string {
	return fmt.Sprintf("(%v − %v − %v) × %.0f/s = %.1f → %d (within [1, %d])", d.Timeout, d.RTT, d.Dispatch, d.ServePerSec,
		NackThresholdFormula(d.Timeout, d.RTT, d.Dispatch, d.ServePerSec), d.Threshold, d.InboundQueue)
}
