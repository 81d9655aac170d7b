package keyx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"unicode/utf8"

	"github.com/onerma/onerma/portal"
)

// Version is the protocol version every message carries in its first
// byte; a message of another version is refused (CodeBadRequest).
const Version = 1

// Message sizes (bodies, without the 2-byte frame length).
const (
	requestLen  = 16
	grantLen    = 40
	maxMsgLen   = 256 // longest refusal message
	maxFrameLen = 4 + maxMsgLen
)

// Request asks for the K_d of one initiating process for one op type on
// one region. Build it with RequestFor from the reader's portal.
type Request struct {
	Initiator netip.Addr      // the reader's engine IPv4 address
	PID       uint32          // the reader's PID as its engine stamps it (portal.Identity)
	Region    portal.RegionID // the owner's region
	Op        portal.OpType   // portal.OpRead, portal.OpWrite, portal.OpRekey or portal.OpLookup
}

// RequestFor is the request of the process behind id (its portal's
// Identity) for op on region.
func RequestFor(id portal.Identity, region portal.RegionID, op portal.OpType) Request {
	return Request{Initiator: id.Addr, PID: id.PID, Region: region, Op: op}
}

// Grant is the owner's answer: the K_d of the request, and where and how
// large the region is. Pass Key with each op (portal.Op.Key) and zero it
// (clear(g.Key[:])) once done with the region.
type Grant struct {
	Region portal.RegionID
	Op     portal.OpType
	Owner  netip.Addr // the owner engine's IPv4 address: send ops there
	Bytes  uint64     // the region's size
	Key    portal.Key // K_d; never formatted (String omits it)
}

// String describes g without its key.
func (g Grant) String() string {
	return fmt.Sprintf("region %#x (%d bytes) on %s, %v K_d", uint32(g.Region), g.Bytes, g.Owner, g.Op)
}

// GoString is String, so that %#v does not print the key either.
func (g Grant) GoString() string { return "keyx.Grant{" + g.String() + "}" }

// Code is a reply's second byte: OK, or why an owner refused a request.
type Code uint8

// Reply codes.
const (
	// CodeOK: the reply is a Grant.
	CodeOK Code = 0
	// CodeBadRequest: the request was malformed (its message says how);
	// the owner closes the connection.
	CodeBadRequest Code = 1
	// CodeUnknownRegion: the owner serves no region of that id.
	CodeUnknownRegion Code = 2
	// CodePermission: the region does not allow that op remotely
	// (portal.PermRemoteRead, PermRemoteWrite, PermRemoteRekey).
	CodePermission Code = 3
	// CodeRefused: Config.Authorize refused (its error is the message).
	CodeRefused Code = 4
	// CodeInternal: the owner could not answer (this package's Server
	// sends it when it cannot read its revocation list).
	CodeInternal Code = 5
	// CodeNotGranted: no Permit of the client's certificate name covers
	// the region and op (Config.Permits).
	CodeNotGranted Code = 6
	// CodeAddress: the initiator address is neither one of the client
	// certificate's IP addresses nor one a Permit grants it.
	CodeAddress Code = 7
	// CodeRevoked: the CA revoked the client's certificate (its
	// revocation list); the owner closes the connection.
	CodeRevoked Code = 8
)

// String is the code's name, e.g. "unknown region".
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "ok"
	case CodeBadRequest:
		return "bad request"
	case CodeUnknownRegion:
		return "unknown region"
	case CodePermission:
		return "permission denied"
	case CodeRefused:
		return "refused"
	case CodeInternal:
		return "internal error"
	case CodeNotGranted:
		return "not granted"
	case CodeAddress:
		return "address not granted"
	case CodeRevoked:
		return "certificate revoked"
	}
	return fmt.Sprintf("code %d", uint8(c))
}

// RefusedError is an owner's refusal as a reader sees it. Match a kind with
// errors.Is(err, ErrBadRequest) and friends.
type RefusedError struct {
	Code Code
	Msg  string // the owner's reason, e.g. "region 0x10002 is not served here"
}

// Error is "keyx: owner refused: CODE: MESSAGE".
func (e *RefusedError) Error() string {
	if e.Msg == "" {
		return "keyx: owner refused: " + e.Code.String()
	}
	return "keyx: owner refused: " + e.Code.String() + ": " + e.Msg
}

// Is matches a RefusedError of the same Code.
func (e *RefusedError) Is(target error) bool {
	t, ok := target.(*RefusedError)
	return ok && t.Code == e.Code && t.Msg == ""
}

// Sentinels for errors.Is: errors.Is(err, ErrUnknownRegion) is true for
// an owner's refusal with that code, whatever its message.
var (
	ErrBadRequest    error = &RefusedError{Code: CodeBadRequest}
	ErrUnknownRegion error = &RefusedError{Code: CodeUnknownRegion}
	ErrPermission    error = &RefusedError{Code: CodePermission}
	ErrRefused       error = &RefusedError{Code: CodeRefused}
	ErrNotGranted    error = &RefusedError{Code: CodeNotGranted}
	ErrAddress       error = &RefusedError{Code: CodeAddress}
	ErrRevoked       error = &RefusedError{Code: CodeRevoked}
)

func ipv4(a netip.Addr) ([4]byte, bool) {
	if !a.Is4() {
		return [4]byte{}, false
	}
	return a.As4(), true
}

// unicast4 reports whether b is an IPv4 address an engine can have.
func unicast4(a netip.Addr) bool {
	return a.Is4() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

func validOp(op portal.OpType) bool {
	return op == portal.OpRead || op == portal.OpWrite || op == portal.OpRekey || op == portal.OpLookup
}

// check is what both ends require of a request before it is sent or served.
func (r *Request) check() error {
	if !validOp(r.Op) {
		return fmt.Errorf("op %d unknown, want 1 (READ), 2 (WRITE), 3 (REKEY) or 4 (LOOKUP)", uint8(r.Op))
	}
	if !unicast4(r.Initiator) {
		return fmt.Errorf("initiator %v is not a unicast IPv4 address", r.Initiator)
	}
	if r.PID == 0 {
		return errors.New("initiator PID 0")
	}
	if r.Region == 0 {
		return errors.New("region 0 is never registered")
	}
	return nil
}

func (r *Request) marshal(b *[requestLen]byte) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("keyx: request: %w", err)
	}
	ip, _ := ipv4(r.Initiator)
	*b = [requestLen]byte{0: Version, 1: byte(r.Op)}
	copy(b[4:8], ip[:])
	binary.BigEndian.PutUint32(b[8:], r.PID)
	binary.BigEndian.PutUint32(b[12:], uint32(r.Region))
	return nil
}

// parseRequest decodes and checks a request body. Its errors are the
// precise reasons sent back with CodeBadRequest.
func parseRequest(b []byte) (Request, error) {
	if len(b) == 0 {
		return Request{}, errors.New("empty request")
	}
	if b[0] != Version {
		return Request{}, fmt.Errorf("version %d, want %d", b[0], Version)
	}
	if len(b) != requestLen {
		return Request{}, fmt.Errorf("request of %d bytes, want %d", len(b), requestLen)
	}
	if v := binary.BigEndian.Uint16(b[2:]); v != 0 {
		return Request{}, fmt.Errorf("reserved field %#04x, want 0", v)
	}
	r := Request{
		Op:        portal.OpType(b[1]),
		Initiator: netip.AddrFrom4([4]byte(b[4:8])),
		PID:       binary.BigEndian.Uint32(b[8:]),
		Region:    portal.RegionID(binary.BigEndian.Uint32(b[12:])),
	}
	return r, r.check()
}

func marshalGrant(b *[grantLen]byte, g *Grant) {
	ip, _ := ipv4(g.Owner)
	*b = [grantLen]byte{0: Version, 1: byte(CodeOK)}
	binary.BigEndian.PutUint32(b[4:], uint32(g.Region))
	b[8] = byte(g.Op)
	copy(b[12:16], ip[:])
	binary.BigEndian.PutUint64(b[16:], g.Bytes)
	copy(b[24:40], g.Key[:])
}

// marshalRefusal writes a refusal body into b (at least maxFrameLen bytes)
// and returns its length.
func marshalRefusal(b []byte, code Code, msg string) int {
	if len(msg) > maxMsgLen {
		// Cut at a rune's start: a reader refuses a message that is not
		// UTF-8.
		n := maxMsgLen
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	if msg == "" {
		msg = code.String()
	}
	b[0], b[1], b[2], b[3] = Version, byte(code), 0, 0
	return 4 + copy(b[4:], msg)
}

// parseReply decodes a reply body: a Grant or a *RefusedError.
func parseReply(b []byte) (Grant, error) {
	if len(b) < 4 {
		return Grant{}, fmt.Errorf("keyx: reply of %d bytes, want at least 4", len(b))
	}
	if b[0] != Version {
		return Grant{}, fmt.Errorf("keyx: reply version %d, want %d", b[0], Version)
	}
	if v := binary.BigEndian.Uint16(b[2:]); v != 0 {
		return Grant{}, fmt.Errorf("keyx: reply reserved field %#04x, want 0", v)
	}
	code := Code(b[1])
	if code != CodeOK {
		msg := b[4:]
		if len(msg) == 0 || len(msg) > maxMsgLen || !utf8.Valid(msg) {
			return Grant{}, fmt.Errorf("keyx: refusal (%v) with a malformed message of %d bytes", code, len(msg))
		}
		return Grant{}, &RefusedError{Code: code, Msg: string(msg)}
	}
	if len(b) != grantLen {
		return Grant{}, fmt.Errorf("keyx: grant of %d bytes, want %d", len(b), grantLen)
	}
	if b[9] != 0 || b[10] != 0 || b[11] != 0 {
		return Grant{}, errors.New("keyx: grant: non-zero padding")
	}
	g := Grant{
		Region: portal.RegionID(binary.BigEndian.Uint32(b[4:])),
		Op:     portal.OpType(b[8]),
		Owner:  netip.AddrFrom4([4]byte(b[12:16])),
		Bytes:  binary.BigEndian.Uint64(b[16:]),
		Key:    portal.Key(b[24:40]),
	}
	if !unicast4(g.Owner) {
		return Grant{}, fmt.Errorf("keyx: grant: owner %v is not a unicast IPv4 address", g.Owner)
	}
	if g.Bytes == 0 {
		return Grant{}, errors.New("keyx: grant: region of 0 bytes")
	}
	return g, nil
}

// writeFrame sends body with its length prefix in one write (one TLS
// record).
func writeFrame(w io.Writer, buf []byte, body []byte) error {
	if len(body) > maxFrameLen || len(buf) < 2+len(body) {
		panic("keyx: frame too large")
	}
	binary.BigEndian.PutUint16(buf, uint16(len(body)))
	n := 2 + copy(buf[2:], body)
	_, err := w.Write(buf[:n])
	return err
}

// errFrameEOF is a clean end of the stream between frames.
var errFrameEOF = errors.New("end of stream")

// errFrameIdle: the read deadline passed before a frame began.
var errFrameIdle = errors.New("idle")

// readFrame reads one frame into buf (maxFrameLen+2 bytes) and returns its
// body. A frame longer than max is not read: the error says so.
func readFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	n, err := io.ReadFull(r, buf[:2])
	switch {
	case n == 0 && err == io.EOF:
		return nil, errFrameEOF
	case n == 0 && errors.Is(err, os.ErrDeadlineExceeded):
		return nil, errFrameIdle
	case err != nil:
		return nil, fmt.Errorf("truncated frame length (%d of 2 bytes): %w", n, err)
	}
	l := int(binary.BigEndian.Uint16(buf))
	if l > max {
		return nil, &frameTooLong{l}
	}
	body := buf[2 : 2+l]
	if n, err := io.ReadFull(r, body); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, fmt.Errorf("truncated message: %d of %d bytes", n, l)
		}
		return nil, err
	}
	return body, nil
}

type frameTooLong struct{ n int }

func (e *frameTooLong) Error() string { return fmt.Sprintf("message of %d bytes", e.n) }
