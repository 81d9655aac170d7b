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
// Config.OpBoundNs (TIMEOUT), none NACKed; at the end the server's
// counters for the victims' owner show no refusal at all, and those of
// the attacker's owner show every attack refused (checkAtEnd).

// HostileConfig is the attacker of a run (nil: none).
type HostileConfig struct {
	Server int   // the node it attacks (and registers a region on)
	Tenant int   // its portal's PortalSpec.Tenant there (App.Tenant is the victims')
	TickNs int64 // between its bursts
	// Per burst:
	Flood    int // READ requests for its region, from phantom sources
	Writes   int // WRITE requests for its region, from phantom sources (slow pulls)
	Pushes   int // READ requests as a victim, counters far ahead on its lane
	IVForges int // requests from a phantom source whose IV names a victim
	Lanes    int // requests on new lanes: a few phantom addresses on any lane tag, and new addresses
}

// HostileStats count what the attacker did.
type HostileStats struct {
	Injected uint64 // frames it injected
	Flood    uint64 // of which READ requests of the flood
	Writes   uint64 // WRITE requests
	Pushes   uint64 // requests as a victim
	IVForges uint64 // requests with a victim's address in the IV only
	Lanes    uint64 // requests on minted lanes
	Pulls    uint64 // pulls it received
	Chunks   uint64 // data chunks it sent (one per answered pull)
	Received uint64 // frames it received (pulls, data, NACKs)
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
}

// setupHostile opens the attacker's portal on its server and registers
// its region.
func (s *Sim) setupHostile() error {
	cfg := s.cfg.Hostile
	if cfg == nil {
		return nil
	}
	h := &hostile{s: s, cfg: cfg, srv: s.nodes[cfg.Server], pid: 66, rng: rand.New(rand.NewPCG(s.cfg.Seed, 0x4057)), ctr: 1 << 20}
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
// with the rest.
func (h *hostile) receive(fr *frame) {
	s := h.s
	h.st.Received++
	var p wire.Fields
	_, err := wire.Decode(fr.buf[:fr.n], &p)
	s.pool.put(fr)
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

// checkAtEnd: the server's counters for the victims' owner show no
// refusal, those of the attacker's show each attack refused.
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
	}
	if victim.Nacked != 0 || victim.NackedOwner != 0 || victim.NackedSender != 0 || victim.PullsDeferred != 0 ||
		victim.IVMismatch != 0 || victim.ReplayLanesRefused != 0 || victim.ReplayEvictions != 0 {
		s.fail("node %d refused the victims' owner (tenant %d) something: %+v (attacker's: %+v)", h.srv.id, s.cfg.App.Tenant, victim, attacker)
		return
	}
	switch {
	case attacker.NackedOwner == 0:
		s.fail("the attacker's flood was never NACKed at its owner's bound: %+v (attack %+v)", attacker, h.st)
	case attacker.PullsDeferred == 0:
		s.fail("the attacker's writes never waited behind its owner's bound of pulls: %+v (attack %+v)", attacker, h.st)
	case attacker.IVMismatch != h.st.IVForges || st.ReqIVMismatch != h.st.IVForges:
		s.fail("%d requests with a victim's address in the IV only, %d dropped for it (%d for the attacker's owner)", h.st.IVForges, st.ReqIVMismatch, attacker.IVMismatch)
	case attacker.ReplayLanesRefused == 0 || attacker.ReplayEvictions == 0:
		s.fail("the attacker's minted lanes: %d refused, %d of its windows evicted; want both", attacker.ReplayLanesRefused, attacker.ReplayEvictions)
	case h.st.Chunks == 0:
		s.fail("the attacker answered no pull: no slow pull held a context (attack %+v)", h.st)
	}
}

func be4(a uint32) [4]byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a)
	return b
}
