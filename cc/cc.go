// Package cc is OneRMA's software congestion control: Algorithm 1 of the
// 1RMA paper (§6), as pure code. It reads no clock and does no
// I/O: time (int64 ns, any monotonic origin) and completions come in as
// arguments, windows and pacing gaps go out, so the portal's Executor and
// the simulator run exactly the same code.
//
// # The windows
//
// One local CWND per Controller (one initiating engine's solicitation
// window, shared by every remote), driven by issue_delay: the time an op
// waited for local resources before its request left. One remote CWND per
// Key (remote engine and direction: data read from it, data written to
// it), driven by remote_delay = total_delay − issue_delay: everything
// after the request left (fabric, the remote engine's queues, the data's
// way back). Each has its own target delay. An op to Key k may be issued
// when fewer than MaxInFlight(k) = max(1, ⌊min(local, remote(k))⌋) ops to k
// are in flight and its Pacer allows: ops of OpSize bytes leave at
// cwnd/RTT per second (rate OpSize × CWND / RTT), so a window below one
// op still makes progress, paced to fewer than one op per RTT.
//
// # The rules (Algorithm 1)
//
// On an OK completion, for each window with its delay d and target T:
//
//	d < T:  additive increase: cwnd += AI/cwnd (cwnd ≥ 1) or += AI (cwnd < 1),
//	        capped at CwndMax;
//	d ≥ T:  multiplicative decrease, at most once per RTT:
//	        cwnd *= max(1 − Beta·(d − T)/d, MD), floored at CwndMin.
//
// DISPATCH_TIMEOUT (the op never entered service locally) divides the local
// window by Cut; TIMEOUT and NACK (congestion on the network or at the
// remote engine) divide the remote window by Cut. A window decreases (MD
// or cut) at most once per RTT, and only for an op posted after its last
// decrease (posted = now − total_delay): the ops already in flight when it
// was cut report the congestion the cut answered, a total_delay later,
// and must not cut it again (found by the simulator's Fig. 15b
// experiment: without this, a join cut the local window three times in a
// row). Other
// statuses (REMOTE_AUTHENTICATION_FAILURE, refusals, ABORTED) say nothing
// about congestion and change nothing.
//
// With Params.Combined the controller does not separate local from remote
// congestion (the paper's Fig. 15c ablation): one window per Key, driven by
// total_delay against LocalTarget+RemoteTarget, cut by every congestion
// signal; the local window is unused.
//
// # RTT
//
// "Once per RTT" and the pacing gap use a smoothed RTT: an EWMA (gain 1/8)
// of the remote_delay of OK completions (total_delay in Combined mode),
// starting at Params.RTT.
//
// # Concurrency
//
// A Controller and a Pacer belong to one goroutine (or one lock); nothing
// here allocates after the first completion for a Key.
package cc

import (
	"fmt"
	"math"

	"github.com/onerma/onerma/abi"
)

// Dir is the direction of an op's data as seen by the initiator.
type Dir uint8

const (
	// Read: data flows from the remote engine to the initiator.
	Read Dir = iota
	// Write: data flows from the initiator to the remote engine.
	Write
)

func (d Dir) String() string {
	switch d {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Dir(%d)", uint8(d))
}

// DirOf maps an op code to its direction (REKEY moves its key like a WRITE).
func DirOf(op abi.Op) Dir {
	if op == abi.OpRead {
		return Read
	}
	return Write
}

// Key names a remote CWND: a remote engine (its IPv4 address, big-endian as
// a uint32) and a direction.
type Key struct {
	Peer uint32
	Dir  Dir
}

// Params are every knob of the controller (all configurable).
type Params struct {
	AI   float64 // additive increase per RTT's worth of OK completions (0.25)
	Beta float64 // scale of a multiplicative decrease (0.8)
	MD   float64 // smallest factor one decrease multiplies by (0.5)
	Cut  float64 // DISPATCH_TIMEOUT, TIMEOUT and NACK divide a window by this (10)

	CwndInit float64 // every window's starting value, in ops
	CwndMin  float64 // floor: below 1, ops are paced to fewer than one per RTT
	CwndMax  float64 // cap

	LocalTarget  int64 // ns: issue_delay target
	RemoteTarget int64 // ns: remote_delay target
	RTT          int64 // ns: RTT estimate until completions measure it
	OpSize       int   // bytes: the op size CWND counts in (the pacing unit)

	// Combined: do not separate local from remote congestion (Fig. 15c).
	Combined bool
}

// DefaultParams are the paper's constants (§6, §6.1) with delay targets
// for software engines on shared, virtualised CPUs; deployments override
// the delays (engine/sim's PaperCC sets the paper's fabric). The remote
// target sits above the host's scheduling jitter: a busy-polling engine
// core on a VM loses tens of µs to the hypervisor many times a second
// (bench/RESULTS.md, platform), and every op in flight across such a
// stall reads as congestion. With a 25 µs target those stalls alone keep
// a 4 MB transfer's window too shallow for the engine to fill its bursts,
// and its goodput below raw 4 KB READs on one loopback core; at 75 µs the
// window settles deep enough.
// bench/RESULTS.md ("executor and loopback-pairs") has the numbers,
// measured with `rmaperf read_bw -self -s 4194304 -cc-remote-target T`
// against `rmaperf read_bw -self -s 4096 -O 64`. Short ops do not pay for
// the deeper queue: the executor gives them precedence (ShortFirst).
//
// Windows start at 16 ops: 64 KB of 4 KB ops, the BDP of the paper's fabric (100 Gbit/s,
// 5 µs). Algorithm 1 grows a window by only AI = 0.25 op per RTT, so a
// flow starting at one op would need ~50 RTTs to fill that link (more in
// the simulator: figures/RESULTS.md, Fig. 15a) where the paper reaches it in ~8; starting
// at a BDP costs nothing, because the engine's solicitation window bounds
// what is in flight and sheds the excess locally (DISPATCH_TIMEOUT, which
// cuts the local window).
func DefaultParams() Params {
	return Params{
		AI:           0.25,
		Beta:         0.8,
		MD:           0.5,
		Cut:          10,
		CwndInit:     16,
		CwndMin:      1.0 / 64,
		CwndMax:      256,
		LocalTarget:  10_000,
		RemoteTarget: 75_000,
		RTT:          20_000,
		OpSize:       4096,
	}
}

// Validate reports the first parameter that makes no sense.
func (p *Params) Validate() error {
	bad := func(name string, v any, why string) error {
		return fmt.Errorf("cc: %s = %v: %s", name, v, why)
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case !finite(p.AI) || p.AI <= 0:
		return bad("AI", p.AI, "must be > 0")
	case !finite(p.Beta) || p.Beta <= 0 || p.Beta > 1:
		return bad("Beta", p.Beta, "must be in (0, 1]")
	case !finite(p.MD) || p.MD <= 0 || p.MD >= 1:
		return bad("MD", p.MD, "must be in (0, 1)")
	case !finite(p.Cut) || p.Cut <= 1:
		return bad("Cut", p.Cut, "must be > 1")
	case !finite(p.CwndMin) || p.CwndMin <= 0:
		return bad("CwndMin", p.CwndMin, "must be > 0")
	case !finite(p.CwndMax) || p.CwndMax < p.CwndMin:
		return bad("CwndMax", p.CwndMax, "must be >= CwndMin")
	case !finite(p.CwndInit) || p.CwndInit < p.CwndMin || p.CwndInit > p.CwndMax:
		return bad("CwndInit", p.CwndInit, "must be within [CwndMin, CwndMax]")
	case p.LocalTarget <= 0:
		return bad("LocalTarget", p.LocalTarget, "must be > 0 ns")
	case p.RemoteTarget <= 0:
		return bad("RemoteTarget", p.RemoteTarget, "must be > 0 ns")
	case p.RTT <= 0:
		return bad("RTT", p.RTT, "must be > 0 ns")
	case p.OpSize <= 0:
		return bad("OpSize", p.OpSize, "must be > 0 bytes")
	}
	return nil
}

// window is one CWND and the time of its last decrease.
type window struct {
	cwnd    float64
	lastCut int64
	cut     bool // lastCut is valid
}

// canDecrease: no decrease in the last rtt, and the op reporting the
// congestion was posted after the last decrease (its feedback reflects the
// decreased window, not the one it was cut for).
func (w *window) canDecrease(now, posted, rtt int64) bool {
	return !w.cut || (now-w.lastCut >= rtt && posted >= w.lastCut)
}

func (w *window) decreased(now int64) { w.lastCut, w.cut = now, true }

// onDelay applies Algorithm 1 to one OK completion's delay.
func (w *window) onDelay(p *Params, now, posted, delay, target, rtt int64) {
	if delay < target {
		if w.cwnd >= 1 {
			w.cwnd += p.AI / w.cwnd
		} else {
			w.cwnd += p.AI
		}
		w.cwnd = min(w.cwnd, p.CwndMax)
		return
	}
	if !w.canDecrease(now, posted, rtt) {
		return
	}
	f := max(1-p.Beta*float64(delay-target)/float64(delay), p.MD)
	w.cwnd = max(w.cwnd*f, p.CwndMin)
	w.decreased(now)
}

// onCut divides the window by Cut, at most once per RTT.
func (w *window) onCut(p *Params, now, posted, rtt int64) {
	if !w.canDecrease(now, posted, rtt) {
		return
	}
	w.cwnd = max(w.cwnd/p.Cut, p.CwndMin)
	w.decreased(now)
}

// Controller holds one local window and a remote window per Key.
type Controller struct {
	p      Params
	local  window
	remote map[Key]*window
	srtt   int64
}

// New returns a controller with every window at CwndInit.
func New(p Params) (*Controller, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Controller{
		p:      p,
		local:  window{cwnd: p.CwndInit},
		remote: make(map[Key]*window),
		srtt:   p.RTT,
	}, nil
}

// Params returns the controller's parameters.
func (c *Controller) Params() Params { return c.p }

func (c *Controller) win(k Key) *window {
	w := c.remote[k]
	if w == nil {
		w = &window{cwnd: c.p.CwndInit}
		c.remote[k] = w
	}
	return w
}

// OnCompletion feeds one completion of an op to Key k: its status and the
// delays the engine measured (abi.Completion.IssueDelayNs, TotalDelayNs).
func (c *Controller) OnCompletion(now int64, k Key, st abi.Status, issueDelay, totalDelay int64) {
	w := c.win(k)
	rtt := c.srtt
	posted := now - max(totalDelay, 0)
	switch st {
	case abi.StatusOK:
		remote := max(totalDelay-issueDelay, 0)
		if c.p.Combined {
			w.onDelay(&c.p, now, posted, totalDelay, c.p.LocalTarget+c.p.RemoteTarget, rtt)
			c.sample(totalDelay)
			return
		}
		c.local.onDelay(&c.p, now, posted, issueDelay, c.p.LocalTarget, rtt)
		w.onDelay(&c.p, now, posted, remote, c.p.RemoteTarget, rtt)
		c.sample(remote)
	case abi.StatusDispatchTimeout:
		if c.p.Combined {
			w.onCut(&c.p, now, posted, rtt)
			return
		}
		c.local.onCut(&c.p, now, posted, rtt)
	case abi.StatusTimeout, abi.StatusNack:
		w.onCut(&c.p, now, posted, rtt)
	}
}

// sample folds one RTT measurement into the smoothed RTT (gain 1/8).
func (c *Controller) sample(d int64) {
	if d <= 0 {
		return
	}
	c.srtt += (d - c.srtt) / 8
	if c.srtt <= 0 {
		c.srtt = 1
	}
}

// RTT is the smoothed RTT in ns.
func (c *Controller) RTT() int64 { return c.srtt }

// Local is the local window (CwndMax, unused, in Combined mode).
func (c *Controller) Local() float64 {
	if c.p.Combined {
		return c.p.CwndMax
	}
	return c.local.cwnd
}

// Remote is Key k's window.
func (c *Controller) Remote(k Key) float64 { return c.win(k).cwnd }

// Cwnd is the window that limits ops to Key k: the smaller of the two.
func (c *Controller) Cwnd(k Key) float64 { return min(c.Local(), c.Remote(k)) }

// MaxInFlight is how many ops to Key k may be in flight: ⌊Cwnd(k)⌋, at
// least one (a window below one op is enforced by pacing).
func (c *Controller) MaxInFlight(k Key) int {
	return max(1, int(c.Cwnd(k)))
}

// Gap is the pacing interval after issuing an op of opBytes to Key k:
// RTT × opBytes / (OpSize × Cwnd(k)), so that OpSize-byte ops leave at
// Cwnd/RTT per second.
func (c *Controller) Gap(k Key, opBytes int) int64 {
	g := float64(c.srtt) * float64(opBytes) / (float64(c.p.OpSize) * c.Cwnd(k))
	if g >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(g)
}

// Pacer spaces issues by the gaps a Controller computes. Its zero value
// allows an issue at once.
type Pacer struct {
	next int64
	set  bool
}

// Wait is 0 when an op may be issued at now, else how many ns to wait.
func (p *Pacer) Wait(now int64) int64 {
	if !p.set || now >= p.next {
		return 0
	}
	return p.next - now
}

// Issued records an issue at now followed by gap ns of silence. A pacer
// that fell behind (an idle flow, a late poll) catches up by at most one
// gap, never by a burst.
func (p *Pacer) Issued(now, gap int64) {
	if !p.set {
		p.next, p.set = now, true
	}
	p.next = max(p.next, now-gap) + gap
}
