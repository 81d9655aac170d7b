package sim

import (
	"bytes"
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// WRITEs in the simulator (see doc.go, "Writes").
//
// Every WRITE carries its own stamp: byte j of its target region becomes
// patByte(stamp, j), and the application stages exactly those bytes in its
// source area before posting. The serving core commits (copies its
// staging buffer into the region) and sends ④ in the same call, so the
// simulator sees every commit the moment it happens, in Tx.Send of the
// acknowledgment: it checks the region then and there against its model
// (a shadow copy of every remote-writable region, updated only by
// commits), which makes every check exact whatever the overlap of
// concurrent writes.

// commitRec is one commit into a remote-writable region.
type commitRec struct {
	off   uint64
	n     uint32
	stamp uint64
}

// nextStamp draws a WRITE's data pattern id. Stamps have bit 31 set
// (patByte keeps the low 32 bits of an id): they never equal a region's
// pattern id (patternID<<8 | node, far below 2^31) nor each other.
func (s *Sim) nextStamp() uint64 {
	s.writeCtr++
	return 1<<31 | s.writeCtr&(1<<31-1)
}

// stampBytes fills dst with the data of a write with stamp g at region
// offset off.
func stampBytes(dst []byte, g, off uint64) { fillPatternAt(dst, g, off) }

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// sawWriteRequest: node n sent a WRITE request (①). Its op is the one the
// application posted last on the slot the tag names (the core sends a
// request while its op is queued or in service, before any completion).
// The tag identifies the op from now on, also after its completion.
func (s *Sim) sawWriteRequest(n *node, h *wire.Fields) {
	ref, ok := n.app.slotOwner[abi.SlotID(h.Tag>>32)]
	if !ok || ref.p.closed {
		return
	}
	o := ref.p.busy[ref.k]
	if o == nil || !o.write || o.rekey != (h.Type == wire.TypeRekeyReq) {
		s.fail("node %d sent a %v request with tag %#x for slot %d, whose op is %v", n.id, h.Type, h.Tag, h.Tag>>32, o)
		return
	}
	key := reqRef{n.id, h.Tag}
	if old, dup := s.writes[key]; dup && old != o {
		s.fail("node %d sent WRITE requests with the same tag %#x for two ops: %s and %s", n.id, h.Tag, old, o)
		return
	}
	s.writes[key] = o
	o.reqIV = h.IV
}

// sawPullSent: a serving core sent a pull (②). Kept only to forge data
// (Net.ForgeWrites): the data is curried with the pull's IV.
func (s *Sim) sawPullSent(h *wire.Fields) {
	if s.cfg.Net.ForgeWrites == 0 {
		return
	}
	if ini := s.nodeOfIP(h.DstIP); ini >= 0 {
		if o := s.writes[reqRef{ini, h.Tag}]; o != nil {
			o.pullIVs = append(o.pullIVs, h.IV)
		}
	}
}

// oneRMAType is the OneRMA message type of frame b, judged by its type
// byte (0: not IPv4).
func oneRMAType(b []byte) wire.Type {
	const typeAt = wire.EthLen + wire.IPv4Len + wire.UDPLen + 1
	if len(b) <= typeAt || wire.EtherType(b) != wire.EtherTypeIPv4 {
		return 0
	}
	return wire.Type(b[typeAt])
}

// receiveAnswer hands a NACK or an error to n's core. When it answers
// the request (①) of a WRITE whose pull n's core has accepted (a
// duplicated request, answered after the first copy was pulled), it is
// curried with ①'s IV while the op now expects the pull's: genuine, it
// fails authentication all the same (Stats.RxAuthFailed), and is counted
// apart.
func (s *Sim) receiveAnswer(c *simCore, b []byte) {
	n := c.n
	var h wire.Fields
	var o *op
	if _, err := wire.Decode(b, &h); err == nil {
		o = s.writes[reqRef{n.id, h.Tag}]
	}
	if o == nil || o.pullFirst == 0 || o.done || o.orphan {
		c.core.Receive(s.now, b)
		return
	}
	before := c.core.Stats().RxAuthFailed
	c.core.Receive(s.now, b)
	n.obsolete += c.core.Stats().RxAuthFailed - before
}

// receivePull hands a pull (②) to its initiator n's core and records
// whether the core accepted it: for a live WRITE of ours, it did exactly
// when none of the counters of refused answers moved (a duplicate pull is
// dropped, a damaged one fails authentication, a late one is stale). A
// damaged copy may still be accepted when only bytes the core ignores
// changed (TTL, checksums). On acceptance the op's deadline becomes the
// pull's timeout (the server's) counted from now.
func (s *Sim) receivePull(c *simCore, b []byte) {
	n := c.n
	var h wire.Fields
	var o *op
	if _, err := wire.Decode(b, &h); err == nil {
		o = s.writes[reqRef{n.id, h.Tag}]
	}
	if o == nil || o.done || o.orphan {
		c.core.Receive(s.now, b)
		return
	}
	before := c.core.Stats()
	c.core.Receive(s.now, b)
	after := c.core.Stats()
	if after.RxDropped != before.RxDropped || after.RxStale != before.RxStale || after.RxAuthFailed != before.RxAuthFailed {
		return
	}
	if o.pullFirst != 0 {
		s.fail("node %d accepted a second pull for %s (first at +%dns)", n.id, o, s.now-o.pullFirst)
		return
	}
	if srv := s.nodeOfIP(h.SrcIP); !s.cfg.lenientPulls && (srv < 0 || int64(h.Offset) != int64(s.nodes[srv].ecfg.Timeout)) {
		s.fail("node %d accepted a pull for %s carrying timeout %dns, not its server's", n.id, o, h.Offset)
		return
	}
	o.pullFirst, o.pullTimeout = s.now, int64(h.Offset)
}

// sawCommit: serving node n sent ④ for a WRITE: it has just copied the
// write's staging buffer into the region. The write must be a valid one,
// not committed before, not completed yet (a WRITE reported failed never
// changes memory afterwards: its initiator times out after the server has
// given up), into a live region of n; the range must hold exactly its
// source bytes, and every other byte of the region what the model says.
func (s *Sim) sawCommit(n *node, h *wire.Fields) {
	ini := s.nodeOfIP(h.DstIP)
	var o *op
	if ini >= 0 {
		o = s.writes[reqRef{ini, h.Tag}]
	}
	if o == nil {
		s.fail("node %d acknowledged a commit (④) to %08x tag %#x: no WRITE request with that tag was ever sent", n.id, h.DstIP, h.Tag)
		return
	}
	if o.rekey {
		s.sawInstall(n, o)
		return
	}
	rg := o.target
	switch {
	case o.kind != kValid:
		s.fail("node %d committed %s, which must be refused (%v)", n.id, o, o.want())
	case o.committed:
		s.fail("node %d committed %s a second time", n.id, o)
	case o.done:
		s.fail("node %d committed %s %dns after its initiator reported it %v: a failed WRITE changed memory afterwards",
			n.id, o, s.now-o.doneAt, o.status)
	case rg == nil || rg.kind != regDst || rg.node != n.id || rg.id != o.cmd.RemoteRegion:
		s.fail("node %d committed %s, which names no remote-writable region of it", n.id, o)
	case rg.deadAt <= s.now:
		s.fail("node %d committed %s into region %#x %dns after it was deregistered", n.id, o, uint32(rg.id), s.now-rg.deadAt)
	}
	if s.err != nil {
		return
	}
	off, ln := o.cmd.RemoteOffset, o.cmd.Length
	want := s.expect[:ln]
	stampBytes(want, o.stamp, off)
	if i := firstDiff(rg.mem[off:off+uint64(ln)], want); i >= 0 {
		s.fail("committed data differ from the source: %s committed, but byte %d of its range is %#02x, want %#02x",
			o, i, rg.mem[off+uint64(i)], want[i])
		return
	}
	copy(rg.shadow[off:], want)
	if i := firstDiff(rg.mem, rg.shadow); i >= 0 {
		s.fail("node %d committed %s: byte %d of region %#x (outside [%d,%d)) is %#02x, the model says %#02x",
			n.id, o, i, uint32(rg.id), off, off+uint64(ln), rg.mem[i], rg.shadow[i])
		return
	}
	rg.commits = append(rg.commits, commitRec{off: off, n: ln, stamp: o.stamp})
	o.committed = true
	n.commits++
	s.res.WritesCommitted++
	if o.orphan {
		s.res.OrphanCommits++
	}
	s.digest(0xc0a1, o.cookie, uint64(s.now))
	s.tracef("node %d commits %s", n.id, o)
}

// checkWriteCompletion: the completion of a WRITE agrees with what the
// simulator saw happen to it (OK: committed; TIMEOUT: either; any other
// status: never committed); its TIMEOUT came after the server had given up
// (the initiator adopts the server's timeout on ②) and not later than
// that deadline allows; its target region holds what the model says.
func (s *Sim) checkWriteCompletion(o *op, c *abi.Completion) {
	st := c.Status
	switch {
	case st == abi.StatusOK && !o.committed:
		s.fail("%s completed OK, but its server never committed it", o)
	case st == abi.StatusOK && o.pullFirst == 0:
		s.fail("%s completed OK, but its initiator accepted no pull", o)
	case st != abi.StatusOK && st != abi.StatusTimeout && o.committed:
		s.fail("%s completed %v, but its server committed it: only TIMEOUT may hide a commit", o, st)
	case st == abi.StatusTimeout && o.pullFirst != 0 && !s.cfg.lenientPulls && s.now-o.pullFirst < o.pullTimeout:
		s.fail("%s: TIMEOUT %dns after its pull arrived, before the server's timeout %dns: the initiator did not time out last",
			o, s.now-o.pullFirst, o.pullTimeout)
	case st == abi.StatusTimeout && o.pullFirst != 0 && !s.cfg.lenientPulls && s.now-o.pullFirst > o.pullTimeout+s.slack():
		s.fail("%s: TIMEOUT %dns after its pull arrived (server's timeout %dns): late", o, s.now-o.pullFirst, o.pullTimeout)
	}
	if s.err != nil {
		return
	}
	o.done, o.doneAt, o.status = true, s.now, st
	switch {
	case o.rekey:
		s.res.RekeyStatus[st]++
		if st == abi.StatusTimeout && o.committed {
			s.res.TimeoutRekeyed++
		}
	default:
		s.res.WriteStatus[st]++
		if st == abi.StatusTimeout && o.committed {
			s.res.TimeoutCommitted++
		}
	}
	if rg := o.target; rg != nil && rg.kind == regDst && rg.deadAt == math.MaxInt64 {
		if i := firstDiff(rg.mem, rg.shadow); i >= 0 {
			s.fail("%s completed %v: byte %d of region %#x is %#02x, the model says %#02x (changed without a commit)",
				o, st, i, uint32(rg.id), rg.mem[i], rg.shadow[i])
		}
	}
}

// checkSrcArea: a WRITE's source area holds, after its completion, exactly
// what the application staged (the engine only reads a source) and poison
// elsewhere; then it is poisoned for the slot's next op.
func (p *portal) checkSrcArea(o *op) {
	s := p.a.s
	base := o.slotIdx * areaBytes
	area := p.wsrc.mem[base : base+areaBytes]
	lo, hi := o.fillLo, o.fillHi
	want := s.expect[:hi-lo]
	if o.rekey {
		copy(want, o.newKr[:])
	} else {
		stampBytes(want, o.stamp, o.fillOff)
	}
	if i := firstDiff(area[lo:hi], want); i >= 0 {
		s.fail("%s: byte %d of its source was changed (%#02x, staged %#02x)", o, i, area[lo+i], want[i])
		return
	}
	if i := firstNotPoison(area[:lo]); i >= 0 {
		s.fail("%s: byte %d of its slot's source area, before the staged range, was written (%#02x)", o, i, area[i])
		return
	}
	if i := firstNotPoison(area[hi:]); i >= 0 {
		s.fail("%s: byte %d of its slot's source area, after the staged range, was written (%#02x)", o, hi+i, area[hi+i])
		return
	}
	fill(area[lo:hi], poison)
}

// snapshot records, for a valid READ of a remote-writable region, the
// model's bytes of its range and the region's commit count when posted:
// the read may return, chunk by chunk, any version of the range from then
// until its completion.
func (s *Sim) snapshot(o *op) {
	rg := o.target
	var b []byte
	if k := len(s.snapPool); k > 0 {
		b, s.snapPool = s.snapPool[k-1], s.snapPool[:k-1]
	} else {
		b = make([]byte, abi.MaxOpBytes)
	}
	o.snap = b[:o.cmd.Length]
	copy(o.snap, rg.shadow[o.cmd.RemoteOffset:])
	o.c0 = len(rg.commits)
}

func (s *Sim) releaseSnap(o *op) {
	if o.snap != nil {
		s.snapPool = append(s.snapPool, o.snap[:cap(o.snap)])
		o.snap = nil
	}
}

// checkReadOfWritten checks the data of a valid READ of a remote-writable
// region (got: its sink range). The server seals each response chunk
// straight from region memory in one pass, and commits are atomic, so an
// OK read's every chunk equals one version of its range (the snapshot at
// posting, or it after some of the commits that followed, in order);
// different chunks may show different versions (reads are not atomic
// against writes). A failed read's bytes are each of some version,
// untouched, or (zeroOK) zero.
func (p *portal) checkReadOfWritten(o *op, st abi.Status, got []byte, zeroOK bool) {
	s := p.a.s
	rg := o.target
	off, ln := o.cmd.RemoteOffset, uint64(o.cmd.Length)
	cur := s.expect[:ln]
	copy(cur, o.snap)
	var later []commitRec
	for _, c := range rg.commits[o.c0:] {
		if c.off < off+ln && off < c.off+uint64(c.n) {
			later = append(later, c)
		}
	}
	s.res.ReadsOfWritten++
	apply := func(c commitRec) (lo, hi uint64) {
		lo, hi = max(c.off, off)-off, min(c.off+uint64(c.n), off+ln)-off
		stampBytes(cur[lo:hi], c.stamp, lo+off)
		return lo, hi
	}
	if st == abi.StatusOK {
		mp := uint64(min(wire.MaxPayload(s.cfg.MTU), abi.MaxOpBytes))
		nch := int((ln + mp - 1) / mp)
		var version [abi.MaxOpBytes / 64]int // per chunk: the version it matched, -1: none yet
		for k := 0; k < nch; k++ {
			version[k] = -1
		}
		match := func(v int, lo, hi uint64) {
			for k := int(lo / mp); k < nch && uint64(k)*mp < hi; k++ {
				a, b := uint64(k)*mp, min(uint64(k+1)*mp, ln)
				if version[k] < 0 && bytes.Equal(got[a:b], cur[a:b]) {
					version[k] = v
				}
			}
		}
		match(0, 0, ln)
		for v, c := range later {
			lo, hi := apply(c)
			match(v+1, lo, hi)
		}
		mixed := false
		for k := 0; k < nch; k++ {
			if version[k] < 0 {
				a, b := uint64(k)*mp, min(uint64(k+1)*mp, ln)
				i := a + uint64(firstDiff(got[a:b], o.snap[a:b]))
				s.fail("corrupted data accepted: %s completed OK but its chunk [%d,%d) matches no version of the range "+
					"(the snapshot at posting and %d commits since; byte %d is %#02x, was %#02x)", o, a, b, len(later), i, got[i], o.snap[i])
				return
			}
			if version[k] != version[0] {
				mixed = true
			}
		}
		if mixed {
			s.res.ReadsMixed++
		}
		return
	}
	ok := s.okByte[:ln]
	for i := range ok {
		b := got[i]
		ok[i] = b == cur[i] || b == poison || (b == 0 && zeroOK)
	}
	for _, c := range later {
		lo, hi := apply(c)
		for i := lo; i < hi; i++ {
			ok[i] = ok[i] || got[i] == cur[i]
		}
	}
	for i, v := range ok {
		if !v {
			s.fail("%s failed with %v but byte %d of its sink is %#02x (no version of the range, nor untouched)", o, st, i, got[i])
			return
		}
	}
}

// forgeWrite alters one byte of a WRITE's data chunk (③) and reseals it,
// as only a holder of the write's K_d and the pull's IV could: the
// simulator knows every K_r and saw every pull.
func (s *Sim) forgeWrite(f *frame) {
	var h wire.Fields
	b := f.buf[:f.n]
	p, err := wire.Decode(b, &h)
	if err != nil || h.Type != wire.TypeWriteData || len(p) == 0 {
		return
	}
	ini := s.nodeOfIP(h.SrcIP)
	if ini < 0 {
		return
	}
	o := s.writes[reqRef{ini, h.Tag}]
	if o == nil || o.keyRg == nil || o.kind != kValid {
		return
	}
	a, err := aesni.NewAEAD(o.keyRg.keys[o.keyVer].d.Derive(s.nodes[ini].ip.As4(), h.PID, uint8(abi.OpWrite)))
	if err != nil {
		panic(err)
	}
	pt := make([]byte, len(p))
	for _, iv := range o.pullIVs {
		if a.OpenResponseDirect(pt, wire.Sealed(b, len(p)), wire.IV(b), wire.AAD(b), iv[:]) != nil {
			continue
		}
		pt[s.netRng.IntN(len(pt))] ^= 0x10
		a.SealResponse(wire.Sealed(b, len(p)), pt, wire.IV(b), wire.AAD(b), iv[:])
		s.res.Net.Forged++
		return
	}
}
