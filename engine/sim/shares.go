package sim

import (
	"fmt"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// The tenant-shares scenarios (issue 28; engine/shares.go): three
// tenants on one initiating engine share its solicitation window. One
// reads from a node that never answers (its link is down the whole run),
// one saturates a live server, one posts a light load to the same
// server. Each flow's portal is a tenant of its own, of its weight
// (equal in tenant-shares, drawn from 1..8 in tenant-shares-weighted);
// the tenant reading from the dead node is of the high class in half the
// seeds (a team whose default class is high). The guaranteed shares are
// g_t = W × w_t / Σ w, at least ArbitrationBytes and at most W, the
// engine's rule, computed here from the flows' weights.
//
// Checked at every step of the client's core (after its Poll, the
// completions harvested), exactly:
//   - the dead destination's tenant never holds more than its g_t in
//     service: the simulator's own count (its requests sent less its
//     TIMEOUTs, times its op size) is at most g_t, and equals the
//     engine's TenantCounters.WindowHeld;
//   - the light tenant's ops never end DISPATCH_TIMEOUT (every one is
//     OK) and each enters service (its request is sent) within
//     ShareCheck.LightBoundNs of its post; an op not sent by then fails
//     the run at that step;
//   - the window is used: after the client core's Poll, with ArbitrationBytes
//     or more of it free, no tenant may have an op queued that could
//     enter: the light tenant none at all (it stays within its share),
//     the saturating tenant none while the live server answered within
//     Config.Responsive (the simulator knows that from the OK completions
//     it saw, which the core records no later), the dead destination's
//     tenant none that fits in its share.
//
// At the end: the dead destination's tenant held its whole share at some
// point (the bound was reached, not just kept), and the saturating
// tenant borrowed. Result.Shares reports the window's use.

// ShareCheck names the flows of a FlowExperiment whose tenants' shares
// are checked: all three on one client node, each a tenant of its own.
type ShareCheck struct {
	Dead, Saturating, Light int // indices into Flows
	// LightBoundNs bounds the time from a light op's post to its request.
	LightBoundNs int64
}

// ShareStats are what a tenant-shares run measured.
type ShareStats struct {
	Shares       [3]int     // g_t of the dead, saturating and light tenants (bytes)
	DeadMaxHeld  int        // the most the dead destination's tenant held
	LightOps     uint64     // light ops completed (all OK)
	LightMaxWait int64      // the longest a light op waited for service (ns)
	Borrowed     uint64     // ops the saturating tenant borrowed window for
	WindowUse    float64    // the window's mean use over the posting phase, from the first OK on
	HeldUse      [3]float64 // each tenant's mean window held, over the same time (bytes)
	DeadShareDT  uint64     // DISPATCH_TIMEOUTs of the dead tenant at its share (engine)
	ShareWaits   [3]uint64  // TenantCounters.ShareWaits of each
}

func (c *ShareCheck) validate(x *FlowExperiment) error {
	fl := x.Flows
	idx := []int{c.Dead, c.Saturating, c.Light}
	for _, i := range idx {
		if i < 0 || i >= len(fl) {
			return fmt.Errorf("sim: ShareCheck: flow %d", i)
		}
	}
	d, sa, l := fl[c.Dead], fl[c.Saturating], fl[c.Light]
	switch {
	case d.Client != sa.Client || d.Client != l.Client:
		return fmt.Errorf("sim: ShareCheck: the flows must share a client node")
	case d.Tenant == sa.Tenant || d.Tenant == l.Tenant || sa.Tenant == l.Tenant:
		return fmt.Errorf("sim: ShareCheck: the flows must be tenants of their own")
	case sa.Server != l.Server || d.Server == sa.Server:
		return fmt.Errorf("sim: ShareCheck: the dead flow reads from a node of its own, the others from one server")
	case len(x.Silent) != 1 || x.Silent[0] != d.Server || d.OpBytes == 0:
		return fmt.Errorf("sim: ShareCheck: the dead flow's server must be the silent node, its op size set")
	case c.LightBoundNs <= 0:
		return fmt.Errorf("sim: ShareCheck: LightBoundNs %d", c.LightBoundNs)
	}
	for i, f := range fl {
		if f.Client == d.Client && i != c.Dead && i != c.Saturating && i != c.Light {
			return fmt.Errorf("sim: ShareCheck: flow %d on the client too", i)
		}
	}
	return nil
}

// tenantShares is the engine's guaranteed share of each weight among
// weights, of a window of w bytes.
func tenantShares(w int, weights []int) []int {
	sum := 0
	for _, x := range weights {
		sum += max(x, 1)
	}
	out := make([]int, len(weights))
	for i, x := range weights {
		out[i] = min(w, max(engine.ArbitrationBytes, w*max(x, 1)/sum))
	}
	return out
}

// shareRun is the checks' state in a run.
type shareRun struct {
	fr     *flowRun
	chk    ShareCheck
	client *simCore
	flows  [3]*flowState // dead, saturating, light
	tenant [3]int
	share  [3]int
	live   uint32 // the live server's address
	w      int    // WindowBytes
	resp   int64  // Responsive (ns)

	deadIssued, deadTimedOut uint64
	lastOKLive               int64 // latest OK completion of an op to the live server (0: none)
	from                     int64 // the first OK: the window's use is measured from then
	lastT                    int64
	lastUsed                 int
	bulkHeld                 uint64 // the client core's Stats.BulkHeld after its last step
	lastHeld                 [3]int
	area                     float64
	heldArea                 [3]float64
	st                       ShareStats
}

func newShareRun(fr *flowRun) *shareRun {
	s := fr.s
	x := &fr.exp
	chk := *x.Shares
	r := &shareRun{fr: fr, chk: chk}
	var weights []int
	for k, i := range []int{chk.Dead, chk.Saturating, chk.Light} {
		r.flows[k] = fr.flows[i]
		r.tenant[k] = x.Flows[i].Tenant
		weights = append(weights, x.Flows[i].Weight)
	}
	cn := s.nodes[x.Flows[chk.Dead].Client]
	r.client = cn.cores[0]
	r.w = r.client.cfg.WindowBytes
	r.resp = int64(r.client.cfg.Responsive)
	if r.resp == 0 {
		r.resp = int64(r.client.cfg.Timeout) / 4
	}
	copy(r.share[:], tenantShares(r.w, weights))
	r.live = s.nodes[x.Flows[chk.Saturating].Server].ip4
	r.st.Shares = r.share
	return r
}

// sawRequest: the client sent the request of one of its ops.
func (r *shareRun) sawRequest(n *node, h *wire.Fields) {
	s := r.fr.s
	if n != r.client.n {
		return
	}
	slot := abi.SlotID(h.Tag >> 32)
	for k, f := range r.flows {
		i, ok := f.fp.slotIx[slot]
		if !ok {
			continue
		}
		op := &f.fp.busy[i]
		if !op.live || op.issuedAt != 0 {
			s.fail("flow %d (%s): a request from slot %d, whose op is not waiting for service", f.idx, f.spec.Name, slot)
			return
		}
		op.issuedAt = s.now
		switch k {
		case 0:
			r.deadIssued++
		case 2:
			wait := s.now - op.postedAt
			r.st.LightMaxWait = max(r.st.LightMaxWait, wait)
			if wait > r.chk.LightBoundNs {
				s.fail("light tenant's op %#x entered service %dns after its post (bound %dns)", op.cookie, wait, r.chk.LightBoundNs)
			}
		}
		return
	}
	s.fail("a request of the client from slot %d, of no flow", slot)
}

// completed: a flow's op completed with c (its checks passed).
func (r *shareRun) completed(f *flowState, op *flowOp, c *abi.Completion) {
	s := r.fr.s
	k := r.which(f)
	switch {
	case k == 0 && c.Status != abi.StatusTimeout && c.Status != abi.StatusDispatchTimeout:
		s.fail("dead destination's tenant: op %#x completed %v", op.cookie, c.Status)
	case k != 0 && c.Status != abi.StatusOK:
		s.fail("%s tenant: op %#x completed %v (issued %dns after its post, %d)", f.spec.Name, op.cookie, c.Status, op.issuedAt-op.postedAt, op.issuedAt)
	case (c.Status == abi.StatusDispatchTimeout) != (op.issuedAt == 0):
		s.fail("%s tenant: op %#x completed %v, its request sent at %d", f.spec.Name, op.cookie, c.Status, op.issuedAt)
	}
	s.res.ByStatus[c.Status]++ // (other flow experiments count theirs in FlowResult only)
	if k == 0 && c.Status == abi.StatusTimeout {
		r.deadTimedOut++
	}
	if k != 0 && c.Status == abi.StatusOK {
		r.lastOKLive = s.now
		if r.from == 0 {
			r.from, r.lastT = s.now, s.now
		}
	}
	if k == 2 {
		r.st.LightOps++
	}
}

func (r *shareRun) which(f *flowState) int {
	for k, g := range r.flows {
		if g == f {
			return k
		}
	}
	return -1
}

// afterStep checks the client core after a step (its Poll, the
// completions harvested).
func (r *shareRun) afterStep() {
	s := r.fr.s
	core := r.client.core
	var tc [3]engine.TenantCounters
	for k := range tc {
		tc[k] = core.TenantCounters(r.tenant[k])
	}
	deadOp := r.flows[0].spec.OpBytes
	held := int(r.deadIssued-r.deadTimedOut) * deadOp
	r.st.DeadMaxHeld = max(r.st.DeadMaxHeld, held)
	st := core.Stats()
	used := int(st.WindowInUse)
	// A Poll that held bulk work back for the next (engine.Config.
	// PollBytes) leaves window free on purpose: the next Poll follows at
	// once.
	free := r.w-used >= engine.ArbitrationBytes && st.BulkHeld == r.bulkHeld
	r.bulkHeld = st.BulkHeld
	switch {
	case held > r.share[0]:
		s.fail("the dead destination's tenant holds %d bytes of window, its share is %d", held, r.share[0])
	case uint64(held) != tc[0].WindowHeld:
		s.fail("the dead destination's tenant holds %d bytes of window by the simulator's count, %d by the engine's", held, tc[0].WindowHeld)
	case tc[0].WindowShare != uint64(r.share[0]) || tc[1].WindowShare != uint64(r.share[1]) || tc[2].WindowShare != uint64(r.share[2]):
		s.fail("shares %d %d %d, the engine says %d %d %d", r.share[0], r.share[1], r.share[2], tc[0].WindowShare, tc[1].WindowShare, tc[2].WindowShare)
	case free && tc[2].Queued > 0:
		s.fail("%d bytes of window free after Poll, and the light tenant has %d ops queued", r.w-used, tc[2].Queued)
	case free && tc[1].Queued > 0 && r.lastOKLive != 0 && s.now-r.lastOKLive < r.resp:
		s.fail("%d bytes of window free after Poll, and the saturating tenant has %d ops queued toward a server that answered %dns ago (Responsive %dns)",
			r.w-used, tc[1].Queued, s.now-r.lastOKLive, r.resp)
	case free && tc[0].Queued > 0 && held+deadOp <= r.share[0]:
		s.fail("%d bytes of window free after Poll, and the dead destination's tenant, holding %d of its share of %d, has %d ops queued",
			r.w-used, held, r.share[0], tc[0].Queued)
	}
	if s.err != nil {
		return
	}
	// Light ops still waiting for service must not have waited longer
	// than the bound.
	fp := r.flows[2].fp
	for i := range fp.busy {
		op := &fp.busy[i]
		if op.live && op.issuedAt == 0 && s.now-op.postedAt > r.chk.LightBoundNs {
			s.fail("light tenant's op %#x posted %dns ago is not in service (bound %dns)", op.cookie, s.now-op.postedAt, r.chk.LightBoundNs)
			return
		}
	}
	// The window's use, from the first OK to the end of posting.
	if r.from != 0 && r.lastT < s.postEnd {
		t := min(s.now, s.postEnd)
		r.area += float64(r.lastUsed) * float64(t-r.lastT)
		for k := range r.heldArea {
			r.heldArea[k] += float64(r.lastHeld[k]) * float64(t-r.lastT)
		}
		r.lastT = t
	}
	r.lastUsed = used
	for k := range tc {
		r.lastHeld[k] = int(tc[k].WindowHeld)
	}
}

// atEnd checks what the run must have shown and fills Result.Shares.
func (r *shareRun) atEnd() {
	s := r.fr.s
	core := r.client.core
	deadOp := r.flows[0].spec.OpBytes
	if d := float64(r.lastT - r.from); d > 0 {
		r.st.WindowUse = r.area / d / float64(r.w)
		for k := range r.heldArea {
			r.st.HeldUse[k] = r.heldArea[k] / d
		}
	}
	for k := range r.tenant {
		r.st.ShareWaits[k] = core.TenantCounters(r.tenant[k]).ShareWaits
	}
	r.st.Borrowed = core.TenantCounters(r.tenant[1]).Borrowed
	for _, f := range r.flows {
		s.res.Posted += f.st.Posted
	}
	r.st.DeadShareDT = core.TenantCounters(r.tenant[0]).ShareDispatchTimeouts
	switch {
	case r.st.DeadMaxHeld != r.share[0]/deadOp*deadOp:
		s.fail("the dead destination's tenant held at most %d bytes, its share is %d: the bound was never reached", r.st.DeadMaxHeld, r.share[0])
	case r.st.LightOps == 0:
		s.fail("no light op completed")
	case r.st.Borrowed == 0 && r.share[0]+r.share[1]+r.share[2] < r.w && core.Stats().BulkHeld == 0:
		// With the bound on bulk work (engine.Config.PollBytes) holding
		// grants back, one a Poll, the saturating tenant may stay within
		// its share for the whole run; every Poll that held nothing back
		// is still checked for window left free that it could have
		// borrowed (above).
		s.fail("the saturating tenant never borrowed")
	}
}

// Scenario parameters of tenant-shares (virtual ns): the paper's fabric
// (figures.go: ~5 µs RTT for a 4 KB READ), DISPATCH_TIMEOUT 20 and
// TIMEOUT 40 such RTTs. A light op enters service within 8 RTTs of its
// post: it waits for window freed by the saturating tenant's ops (they
// complete within about an RTT of the server) and, among the tenants
// below their share, for its turn: at most one round of the others'
// quanta (up to 8 × 4 KB for a weight of 8) and what the dead
// destination's tenant may take up to its share.
const (
	sharesRTTNs        = 5_000
	sharesPostNs       = 1_500_000
	sharesDispatch     = 100 * time.Microsecond
	sharesTimeout      = 200 * time.Microsecond
	sharesLightBoundNs = 8 * sharesRTTNs
)

// TenantShares: three tenants with equal weights (see shares.go).
func TenantShares(seed uint64) Config { return tenantSharesConfig("tenant-shares", seed, false) }

// TenantSharesWeighted: the same with weights from 1 to 8.
func TenantSharesWeighted(seed uint64) Config {
	return tenantSharesConfig("tenant-shares-weighted", seed, true)
}

func tenantSharesConfig(name string, seed uint64, weighted bool) Config {
	r := scenarioRand(seed)
	x := paperExperiment(name, 3, sharesPostNs) // node 0 the client, 1 the live server, 2 silent
	x.Seed = seed
	ops := 8 + r.IntN(25)
	x.Engine.WindowBytes = ops * abi.MaxOpBytes
	x.Engine.HighBurst = 1 + r.IntN(8)
	x.Engine.DispatchTimeout = sharesDispatch
	x.Engine.Timeout = sharesTimeout
	x.Net.JitterNs = r.Int64N(1000)
	w := []int{1, 1, 1}
	if weighted {
		for k := range w {
			w[k] = 1 + r.IntN(8)
		}
	}
	g := tenantShares(x.Engine.WindowBytes, w)
	tenants := r.Perm(3)
	satOp := []int{512, 1024, 4096, 4096}[r.IntN(4)]
	lightOp := []int{64, 4096}[r.IntN(2)]
	lightMax := min(2, g[2]/lightOp)
	lightGap := sharesRTTNs * (1 + r.Int64N(10))
	x.Flows = []FlowSpec{
		{Name: "dead", Client: 0, Server: 2, Tenant: tenants[0], Weight: w[0], High: r.IntN(2) == 0,
			OpBytes: abi.MaxOpBytes, Slots: 2*ops + 4},
		{Name: "saturating", Client: 0, Server: 1, Tenant: tenants[1], Weight: w[1],
			OpBytes: satOp, Slots: x.Engine.WindowBytes/satOp + 4},
		{Name: "light", Client: 0, Server: 1, Tenant: tenants[2], Weight: w[2],
			OpBytes: lightOp, Slots: 2, MaxOutstanding: lightMax, RateBps: float64(lightOp*8) * 1e9 / float64(lightGap)},
	}
	x.Silent = []int{2}
	x.Shares = &ShareCheck{Dead: 0, Saturating: 1, Light: 2, LightBoundNs: sharesLightBoundNs}
	fr := &flowRun{exp: x}
	cfg, err := fr.config()
	if err != nil {
		panic(err)
	}
	cfg.Name = name
	cfg.Covers = []abi.Status{abi.StatusOK, abi.StatusTimeout, abi.StatusDispatchTimeout}
	return cfg
}
