package rawnet

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// Endpoint is one end of a OneRMA frame: Ethernet address, IPv4 address,
// UDP port.
type Endpoint struct {
	MAC  wire.MAC
	IP   netip.Addr
	Port uint16
}

func ip32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// Addr converts a wire.Fields address to netip.Addr.
func Addr(ip uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], ip)
	return netip.AddrFrom4(b)
}

// Fields returns header fields from src to dst, to be completed by the
// caller (type, PID, tag, region, length, offset, IV).
func Fields(src, dst Endpoint) wire.Fields {
	return wire.Fields{
		DstMAC: dst.MAC, SrcMAC: src.MAC,
		SrcIP: ip32(src.IP), DstIP: ip32(dst.IP),
		SrcPort: src.Port, DstPort: dst.Port,
	}
}

// Build encodes the headers of f for a payload of plen bytes into a new
// frame: payload and trailer are zero, to be filled by a Seal function.
// The frame is exactly wire.Overhead+plen bytes (no Ethernet padding), so
// wire.Trailer(frame, plen) is its last 16 bytes.
func Build(f *wire.Fields, plen int) []byte {
	b := make([]byte, max(wire.Overhead+plen, wire.MinFrame))
	n := wire.Encode(b, f, plen)
	return b[:max(n, wire.Overhead+plen)]
}

// Parse decodes a OneRMA frame (wire.Decode), returning its fields and
// payload (aliasing frame).
func Parse(frame []byte) (wire.Fields, []byte, error) {
	var f wire.Fields
	p, err := wire.Decode(frame, &f)
	return f, p, err
}

// PayloadLen is the payload length of a frame that Parse accepts, from its
// IPv4 total length (Ethernet padding excluded).
func PayloadLen(frame []byte) int {
	tot := int(binary.BigEndian.Uint16(frame[wire.EthLen+2 : wire.EthLen+4]))
	return tot - wire.IPv4Len - wire.UDPLen - wire.HeaderLen - wire.TrailerLen
}

// Nonce returns addr ‖ counter, the IV an engine at addr would use.
func Nonce(addr netip.Addr, counter uint64) [12]byte {
	var n [12]byte
	aesni.PutNonce(n[:], addr.As4(), counter)
	return n
}

func aead(k aesni.Key) *aesni.AEAD {
	a, err := aesni.NewAEAD(k)
	if err != nil {
		panic(err) // only in FIPS-only mode, which tests never run in
	}
	return a
}

// SealRequest writes the GMAC trailer of a payload-free request frame under
// key (a K_d, or any key an attacker picked).
func SealRequest(frame []byte, key aesni.Key) {
	aead(key).SealRequest(wire.Trailer(frame, 0), wire.IV(frame), wire.AAD(frame))
}

// OpenRequest verifies a request frame's trailer under key.
func OpenRequest(frame []byte, key aesni.Key) error {
	return aead(key).OpenRequest(wire.Trailer(frame, 0), wire.IV(frame), wire.AAD(frame))
}

// SealAnswer encrypts plaintext into the payload of an answer frame (built
// for len(plaintext) bytes) and writes its tag, under key with the request
// IV reqIV curried into the additional data (nil: none). With an empty
// plaintext it seals a NACK, error or ACK.
func SealAnswer(frame []byte, key aesni.Key, plaintext, reqIV []byte) {
	aead(key).SealResponse(wire.Sealed(frame, len(plaintext)), plaintext, wire.IV(frame), wire.AAD(frame), reqIV)
}

// OpenAnswer authenticates and decrypts an answer frame under key with
// reqIV curried in, and returns the plaintext (a copy). The frame is not
// modified.
func OpenAnswer(frame []byte, key aesni.Key, reqIV []byte) ([]byte, error) {
	if len(frame) < wire.Overhead {
		return nil, aesni.ErrAuth
	}
	plen := PayloadLen(frame)
	if plen < 0 || wire.PayloadOffset+plen+wire.TrailerLen > len(frame) {
		return nil, aesni.ErrAuth
	}
	in := append([]byte(nil), wire.Sealed(frame, plen)...)
	out := make([]byte, plen)
	if err := aead(key).OpenResponse(out, in, wire.IV(frame), wire.AAD(frame), reqIV); err != nil {
		return nil, err
	}
	return out, nil
}

var reserved = func() *aesni.AEAD {
	a, err := aesni.NewReservedAEAD()
	if err != nil {
		panic(err)
	}
	return a
}()

// SealAuthFailure writes the trailer of a REMOTE_AUTHENTICATION_FAILURE
// answer under the public reserved key, tied to reqIV, exactly as a serving
// engine does (and as anyone can).
func SealAuthFailure(frame []byte, reqIV []byte) {
	reserved.SealAuthFailure(wire.Trailer(frame, 0), wire.IV(frame), wire.AAD(frame), reqIV)
}

// OpenAuthFailure verifies a REMOTE_AUTHENTICATION_FAILURE answer to the
// request whose IV was reqIV.
func OpenAuthFailure(frame []byte, reqIV []byte) error {
	if len(frame) < wire.Overhead {
		return aesni.ErrAuth
	}
	return reserved.OpenAuthFailure(wire.Trailer(frame, 0), wire.IV(frame), wire.AAD(frame), reqIV)
}

// ErrNotOneRMA: Rewrite was given a frame that does not decode.
var ErrNotOneRMA = errors.New("rawnet: not a OneRMA frame")

// Rewrite returns a copy of a OneRMA frame whose headers were re-encoded
// after edit changed its fields (addresses, ports, type, PID, tag, region,
// length, offset, IV...), keeping payload and trailer byte for byte: what an
// attacker who cannot seal does to a captured frame. The IPv4 checksum and
// lengths are recomputed, so the frame still decodes; only the trailer
// (the AES-GCM tag) no longer matches if edit touched the AAD.
func Rewrite(frame []byte, edit func(*wire.Fields)) ([]byte, error) {
	f, payload, err := Parse(frame)
	if err != nil {
		return nil, ErrNotOneRMA
	}
	plen := len(payload)
	edit(&f)
	out := make([]byte, max(wire.Overhead+plen, wire.MinFrame))
	wire.Encode(out, &f, plen)
	copy(out[wire.PayloadOffset:], frame[wire.PayloadOffset:wire.PayloadOffset+plen+wire.TrailerLen])
	return out[:wire.Overhead+plen], nil
}

// FixIPv4Checksum recomputes the IPv4 header checksum of a frame after a
// test edited header bytes by hand.
func FixIPv4Checksum(frame []byte) {
	ip := frame[wire.EthLen : wire.EthLen+wire.IPv4Len]
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:12], wire.Checksum(ip))
}
