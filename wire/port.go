package wire

// UDP ports. An engine listens on a base port B (default 4792) and owns
// two kinds of ports per core c (0 <= c < MaxCores):
//
//	B                   requests (① of every op) of any initiator
//	B + c               WRITE data ③ for the pulls core c serves; the source of
//	                    core c's pulls ②
//	0xC000 | e<<6 | c   initiator ports of core c: each op's request and WRITE data
//	                    leave from one, with e (8 bits) mixed from the op's slot and
//	                    sequence; answers, READ data and pulls come back to it
//
// The entropy e spreads the ops of one pair of engines over equal-cost
// paths of a fabric that hashes the UDP 5-tuple (ECMP), as RoCEv2 does
// with its source port; both directions of an op carry the same pair of
// ports, so they hash alike. The owning core of any frame stays
// recoverable from its destination port alone (PortCore), so a NIC or a
// dispatcher can steer answers to the core that waits for them.
const (
	// InitiatorPortBase is the first initiator port (0xC000: the upper
	// quarter of the port space; an engine's B + 63 must lie below it).
	InitiatorPortBase = 0xC000
	// MaxCores bounds an engine's cores: a core's id is the low six
	// bits of its initiator ports.
	MaxCores = 64
	// coreBits is how many low bits of an initiator port name its core.
	coreBits = 6
)

// InitiatorPort is core's initiator port carrying entropy e.
func InitiatorPort(e uint8, core uint16) uint16 {
	return InitiatorPortBase | uint16(e)<<coreBits | core&(MaxCores-1)
}

// PortCore is the core that owns initiator port p, and whether p is an
// initiator port at all.
func PortCore(p uint16) (core uint16, ok bool) {
	return p & (MaxCores - 1), p&InitiatorPortBase == InitiatorPortBase
}
