package port

import "github.com/onerma/onerma/engine"

// Handover is how a port hands a frame, of type F (an mbuf, a byte
// slice, the simulator's frame), from the core that holds it to other
// cores of its engine.
type Handover[F any] interface {
	// Hand gives f to core, not the holding one: f is core's from now
	// on (or lost, and counted by the port, when the way there is full).
	Hand(core int, f F)
	// HandOthers gives every other core f, each its own copy or
	// reference: the holding core keeps f.
	HandOthers(f F)
}

// Steering is one core's delivery of the frames it holds (it received them
// from its queue, or, on a NIC that steers, sent them) to the cores of
// its engine that must process them, as engine.Steer names them:
//
//	its own, or engine.SteerLocal   kept
//	another core's                  Handover.Hand, not kept
//	engine.SteerAll (ARP)           Handover.HandOthers, and kept
//
// It allocates nothing; the port calls it on its own goroutine.
type Steering[F any, H Handover[F]] struct {
	h     H
	core  int
	cores int
	base  uint16
}

// NewSteering is the Steering of core (0 .. cores-1) of an engine of
// cores cores whose base UDP port is base (engine.Config.UDPPort), handing
// frames over through h.
func NewSteering[F any, H Handover[F]](core, cores int, base uint16, h H) Steering[F, H] {
	return Steering[F, H]{h: h, core: core, cores: cores, base: base}
}

// Deliver steers frame, whose port-side handle is f, and hands it over;
// it reports whether the holding core keeps it to process itself.
func (s *Steering[F, H]) Deliver(frame []byte, f F) (keep bool) {
	switch c := engine.Steer(frame, s.base, s.cores); {
	case c == s.core || c == engine.SteerLocal:
		return true
	case c == engine.SteerAll:
		s.h.HandOthers(f)
		return true
	default:
		s.h.Hand(c, f)
		return false
	}
}
