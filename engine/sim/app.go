package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
)

// Sink layout of a portal: one area per slot, then a scratch area that only
// commands which must never run point at. An op on slot k lands at
// areaBytes*k + x with x+length <= areaBytes, so in-flight ops never share
// bytes and every byte outside the current op of a slot must stay poison.
const (
	areaBytes = 2 * abi.MaxOpBytes
	poison    = 0xa5
)

// opKind is what an op tests. Valid ops read remote data; the others are
// commands with exactly one thing wrong and a precise expected status.
type opKind uint8

const (
	kValid        opKind = iota
	kLocalBounds         // local offset+length outside the sink region -> LOCAL_BOUNDS
	kLocalRegion         // local region of another portal, stale or unknown -> LOCAL_REGION
	kLocalPerm           // local region without local-write permission -> LOCAL_PERMISSION
	kTooLarge            // length above 4 KB -> TOO_LARGE
	kZeroLen             // length 0 -> BAD_COMMAND
	kBadOp               // unknown op code -> BAD_COMMAND
	kSlotNotOurs         // a slot of the core that this portal does not own -> BAD_SLOT
	kSlotRange           // a slot outside the core's partition -> BAD_SLOT
	kSlotBusy            // one of our slots, busy with another op -> BAD_SLOT
	kUnreachable         // remote address nobody has -> UNREACHABLE
	kRemoteRegion        // stale or unknown remote region (the server has no K_r) -> REMOTE_AUTHENTICATION_FAILURE
	kRemoteBounds        // remote offset+length outside the region -> REMOTE_BOUNDS
	kRemotePerm          // remote region without remote-read permission -> REMOTE_PERMISSION
	kKeyRandom           // a random K_d -> REMOTE_AUTHENTICATION_FAILURE
	kKeyInitiator        // the K_d of another initiator (PID or address) -> REMOTE_AUTHENTICATION_FAILURE
	kKeyOp               // the K_d of another op type -> REMOTE_AUTHENTICATION_FAILURE
	kStaleKey            // a valid read with the K_d of a K_r the owner replaced (Rekey) -> REMOTE_AUTHENTICATION_FAILURE
	numKinds
)

var kindNames = [...]string{"valid", "local-bounds", "local-region", "local-perm", "too-large", "zero-length",
	"bad-op", "slot-not-ours", "slot-range", "slot-busy", "unreachable", "remote-region", "remote-bounds", "remote-perm",
	"key-random", "key-other-initiator", "key-other-op", "stale-key"}

var kindStatus = [...]abi.Status{abi.StatusOK, abi.StatusLocalBounds, abi.StatusLocalRegion, abi.StatusLocalPermission,
	abi.StatusTooLarge, abi.StatusBadCommand, abi.StatusBadCommand, abi.StatusBadSlot, abi.StatusBadSlot, abi.StatusBadSlot,
	abi.StatusUnreachable, abi.StatusRemoteAuthFailure, abi.StatusRemoteBounds, abi.StatusRemotePermission,
	abi.StatusRemoteAuthFailure, abi.StatusRemoteAuthFailure, abi.StatusRemoteAuthFailure, abi.StatusRemoteAuthFailure}

// KindName names what the ops counted in Result.ByKind[i] test.
func KindName(i int) string {
	if i < len(kindNames) {
		return kindNames[i]
	}
	return ""
}

// KindStatus is the status an op of kind i must get on a clean network.
func KindStatus(i int) abi.Status { return kindStatus[i] }

// NumKinds is the number of op kinds.
const NumKinds = int(numKinds)

// usesSlot: the op occupies one of the portal's idle slots.
func (k opKind) usesSlot() bool { return k != kSlotNotOurs && k != kSlotRange && k != kSlotBusy }

// local: decided by the initiating core without the network.
func (k opKind) local() bool { return k != kValid && k < kUnreachable }

// wrongKey: the command's K_d is not the one the server derives.
func (k opKind) wrongKey() bool { return k >= kKeyRandom && k <= kKeyOp }

// remote: the command reaches a server (a request is sent for it).
func (k opKind) remote() bool { return k == kValid || k >= kRemoteRegion }

type op struct {
	cookie   uint64
	kind     opKind
	p        *portal
	slotIdx  int // index in p.slots; -1: not one of the portal's slots
	cmd      abi.Command
	postedAt int64
	deadline int64
	target   *region // remote region named (valid and remote-* kinds)
	sink     *region // the portal's sink when posted (it may be replaced)
	local    *region // the region LocalRegion names (nil: none of ours)
	extraIdx int     // index in p.extra (ops without an own slot)
	// Key: the command carries a K_d derived from version keyVer of
	// keyRg's K_r (the newest this node knew when posting; wrong-key kinds
	// alter it). stale: the owner had replaced that K_r already, so the
	// request cannot authenticate. reqCorrupt: the fabric damaged a copy
	// of its request (the server may answer REMOTE_AUTHENTICATION_FAILURE).
	keyRg      *region
	keyVer     int
	stale      bool
	reqCorrupt bool
	// rxAuth0: the node's Stats.RxAuthFailed when the op was posted.
	rxAuth0 uint64

	// write: a WRITE (else a READ). Its data has pattern id stamp: byte j
	// of the target becomes patByte(stamp, j). An op with its own slot
	// stages it in its slot's area of wsrc, at [fillLo, fillHi) of the
	// area, for target offset fillOff.
	write bool
	stamp uint64
	// rekey: a remote REKEY (write is set too: it takes a WRITE's four
	// hops). newKr is the K_r it asks the server to install, staged in
	// its slot's area of wsrc at [fillLo, fillHi).
	rekey          bool
	newKr          aesni.Key
	wsrc           *region
	fillLo, fillHi int
	fillOff        uint64
	// What the simulator saw happen to a WRITE: its request (①) and the
	// request's IV; its commit (④ sent); the pull (②) its core accepted;
	// its completion (done, when, status), or orphan (its portal closed
	// first: no completion, and it may still commit).
	reqIV       [12]byte
	committed   bool
	pullFirst   int64      // the pull its core accepted arrived then (0: none)
	pullTimeout int64      // the timeout that pull carried
	pullIVs     [][12]byte // (Net.ForgeWrites only)
	done        bool
	doneAt      int64
	status      abi.Status
	orphan      bool
	// keyOp: the op type a key-other-op command's K_d is derived for
	// (0: drawn at random; tests set it).
	keyOp uint8
	// A valid READ of a remote-writable region: the model's bytes of its
	// range when posted, and the region's commit count then.
	snap []byte
	c0   int
}

func (o *op) String() string {
	key := ""
	if o.keyRg != nil {
		key = fmt.Sprintf(" key=%#x@%d.v%d", uint32(o.keyRg.id), o.keyRg.node, o.keyVer)
		if v := len(o.keyRg.keys) - 1; v != o.keyVer {
			key += fmt.Sprintf("(current v%d)", v)
		}
	}
	if o.reqCorrupt {
		key += " req-corrupted"
	}
	typ := "READ"
	if o.rekey {
		typ = "REKEY"
	} else if o.write {
		typ = "WRITE"
	}
	return fmt.Sprintf("op{%s %s cookie=%#x node=%d portal=%d slot=%d remote=%08x region=%#x off=%d len=%d local=%#x loff=%d posted=%d%s}",
		typ, kindNames[o.kind], o.cookie, o.p.a.n.id, o.p.id, o.cmd.Slot, o.cmd.RemoteAddr, uint32(o.cmd.RemoteRegion),
		o.cmd.RemoteOffset, o.cmd.Length, uint32(o.cmd.LocalRegion), o.cmd.LocalOffset, o.postedAt-o.p.a.s.t0, key)
}

// noAuth: the op's request can never authenticate at its server (wrong
// key, a K_r replaced before it was posted, a region the server does not
// have): no answer but REMOTE_AUTHENTICATION_FAILURE can come back (no
// data, no NACK, no remote error).
func (o *op) noAuth() bool { return o.kind.wrongKey() || o.kind == kRemoteRegion || o.stale }

type deadline struct {
	t      int64
	cookie uint64
}

type deadlineHeap []deadline

func (h *deadlineHeap) push(d deadline) {
	*h = append(*h, d)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].t <= a[i].t {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *deadlineHeap) pop() {
	a := *h
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a[r].t < a[l].t {
			m = r
		}
		if a[i].t <= a[m].t {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
}

// regKind is what a region is for.
type regKind uint8

const (
	regSrc  regKind = iota // remote-readable, a fixed pattern: target of reads
	regSink                // local-write: sink of the portal's reads (poison outside live ops)
	regDst                 // remote-writable and remote-readable: target of writes, read too
	regWsrc                // local-read: source of the portal's writes (poison outside live ops)
)

// region is a registered region as the application (and, for
// remote-readable ones, every other application: the directory) knows it.
type region struct {
	node    int
	p       *portal
	id      abi.RegionID
	mem     []byte
	perm    abi.Perm
	kind    regKind
	pattern uint64 // regSrc: mem[i] == patByte(pattern, i); regDst: its initial content
	sink    bool   // kind == regSink
	deadAt  int64  // deregistered (or its portal closed) at; MaxInt64 while live
	// regDst: the model of its memory (the initial pattern, then every
	// commit the simulator saw, in order) and the commits themselves.
	shadow  []byte
	commits []commitRec
	// keys: every K_r the region had, oldest first; the owner's core
	// holds the last one.
	keys []keyVersion
}

// keyVersion is one K_r of a region: installed on the owner's core at
// `at` (registration or Rekey); node i's applications know it from
// learn[i] on (the key distribution delay; the owner at once).
type keyVersion struct {
	kr    aesni.Key
	d     *aesni.Deriver
	at    int64
	learn []int64
}

// known returns the newest key version node has learnt by now.
func (rg *region) known(node int, now int64) int {
	for v := len(rg.keys) - 1; v > 0; v-- {
		if rg.keys[v].learn[node] <= now {
			return v
		}
	}
	return 0
}

// addKey records a new K_r, effective at the owner now; every other node
// learns it within delay.
func (s *Sim) addKey(rg *region, kr aesni.Key, delay int64) {
	kv := keyVersion{kr: kr, d: aesni.NewDeriver(kr), at: s.now, learn: make([]int64, len(s.nodes))}
	for i := range kv.learn {
		kv.learn[i] = s.now
		if i != rg.node && delay > 0 {
			kv.learn[i] += s.faultRng.Int64N(delay + 1)
		}
	}
	rg.keys = append(rg.keys, kv)
}

// newKey draws a region key from the run's key stream.
func (s *Sim) newKey() aesni.Key {
	var k aesni.Key
	binary.LittleEndian.PutUint64(k[0:8], s.keyRng.Uint64())
	binary.LittleEndian.PutUint64(k[8:16], s.keyRng.Uint64())
	return k
}

// app is one node's application: a few portals, each with its own rings,
// slots, a remote-readable region and a sink region.
type app struct {
	s           *Sim
	n           *node
	client      bool
	portals     []*portal // open
	closed      []*portal // closed by a crash
	serial      int
	completions uint64         // completions read from every ring on this node
	deadSinks   []*region      // sinks and write sources replaced while in use (must stay untouched)
	deadIDs     []abi.RegionID // this node's deregistered region ids (stale)
	rekeys      uint64         // successful Core.Rekey calls (Stats.Rekeys)
	// slotOwner: which portal holds a slot of this core, and at which
	// index (the fabric maps a request's tag back to its op).
	slotOwner map[abi.SlotID]slotRef
	// flows: this node's portals of the congestion experiments' flow
	// applications and object servers (flow.go).
	flows []*flowPortal
}

type slotRef struct {
	p *portal
	k int
}

type portal struct {
	a      *app
	id     engine.PortalID
	pid    uint32 // the PID the portal was opened with (part of its K_d)
	serial int
	seg    []byte
	lay    abi.Layout
	cmd    *abi.Producer // the app produces commands
	cpl    *abi.Consumer // the app consumes completions
	class  abi.Class
	slots  []abi.SlotID
	busy   []*op // by slot index
	idle   []int // idle slot indices (stack)
	extra  []*op // outstanding ops without an own slot
	src    *region
	sink   *region
	wdst   *region // remote-writable (and readable): target of other nodes' writes
	wsrc   *region // source of this portal's writes: one area per slot, like the sink
	closed bool
	// ops posted in the current tick holding a slot for at least an RTT
	// (targets of slot-busy commands).
	fresh []int
}

func newApp(s *Sim, n *node) *app {
	a := &app{s: s, n: n, client: true, slotOwner: make(map[abi.SlotID]slotRef)}
	if c := s.cfg.App.Clients; c != nil {
		a.client = false
		for _, v := range c {
			if v == n.id {
				a.client = true
			}
		}
	}
	return a
}

// alignedBytes returns n zeroed bytes starting on a 64-byte boundary (the
// rings' cache-line layout requires it, as hugepage memory would give).
func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64) % 64)
	return b[off : off+n : off+n]
}

func nextPow2(v uint32) uint32 {
	p := uint32(2)
	for p < v {
		p *= 2
	}
	return p
}

// openPortal does what the portal library does for an application: lay
// out a segment, attach the rings, open the portal on the core, get slots,
// register a remote-readable region (filled with its pattern) and a sink.
func (a *app) openPortal() (*portal, error) {
	s, n := a.s, a.n
	cfg := &s.cfg.App
	r := s.appRng
	slots := cfg.SlotsPerPortal
	// The completion ring holds every completion the core could write
	// before the app reads: one per slot, plus bad-slot commands.
	cplCap := nextPow2(uint32(slots) + cfg.CmdCap)
	lay, err := abi.NewLayout(0, cfg.CmdCap, cplCap)
	if err != nil {
		return nil, err
	}
	p := &portal{a: a, serial: a.serial, seg: alignedBytes(int(lay.Size))}
	a.serial++
	if r.Float64() < cfg.HighClass {
		p.class = abi.ClassHigh
	}
	spec := engine.PortalSpec{
		CmdRing:  lay.CmdRing(p.seg),
		CmdCap:   lay.CmdCap,
		CplRing:  lay.CplRing(p.seg),
		CplCap:   lay.CplCap,
		Class:    p.class,
		MaxSlots: slots,
		PID:      1000 + uint32(n.id)*100 + uint32(p.serial),
	}
	id, err := n.core.OpenPortal(spec)
	if err != nil {
		return nil, fmt.Errorf("OpenPortal: %w", err)
	}
	p.id = id
	p.pid = spec.PID
	lay.Portal = uint32(id)
	lay.Encode(p.seg)
	p.lay = lay
	if p.cmd, err = abi.NewProducer(lay.CmdRing(p.seg), lay.CmdCap, abi.CommandSize); err != nil {
		return nil, err
	}
	if p.cpl, err = abi.NewConsumer(lay.CplRing(p.seg), lay.CplCap, abi.CompletionSize); err != nil {
		return nil, err
	}
	// Slots: in two allocations (the engine adds to a portal's holding),
	// then one beyond the cap, which must be refused.
	first := 1 + r.IntN(slots)
	for _, k := range []int{first, slots - first} {
		if k == 0 {
			continue
		}
		ids, err := n.core.AllocSlots(id, k)
		if err != nil {
			return nil, fmt.Errorf("AllocSlots(%d): %w", k, err)
		}
		if len(ids) != k {
			return nil, fmt.Errorf("AllocSlots(%d) returned %d slots", k, len(ids))
		}
		p.slots = append(p.slots, ids...)
	}
	if _, err := n.core.AllocSlots(id, 1); err == nil {
		s.fail("node %d: AllocSlots beyond the portal's cap of %d succeeded", n.id, slots)
	}
	seen := make(map[abi.SlotID]bool, len(p.slots))
	lo, hi := n.ecfg.SlotBase, n.ecfg.SlotBase+abi.SlotID(n.ecfg.Slots)
	for _, sl := range p.slots {
		if sl < lo || sl >= hi || seen[sl] {
			s.fail("node %d: AllocSlots gave slot %d (partition [%d,%d), duplicate=%v)", n.id, sl, lo, hi, seen[sl])
		}
		seen[sl] = true
	}
	for _, q := range a.portals {
		for _, sl := range q.slots {
			if seen[sl] {
				s.fail("node %d: slot %d given to portals %d and %d", n.id, sl, q.id, id)
			}
		}
	}
	for k, sl := range p.slots {
		a.slotOwner[sl] = slotRef{p, k}
	}
	p.busy = make([]*op, len(p.slots))
	for i := len(p.slots) - 1; i >= 0; i-- {
		p.idle = append(p.idle, i)
	}
	// Regions.
	size := cfg.SrcMinBytes + r.IntN(cfg.SrcMaxBytes-cfg.SrcMinBytes+1)
	src, err := a.register(p, alignedBytes(size), abi.PermRemoteRead|abi.PermLocalRead, regSrc)
	if err != nil {
		return nil, err
	}
	p.src = src
	sink, err := a.register(p, alignedBytes((len(p.slots)+1)*areaBytes), abi.PermLocalWrite, regSink)
	if err != nil {
		return nil, err
	}
	p.sink = sink
	dsize := cfg.DstMinBytes + r.IntN(cfg.DstMaxBytes-cfg.DstMinBytes+1)
	if p.wdst, err = a.register(p, alignedBytes(dsize), abi.PermRemoteWrite|abi.PermRemoteRead, regDst); err != nil {
		return nil, err
	}
	if p.wsrc, err = a.register(p, alignedBytes((len(p.slots)+1)*areaBytes), abi.PermLocalRead, regWsrc); err != nil {
		return nil, err
	}
	a.portals = append(a.portals, p)
	n.afterCall("OpenPortal")
	s.tracef("node %d opens portal %d (%d slots, class %d, src %#x %dB, sink %#x, dst %#x %dB, wsrc %#x)", n.id, id, len(p.slots),
		p.class, uint32(src.id), size, uint32(sink.id), uint32(p.wdst.id), dsize, uint32(p.wsrc.id))
	return p, nil
}

func (a *app) register(p *portal, mem []byte, perm abi.Perm, kind regKind) (*region, error) {
	s := a.s
	rg := &region{node: a.n.id, p: p, mem: mem, perm: perm, kind: kind, sink: kind == regSink, deadAt: math.MaxInt64}
	switch kind {
	case regSink, regWsrc:
		fill(mem, poison)
	default:
		s.patternID++
		rg.pattern = s.patternID<<8 | uint64(a.n.id)
		fillPattern(mem, rg.pattern)
		if s.cfg.App.RekeyFrac > 0 && s.patternID&1 == 0 {
			// Every other remote-accessible region allows remote REKEYs
			// (by pattern id: no draw from the app's stream; a new
			// portal's pattern and remote-writable regions take
			// consecutive ids, so one of them allows them).
			perm |= abi.PermRemoteRekey
			rg.perm = perm
		}
		if kind == regDst {
			rg.shadow = append([]byte(nil), mem...)
		}
	}
	kr := s.newKey()
	id, err := a.n.core.RegisterRegion(p.id, mem, perm, kr)
	if err != nil {
		return nil, fmt.Errorf("RegisterRegion(%d bytes): %w", len(mem), err)
	}
	if id == 0 {
		s.fail("node %d: RegisterRegion returned region id 0", a.n.id)
	}
	for _, old := range s.regions {
		if old.node == a.n.id && old.id == id {
			s.fail("node %d: RegisterRegion reused region id %#x (generation not bumped)", a.n.id, uint32(id))
		}
	}
	rg.id = id
	s.addKey(rg, kr, 0) // a new region's key is known everywhere at once (the directory)
	s.regions = append(s.regions, rg)
	return rg, nil
}

// kill marks a region dead and scribbles its memory as the allocator would
// after free: a core that still reads it serves wrong bytes (caught by the
// data check) and one that writes a sink is caught by the poison check.
func (a *app) kill(rg *region) {
	s := a.s
	rg.deadAt = s.now
	a.deadIDs = append(a.deadIDs, rg.id)
	if rg.kind == regSink || rg.kind == regWsrc {
		fill(rg.mem, poison)
	} else {
		s.patternID++
		fillPattern(rg.mem, s.patternID<<8|0xff)
	}
}

// tick: the application posts a burst of ops on each portal.
func (a *app) tick() {
	s := a.s
	cfg := &s.cfg.App
	if s.now >= s.postEnd {
		return
	}
	for _, p := range a.portals {
		p.fresh = p.fresh[:0]
		k := 1 + s.appRng.IntN(cfg.BurstMax)
		if cfg.FillSlots {
			k = len(p.idle) + 1
		}
		for i := 0; i < k; i++ {
			if !p.post() {
				break
			}
		}
		p.cmd.Publish()
		if p.cmd.Corrupt() {
			s.fail("node %d portal %d: the core wrote an impossible command-ring consumer index", a.n.id, p.id)
		}
	}
	a.n.kick = true
	a.n.reschedule()
	next := s.now + 1 + s.appRng.Int64N(2*cfg.TickNs)
	if next < s.postEnd {
		s.schedule(next, evAppTick, a.n.id, 0, nil)
	}
}

// pickKind draws what the next op tests.
func (p *portal) pickKind() opKind {
	r := p.a.s.appRng
	cfg := &p.a.s.cfg.App
	switch x := r.Float64(); {
	case x < cfg.WrongKeyRate:
		return kKeyRandom + opKind(r.IntN(int(kKeyOp-kKeyRandom)+1))
	case x < cfg.WrongKeyRate+cfg.BadRate:
		return opKind(1 + r.IntN(int(kRemotePerm)))
	}
	return kValid
}

// pickTarget draws a live remote-readable region (a pattern region or a
// remote-writable one) on a server node (wantSink: a sink, which allows
// no remote access).
func (a *app) pickTarget(wantSink bool) *region {
	s := a.s
	self := !wantSink && s.cfg.App.SelfReads > 0 && s.appRng.Float64() < s.cfg.App.SelfReads
	if wantSink {
		return a.pickRegion(self, func(rg *region) bool { return rg.kind == regSink })
	}
	return a.pickRegion(self, func(rg *region) bool { return rg.kind == regSrc || rg.kind == regDst })
}

// pickRegion draws a live region that match accepts, of this node (self)
// or of a server node other than this one.
func (a *app) pickRegion(self bool, match func(*region) bool) *region {
	s := a.s
	var cands []*region
	for _, rg := range s.regions {
		if rg.deadAt != math.MaxInt64 || !match(rg) || (rg.node == a.n.id) != self || (!self && !a.isServer(rg.node)) {
			continue
		}
		cands = append(cands, rg)
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[s.appRng.IntN(len(cands))]
}

func (a *app) isServer(node int) bool {
	sv := a.s.cfg.App.Servers
	if sv == nil {
		return true
	}
	for _, v := range sv {
		if v == node {
			return true
		}
	}
	return false
}

// pickLength: mostly full 4 KB ops, some tiny, some odd sizes.
func pickLength(r interface{ IntN(int) int }, max int) uint32 {
	var l int
	switch r.IntN(4) {
	case 0:
		l = abi.MaxOpBytes
	case 1:
		l = 1 + r.IntN(64)
	default:
		l = 1 + r.IntN(abi.MaxOpBytes)
	}
	if l > max {
		l = 1 + r.IntN(max)
	}
	return uint32(l)
}

// post builds and writes one random command; false when the ring or the
// slots are exhausted.
func (p *portal) post() bool {
	a := p.a
	r := a.s.appRng
	if f := a.s.cfg.App.RekeyFrac; f > 0 && r.Float64() < f {
		if tgt := a.pickRegion(false, func(rg *region) bool { return rg.perm&abi.PermRemoteRekey != 0 }); tgt != nil {
			// A REKEY ignores the remote offset: any will do.
			roff := uint64(r.IntN(len(tgt.mem)))
			if r.IntN(4) == 0 {
				roff = r.Uint64()
			}
			kind := p.pickKind()
			if kind == kValid && r.IntN(6) == 0 {
				kind = kRemotePerm // a region without PermRemoteRekey: REMOTE_PERMISSION
			}
			return p.postOpType(abi.OpRekey, kind, tgt, aesni.KeySize, roff, p.mutate)
		}
	}
	write := r.Float64() < a.s.cfg.App.WriteFrac
	kind := p.pickKind()
	var tgt *region
	if write { // never to its own node (the core loops those frames inside: no ④ to see)
		tgt = a.pickRegion(false, func(rg *region) bool { return rg.kind == regDst })
	} else {
		tgt = a.pickTarget(false)
	}
	if tgt == nil && kind != kUnreachable {
		return false // no server yet (all crashed?); try later
	}
	var length uint32
	var roff uint64
	if tgt != nil {
		length = pickLength(r, len(tgt.mem))
		roff = uint64(r.IntN(len(tgt.mem) - int(length) + 1))
	} else {
		length = pickLength(r, abi.MaxOpBytes)
	}
	if write {
		return p.postOpType(abi.OpWrite, kind, tgt, length, roff, p.mutate)
	}
	return p.postOp(kind, tgt, length, roff, p.mutate)
}

// mutate makes a valid command into one with exactly the defect its kind
// names.
func (p *portal) mutate(o *op, c *abi.Command) {
	a := p.a
	s := a.s
	n := a.n
	r := s.appRng
	tgt := o.target
	if o.rekey {
		switch o.kind {
		case kTooLarge: // a REKEY of any length but 16 is BAD_COMMAND (before TOO_LARGE)
			o.kind = kZeroLen
			c.Length = [...]uint32{0, 1, aesni.KeySize - 1, aesni.KeySize + 1, abi.MaxOpBytes + 1}[r.IntN(5)]
			return
		case kRemoteBounds: // a REKEY's offset means nothing: stays valid
			o.kind = kValid
			c.RemoteOffset = math.MaxUint64 - uint64(r.IntN(1<<20))
			return
		case kRemotePerm: // a region without PermRemoteRekey
			sk := a.pickRegion(false, func(rg *region) bool { return rg.perm&abi.PermRemoteRekey == 0 })
			if sk == nil {
				o.kind = kValid
				return
			}
			o.target = sk
			c.RemoteAddr = s.nodes[sk.node].ip4
			c.RemoteRegion = sk.id
			c.RemoteOffset = uint64(r.IntN(len(sk.mem)))
			return
		}
	}
	switch o.kind {
	case kLocalBounds:
		sz := uint64(len(o.local.mem))
		switch r.IntN(3) {
		case 0:
			c.LocalOffset = sz - uint64(c.Length) + 1 + uint64(r.IntN(64))
		case 1:
			c.LocalOffset = sz + uint64(r.IntN(1<<20))
		default:
			c.LocalOffset = math.MaxUint64 - uint64(r.IntN(int(c.Length))) // offset+length wraps
		}
	case kLocalRegion:
		c.LocalRegion = a.foreignLocalRegion(p, o.local)
		o.local = nil
	case kLocalPerm:
		// A READ needs a sink it may write, a WRITE a source it may read.
		lr := p.src
		if o.write {
			lr = p.sink
		}
		c.LocalRegion = lr.id
		o.local = lr
		c.LocalOffset = uint64(r.IntN(max(1, len(lr.mem)-int(c.Length)+1)))
		if int(c.Length) > len(lr.mem) {
			c.LocalOffset = 0
			c.Length = uint32(len(lr.mem))
		}
	case kTooLarge:
		switch r.IntN(3) {
		case 0:
			c.Length = abi.MaxOpBytes + 1
		case 1:
			c.Length = abi.MaxOpBytes + 1 + uint32(r.IntN(1<<16))
		default:
			c.Length = math.MaxUint32
		}
	case kZeroLen:
		c.Length = 0
	case kBadOp:
		c.Op = [...]abi.Op{0, 4, 9, 0x7f, 0xff}[r.IntN(5)]
	case kSlotNotOurs:
		c.Slot = p.slotNotOurs()
	case kSlotRange:
		lo, cnt := n.ecfg.SlotBase, abi.SlotID(n.ecfg.Slots)
		switch {
		case lo > 0 && r.IntN(2) == 0:
			c.Slot = abi.SlotID(r.IntN(int(lo)))
		case r.IntN(3) == 0:
			c.Slot = math.MaxUint32 - abi.SlotID(r.IntN(4))
		default:
			c.Slot = lo + cnt + abi.SlotID(r.IntN(1000))
		}
	case kSlotBusy:
		if len(p.fresh) == 0 {
			c.Slot = p.slotNotOurs()
			o.kind = kSlotNotOurs
		} else {
			c.Slot = p.slots[p.fresh[r.IntN(len(p.fresh))]]
		}
	case kUnreachable:
		// 10.0.250.x: no node has it; nobody answers its ARP requests.
		c.RemoteAddr = 10<<24 | 250<<8 | uint32(1+r.IntN(200))
		o.target = nil
	case kRemoteRegion:
		c.RemoteRegion = a.staleRemote(tgt)
		c.RemoteOffset = 0
		o.target = nil
	case kRemoteBounds:
		sz := uint64(len(tgt.mem))
		switch r.IntN(3) {
		case 0:
			c.RemoteOffset = sz - uint64(c.Length) + 1 + uint64(r.IntN(64))
		case 1:
			c.RemoteOffset = sz + uint64(r.IntN(1<<20))
		default:
			c.RemoteOffset = math.MaxUint64 - uint64(r.IntN(int(c.Length)))
		}
	case kRemotePerm:
		// A READ of a sink (no remote access); a WRITE of a sink or of a
		// pattern region (remote-readable only).
		var sk *region
		if o.write {
			sk = a.pickRegion(false, func(rg *region) bool { return rg.kind == regSink || rg.kind == regSrc })
		} else {
			sk = a.pickTarget(true)
		}
		if sk == nil {
			o.kind = kValid // no sink to aim at: stays a valid op
			return
		}
		o.target = sk
		c.RemoteAddr = s.nodes[sk.node].ip4
		c.RemoteRegion = sk.id
		c.RemoteOffset = uint64(r.IntN(len(sk.mem) - int(c.Length) + 1))
	}
}

// postOp writes one command: a READ of length bytes at roff of tgt into
// the op's own sink area (or the scratch area for ops without an own
// slot), then mutate (if any) introduces the kind's defect. It records the
// op with its deadline. False when the ring or the slots are exhausted.
func (p *portal) postOp(kind opKind, tgt *region, length uint32, roff uint64, mutate func(*op, *abi.Command)) bool {
	return p.postOpType(abi.OpRead, kind, tgt, length, roff, mutate)
}

// postOpType is postOp for a READ or a WRITE. A WRITE of length bytes
// from the op's own area of the portal's write source (where its data,
// stamped with a pattern id of its own, is staged first) to roff of tgt.
func (p *portal) postOpType(opc abi.Op, kind opKind, tgt *region, length uint32, roff uint64, mutate func(*op, *abi.Command)) bool {
	a := p.a
	s := a.s
	n := a.n
	r := s.appRng
	entry := p.cmd.Reserve()
	if entry == nil {
		return false
	}
	if kind.usesSlot() && len(p.idle) == 0 {
		return false
	}
	rekey := opc == abi.OpRekey
	write := opc == abi.OpWrite || rekey
	local := p.sink
	if write {
		local = p.wsrc
	}
	o := &op{kind: kind, p: p, slotIdx: -1, postedAt: s.now, target: tgt, sink: p.sink, local: local, rxAuth0: n.last.RxAuthFailed, write: write, rekey: rekey}
	s.cookieCtr++
	o.cookie = mix64(s.cookieCtr ^ s.cfg.Seed<<20)
	c := &o.cmd
	c.Op = opc
	c.Cookie = o.cookie
	c.LocalRegion = local.id
	c.Length = length
	if tgt != nil {
		c.RemoteAddr = s.nodes[tgt.node].ip4
		c.RemoteRegion = tgt.id
		c.RemoteOffset = roff
	}
	// Local side: the slot's own area, or the scratch area.
	var area int
	if kind.usesSlot() {
		k := p.idle[len(p.idle)-1]
		if !p.areaPoisoned(k, "before posting on it") {
			return false
		}
		p.idle = p.idle[:len(p.idle)-1]
		p.busy[k] = o
		o.slotIdx = k
		c.Slot = p.slots[k]
		area = k * areaBytes
	} else {
		area = len(p.slots) * areaBytes
		p.extra = append(p.extra, o)
		o.extraIdx = len(p.extra) - 1
	}
	c.LocalOffset = uint64(area + r.IntN(areaBytes-int(min(length, abi.MaxOpBytes))+1))
	if rekey {
		o.newKr = s.newKey()
		if o.slotIdx >= 0 {
			// Stage the new K_r: the core copies it when it takes the command.
			o.wsrc = p.wsrc
			o.fillLo = int(c.LocalOffset) - area
			o.fillHi = o.fillLo + aesni.KeySize
			copy(p.wsrc.mem[area+o.fillLo:area+o.fillHi], o.newKr[:])
		}
	} else if write {
		o.stamp = s.nextStamp()
		if o.slotIdx >= 0 {
			// Stage the data: what the target's range must hold once committed.
			o.wsrc = p.wsrc
			o.fillLo = int(c.LocalOffset) - area
			o.fillHi = o.fillLo + int(min(length, abi.MaxOpBytes))
			o.fillOff = roff
			stampBytes(p.wsrc.mem[area+o.fillLo:area+o.fillHi], o.stamp, roff)
		}
	}
	if mutate != nil {
		mutate(o, c)
	}
	p.key(o, tgt)
	if !write && o.kind == kValid && o.target != nil && o.target.kind == regDst {
		s.snapshot(o)
	}
	// Ops that hold their slot for at least a round trip are targets of
	// slot-busy commands later in this tick.
	if o.slotIdx >= 0 && c.RemoteAddr != n.ip4 && o.kind.remote() {
		p.fresh = append(p.fresh, o.slotIdx)
	}
	c.Encode(entry)
	p.cmd.Commit()

	// Bound: local errors at the next Poll; the rest within
	// DISPATCH_TIMEOUT + TIMEOUT (+ resolution when ARP is involved).
	e := &n.ecfg
	wait := max(s.now, n.busyUntil) - s.now
	bound := wait + s.slack()
	switch {
	case o.kind.local():
	case o.kind == kUnreachable:
		bound += int64(e.ResolveTimeout + e.ARPRetry + e.DispatchTimeout)
	default:
		bound += int64(e.DispatchTimeout + e.Timeout)
		if write { // on its pull, the initiator adopts the server's timeout from then
			bound += s.maxTimeout
		}
		if !s.cfg.StaticNeighbors {
			bound += int64(e.ResolveTimeout + e.ARPRetry)
		}
	}
	o.deadline = s.now + bound
	s.ops[o.cookie] = o
	s.deadlines.push(deadline{t: o.deadline, cookie: o.cookie})
	s.res.Posted++
	s.res.ByKind[o.kind]++
	if rekey {
		s.res.RekeyOps++
		s.res.RekeyKinds[o.kind]++
	} else if write {
		s.res.Writes++
		s.res.WriteKinds[o.kind]++
	}
	if o.kind != kValid {
		s.res.Bad++
	}
	s.digest(0x9057, o.cookie, uint64(o.kind))
	s.tracef("node %d posts %s", n.id, o)
	return true
}

// key writes the command's K_d: derived from the newest K_r of the region
// it reads (of tgt for commands that name no live region) this node
// knows, for this node's address, the portal's PID and READ (paper §4.2),
// or a wrong one for the wrong-key kinds. A valid read with a key the
// owner has replaced since becomes a stale-key op.
func (p *portal) key(o *op, tgt *region) {
	a := p.a
	s := a.s
	r := s.appRng
	c := &o.cmd
	o.keyRg = o.target
	if o.keyRg == nil {
		o.keyRg = tgt
	}
	rg := o.keyRg
	if rg == nil {
		return // unreachable address, no region at all: any key
	}
	o.keyVer = rg.known(a.n.id, s.now)
	o.stale = o.keyVer < len(rg.keys)-1
	kv := &rg.keys[o.keyVer]
	ip, pid, opType := a.n.ip.As4(), p.pid, uint8(abi.OpRead)
	if o.rekey {
		opType = uint8(abi.OpRekey)
	} else if o.write {
		opType = uint8(abi.OpWrite)
	}
	switch o.kind {
	case kKeyRandom:
		binary.LittleEndian.PutUint64(c.Key[0:8], r.Uint64())
		binary.LittleEndian.PutUint64(c.Key[8:16], r.Uint64())
		return
	case kKeyInitiator:
		switch r.IntN(3) {
		case 0: // another portal's PID (maybe of another node: it stole a key)
			pid = 1000 + uint32(r.IntN(len(s.nodes)))*100 + uint32(r.IntN(4))
			if pid == p.pid {
				pid++
			}
		case 1: // the K_d another node was given
			m := s.nodes[(a.n.id+1+r.IntN(len(s.nodes)-1))%len(s.nodes)]
			ip = m.ip.As4()
		default:
			pid ^= 1 << r.IntN(32)
		}
	case kKeyOp: // a WRITE's K_d on a READ, a READ's on a WRITE, REKEY's, nonsense
		others := [...]uint8{uint8(abi.OpWrite), uint8(abi.OpRekey), 0, 0xff}
		if o.rekey {
			others[1] = uint8(abi.OpRead)
		} else if o.write {
			others[0] = uint8(abi.OpRead)
		}
		opType = others[r.IntN(len(others))]
		if o.keyOp != 0 { // a test chose it
			opType = o.keyOp
		}
	}
	c.Key = kv.d.Derive(ip, pid, opType)
	if o.kind == kValid && o.stale {
		o.kind = kStaleKey
	}
}

// foreignLocalRegion: a region id this portal may not use as its sink: a
// region of another portal of this core, one deregistered earlier (stale
// generation), or an index beyond the table.
func (a *app) foreignLocalRegion(p *portal, own *region) abi.RegionID {
	r := a.s.appRng
	var cands []abi.RegionID
	for _, q := range a.portals {
		if q != p {
			cands = append(cands, q.sink.id, q.wsrc.id) // usable, just not ours
		}
	}
	cands = append(cands, a.deadIDs...)
	if len(cands) > 0 && r.IntN(4) != 0 {
		return cands[r.IntN(len(cands))]
	}
	switch r.IntN(3) {
	case 0:
		return abi.MakeRegionID(uint16(a.n.ecfg.Regions+r.IntN(100)), 1)
	case 1:
		return 0
	default: // our own sink's (or source's) index with another generation
		id := own.id
		return abi.MakeRegionID(id.Index(), id.Gen()+1+uint16(r.IntN(100)))
	}
}

// staleRemote: a region id on tgt's node that does not name a live region.
func (a *app) staleRemote(tgt *region) abi.RegionID {
	s := a.s
	r := s.appRng
	var cands []abi.RegionID
	for _, rg := range s.regions {
		if rg.node == tgt.node && rg.deadAt != math.MaxInt64 {
			cands = append(cands, rg.id)
		}
	}
	if len(cands) > 0 && r.IntN(3) != 0 {
		// A dead id whose entry may since hold a new region: the
		// generation must keep them apart.
		id := cands[r.IntN(len(cands))]
		for _, rg := range s.regions {
			if rg.node == tgt.node && rg.id == id && rg.deadAt == math.MaxInt64 {
				panic("sim: dead region id reused")
			}
		}
		return id
	}
	switch r.IntN(3) {
	case 0:
		return abi.MakeRegionID(uint16(s.nodes[tgt.node].ecfg.Regions+r.IntN(100)), 1)
	case 1:
		return 0
	default:
		return abi.MakeRegionID(tgt.id.Index(), tgt.id.Gen()+1+uint16(r.IntN(100)))
	}
}

// slotNotOurs: a slot of the core's partition this portal does not hold.
func (p *portal) slotNotOurs() abi.SlotID {
	a := p.a
	r := a.s.appRng
	e := &a.n.ecfg
	for range 64 {
		sl := e.SlotBase + abi.SlotID(r.IntN(e.Slots))
		ours := false
		for _, v := range p.slots {
			if v == sl {
				ours = true
				break
			}
		}
		if !ours {
			return sl
		}
	}
	return e.SlotBase + abi.SlotID(e.Slots) // out of range: still not ours
}

func (a *app) harvestAll() {
	for _, p := range a.portals {
		p.harvest()
	}
	for _, f := range a.flows {
		f.harvest()
	}
}

func (p *portal) harvest() {
	s := p.a.s
	for {
		e := p.cpl.Peek()
		if e == nil {
			break
		}
		var c abi.Completion
		c.Decode(e)
		p.cpl.Advance()
		p.a.completions++
		p.complete(&c)
		if s.err != nil {
			break
		}
	}
	p.cpl.Release()
	if p.cpl.Corrupt() {
		s.fail("node %d portal %d: the core wrote an impossible completion-ring producer index", p.a.n.id, p.id)
	}
}

// allowed: the statuses op o may complete with now.
func (s *Sim) allowed(o *op, st abi.Status) bool {
	if o.p.a.n.shut && !o.kind.local() &&
		(st == abi.StatusAborted || (o.write && st == abi.StatusTimeout)) {
		// Core.Shutdown: ABORTED; a WRITE whose data was all sent stays in
		// service and ends OK or TIMEOUT at its deadline (its server may
		// have committed it).
		return true
	}
	netFail := !s.cfg.Strict && (st == abi.StatusTimeout || st == abi.StatusNack || st == abi.StatusDispatchTimeout ||
		(st == abi.StatusUnreachable && !s.cfg.StaticNeighbors))
	// The region was deregistered after posting: the server had
	// authenticated the request and queued it (REMOTE_REGION when it came
	// to serve it), or it no longer had the region's key when the request
	// arrived (REMOTE_AUTHENTICATION_FAILURE).
	dead := o.target != nil && o.target.deadAt <= s.now && st == abi.StatusRemoteRegion
	// REMOTE_AUTHENTICATION_FAILURE: the server could not authenticate
	// the request. Only for a key that cannot open: the kind's own defect,
	// a K_r replaced or removed before the op completed, or a request the
	// fabric damaged. Ops on other regions never see it.
	authFail := st == abi.StatusRemoteAuthFailure && (o.noAuth() || o.reqCorrupt ||
		(o.keyRg != nil && (o.keyRg.deadAt <= s.now || o.keyVer < len(o.keyRg.keys)-1)))
	if o.local != nil && o.local.deadAt <= s.now && (o.kind.usesSlot() || o.kind == kSlotBusy) {
		// The local region was deregistered after posting: the core may
		// have taken the command after that (LOCAL_REGION), or dropped the
		// responses that arrived after that (TIMEOUT); OK is impossible,
		// since completions written before were read before. Bad-slot
		// commands fail on the slot first, except a slot-busy one whose
		// slot's op failed at once on the same dead region (LOCAL_REGION).
		// A WRITE reads its source when pulled: one whose data was all
		// sent before may still be committed (OK).
		if st == abi.StatusLocalRegion || (st == abi.StatusTimeout && !o.kind.local() && o.kind.usesSlot()) {
			return true
		}
		if st == abi.StatusOK && !(o.write && o.committed) {
			return false
		}
	}
	if o.noAuth() && o.kind.remote() {
		// Nothing the server sends but REMOTE_AUTHENTICATION_FAILURE can
		// reach it: no data, no NACK, no remote error.
		return authFail || (!s.cfg.Strict && (st == abi.StatusTimeout || st == abi.StatusDispatchTimeout ||
			(st == abi.StatusUnreachable && !s.cfg.StaticNeighbors)))
	}
	switch o.kind {
	case kValid:
		return st == abi.StatusOK || netFail || dead || authFail
	case kRemoteBounds, kRemotePerm:
		return st == kindStatus[o.kind] || netFail || dead || authFail
	case kUnreachable:
		return st == abi.StatusUnreachable || (!s.cfg.Strict && st == abi.StatusDispatchTimeout)
	}
	return st == kindStatus[o.kind]
}

// complete checks one completion against the op it names.
func (p *portal) complete(c *abi.Completion) {
	a := p.a
	s := a.s
	o := s.ops[c.Cookie]
	s.digest(0xc01, c.Cookie, uint64(c.Status), uint64(s.now))
	if o == nil {
		s.fail("node %d portal %d: completion {cookie=%#x slot=%d status=%v}: no such op outstanding (second completion, orphan, or invented)",
			a.n.id, p.id, c.Cookie, c.Slot, c.Status)
		return
	}
	s.tracef("node %d completes %s: %v issue=%d total=%d", a.n.id, o, c.Status, c.IssueDelayNs, c.TotalDelayNs)
	e := &a.n.ecfg
	switch {
	case o.p != p:
		s.fail("completion of %s arrived on portal %d", o, p.id)
	case c.Slot != o.cmd.Slot:
		s.fail("completion of %s names slot %d", o, c.Slot)
	case !s.allowed(o, c.Status):
		s.fail("%s completed with %v, want %v", o, c.Status, o.want())
	case c.Status == abi.StatusOK && c.Length != o.cmd.Length:
		s.fail("%s completed OK with length %d", o, c.Length)
	case o.kind != kBadOp && c.Op != o.cmd.Op:
		s.fail("%s completed with op %v", o, c.Op)
	case c.IssueDelayNs > c.TotalDelayNs:
		s.fail("%s: issue_delay %d > total_delay %d", o, c.IssueDelayNs, c.TotalDelayNs)
	case int64(c.TotalDelayNs) > s.now-o.postedAt:
		s.fail("%s: total_delay %d longer than the op existed (%d)", o, c.TotalDelayNs, s.now-o.postedAt)
	case c.Status == abi.StatusDispatchTimeout && int64(c.TotalDelayNs) < int64(e.DispatchTimeout):
		s.fail("%s: DISPATCH_TIMEOUT after only %dns (DispatchTimeout %v)", o, c.TotalDelayNs, e.DispatchTimeout)
	case c.Status == abi.StatusTimeout && int64(c.TotalDelayNs-c.IssueDelayNs) < int64(e.Timeout) &&
		!(o.write && o.pullFirst != 0):
		// (A WRITE that was pulled: its deadline became the server's
		// timeout from the pull, earlier or later; checkWriteCompletion.)
		s.fail("%s: TIMEOUT after only %dns in service (Timeout %v)", o, c.TotalDelayNs-c.IssueDelayNs, e.Timeout)
	case c.Status == abi.StatusTimeout && (!o.write || o.pullFirst == 0) && int64(c.TotalDelayNs-c.IssueDelayNs) > int64(e.Timeout)+s.slack():
		// (A WRITE that was pulled: its deadline moved to the server's
		// timeout from the pull, checked in checkWriteCompletion.)
		s.fail("%s: TIMEOUT after %dns in service (Timeout %v): late", o, c.TotalDelayNs-c.IssueDelayNs, e.Timeout)
	case c.Status == abi.StatusDispatchTimeout && s.cfg.StaticNeighbors && int64(c.TotalDelayNs) > int64(e.DispatchTimeout)+s.slack():
		// (With ARP, time spent resolving comes first and adds to it.)
		s.fail("%s: DISPATCH_TIMEOUT after %dns (DispatchTimeout %v): late", o, c.TotalDelayNs, e.DispatchTimeout)
	case c.Status == abi.StatusUnreachable && o.kind != kUnreachable && int64(c.TotalDelayNs) < int64(e.ResolveTimeout):
		s.fail("%s: UNREACHABLE after %dns although node %d exists and ResolveTimeout is %v (neighbor table refused it?)",
			o, c.TotalDelayNs, s.nodeOfIP(o.cmd.RemoteAddr), e.ResolveTimeout)
	}
	if s.err != nil {
		return
	}
	if o.write {
		s.checkWriteCompletion(o, c)
		if s.err != nil {
			return
		}
	}
	if o.slotIdx >= 0 {
		if o.sink == p.sink {
			p.checkArea(o, c.Status)
		} // else: the area is in a deregistered sink, checked whole at the end
		if o.wsrc != nil && o.wsrc == p.wsrc && s.err == nil {
			p.checkSrcArea(o)
		}
		if s.err != nil {
			return
		}
		p.busy[o.slotIdx] = nil
		p.idle = append(p.idle, o.slotIdx)
	} else {
		p.removeExtra(o)
	}
	delete(s.ops, o.cookie)
	s.releaseSnap(o)
	s.res.ByStatus[c.Status]++
	if c.Status == abi.StatusRemoteAuthFailure && o.reqCorrupt && !o.noAuth() {
		s.res.AuthFailDamaged++
	}
}

// want is the status op o gets on a clean network.
func (o *op) want() abi.Status {
	if o.stale && o.kind.remote() {
		return abi.StatusRemoteAuthFailure
	}
	return kindStatus[o.kind]
}

func (p *portal) removeExtra(o *op) {
	last := len(p.extra) - 1
	q := p.extra[last]
	p.extra[o.extraIdx] = q
	q.extraIdx = o.extraIdx
	p.extra[last] = nil
	p.extra = p.extra[:last]
}

// checkArea: after an op on slot k completes, its area holds exactly the
// remote bytes (OK), or only remote bytes and poison (failure: chunks that
// arrived before the failure), and poison everywhere else. Then the area
// is poisoned again for the slot's next op.
func (p *portal) checkArea(o *op, st abi.Status) {
	s := p.a.s
	base := o.slotIdx * areaBytes
	area := p.sink.mem[base : base+areaBytes]
	lo, hi := 0, 0
	if o.kind == kValid && o.target != nil && !o.write { // (a WRITE's sink area stays untouched)
		lo = int(o.cmd.LocalOffset) - base
		hi = lo + int(o.cmd.Length)
		want := s.expect[:hi-lo]
		got := area[lo:hi]
		if st != abi.StatusOK && firstNotPoison(got) < 0 {
			// Nothing landed (the common failure): no need for the data.
		} else if o.target.kind == regDst {
			zeroOK := !s.cfg.StrictFailedSink && p.a.n.core.Stats().RxAuthFailed > o.rxAuth0
			p.checkReadOfWritten(o, st, got, zeroOK)
			if s.err != nil {
				return
			}
		} else if fillPatternAt(want, o.target.pattern, o.cmd.RemoteOffset); st == abi.StatusOK {
			if !bytes.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				s.fail("corrupted data accepted: %s completed OK but byte %d of its data is %#02x, want %#02x",
					o, i, got[i], want[i])
				return
			}
		} else {
			// The core opens a response chunk straight into the sink and
			// zeroes it when the tag does not match (OpenResponseDirect):
			// after an answer failed authentication on this node, a failed
			// op may also hold zeros where no genuine chunk came.
			zeroOK := !s.cfg.StrictFailedSink && p.a.n.core.Stats().RxAuthFailed > o.rxAuth0
			zeroed := false
			for i, b := range got {
				if b == want[i] || b == poison {
					continue
				}
				if b == 0 && zeroOK {
					zeroed = true
					continue
				}
				s.fail("%s failed with %v but byte %d of its sink is %#02x (neither its data %#02x nor untouched)",
					o, st, i, b, want[i])
				return
			}
			if zeroed {
				s.res.ZeroedSinks++
			}
		}
	}
	if i := firstNotPoison(area[:lo]); i >= 0 {
		s.fail("%s: byte %d of its slot's area, before the op's range [%d,%d), was written (%#02x)", o, i, lo, hi, area[i])
		return
	}
	if i := firstNotPoison(area[hi:]); i >= 0 {
		s.fail("%s: byte %d of its slot's area, after the op's range [%d,%d), was written (%#02x)", o, hi+i, lo, hi, area[hi+i])
		return
	}
	fill(area, poison)
}

// areaPoisoned: an idle slot's area must be untouched (a late response of
// a completed op must never land).
func (p *portal) areaPoisoned(k int, when string) bool {
	s := p.a.s
	area := p.sink.mem[k*areaBytes : (k+1)*areaBytes]
	if i := firstNotPoison(area); i >= 0 {
		s.fail("node %d portal %d: area of idle slot %d written at byte %d (%#02x) %s: a late response landed after its op completed",
			p.a.n.id, p.id, p.slots[k], i, area[i], when)
		return false
	}
	area = p.wsrc.mem[k*areaBytes : (k+1)*areaBytes]
	if i := firstNotPoison(area); i >= 0 {
		s.fail("node %d portal %d: source area of idle slot %d written at byte %d (%#02x) %s", p.a.n.id, p.id, p.slots[k], i, area[i], when)
		return false
	}
	return true
}

// crash: the application dies. Its portal is closed with ops in flight;
// those become orphans and must never complete or touch its memory.
func (a *app) crash() {
	s := a.s
	if len(a.portals) == 0 {
		return
	}
	i := s.faultRng.IntN(len(a.portals))
	p := a.portals[i]
	s.tracef("node %d: application of portal %d crashes", a.n.id, p.id)
	if err := a.n.core.ClosePortal(p.id); err != nil {
		s.fail("node %d: ClosePortal(%d): %v", a.n.id, p.id, err)
		return
	}
	for k, o := range p.busy {
		if o != nil {
			delete(s.ops, o.cookie)
			s.releaseSnap(o)
			o.orphan = true // a WRITE whose data was all sent may still commit
			s.res.Orphaned++
			p.busy[k] = nil
		}
	}
	for _, o := range p.extra {
		delete(s.ops, o.cookie)
		o.orphan = true
		s.res.Orphaned++
	}
	p.extra = nil
	p.closed = true
	a.kill(p.src)
	a.kill(p.sink)
	a.kill(p.wdst)
	a.kill(p.wsrc)
	a.portals = append(a.portals[:i], a.portals[i+1:]...)
	a.closed = append(a.closed, p)
	// A zombie thread of the dead app still posts: the core must ignore
	// the closed portal's ring.
	if e := p.cmd.Reserve(); e != nil {
		c := abi.Command{Op: abi.OpRead, Slot: p.slots[0], Cookie: 0xdead, Length: 64, LocalRegion: p.sink.id,
			RemoteAddr: a.n.ip4, RemoteRegion: p.src.id}
		c.Encode(e)
		p.cmd.Commit()
		p.cmd.Publish()
	}
	a.n.kick = true
	a.n.reschedule()
	a.n.afterCall("ClosePortal")
	if _, err := a.n.core.AllocSlots(p.id, 1); err == nil {
		// The id may have been reused already only if we reopened; we
		// have not, so the closed portal must be gone.
		s.fail("node %d: AllocSlots on closed portal %d succeeded", a.n.id, p.id)
	}
}

// churn: a portal deregisters its remote-readable region and registers a
// new one (new id, maybe the same table entry with a new generation).
func (a *app) churn() {
	s := a.s
	if len(a.portals) == 0 {
		return
	}
	p := a.portals[s.faultRng.IntN(len(a.portals))]
	switch s.faultRng.IntN(4) {
	case 0:
		a.churnSink(p)
		return
	case 1:
		a.churnDst(p)
		return
	case 2:
		a.churnWsrc(p)
		return
	}
	old := p.src
	if err := a.n.core.DeregisterRegion(p.id, old.id); err != nil {
		s.fail("node %d: DeregisterRegion(%#x): %v", a.n.id, uint32(old.id), err)
		return
	}
	if err := a.n.core.DeregisterRegion(p.id, old.id); err == nil {
		s.fail("node %d: DeregisterRegion(%#x) twice succeeded", a.n.id, uint32(old.id))
		return
	}
	a.kill(old)
	cfg := &s.cfg.App
	size := cfg.SrcMinBytes + s.appRng.IntN(cfg.SrcMaxBytes-cfg.SrcMinBytes+1)
	rg, err := a.register(p, alignedBytes(size), abi.PermRemoteRead|abi.PermLocalRead, regSrc)
	if err != nil {
		s.fail("node %d: re-registering: %v", a.n.id, err)
		return
	}
	p.src = rg
	s.tracef("node %d portal %d: region %#x replaced by %#x", a.n.id, p.id, uint32(old.id), uint32(rg.id))
	a.n.afterCall("RegisterRegion")
}

// churnSink replaces a portal's sink while reads into it are in flight:
// once DeregisterRegion returns, the core must never write the old memory
// (it is poisoned and checked at the end), and ops still in flight into it
// cannot complete OK.
func (a *app) churnSink(p *portal) {
	s := a.s
	old := p.sink
	if err := a.n.core.DeregisterRegion(p.id, old.id); err != nil {
		s.fail("node %d: DeregisterRegion(sink %#x): %v", a.n.id, uint32(old.id), err)
		return
	}
	a.kill(old)
	a.deadSinks = append(a.deadSinks, old)
	rg, err := a.register(p, alignedBytes(len(old.mem)), abi.PermLocalWrite, regSink)
	if err != nil {
		s.fail("node %d: re-registering a sink: %v", a.n.id, err)
		return
	}
	p.sink = rg
	s.tracef("node %d portal %d: sink %#x replaced by %#x", a.n.id, p.id, uint32(old.id), uint32(rg.id))
	a.n.afterCall("RegisterRegion")
}

// churnDst deregisters a portal's remote-writable region while writes to
// it (and reads of it) are in flight, and registers a new one: a write not
// committed by then must fail (REMOTE_REGION when its data arrives, or
// REMOTE_AUTHENTICATION_FAILURE when its request does) and change nothing
// (the old memory is scribbled: a commit into it would show).
func (a *app) churnDst(p *portal) {
	s := a.s
	old := p.wdst
	if err := a.n.core.DeregisterRegion(p.id, old.id); err != nil {
		s.fail("node %d: DeregisterRegion(dst %#x): %v", a.n.id, uint32(old.id), err)
		return
	}
	a.kill(old)
	cfg := &s.cfg.App
	size := cfg.DstMinBytes + s.appRng.IntN(cfg.DstMaxBytes-cfg.DstMinBytes+1)
	rg, err := a.register(p, alignedBytes(size), abi.PermRemoteWrite|abi.PermRemoteRead, regDst)
	if err != nil {
		s.fail("node %d: re-registering a remote-writable region: %v", a.n.id, err)
		return
	}
	p.wdst = rg
	s.tracef("node %d portal %d: dst %#x replaced by %#x", a.n.id, p.id, uint32(old.id), uint32(rg.id))
	a.n.afterCall("RegisterRegion")
}

// churnWsrc replaces a portal's write source while writes from it are in
// flight: a write not pulled by then fails LOCAL_REGION (its data cannot
// be sent: the server commits nothing); one whose data was all sent may
// still commit. The old memory is poisoned: data sent from it afterwards
// would fail the commit check.
func (a *app) churnWsrc(p *portal) {
	s := a.s
	old := p.wsrc
	if err := a.n.core.DeregisterRegion(p.id, old.id); err != nil {
		s.fail("node %d: DeregisterRegion(wsrc %#x): %v", a.n.id, uint32(old.id), err)
		return
	}
	a.kill(old)
	a.deadSinks = append(a.deadSinks, old)
	rg, err := a.register(p, alignedBytes(len(old.mem)), abi.PermLocalRead, regWsrc)
	if err != nil {
		s.fail("node %d: re-registering a write source: %v", a.n.id, err)
		return
	}
	p.wsrc = rg
	s.tracef("node %d portal %d: wsrc %#x replaced by %#x", a.n.id, p.id, uint32(old.id), uint32(rg.id))
	a.n.afterCall("RegisterRegion")
}

// rekey: the owner replaces the K_r of one of its regions (Core.Rekey):
// requests that arrive afterwards authenticate only with K_d derived from
// the new key. The other nodes learn it after the key distribution delay;
// until then they post with the old key, and those ops must fail
// authentication. Rekeys that must be refused are tried first.
func (a *app) rekey() {
	s := a.s
	r := s.faultRng
	if len(a.portals) == 0 {
		return
	}
	p := a.portals[r.IntN(len(a.portals))]
	var rg *region
	switch r.IntN(5) {
	case 0:
		rg = p.sink // a target of remote-perm commands
	case 1, 2:
		rg = p.wdst // writes (and reads) in flight with the old key
	default:
		rg = p.src
	}
	c := a.n.core
	for _, q := range a.portals {
		if q != p && c.Rekey(q.id, rg.id, s.newKey()) == nil {
			s.fail("node %d: Rekey of region %#x by portal %d, which does not own it, succeeded", a.n.id, uint32(rg.id), q.id)
			return
		}
	}
	if len(a.deadIDs) > 0 {
		id := a.deadIDs[r.IntN(len(a.deadIDs))]
		if c.Rekey(p.id, id, s.newKey()) == nil {
			s.fail("node %d: Rekey of deregistered region %#x succeeded", a.n.id, uint32(id))
			return
		}
	}
	a.rekeyRegion(p, rg)
}

// rekeyRegion installs a new K_r for region rg of portal p on the core and
// in the directory; the other nodes learn it within Faults.KeyDelayNs.
func (a *app) rekeyRegion(p *portal, rg *region) {
	s := a.s
	kr := s.newKey()
	if err := a.n.core.Rekey(p.id, rg.id, kr); err != nil {
		s.fail("node %d: Rekey(%#x): %v", a.n.id, uint32(rg.id), err)
		return
	}
	a.rekeys++
	s.res.Rekeys++
	s.addKey(rg, kr, s.cfg.Faults.KeyDelayNs)
	s.tracef("node %d portal %d: region %#x rekeyed (v%d)", a.n.id, p.id, uint32(rg.id), len(rg.keys)-1)
	a.n.afterCall("Rekey")
}

func (a *app) slotsHeld() uint64 {
	var v uint64
	for _, p := range a.portals {
		v += uint64(len(p.slots))
	}
	for _, f := range a.flows {
		if !f.closed {
			v += uint64(len(f.slots))
		}
	}
	return v
}

// checkAtEnd: no memory written where it must not be, no completion on a
// closed portal's ring.
func (a *app) checkAtEnd() {
	s := a.s
	for _, p := range a.portals {
		for k := range p.slots {
			if !p.areaPoisoned(k, "at the end") {
				return
			}
		}
		if i := firstNotPoison(p.sink.mem[len(p.slots)*areaBytes:]); i >= 0 {
			s.fail("node %d portal %d: scratch area (target of commands that must never run) written at %d", a.n.id, p.id, i)
			return
		}
		if i := firstNotPoison(p.wsrc.mem[len(p.slots)*areaBytes:]); i >= 0 {
			s.fail("node %d portal %d: scratch area of the write source written at %d", a.n.id, p.id, i)
			return
		}
	}
	for _, rg := range s.regions {
		if rg.node != a.n.id || rg.deadAt != math.MaxInt64 {
			continue
		}
		switch rg.kind {
		case regSrc:
			if !checkPattern(rg.mem, rg.pattern) {
				s.fail("node %d: remote-readable region %#x was written", a.n.id, uint32(rg.id))
				return
			}
		case regDst:
			if i := firstDiff(rg.mem, rg.shadow); i >= 0 {
				s.fail("node %d: byte %d of remote-writable region %#x is %#02x at the end, the model says %#02x",
					a.n.id, i, uint32(rg.id), rg.mem[i], rg.shadow[i])
				return
			}
		}
	}
	for _, rg := range a.deadSinks {
		if i := firstNotPoison(rg.mem); i >= 0 {
			s.fail("node %d: deregistered sink %#x written at %d after DeregisterRegion returned", a.n.id, uint32(rg.id), i)
			return
		}
	}
	for _, p := range a.closed {
		if v := p.cpl.Available(); v != 0 {
			s.fail("node %d: %d completions written on portal %d after it was closed", a.n.id, v, p.id)
			return
		}
		if i := firstNotPoison(p.sink.mem); i >= 0 {
			s.fail("node %d: sink of closed portal %d written at %d after close", a.n.id, p.id, i)
			return
		}
		if i := firstNotPoison(p.wsrc.mem); i >= 0 {
			s.fail("node %d: write source of closed portal %d written at %d after close", a.n.id, p.id, i)
			return
		}
	}
}

func (a *app) closeAll() {
	s := a.s
	for _, p := range a.portals {
		if err := a.n.core.ClosePortal(p.id); err != nil {
			s.fail("node %d: ClosePortal(%d) at the end: %v", a.n.id, p.id, err)
			return
		}
		if err := a.n.core.ClosePortal(p.id); err == nil {
			s.fail("node %d: ClosePortal(%d) twice succeeded", a.n.id, p.id)
			return
		}
		a.kill(p.src)
		a.kill(p.sink)
		a.kill(p.wdst)
		a.kill(p.wsrc)
		p.closed = true
		a.closed = append(a.closed, p)
	}
	a.portals = nil
	for _, f := range a.flows {
		f.close()
		if s.err != nil {
			return
		}
	}
}

// Patterns: byte i of a remote-readable region with pattern id g.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func patByte(g, i uint64) byte { return byte(mix64(g<<32^i>>3) >> (8 * (i & 7))) }

// fillPatternAt writes bytes off.. of pattern g into dst, a word at a time.
func fillPatternAt(dst []byte, g, off uint64) {
	for i := 0; i < len(dst); {
		o := off + uint64(i)
		v := mix64(g<<32^o>>3) >> (8 * (o & 7))
		for k := o & 7; k < 8 && i < len(dst); k++ {
			dst[i] = byte(v)
			v >>= 8
			i++
		}
	}
}

func fillPattern(b []byte, g uint64) { fillPatternAt(b, g, 0) }

func checkPattern(b []byte, g uint64) bool {
	var want [areaBytes]byte
	for off := 0; off < len(b); off += len(want) {
		n := min(len(want), len(b)-off)
		fillPatternAt(want[:n], g, uint64(off))
		if !bytes.Equal(b[off:off+n], want[:n]) {
			return false
		}
	}
	return true
}

var poisonBuf = bytes.Repeat([]byte{poison}, areaBytes)

// firstNotPoison returns the index of the first byte of b that is not
// poison, or -1.
func firstNotPoison(b []byte) int {
	for off := 0; off < len(b); off += len(poisonBuf) {
		n := min(len(poisonBuf), len(b)-off)
		if !bytes.Equal(b[off:off+n], poisonBuf[:n]) {
			for i, v := range b[off : off+n] {
				if v != poison {
					return off + i
				}
			}
		}
	}
	return -1
}

func fill(b []byte, v byte) {
	if v == poison {
		for off := 0; off < len(b); off += len(poisonBuf) {
			copy(b[off:], poisonBuf)
		}
		return
	}
	for i := range b {
		b[i] = v
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
