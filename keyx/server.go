package keyx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/onerma/onerma/portal"
)

// Region is a region an owner serves: *portal.Region is one. DeriveKey
// must return the K_d of the region's current K_r (paper §4.2) for the
// initiating process (its engine's address and the PID its engine
// stamps) and op.
type Region interface {
	ID() portal.RegionID
	Size() uint64
	Perm() portal.Perm
	DeriveKey(initiator netip.Addr, pid uint32, op portal.OpType) portal.Key
}

// Config configures a Server.
type Config struct {
	// Credentials are the owner's server credentials (CA.IssueServer,
	// LoadServer or Inherited); readers need client credentials from the
	// same CA.
	Credentials *Credentials
	// Owner is the owner engine's IPv4 address (portal.Identity().Addr):
	// every Grant names it as where to send ops.
	Owner netip.Addr
	// Permits say which clients (by certificate name) may have K_d for
	// which ops on which regions, and for which initiator addresses
	// beyond their certificates' own (Permit). A request no Permit of
	// its client covers is refused (CodeNotGranted, CodeAddress); at
	// least one Permit is required.
	Permits []Permit
	// Authorize, if set, narrows the Permits: it decides whether the
	// holder of peer may have the K_d of req (a Permit covers it, the
	// region exists and allows the op). Its error is sent back with
	// CodeRefused.
	Authorize func(peer *x509.Certificate, req Request) error
	// Logf, if set, receives one line per refused connection or request
	// and per grant. It is never given a key.
	Logf func(format string, args ...any)
	// Timeout bounds the handshake and each wait for a request, from
	// the end of the last reply to the whole next request read (default
	// 10 s): a connection idle or slow for longer is closed.
	Timeout time.Duration
	// Conns bounds the connections held at once, in all, per client
	// address and in their handshake (ConnLimits' defaults).
	Conns ConnLimits
}

// Server serves K_d to readers over TLS 1.3 with client certificates. Its
// methods are safe for concurrent use.
type Server struct {
	cfg  Config
	tls  *tls.Config
	gate *Gate
	mu   sync.RWMutex // regions and policy; held for reading while deriving (see Update)
	regs map[portal.RegionID]Region
	pol  *policy

	lmu    sync.Mutex
	ln     net.Listener
	closed bool
	done   chan struct{} // closed by Close: ends Serve's waits
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewServer checks cfg and builds a server with no regions.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Credentials == nil {
		return nil, errors.New("keyx: server: no credentials")
	}
	tc, err := cfg.Credentials.ServerTLSDeferred()
	if err != nil {
		return nil, fmt.Errorf("keyx: server: %w", err)
	}
	if !unicast4(cfg.Owner) {
		return nil, fmt.Errorf("keyx: server: owner address %v is not a unicast IPv4 address", cfg.Owner)
	}
	pol, err := newPolicy(cfg.Permits)
	if err != nil {
		return nil, fmt.Errorf("keyx: server: %w", err)
	}
	cfg.Permits = nil // pol holds copies
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	gate, err := NewGate("keyx", cfg.Conns, cfg.Timeout, cfg.Logf)
	if err != nil {
		return nil, err
	}
	cfg.Conns = gate.Limits()
	return &Server{cfg: cfg, tls: tc, gate: gate, regs: map[portal.RegionID]Region{}, pol: pol,
		done: make(chan struct{}), conns: map[net.Conn]struct{}{}}, nil
}

// SetPermits replaces the server's permits (Config.Permits): requests
// answered after it returns are granted under the new ones, on
// connections already open too.
func (s *Server) SetPermits(permits []Permit) error {
	pol, err := newPolicy(permits)
	if err != nil {
		return fmt.Errorf("keyx: server: %w", err)
	}
	s.mu.Lock()
	s.pol = pol
	s.mu.Unlock()
	return nil
}

// Permitted is every op the holder of a client certificate is granted on
// some region: what a service beside the key exchange (kv's update RPC)
// authorizes by.
func (s *Server) Permitted(peer *x509.Certificate) Ops {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pol.ops(peer)
}

// Add serves r (replacing a region of the same id).
func (s *Server) Add(r Region) {
	s.mu.Lock()
	s.regs[r.ID()] = r
	s.mu.Unlock()
}

// Remove stops serving region id.
func (s *Server) Remove(id portal.RegionID) {
	s.mu.Lock()
	delete(s.regs, id)
	s.mu.Unlock()
}

// Update runs fn while no derivation is in progress: use it to change a
// served region's key, e.g. s.Update(func() error { return p.Rekey(r, kr) }),
// so that no reader is handed a K_d derived from the old K_r after fn
// returns.
func (s *Server) Update(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn()
}

// Start listens on addr (TCP host:port; "" means 127.0.0.1:0, a free
// port on loopback) and serves in the background until Close. It returns
// the address it listens on. Any address will do, 0.0.0.0 included, for
// readers on other hosts: only holders of client credentials from the CA
// complete a handshake, and they reach the owner by a name or address its
// certificate holds (CA.IssueServer's hosts).
func (s *Server) Start(addr string) (netip.AddrPort, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return netip.AddrPort{}, fmt.Errorf("keyx: listen %q: want HOST:PORT: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("keyx: %w", err)
	}
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.Serve(ln)
	}()
	return ap, nil
}

// Serve accepts connections on ln (any listener; Start makes a TCP one)
// until Close (then it returns nil) or a permanent accept error, and
// serves each on its own goroutine. Temporary accept errors (EMFILE,
// ENFILE, ...) do not end it: it waits, 5 ms doubling to 1 s while they
// go on, and accepts again (Gate.Accept). Connections beyond
// Config.Conns are closed as they are accepted.
func (s *Server) Serve(ln net.Listener) error {
	s.lmu.Lock()
	if s.closed {
		s.lmu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.lmu.Unlock()
	for {
		c, err := s.gate.Accept(ln, s.done)
		if err != nil {
			s.lmu.Lock()
			closed := s.closed
			s.lmu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("keyx: accept: %w", err)
		}
		s.lmu.Lock()
		if s.closed {
			s.lmu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.lmu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c)
			s.lmu.Lock()
			delete(s.conns, c)
			s.lmu.Unlock()
		}()
	}
}

// Close stops the listener, closes open connections and waits for their
// handlers.
func (s *Server) Close() error {
	s.lmu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.lmu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

func (s *Server) handle(raw *AdmittedConn) {
	defer raw.Close()
	remote := raw.RemoteAddr().String()
	c, err := raw.Handshake(s.tls)
	if err != nil {
		s.logf("keyx: %s: refused: handshake: %v", remote, err)
		return
	}
	peer := c.ConnectionState().PeerCertificates[0]
	who := fmt.Sprintf("%s (certificate %q)", remote, peer.Subject.CommonName)
	var in [2 + maxFrameLen]byte
	var out [2 + maxFrameLen]byte
	defer clear(out[:])
	refuse := func(code Code, msg string) error {
		var b [maxFrameLen]byte
		n := marshalRefusal(b[:], code, msg)
		return writeFrame(c, out[:], b[:n])
	}
	for {
		c.SetDeadline(time.Now().Add(s.cfg.Timeout))
		body, err := readFrame(c, in[:], maxFrameLen)
		if err == errFrameEOF {
			return
		}
		if err == errFrameIdle {
			// No request began within the timeout: close with a
			// close_notify the client reads as the end of the
			// connection (its next Fetch fails at once and it dials
			// again), not as a refusal.
			s.logf("keyx: %s: idle for %v, closed", who, s.cfg.Timeout)
			c.Close()
			return
		}
		var req Request
		if err == nil {
			req, err = parseRequest(body)
		} else if tl, ok := err.(*frameTooLong); ok {
			err = fmt.Errorf("request of %d bytes, want %d", tl.n, requestLen)
		}
		if err != nil {
			s.logf("keyx: %s: bad request: %v", who, err)
			// The read may have timed out mid-frame: a refusal written
			// past the deadline would leave the TLS record sequence
			// advanced and the client unable to read what follows.
			c.SetDeadline(time.Now().Add(s.cfg.Timeout))
			refuse(CodeBadRequest, err.Error())
			c.Close() // sends close_notify after the refusal
			return
		}
		// Revocation is checked at every request, so that a revoked
		// client's open connection serves it nothing more.
		if err := s.cfg.Credentials.CheckClient(peer); err != nil {
			s.logf("keyx: %s: refused: %v", who, err)
			code, msg := CodeInternal, "the owner cannot read its revocation list"
			if _, ok := err.(*RevokedError); ok {
				code, msg = CodeRevoked, err.Error()
			}
			refuse(code, msg)
			c.Close()
			return
		}
		g, code, err := s.grant(peer, req)
		if err != nil {
			s.logf("keyx: %s: refused %v K_d for region %#x to %s pid %d: %v", who, req.Op, uint32(req.Region), req.Initiator, req.PID, err)
			if refuse(code, err.Error()) != nil {
				return
			}
			continue
		}
		var b [grantLen]byte
		marshalGrant(&b, &g)
		err = writeFrame(c, out[:], b[:])
		clear(b[:])
		clear(g.Key[:])
		if err != nil {
			s.logf("keyx: %s: reply: %v", who, err)
			return
		}
		s.logf("keyx: %s: granted %v K_d for region %#x to %s pid %d", who, req.Op, uint32(req.Region), req.Initiator, req.PID)
	}
}

func (s *Server) grant(peer *x509.Certificate, req Request) (Grant, Code, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	// The permits first: a client granted nothing learns nothing of the
	// regions served.
	if code, err := s.pol.check(peer, &req); err != nil {
		return Grant{}, code, err
	}
	r, ok := s.regs[req.Region]
	if !ok {
		return Grant{}, CodeUnknownRegion, fmt.Errorf("region %#x is not served here", uint32(req.Region))
	}
	need := map[portal.OpType]portal.Perm{portal.OpRead: portal.PermRemoteRead, portal.OpWrite: portal.PermRemoteWrite,
		portal.OpRekey: portal.PermRemoteRekey, portal.OpLookup: portal.PermRemoteLookup}[req.Op]
	if r.Perm()&need == 0 {
		return Grant{}, CodePermission, fmt.Errorf("region %#x does not allow remote %v", uint32(req.Region), req.Op)
	}
	if s.cfg.Authorize != nil {
		if err := s.cfg.Authorize(peer, req); err != nil {
			return Grant{}, CodeRefused, err
		}
	}
	return Grant{Region: req.Region, Op: req.Op, Owner: s.cfg.Owner, Bytes: r.Size(),
		Key: r.DeriveKey(req.Initiator, req.PID, req.Op)}, CodeOK, nil
}
