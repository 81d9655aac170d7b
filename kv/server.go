package kv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// ServerConfig configures a Server. Zero fields take the defaults noted.
type ServerConfig struct {
	Socket string // the engine's control socket (required)
	Name   string // the portal's name (default "kv-server")
	// Credentials are server credentials (keyx.LoadServer, Inherited):
	// the update RPC and the key exchange both authenticate with them
	// and accept clients holding client credentials of the same CA.
	Credentials *keyx.Credentials
	// Permits say which clients (by certificate name) may read the shard
	// (keyx.Read: the K_d of both regions, DESCRIBE, STATS) and which may
	// also update it (keyx.Write: SET, DELETE, access hints), and for
	// which engine addresses beyond their certificates' (keyx.Permit;
	// leave Regions nil). At least one is required.
	Permits    []keyx.Permit
	Listen     string // the update RPC's TCP address (default 127.0.0.1:0)
	KeyxListen string // the key exchange's (default: Listen's host, any port)
	// Buckets (a power of two, default 2^18) of Ways slots (default 8)
	// make the index: Buckets × Ways × 64 bytes (128 MB by default),
	// room for 2 M keys whose key and value fit a slot (48 bytes).
	Buckets uint64
	Ways    int
	// SlabBytes is the slab region for larger values (default 64 MB, at
	// least 1 MB and one largest record).
	SlabBytes uint64
	MaxValue  int // the largest value accepted (default 64 KB, at most MaxValueBytes)
	// NoLookup registers the index for READs only, as a server on an
	// engine without LOOKUP does: clients read every GET with a READ of
	// the bucket and READs of the record. Otherwise the index is
	// registered with its bucket layout (IndexLayout) and PermRemoteLookup,
	// and a client granted keyx.Read gets its LOOKUP K_d too: a GET of a
	// value up to about 4 KB is one LOOKUP. An engine that refuses the
	// layout (an older one) gets the index for READs only.
	NoLookup bool
	// Logf, if set, receives a line per connection refused or failed.
	Logf func(format string, args ...any)
	// The update RPC's connections: HandshakeTimeout bounds a
	// connection's TLS handshake (default 10 s); IdleTimeout closes one
	// on which no request began for that long (default 2 min; clients
	// dial again when they next need one); RequestTimeout bounds reading
	// a request once its first byte came, and writing its reply
	// (default 10 s). Conns bounds the connections held at once, in
	// all, per client address and in their handshake (keyx.ConnLimits'
	// defaults); the key exchange is held to the same limits apart.
	HandshakeTimeout, IdleTimeout, RequestTimeout time.Duration
	Conns                                         keyx.ConnLimits
}

// Defaults of ServerConfig.
const (
	DefaultBuckets   = 1 << 18
	DefaultWays      = 8
	DefaultSlabBytes = 64 << 20
	DefaultMaxValue  = 64 << 10

	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultRequestTimeout   = 10 * time.Second
)

func (cfg *ServerConfig) setDefaults() error {
	if cfg.Socket == "" {
		return errors.New("kv: server: no engine socket")
	}
	if cfg.Credentials == nil {
		return errors.New("kv: server: no credentials")
	}
	if cfg.Name == "" {
		cfg.Name = "kv-server"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("kv: server: Listen %q: %w", cfg.Listen, err)
	}
	if cfg.KeyxListen == "" {
		cfg.KeyxListen = net.JoinHostPort(host, "0")
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.Ways == 0 {
		cfg.Ways = DefaultWays
	}
	if cfg.SlabBytes == 0 {
		cfg.SlabBytes = DefaultSlabBytes
	}
	if cfg.MaxValue == 0 {
		cfg.MaxValue = DefaultMaxValue
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.HandshakeTimeout, DefaultHandshakeTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout}, {&cfg.RequestTimeout, DefaultRequestTimeout}} {
		if *d.v < 0 {
			return fmt.Errorf("kv: server: timeout %v, want > 0 (0: the default %v)", *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	switch {
	case cfg.Buckets&(cfg.Buckets-1) != 0:
		return fmt.Errorf("kv: server: Buckets = %d, want a power of two", cfg.Buckets)
	case cfg.Ways < 1 || cfg.Ways*SlotBytes > abi.MaxOpBytes:
		return fmt.Errorf("kv: server: Ways = %d, want 1..%d (a bucket is one READ)", cfg.Ways, abi.MaxOpBytes/SlotBytes)
	case cfg.MaxValue < 0 || cfg.MaxValue > MaxValueBytes:
		return fmt.Errorf("kv: server: MaxValue = %d, want 0..%d", cfg.MaxValue, MaxValueBytes)
	case cfg.SlabBytes < max(1<<20, uint64(recordLen(MaxKeyBytes, cfg.MaxValue))):
		return fmt.Errorf("kv: server: SlabBytes = %d, want at least 1 MB and one record of MaxValue", cfg.SlabBytes)
	}
	return nil
}

// Server owns a cache shard: its index and slab regions, registered with
// its engine and read by clients with one-sided READs; the key exchange
// that hands clients their K_d; and the update RPC (SET, DELETE, access
// hints, DESCRIBE). Its methods are safe for concurrent use.
type Server struct {
	cfg       ServerConfig
	p         *portal.Portal
	idx, slab *portal.Region
	kx        *keyx.Server
	kxAddr    netip.AddrPort
	tls       *tls.Config
	ln        net.Listener
	gate      *keyx.Gate // the RPC's accept loop and connection limits
	layout    Layout

	mu sync.Mutex // the store
	st *store

	// ctx ends at Close, closing every connection; cmu orders Serve's
	// start against Close's wait.
	ctx    context.Context
	cancel context.CancelFunc
	cmu    sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// NewServer opens a portal on the engine, registers the index and slab
// regions (remote READ only), formats the index, and starts the key
// exchange and the RPC listener. Serve serves the RPC.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// The handler checks revocation itself, to tell the client why.
	tc, err := cfg.Credentials.ServerTLSDeferred()
	if err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	gate, err := keyx.NewGate("kv", cfg.Conns, cfg.HandshakeTimeout, cfg.Logf)
	if err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	cfg.Conns = gate.Limits()
	s := &Server{cfg: cfg, tls: tc, gate: gate}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			s.cancel()
			s.shutdown()
		}
	}()
	if s.p, err = portal.Dial(cfg.Socket, cfg.Name); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	idxBytes := cfg.Buckets * uint64(cfg.Ways) * SlotBytes
	if s.slab, err = s.p.RegisterRegion(cfg.SlabBytes, abi.PermRemoteRead); err != nil {
		return nil, fmt.Errorf("kv: server: slab region of %d bytes: %w", cfg.SlabBytes, err)
	}
	if !cfg.NoLookup && idxBytes <= abi.MaxLookupRegionBytes {
		s.idx, err = s.p.RegisterLookupRegion(idxBytes, abi.PermRemoteRead|abi.PermRemoteLookup, IndexLayout(cfg.Ways, s.slab.ID()))
		if err != nil && cfg.Logf != nil {
			cfg.Logf("kv: server: the engine refused the index's bucket layout (%v): GETs are READs", err)
		}
	}
	if s.idx == nil {
		if s.idx, err = s.p.RegisterRegion(idxBytes, abi.PermRemoteRead); err != nil {
			return nil, fmt.Errorf("kv: server: index region of %d bytes: %w", idxBytes, err)
		}
	}
	var rnd [16]byte
	rand.Read(rnd[:])
	if s.st, err = newStore(s.idx.Bytes(), s.slab.Bytes(), cfg.Buckets, cfg.Ways, cfg.MaxValue, binary.LittleEndian.Uint64(rnd[8:])); err != nil {
		return nil, err
	}
	id := s.p.Identity()
	if s.kx, err = keyx.NewServer(keyx.Config{Credentials: cfg.Credentials, Owner: id.Addr, Permits: lookupPermits(cfg.Permits), Logf: cfg.Logf, Conns: cfg.Conns}); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	s.kx.Add(s.idx)
	s.kx.Add(s.slab)
	if s.kxAddr, err = s.kx.Start(cfg.KeyxListen); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	s.layout = Layout{Instance: binary.LittleEndian.Uint64(rnd[:]), Buckets: cfg.Buckets, Ways: uint32(cfg.Ways),
		MaxValue: uint32(cfg.MaxValue), IndexRegion: uint32(s.idx.ID()), IndexBytes: s.idx.Size(),
		SlabRegion: uint32(s.slab.ID()), SlabBytes: s.slab.Size(), Owner: id.Addr, KeyxPort: s.kxAddr.Port()}
	ok = true
	return s, nil
}

// Addr is the RPC's address; KeyxAddr the key exchange's.
func (s *Server) Addr() net.Addr              { return s.ln.Addr() }
func (s *Server) KeyxAddr() netip.AddrPort    { return s.kxAddr }
func (s *Server) Layout() Layout              { return s.layout }
func (s *Server) Identity() portal.Identity   { return s.p.Identity() }
func (s *Server) Regions() (idx, slab uint32) { return uint32(s.idx.ID()), uint32(s.slab.ID()) }

// Serve accepts RPC connections until Close (it returns nil) or until the
// engine goes away (it returns the portal's *EngineGoneError: the regions
// are gone with the engine, and clients fail over to other replicas).
// Each connection is served on its own goroutine until it ends, idles
// past IdleTimeout, or Close. Temporary accept errors (EMFILE, ENFILE,
// ...) do not end it: it waits, 5 ms doubling to 1 s while they go on,
// and accepts again (keyx.Gate); connections beyond Conns are closed as
// they are accepted.
func (s *Server) Serve() error {
	s.cmu.Lock()
	if s.closed {
		s.cmu.Unlock()
		return nil
	}
	s.wg.Add(2) // this call and the engine's watch
	s.cmu.Unlock()
	defer s.wg.Done()
	gone := make(chan error, 1)
	go func() {
		defer s.wg.Done()
		s.watchEngine(gone)
	}()
	for {
		c, err := s.gate.Accept(s.ln, s.ctx.Done())
		if err == nil {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				stop := context.AfterFunc(s.ctx, func() { c.Close() })
				defer stop()
				s.handle(c)
			}()
			continue
		}
		select {
		case err := <-gone:
			return err
		default:
		}
		if s.ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kv: server: accept: %w", err)
	}
}

// watchEngine polls the portal for its engine's departure until Close;
// when the engine is gone it reports why and stops the listener.
func (s *Server) watchEngine(gone chan<- error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.p.Gone(); err != nil {
				gone <- err
				s.ln.Close()
				return
			}
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// handle serves one connection: requests in order, a reply to each but
// HINTS. A connection waits at most IdleTimeout for a request to begin;
// from its first byte, the request is read and its reply written within
// RequestTimeout.
func (s *Server) handle(raw *keyx.AdmittedConn) {
	defer raw.Close()
	c, err := raw.Handshake(s.tls)
	if err != nil {
		s.logf("kv: %s: refused: handshake: %v", raw.RemoteAddr(), err)
		return
	}
	peer := c.ConnectionState().PeerCertificates[0]
	rc := newRPCConn(c)
	var out []byte
	hintsRefused := false
	for {
		if rc.r.Buffered() == 0 {
			c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
			if _, err := rc.r.Peek(1); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// A close_notify: the client reads the end of the
					// connection, and dials again when it needs one.
					s.logf("kv: %s: idle for %v, closed", raw.RemoteAddr(), s.cfg.IdleTimeout)
					c.Close()
				} else if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
					s.logf("kv: %s: %v", raw.RemoteAddr(), err)
				}
				return
			}
		}
		c.SetDeadline(time.Now().Add(s.cfg.RequestTimeout))
		b, err := rc.readFrame()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				s.logf("kv: %s: %v", raw.RemoteAddr(), err)
			}
			return
		}
		req, err := parseRequest(b)
		if err != nil {
			s.logf("kv: %s: bad request: %v", raw.RemoteAddr(), err)
			rc.writeFrame([]byte{codeBadRequest}, []byte(err.Error()))
			rc.flush()
			return
		}
		if code, msg, ok := s.admit(peer, req.op); !ok {
			if req.op == opHints && code == codeNotGranted {
				// HINTS has no reply: dropped, said once.
				if !hintsRefused {
					s.logf("kv: %s: dropping hints: %s", raw.RemoteAddr(), msg)
					hintsRefused = true
				}
				continue
			}
			s.logf("kv: %s: refused: %s", raw.RemoteAddr(), msg)
			rc.writeFrame([]byte{code}, []byte(msg))
			if rc.flush() != nil || code != codeNotGranted {
				return
			}
			continue
		}
		out = s.serve(&req, out[:0])
		if out == nil { // HINTS: no reply
			continue
		}
		if err := rc.writeFrame(out); err != nil {
			return
		}
		// Flush only when no further request is already buffered: a
		// client that pipelines gets its replies in one write.
		if rc.r.Buffered() == 0 {
			if err := rc.flush(); err != nil {
				return
			}
		}
	}
}

// admit says whether the client of peer may have a request of op served:
// its certificate not revoked (checked at every request, so that an open
// connection serves a revoked client nothing more), a permit naming it,
// and, for SET, DELETE and HINTS, one granting it keyx.Write. Otherwise
// it returns the refusal's code and message; after any but
// codeNotGranted the connection closes.
func (s *Server) admit(peer *x509.Certificate, op uint8) (code byte, msg string, ok bool) {
	if err := s.cfg.Credentials.CheckClient(peer); err != nil {
		if _, revoked := err.(*keyx.RevokedError); revoked {
			return codeRevoked, err.Error(), false
		}
		s.logf("kv: %v", err)
		return codeInternal, "the server cannot read its revocation list", false
	}
	ops := s.kx.Permitted(peer)
	name := peer.Subject.CommonName
	switch {
	case ops == 0:
		return codeNotGranted, fmt.Sprintf("certificate %q is granted nothing by this server", name), false
	case ops&keyx.Write == 0 && (op == opSet || op == opDelete || op == opHints):
		// (Lookup is the server's own addition to Read: lookupPermits)
		return codeNotGranted, fmt.Sprintf("certificate %q may not update (%s): it is granted %v only", name, opName(op), ops&^keyx.Lookup), false
	}
	return 0, "", true
}

// opName names an update op.
func opName(op uint8) string {
	switch op {
	case opSet:
		return "SET"
	case opDelete:
		return "DELETE"
	case opHints:
		return "HINTS"
	}
	return fmt.Sprintf("op %d", op)
}

// serve applies one request and appends its reply to out (nil: none).
func (s *Server) serve(req *request, out []byte) []byte {
	switch req.op {
	case opDescribe:
		return s.layout.marshal(append(out, codeOK))
	case opStats:
		st := s.Stats()
		out = append(out, codeOK)
		for _, v := range st.counters() {
			out = binary.BigEndian.AppendUint64(out, v)
		}
		return out
	case opHints:
		s.mu.Lock()
		for i := 0; i < len(req.hashes); i += 8 {
			s.st.hint(binary.BigEndian.Uint64(req.hashes[i:]))
		}
		s.mu.Unlock()
		return nil
	case opSet:
		if err := s.Set(req.key, req.value); err != nil {
			code := byte(codeTooLarge)
			if errors.Is(err, ErrNoMemory) {
				code = codeNoMemory
			}
			return append(append(out, code), err.Error()...)
		}
		return append(out, codeOK)
	case opDelete:
		if !s.Delete(req.key) {
			return append(out, codeNotFound, 'n', 'o', 't', ' ', 'f', 'o', 'u', 'n', 'd')
		}
		return append(out, codeOK)
	}
	return append(out, codeBadRequest)
}

// Set stores value under key in this shard, as an RPC SET does.
func (s *Server) Set(key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.set(key, value)
}

// Delete removes key from this shard; false if it was not held.
func (s *Server) Delete(key []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.del(key)
}

// Get is the shard's own lookup, a copy of the value (clients read with
// one-sided READs instead).
func (s *Server) Get(key []byte) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.st.get(key)
	return append([]byte(nil), v...), ok
}

// Stats returns the shard's counters.
func (s *Server) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.st
}

// Rekey gives both regions fresh random region keys (portal.Rekey, inside
// the key exchange's Update so that no client is handed a K_d of an old
// key afterwards). Clients' READs with K_d of the old keys fail with
// REMOTE_AUTHENTICATION_FAILURE; they fetch new ones and come back.
func (s *Server) Rekey() error {
	return s.kx.Update(func() error {
		for _, r := range []*portal.Region{s.idx, s.slab} {
			var kr aesni.Key
			for kr == (aesni.Key{}) {
				rand.Read(kr[:])
			}
			if err := s.p.Rekey(r, kr); err != nil {
				return fmt.Errorf("kv: server: rekey: %w", err)
			}
		}
		return nil
	})
}

// Close stops the RPC and the key exchange and closes the portal (the
// engine reclaims the regions: clients' READs fail at once and they fail
// over). Close is idempotent.
func (s *Server) Close() error {
	s.cmu.Lock()
	if s.closed {
		s.cmu.Unlock()
		return nil
	}
	s.closed = true
	s.cmu.Unlock()
	s.cancel()
	err := s.stopServing()
	// The handlers apply updates to the regions' memory, which closing
	// the portal unmaps: they end (their connections closed by the
	// cancel) before it goes.
	s.wg.Wait()
	return errors.Join(err, s.closePortal())
}

// shutdown stops serving and closes the portal, for a server no handler
// has run on.
func (s *Server) shutdown() error {
	return errors.Join(s.stopServing(), s.closePortal())
}

// stopServing closes the listener and the key exchange.
func (s *Server) stopServing() error {
	if s.ln != nil {
		s.ln.Close()
	}
	if s.kx != nil {
		return s.kx.Close()
	}
	return nil
}

func (s *Server) closePortal() error {
	if s.p != nil {
		return s.p.Close()
	}
	return nil
}

// counters lists the stats in the order STATS sends them.
func (st *StoreStats) counters() []uint64 {
	return []uint64{st.Items, st.Records, st.Sets, st.Deletes, st.EvictedIndex, st.EvictedSlab,
		st.Hints, st.HintsUnmatched, uint64(st.SlabPages), uint64(st.SlabPagesTotal)}
}

func parseStats(b []byte) (StoreStats, error) {
	var st StoreStats
	n := len(st.counters())
	if len(b) != 8*n {
		return st, fmt.Errorf("kv: stats of %d bytes, want %d", len(b), 8*n)
	}
	v := func(i int) uint64 { return binary.BigEndian.Uint64(b[8*i:]) }
	st = StoreStats{Items: v(0), Records: v(1), Sets: v(2), Deletes: v(3), EvictedIndex: v(4), EvictedSlab: v(5),
		Hints: v(6), HintsUnmatched: v(7), SlabPages: uint32(v(8)), SlabPagesTotal: uint32(v(9))}
	return st, nil
}

// IndexLayout is the bucket layout of a server's index (a region of
// buckets of ways slots of 64 bytes, package doc): a slot's tag is its
// key hash (a pointer slot's bytes 8..15), its pointer the record's slab
// offset / 64 (bytes 24..27), its length the record's (28..31), into the
// slab region. A LOOKUP of a key's hash in its bucket answers with the
// slot and its record.
func IndexLayout(ways int, slab abi.RegionID) abi.BucketLayout {
	return abi.BucketLayout{BucketBytes: uint32(ways) * SlotBytes, EntryBytes: SlotBytes,
		TagOff: 8, TagWidth: 8, PtrOff: 24, PtrWidth: 4, PtrShift: 6, LenOff: 28, LenWidth: 4, Linked: slab}
}

// lookupPermits are ps with Lookup added wherever Read is granted: a
// LOOKUP of the index reads nothing a READ of the index and the slab
// would not.
func lookupPermits(ps []keyx.Permit) []keyx.Permit {
	out := make([]keyx.Permit, len(ps))
	for i, p := range ps {
		if p.Ops == 0 {
			p.Ops = keyx.Read
		}
		if p.Ops&keyx.Read != 0 {
			p.Ops |= keyx.Lookup
		}
		out[i] = p
	}
	return out
}
