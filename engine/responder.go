package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// peer is whom the serving side answers for a request: the initiator's
// address, the MAC the request came from (the initiator's, or the last
// router's: answers are not routed, they retrace the request's last hop),
// the op's initiator port, PID and tag, and the op's class (its
// FlagHigh), whose DSCP every answer carries.
type peer struct {
	ip    uint32
	mac   wire.MAC
	port  uint16
	class abi.Class
	pid   uint32
	tag   uint64
}

// peerOf is the peer of a received request.
func peerOf(f *wire.Fields) peer {
	cl := abi.ClassLow
	if f.Flags&wire.FlagHigh != 0 {
		cl = abi.ClassHigh
	}
	return peer{ip: f.SrcIP, mac: f.SrcMAC, port: f.SrcPort, class: cl, pid: f.PID, tag: f.Tag}
}

// inbound is one queued request at the serving side: an entry of the
// pool of its core's queues (fairq.go).
type inbound struct {
	peer
	next    int32  // the next entry of its owner's FIFO, or of the free list (noEntry: none)
	op      abi.Op // OpRead, OpWrite, OpRekey or OpLookup
	chunk   uint16 // a READ's: the most data per response frame (the route's MTU)
	region  uint32
	length  uint32
	offset  uint64
	arrival int64
	sent    uint32
	aead    *aesni.AEAD           // the request's K_d: seals every answer
	iv      [aesni.NonceSize]byte // the request's IV, curried into every answer
	base    uint64                // first server counter of its responses (0: none yet)
	// owner is its region's owner tenant and sender its source address's
	// entry in the senders table (bounds.go): what it is counted against
	// while queued, and its pull once pulled.
	owner  uint16
	sender int32
	// deferred: a WRITE or REKEY found waiting behind its bound of pulls
	// (counted once).
	deferred bool
	// epoch is the key epoch of the region's K_r its K_d was derived from
	// (the key it authenticated under): a REKEY installs only under it.
	epoch uint64
	// lk is a LOOKUP's tag and, once scanned, its answer (lookup.go).
	lk lookupAnswer
}

// responder is the serving side of a core: it authenticates requests
// (deriving each initiator's K_d from the region's K_r), drops replays,
// queues requests per class and NACKs beyond the threshold, streams READ
// responses straight from region memory, and serves WRITEs and REKEYs by
// pulling their data (pull.go).
type responder struct {
	nackThreshold int
	serveBudget   int
	lowAfterHigh  int // Config.LowAfterHigh
	timeout       int64

	// ents holds every queued request, each in one of the queues below
	// (fairq.go: a FIFO per region owner, the owners in turns).
	ents inboundPool
	// The inbound request queues, one per class (the request's
	// wire.FlagHigh, set by the initiating engine from its portal's
	// class), served high first without starving low (serveArb), each
	// class's owners by deficit round robin. resume[cl] is the owner
	// whose head request of class cl was granted and not finished (a
	// READ partly streamed, an answer with no tx buffer): it goes on
	// before any other of its class (noTenant: none).
	inq      [abi.NumClass]fairQueue
	resume   [abi.NumClass]int32
	serveArb classArbiter
	// WRITE and REKEY requests taken from inq wait here, per class, for a
	// pull context and window (startPulls), so reads behind them are
	// served meanwhile: the pull is an op of the serving side, subject to
	// its window like the ops it initiates (paper §5.1). Each holds at
	// most pullCap (InboundQueue) requests.
	pullq   [abi.NumClass]fairQueue
	pullCap int
	pullArb classArbiter

	// Pull contexts, each with a staging buffer, kept in deadline order
	// on two intrusive lists (pull.go).
	pulls    []pullCtx // index 0 unused: handle 0 is never valid
	freePull []uint16
	// plist: the pulls in progress, by deadline: plist[pullsIdle] those
	// awaiting their first chunk (reclaimable after pullIdle, pullRoom),
	// plist[pullsData] those receiving data.
	plist    [2]pullList
	pullIdle int64 // min(PullIdleTimeout, Timeout), or Timeout/4, in ns
	pullBuf  []byte

	replay *replayTable // anti-replay windows per owner and sender lane (replay.go); nil when off
	// bounds counts what each region owner and each sender holds of the
	// queues and pull contexts, against their bounds (bounds.go).
	bounds bounds
	// pullGen counts the pulls ended. The requests of pullq[cl] found
	// blocked by their bounds (each owner's up to its skipTo) stay known
	// so while the memo epoch their owner found them at is memo[cl]; the
	// epoch moves on when pullGen is no longer skipGen[cl] (an ended
	// pull unblocks one: pullReady), or when some were found (skipped)
	// and an idle pull became reclaimable (reclaimIdle) since the scan
	// that found them began, at scanAt[cl]. polledAt is the last
	// startPulls.
	pullGen  uint64
	skipGen  [abi.NumClass]uint64
	memo     [abi.NumClass]uint64
	skipped  [abi.NumClass]bool
	scanAt   [abi.NumClass]int64
	polledAt int64
	// queuedAt and mark are Audit's (tests, the simulator): the pool's
	// entries found queued are marked.
	queuedAt []uint32
	mark     uint32
	// keys caches the AEADs of the K_d derived for inbound requests; last
	// memoizes the last lookup, so a stream of requests from one
	// initiator to one region skips the cache probe. Both are reset
	// whenever a region's key changes or the region goes.
	keys     *aesni.Cache
	lastKey  aesni.CacheKey
	lastAEAD *aesni.AEAD
	// seen is, by region index, the region id and key epoch the cached
	// K_d of that index were derived under: a region rekeyed (by any
	// core, or remotely) or replaced since carries another epoch, and
	// the first lookup that sees it forgets the old ones.
	seen []seenKey
	// seenDead is the same for the tombstone at each index (regions.go):
	// a region's key is kept apart from its successor's at the index, so
	// requests for both do not forget each other's K_d.
	seenDead []seenKey

	out     *sender
	win     *window
	bulk    *bulkBound
	regions *regionView
	routes  *routeTable
	st      *Stats
	tstats  []TenantCounters // by owner tenant
	tgen    *tenantGens      // the tenant indices' generations (tenants.go)
}

func newResponder(cfg *Config, keys *aesni.Cache, seed uint64, parts *Core) *responder {
	r := &responder{
		nackThreshold: cfg.NackThreshold,
		serveBudget:   cfg.ServeBudget,
		lowAfterHigh:  cfg.LowAfterHigh,
		timeout:       int64(cfg.Timeout),
		serveArb:      classArbiter{burst: cfg.HighBurst},
		pullArb:       classArbiter{burst: cfg.HighBurst},
		pulls:         make([]pullCtx, cfg.PullContexts+1),
		freePull:      make([]uint16, 0, cfg.PullContexts),
		plist:         [2]pullList{{-1, -1}, {-1, -1}},
		pullIdle:      int64(cfg.Timeout / 4),
		// every class's inbound queue up to its NACK threshold, and its
		// pull queue up to pullCap
		ents:     newInboundPool(int(abi.NumClass) * (cfg.NackThreshold + cfg.InboundQueue)),
		pullCap:  cfg.InboundQueue,
		pullBuf:  make([]byte, cfg.PullContexts*abi.MaxOpBytes),
		replay:   newReplayTable(cfg.ReplayPeers, cfg.Tenants, cfg.ServingBounds().ReplayLanesPerSender, seed, parts.tstats),
		bounds:   newBounds(cfg, mix64(seed)),
		keys:     keys,
		seen:     make([]seenKey, cfg.Regions+1),
		seenDead: make([]seenKey, cfg.Regions+1),
		out:      parts.out,
		win:      parts.win,
		bulk:     parts.bulk,
		regions:  parts.regions,
		routes:   parts.routes,
		st:       &parts.stats,
		tstats:   parts.tstats,
		tgen:     parts.tgen,
	}
	for k := range r.inq {
		r.inq[k] = newFairQueue(cfg.Tenants, parts.tgen)
		r.inq[k].shortFirst = cfg.PollBytes > 0
		r.pullq[k] = newFairQueue(cfg.Tenants, parts.tgen)
		r.resume[k] = noTenant
	}
	if cfg.PullIdleTimeout > 0 {
		r.pullIdle = min(int64(cfg.Timeout), int64(cfg.PullIdleTimeout))
	}
	for i := cfg.PullContexts; i >= 1; i-- {
		r.freePull = append(r.freePull, uint16(i))
		r.pulls[i].prev, r.pulls[i].next = -1, -1
	}
	return r
}

// ---- keys ----------------------------------------------------------------

// seenKey is the region id and key epoch of a region index's cached K_d,
// and this core's Deriver of that key.
type seenKey struct {
	rid   uint32
	epoch uint64
	kr    *aesni.Deriver
}

// serverKey returns the AEAD of the K_d the received request's initiator
// must have used for op on the region rg it names (requestRegion):
// derived from the region's K_r and the request's source address and PID
// (paper §4.2). gone: the region has left the table and rg is its
// tombstone (the request, once it authenticates, is answered
// REMOTE_REGION). nil when the key cannot be derived.
func (r *responder) serverKey(op abi.Op, f *wire.Fields, rg *region, gone bool) *aesni.AEAD {
	rid := abi.RegionID(f.Region)
	seen := r.seen
	if gone {
		seen = r.seenDead
	}
	s := &seen[rid.Index()]
	if s.epoch != rg.epoch { // a new key (or region) since this core last looked
		if s.epoch != 0 {
			r.forgetKeys(abi.RegionID(s.rid))
		}
		if gone && s.rid != f.Region {
			// The K_d cached for rid were derived while it was live, under
			// the key the live side last saw: keep them only if that is
			// the tombstone's.
			if l := &r.seen[rid.Index()]; l.rid != f.Region || l.epoch != rg.epoch {
				r.forgetKeys(rid)
			}
		}
		s.rid, s.epoch, s.kr = f.Region, rg.epoch, nil
		r.lastAEAD = nil
	}
	ck := aesni.CacheKey{Region: f.Region, PID: f.PID, Op: uint8(op)}
	binary.BigEndian.PutUint32(ck.Peer[:], f.SrcIP)
	if r.lastAEAD != nil && r.lastKey == ck {
		return r.lastAEAD
	}
	if s.kr == nil { // the first derivation under this key on this core (allocates, as a miss does)
		s.kr = aesni.NewDeriver(rg.kr)
	}
	a, err := r.keys.GetOrDerive(ck, s.kr)
	if err != nil {
		return nil
	}
	r.lastKey, r.lastAEAD = ck, a
	return a
}

// requestRegion is the region a received request names: live, or its
// tombstone (gone) when it was the last to leave its index; nil when
// neither.
func (r *responder) requestRegion(f *wire.Fields) (rg *region, gone bool) {
	rid := abi.RegionID(f.Region)
	if rg = r.regions.lookup(rid); rg != nil {
		return rg, false
	}
	if rg = r.regions.t.lookupDead(rid); rg != nil {
		return rg, true
	}
	return nil, false
}

// installKey replaces region rid's K_r in the engine's table (a local or
// a remote rekey): requests that arrive afterwards, at any core,
// authenticate only with K_d derived from it. want is the key epoch the
// rekey was asked under (a remote REKEY's request), 0 for the owner's
// local Rekey (regionTable.setKey).
func (r *responder) installKey(rid abi.RegionID, kr aesni.Key, want uint64) keySet {
	rg, how := r.regions.t.setKey(rid, kr, want)
	if how != keyInstalled {
		return how
	}
	r.forgetKeys(rid)
	r.seen[rid.Index()] = seenKey{rid: uint32(rid), epoch: rg.epoch}
	r.st.Rekeys++
	return keyInstalled
}

// forgetKeys drops the K_d derived for region rid.
func (r *responder) forgetKeys(rid abi.RegionID) {
	r.keys.Invalidate(uint32(rid))
	r.lastAEAD = nil
}

// ---- requests ------------------------------------------------------------

// prepRequest prepares a request for its authentication (finishRequest
// queues it, or NACKs it). The serving side derives the initiator's K_d
// from the region's K_r and the request's own address, PID and op type
// (paper §4.2); a request it cannot authenticate (wrong key, unknown or
// stale region, tampered header) is answered at once with
// REMOTE_AUTHENTICATION_FAILURE sealed with the reserved key. A request
// for a region that has left the table, authenticated with the key of
// its tombstone, is answered at once with REMOTE_REGION under its K_d
// (w.st). The answer goes to the request's source MAC; the neighbor
// table learns nothing from requests, so forged sources cannot fill it.
//
// A request whose IV names another address than the frame's source is
// dropped first, unanswered (Stats.ReqIVMismatch; per owner when it
// names a live region): a genuine sender's IV is its own address, and
// the replay window a request moves must be that of the address its K_d
// is bound to (replay.go). prepRequest reports whether w is to be opened.
func (r *responder) prepRequest(frame []byte, w *rxWork) bool {
	f := &w.f
	rg, gone := r.requestRegion(f)
	if binary.BigEndian.Uint32(f.IV[0:4]) != f.SrcIP {
		r.st.ReqIVMismatch++
		if rg != nil && !gone {
			r.tstats[rg.tenant].IVMismatch++
		}
		return false
	}
	w.op = abi.OpRead
	switch f.Type {
	case wire.TypeWriteReq:
		w.op = abi.OpWrite
	case wire.TypeRekeyReq:
		w.op = abi.OpRekey
	case wire.TypeLookupReq:
		w.op = abi.OpLookup
	}
	w.a, w.owner, w.oGen, w.epoch = nil, 0, 0, 0
	if rg != nil {
		w.a, w.owner, w.oGen, w.epoch = r.serverKey(w.op, f, rg, gone), rg.tenant, r.tgen.of(rg.tenant), rg.epoch
	}
	w.open, w.then, w.in, w.st = openRequest, thenRequest, wire.Trailer(frame, 0), abi.StatusOK
	if w.a == nil {
		w.open = openFail
	} else if gone {
		w.st = abi.StatusRemoteRegion
	}
	return true
}

func (r *responder) finishRequest(now int64, w *rxWork, ok bool) {
	f := &w.f
	from := peerOf(f)
	if !ok {
		r.st.ReqAuthFailed++
		r.reply(&from, wire.TypeError, abi.StatusRemoteAuthFailure, nil, &f.IV)
		return
	}
	if r.replay != nil {
		_, ctr := aesni.NonceCounter(f.IV[:]) // its address is f.SrcIP (prepRequest)
		switch r.replay.accept(w.owner, w.oGen, f.SrcIP, ctr) {
		case replaySeen:
			r.st.ReqReplayed++
			return // no answer: only the genuine request gets one
		case replayNoLane:
			r.st.ReplayLanesRefused++
			return
		}
	}
	a := w.a
	if w.st == abi.StatusRemoteRegion { // its region is gone; its initiator holds a key of it
		r.reply(&from, wire.TypeError, abi.StatusRemoteRegion, a, &f.IV)
		r.st.ReqErrors++
		return
	}
	q := &r.inq[from.class]
	snd, why := r.bounds.admit(w.owner, f.SrcIP)
	if why == refuseNone && q.len() >= r.nackThreshold {
		r.bounds.unqueue(w.owner, snd)
		why = refuseQueue
	}
	if why != refuseNone {
		r.reply(&from, wire.TypeNack, 0, a, &f.IV)
		r.st.ReqNacked++
		ts := &r.tstats[w.owner]
		switch why {
		case refuseOwner:
			r.st.ReqNackedOwner++
			ts.NackedOwner++
		case refuseSender:
			r.st.ReqNackedSender++
			ts.NackedSender++
		default:
			ts.Nacked++
		}
		return
	}
	if snd == senderOverflow {
		r.st.SenderOverflow++
	}
	i := r.ents.get() // below the NACK threshold: the pool has room (fairq.go)
	e := &r.ents.e[i]
	*e = inbound{
		peer: from, op: w.op, chunk: uint16(r.out.maxPayload),
		region: f.Region, length: f.Length, offset: f.Offset, arrival: now,
		aead: a, iv: f.IV, owner: w.owner, sender: snd, epoch: w.epoch,
	}
	if w.op == abi.OpLookup { // the bucket's offset and the tag (wire.TypeLookupReq)
		e.offset = uint64(f.Aux)
		e.lk = lookupAnswer{tag: f.Offset, bucket: f.Flags&wire.FlagBucket != 0}
	}
	if w.op == abi.OpRead || w.op == abi.OpLookup { // its data goes back at most its route's MTU per frame
		if rt := r.routes.lookup(f.SrcIP); rt != nil {
			e.chunk = uint16(rt.maxPayload)
		}
	}
	q.push(r.ents.e, i, w.owner)
	if prio(from.class, f.Length) {
		r.bulk.srv++
		r.bulk.saw(now, from.class)
	}
	if d := uint64(r.inq[0].len() + r.inq[1].len()); d > r.st.ReqQueueMax {
		r.st.ReqQueueMax = d
	}
}

// reply sends a payload-free answer (NACK, error status, acknowledgment)
// to a request of peer to, sealed under the request's K_d a with reqIV
// (the request's or the pull's IV) curried in, or, when a is nil, as
// REMOTE_AUTHENTICATION_FAILURE under the reserved key. It returns false
// when the answer could not be sent now (no tx buffer); an answer that
// can never be sealed (no IV counter) is dropped and counted.
func (r *responder) reply(to *peer, t wire.Type, st abi.Status, a *aesni.AEAD, reqIV *[aesni.NonceSize]byte) bool {
	o := r.out
	b := o.buffer()
	if b == nil {
		return false
	}
	ctr, ok := o.counter()
	if !ok {
		return true
	}
	f := &o.hdr
	f.DstMAC, f.SrcMAC = to.mac, o.mac
	f.SrcIP, f.DstIP = o.ip, to.ip
	f.SrcPort, f.DstPort = o.udp, to.port
	f.DSCP = o.dscp[to.class]
	f.Type, f.Status, f.Flags, f.Aux = t, uint8(st), 0, 0
	f.PID, f.Tag, f.Region, f.Length, f.Offset = to.pid, to.tag, 0, 0, 0
	aesni.PutNonce(f.IV[:], o.ipb, ctr)
	n := wire.Encode(b, f, 0)
	if a == nil {
		o.sealFor(b).sealAuthFailure(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b), reqIV[:])
	} else {
		o.sealFor(b).sealResponse(a, wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), reqIV[:])
	}
	o.emit(b, n)
	return true
}

// ---- serving -------------------------------------------------------------

// serve answers queued requests, at most ServeBudget per Poll, streaming
// each READ as MTU-sized responses straight from region memory. The
// classes go by serveArb, and each class's owners take turns (fairq.go);
// a request granted and not finished (resume) goes on first in its
// class. Once a high-class frame has left in this Poll (a request of the
// initiator, or a response served here), at most LowAfterHigh low-class
// requests follow it, unless the low class's turn comes by the HighBurst
// rule or its next request has waited lowHoldMax: the rest wait for the
// next Poll, which follows at once.
func (r *responder) serve(now int64) int {
	served, lowLeft := 0, r.lowAfterHigh
	ents := r.ents.e
	for served < r.serveBudget {
		hi, lo := r.inq[abi.ClassHigh].len() > 0, r.inq[abi.ClassLow].len() > 0
		cl, ok := r.serveArb.pick(hi, lo)
		if !ok {
			break
		}
		q := &r.inq[cl]
		t, resumed := r.resume[cl], true
		if t < 0 {
			t, resumed = q.head, false
			if q.owners > 1 {
				t = q.turn(ents)
			}
		}
		i := q.o[t].head
		e := &ents[i]
		if cl == abi.ClassLow && !hi && r.out.highOut && r.lowAfterHigh > 0 && now-e.arrival < r.timeout/lowHoldDiv {
			if lowLeft == 0 {
				break
			}
			lowLeft--
		}
		arb := r.serveArb
		r.serveArb.granted(cl, lo)
		if now-e.arrival > r.timeout { // its initiator has given up
			r.st.ReqExpired++
			r.dequeue(cl, t, i)
			continue
		}
		if e.op == abi.OpWrite || e.op == abi.OpRekey { // pulled when window allows (startPulls)
			if r.pullq[cl].len() >= r.pullCap {
				return served // the pull queue is full: it waits at its owner's head
			}
			if q.owners > 1 {
				q.charge(t, costOf(e))
			}
			q.pop(ents, t)
			r.pullq[cl].push(ents, i, e.owner)
			served++
			continue
		}
		if e.sent == 0 && !r.bulk.take(now, bulkServe, cl, e.length, now-e.arrival >= r.timeout/bulkAgeDiv) { // the next Poll serves it
			r.serveArb = arb
			break
		}
		if !resumed && q.owners > 1 {
			q.charge(t, costOf(e))
		}
		if e.sent == 0 {
			// A LOOKUP whose error answer could not be sent (no tx buffer)
			// answers with what its scan found; one of whose answer nothing
			// was sent is scanned again (below).
			st := e.lk.err
			if !e.lk.scanned {
				st = r.checkRequest(e)
				if st == abi.StatusOK && e.op == abi.OpLookup {
					st = r.scan(e, r.regions.lookup(abi.RegionID(e.region)))
				}
			}
			if st != abi.StatusOK {
				if !r.reply(&e.peer, wire.TypeError, st, e.aead, &e.iv) {
					r.resume[cl] = t
					return served
				}
				r.st.ReqErrors++
				r.dequeue(cl, t, i)
				served++
				continue
			}
		}
		rg := r.regions.lookup(abi.RegionID(e.region))
		if rg == nil { // deregistered while partly sent: the initiator times out
			r.st.ReqExpired++
			r.dequeue(cl, t, i)
			continue
		}
		if e.base == 0 { // counters for every chunk offset: nonces follow from offsets
			span := aesni.ResponseSpan(e.length)
			if e.op == abi.OpLookup {
				span = aesni.ResponseSpan(e.lk.total)
			}
			base, ok := r.out.counters(span)
			if !ok { // dropped: its initiator times out
				r.dequeue(cl, t, i)
				continue
			}
			e.base = base
		}
		if e.op == abi.OpLookup {
			done, gone := r.streamLookup(e, rg)
			if gone { // its target's region was deregistered while partly sent: the initiator times out
				r.st.ReqExpired++
				r.dequeue(cl, t, i)
				continue
			}
			if !done {
				if e.sent == 0 {
					// Nothing of the answer went (no tx buffer): it is scanned
					// again when it goes, with fresh counters for its length,
					// so that its status and bytes are of one state.
					e.lk.scanned, e.base = false, 0
				}
				r.resume[cl] = t
				return served
			}
		} else if !r.stream(e, rg) {
			r.resume[cl] = t
			return served // resume this request on the next Poll
		}
		if e.class == abi.ClassHigh {
			r.out.highOut = true
		}
		r.st.ReqServed++
		r.dequeue(cl, t, i)
		served++
	}
	return served
}

// dequeue takes request i, the head of owner t's FIFO of inq[cl], out of
// the queue and out of its bounds, and frees its entry: it is done.
func (r *responder) dequeue(cl abi.Class, t, i int32) {
	e := &r.ents.e[i]
	r.bounds.unqueue(e.owner, e.sender)
	r.unprio(e)
	r.resume[cl] = noTenant // t's, if it was: its head was the one granted
	// fairQueue.pop, by hand on the hot path (an inbound queue skips nothing)
	q := &r.inq[cl]
	o := &q.o[t]
	if q.shortFirst {
		o.served(r.ents.e, i, noEntry)
	}
	o.head = e.next
	o.n--
	q.n--
	if o.n == 0 {
		q.emptied(t)
	}
	r.ents.put(i)
}

// stream sends the rest of READ request e from region rg, each response
// sealed straight from region memory into the frame (the data moves once,
// fused with the cipher), at most e.chunk bytes a frame, to the MAC the
// request came from. It returns false when it ran out of tx buffers: the
// rest is sent on a later Poll.
func (r *responder) stream(e *inbound, rg *region) bool {
	o := r.out
	f := &o.hdr
	f.DstMAC, f.SrcMAC = e.mac, o.mac
	f.SrcIP, f.DstIP = o.ip, e.ip
	f.SrcPort, f.DstPort = o.udp, e.port
	f.DSCP = o.dscp[e.class]
	f.Type, f.Status, f.Flags, f.Aux = wire.TypeReadResp, 0, 0, 0
	f.PID, f.Tag, f.Region = e.pid, e.tag, e.region
	return o.stream(e.aead, rg.mem[e.offset:e.offset+uint64(e.length)], int(e.chunk), &e.sent, 0, e.base, e.iv[:])
}

// lowHoldDiv: a low-class request that has waited TIMEOUT/lowHoldDiv is
// served whatever high-class frames left before it (serve), so the
// LowAfterHigh bound cannot hold the low class back until its initiator
// gives up.
const lowHoldDiv = 8

// checkRequest decides whether a request may be served. A request whose
// region vanished while it was partly sent is cut short by the same check.
// A REKEY whose region's key changed since its request authenticated (its
// owner's Rekey, or another REKEY) gets REMOTE_REGION: it would install
// over a key its asker never held (regionTable.setKey).
func (r *responder) checkRequest(e *inbound) abi.Status {
	if e.length == 0 || e.length > abi.MaxOpBytes {
		return abi.StatusRemoteBounds
	}
	rg := r.regions.lookup(abi.RegionID(e.region))
	if rg == nil {
		return abi.StatusRemoteRegion
	}
	if e.op == abi.OpLookup {
		return checkLookup(e, rg)
	}
	need := abi.PermRemoteRead
	switch e.op {
	case abi.OpWrite:
		need = abi.PermRemoteWrite
	case abi.OpRekey:
		need = abi.PermRemoteRekey
	}
	if rg.perm&need == 0 {
		return abi.StatusRemotePermission
	}
	if e.op == abi.OpRekey { // its data is the region's key, not bytes of the region
		if rg.epoch != e.epoch {
			return abi.StatusRemoteRegion
		}
		return abi.StatusOK
	}
	if e.offset > uint64(len(rg.mem)) || uint64(len(rg.mem))-e.offset < uint64(e.length) {
		return abi.StatusRemoteBounds
	}
	return abi.StatusOK
}

// startPulls serves the WRITE and REKEY requests waiting for a pull
// context and window, high class first with the HighBurst rule, each
// class's owners in turns (fairq.go). Requests older than TIMEOUT are
// dropped (their initiators have given up). A request whose owner or
// sender holds its bound of pulls (bounds.go) waits where it is while
// those behind it are served: its owner's next that may start is taken,
// or, when none may, the next owner's.
func (r *responder) startPulls(now int64) int {
	n := 0
	r.polledAt = now
	for {
		ht, hp, hi := r.pullReady(now, abi.ClassHigh)
		lt, lp, li := r.pullReady(now, abi.ClassLow)
		cl, ok := r.pullArb.pick(hi >= 0, li >= 0)
		if !ok {
			return n
		}
		t, prev, i := ht, hp, hi
		if cl == abi.ClassLow {
			t, prev, i = lt, lp, li
		}
		e := &r.ents.e[i]
		if now-e.arrival > r.timeout {
			r.st.ReqExpired++
			r.bounds.unqueue(e.owner, e.sender)
			r.pullRemove(cl, t, prev, i)
			continue
		}
		if !r.bulk.take(now, bulkPull, cl, e.length, now-e.arrival >= r.timeout/bulkAgeDiv) { // the next Poll pulls it
			return n
		}
		switch r.startPull(now, e) {
		case pullWait: // no window, context or tx buffer now: resume next Poll
			return n
		case pullStarted:
			r.st.PullsIssued++
		case pullAnswered:
			r.bounds.unqueue(e.owner, e.sender)
		}
		r.pullArb.granted(cl, li >= 0)
		if q := &r.pullq[cl]; q.owners > 1 {
			q.charge(t, costOf(e))
		}
		r.pullRemove(cl, t, prev, i)
		n++
	}
}

// pullReady is the request of pullq[cl] startPulls may take next (i),
// its owner t and its predecessor in the owner's FIFO (prev); i < 0 when
// none. An owner's head older than TIMEOUT is taken first, whatever the
// turn, so that no head stays expired (each owner's FIFO is in arrival
// order: nextDeadline looks at the heads). Else the owners' turns go as
// in the inbound queues (fairQueue.turn), among the owners that have a
// request that may start: one older than TIMEOUT, or one whose owner and
// sender are within their bounds of pulls. An owner with none is passed
// over where it stands in the ring.
func (r *responder) pullReady(now int64, cl abi.Class) (t, prev, i int32) {
	q := &r.pullq[cl]
	if q.len() == 0 {
		return noTenant, noEntry, noEntry
	}
	for t = q.head; t >= 0; t = q.o[t].next {
		if h := q.o[t].head; now-r.ents.e[h].arrival > r.timeout {
			return t, noEntry, h
		}
	}
	if r.skipGen[cl] != r.pullGen || (r.skipped[cl] && r.nextIdle(r.scanAt[cl]) <= now) {
		r.newMemo(now, cl)
	}
	t = q.head
	for steps := 2 * q.owners; t >= 0 && steps > 0; steps-- {
		o := &q.o[t]
		next := o.next
		p, k, expired := r.ownerReady(now, cl, t)
		switch {
		case k < 0:
			t = next
			continue
		case expired || q.owners == 1 || o.deficit >= costOf(&r.ents.e[k]):
			return t, p, k
		}
		if next >= 0 { // its turn is over; else, last, it is the next one's
			q.toBack(t)
			t = next
		} else {
			o.deficit += q.quantum(t)
		}
	}
	return noTenant, noEntry, noEntry
}

// newMemo forgets the requests of pullq[cl] found blocked.
func (r *responder) newMemo(now int64, cl abi.Class) {
	r.skipGen[cl], r.skipped[cl], r.scanAt[cl] = r.pullGen, false, now
	r.memo[cl]++
}

// ownerReady is owner t's first request in pullq[cl] that may start: one
// older than TIMEOUT (expired), or within its owner's and sender's
// bounds of pulls; i < 0 when none may. The requests before it are
// blocked by their bounds (each counted once, PullsDeferred): they are
// remembered (ownerFIFO.skipTo) until a pull ends or an idle pull becomes
// reclaimable, the events that unblock one (pullReady), so a queue of
// blocked writes costs a Poll nothing until then.
func (r *responder) ownerReady(now int64, cl abi.Class, t int32) (prev, i int32, expired bool) {
	o := &r.pullq[cl].o[t]
	ents := r.ents.e
	if o.skipAt != r.memo[cl] {
		o.skipAt, o.skipTo = r.memo[cl], noEntry
	}
	prev, i = noEntry, o.head
	if o.skipTo >= 0 {
		prev, i = o.skipTo, ents[o.skipTo].next
	}
	for i >= 0 {
		e := &ents[i]
		if now-e.arrival > r.timeout {
			return prev, i, true
		}
		why := r.bounds.pullBlocked(e.owner, e.sender)
		if why == refuseNone {
			return prev, i, false
		}
		if r.reclaimIdle(now, why, e.owner, e.sender) { // everything may have changed: look again
			r.newMemo(now, cl)
			o.skipAt, o.skipTo = r.memo[cl], noEntry
			prev, i = noEntry, o.head
			continue
		}
		o.skipTo, r.skipped[cl] = i, true
		if !e.deferred {
			e.deferred = true
			r.tstats[e.owner].PullsDeferred++
			if why == refuseOwner {
				r.st.PullsDeferredOwner++
			} else {
				r.st.PullsDeferredSender++
			}
		}
		prev, i = i, e.next
	}
	return noEntry, noEntry, false
}

// reclaimIdle abandons, uncommitted, the oldest pull of owner (why is
// refuseOwner) or of sender entry s (refuseSender) that no chunk has
// answered within pullIdle of its ②, and reports whether it found one:
// a write blocked by its bound of pulls is pressure as a full pool is
// (pullRoom), and the replay of a write request after its op ended
// would otherwise hold its owner's or sender's bound until TIMEOUT.
func (r *responder) reclaimIdle(now int64, why refusal, owner uint16, s int32) bool {
	for h := r.plist[pullsIdle].head; h >= 0 && r.pulls[h].idleBy <= now; h = r.pulls[h].next {
		if p := &r.pulls[h]; (why == refuseOwner && p.owner == owner) || (why == refuseSender && p.sender == s) {
			r.endPull(h)
			r.st.PullsExpired++
			return true
		}
	}
	return false
}

// nextIdle is the first time after t at which an idle pull becomes
// reclaimable (math.MaxInt64: none). The idle list is in ② order, so
// in order of idleBy too.
func (r *responder) nextIdle(t int64) int64 {
	for h := r.plist[pullsIdle].head; h >= 0; h = r.pulls[h].next {
		if r.pulls[h].idleBy > t {
			return r.pulls[h].idleBy
		}
	}
	return math.MaxInt64
}

// pullRemove takes request i, after prev in owner t's FIFO of pullq[cl],
// out of the queue and frees its entry. The requests before it that were
// found blocked stay so (fairQueue.remove).
func (r *responder) pullRemove(cl abi.Class, t, prev, i int32) {
	r.unprio(&r.ents.e[i])
	r.pullq[cl].remove(r.ents.e, t, prev, i)
	r.ents.put(i)
}

// unprio uncounts request e, which leaves the queues, from the priority
// work (bulk.go).
func (r *responder) unprio(e *inbound) {
	if prio(e.class, e.length) {
		r.bulk.srv--
	}
}

// nextDeadline is the earliest time the serving side has something to do
// on its own (math.MaxInt64: nothing).
func (r *responder) nextDeadline() int64 {
	d := int64(math.MaxInt64)
	for k := range r.inq { // due at once
		if q := &r.inq[k]; q.len() > 0 {
			d = min(d, r.ents.e[q.o[q.head].head].arrival)
		}
	}
	for _, l := range r.plist {
		if l.head >= 0 {
			d = min(d, r.pulls[l.head].deadline)
		}
	}
	for k := range r.pullq { // waiting for window: due when one expires (a freed window comes with work)
		if q := &r.pullq[k]; q.len() > 0 {
			for t := q.head; t >= 0; t = q.o[t].next { // each owner's head is its oldest
				d = min(d, r.ents.e[q.o[t].head].arrival+r.timeout)
			}
			// or when an idle pull becomes reclaimable (pullRoom, reclaimIdle):
			// those that were at the last Poll and stayed are nobody's to take
			d = min(d, r.nextIdle(r.polledAt))
		}
	}
	return d
}

// shutdown drops the queued requests and the WRITEs being served: none
// of them commits any more.
func (r *responder) shutdown() {
	for k := range r.plist {
		for r.plist[k].head >= 0 {
			r.endPull(r.plist[k].head)
		}
	}
	for k := range r.inq {
		r.inq[k].reset()
		r.pullq[k].reset()
		r.resume[k] = noTenant
	}
	r.ents.reset()
	r.bounds.reset()
	r.bulk.srv = 0
}

// auditQueues checks the queues' books (fairq.go): every entry of the
// pool queued once, or counted free; each queue within its bound; a request
// granted and not finished (resume) at the head of its owner.
func (r *responder) auditQueues() error {
	p := &r.ents
	if len(r.queuedAt) != len(p.e) { // the audit's own (tests, the simulator)
		r.queuedAt = make([]uint32, len(p.e))
	}
	r.mark++
	if r.mark == 0 {
		clear(r.queuedAt)
		r.mark = 1
	}
	queued, prios := 0, 0
	for k := range r.inq {
		for _, q := range []*fairQueue{&r.inq[k], &r.pullq[k]} {
			for t := q.head; t >= 0; t = q.o[t].next {
				for i := q.o[t].head; i >= 0; i = p.e[i].next {
					if prio(p.e[i].class, p.e[i].length) {
						prios++
					}
				}
			}
		}
		n, err := r.inq[k].audit(fmt.Sprintf("inbound queue %d", k), p.e, r.queuedAt, r.mark)
		if err != nil {
			return err
		}
		if n > r.nackThreshold {
			return fmt.Errorf("audit: inbound queue %d holds %d, beyond its NACK threshold %d", k, n, r.nackThreshold)
		}
		if t := r.resume[k]; t != noTenant && (t < 0 || int(t) >= len(r.inq[k].o) || r.inq[k].o[t].n == 0) {
			return fmt.Errorf("audit: inbound queue %d resumes owner %d, which has nothing queued", k, t)
		}
		m, err := r.pullq[k].audit(fmt.Sprintf("pull queue %d", k), p.e, r.queuedAt, r.mark)
		if err != nil {
			return err
		}
		if m > r.pullCap {
			return fmt.Errorf("audit: pull queue %d holds %d, beyond %d", k, m, r.pullCap)
		}
		queued += n + m
	}
	if queued+p.nfree != len(p.e) { // the free list is not walked: it is as long as the pool
		return fmt.Errorf("audit: inbound entries: %d queued, %d free of %d", queued, p.nfree, len(p.e))
	}
	if prios != r.bulk.srv {
		return fmt.Errorf("audit: %d priority requests queued, the queues hold %d", r.bulk.srv, prios)
	}
	return nil
}

// auditBounds checks the per-owner and per-sender counts against the
// queues and the pulls, and the replay table's owner lists.
func (r *responder) auditBounds() error {
	b := &r.bounds
	if n := len(b.owners) + len(b.senders.e) + 1; len(b.scratch) != n { // the audit's own (tests, the simulator)
		b.scratch = make([]use, n)
	}
	owners, senders := b.scratch[:len(b.owners)], b.scratch[len(b.owners):]
	sender := func(s int32) *use {
		if s == senderOverflow {
			return &senders[len(senders)-1]
		}
		return &senders[s]
	}
	var named []int32
	count := func(owner uint16, s int32, u use) {
		owners[owner].queued += u.queued
		owners[owner].pulls += u.pulls
		p := sender(s)
		if *p == (use{}) && s != senderOverflow {
			named = append(named, s)
		}
		p.queued += u.queued
		p.pulls += u.pulls
	}
	for k := range r.inq {
		for _, q := range []*fairQueue{&r.inq[k], &r.pullq[k]} {
			for t := q.head; t >= 0; t = q.o[t].next {
				for i := q.o[t].head; i >= 0; i = r.ents.e[i].next {
					e := &r.ents.e[i]
					count(e.owner, e.sender, use{queued: 1})
				}
			}
		}
	}
	for i := 1; i < len(r.pulls); i++ {
		if p := &r.pulls[i]; p.used {
			count(p.owner, p.sender, use{pulls: 1})
		}
	}
	err := b.audit(owners, senders, named)
	clear(owners)
	for _, s := range named {
		senders[s] = use{}
	}
	senders[len(senders)-1] = use{}
	if err != nil {
		return err
	}
	if r.replay != nil {
		return r.replay.audit()
	}
	return nil
}
