package ctl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/engine"
)

// Server is the control socket server. Create it with Listen, run Serve,
// stop it with Close.
type Server struct {
	cfg      Config
	exec     Executor
	log      zerolog.Logger
	addr     netip.Addr // the engine's address, stamped on requests
	hugePage uint64     // 0: huge pages not tried

	ln *net.UnixListener

	mu     sync.Mutex
	conns  map[*conn]struct{}
	perUID map[uint32]int // open connections per peer uid

	// owner maps each core portal id to the connection that opened it.
	// Touched only inside Exec closures (the core's goroutine), which
	// serialises it with every use of the ids.
	owner map[engine.PortalID]*conn
	// ownerName is the name each of those portals was opened with (the
	// stats reply's portals), kept with owner.
	ownerName map[engine.PortalID]string
	closing   bool
	wg        sync.WaitGroup
	nextID    uint64

	refusing atomic.Int32 // connections being refused now
}

// maxRefusing bounds goroutines answering connections beyond MaxConns.
const maxRefusing = 64

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("ctl: server closed")

// Listen validates cfg, reads the engine's address from the core, and binds
// the socket. A stale socket file left by a crashed engine is removed; a
// live one (another engine answers) is an error.
func Listen(cfg Config, exec Executor, log zerolog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, exec: exec, log: log, conns: make(map[*conn]struct{}), perUID: make(map[uint32]int),
		owner: make(map[engine.PortalID]*conn), ownerName: make(map[engine.PortalID]string)}
	if err := exec.Exec(func(c *engine.Core) { s.addr = c.Config().LocalIP }); err != nil {
		return nil, fmt.Errorf("ctl: reading the core's config: %w", err)
	}
	if cfg.Hugetlb == HugetlbAuto {
		s.hugePage = hugePageSize()
	}
	if err := removeStaleSocket(cfg.SocketPath); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.SocketPath, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("ctl: listen on %s: %w", cfg.SocketPath, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(cfg.SocketPath, cfg.SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("ctl: chmod %s: %w", cfg.SocketPath, err)
	}
	s.ln = ln
	log.Info().Str("socket", cfg.SocketPath).Str("mode", fmt.Sprintf("%#o", cfg.SocketMode)).
		Str("addr", s.addr.String()).Uint64("hugepage_bytes", s.hugePage).Msg("control socket listening")
	return s, nil
}

// removeStaleSocket removes path if it is a socket nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ctl: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("ctl: %s exists and is not a socket", path)
	}
	c, err := net.Dial("unixpacket", path)
	if err == nil {
		c.Close()
		return fmt.Errorf("ctl: %s: another engine is listening", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("ctl: probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("ctl: removing stale socket: %w", err)
	}
	return nil
}

// Addr returns the engine address the server reports as identity.
func (s *Server) Addr() netip.Addr { return s.addr }

// Serve accepts connections until Close. It returns ErrClosed after Close,
// or the accept error that stopped it.
func (s *Server) Serve() error {
	for {
		uc, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors: refuse this one, keep serving the rest.
				s.log.Error().Err(err).Msg("accept: out of file descriptors")
				time.Sleep(10 * time.Millisecond) // do not spin while they are gone
				continue
			}
			return fmt.Errorf("ctl: accept: %w", err)
		}
		cred, err := peerCred(uc)
		if err != nil {
			s.log.Error().Err(err).Msg("dropping connection")
			uc.Close()
			continue
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			uc.Close()
			return ErrClosed
		}
		s.nextID++
		c := &conn{s: s, uc: uc, id: s.nextID, cred: cred}
		why := ""
		switch {
		case len(s.conns) >= s.cfg.MaxConns:
			why = fmt.Sprintf("engine: too many control connections (limit %d)", s.cfg.MaxConns)
		case s.perUID[cred.Uid] >= s.cfg.MaxConnsPerUID:
			why = fmt.Sprintf("engine: uid %d already holds %d control connections (limit %d per uid)",
				cred.Uid, s.perUID[cred.Uid], s.cfg.MaxConnsPerUID)
		default:
			s.conns[c] = struct{}{}
			s.perUID[cred.Uid]++
			s.wg.Add(1)
		}
		s.mu.Unlock()
		if why != "" {
			if s.refusing.Add(1) > maxRefusing {
				s.refusing.Add(-1)
				uc.Close() // a flood: no answer
				continue
			}
			go func() {
				refuse(uc, why)
				s.refusing.Add(-1)
			}()
			continue
		}
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			if s.perUID[c.cred.Uid]--; s.perUID[c.cred.Uid] == 0 {
				delete(s.perUID, c.cred.Uid)
			}
			s.mu.Unlock()
		}()
	}
}

// Close stops accepting, ends every connection, waits until each has
// reclaimed its portal and regions, and removes the socket file. Each
// connection is closed only after its portal was reclaimed, so an
// application that sees its connection close knows that the core writes
// nothing more into its rings and regions.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	err := s.ln.Close() // unlinks the socket file
	for c := range s.conns {
		// The connection's goroutine returns from its read (or from the
		// next one, after the request in hand), reclaims, then closes.
		c.uc.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.log.Info().Str("socket", s.cfg.SocketPath).Msg("control socket closed")
	return err
}

// Conns reports open control connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
