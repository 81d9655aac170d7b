package sim

import "github.com/onerma/onerma/abi"

// Remote REKEYs in the simulator (see doc.go, "Remote REKEYs").
//
// A REKEY takes a WRITE's four hops (engine/pull.go) and is tracked like
// one (op.write is set; op.rekey says which): its request (①) is recorded
// by tag, its pull (②) accepted or not, and its commit seen in Tx.Send of
// the serving core's ④, sent in the same call as the install
// (the engine responder's installKey). There the simulator checks the install and
// makes the new K_r the region's current key in the directory, from that
// virtual time on: the owner knows it at once, every other node (the
// poster too) within Faults.KeyDelayNs, as for Core.Rekey. Later ops with
// a K_d of an older key are stale (REMOTE_AUTHENTICATION_FAILURE), and ops
// with the new key must authenticate (on a clean network: OK), which
// checks that the core installed exactly the key the poster staged.

// sawInstall: serving node n sent ④ for REKEY o: it has just installed
// o's new K_r into the region o names. The REKEY must be a valid one, not
// installed before, not completed yet (a REKEY reported failed never takes
// effect afterwards), of a live region of n that allows remote REKEYs,
// whose current key is still the one o's K_d was derived from: a REKEY
// installs only under the key it was asked under, never over its owner's
// later Rekey or another REKEY's key (engine/pull.go).
func (s *Sim) sawInstall(n *node, o *op) {
	rg := o.target
	switch {
	case o.kind == kValid && rg != nil && rg == o.keyRg && o.keyVer != len(rg.keys)-1:
		s.fail("node %d installed the key of %s over v%d of region %#x, which replaced the key v%d it was asked under",
			n.id, o, len(rg.keys)-1, uint32(rg.id), o.keyVer)
	case o.kind != kValid:
		s.fail("node %d installed the key of %s, which must be refused (%v)", n.id, o, o.want())
	case o.committed:
		s.fail("node %d installed the key of %s a second time", n.id, o)
	case o.done:
		s.fail("node %d installed the key of %s %dns after its initiator reported it %v: a failed REKEY took effect afterwards",
			n.id, o, s.now-o.doneAt, o.status)
	case rg == nil || rg.node != n.id || rg.id != o.cmd.RemoteRegion:
		s.fail("node %d installed the key of %s, which names no region of it", n.id, o)
	case rg.perm&abi.PermRemoteRekey == 0:
		s.fail("node %d installed the key of %s into region %#x, which does not allow remote REKEYs", n.id, o, uint32(rg.id))
	case rg.deadAt <= s.now:
		s.fail("node %d installed the key of %s into region %#x %dns after it was deregistered", n.id, o, uint32(rg.id), s.now-rg.deadAt)
	}
	if s.err != nil {
		return
	}
	o.committed = true
	n.remoteRekeys++
	s.res.RemoteRekeys++
	if o.orphan {
		s.res.OrphanRekeys++
	}
	s.addKey(rg, o.newKr, s.cfg.Faults.KeyDelayNs)
	s.digest(0x4e4b, o.cookie, uint64(s.now))
	s.tracef("node %d installs the key of %s (region %#x v%d)", n.id, o, uint32(rg.id), len(rg.keys)-1)
}
