package engine

import (
	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// sender is a core's way out: the Tx, the core's addresses, its IV lane,
// the seal backend, the header being encoded, and the self-loop. Both
// sides build their frames in a buffer from buffer, encode the header
// with hdr, seal through seal, and hand the frame to emit.
type sender struct {
	tx   Tx
	seal sealer
	// now seals at once (crypto/cipher: goSealer), for the frames the
	// self-loop copies as they are emitted (sealFor).
	now  sealer
	lane *aesni.IVLane
	// tag is this core's lane tag, CoreID<<ivTagShift: the top bits of
	// every IV counter it seals with (see ivTagShift).
	tag  uint64
	mac  wire.MAC
	ip   uint32
	ipb  [4]byte // ip as the IV's address part
	core uint16  // CoreID: the low bits of this core's initiator ports (opPort)
	port uint16  // UDPPort+CoreID: the WRITE data of this core's pulls comes here
	udp  uint16  // UDPPort: requests come here
	// maxPayload is the most data one frame carries on the port (the
	// MTU's, at most one op's); a route may set less (routeTable).
	maxPayload int
	// dscp is the DSCP of an op's frames, by its class.
	dscp [abi.NumClass]uint8
	hdr  wire.Fields // the header of the frame being encoded
	// highOut: a high-class frame has left in this Poll (Core.Poll clears
	// it); the serving side then bounds the low-class work that follows
	// it into the same burst (Config.LowAfterHigh).
	highOut bool

	// Frames addressed to this engine itself loop back inside the core
	// (unless HairpinSelf): switches do not return a frame to the port it
	// came from. A fixed ring of frame copies, received by Core.runLoop;
	// it has no buffers with HairpinSelf.
	loop ring[loopFrame]
	st   *Stats
}

// loopFrame is one frame of the self-loop: its buffer (allocated in New)
// and length.
type loopFrame struct {
	b []byte
	n int
}

// selfLoopFrames bounds frames in flight from the engine to itself: a
// request plus its responses for every op the window admits (64 x 4 KB ops
// at 1408 B per frame: 256 frames) fit with room to spare.
const selfLoopFrames = 512

func newSender(cfg *Config, tx Tx, st *Stats) *sender {
	o := &sender{
		tx:         tx,
		lane:       cfg.IV.NewLane(),
		tag:        uint64(cfg.CoreID) << ivTagShift,
		mac:        cfg.LocalMAC,
		ip:         ip4(cfg.LocalIP.As4()),
		ipb:        cfg.LocalIP.As4(),
		core:       cfg.CoreID,
		port:       cfg.UDPPort + cfg.CoreID,
		udp:        cfg.UDPPort,
		maxPayload: min(wire.MaxPayload(cfg.MTU), abi.MaxOpBytes),
		dscp:       cfg.DSCP,
		st:         st,
	}
	if !cfg.HairpinSelf {
		o.loop = newRing[loopFrame](selfLoopFrames)
		for i := range o.loop.buf {
			o.loop.buf[i].b = make([]byte, wire.EthLen+cfg.MTU)
		}
	}
	return o
}

// buffer is the Tx's next frame buffer, or nil (counted) when it has none.
func (o *sender) buffer() []byte {
	b := o.tx.Buffer()
	if b == nil {
		o.st.TxNoBuffer++
	}
	return b
}

// IV lane tags. The counters of an IV (sender address ‖ counter, paper
// Appendix A) come from the engine's one durable aesni.IVSource, through
// one lane per core; each core puts its CoreID in the top bits of every
// counter it uses, so that a receiver can tell an engine's lanes apart:
// the counters of one lane grow (a lane takes its ranges in order), while
// the lanes of an engine interleave. The serving side keeps an anti-replay
// window per sender address and lane tag (replay.go), and steers every
// request of one lane to one core (Steer). Counters stay unique across
// restarts and whatever the number of cores: the source never hands out a
// counter twice, and a tag only sets bits the source's counters do not
// reach before 2^58 (a counter at or past it is refused, IVErrors, like
// an exhausted source). A one-core engine (CoreID 0) sends the source's
// counters unchanged.
const (
	ivTagShift     = 58 // 64 - log2(wire.MaxCores)
	ivCounterLimit = 1 << ivTagShift
)

// counter is a fresh IV counter; false (counted) when the lane has none.
func (o *sender) counter() (uint64, bool) {
	ctr, err := o.lane.Next()
	if err != nil || ctr >= ivCounterLimit {
		o.st.IVErrors++
		return 0, false
	}
	return ctr | o.tag, true
}

// counters is the first of n fresh IV counters (a response's span); false
// (counted) when the lane has none. The n counters share the lane's tag.
func (o *sender) counters(n uint64) (uint64, bool) {
	base, err := o.lane.NextN(n)
	if err != nil || base+n > ivCounterLimit {
		o.st.IVErrors++
		return 0, false
	}
	return base | o.tag, true
}

// selfAddressed reports whether frame b (its header encoded) goes into
// the self-loop.
func (o *sender) selfAddressed(b []byte) bool {
	return o.loop.buf != nil && wire.MAC(b[0:6]) == o.mac
}

// sealFor is the sealer of frame b, its header encoded: the backend's,
// or, for a frame the self-loop copies as soon as it is emitted, one that
// seals at once (the backend may batch its seals to run later: in a cgo
// call of their own, which the copy would need first).
func (o *sender) sealFor(b []byte) sealer {
	if o.selfAddressed(b) {
		return o.now
	}
	return o.seal
}

// emit sends a finished frame: to the port, or, when it is addressed to
// this engine itself, into the self-loop ring. The tx buffer is not sent
// in that case and Tx.Buffer hands it out again for the next frame; its
// seal is done already (sealFor).
func (o *sender) emit(b []byte, n int) {
	if o.selfAddressed(b) {
		f := o.loop.push()
		if f == nil {
			o.st.TxNoBuffer++
			return
		}
		copy(f.b, b[:n])
		f.n = n
		o.st.SelfLoop++
		return
	}
	o.tx.Send(n)
	o.st.TxFrames++
}

// opPort is the initiator port of the op in slot i with sequence seq:
// this core's id in the low bits and 8 bits of entropy mixed from the
// two (a fixed function: no random source, the same op always gets the
// same port), so consecutive ops, of one slot or of many, spread over a
// fabric's equal-cost paths (see wire.InitiatorPort).
func (o *sender) opPort(i int32, seq uint32) uint16 {
	h := uint32(i)*0x9e3779b1 ^ seq*0x85ebca77
	h ^= h >> 15
	h *= 0x2c1b3c6d
	h ^= h >> 12
	return wire.InitiatorPort(uint8(h>>24), o.core)
}

// ownsPort reports whether p is one of this core's initiator ports,
// where the answers to its ops and its pulls arrive.
func (o *sender) ownsPort(p uint16) bool {
	core, ok := wire.PortCore(p)
	return ok && core == o.core
}

// stream sends data[*sent:] as frames of at most chunk bytes, each
// sealed under a straight from data into the frame (one pass, fused with
// the cipher), its IV the response nonce of base and the frame's offset,
// curry (the request's or the pull's IV) curried in. data sits at offset
// at (a multiple of wire.ChunkAlign) of the op: a frame's offset is at
// plus its offset in data. The caller has set hdr's addresses, ports,
// DSCP, type, PID, tag and region; stream sets each frame's length and
// offset, and advances *sent. It returns false when it ran out of tx
// buffers: call it again later.
func (o *sender) stream(a *aesni.AEAD, data []byte, chunk int, sent *uint32, at uint32, base uint64, curry []byte) bool {
	f := &o.hdr
	for *sent < uint32(len(data)) {
		b := o.buffer()
		if b == nil {
			return false
		}
		off := *sent
		n := min(len(data)-int(off), chunk)
		f.Length, f.Offset = uint32(n), uint64(at+off)
		aesni.PutResponseNonce(f.IV[:], o.ipb, base, uint64(at+off))
		fl := wire.Encode(b, f, n)
		o.sealFor(b).sealResponse(a, wire.Sealed(b, n), data[off:off+uint32(n)], wire.IV(b), wire.AAD(b), curry)
		o.emit(b, fl)
		*sent += uint32(n)
	}
	return true
}

// gather sends the first frame of an answer whose first part head and
// its second part data (at offset len(head)+gap of the op, after gap
// zero bytes) come from two places: head ‖ gap zeros ‖ as much of data
// as fits in chunk bytes, sealed in one pass from where they lie
// (sealResponseGather), at the op's offset 0. It advances *sent to the
// answer bytes the frame holds, and returns false when there was no tx
// buffer. head and data must be non-empty and len(head)+gap below chunk.
func (o *sender) gather(a *aesni.AEAD, head []byte, gap int, data []byte, chunk int, sent *uint32, base uint64, curry []byte) bool {
	b := o.buffer()
	if b == nil {
		return false
	}
	f := &o.hdr
	n := min(len(head)+gap+len(data), chunk)
	f.Length, f.Offset = uint32(n), 0
	aesni.PutResponseNonce(f.IV[:], o.ipb, base, 0)
	fl := wire.Encode(b, f, n)
	o.sealFor(b).sealResponseGather(a, wire.Sealed(b, n), head, gap, data[:n-len(head)-gap], wire.IV(b), wire.AAD(b), curry)
	o.emit(b, fl)
	*sent = uint32(n)
	return true
}

// send transmits a frame that is never addressed to this engine and
// never sealed (ARP).
func (o *sender) send(n int) {
	o.tx.Send(n)
	o.st.TxFrames++
}
