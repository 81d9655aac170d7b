package wire

import (
	"encoding/binary"
	"errors"
)

// IPv4 protocol numbers.
const (
	ProtoICMP = 1
	ProtoUDP  = protoUDP
)

// ICMP types and codes (RFC 792; fragmentation needed: RFC 1191).
const (
	ICMPEchoReply       = 0
	ICMPDestUnreachable = 3
	ICMPEchoRequest     = 8
	// ICMPCodeFragNeeded is the destination-unreachable code "fragmentation
	// needed and DF set": a router could not forward a datagram larger
	// than its next hop's MTU.
	ICMPCodeFragNeeded = 4
	// ICMPHeaderLen: type, code, checksum and the 4 bytes each type
	// defines (echo: identifier and sequence; fragmentation needed:
	// unused and the next-hop MTU).
	ICMPHeaderLen = 8
	// quotedLen is what an ICMP error quotes of the datagram it concerns
	// beyond its IPv4 header (RFC 792): the first 8 bytes, a UDP header.
	quotedLen = 8
	// ttlOut is the TTL of every IPv4 datagram the engine sends.
	ttlOut = 64
)

// IPv4 holds the Ethernet addresses and the IPv4 header fields of a frame
// of any IPv4 protocol (DecodeIPv4, EncodeIPv4).
type IPv4 struct {
	DstMAC, SrcMAC MAC
	SrcIP, DstIP   uint32 // big-endian integers, as in Fields
	Protocol       uint8
	TTL            uint8
	TOS            uint8
}

// ICMP holds the fields of an ICMP message (DecodeICMP) of the kinds the
// engine handles: echo request and reply (ID, Seq) and fragmentation
// needed (NextHopMTU and the Inner* fields, from the header and the first
// 8 bytes of the datagram it quotes). Other types fill Type and Code only.
type ICMP struct {
	Type, Code uint8
	ID, Seq    uint16
	NextHopMTU uint16 // 0 from routers older than RFC 1191
	// The datagram a fragmentation-needed message concerns: its
	// addresses, protocol and, read from the first 4 bytes after its
	// header, its UDP (or TCP) ports.
	InnerSrcIP, InnerDstIP     uint32
	InnerProtocol              uint8
	InnerSrcPort, InnerDstPort uint16
}

// Errors of the IPv4 and ICMP decoders (preallocated, like Decode's).
var (
	ErrIPOptions    = errors.New("wire: IPv4 header with options")
	ErrTTLZero      = errors.New("wire: IPv4 TTL 0")
	ErrICMP         = errors.New("wire: malformed ICMP message")
	ErrICMPChecksum = errors.New("wire: bad ICMP checksum")
)

// IPv4Protocol returns the protocol field of an IPv4 frame, or 0 when
// frame is not IPv4 or too short to say. It checks nothing else.
func IPv4Protocol(frame []byte) uint8 {
	if len(frame) < EthLen+IPv4Len || binary.BigEndian.Uint16(frame[12:14]) != EtherTypeIPv4 {
		return 0
	}
	return frame[EthLen+9]
}

// DecodeIPv4 parses the Ethernet and IPv4 headers of frame, whatever its
// protocol, and returns the IPv4 payload (no copy), cut to the datagram's
// total length (Ethernet padding is not payload). The header must be
// intact: version 4 without options (ErrIPOptions), lengths within the
// frame, not a fragment (ErrFragment), TTL above 0 (ErrTTLZero), a valid
// header checksum (ErrIPChecksum), checked in that order. It never panics
// and never allocates; on error h is unchanged and the payload nil.
func DecodeIPv4(frame []byte, h *IPv4) ([]byte, error) {
	if len(frame) < EthLen+IPv4Len {
		return nil, ErrShort
	}
	if binary.BigEndian.Uint16(frame[12:14]) != EtherTypeIPv4 {
		return nil, ErrNotIPv4
	}
	ip := frame[EthLen : EthLen+IPv4Len]
	if err := ipv4First(ip[0]); err != nil {
		return nil, err
	}
	totLen := int(binary.BigEndian.Uint16(ip[2:4]))
	if totLen < IPv4Len || EthLen+totLen > len(frame) {
		return nil, ErrIPHeader
	}
	if binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // MF set or offset != 0
		return nil, ErrFragment
	}
	if ip[8] == 0 {
		return nil, ErrTTLZero
	}
	if Checksum(ip) != 0 {
		return nil, ErrIPChecksum
	}
	h.DstMAC, h.SrcMAC = MAC(frame[0:6]), MAC(frame[6:12])
	h.TOS, h.TTL, h.Protocol = ip[1], ip[8], ip[9]
	h.SrcIP = binary.BigEndian.Uint32(ip[12:16])
	h.DstIP = binary.BigEndian.Uint32(ip[16:20])
	return frame[EthLen+IPv4Len : EthLen+totLen : EthLen+totLen], nil
}

// ipv4First checks an IPv4 header's first byte: version 4, IHL 5.
func ipv4First(b byte) error {
	switch {
	case b == 0x45:
		return nil
	case b>>4 == 4 && b&0xf > 5:
		return ErrIPOptions
	}
	return ErrIPHeader
}

// EncodeIPv4 writes the Ethernet and IPv4 headers of a datagram of h's
// addresses, protocol and TOS, with plen bytes of payload, into b: no
// options, ID 0, DF (the engine never fragments), TTL 64 (h.TTL is not
// used), and the header checksum. The payload goes at b[EthLen+IPv4Len:].
// It returns the frame length, padded with zeros to MinFrame; b must hold
// that many bytes.
func EncodeIPv4(b []byte, h *IPv4, plen int) int {
	n := EthLen + IPv4Len + plen
	_ = b[max(n, MinFrame)-1]
	*(*MAC)(b[0:6]) = h.DstMAC
	*(*MAC)(b[6:12]) = h.SrcMAC
	binary.BigEndian.PutUint16(b[12:14], EtherTypeIPv4)
	ip := b[EthLen : EthLen+IPv4Len]
	ip[0], ip[1] = 0x45, h.TOS
	binary.BigEndian.PutUint16(ip[2:4], uint16(IPv4Len+plen))
	binary.BigEndian.PutUint32(ip[4:8], 0x4000) // ID 0, DF
	ip[8], ip[9] = ttlOut, h.Protocol
	binary.BigEndian.PutUint16(ip[10:12], 0)
	binary.BigEndian.PutUint32(ip[12:16], h.SrcIP)
	binary.BigEndian.PutUint32(ip[16:20], h.DstIP)
	binary.BigEndian.PutUint16(ip[10:12], Checksum(ip))
	if n < MinFrame {
		clear(b[n:MinFrame])
		return MinFrame
	}
	return n
}

// DecodeICMP parses an ICMP message (an IPv4 payload from DecodeIPv4) and
// verifies its checksum, which covers the whole message. Echo requests and
// replies need their 8-byte header; a fragmentation-needed message needs
// the quoted datagram's IPv4 header (version 4, IHL >= 5, options
// allowed) and the 8 bytes after it. It never panics and never
// allocates; on error m is unchanged.
func DecodeICMP(b []byte, m *ICMP) error {
	if len(b) < ICMPHeaderLen {
		return ErrICMP
	}
	if Checksum(b) != 0 {
		return ErrICMPChecksum
	}
	t, code := b[0], b[1]
	if t == ICMPDestUnreachable && code == ICMPCodeFragNeeded {
		q := b[ICMPHeaderLen:]
		if len(q) < IPv4Len || q[0]>>4 != 4 || q[0]&0xf < 5 {
			return ErrICMP
		}
		hl := int(q[0]&0xf) * 4
		if len(q) < hl+quotedLen {
			return ErrICMP
		}
		*m = ICMP{
			Type: t, Code: code,
			NextHopMTU:    binary.BigEndian.Uint16(b[6:8]),
			InnerProtocol: q[9],
			InnerSrcIP:    binary.BigEndian.Uint32(q[12:16]),
			InnerDstIP:    binary.BigEndian.Uint32(q[16:20]),
			InnerSrcPort:  binary.BigEndian.Uint16(q[hl : hl+2]),
			InnerDstPort:  binary.BigEndian.Uint16(q[hl+2 : hl+4]),
		}
		return nil
	}
	*m = ICMP{Type: t, Code: code}
	if t == ICMPEchoRequest || t == ICMPEchoReply {
		m.ID = binary.BigEndian.Uint16(b[4:6])
		m.Seq = binary.BigEndian.Uint16(b[6:8])
	}
	return nil
}

// EncodeEchoReply writes into b the reply to an echo request: h and req
// are the request's headers (DecodeIPv4) and ICMP message (DecodeICMP
// accepted it, type ICMPEchoRequest); src is the replying engine's MAC.
// The reply goes back to the request's source MAC and address, from its
// destination address, with the request's TOS, TTL 64, a fresh header
// checksum, and an ICMP message of type 0 carrying the request's
// identifier, sequence number and data, its checksum computed over the
// whole message. It returns the frame length (padded to MinFrame); b must
// hold max(EthLen+IPv4Len+len(req), MinFrame) bytes.
func EncodeEchoReply(b []byte, h *IPv4, req []byte, src MAC) int {
	r := IPv4{DstMAC: h.SrcMAC, SrcMAC: src, SrcIP: h.DstIP, DstIP: h.SrcIP, Protocol: ProtoICMP, TOS: h.TOS}
	n := EncodeIPv4(b, &r, len(req))
	m := b[EthLen+IPv4Len : EthLen+IPv4Len+len(req)]
	copy(m, req)
	m[0], m[1] = ICMPEchoReply, 0
	m[2], m[3] = 0, 0
	binary.BigEndian.PutUint16(m[2:4], Checksum(m))
	return n
}
