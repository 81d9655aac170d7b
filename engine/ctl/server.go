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
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// Server is the control socket server. Create it with Listen, run Serve,
// stop it with Close.
type Server struct {
	cfg      Config
	g        *engine.Group
	execs    []Executor // by core: runs closures on the core's goroutine
	log      zerolog.Logger
	addr     netip.Addr // the engine's address, stamped on requests
	hugePage uint64     // 0: huge pages not tried
	res      Resources  // what quota percentages are of
	ids      *identities
	uids     *uidFolder  // tenants by uid (uidmap.go)
	stats    *statsCache // the stats request's collections (statsview.go)
	// changes counts the changes of portals as the stats reply lists
	// them, each once the core has made it (noteChange).
	changes atomic.Uint64

	lns []*listener

	mu      sync.Mutex
	conns   map[*conn]struct{}
	tenants map[tenantKey]*tenant
	// engineTenants is the cores' engine.Config.Tenants; tenantIdx the
	// indices below it no active tenant holds (a stack).
	engineTenants int
	tenantIdx     []int
	tenantEpochs  uint64         // tenants admitted to an index (each one's tenant.epoch)
	pools         [numPools]pool // what the tenants hold of each (pool.go)
	load          []coreLoad     // by core: the portals and slots it serves (cores.go)
	// Memory objects charged until they are gone (memwatch.go): by
	// inotify watch, and those charged whose watch is not added yet.
	mem        *memWatch
	memObjs    map[int32]*memObj
	memPending int

	// cores holds, by core, the portals the server opened there (each
	// touched only inside its core's Exec closures).
	cores   []*coreBook
	closing bool
	wg      sync.WaitGroup
	nextID  uint64

	refusing atomic.Int32   // connections being refused now
	sampled  zerolog.Logger // anomalies a client can repeat at will: sampled
	// unlocked is set once locking region memory failed (logged once).
	unlocked atomic.Bool
	// summaries are the cores' summary doorbells (nil: Config.NoSummary),
	// summaryBytes the bytes of words in each: mapped for as long as the
	// process lives (the cores read them until they stop).
	summaries    []*shm
	summaryBytes uint64
}

// listener is one control socket.
type listener struct {
	idx      int
	cfg      SocketConfig
	ln       *net.UnixListener
	max, min amounts // each tenant's quotas and guarantees on this socket
	// quota and guarantee are the socket's, every field set, as
	// configured (for the start-up log).
	quota, guarantee Quota
}

// maxRefusing bounds goroutines answering refused connections.
const maxRefusing = 64

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("ctl: server closed")

// Listen validates cfg, checks the kernel can name peer processes, opens
// the identity state, reads the engine's address and tables from its
// first core, measures what quotas are shares of, and binds every socket.
// g is the engine; execs[i] runs closures on core i's goroutine (one
// runner.Runner per core, as many as g has cores). A stale socket file
// left by a crashed engine is removed; a live one (another engine
// answers) is an error.
func Listen(cfg Config, g *engine.Group, execs []Executor, log zerolog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, errors.New("ctl: no engine")
	}
	if len(execs) != g.Len() {
		return nil, fmt.Errorf("ctl: %d executors for an engine of %d cores", len(execs), g.Len())
	}
	if err := checkPidfs(); err != nil {
		return nil, err
	}
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, g: g, execs: execs, log: log, conns: make(map[*conn]struct{}),
		tenants: make(map[tenantKey]*tenant), load: make([]coreLoad, g.Len()), memObjs: make(map[int32]*memObj),
		sampled: log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})}
	for range g.Len() {
		s.cores = append(s.cores, &coreBook{owner: make(map[engine.PortalID]*conn), ownerName: make(map[engine.PortalID]string)})
	}
	if err := execs[0].Exec(func(c *engine.Core) {
		ec := c.Config()
		s.addr = ec.LocalIP
		// Each core has a portal table and a slot partition of these
		// sizes, and the engine one region table: quotas are shares of
		// the engine's.
		s.res.Portals, s.res.Slots, s.res.Regions = ec.Portals*g.Len(), ec.Slots*g.Len(), ec.Regions
		s.engineTenants = ec.Tenants
	}); err != nil {
		return nil, fmt.Errorf("ctl: reading the core's config: %w", err)
	}
	for i := s.engineTenants - 1; i >= 0; i-- {
		s.tenantIdx = append(s.tenantIdx, i)
	}
	if !cfg.NoSummary {
		if err := s.makeSummaries(); err != nil {
			return nil, err
		}
	}
	if cfg.Hugetlb == HugetlbAuto {
		s.hugePage = hugePageSize()
	}
	s.res.Conns = cfg.MaxConns
	r := cfg.Resources
	if r == nil {
		m, err := measureResources(s.hugePage)
		if err != nil {
			return nil, err
		}
		r = &m
	}
	s.res.MemoryBytes, s.res.HugepageBytes = r.MemoryBytes, r.HugepageBytes
	for i := range cfg.Sockets {
		sc := cfg.Sockets[i]
		s.lns = append(s.lns, &listener{idx: i, cfg: sc, quota: sc.Quota.Over(cfg.Quota), guarantee: sc.Guarantee.Over(cfg.Guarantee)})
	}
	if err := s.resolvePools(); err != nil {
		return nil, err
	}
	if s.uids, err = newUIDFolder(&cfg, log); err != nil {
		return nil, err
	}
	s.stats = newStatsCache(s.collectStats, s.changes.Load)
	if s.mem, err = newMemWatch(cfg.MaxMemoryObjects); err != nil {
		return nil, err
	}
	log.Info().Int("memory_objects", s.mem.max).Msg("memory objects charged until gone: the most watched at once")
	if objs := s.res.Portals + s.res.Regions; objs > s.mem.max {
		// Each object holds a portal or a region: the pools keep the
		// objects within these totals, and the guarantees hold only if
		// the engine can watch that many.
		log.Warn().Int("portals_and_regions", objs).Int("memory_objects", s.mem.max).Str("sysctl", maxQueuedEventsPath).
			Msg("the tenants' portals and regions may outnumber the memory objects the engine can watch: raise the sysctl to twice their number, or the guarantees may meet the bound")
	}
	if s.ids, err = openIdentities(identConfig{path: cfg.IdentityPath, boot: boot, max: cfg.MaxIdentities, log: s.sampled}); err != nil {
		s.mem.f.Close()
		return nil, err
	}
	handedOut, entries := s.ids.usage()
	log.Info().Str("identity_state", cfg.IdentityPath).Str("boot", boot).Uint64("identities_handed_out", handedOut).
		Int("identity_table", entries).Uint64("identities_left", s.ids.remaining()).Msg("process identities")
	for _, l := range s.lns {
		if err := s.listen(l); err != nil {
			s.closeListeners()
			s.ids.close()
			s.mem.f.Close()
			return nil, err
		}
	}
	go s.watchMemLoop()
	return s, nil
}

// makeSummaries gives every core its summary doorbell: a page of its own
// (one bit per portal of the core), which the applications of the core's
// portals map through the summary request. Plain pages, sized and sealed
// against growing and shrinking, populated and locked in the engine's
// mapping; they cannot be sealed against new writable mappings (every
// application that asks maps one), so an application could punch a hole
// in one (MADV_REMOVE), which costs the engine's loop a page fault and
// clears every bit: the fallback scan bounds what that delays.
func (s *Server) makeSummaries() error {
	portals := s.res.Portals / len(s.execs)
	s.summaryBytes = uint64(abi.SummaryBytes(portals))
	for k := range s.execs {
		m, err := newShm(fmt.Sprintf("onerma-summary-%d", k), s.summaryBytes, 0)
		if err != nil {
			return fmt.Errorf("ctl: core %d's summary doorbell: %w", k, err)
		}
		if err := unix.Madvise(m.mem, unix.MADV_POPULATE_WRITE); err != nil {
			m.release()
			return fmt.Errorf("ctl: core %d's summary doorbell: populating: %w", k, err)
		}
		m.locked = unix.Mlock(m.mem) == nil
		var serr error
		if err := s.execs[k].Exec(func(c *engine.Core) { serr = c.SetSummary(m.mem) }); err != nil || serr != nil {
			m.release()
			return fmt.Errorf("ctl: core %d's summary doorbell: %w", k, errors.Join(err, serr))
		}
		s.summaries = append(s.summaries, m)
	}
	return nil
}

// listen binds l's socket.
func (s *Server) listen(l *listener) error {
	sc := l.cfg
	if err := removeStaleSocket(sc.Path); err != nil {
		return err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sc.Path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("ctl: listen on %s: %w", sc.Path, err)
	}
	ln.SetUnlinkOnClose(true)
	l.ln = ln
	if err := os.Chmod(sc.Path, sc.Mode); err != nil {
		ln.Close()
		return fmt.Errorf("ctl: chmod %s: %w", sc.Path, err)
	}
	if sc.UID != nil || sc.GID != nil {
		uid, gid := -1, -1
		if sc.UID != nil {
			uid = int(*sc.UID)
		}
		if sc.GID != nil {
			gid = int(*sc.GID)
		}
		if err := os.Chown(sc.Path, uid, gid); err != nil {
			ln.Close()
			return fmt.Errorf("ctl: chown %s: %w", sc.Path, err)
		}
	}
	ev := s.log.Info().Str("socket", sc.Path).Str("name", sc.label()).Str("mode", fmt.Sprintf("%#o", sc.Mode)).
		Str("tenant", sc.Tenant).Int("slot_rules", len(sc.Policy.Rules))
	for p := range numPools {
		// "64 MiB..25% = 67108864 bytes (64.0 MiB)..6442450944 bytes (6.0 GiB)": guarantee..quota, as configured and resolved.
		ev = ev.Str("pool_"+p.String(), fmt.Sprintf("%s..%s = %s..%s", *l.guarantee.field(p), *l.quota.field(p), p.amount(l.min[p]), p.amount(l.max[p])))
	}
	ev.Str("addr", s.addr.String()).Int("cores", len(s.execs)).Uint64("hugepage_bytes", s.hugePage).Msg("control socket listening")
	return nil
}

func (s *Server) closeListeners() error {
	var err error
	for _, l := range s.lns {
		err = errors.Join(err, l.ln.Close()) // unlinks the socket file
	}
	return err
}

// Quota returns the limits of each tenant of socket i (Config.Sockets[i]).
func (s *Server) Quota(i int) ctlmsg.TenantUsage { return s.lns[i].max.usage() }

// Guarantee returns the guarantees of each tenant of socket i.
func (s *Server) Guarantee(i int) ctlmsg.TenantUsage { return s.lns[i].min.usage() }

// Resources returns the totals the quotas' percentages were taken of.
func (s *Server) Resources() Resources { return s.res }

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

// Serve accepts connections on every socket until Close. It returns
// ErrClosed after Close, or the first accept error that stopped a socket.
func (s *Server) Serve() error {
	errs := make(chan error, len(s.lns))
	for _, l := range s.lns {
		go func() { errs <- s.accept(l) }()
	}
	for range s.lns {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return ErrClosed
}

// accept serves one socket.
func (s *Server) accept(l *listener) error {
	for {
		uc, err := l.ln.AcceptUnix()
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
			return fmt.Errorf("ctl: accept on %s: %w", l.cfg.Path, err)
		}
		p, err := readPeer(uc)
		if err != nil {
			// A peer gone before it was accepted, most likely; sampled,
			// as a client can make as many as it likes.
			s.sampled.Warn().Err(err).Str("socket", l.cfg.label()).Msg("dropping connection: its peer cannot be identified")
			uc.Close()
			continue
		}
		if l.cfg.Tenant == TenantByUID {
			s.uids.refresh(time.Now()) // off s.mu: it may read the passwd and subuid files
		}
		c, rerr, closing := s.admit(l, uc, p)
		if closing {
			uc.Close()
			return ErrClosed
		}
		if rerr != nil {
			if s.refusing.Add(1) > maxRefusing {
				s.refusing.Add(-1)
				uc.Close() // a flood: no answer
				continue
			}
			go func() {
				refuse(uc, rerr)
				s.refusing.Add(-1)
			}()
			continue
		}
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.refundLocked(c.tenant, amounts{poolConns: 1})
			s.mu.Unlock()
		}()
	}
}

// admit charges a new connection to its tenant (the conns pool), making
// the tenant active if it was not, and returns the connection; or the
// refusal; or closing once the server is closing. A refusal is final
// only once the memory the applications have let go of is refunded, as
// for charge: a new tenant's guarantee must fit in every pool.
func (s *Server) admit(l *listener, uc *net.UnixConn, p peer) (c *conn, rerr *reqError, closing bool) {
	for try := 0; ; try++ {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return nil, nil, true
		}
		t := s.tenantFor(l, &p)
		r := s.activateLocked(t)
		if r == nil {
			if r = s.chargeLocked(t, amounts{poolConns: 1}); r != nil && t.idle() {
				s.refundLocked(t, amounts{}) // it holds nothing: not active any more
			}
		}
		if r == nil {
			s.nextID++
			c = &conn{s: s, l: l, uc: uc, id: s.nextID, peer: p, tenant: t, since: time.Now()}
			s.conns[c] = struct{}{}
			s.wg.Add(1)
			s.mu.Unlock()
			return c, nil, false
		}
		s.dropIfIdle(t) // one made for this connection
		s.mu.Unlock()
		if try > 0 {
			return nil, refusalError("connect", t, r), false
		}
		s.drainMem()
	}
}

// Close stops accepting, ends every connection, waits until each has
// reclaimed its portal and regions, removes the socket files and releases
// the identity state. Each connection is closed only after its portal was
// reclaimed, so an application that sees its connection close knows that
// the core writes nothing more into its rings and regions.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	err := s.closeListeners()
	for c := range s.conns {
		// The connection's goroutine returns from its read (or from the
		// next one, after the request in hand), reclaims, then closes.
		c.uc.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	s.wg.Wait()
	for _, m := range s.summaries {
		m.closeFD() // the mapping stays: the cores may still read it
	}
	err = errors.Join(err, s.closeMemWatch(), s.ids.close())
	s.log.Info().Int("sockets", len(s.lns)).Msg("control sockets closed")
	return err
}

// Conns reports open control connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
