package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// WRITE is a request to read (paper §5.1, Figure 7), in four hops:
//
//	① initiator → server  TypeWriteReq   region, offset, length; GMAC under K_d(WRITE)
//	② server → initiator  TypePullReq    when the server's own window allows; carries the
//	                                     server's IV (its entropy), a pull handle and the
//	                                     server's timeout; sealed under K_d, curried with ①'s IV
//	③ initiator → server  TypeWriteData  the data, chunk by chunk, sealed straight from the
//	                                     source region under K_d, curried with ②'s IV
//	④ server → initiator  TypeAck        after commit; under K_d, curried with ②'s IV
//
// The data lands in a staging buffer of the pull context and is copied to
// the region only when every chunk has arrived and authenticated before
// the pull's deadline: a failed WRITE leaves the region untouched. The
// initiator, on ②, moves its own deadline to the server's timeout counted
// from ②'s arrival, which is later than the server's deadline counted
// from ②'s departure: the initiator always times out last, so no write
// reported failed can change remote memory afterwards. Replaying ① makes
// the server pull again, under a fresh IV, from an initiator that no
// longer has the op (its answer is stale and dropped): a new request that
// finds no context or window free reclaims such pulls, once no chunk has
// answered them for PullIdleTimeout (pullRoom); replayed data or
// acknowledgments are curried with an IV the server never reuses, so they
// fail authentication: replays mutate nothing.
//
// A remote REKEY (paper §5.2) takes the same four hops: its data is the new
// region key K_r (16 bytes, sealed under K_d(REKEY), so never in clear),
// and its commit installs that key instead of copying into the region; its
// acknowledgment is sealed under the old key's K_d. A REKEY reported failed
// therefore never takes effect afterwards.

// maxPullTimeout bounds the timeout a serving engine may ask an initiator
// to adopt (Config.Validate bounds Timeout by the same second).
const maxPullTimeout = int64(time.Second)

// pullCtx is one WRITE being served.
type pullCtx struct {
	used       bool
	op         abi.Op // OpWrite or OpRekey
	gen        uint16
	idle       bool  // on plist[pullsIdle]: no chunk has authenticated yet
	prev, next int32 // in its deadline-ordered list (plist)
	ip         uint32
	mac        wire.MAC
	port       uint16 // the initiator's core port: ② and ④ go there
	pid        uint32
	tag        uint64
	region     abi.RegionID
	offset     uint64
	length     uint32
	arrived    uint64
	want       uint64
	pending    uint64 // ReceiveBurst: units whose open is queued
	deadline   int64  // ② + Timeout: abandoned, uncommitted, when it passes
	idleBy     int64  // ② + pullIdle: while idle, reclaimable from then on
	aead       *aesni.AEAD
	pullIV     [aesni.NonceSize]byte // ②'s IV: curried into ③ and ④
}

// pullList is a doubly linked list of pull contexts (by index; -1 ends it).
type pullList struct{ head, tail int32 }

// The two pull lists (Core.plist).
const (
	pullsIdle = 0 // awaiting the first chunk (in ② order)
	pullsData = 1 // receiving data
)

type pullOutcome uint8

const (
	pullStarted  pullOutcome = iota // ② sent
	pullAnswered                    // refused with an error status (sent, or dropped without IV)
	pullWait                        // no window, context or tx buffer: try again later
)

func (c *Core) pullHandle(idx int32) uint32 { return uint32(c.pulls[idx].gen)<<16 | uint32(idx) }

func (c *Core) pullBuffer(idx int32) []byte {
	o := (int(idx) - 1) * abi.MaxOpBytes
	return c.pullBuf[o : o+abi.MaxOpBytes : o+abi.MaxOpBytes]
}

// startPull serves the WRITE request at the head of the inbound queue:
// checks it, then, once a pull context and ArbitrationBytes of this
// core's window are free, debits the window by the write's length and
// sends ②.
func (c *Core) startPull(now int64, e *inbound) pullOutcome {
	if st := c.checkRequest(e); st != abi.StatusOK {
		if !c.reply(e.mac, e.ip, e.port, e.pid, e.tag, wire.TypeError, st, e.aead, &e.iv) {
			return pullWait
		}
		c.stats.ReqErrors++
		return pullAnswered
	}
	if !c.pullRoom(now) {
		return pullWait
	}
	b := c.tx.Buffer()
	if b == nil {
		c.stats.TxNoBuffer++
		return pullWait
	}
	ctr, err := c.lane.Next()
	if err != nil {
		c.stats.IVErrors++
		return pullAnswered // cannot be sealed: the initiator times out, nothing changes
	}
	idx := int32(c.freePull[len(c.freePull)-1])
	c.freePull = c.freePull[:len(c.freePull)-1]
	p := &c.pulls[idx]
	p.gen++
	*p = pullCtx{
		used: true, op: e.op, gen: p.gen, idle: true, prev: -1, next: -1,
		ip: e.ip, mac: e.mac, port: e.port, pid: e.pid, tag: e.tag,
		region: abi.RegionID(e.region), offset: e.offset, length: e.length,
		want: unitMask(e.length), deadline: now + int64(c.cfg.Timeout), idleBy: now + c.pullIdle, aead: e.aead,
	}
	aesni.PutNonce(p.pullIV[:], c.ipb, ctr)
	c.windowUsed += int(e.length)
	c.pullInsert(pullsIdle, idx)

	f := &c.txf
	f.DstMAC, f.SrcMAC = e.mac, c.mac
	f.SrcIP, f.DstIP = c.ip, e.ip
	f.SrcPort, f.DstPort = c.myPort, e.port // the data comes back to this core
	f.Type, f.Status, f.Flags = wire.TypePullReq, 0, 0
	f.PID, f.Tag, f.Region = e.pid, e.tag, c.pullHandle(idx)
	f.Length, f.Offset = e.length, uint64(c.cfg.Timeout)
	f.IV = p.pullIV
	n := wire.Encode(b, f, 0)
	c.sealResponse(e.aead, wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), e.iv[:])
	c.emit(b, n)
	return pullStarted
}

// chunkBits checks that a chunk of n bytes at offset off can belong to an
// op of length bytes (aligned, inside, only the last one short) and
// returns the arrival-bitmap bits it covers (one per 64 bytes).
func chunkBits(off, n uint64, length uint32) (uint64, bool) {
	if off%wire.ChunkAlign != 0 || n == 0 || off >= uint64(length) || n > uint64(length)-off ||
		(off+n != uint64(length) && n%wire.ChunkAlign != 0) {
		return 0, false
	}
	first, last := off/wire.ChunkAlign, (off+n+wire.ChunkAlign-1)/wire.ChunkAlign
	if last-first == 64 {
		return math.MaxUint64, true
	}
	return (1<<(last-first) - 1) << first, true
}

// unitMask is the arrival bitmap of a complete op of length bytes.
func unitMask(length uint32) uint64 {
	units := (length + wire.ChunkAlign - 1) / wire.ChunkAlign
	if units == 64 {
		return math.MaxUint64
	}
	return 1<<units - 1
}

// prepPull prepares ② for WRITE op w.idx: authenticated under the op's
// K_d with the write request's IV curried in, it is accepted once
// (finishPull); the op's deadline becomes the server's timeout from now,
// and the data is sent.
func (c *Core) prepPull(frame []byte, w *rxWork) bool {
	f := &w.f
	s := &c.slots[w.idx]
	if s.pulled || f.Length != s.length || int64(f.Offset) > maxPullTimeout || f.Region == 0 {
		c.stats.RxDropped++ // a second pull (replayed write request, duplicate), or nonsense
		return false
	}
	w.open, w.then, w.in, w.curry = openVerify, thenPull, wire.Trailer(frame, 0), s.iv[:]
	return true
}

func (c *Core) finishPull(now int64, w *rxWork, ok bool) {
	if !c.slotStill(w) {
		return
	}
	if !ok {
		c.stats.RxAuthFailed++
		return
	}
	f, i := &w.f, w.idx
	s := &c.slots[i]
	s.pulled = true
	s.pullIV = f.IV
	s.pullPort, s.pullHandle = f.SrcPort, f.Region
	s.sent, s.dataBase = 0, 0
	c.unlink(i)
	s.deadline = now + int64(f.Offset)
	c.insertInService(i)
	if s.orphan { // its source is gone: send nothing, the server commits nothing
		c.complete(now, i, abi.StatusAborted)
		return
	}
	if !c.sendChunks(now, i) {
		c.pushSend(i)
	}
}

// pushSend queues slot i for sendData. A slot is queued at most once (an
// entry outlives its op when the op ends first; it then serves the slot's
// next op, or nothing), so the queue never holds more than Slots entries.
func (c *Core) pushSend(i int32) {
	s := &c.slots[i]
	if s.inSendq {
		return
	}
	s.inSendq = true
	k := c.sendHead + c.sendLen
	if k >= len(c.sendq) {
		k -= len(c.sendq)
	}
	c.sendq[k] = i
	c.sendLen++
}

// sendData resumes WRITEs whose data could not all be sent when their pull
// arrived (no tx buffer), in pull order.
func (c *Core) sendData(now int64) int {
	n := 0
	for c.sendLen > 0 {
		i := c.sendq[c.sendHead]
		s := &c.slots[i]
		if s.state == slotInService && s.op != abi.OpRead && s.pulled && s.sent < s.length {
			if !c.sendChunks(now, i) {
				return n
			}
			n++
		}
		s.inSendq = false
		c.sendHead++
		if c.sendHead == len(c.sendq) {
			c.sendHead = 0
		}
		c.sendLen--
	}
	return n
}

// sendChunks sends the rest of WRITE op i's data, each chunk sealed
// straight from the source region into the frame (one pass, fused with
// the cipher), curried with the pull's IV. It returns false when it ran
// out of tx buffers (call again later). An op whose source region is gone
// fails at once with LOCAL_REGION: its data is incomplete at the server,
// which therefore commits nothing.
func (c *Core) sendChunks(now int64, i int32) bool {
	s := &c.slots[i]
	if s.orphan {
		c.complete(now, i, abi.StatusAborted)
		return true
	}
	var src []byte
	if s.op == abi.OpRekey {
		src = s.newKey[:] // taken from the local region when the command was posted
	} else if r := c.lookupRegion(s.locReg); r != nil {
		src = r.mem[s.locOff : s.locOff+uint64(s.length)]
	} else {
		c.complete(now, i, abi.StatusLocalRegion)
		return true
	}
	if s.dataBase == 0 {
		base, err := c.lane.NextN(aesni.ResponseSpan(s.length))
		if err != nil {
			c.stats.IVErrors++
			c.complete(now, i, abi.StatusAborted) // nothing sent: nothing can be committed
			return true
		}
		s.dataBase = base
	}
	for s.sent < s.length {
		b := c.tx.Buffer()
		if b == nil {
			c.stats.TxNoBuffer++
			return false
		}
		n := min(int(s.length-s.sent), c.maxPayload)
		f := &c.txf
		f.DstMAC, f.SrcMAC = s.mac, c.mac
		f.SrcIP, f.DstIP = c.ip, s.remoteIP
		f.SrcPort, f.DstPort = c.myPort, s.pullPort
		f.Type, f.Status, f.Flags = wire.TypeWriteData, 0, 0
		f.PID = c.portals[s.portal].pid
		f.Tag = uint64(c.cfg.SlotBase+abi.SlotID(i))<<32 | uint64(s.seq)
		f.Region, f.Length, f.Offset = s.pullHandle, uint32(n), uint64(s.sent)
		aesni.PutResponseNonce(f.IV[:], c.ipb, s.dataBase, uint64(s.sent))
		fl := wire.Encode(b, f, n)
		c.sealResponse(s.aead, wire.Sealed(b, n), src[s.sent:s.sent+uint32(n)], wire.IV(b), wire.AAD(b), s.pullIV[:])
		c.emit(b, fl)
		s.sent += uint32(n)
	}
	return true
}

// prepWriteData prepares one chunk of a WRITE being served, to be opened
// into its staging buffer; when the last one has authenticated, before the
// pull's deadline, finishData commits the data to the region and
// acknowledges.
func (c *Core) prepWriteData(frame, payload []byte, w *rxWork) bool {
	f := &w.f
	idx := int32(f.Region & 0xffff)
	if idx == 0 || int(idx) >= len(c.pulls) {
		c.stats.RxStale++
		return false
	}
	p := &c.pulls[idx]
	if !p.used || p.gen != uint16(f.Region>>16) || p.ip != f.SrcIP || p.port != f.SrcPort || p.tag != f.Tag || p.pid != f.PID {
		c.stats.RxStale++ // an ended pull (late, duplicate or replayed data), or not its initiator
		return false
	}
	off, n := f.Offset, uint64(len(payload))
	bits, ok := chunkBits(off, n, p.length)
	if !ok {
		c.stats.RxDropped++
		return false
	}
	if p.arrived&bits != 0 {
		c.stats.RxDuplicate++
		return false
	}
	w.open, w.then, w.a = openDirect, thenData, p.aead
	w.idx, w.seq, w.bits = idx, uint32(p.gen), bits
	w.dst, w.in, w.curry = c.pullBuffer(idx)[off:off+n], wire.Sealed(frame, len(payload)), p.pullIV[:]
	return true
}

func (c *Core) finishData(now int64, w *rxWork, ok bool) {
	idx, bits := w.idx, w.bits
	p := &c.pulls[idx]
	if !p.used || uint32(p.gen) != w.seq { // ended by an earlier frame of the burst
		c.stats.RxStale++
		return
	}
	if !ok {
		c.stats.RxAuthFailed++
		return
	}
	buf := c.pullBuffer(idx)
	if now >= p.deadline {
		return // too late: expirePulls abandons it, uncommitted
	}
	p.arrived |= bits
	if p.arrived != p.want {
		if p.idle { // its initiator answers: no longer reclaimable
			c.pullUnlink(idx)
			p.idle = false
			c.pullInsert(pullsData, idx)
		}
		return // more to come
	}
	if c.tx.Buffer() == nil { // ④ must be sendable: commit only with a frame for it
		c.stats.TxNoBuffer++
		p.arrived &^= bits // its chunk is dropped as if lost; the write times out uncommitted
		return
	}
	r := c.lookupRegion(p.region)
	st := abi.StatusOK
	switch {
	case r == nil: // deregistered while the data was in flight
		st = abi.StatusRemoteRegion
	case p.op == abi.OpRekey:
		c.installKey(p.region, r, aesni.Key(buf[:aesni.KeySize]))
		clear(buf[:aesni.KeySize])
		c.stats.RemoteRekeys++
	case p.offset > uint64(len(r.mem)) || uint64(len(r.mem))-p.offset < uint64(p.length):
		st = abi.StatusRemoteBounds // cannot happen: regions never shrink; kept for safety
	default:
		copy(r.mem[p.offset:p.offset+uint64(p.length)], buf[:p.length])
		c.stats.WritesCommitted++
	}
	t := wire.TypeAck
	if st != abi.StatusOK {
		t = wire.TypeError
		c.stats.ReqErrors++
	}
	c.reply(p.mac, p.ip, p.port, p.pid, p.tag, t, st, p.aead, &p.pullIV)
	c.endPull(idx)
}

// expirePulls abandons, uncommitted, pulls whose data did not all arrive
// within TIMEOUT of ②. Nothing is sent: the initiator times out later.
func (c *Core) expirePulls(now int64) int {
	n := 0
	for k := range c.plist {
		for h := c.plist[k].head; h >= 0 && c.pulls[h].deadline <= now; h = c.plist[k].head {
			c.endPull(h)
			c.stats.PullsExpired++
			n++
		}
	}
	return n
}

// endPull frees pull context idx and refunds its window.
func (c *Core) endPull(idx int32) {
	p := &c.pulls[idx]
	c.windowUsed -= int(p.length)
	c.pullUnlink(idx)
	p.used, p.aead = false, nil
	c.freePull = append(c.freePull, uint16(idx))
}

// pullRoom reports whether a pull context and ArbitrationBytes of window
// are free for a new pull. When not, it first reclaims, uncommitted, the
// oldest pulls no chunk has answered within pullIdle of their ②: a write
// request replayed after its op ended is pulled from an initiator that no
// longer answers, and would otherwise hold a context and window until
// TIMEOUT while genuine requests wait. Without such pressure an idle
// pull keeps its whole TIMEOUT (an initiator may be descheduled for
// milliseconds on a shared CPU). Reclaiming early is safe: nothing is
// committed, and the initiator, whose deadline ② reset, times out after.
func (c *Core) pullRoom(now int64) bool {
	for {
		if len(c.freePull) > 0 && c.cfg.WindowBytes-c.windowUsed >= ArbitrationBytes {
			return true
		}
		h := c.plist[pullsIdle].head
		if h < 0 || c.pulls[h].idleBy > now {
			return false
		}
		c.endPull(h)
		c.stats.PullsExpired++
	}
}

// pullOn is the list pull idx is on.
func (c *Core) pullOn(idx int32) *pullList {
	if c.pulls[idx].idle {
		return &c.plist[pullsIdle]
	}
	return &c.plist[pullsData]
}

// pullUnlink takes pull idx off its list.
func (c *Core) pullUnlink(idx int32) {
	p, l := &c.pulls[idx], c.pullOn(idx)
	if p.prev >= 0 {
		c.pulls[p.prev].next = p.next
	} else {
		l.head = p.next
	}
	if p.next >= 0 {
		c.pulls[p.next].prev = p.prev
	} else {
		l.tail = p.prev
	}
	p.prev, p.next = -1, -1
}

// pullInsert puts pull idx on list k in deadline order, searching from
// the tail: a new pull's deadline is the latest (now + Timeout), and a
// pull moving to pullsData passes only the pulls started after it whose
// first chunk came first.
func (c *Core) pullInsert(k int, idx int32) {
	p, l := &c.pulls[idx], &c.plist[k]
	after := l.tail
	for after >= 0 && c.pulls[after].deadline > p.deadline {
		after = c.pulls[after].prev
	}
	p.prev = after
	if after >= 0 {
		p.next = c.pulls[after].next
		c.pulls[after].next = idx
	} else {
		p.next = l.head
		l.head = idx
	}
	if p.next >= 0 {
		c.pulls[p.next].prev = idx
	} else {
		l.tail = idx
	}
}

// auditPulls checks the pull contexts (free pool, list, deadlines) and
// returns the window they hold.
func (c *Core) auditPulls() (int, error) {
	used, debit, onList := 0, 0, 0
	for i := 1; i < len(c.pulls); i++ {
		if c.pulls[i].used {
			used++
			debit += int(c.pulls[i].length)
		}
	}
	for k, l := range c.plist {
		last := int64(math.MinInt64)
		prev := int32(-1)
		for i := l.head; i >= 0; i = c.pulls[i].next {
			p := &c.pulls[i]
			if !p.used || p.prev != prev || p.deadline < last || p.idle != (k == pullsIdle) || p.idleBy > p.deadline {
				return 0, fmt.Errorf("audit: pull list %d broken at %d", k, i)
			}
			last, prev = p.deadline, i
			if onList++; onList > len(c.pulls) {
				return 0, fmt.Errorf("audit: pull list loops")
			}
		}
		if prev != l.tail {
			return 0, fmt.Errorf("audit: pull list %d: tail %d, last %d", k, l.tail, prev)
		}
	}
	if onList != used || used+len(c.freePull) != len(c.pulls)-1 {
		return 0, fmt.Errorf("audit: pulls: %d used, %d listed, %d free of %d", used, onList, len(c.freePull), len(c.pulls)-1)
	}
	return debit, nil
}
