package kv

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The update RPC (inside mutually authenticated TLS 1.3, keyx
// credentials): frames of a big-endian u32 body length and the body.
//
//	request:  op u8, then by op
//	  DESCRIBE  -
//	  SET       key length u8, value length u32, key, value
//	  DELETE    key length u8, key
//	  HINTS     count u16, count × key hash u64     (no reply)
//	  STATS     -
//	reply:    code u8, then
//	  OK DESCRIBE  the Layout (layoutBytes, below)
//	  OK STATS     the StoreStats counters, u64 each
//	  refusal      a message, UTF-8
//
// Requests on one connection are answered in order, so a client may send
// several before reading the replies. A client the server's permits
// (ServerConfig.Permits) do not name is refused every request
// (codeNotGranted); one granted READ alone is refused SET and DELETE
// (codeNotGranted) and its HINTS are dropped unanswered (HINTS has no
// reply). A client whose certificate the CA revoked is refused its next
// request (codeRevoked) and the connection closed.
const (
	opDescribe = 1
	opSet      = 2
	opDelete   = 3
	opHints    = 4
	opStats    = 5

	codeOK         = 0
	codeNotFound   = 1
	codeBadRequest = 2
	codeTooLarge   = 3
	codeNoMemory   = 4
	codeNotGranted = 5
	codeRevoked    = 6
	codeInternal   = 7

	protoVersion = 1
	// maxFrame bounds a frame: the largest SET.
	maxFrame = 1 + 1 + 4 + MaxKeyBytes + MaxValueBytes
	// MaxHints is the most key hashes one HINTS message carries.
	MaxHints = 1024
)

// Layout is what a server tells its clients about its regions
// (DESCRIBE): enough to read any key with one-sided READs.
type Layout struct {
	Instance    uint64 // random per server process: a restarted server has another
	Buckets     uint64 // a power of two
	Ways        uint32
	MaxValue    uint32
	IndexRegion uint32 // the index region's id
	IndexBytes  uint64
	SlabRegion  uint32
	SlabBytes   uint64
	Owner       netip.Addr // the server's engine address: where READs go
	KeyxPort    uint16     // the key exchange's TCP port (same host as the RPC)
}

const layoutBytes = 1 + 8 + 8 + 4 + 4 + 4 + 8 + 4 + 8 + 4 + 2

func (l *Layout) marshal(b []byte) []byte {
	b = append(b, protoVersion)
	b = binary.BigEndian.AppendUint64(b, l.Instance)
	b = binary.BigEndian.AppendUint64(b, l.Buckets)
	b = binary.BigEndian.AppendUint32(b, l.Ways)
	b = binary.BigEndian.AppendUint32(b, l.MaxValue)
	b = binary.BigEndian.AppendUint32(b, l.IndexRegion)
	b = binary.BigEndian.AppendUint64(b, l.IndexBytes)
	b = binary.BigEndian.AppendUint32(b, l.SlabRegion)
	b = binary.BigEndian.AppendUint64(b, l.SlabBytes)
	a := l.Owner.As4()
	b = append(b, a[:]...)
	return binary.BigEndian.AppendUint16(b, l.KeyxPort)
}

func parseLayout(b []byte) (Layout, error) {
	if len(b) != layoutBytes || b[0] != protoVersion {
		return Layout{}, fmt.Errorf("kv: describe: %d-byte layout of version %d, want %d bytes of version %d", len(b), firstByte(b), layoutBytes, protoVersion)
	}
	be := binary.BigEndian
	l := Layout{Instance: be.Uint64(b[1:]), Buckets: be.Uint64(b[9:]), Ways: be.Uint32(b[17:]), MaxValue: be.Uint32(b[21:]),
		IndexRegion: be.Uint32(b[25:]), IndexBytes: be.Uint64(b[29:]), SlabRegion: be.Uint32(b[37:]), SlabBytes: be.Uint64(b[41:]),
		Owner: netip.AddrFrom4([4]byte(b[49:53])), KeyxPort: be.Uint16(b[53:])}
	switch {
	case l.Buckets == 0 || l.Buckets&(l.Buckets-1) != 0:
		return Layout{}, fmt.Errorf("kv: describe: %d buckets, not a power of two", l.Buckets)
	case l.Ways < 1 || l.Ways > 64 || l.Ways*SlotBytes > 4096:
		return Layout{}, fmt.Errorf("kv: describe: %d ways", l.Ways)
	case l.IndexBytes/SlotBytes/uint64(l.Ways) < l.Buckets:
		return Layout{}, fmt.Errorf("kv: describe: an index of %d bytes cannot hold %d buckets of %d ways", l.IndexBytes, l.Buckets, l.Ways)
	case l.MaxValue > MaxValueBytes:
		return Layout{}, fmt.Errorf("kv: describe: values of up to %d bytes, above %d", l.MaxValue, MaxValueBytes)
	case !l.Owner.IsGlobalUnicast() && !l.Owner.IsPrivate():
		return Layout{}, fmt.Errorf("kv: describe: owner %v is not a unicast address", l.Owner)
	}
	return l, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// RefusedError is a server's refusal of a request.
type RefusedError struct {
	Code uint8
	Msg  string
}

func (e *RefusedError) Error() string { return "kv: server refused: " + e.Msg }

// Is matches ErrNotFound, ErrTooLarge, ErrNoMemory, ErrNotGranted and
// ErrRevoked by code.
func (e *RefusedError) Is(target error) bool {
	switch e.Code {
	case codeNotFound:
		return target == ErrNotFound
	case codeTooLarge:
		return target == ErrTooLarge
	case codeNoMemory:
		return target == ErrNoMemory
	case codeNotGranted:
		return target == ErrNotGranted
	case codeRevoked:
		return target == ErrRevoked
	}
	return false
}

// rpcConn is one side of an RPC connection: frames in and out through
// buffers it keeps.
type rpcConn struct {
	c  net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
	in []byte // the last frame read (grown to the largest seen)
	// The length prefixes being read and written: apart, since a pipe
	// reads on one goroutine while its client writes on another.
	rhdr, whdr [4]byte
	// alive's socket, its peek bound once, and the peek's result: the
	// check allocates nothing however often the hints call it.
	raw   syscall.RawConn
	peek  func(fd uintptr) bool
	peekB [1]byte
	peekN uintptr
	peekE syscall.Errno
}

func newRPCConn(c net.Conn) *rpcConn {
	return &rpcConn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}
}

// writeFrame buffers one frame made of parts (call flush to send).
func (rc *rpcConn) writeFrame(parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > maxFrame {
		return fmt.Errorf("kv: frame of %d bytes, at most %d", n, maxFrame)
	}
	binary.BigEndian.PutUint32(rc.whdr[:], uint32(n))
	if _, err := rc.w.Write(rc.whdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := rc.w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func (rc *rpcConn) flush() error { return rc.w.Flush() }

// readFrame reads one frame; its body is valid until the next read.
func (rc *rpcConn) readFrame() ([]byte, error) {
	if _, err := io.ReadFull(rc.r, rc.rhdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(rc.rhdr[:])
	if n == 0 || n > maxFrame {
		return nil, fmt.Errorf("kv: frame of %d bytes, want 1..%d", n, maxFrame)
	}
	if cap(rc.in) < int(n) {
		rc.in = make([]byte, n)
	}
	rc.in = rc.in[:n]
	if _, err := io.ReadFull(rc.r, rc.in); err != nil {
		return nil, err
	}
	return rc.in, nil
}

func (rc *rpcConn) close() error { return rc.c.Close() }

// alive says whether the connection may still carry a request: false once
// the server has closed it (it closes connections idle for its
// IdleTimeout), which a request written to it would learn only from a
// failed reply. Call it only while no reply is awaited: it may read. It
// costs one non-blocking recv(MSG_PEEK) when nothing is pending; when
// bytes are (a TLS close_notify, or a record the TLS layer consumes
// itself), up to aliveWait for TLS to say which.
func (rc *rpcConn) alive() bool {
	if rc.r.Buffered() > 0 {
		return false // bytes no request asked for
	}
	if rc.raw == nil {
		raw := rc.c
		if tc, ok := raw.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		sc, ok := raw.(syscall.Conn)
		if !ok {
			return true
		}
		var err error
		if rc.raw, err = sc.SyscallConn(); err != nil {
			return false
		}
		rc.peek = rc.peekFD
	}
	if err := rc.raw.Read(rc.peek); err != nil {
		return false
	}
	switch {
	case rc.peekE == unix.EAGAIN:
		return true
	case rc.peekE != 0 || rc.peekN == 0: // reset, or the server's FIN
		return false
	}
	rc.c.SetReadDeadline(time.Now().Add(aliveWait))
	_, err := rc.r.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peekFD is one non-blocking recv(MSG_PEEK) of a byte, made directly:
// unix.Recvfrom would allocate the sender's address.
func (rc *rpcConn) peekFD(fd uintptr) bool {
	rc.peekN, _, rc.peekE = unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&rc.peekB[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return true
}

// aliveWait is how long alive lets TLS read bytes pending on an idle
// connection (they are already in the socket's buffer).
const aliveWait = 5 * time.Millisecond

// request is a parsed request.
type request struct {
	op     uint8
	key    []byte
	value  []byte
	hashes []byte // HINTS: count × 8 bytes
}

// parseRequest checks a request frame's lengths against its size.
func parseRequest(b []byte) (request, error) {
	r := request{op: b[0]}
	b = b[1:]
	switch r.op {
	case opDescribe, opStats:
		if len(b) != 0 {
			return request{}, fmt.Errorf("op %d with %d bytes of arguments", r.op, len(b))
		}
	case opSet:
		if len(b) < 5 {
			return request{}, errors.New("SET shorter than its header")
		}
		k, v := int(b[0]), binary.BigEndian.Uint32(b[1:])
		if k == 0 || uint64(len(b)) != 5+uint64(k)+uint64(v) {
			return request{}, fmt.Errorf("SET of a %d-byte key and %d-byte value in %d bytes", k, v, len(b))
		}
		r.key, r.value = b[5:5+k], b[5+k:]
	case opDelete:
		if len(b) < 2 || int(b[0]) != len(b)-1 {
			return request{}, errors.New("DELETE's key length disagrees with its size")
		}
		r.key = b[1:]
	case opHints:
		if len(b) < 2 {
			return request{}, errors.New("HINTS shorter than its count")
		}
		n := int(binary.BigEndian.Uint16(b))
		if n > MaxHints || len(b) != 2+8*n {
			return request{}, fmt.Errorf("HINTS of %d hashes in %d bytes", n, len(b))
		}
		r.hashes = b[2:]
	default:
		return request{}, fmt.Errorf("op %d unknown", r.op)
	}
	return r, nil
}

// dialRPC connects to a server's RPC over TLS with client credentials'
// configuration tc (keyx.Credentials.ClientTLS of the host dialed).
func dialRPC(addr string, tc *tls.Config, timeout time.Duration) (*rpcConn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: tc}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return newRPCConn(c), nil
}

// call sends one request and reads its reply: the reply's body after the
// code, or the refusal as a *RefusedError.
func (rc *rpcConn) call(timeout time.Duration, parts ...[]byte) ([]byte, error) {
	rc.c.SetDeadline(time.Now().Add(timeout))
	if err := rc.writeFrame(parts...); err != nil {
		return nil, err
	}
	if err := rc.flush(); err != nil {
		return nil, err
	}
	return rc.reply()
}

// reply reads one reply.
func (rc *rpcConn) reply() ([]byte, error) {
	b, err := rc.readFrame()
	if err != nil {
		return nil, err
	}
	if b[0] != codeOK {
		return nil, &RefusedError{Code: b[0], Msg: string(b[1:])}
	}
	return b[1:], nil
}

// setHeader is SET's fixed part for key and value.
func setHeader(h *[6]byte, key, value []byte) []byte {
	h[0], h[1] = opSet, byte(len(key))
	binary.BigEndian.PutUint32(h[2:], uint32(len(value)))
	return h[:]
}
