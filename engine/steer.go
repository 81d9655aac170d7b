package engine

import (
	"encoding/binary"
	"net/netip"

	"github.com/onerma/onerma/wire"
)

// Steering: which core of an engine of several must process a frame.
//
// Every frame names its core, so that a NIC's flow rules, or a core that
// received a frame on its rx queue, can hand it to the core that owns it:
//
//	answers, READ data, pulls ②   to an initiator port 0xC000|e<<6|c: core c (wire.PortCore)
//	WRITE data ③                  to UDPPort+c: core c (core 0's comes to UDPPort itself, told
//	                              from a request by its type)
//	requests ① (READ, WRITE,      to UDPPort: the core a hash of the request's IV address and
//	REKEY)                        lane tag (ivLaneTag) picks, so every request of one sender
//	                              lane lands on one core whichever rx queue it arrived on, and
//	                              its anti-replay window (replay.go) lives on that core alone
//	ARP                           every core (SteerAll): each core resolves its own next hops
//	                              and takes only replies to its own requests; core 0 answers
//	                              requests for the engine's address
//	anything else                 the core that received it (SteerLocal): ICMP echo, IPv4 the
//	                              engine does not take, junk (each core counts its drops)
//
// Steer reads a few header bytes at fixed offsets, allocates nothing and
// validates nothing beyond what it reads: the core that gets the frame
// decodes and authenticates it as always (a frame steered by forged
// headers reaches a core that drops it).

// Steer results that name no single core.
const (
	// SteerAll: every core must see the frame (ARP).
	SteerAll = -1
	// SteerLocal: the core that received the frame processes it.
	SteerLocal = -2
)

// Steer returns the core (0 .. cores-1) of an engine of cores cores with
// base UDP port basePort that must process frame, or SteerAll or
// SteerLocal. With one core it returns 0 or SteerAll or SteerLocal as for
// any number.
func Steer(frame []byte, basePort uint16, cores int) int {
	switch wire.EtherType(frame) {
	case wire.EtherTypeARP:
		return SteerAll
	case wire.EtherTypeIPv4:
	default:
		return SteerLocal
	}
	// IPv4 without options (IHL 5), not a fragment, UDP, long enough for
	// a OneRMA header: anything else is the receiving core's to drop.
	const ip = wire.EthLen
	if len(frame) < wire.PayloadOffset || frame[ip] != 0x45 ||
		binary.BigEndian.Uint16(frame[ip+6:])&0x3fff != 0 || frame[ip+9] != 17 {
		return SteerLocal
	}
	dst := binary.BigEndian.Uint16(frame[wire.EthLen+wire.IPv4Len+2:])
	if core, ok := wire.PortCore(dst); ok { // an answer, READ data or a pull
		return known(int(core), cores)
	}
	if dst < basePort || int(dst-basePort) >= cores {
		return SteerLocal
	}
	if dst != basePort || wire.Type(frame[wire.EthLen+wire.IPv4Len+wire.UDPLen+1]) == wire.TypeWriteData {
		return int(dst - basePort) // WRITE data ③ of the pulls core dst-basePort serves
	}
	return steerRequest(frame, cores)
}

// steerRequest is the core that serves the requests of the sender lane
// frame's IV names: its address and the lane tag in its counter's top
// bits.
func steerRequest(frame []byte, cores int) int {
	iv := frame[wire.IVOffset : wire.IVOffset+12]
	return laneCore(binary.BigEndian.Uint32(iv[0:4]), uint32(iv[4]>>(ivTagShift-56)), cores)
}

// RequestCore is the core of an engine of cores cores that serves the
// requests core lane of the engine at sender sends it (Steer's choice for
// them): on ports whose queue i hands its frames to core i (memif, the
// net_ring loopback), the answers leave the serving engine from that
// core's queue, so they reach the sender on that core's queue too.
func RequestCore(sender netip.Addr, lane, cores int) int {
	return laneCore(ip4(sender.As4()), uint32(lane), cores)
}

// laneCore hashes a sender lane (its engine's address and lane tag) to a
// core of cores.
func laneCore(addr, tag uint32, cores int) int {
	h := addr*0x9e3779b1 + tag*0x7feb352d // MurmurHash3's finalizer over both
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return int(uint64(h) * uint64(cores) >> 32)
}

// known is core if the engine has it, else SteerLocal (the receiving core
// drops a frame for a core that does not exist).
func known(core, cores int) int {
	if core < cores {
		return core
	}
	return SteerLocal
}
