package ctl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// conn is one control connection and the portal it may hold. Only its own
// goroutine touches it (Server.Close only closes uc).
type conn struct {
	s      *Server
	l      *listener // the socket it came through
	uc     *net.UnixConn
	id     uint64
	peer   peer
	tenant *tenant   // set at accept, charged for everything the connection holds
	since  time.Time // accepted

	ident uint32 // the peer process's identity (0: not asked for yet)

	statsSeen uint64 // the stats snapshot last sent (statsview.go)

	open     bool // open succeeded: the segment exists, and the tenant is charged a portal
	attached bool // attach succeeded: the core serves the portal
	name     string
	askCore  int             // the core open asked for (-1: the engine picks at attach)
	core     int             // the core that serves the portal (once attached)
	portal   engine.PortalID // its id on that core
	layout   abi.Layout
	class    abi.Class
	seg      *shm
	maxSlots int
	capFrom  string // where maxSlots came from, for error messages
	slots    int    // slots allocated to the portal

	pending     *pendingMem // memory created and not yet registered
	nextMem     uint32      // handle of the last memory created
	regions     map[abi.RegionID]*region
	regionBytes uint64
	bell        *eventBell // completion doorbell, once asked for
}

// eventBell rings an application's completion doorbell: one 8-byte write
// to an eventfd, made by the core's poll loop only when the application
// armed it (it is asleep).
type eventBell struct {
	fd  int
	one [8]byte
}

func (b *eventBell) Ring() { unix.Write(b.fd, b.one[:]) }

// reqError is a failure reported to the client.
type reqError struct {
	code  ctlmsg.Code
	msg   string
	quota string // CodeQuota: the quota's name
}

func (e *reqError) Error() string { return string(e.code) + ": " + e.msg }

func fail(code ctlmsg.Code, format string, args ...any) *reqError {
	return &reqError{code: code, msg: fmt.Sprintf(format, args...)}
}

// refuse answers a connection its tenant's pools refused, and closes it.
// It reads the client's first request before answering: closing a unix
// socket with unread data would reset the connection and lose the answer.
func refuse(uc *net.UnixConn, why *reqError) {
	defer uc.Close()
	var (
		buf [ctlmsg.MaxRequestBytes + 1]byte
		oob [256]byte
	)
	resp := ctlmsg.Response{V: ctlmsg.Version, Code: why.code, Error: why.msg, Quota: why.quota}
	uc.SetDeadline(time.Now().Add(refuseWait))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf[:], oob[:])
	if err != nil {
		return
	}
	closeRights(oob[:oobn])
	if req, err := ctlmsg.DecodeRequest(buf[:n]); err == nil {
		resp.ID, resp.Op = req.ID, req.Op
	}
	clear(buf[:n]) // it may hold a region key
	b, _ := ctlmsg.EncodeResponse(&resp)
	uc.Write(b)
}

// refuseWait bounds how long a refused connection may take to send its
// first request.
const refuseWait = time.Second

func (c *conn) serve() {
	defer c.uc.Close()
	log := c.s.log.With().Uint64("conn", c.id).Str("tenant", c.tenant.name).Int32("pid", c.peer.pid).Uint32("uid", c.peer.uid).Logger()
	log.Debug().Msg("control connection")
	// Refused requests are the client's problem, not the operator's: log
	// them, but sampled, so a misbehaving client cannot flood the log.
	rlog := log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
	defer c.reclaim()

	var (
		buf [ctlmsg.MaxRequestBytes + 1]byte
		oob [256]byte
	)
	// Until it has a portal (attached), the connection must not hold a
	// place in the conns pool idly: it is closed OpenDeadline after it
	// connected, or after its last request if it sent only identity and
	// stats requests (rmactl's).
	deadline := c.since.Add(c.s.cfg.OpenDeadline)
	queriesOnly := true
	c.readDeadline(deadline)
	for {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(buf[:], oob[:])
		if err != nil || (n == 0 && oobn == 0) {
			// A zero-length datagram is indistinguishable from EOF here;
			// both end the connection.
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.attached && !c.s.isClosing() {
				log.Debug().Dur("open_deadline", c.s.cfg.OpenDeadline).Bool("queries_only", queriesOnly).
					Msg("closing a control connection that opened no portal in time")
			}
			return
		}
		traceHop(hopRead)
		var resp ctlmsg.Response
		fd := -1
		switch {
		case oobn > 0 || flags&unix.MSG_CTRUNC != 0:
			nfd := closeRights(oob[:oobn])
			resp.Code, resp.Error = ctlmsg.CodeFDs,
				fmt.Sprintf("the engine accepts no ancillary data on requests (got %d bytes, %d file descriptors, now closed)", oobn, nfd)
			rlog.Warn().Str("code", string(resp.Code)).Msg(resp.Error)
		case flags&unix.MSG_TRUNC != 0 || n > ctlmsg.MaxRequestBytes:
			resp.Code, resp.Error = ctlmsg.CodeTooLarge,
				fmt.Sprintf("request longer than %d bytes", ctlmsg.MaxRequestBytes)
		default:
			req, err := ctlmsg.DecodeRequest(buf[:n])
			if err != nil {
				resp.Code, resp.Error = ctlmsg.CodeBadRequest, err.Error()
				rlog.Info().Str("code", string(resp.Code)).Msg(resp.Error)
				break
			}
			resp.ID, resp.Op = req.ID, req.Op
			traceHop(hopDecoded)
			queriesOnly = queriesOnly && (req.Op == ctlmsg.OpIdentity || req.Op == ctlmsg.OpStats)
			var rerr *reqError
			fd, rerr = c.handle(&req, &resp)
			req.Key = ctlmsg.Key{} // the core holds its own copy now
			if rerr != nil {
				resp.Code, resp.Error, resp.Quota = rerr.code, rerr.msg, rerr.quota
				rlog.Info().Str("op", string(req.Op)).Str("code", string(rerr.code)).Msg(rerr.msg)
			}
		}
		// The datagram may hold a region key in hex: keep no copy of it
		// in this buffer.
		clear(buf[:n])
		resp.V = ctlmsg.Version
		if err := c.reply(&resp, fd); err != nil {
			log.Debug().Err(err).Msg("reply failed; closing")
			return
		}
		switch {
		case c.attached && !deadline.IsZero():
			deadline = time.Time{}
			c.readDeadline(deadline)
		case !c.attached && queriesOnly:
			deadline = time.Now().Add(c.s.cfg.OpenDeadline)
			c.readDeadline(deadline)
		}
	}
}

// readDeadline sets the connection's read deadline, unless the server is
// closing (Close has set one in the past, which must stay).
func (c *conn) readDeadline(t time.Time) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if !c.s.closing {
		c.uc.SetReadDeadline(t)
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// closeRights closes every file descriptor in a received control message
// and reports how many there were.
func closeRights(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	n := 0
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
			n++
		}
	}
	return n
}

// reply sends resp, with fd as SCM_RIGHTS when fd >= 0. The engine's copy
// of fd is closed either way: the application's copy (or none) remains.
func (c *conn) reply(resp *ctlmsg.Response, fd int) error {
	b, err := ctlmsg.EncodeResponse(resp)
	if err != nil {
		// Only stats could grow that big; say so instead of going silent.
		b, _ = ctlmsg.EncodeResponse(&ctlmsg.Response{V: ctlmsg.Version, ID: resp.ID, Op: resp.Op,
			Code: ctlmsg.CodeInternal, Error: err.Error()})
		fd = -1
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	traceHop(hopReply)
	_, _, err = c.uc.WriteMsgUnix(b, oob, nil)
	if fd >= 0 {
		unix.Close(fd)
	}
	return err
}

// handle runs one validated request. It returns the fd to pass (or -1).
func (c *conn) handle(req *ctlmsg.Request, resp *ctlmsg.Response) (int, *reqError) {
	switch {
	case req.Op == ctlmsg.OpOpen || req.Op == ctlmsg.OpIdentity || req.Op == ctlmsg.OpStats:
	case !c.open:
		return -1, fail(ctlmsg.CodeState, "%s: no portal open on this connection (send open first)", req.Op)
	case req.Op == ctlmsg.OpAttach:
	case !c.attached:
		return -1, fail(ctlmsg.CodeState, "%s: %s is not attached (map its segment, then send attach)", req.Op, c.who())
	}
	switch req.Op {
	case ctlmsg.OpOpen:
		return c.openPortal(req, resp)
	case ctlmsg.OpAttach:
		return -1, c.attach(resp)
	case ctlmsg.OpAllocSlots:
		return -1, c.allocSlots(req, resp)
	case ctlmsg.OpCreateRegion:
		return c.createRegion(req, resp)
	case ctlmsg.OpRegisterRegion:
		return -1, c.registerRegion(req, resp)
	case ctlmsg.OpDeregisterRegion:
		return -1, c.deregisterRegion(req)
	case ctlmsg.OpRekey:
		return -1, c.rekey(req)
	case ctlmsg.OpDoorbell:
		return c.doorbell()
	case ctlmsg.OpSummary:
		return c.summary(resp)
	case ctlmsg.OpModerate:
		return -1, c.moderate(req)
	case ctlmsg.OpIdentity:
		if rerr := c.identify(req.Op); rerr != nil {
			return -1, rerr
		}
		id := c.identity()
		resp.Identity = &id
		return -1, nil
	case ctlmsg.OpStats:
		st, rerr := c.stats(req.Op)
		resp.Stats = st
		return -1, rerr
	}
	return -1, fail(ctlmsg.CodeInternal, "op %q decoded but not handled", req.Op)
}

// errPortalGone: the core disabled this connection's portal on its own,
// because the application wrote impossible ring indices (the core reclaims
// such a portal at once, keeps its id until ClosePortal, and counts it in
// Stats.RingsCorrupt). Its regions and slots are gone with it.
var errPortalGone = errors.New("the engine closed this portal because its application wrote impossible ring indices; close the connection and open a new portal")

// execPortal runs fn on the core's goroutine if the core still holds this
// connection's portal. The check and fn run in the same closure, so no
// other control-plane call can reuse the portal id in between. The first
// result is fn's error (errPortalGone when the portal is gone); the second
// is Exec's.
func (c *conn) execPortal(fn func(core *engine.Core) error) (error, error) {
	var ferr error
	traceHop(hopExec)
	err := c.s.execs[c.core].Exec(func(core *engine.Core) {
		traceHop(hopRun)
		defer traceHop(hopRan)
		if c.s.cores[c.core].owner[c.portal] != c {
			ferr = errPortalGone
			return
		}
		if ferr = fn(core); errors.Is(ferr, engine.ErrNoPortal) || errors.Is(ferr, engine.ErrPortalDead) {
			ferr = errPortalGone
		}
	})
	traceHop(hopBack)
	return ferr, err
}

func execFail(op ctlmsg.Op, err error) *reqError {
	return fail(ctlmsg.CodeUnavail, "%s: the engine core is not running: %v", op, err)
}

// identify gives the connection its peer process's identity, allocating
// one (within the tenant's rate; used once its block is durable) for a
// process the engine does not know yet.
func (c *conn) identify(op ctlmsg.Op) *reqError {
	if c.ident != 0 {
		return nil
	}
	ids := c.s.ids
	if id, ok := ids.pin(c.peer.ino); ok {
		c.ident = id
		return nil
	}
	if rerr := c.s.takeIdentityToken(op, c.tenant); rerr != nil {
		return rerr
	}
	id, err := ids.acquire(c.peer.ino)
	switch {
	case errors.Is(err, ErrIdentitiesExhausted):
		c.s.sampled.Error().Err(err).Msg("no identity left for a new process")
		return fail(ctlmsg.CodeResource, "%s: %v", op, err)
	case err != nil:
		c.s.sampled.Error().Err(err).Msg("identity not allocated")
		return fail(ctlmsg.CodeInternal, "%s: %v", op, err)
	}
	c.ident = id
	if left := ids.remaining(); left < identLimit/16 && left%1024 == 0 {
		c.s.log.Warn().Uint64("identities_left", left).Msg("the identity space is running out: plan to rotate every region key and reset the identity state")
	}
	c.s.log.Debug().Uint64("conn", c.id).Str("tenant", c.tenant.name).Int32("os_pid", c.peer.pid).
		Uint64("pidfs_ino", c.peer.ino).Uint32("identity", id).Msg("process identity")
	return nil
}

func (c *conn) identity() ctlmsg.Identity {
	return ctlmsg.Identity{Addr: c.s.addr.String(), PID: c.ident, UID: c.peer.uid, GID: c.peer.gid, Name: c.name, Tenant: c.tenant.name}
}

func (c *conn) who() string {
	return fmt.Sprintf("portal %q (identity %d, uid %d, tenant %q)", c.name, c.ident, c.peer.uid, c.tenant.name)
}

func (c *conn) allocSlots(req *ctlmsg.Request, resp *ctlmsg.Response) *reqError {
	n := int(req.N)
	if c.slots+n > c.maxSlots {
		return fail(ctlmsg.CodeSlotCap, "alloc_slots: %s holds %d slots and asks for %d more; its cap is %d (%s)",
			c.who(), c.slots, n, c.maxSlots, c.capFrom)
	}
	if rerr := c.s.charge(req.Op, c.tenant, ctlmsg.TenantUsage{Slots: n}); rerr != nil {
		return rerr
	}
	got := 0 // slots the core gave: the tenant keeps paying for those only
	defer func() { c.s.refund(c.tenant, ctlmsg.TenantUsage{Slots: n - got}) }()
	var slots []uint32
	aerr, err := c.execPortal(func(core *engine.Core) error {
		ids, err := core.AllocSlots(c.portal, n)
		slots = make([]uint32, len(ids))
		for i, s := range ids {
			slots[i] = uint32(s)
		}
		return err
	})
	if err != nil {
		return execFail(req.Op, err)
	}
	switch {
	case aerr == nil:
	case errors.Is(aerr, errPortalGone):
		return fail(ctlmsg.CodeState, "alloc_slots: %s: %v", c.who(), aerr)
	case errors.Is(aerr, engine.ErrSlotCap):
		return fail(ctlmsg.CodeSlotCap, "alloc_slots: %s asks for %d more slots: %v (cap %d, %s)", c.who(), n, aerr, c.maxSlots, c.capFrom)
	case errors.Is(aerr, engine.ErrNoSlots):
		return fail(ctlmsg.CodeNoSlots, "alloc_slots: %s asks for %d slots: %v", c.who(), n, aerr)
	default:
		return fail(ctlmsg.CodeInternal, "alloc_slots: %v", aerr)
	}
	got = len(slots)
	c.s.addSlots(c.core, got)
	c.s.noteChange(c.tenant)
	if len(slots) != n {
		// The core's contract is all or nothing; keep what it gave so
		// the count stays true, and say what happened.
		c.slots += len(slots)
		return fail(ctlmsg.CodeInternal, "alloc_slots: the core gave %d slots, not %d", len(slots), n)
	}
	c.slots += n
	resp.Slots = slots
	return nil
}

// doorbell attaches an eventfd doorbell to the portal and returns a copy
// of it for the application.
func (c *conn) doorbell() (int, *reqError) {
	if c.bell != nil {
		return -1, fail(ctlmsg.CodeState, "doorbell: %s already has a doorbell", c.who())
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fail(ctlmsg.CodeResource, "doorbell: eventfd: %v", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return -1, fail(ctlmsg.CodeResource, "doorbell: dup: %v", err)
	}
	b := &eventBell{fd: fd}
	b.one[0] = 1 // eventfd counters are host-endian: little-endian here
	arm := c.seg.mem[abi.SegmentArmOff : abi.SegmentArmOff+4]
	aerr, err := c.execPortal(func(core *engine.Core) error { return core.SetDoorbell(c.portal, arm, b) })
	if err != nil || aerr != nil {
		unix.Close(fd)
		unix.Close(dup)
		if err != nil {
			return -1, execFail(ctlmsg.OpDoorbell, err)
		}
		if errors.Is(aerr, errPortalGone) {
			return -1, fail(ctlmsg.CodeState, "doorbell: %s: %v", c.who(), aerr)
		}
		return -1, fail(ctlmsg.CodeInternal, "doorbell: %v", aerr)
	}
	c.bell = b
	return dup, nil
}

// moderate sets the moderation of the portal's doorbell (ctlmsg.OpModerate).
func (c *conn) moderate(req *ctlmsg.Request) *reqError {
	if c.bell == nil {
		return fail(ctlmsg.CodeState, "moderate: %s has no doorbell (send doorbell first)", c.who())
	}
	period := time.Duration(req.PeriodUs) * time.Microsecond
	aerr, err := c.execPortal(func(core *engine.Core) error { return core.SetModeration(c.portal, int(req.Count), period) })
	switch {
	case err != nil:
		return execFail(ctlmsg.OpModerate, err)
	case errors.Is(aerr, errPortalGone):
		return fail(ctlmsg.CodeState, "moderate: %s: %v", c.who(), aerr)
	case errors.Is(aerr, engine.ErrModeration):
		return fail(ctlmsg.CodeBadRequest, "moderate: %v", aerr)
	case aerr != nil:
		return fail(ctlmsg.CodeInternal, "moderate: %v", aerr)
	}
	return nil
}

// reclaim returns everything the connection held: regions are
// deregistered and the portal closed on the core first, then the memory is
// unmapped and the tenant refunded; and the connection's hold on its
// process's identity ends.
func (c *conn) reclaim() {
	if c.ident != 0 {
		c.s.ids.release(c.peer.ino)
	}
	if !c.open {
		return
	}
	c.open = false
	log := c.s.log.With().Uint64("conn", c.id).Str("name", c.name).Str("tenant", c.tenant.name).Uint32("identity", c.ident).Logger()
	c.dropPending()
	ids := make([]abi.RegionID, 0, len(c.regions))
	for id := range c.regions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var (
		derrs []error
		cerr  error
		gone  bool
	)
	if c.attached {
		book := c.s.cores[c.core]
		err := c.s.execs[c.core].Exec(func(core *engine.Core) {
			if book.owner[c.portal] != c {
				gone = true // closed by the core itself, and the id reused
				return
			}
			delete(book.owner, c.portal)
			delete(book.ownerName, c.portal)
			for _, id := range ids {
				err := core.DeregisterRegion(c.portal, id)
				if err != nil && !errors.Is(err, engine.ErrNoRegion) && !errors.Is(err, engine.ErrNoPortal) {
					derrs = append(derrs, fmt.Errorf("region %#x: %w", uint32(id), err))
				}
			}
			cerr = core.ClosePortal(c.portal)
			if errors.Is(cerr, engine.ErrNoPortal) {
				gone, cerr = true, nil // closed by the core itself
			}
		})
		if err == nil {
			c.s.noteChange(c.tenant)
		}
		if err == nil && cerr == nil && len(derrs) == 0 {
			c.s.mu.Lock()
			c.s.load[c.core].portals--
			c.s.load[c.core].slots -= c.slots
			c.s.mu.Unlock()
			// Every core of the engine served the regions: each must have
			// let go of them (or, the portal closed by its core, of the
			// regions its core took away) before they are unmapped.
			err = c.s.quiesce(c.s.g.Version())
		}
		if err != nil || cerr != nil || len(derrs) > 0 {
			// The cores did not confirm they let go of the memory: leaking
			// the mappings is safe, unmapping them might not be. The
			// tenant stays charged for what is still mapped.
			log.Error().Err(err).AnErr("close_portal", cerr).Errs("deregister", derrs).
				Int("regions", len(ids)).Uint64("region_bytes", c.regionBytes).
				Msg("portal reclaim not confirmed by the cores; its memory stays mapped")
			return
		}
	}
	// The memory is refunded when it is gone (memwatch.go): now, unless
	// the application still maps it or holds a descriptor of it.
	var uerr error
	for _, id := range ids {
		uerr = errors.Join(uerr, c.regions[id].mem.release())
	}
	uerr = errors.Join(uerr, c.seg.release())
	c.s.refund(c.tenant, ctlmsg.TenantUsage{Slots: c.slots})
	if c.bell != nil { // the core forgot it with the portal
		uerr = errors.Join(uerr, unix.Close(c.bell.fd))
		c.bell = nil
	}
	if uerr != nil {
		log.Error().Err(uerr).Msg("munmap failed during reclaim")
	}
	log.Info().Uint16("portal", uint16(c.portal)).Int("core", c.core).Bool("attached", c.attached).Bool("closed_by_core", gone).Int("slots", c.slots).Int("regions", len(ids)).
		Uint64("region_bytes", c.regionBytes).Msg("portal closed and reclaimed")
	c.regions, c.regionBytes, c.slots, c.seg = nil, 0, 0, nil
}
