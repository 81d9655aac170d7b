package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// A hostile initiator (scenario hostile-initiator; engine/bounds.go,
// engine/replay.go). A tenant of the server node registers a region there
// (remote-readable and -writable, its own K_r) through a portal of its own
// (PortalSpec.Tenant Hostile.Tenant), and attacks from the fabric: it
// injects raw frames at the switch and takes the frames addressed to its
// MAC (hostileMAC), as a host with raw sockets does. Holding K_r, it
// derives K_d for any address, so every request it forges for its own
// region authenticates, whatever source address it claims. Each burst:
//
//   - flood: READ requests for its region, from forged sources (phantom
//     addresses, 10.1.x.y, which no node has; their answers come to its
//     MAC), both classes, more than the server's NACK threshold at once;
//   - a backlog: 4 KB READs of its region from a phantom source, both
//     classes, Large of them outstanding at all times (one more as each
//     is answered), so that its requests are queued at the server
//     whenever the victims' arrive;
//   - slow pulls: WRITE requests for its region from phantom sources; it
//     answers each pull with one chunk of data and never the rest (so the
//     pull, answered, is not idle and holds its context and window until
//     the server's TIMEOUT), or, every other one, not at all;
//   - pushes: READ requests with a victim's address as source and in the
//     IV, on the victim's lane, counters far ahead of any the victim uses:
//     were the windows keyed by address and lane alone, the victim's
//     requests would be dropped as too old from then on;
//   - forged IVs: requests from a phantom source whose IV names a victim
//     (dropped before authentication: Stats.ReqIVMismatch);
//   - minted lanes: requests from a few phantom addresses on lane tags up
//     to 63 (beyond Config.ReplayLanesPerSender: refused) and from ever
//     new addresses (new windows: the attacker's owner's own are
//     forgotten once it holds its share, never the victims').
//
// The victims are the applications of the other nodes (App.Clients),
// reading and writing the regions of the server's application (App.Tenant,
// another tenant) in a strict run: every valid op must complete OK within
// Config.OpBoundNs (TIMEOUT), none NACKed; a victim's READ that finds no
// other request of the victims' owner of its class waiting at the server
// is served after at most 8 KB of the attacker's READs of its class,
// however many it has queued (sawAnswer: the owners' turns of
// engine/fairq.go); at the end the server's counters for the victims'
// owner show no refusal at all, and those of the attacker's owner show
// every attack refused (checkAtEnd).

// HostileConfig is the attacker of a run (nil: none).
type HostileConfig struct {
	Server int   // the node it attacks (and registers a region on)
	Tenant int   // its portal's PortalSpec.Tenant there (App.Tenant is the victims')
	TickNs int64 // between its bursts
	// Per burst:
	Flood    int // READ requests for its region, from phantom sources
	Large    int // 4 KB READs of its region, from a phantom source, it keeps outstanding (one more as each is answered)
	Writes   int // WRITE requests for its region, from phantom sources (slow pulls)
	Pushes   int // READ requests as a victim, counters far ahead on its lane
	IVForges int // requests from a phantom source whose IV names a victim
	Lanes    int // requests on new lanes: a few phantom addresses on any lane tag, and new addresses
}

// HostileStats count what the attacker did.
type HostileStats struct {
	Injected uint64 // frames it injected
	Flood    uint64 // of which READ requests of the flood
	Large    uint64 // 4 KB READ requests it kept outstanding
	Writes   uint64 // WRITE requests
	Pushes   uint64 // requests as a victim
	IVForges uint64 // requests with a victim's address in the IV only
	Lanes    uint64 // requests on minted lanes
	Pulls    uint64 // pulls it received
	Chunks   uint64 // data chunks it sent (one per answered pull)
	Received uint64 // frames it received (pulls, data, NACKs)
	// The victims' READ requests the server answered, and the longest
	// wait of one there, from its Receive to its first answer frame.
	VictimReads     uint64
	VictimWaitMaxNs int64
	// Of those, the reads that found no request of their owner of their
	// class waiting on their core (sawRequest), and the most READ data
	// of the attacker's of that class the core sent while one waited.
	LoneReads       uint64
	LoneBehindBytes int64
}

// hostileMAC is the attacker's MAC: no node's (nodeOfMAC: -1).
var hostileMAC = wire.MAC{0x02, 0, 0, 0, 0xff, 0xfe}

// hostileTags marks the tags of the attacker's requests (slot ids no
// engine has), each made unique by a counter below.
const hostileTags = uint64(0xfffffff0) << 32

// isPhantom reports whether ip is one of the attacker's forged sources.
func isPhantom(ip uint32) bool { return ip>>16 == 0x0a01 }

type hostile struct {
	s       *Sim
	cfg     *HostileConfig
	srv     *node
	rid     abi.RegionID
	kr      aesni.Key
	pid     uint32
	rng     *rand.Rand
	ctr     uint64 // IV counters of its frames (unique across them)
	tag     uint64
	phantom uint32 // the next new phantom address
	pulls   uint64 // pulls received: every other one is answered
	victims []*node
	st      HostileStats
	// waiting: the victims' requests the server took and has not
	// answered, by initiator and tag (sawRequest, sawAnswer); sent: the
	// attacker's READ data the server sent, by core and class.
	waiting map[reqRef]waiting
	sent    [][abi.NumClass]int64
	high    []bool // by tag counter: its request was high-class
	// large: its outstanding 4 KB READs (Large), by tag, and when sent.
	large map[uint64]int64
}

// waiting is a victim's request the server took: when, on which core, of
// which class and op, and for a lone READ (sawRequest) the attacker's
// READ data of its class its core had sent then.
type waiting struct {
	at    int64
	core  int
	class abi.Class
	read  bool
	lone  bool
	sent  int64
}

// setupHostile opens the attacker's portal on its server and registers
// its region.
func (s *Sim) setupHostile() error {
	cfg := s.cfg.Hostile
	if cfg == nil {
		return nil
	}
	h := &hostile{s: s, cfg: cfg, srv: s.nodes[cfg.Server], pid: 66, rng: rand.New(rand.NewPCG(s.cfg.Seed, 0x4057)), ctr: 1 << 20,
		waiting: make(map[reqRef]waiting), large: make(map[uint64]int64)}
	for i := range h.kr {
		h.kr[i] = byte(h.rng.Uint32())
	}
	for _, v := range s.cfg.App.Clients {
		h.victims = append(h.victims, s.nodes[v])
	}
	lay, err := abi.NewLayout(0, 2, 2)
	if err != nil {
		return err
	}
	seg := alignedBytes(int(lay.Size))
	c := h.srv.cores[0]
	id, err := c.core.OpenPortal(engine.PortalSpec{CmdRing: lay.CmdRing(seg), CmdCap: lay.CmdCap, CplRing: lay.CplRing(seg), CplCap: lay.CplCap,
		PID: h.pid, Tenant: cfg.Tenant})
	if err != nil {
		return fmt.Errorf("sim: the attacker's portal: %w", err)
	}
	if h.rid, err = c.core.RegisterRegion(id, make([]byte, 64<<10), abi.PermRemoteRead|abi.PermRemoteWrite, h.kr); err != nil {
		return fmt.Errorf("sim: the attacker's region: %w", err)
	}
	h.sent = make([][abi.NumClass]int64, len(h.srv.cores))
	h.high = append(h.high, false) // tag counters from 1
	s.hostile = h
	s.schedule(s.now+cfg.TickNs/2, evHostile, 0, 0, nil)
	return nil
}

// phantomAddr is phantom address k (k >= 1).
func phantomAddr(k uint32) uint32 { return 0x0a010000 | k&0xffff }

// tick sends a burst and schedules the next one, until a tick before
// posting ends (so that the server has taken each burst before a
// Shutdown at the end: ShutdownAtEnd).
func (h *hostile) tick() {
	s, cfg, r := h.s, h.cfg, h.rng
	if s.now >= s.postEnd-cfg.TickNs {
		return
	}
	for tag, at := range h.large { // lost: no answer within TIMEOUT
		if s.now-at > int64(h.srv.ecfg.Timeout) {
			delete(h.large, tag)
		}
	}
	for len(h.large) < cfg.Large {
		h.largeRead()
	}
	for range cfg.Writes {
		a := phantomAddr(1 + uint32(r.IntN(200)))
		h.request(wire.TypeWriteReq, a, hostileMAC, a, h.next(0), 4096, r.IntN(2) == 0)
		h.st.Writes++
	}
	for range cfg.Flood {
		a := phantomAddr(1 + uint32(r.IntN(200)))
		h.request(wire.TypeReadReq, a, hostileMAC, a, h.next(0), 64, r.IntN(2) == 0)
		h.st.Flood++
	}
	for range cfg.Pushes {
		v := h.victims[r.IntN(len(h.victims))]
		lane := uint64(r.IntN(len(v.cores)))
		h.request(wire.TypeReadReq, v.ip4, v.mac, v.ip4, h.next(lane)+1<<40, 64, false)
		h.st.Pushes++
	}
	for range cfg.IVForges {
		a, v := phantomAddr(1+uint32(r.IntN(200))), h.victims[r.IntN(len(h.victims))]
		h.request(wire.TypeReadReq, a, hostileMAC, v.ip4, h.next(0), 64, false)
		h.st.IVForges++
	}
	for i := range cfg.Lanes {
		var a uint32
		if i%2 == 0 { // a few addresses, any lane
			a = phantomAddr(1000 + uint32(r.IntN(4)))
		} else { // a new address each time
			h.phantom++
			a = phantomAddr(2000 + h.phantom%30000)
		}
		h.request(wire.TypeReadReq, a, hostileMAC, a, h.next(uint64(r.IntN(64))), 64, false)
		h.st.Lanes++
	}
	s.schedule(s.now+cfg.TickNs, evHostile, 0, 0, nil)
}

// largeRead sends a 4 KB READ of its region from a phantom source of
// its own (one replay window, so that the backlog evicts none of the
// windows the minted lanes need), and keeps it outstanding until it is
// answered (receive).
func (h *hostile) largeRead() {
	a := phantomAddr(300)
	h.request(wire.TypeReadReq, a, hostileMAC, a, h.next(0), 4096, h.rng.IntN(2) == 0)
	h.large[hostileTags|h.tag] = h.s.now
	h.st.Large++
}

// next is a fresh IV counter on lane tag lane.
func (h *hostile) next(lane uint64) uint64 {
	h.ctr++
	return lane<<58 | h.ctr
}

// request injects a request of type typ for the attacker's region, from
// src (at srcMAC) with IV ivAddr ‖ ctr, under the K_d of src that it
// derives from its K_r.
func (h *hostile) request(typ wire.Type, src uint32, srcMAC wire.MAC, ivAddr uint32, ctr uint64, length uint32, high bool) {
	op := abi.OpRead
	if typ == wire.TypeWriteReq {
		op = abi.OpWrite
	}
	h.tag++
	f := wire.Fields{
		DstMAC: h.srv.mac, SrcMAC: srcMAC, SrcIP: src, DstIP: h.srv.ip4,
		SrcPort: wire.InitiatorPort(uint8(h.tag), 0), DstPort: h.srv.ecfg.UDPPort,
		Type: typ, PID: h.pid, Tag: hostileTags | h.tag, Region: uint32(h.rid), Length: length,
	}
	if high {
		f.Flags = wire.FlagHigh
	}
	h.high = append(h.high, high) // at h.tag
	aesni.PutNonce(f.IV[:], be4(ivAddr), ctr)
	h.inject(&f, nil, aesni.DeriveKey(h.kr, be4(src), h.pid, uint8(op)), nil)
}

// inject encodes f with payload (nil: a request, sealed with SealRequest
// under kd; else data, sealed under kd with curry curried in) and puts it
// on the switch.
func (h *hostile) inject(f *wire.Fields, payload []byte, kd aesni.Key, curry []byte) {
	s := h.s
	fr := s.pool.get()
	n := wire.Encode(fr.buf, f, len(payload))
	b := fr.buf[:n]
	a, err := aesni.NewAEAD(kd)
	if err != nil {
		panic(err)
	}
	if payload == nil {
		a.SealRequest(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b))
	} else {
		a.SealResponse(wire.Sealed(b, len(payload)), payload, wire.IV(b), wire.AAD(b), curry)
	}
	fr.n, fr.src = n, -1
	h.st.Injected++
	s.schedule(s.now+s.cfg.Net.LatencyNs, evSwitch, 0, 0, fr)
}

// receive takes a frame the switch forwards to the attacker's MAC: it
// answers every other pull with the first 64 bytes of its data, never
// with the rest, and sends a 4 KB READ for each of its outstanding ones
// answered (its last data frame, an error or a NACK), until a tick
// before posting ends.
func (h *hostile) receive(fr *frame) {
	s := h.s
	h.st.Received++
	var p wire.Fields
	_, err := wire.Decode(fr.buf[:fr.n], &p)
	s.pool.put(fr)
	if _, ok := h.large[p.Tag]; ok && err == nil &&
		(p.Type == wire.TypeReadResp && p.Offset+uint64(p.Length) == 4096 || p.Type == wire.TypeError || p.Type == wire.TypeNack) {
		delete(h.large, p.Tag)
		if s.now < s.postEnd-h.cfg.TickNs {
			h.largeRead()
		}
		return
	}
	if err != nil || p.Type != wire.TypePullReq || !isPhantom(p.DstIP) {
		return
	}
	h.st.Pulls++
	h.pulls++
	if h.pulls%2 == 0 {
		return // never answered: idle, reclaimable after PullIdleTimeout
	}
	d := wire.Fields{
		DstMAC: p.SrcMAC, SrcMAC: hostileMAC, SrcIP: p.DstIP, DstIP: p.SrcIP,
		SrcPort: p.DstPort, DstPort: p.SrcPort, Type: wire.TypeWriteData,
		PID: p.PID, Tag: p.Tag, Region: p.Region, Length: 64,
	}
	h.ctr++
	aesni.PutResponseNonce(d.IV[:], be4(p.DstIP), h.ctr, 0)
	h.ctr += aesni.ResponseSpan(p.Length)
	h.inject(&d, make([]byte, 64), aesni.DeriveKey(h.kr, be4(p.DstIP), p.PID, uint8(abi.OpWrite)), p.IV[:])
	h.st.Chunks++
}

// sawRequest: core c of the server takes frame b. A victim's request is
// remembered until the server answers it (the first copy: a duplicate
// is a replay, dropped). A READ is lone when no other request of its
// owner (every victim's) of its class waits on its core: its owner's
// FIFO of the class is empty, and it joins the ring of owners ahead of
// the owners with a backlog (engine/fairq.go). Requests taken more than
// TIMEOUT ago are expired or answered: they wait no more.
func (h *hostile) sawRequest(c *simCore, b []byte) {
	t := oneRMAType(b)
	var f wire.Fields
	if t != wire.TypeReadReq && t != wire.TypeWriteReq && t != wire.TypeRekeyReq {
		return
	}
	if _, err := wire.Decode(b, &f); err != nil || f.Tag>>32 == hostileTags>>32 {
		return
	}
	d := h.s.nodeOfIP(f.SrcIP)
	k := reqRef{node: d, tag: f.Tag}
	if _, ok := h.waiting[k]; ok || d < 0 || h.s.nodes[d] == h.srv {
		return
	}
	w := waiting{at: h.s.now, core: c.idx, read: t == wire.TypeReadReq}
	if f.Flags&wire.FlagHigh != 0 {
		w.class = abi.ClassHigh
	}
	w.lone = w.read
	for _, o := range h.waiting {
		if o.core == w.core && o.class == w.class && h.s.now-o.at <= int64(h.srv.ecfg.Timeout) {
			w.lone = false
			break
		}
	}
	w.sent = h.sent[c.idx][w.class]
	h.waiting[k] = w
}

// sawAnswer: core c of the server sent f. The attacker's READ data is
// counted by class. The first answer to a victim's request (data, a
// pull, an error or a NACK) ends its wait. While a lone READ waited, the
// attacker's READs of its class were served at most the rest of the
// attacker's turn, when it had joined the ring ahead (a quantum:
// ArbitrationBytes at weight 1), and one READ partly sent before (its
// rest resumes first): at most that much of their data left its core
// before the lone READ's first answer, however much the attacker had
// queued (a FIFO would send all of it first).
func (h *hostile) sawAnswer(c *simCore, f *wire.Fields) {
	if f.Tag>>32 == hostileTags>>32 {
		if f.Type == wire.TypeReadResp {
			cl := abi.ClassLow
			if h.high[f.Tag&^hostileTags] {
				cl = abi.ClassHigh
			}
			h.sent[c.idx][cl] += int64(f.Length)
		}
		return
	}
	switch f.Type {
	case wire.TypeReadResp, wire.TypePullReq, wire.TypeError, wire.TypeNack:
	default:
		return
	}
	k := reqRef{node: h.s.nodeOfIP(f.DstIP), tag: f.Tag}
	w, ok := h.waiting[k]
	if !ok {
		return
	}
	delete(h.waiting, k)
	if !w.read {
		return
	}
	h.st.VictimReads++
	h.st.VictimWaitMaxNs = max(h.st.VictimWaitMaxNs, h.s.now-w.at)
	if !w.lone {
		return
	}
	behind := h.sent[w.core][w.class] - w.sent
	h.st.LoneReads++
	h.st.LoneBehindBytes = max(h.st.LoneBehindBytes, behind)
	if bound := int64(engine.ArbitrationBytes + abi.MaxOpBytes); behind > bound {
		h.s.fail("node %d's READ (tag %#x, class %v), alone of its owner's on core %d, waited %d ns behind %d bytes of the attacker's READs of its class, beyond %d",
			k.node, f.Tag, w.class, w.core, h.s.now-w.at, behind, bound)
	}
}

// checkAtEnd: the server's counters for the victims' owner show no
// refusal, those of the attacker's show each attack refused, and some
// victim's READ was checked alone of its owner's beside the backlog.
func (h *hostile) checkAtEnd() {
	s := h.s
	var victim, attacker engine.TenantCounters
	var st engine.Stats
	for _, c := range h.srv.cores {
		add := func(dst *engine.TenantCounters, t engine.TenantCounters) {
			dst.Nacked += t.Nacked
			dst.NackedOwner += t.NackedOwner
			dst.NackedSender += t.NackedSender
			dst.PullsDeferred += t.PullsDeferred
			dst.IVMismatch += t.IVMismatch
			dst.ReplayLanesRefused += t.ReplayLanesRefused
			dst.ReplayEvictions += t.ReplayEvictions
		}
		add(&victim, c.core.TenantCounters(s.cfg.App.Tenant))
		add(&attacker, c.core.TenantCounters(h.cfg.Tenant))
		cs := c.core.Stats()
		st.ReqIVMismatch += cs.ReqIVMismatch
		st.BulkHeld += cs.BulkHeld
	}
	held := st.BulkHeld
	if victim.Nacked != 0 || victim.NackedOwner != 0 || victim.NackedSender != 0 || victim.PullsDeferred != 0 ||
		victim.IVMismatch != 0 || victim.ReplayLanesRefused != 0 || victim.ReplayEvictions != 0 {
		s.fail("node %d refused the victims' owner (tenant %d) something: %+v (attacker's: %+v)", h.srv.id, s.cfg.App.Tenant, victim, attacker)
		return
	}
	switch {
	case attacker.NackedOwner == 0:
		s.fail("the attacker's flood was never NACKed at its owner's bound: %+v (attack %+v)", attacker, h.st)
	case attacker.PullsDeferred == 0 && (s.cfg.Engine.PollBytes == 0 || held == 0):
		// (With the bound on bulk work, engine.Config.PollBytes, the
		// server may have paced the attacker's pulls below its bound.)
		s.fail("the attacker's writes never waited behind its owner's bound of pulls: %+v (attack %+v)", attacker, h.st)
	case attacker.IVMismatch != h.st.IVForges || st.ReqIVMismatch != h.st.IVForges:
		s.fail("%d requests with a victim's address in the IV only, %d dropped for it (%d for the attacker's owner)", h.st.IVForges, st.ReqIVMismatch, attacker.IVMismatch)
	case attacker.ReplayLanesRefused == 0 || attacker.ReplayEvictions == 0:
		s.fail("the attacker's minted lanes: %d refused, %d of its windows evicted; want both", attacker.ReplayLanesRefused, attacker.ReplayEvictions)
	case h.st.Chunks == 0:
		s.fail("the attacker answered no pull: no slow pull held a context (attack %+v)", h.st)
	case h.st.LoneReads == 0:
		s.fail("no victim's READ was alone of its owner's at the server beside the attacker's backlog (attack %+v)", h.st)
	}
}

func be4(a uint32) [4]byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a)
	return b
}
