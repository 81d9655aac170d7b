package wire

import (
	"encoding/binary"
	"errors"
)

// ARP operations.
const (
	ARPRequest = 1
	ARPReply   = 2
	arpLen     = 28
)

// ARP holds the fields of an Ethernet/IPv4 ARP packet (RFC 826).
type ARP struct {
	Op             uint16
	SenderMAC      MAC
	SenderIP       uint32
	TargetMAC      MAC
	TargetIP       uint32
	EthDst, EthSrc MAC
}

// ErrARP: not an Ethernet/IPv4 ARP request or reply.
var ErrARP = errors.New("wire: malformed ARP packet")

// DecodeARP parses an ARP frame (Ethernet header included).
func DecodeARP(frame []byte, a *ARP) error {
	if len(frame) < EthLen+arpLen || binary.BigEndian.Uint16(frame[12:14]) != EtherTypeARP {
		return ErrARP
	}
	p := frame[EthLen:]
	if binary.BigEndian.Uint16(p[0:2]) != 1 || binary.BigEndian.Uint16(p[2:4]) != EtherTypeIPv4 || p[4] != 6 || p[5] != 4 {
		return ErrARP
	}
	a.Op = binary.BigEndian.Uint16(p[6:8])
	if a.Op != ARPRequest && a.Op != ARPReply {
		return ErrARP
	}
	copy(a.EthDst[:], frame[0:6])
	copy(a.EthSrc[:], frame[6:12])
	copy(a.SenderMAC[:], p[8:14])
	a.SenderIP = binary.BigEndian.Uint32(p[14:18])
	copy(a.TargetMAC[:], p[18:24])
	a.TargetIP = binary.BigEndian.Uint32(p[24:28])
	return nil
}

// EncodeARP writes an ARP frame into b (at least MinFrame bytes) and returns
// its length (MinFrame, padded).
func EncodeARP(b []byte, a *ARP) int {
	_ = b[MinFrame-1]
	copy(b[0:6], a.EthDst[:])
	copy(b[6:12], a.EthSrc[:])
	binary.BigEndian.PutUint16(b[12:14], EtherTypeARP)
	p := b[EthLen:]
	binary.BigEndian.PutUint16(p[0:2], 1)
	binary.BigEndian.PutUint16(p[2:4], EtherTypeIPv4)
	p[4], p[5] = 6, 4
	binary.BigEndian.PutUint16(p[6:8], a.Op)
	copy(p[8:14], a.SenderMAC[:])
	binary.BigEndian.PutUint32(p[14:18], a.SenderIP)
	copy(p[18:24], a.TargetMAC[:])
	binary.BigEndian.PutUint32(p[24:28], a.TargetIP)
	clear(b[EthLen+arpLen : MinFrame])
	return MinFrame
}
