package engine

import (
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/stage"
)

// Cost accounting (package engine/stage): a core given a stage.Stages
// marks the boundaries of its stages on it, per burst and per Poll phase;
// the counter the marks read is its driver's (the core reads no clock).
// Without one (nil, the default) every boundary costs one nil check.
//
// The marks, where stage's documentation says what each stage covers:
//
//	ReceiveBurst (ipsec-mb)  the prepares run in the stage the driver
//	                         entered (Receive); endBurst: Open around the
//	                         open batch, then Protocol for the finishes;
//	                         a batch ended in mid-burst, and an ARP or
//	                         ICMP frame, enter Receive again
//	ReceiveBurst (crypto/cipher), the self-loop
//	                         per frame: Receive, Open, Protocol
//	ReceiveBurst in two passes (PollBytes: short frames first)
//	                         the short frames as crypto/cipher's; then
//	                         Completion when something is published,
//	                         Receive, and the bulk chunks as a burst
//	Poll                     Protocol (if not in it already); with portals
//	                         open, a pass over their rings that found no
//	                         command is EmptyRings; Build from the
//	                         arbitration on; Completion when something is
//	                         published or flushed
//	seals                    ipsec-mb: Seal around each batch run the
//	                         core makes itself (a full batch, a region's
//	                         removal, the end of Poll with a Tx that
//	                         has no TxCHook); crypto/cipher, and the
//	                         self-loop's frames: around each seal
//
// The runner marks the loop's own boundaries (Receive at the rx poll,
// EmptyRx, Transmit from the end of Poll through a port's Flush, Clock,
// Loop, Idle); engine/port/dpdkport marks Transmit around the crossings
// that only transmit, and charges the parts of its Recv's crossing to
// Seal (the seal batch run by its TxCHook) and Transmit.

// SetStages makes the core mark its stages on s (nil: no marks). Call it
// before the core's driver runs, on the goroutine that will drive it: s
// belongs to that goroutine's loop from then on.
func (c *Core) SetStages(s *stage.Stages) {
	c.stg = s
	c.out.seal = withStages(c.out.seal, s)
	c.out.now = withStages(c.out.now, s) // the self-loop's seals (sender.sealFor)
}

// withStages is sealer x marking its seals on s (nil: none).
func withStages(x sealer, s *stage.Stages) sealer {
	switch x := x.(type) {
	case goSealer:
		if s != nil {
			return &stagedSealer{sealer: x, s: s}
		}
	case *stagedSealer:
		if s == nil {
			return x.sealer
		}
		x.s = s
	case interface{ setStages(*stage.Stages) }: // ipsec-mb: it marks its batch runs
		x.setStages(s)
	}
	return x
}

// stagedSealer marks Seal around each seal of a backend that seals at
// once (crypto/cipher): a section per seal, only while a core has stages.
type stagedSealer struct {
	sealer
	s *stage.Stages
}

func (g *stagedSealer) sealRequest(a *aesni.AEAD, tag, nonce, aad []byte) {
	prev := g.s.Enter(stage.Seal)
	g.sealer.sealRequest(a, tag, nonce, aad)
	g.s.Enter(prev)
}

func (g *stagedSealer) sealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte) {
	prev := g.s.Enter(stage.Seal)
	g.sealer.sealResponse(a, out, plaintext, nonce, aad, reqIV)
	g.s.Enter(prev)
}

func (g *stagedSealer) sealResponseGather(a *aesni.AEAD, out, head []byte, gap int, plaintext, nonce, aad, reqIV []byte) {
	prev := g.s.Enter(stage.Seal)
	g.sealer.sealResponseGather(a, out, head, gap, plaintext, nonce, aad, reqIV)
	g.s.Enter(prev)
}

func (g *stagedSealer) sealAuthFailure(tag, nonce, aad, reqIV []byte) {
	prev := g.s.Enter(stage.Seal)
	g.sealer.sealAuthFailure(tag, nonce, aad, reqIV)
	g.s.Enter(prev)
}

// receiveStaged is receive with its stages marked: the frame's prepare in
// Receive, its open in Open, its finish in Protocol (which runs on until
// the next mark).
func (c *Core) receiveStaged(now int64, frame []byte, s *stage.Stages) {
	s.Enter(stage.Receive)
	w := &c.rxw
	if c.prepare(now, frame, w) {
		s.Enter(stage.Open)
		ok := openNow(w, c.reserved)
		s.Enter(stage.Protocol)
		c.finish(now, w, ok)
	}
}

// receiveEachStaged is receiveEach with stages.
func (c *Core) receiveEachStaged(now int64, frames [][]byte, s *stage.Stages) {
	for _, f := range frames {
		c.stats.RxFrames++
		c.receiveStaged(now, f, s)
	}
}

// runLoopStaged is runLoop with stages: each frame of the self-loop is
// charged to Receive, Open and Protocol, and the stage that ran the loop
// (Build) resumes after the last.
func (c *Core) runLoopStaged(now int64, s *stage.Stages) int {
	n := 0
	l := &c.out.loop
	back := s.Current()
	for l.len() > 0 && n < len(l.buf) {
		f := l.front()
		c.receiveStaged(now, f.b[:f.n], s) // may push; never overwrites the front
		l.pop()
		n++
	}
	if n > 0 {
		s.Enter(back)
	}
	return n
}
