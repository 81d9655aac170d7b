package wire

import (
	"encoding/binary"
	"errors"
)

// Sizes of each layer.
const (
	EthLen     = 14
	IPv4Len    = 20
	UDPLen     = 8
	HeaderLen  = 48
	TrailerLen = 16
	// Overhead is every byte of a frame that is not payload.
	Overhead = EthLen + IPv4Len + UDPLen + HeaderLen + TrailerLen
	// MinFrame is the Ethernet minimum (without FCS); shorter frames are padded.
	MinFrame = 60
	// Version of the OneRMA header.
	Version = 1
	// ChunkAlign: response payloads start at multiples of it within an op,
	// so an initiator tracks arrival with one bit per 64 bytes: a 4 KB op is
	// exactly one uint64 bitmap, whatever MTU the responder uses.
	ChunkAlign = 64
)

// EtherTypes.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	protoUDP      = 17
)

// Type is the OneRMA message type.
type Type uint8

const (
	TypeReadReq  Type = 1 // initiator -> server: read a range of a region
	TypeReadResp Type = 2 // server -> initiator: one chunk of data at an offset
	TypeNack     Type = 3 // server -> initiator: inbound queue over threshold
	TypeError    Type = 4 // server -> initiator: precise remote failure (status)
	TypeRekeyReq Type = 5 // initiator -> server: install a new region key (a request to read, like a WRITE: the key is pulled)
	TypeAck      Type = 6 // server -> initiator: the op took effect (no payload)
	// WRITE is a request to read (paper §5.1, four hops): the write
	// request names the range, the serving engine pulls the data when its
	// own window allows, the initiator answers with the data as if serving
	// a READ, and the serving engine acknowledges (TypeAck) after commit.
	TypeWriteReq  Type = 7 // ① initiator -> server: write a range of a region (no payload)
	TypePullReq   Type = 8 // ② server -> initiator: send the data (Region: pull handle, Offset: server timeout ns)
	TypeWriteData Type = 9 // ③ initiator -> server: one chunk of the data at an offset
	// LOOKUP (two hops, like a READ): the request names a bucket (Aux:
	// its offset in Region) and a tag (Offset); the serving engine scans
	// the bucket and answers with the matched entry and its target, in
	// chunks like a READ's (Aux: the answer's total length; Status: 0, or
	// REMOTE_NOT_FOUND when the answer is the bucket), or with TypeError.
	TypeLookupReq  Type = 10 // initiator -> server: scan a bucket for a tag (no payload)
	TypeLookupResp Type = 11 // server -> initiator: one chunk of the answer at an offset
	maxType             = TypeLookupResp
)

// Header flags.
const (
	// FlagHigh on a request: its initiator's class of service is high;
	// the serving engine queues it ahead of low-class requests (paper §4.3).
	FlagHigh uint8 = 1 << 0
	// FlagBucket on a lookup request: when no entry matches, answer with
	// the bucket (abi.FlagLookupBucket).
	FlagBucket uint8 = 1 << 1
)

// MaxPayload is the largest payload that fits an IPv4 MTU, rounded down to
// ChunkAlign.
func MaxPayload(mtu int) int {
	p := mtu - IPv4Len - UDPLen - HeaderLen - TrailerLen
	return p &^ (ChunkAlign - 1)
}

// MAC is an Ethernet address.
type MAC [6]byte

// Broadcast is ff:ff:ff:ff:ff:ff.
var Broadcast = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Fields are the decoded (or to-be-encoded) headers of a OneRMA frame.
type Fields struct {
	DstMAC, SrcMAC   MAC
	SrcIP, DstIP     uint32 // IPv4 as big-endian integers
	SrcPort, DstPort uint16
	// DSCP is the IPv4 header's differentiated services code point (the
	// upper six bits of its TOS byte; ECN, the lower two, is written 0).
	// It is outside the AAD on purpose: a fabric may remark it, and the
	// receiving engine decides nothing by it (a request's class is its
	// authenticated FlagHigh).
	DSCP   uint8
	Type   Type
	Status uint8
	Flags  uint8
	PID    uint32
	Tag    uint64
	Region uint32
	Length uint32
	Offset uint64
	IV     [12]byte
	// Aux is the header's last word, reserved (0) but in lookup messages:
	// a lookup request's bucket offset, a lookup response's answer length.
	Aux uint32
}

// Decode errors (preallocated: the data path counts them, never formats).
var (
	ErrShort       = errors.New("wire: frame too short")
	ErrNotIPv4     = errors.New("wire: not IPv4")
	ErrIPHeader    = errors.New("wire: bad IPv4 header (version, header or total length)")
	ErrIPChecksum  = errors.New("wire: bad IPv4 header checksum")
	ErrFragment    = errors.New("wire: IPv4 fragment")
	ErrNotUDP      = errors.New("wire: not UDP")
	ErrUDPLength   = errors.New("wire: bad UDP length")
	ErrVersion     = errors.New("wire: unknown OneRMA version")
	ErrType        = errors.New("wire: unknown OneRMA message type")
	ErrLength      = errors.New("wire: OneRMA length disagrees with payload")
	ErrReservedBit = errors.New("wire: reserved field not zero")
)

// EtherType returns the frame's EtherType, or 0 if it is too short.
func EtherType(frame []byte) uint16 {
	if len(frame) < EthLen {
		return 0
	}
	return binary.BigEndian.Uint16(frame[12:14])
}

// Decode parses a OneRMA frame. On success f holds every header field and
// payload is the payload slice of frame (no copy). The trailer is not
// checked here: it is the AES-GCM tag, which the engine verifies (see
// AAD, IV, Trailer). IPv4 datagrams with options (ErrIPOptions),
// fragments (ErrFragment) and a TTL of 0 (ErrTTLZero) are refused, each
// with its own error; anything not UDP is ErrNotUDP, or ErrShort when it is
// shorter than the smallest OneRMA frame (DecodeIPv4 parses any IPv4
// frame). Decode never panics and never allocates.
func Decode(frame []byte, f *Fields) (payload []byte, err error) {
	if len(frame) < EthLen+IPv4Len+UDPLen+HeaderLen+TrailerLen {
		return nil, ErrShort
	}
	if binary.BigEndian.Uint16(frame[12:14]) != EtherTypeIPv4 {
		return nil, ErrNotIPv4
	}
	ip := frame[EthLen : EthLen+IPv4Len]
	if ip[0] != 0x45 {
		return nil, ipv4First(ip[0]) // ErrIPOptions or ErrIPHeader
	}
	totLen := int(binary.BigEndian.Uint16(ip[2:4]))
	if totLen < IPv4Len+UDPLen+HeaderLen+TrailerLen || EthLen+totLen > len(frame) {
		return nil, ErrIPHeader
	}
	if fo := binary.BigEndian.Uint16(ip[6:8]); fo&0x3fff != 0 { // MF set or offset != 0
		return nil, ErrFragment
	}
	if ip[8] == 0 {
		return nil, ErrTTLZero
	}
	if ip[9] != protoUDP {
		return nil, ErrNotUDP
	}
	// The IPv4 header checksum is not verified: the trailer covers every
	// IPv4 field the engine uses (addresses; lengths and protocol are
	// checked above), and TOS/ID and a TTL above 0 mean nothing to it. Use
	// CheckIPv4Checksum where a bad header checksum must be reported.
	udp := frame[EthLen+IPv4Len : EthLen+IPv4Len+UDPLen]
	if int(binary.BigEndian.Uint16(udp[4:6])) != totLen-IPv4Len {
		return nil, ErrUDPLength
	}
	h := frame[EthLen+IPv4Len+UDPLen : EthLen+IPv4Len+UDPLen+HeaderLen]
	if h[0] != Version {
		return nil, ErrVersion
	}
	t := Type(h[1])
	if t == 0 || t > maxType {
		return nil, ErrType
	}
	aux := binary.BigEndian.Uint32(h[44:48])
	if aux != 0 && t != TypeLookupReq && t != TypeLookupResp {
		return nil, ErrReservedBit
	}
	plen := totLen - IPv4Len - UDPLen - HeaderLen - TrailerLen
	length := binary.BigEndian.Uint32(h[20:24])
	if t == TypeReadResp || t == TypeWriteData || t == TypeLookupResp { // the types that carry a payload
		if uint32(plen) != length {
			return nil, ErrLength
		}
	} else if plen != 0 {
		return nil, ErrLength
	}
	// Array conversions, not copy: fixed-size moves, no memmove call.
	f.DstMAC = MAC(frame[0:6])
	f.SrcMAC = MAC(frame[6:12])
	f.SrcIP = binary.BigEndian.Uint32(ip[12:16])
	f.DstIP = binary.BigEndian.Uint32(ip[16:20])
	f.SrcPort = binary.BigEndian.Uint16(udp[0:2])
	f.DstPort = binary.BigEndian.Uint16(udp[2:4])
	f.DSCP = ip[1] >> 2
	f.Type = t
	f.Status = h[2]
	f.Flags = h[3]
	f.PID = binary.BigEndian.Uint32(h[4:8])
	f.Tag = binary.BigEndian.Uint64(h[8:16])
	f.Region = binary.BigEndian.Uint32(h[16:20])
	f.Length = length
	f.Offset = binary.BigEndian.Uint64(h[24:32])
	f.IV = [12]byte(h[32:44])
	f.Aux = aux
	start := EthLen + IPv4Len + UDPLen + HeaderLen
	return frame[start : start+plen : start+plen], nil
}

// Encode writes Ethernet, IPv4, UDP and OneRMA headers for a payload of
// plen bytes into b, and returns the frame length (headers + payload +
// trailer, padded to MinFrame). The payload itself goes at
// b[PayloadOffset:] and the trailer (the AES-GCM tag) is written by the
// sealer. b must hold
// Overhead+plen bytes (and at least MinFrame).
func Encode(b []byte, f *Fields, plen int) int {
	n := Overhead + plen
	_ = b[n-1]
	*(*MAC)(b[0:6]) = f.DstMAC
	*(*MAC)(b[6:12]) = f.SrcMAC
	binary.BigEndian.PutUint16(b[12:14], EtherTypeIPv4)
	ip := b[EthLen : EthLen+IPv4Len]
	ip[0] = 0x45
	tos := f.DSCP << 2 // DSCP above 63 loses its high bits
	ip[1] = tos
	binary.BigEndian.PutUint16(ip[2:4], uint16(n-EthLen))
	binary.BigEndian.PutUint16(ip[4:6], 0)
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = protoUDP
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint32(ip[12:16], f.SrcIP)
	binary.BigEndian.PutUint32(ip[16:20], f.DstIP)
	// The header checksum from the values just written, without reading
	// the header back: version/IHL/TOS, total length, ID 0, DF, TTL and
	// protocol, the two addresses.
	sum := uint32(0x4500|uint16(tos)) + uint32(n-EthLen) + 0x4000 + (64<<8 | protoUDP)
	sum += f.SrcIP>>16 + f.SrcIP&0xffff + f.DstIP>>16 + f.DstIP&0xffff
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(ip[10:12], ^uint16(sum))
	udp := b[EthLen+IPv4Len : EthLen+IPv4Len+UDPLen]
	binary.BigEndian.PutUint16(udp[0:2], f.SrcPort)
	binary.BigEndian.PutUint16(udp[2:4], f.DstPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(n-EthLen-IPv4Len))
	binary.BigEndian.PutUint16(udp[6:8], 0) // IPv4 allows no UDP checksum; the trailer covers it
	h := b[EthLen+IPv4Len+UDPLen : PayloadOffset]
	h[0] = Version
	h[1] = byte(f.Type)
	h[2] = f.Status
	h[3] = f.Flags
	binary.BigEndian.PutUint32(h[4:8], f.PID)
	binary.BigEndian.PutUint64(h[8:16], f.Tag)
	binary.BigEndian.PutUint32(h[16:20], f.Region)
	binary.BigEndian.PutUint32(h[20:24], f.Length)
	binary.BigEndian.PutUint64(h[24:32], f.Offset)
	*(*[12]byte)(h[32:44]) = f.IV
	binary.BigEndian.PutUint32(h[44:48], f.Aux)
	if n < MinFrame {
		clear(b[n:MinFrame])
		return MinFrame
	}
	return n
}

// CheckIPv4Checksum verifies the IPv4 header checksum of a frame that
// Decode accepted.
func CheckIPv4Checksum(frame []byte) error {
	if Checksum(frame[EthLen:EthLen+IPv4Len]) != 0 {
		return ErrIPChecksum
	}
	return nil
}

// Offsets within a frame.
const (
	// PayloadOffset is where the payload starts.
	PayloadOffset = EthLen + IPv4Len + UDPLen + HeaderLen
	// AADOffset is where the additional authenticated data starts: the
	// IPv4 source address.
	AADOffset = EthLen + 12
	// IVOffset is the OneRMA header's IV field.
	IVOffset = EthLen + IPv4Len + UDPLen + 32
)

// Checksum is the Internet checksum (RFC 1071) of b; over a header that
// carries its own checksum it is 0 when the header is intact.
func Checksum(b []byte) uint16 {
	var s uint64
	if len(b) == IPv4Len { // the hot case, unrolled
		s = uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[16:]))
		b = nil
	}
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// AAD returns the additional authenticated data of a OneRMA frame: the
// IPv4 source and destination addresses, the UDP header and the OneRMA
// header (IV included), one contiguous run of 64 bytes (frame[26:90]).
func AAD(frame []byte) []byte { return frame[AADOffset:PayloadOffset:PayloadOffset] }

// IV returns the 12-byte IV field of a frame's OneRMA header.
func IV(frame []byte) []byte { return frame[IVOffset : IVOffset+12 : IVOffset+12] }

// Trailer returns the 16-byte trailer (the AES-GCM tag) of a frame with a
// payload of plen bytes.
func Trailer(frame []byte, plen int) []byte {
	return frame[PayloadOffset+plen : PayloadOffset+plen+TrailerLen : PayloadOffset+plen+TrailerLen]
}

// Sealed returns payload ‖ trailer of a frame with a payload of plen bytes:
// the ciphertext and tag of a response, where the cipher writes and reads.
func Sealed(frame []byte, plen int) []byte {
	return frame[PayloadOffset : PayloadOffset+plen+TrailerLen : PayloadOffset+plen+TrailerLen]
}
