package sim

import "github.com/onerma/onerma/engine"

// The checks after every call into a core: each core's audit, counters
// and resources, and the node's sums over its cores (see doc.go,
// Invariants).

// afterCall checks the node's cores after any call into one of them.
func (n *node) afterCall(what string) { n.afterCallOn(nil, what) }

// afterCallOn checks the node after a call into its core only (nil:
// into any of them): that core in full, the node's sums with the other
// cores' counters as they last were (nothing but a call into a core
// changes them).
func (n *node) afterCallOn(only *simCore, what string) {
	s := n.s
	if s.err != nil {
		return
	}
	var sum engine.Stats
	for _, c := range n.cores {
		if only != nil && c != only {
			c.addTo(&sum)
			continue
		}
		if !c.check(what, &sum) {
			return
		}
	}
	if v := n.g.Version(); len(n.cores) > 1 && v != n.audited { // the shared table's books changed
		if err := n.g.Audit(); err != nil {
			s.fail("node %d: the region table's audit after %s: %v", n.id, what, err)
			return
		}
		n.audited = v
	}
	st := &sum
	switch {
	case st.RemoteRekeys != n.remoteRekeys:
		// Every install is followed, in the same call, by its ④.
		s.fail("node %d: Stats.RemoteRekeys %d, but the simulator saw %d acknowledged REKEY installs (an install without ④?)",
			n.id, st.RemoteRekeys, n.remoteRekeys)
	case st.Rekeys != n.app.rekeys+n.remoteRekeys:
		s.fail("node %d: Stats.Rekeys %d, the application rekeyed %d times and %d remote REKEYs were installed",
			n.id, st.Rekeys, n.app.rekeys, n.remoteRekeys)
	case st.WritesCommitted != n.commits:
		// Every commit is followed, in the same call, by its ④ (the core
		// commits only with a tx buffer for it): the simulator saw each.
		s.fail("node %d: Stats.WritesCommitted %d, but the simulator saw %d acknowledged commits (a commit without ④?)",
			n.id, st.WritesCommitted, n.commits)
	case st.RxAuthFailed > n.obsolete && s.res.Net.Corrupted == 0 && s.res.Net.Forged == 0:
		// Nothing on the wire was damaged or forged: every answer the
		// core matched to one of its ops is genuine and must open, but
		// for answers to a WRITE request that come after its pull.
		s.fail("node %d: Stats.RxAuthFailed %d (answers to requests of pulled writes %d) on a fabric that damages nothing: a genuine answer failed authentication",
			n.id, st.RxAuthFailed, n.obsolete)
	}
	var done uint64
	for _, v := range st.Completed {
		done += v
	}
	// Completed counts exactly the completions written (orphans apart).
	if done != n.app.completions {
		s.fail("node %d: Stats.Completed sums to %d, the applications read %d completions (Orphaned %d)",
			n.id, done, n.app.completions, st.Orphaned)
	}
}

// check checks one core after a call into its node and adds its counters
// to sum; false after a failure.
func (c *simCore) check(what string, sum *engine.Stats) bool {
	n := c.n
	s := n.s
	if err := c.core.Audit(); err != nil {
		s.fail("node %d core %d: Audit after %s: %v", n.id, c.idx, what, err)
		return false
	}
	st := c.core.Stats()
	switch {
	case st.WindowInUse > uint64(c.cfg.WindowBytes):
		s.fail("node %d core %d: WindowInUse %d > WindowBytes %d", n.id, c.idx, st.WindowInUse, c.cfg.WindowBytes)
	case st.SlotsInUse > uint64(c.cfg.Slots):
		s.fail("node %d core %d: SlotsInUse %d > Slots %d", n.id, c.idx, st.SlotsInUse, c.cfg.Slots)
	case st.OpsInFlight != uint64(c.core.InFlight()):
		s.fail("node %d core %d: Stats.OpsInFlight %d != InFlight() %d", n.id, c.idx, st.OpsInFlight, c.core.InFlight())
	case st.TxFrames != c.txSent:
		s.fail("node %d core %d: Stats.TxFrames %d, but the core sent %d frames", n.id, c.idx, st.TxFrames, c.txSent)
	case st.RxFrames != c.rxFed:
		s.fail("node %d core %d: Stats.RxFrames %d, but Receive was called %d times", n.id, c.idx, st.RxFrames, c.rxFed)
	case st.Posted < c.last.Posted || st.EnteredSvc < c.last.EnteredSvc || st.ReqServed < c.last.ReqServed ||
		st.RxAuthFailed < c.last.RxAuthFailed || st.ReqAuthFailed < c.last.ReqAuthFailed ||
		st.PullsIssued < c.last.PullsIssued || st.PullsExpired < c.last.PullsExpired || st.WritesCommitted < c.last.WritesCommitted ||
		st.RemoteRekeys < c.last.RemoteRekeys:
		s.fail("node %d core %d: a counter went backwards: %+v -> %+v", n.id, c.idx, c.last, st)
	case st.PullsInUse > uint64(c.cfg.PullContexts) || st.PullsInUse+st.PullsExpired+st.WritesCommitted+st.RemoteRekeys > st.PullsIssued:
		// A WRITE's data comes to the core that pulled it (steered by
		// its port): each core's pulls are conserved.
		s.fail("node %d core %d: PullsInUse %d (of %d contexts), PullsIssued %d, PullsExpired %d, WritesCommitted %d, RemoteRekeys %d: pulls not conserved",
			n.id, c.idx, st.PullsInUse, c.cfg.PullContexts, st.PullsIssued, st.PullsExpired, st.WritesCommitted, st.RemoteRekeys)
	case st.IVErrors != 0:
		s.fail("node %d core %d: Stats.IVErrors %d: a volatile IV source never runs dry", n.id, c.idx, st.IVErrors)
	}
	c.last = st
	c.addTo(sum)
	return s.err == nil
}

// addTo adds the counters of c the node's checks sum to sum.
func (c *simCore) addTo(sum *engine.Stats) {
	st := &c.last
	sum.RemoteRekeys += st.RemoteRekeys
	sum.Rekeys += st.Rekeys
	sum.WritesCommitted += st.WritesCommitted
	sum.RxAuthFailed += st.RxAuthFailed
	sum.Orphaned += st.Orphaned
	for k, v := range st.Completed {
		sum.Completed[k] += v
	}
}

// checkQuiet: after the drain, nothing is held.
func (n *node) checkQuiet(when string) {
	s := n.s
	var slots uint64
	for _, c := range n.cores {
		st := c.core.Stats()
		if st.WindowInUse != 0 || st.OpsInFlight != 0 || c.core.InFlight() != 0 || st.PullsInUse != 0 {
			s.fail("node %d core %d %s: WindowInUse=%d OpsInFlight=%d InFlight()=%d PullsInUse=%d, want 0 (leak)",
				n.id, c.idx, when, st.WindowInUse, st.OpsInFlight, c.core.InFlight(), st.PullsInUse)
			return
		}
		if err := c.core.Audit(); err != nil {
			s.fail("node %d core %d %s: Audit: %v", n.id, c.idx, when, err)
			return
		}
		slots += st.SlotsInUse
	}
	if want := n.app.slotsHeld(); slots != want {
		s.fail("node %d %s: SlotsInUse=%d, the live portals hold %d (leak)", n.id, when, slots, want)
	}
}
