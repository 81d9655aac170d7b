package ctl

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// conn is one control connection and the portal it may hold. Only its own
// goroutine touches it (Server.Close only closes uc).
type conn struct {
	s    *Server
	uc   *net.UnixConn
	id   uint64
	cred unix.Ucred

	open     bool
	name     string
	portal   engine.PortalID
	layout   abi.Layout
	seg      *shm
	maxSlots int
	capFrom  string // where maxSlots came from, for error messages
	slots    int    // slots allocated to the portal

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

type region struct {
	mem  *shm
	size uint64
	perm abi.Perm
}

// reqError is a failure reported to the client.
type reqError struct {
	code ctlmsg.Code
	msg  string
}

func (e *reqError) Error() string { return string(e.code) + ": " + e.msg }

func fail(code ctlmsg.Code, format string, args ...any) *reqError {
	return &reqError{code: code, msg: fmt.Sprintf(format, args...)}
}

// refuse answers a connection beyond MaxConns and closes it. It reads the
// client's first request before answering: closing a unix socket with
// unread data would reset the connection and lose the answer.
func refuse(uc *net.UnixConn, why string) {
	defer uc.Close()
	var (
		buf [ctlmsg.MaxRequestBytes + 1]byte
		oob [256]byte
	)
	resp := ctlmsg.Response{V: ctlmsg.Version, Code: ctlmsg.CodeLimit, Error: why}
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
	log := c.s.log.With().Uint64("conn", c.id).Int32("pid", c.cred.Pid).Uint32("uid", c.cred.Uid).Logger()
	log.Debug().Msg("control connection")
	// Refused requests are the client's problem, not the operator's: log
	// them, but sampled, so a misbehaving client cannot flood the log.
	rlog := log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
	defer c.reclaim()

	var (
		buf [ctlmsg.MaxRequestBytes + 1]byte
		oob [256]byte
	)
	for {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(buf[:], oob[:])
		if err != nil || (n == 0 && oobn == 0) {
			// A zero-length datagram is indistinguishable from EOF here;
			// both end the connection.
			return
		}
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
			var rerr *reqError
			fd, rerr = c.handle(&req, &resp)
			req.Key = ctlmsg.Key{} // the core holds its own copy now
			if rerr != nil {
				resp.Code, resp.Error = rerr.code, rerr.msg
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
	}
}

// peerCred reads the peer's credentials as of connect(2): SO_PEERCRED,
// with the PID in the engine's PID namespace.
func peerCred(uc *net.UnixConn) (unix.Ucred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return unix.Ucred{}, err
	}
	var (
		cred *unix.Ucred
		cerr error
	)
	err = rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return unix.Ucred{}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return *cred, nil
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
	_, _, err = c.uc.WriteMsgUnix(b, oob, nil)
	if fd >= 0 {
		unix.Close(fd)
	}
	return err
}

// handle runs one validated request. It returns the fd to pass (or -1).
func (c *conn) handle(req *ctlmsg.Request, resp *ctlmsg.Response) (int, *reqError) {
	if req.Op != ctlmsg.OpOpen && req.Op != ctlmsg.OpIdentity && req.Op != ctlmsg.OpStats && !c.open {
		return -1, fail(ctlmsg.CodeState, "%s: no portal open on this connection (send open first)", req.Op)
	}
	switch req.Op {
	case ctlmsg.OpOpen:
		return c.openPortal(req, resp)
	case ctlmsg.OpAllocSlots:
		return -1, c.allocSlots(req, resp)
	case ctlmsg.OpRegisterRegion:
		return c.registerRegion(req, resp)
	case ctlmsg.OpDeregisterRegion:
		return -1, c.deregisterRegion(req)
	case ctlmsg.OpRekey:
		return -1, c.rekey(req)
	case ctlmsg.OpDoorbell:
		return c.doorbell()
	case ctlmsg.OpIdentity:
		id := c.identity()
		resp.Identity = &id
		return -1, nil
	case ctlmsg.OpStats:
		st, err := c.s.Stats(nil)
		if err != nil {
			return -1, execFail(req.Op, err)
		}
		resp.Stats = st
		return -1, nil
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
	err := c.s.exec.Exec(func(core *engine.Core) {
		if c.s.owner[c.portal] != c {
			ferr = errPortalGone
			return
		}
		if ferr = fn(core); errors.Is(ferr, engine.ErrNoPortal) || errors.Is(ferr, engine.ErrPortalDead) {
			ferr = errPortalGone
		}
	})
	return ferr, err
}

func execFail(op ctlmsg.Op, err error) *reqError {
	return fail(ctlmsg.CodeUnavail, "%s: the engine core is not running: %v", op, err)
}

func (c *conn) identity() ctlmsg.Identity {
	return ctlmsg.Identity{Addr: c.s.addr.String(), PID: uint32(c.cred.Pid), UID: c.cred.Uid, GID: c.cred.Gid, Name: c.name}
}

func (c *conn) who() string {
	return fmt.Sprintf("portal %q (pid %d, uid %d)", c.name, c.cred.Pid, c.cred.Uid)
}

func (c *conn) openPortal(req *ctlmsg.Request, resp *ctlmsg.Response) (int, *reqError) {
	if c.open {
		return -1, fail(ctlmsg.CodeState, "open: this connection already holds %s; one portal per connection", c.who())
	}
	g := c.s.cfg.Slots.Match(c.cred.Uid, req.Name)
	if g.MaxSlots == 0 {
		return -1, fail(ctlmsg.CodeSlotCap, "open: %s gives name %q uid %d a cap of 0 slots", g.From, req.Name, c.cred.Uid)
	}
	// The application gets the class it asks for, if the policy allows
	// it: a rule granting high permits high, it does not impose it.
	// (abi.ClassHigh > abi.ClassLow.)
	class, _ := abi.ParseClass(req.Class) // DecodeRequest has checked it
	if class > g.Class {
		return -1, fail(ctlmsg.CodeClass, "open: portal %q (pid %d, uid %d) asks for class %s, but %s grants it %s",
			req.Name, c.cred.Pid, c.cred.Uid, class.String(), g.From, g)
	}
	cmdCap, cplCap := req.CmdCap, req.CplCap
	if cmdCap == 0 {
		cmdCap = c.s.cfg.CmdCap
	}
	if cplCap == 0 {
		cplCap = c.s.cfg.CplCap
	}
	layout, err := abi.NewLayout(0, cmdCap, cplCap)
	if err != nil {
		return -1, fail(ctlmsg.CodeBadRequest, "open: ring capacities %d/%d: %v", cmdCap, cplCap, err)
	}
	seg, err := newShm("onerma-portal-"+req.Name, layout.Size, c.s.hugePage)
	if err != nil {
		return -1, fail(ctlmsg.CodeResource, "open: creating the %d-byte portal segment: %v", layout.Size, err)
	}
	spec := engine.PortalSpec{
		CmdRing: layout.CmdRing(seg.mem), CmdCap: cmdCap,
		CplRing: layout.CplRing(seg.mem), CplCap: cplCap,
		Class: class, MaxSlots: g.MaxSlots, PID: uint32(c.cred.Pid),
	}
	var (
		id   engine.PortalID
		oerr error
	)
	if err := c.s.exec.Exec(func(core *engine.Core) {
		id, oerr = core.OpenPortal(spec)
		if oerr == nil {
			// If another connection still thinks it holds id, the core
			// closed that portal on its own (corrupt rings) and reused
			// the entry: from now on that connection's execPortal sees
			// it is gone.
			c.s.owner[id] = c
			c.s.ownerName[id] = req.Name
		}
	}); err != nil {
		seg.release() // the core never saw it
		return -1, execFail(req.Op, err)
	}
	if oerr != nil {
		seg.release() // OpenPortal failed: the core keeps no reference
		code := ctlmsg.CodeInternal
		if errors.Is(oerr, engine.ErrPortalsFull) {
			code = ctlmsg.CodeResource
		}
		return -1, fail(code, "open: %v", oerr)
	}
	layout.Portal = uint32(id)
	layout.Encode(seg.mem)

	c.open, c.name, c.portal, c.layout, c.seg = true, req.Name, id, layout, seg
	c.maxSlots, c.capFrom = g.MaxSlots, g.From
	c.regions = make(map[abi.RegionID]*region)
	resp.Open = &ctlmsg.OpenReply{
		Portal: uint32(id), Size: layout.Size, MapSize: uint64(len(seg.mem)),
		CmdCap: cmdCap, CplCap: cplCap, Class: class.String(), MaxSlots: g.MaxSlots, Hugetlb: seg.hugetlb,
		Identity: c.identity(),
	}
	c.s.log.Info().Uint64("conn", c.id).Str("name", c.name).Int32("pid", c.cred.Pid).Uint32("uid", c.cred.Uid).
		Uint32("gid", c.cred.Gid).Uint16("portal", uint16(id)).Uint32("cmd_cap", cmdCap).Uint32("cpl_cap", cplCap).
		Str("class", class.String()).Str("max_class", g.Class.String()).Int("max_slots", g.MaxSlots).Str("granted_by", g.From).
		Bool("hugetlb", seg.hugetlb).Msg("portal opened")
	fd := seg.fd
	seg.fd = -1 // closed by reply once sent
	return fd, nil
}

func (c *conn) allocSlots(req *ctlmsg.Request, resp *ctlmsg.Response) *reqError {
	n := int(req.N)
	if c.slots+n > c.maxSlots {
		return fail(ctlmsg.CodeSlotCap, "alloc_slots: %s holds %d slots and asks for %d more; its cap is %d (%s)",
			c.who(), c.slots, n, c.maxSlots, c.capFrom)
	}
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

func (c *conn) registerRegion(req *ctlmsg.Request, resp *ctlmsg.Response) (int, *reqError) {
	cfg := &c.s.cfg
	switch {
	case req.Size > cfg.MaxRegionBytes:
		return -1, fail(ctlmsg.CodeLimit, "register_region: %d bytes exceeds the engine's region limit of %d bytes", req.Size, cfg.MaxRegionBytes)
	case len(c.regions) >= cfg.MaxRegionsPerPortal:
		return -1, fail(ctlmsg.CodeLimit, "register_region: %s already holds %d regions, the limit per portal", c.who(), len(c.regions))
	case c.regionBytes+req.Size > cfg.MaxPortalBytes:
		return -1, fail(ctlmsg.CodeLimit, "register_region: %s holds %d region bytes; %d more would exceed the limit of %d per portal",
			c.who(), c.regionBytes, req.Size, cfg.MaxPortalBytes)
	}
	// Huge pages only when the size is a whole number of them: no waste,
	// and the region's bounds are the mapping's.
	huge := uint64(0)
	if c.s.hugePage > 0 && req.Size%c.s.hugePage == 0 {
		huge = c.s.hugePage
	}
	m, err := newShm(fmt.Sprintf("onerma-region-%s", c.name), req.Size, huge)
	if err != nil {
		return -1, fail(ctlmsg.CodeResource, "register_region: %v", err)
	}
	var id abi.RegionID
	mem := m.mem[:req.Size:req.Size]
	rerr, err := c.execPortal(func(core *engine.Core) (err error) {
		id, err = core.RegisterRegion(c.portal, mem, req.Perm, aesni.Key(req.Key))
		return err
	})
	if err != nil {
		m.release()
		return -1, execFail(req.Op, err)
	}
	if rerr != nil {
		m.release() // not registered: the core keeps no reference
		code := ctlmsg.CodeInternal
		switch {
		case errors.Is(rerr, errPortalGone):
			code = ctlmsg.CodeState
		case errors.Is(rerr, engine.ErrRegionsFull):
			code = ctlmsg.CodeResource
		case errors.Is(rerr, engine.ErrRegionSize):
			code = ctlmsg.CodeBadRequest
		}
		return -1, fail(code, "register_region: %v", rerr)
	}
	c.regions[id] = &region{mem: m, size: req.Size, perm: req.Perm}
	c.regionBytes += req.Size
	resp.Region = &ctlmsg.RegionReply{Region: uint32(id), Size: req.Size, MapSize: uint64(len(m.mem)), Perm: req.Perm, Hugetlb: m.hugetlb}
	fd := m.fd
	m.fd = -1 // closed by reply once sent
	return fd, nil
}

func (c *conn) deregisterRegion(req *ctlmsg.Request) *reqError {
	id := abi.RegionID(req.Region)
	r, ok := c.regions[id]
	if !ok {
		// Whether it exists for another portal is none of this one's business.
		return fail(ctlmsg.CodeNoRegion, "deregister_region: region %#x is not registered by %s", req.Region, c.who())
	}
	derr, err := c.execPortal(func(core *engine.Core) error { return core.DeregisterRegion(c.portal, id) })
	if err != nil {
		return execFail(req.Op, err)
	}
	if derr != nil && !errors.Is(derr, engine.ErrNoRegion) && !errors.Is(derr, errPortalGone) {
		// The core may still reference the memory: keep it mapped.
		return fail(ctlmsg.CodeInternal, "deregister_region %#x: %v", req.Region, derr)
	}
	delete(c.regions, id)
	c.regionBytes -= r.size
	if err := r.mem.release(); err != nil {
		return fail(ctlmsg.CodeInternal, "deregister_region %#x: munmap: %v", req.Region, err)
	}
	switch {
	case errors.Is(derr, errPortalGone):
		return fail(ctlmsg.CodeState, "deregister_region %#x: %v", req.Region, derr)
	case derr != nil:
		return fail(ctlmsg.CodeInternal, "deregister_region %#x: the core had already dropped it: %v", req.Region, derr)
	}
	return nil
}

// rekey installs a new K_r for one of this portal's regions, on the
// core's goroutine. Neither the key nor anything derived from it is
// logged or put in an error.
func (c *conn) rekey(req *ctlmsg.Request) *reqError {
	id := abi.RegionID(req.Region)
	if _, ok := c.regions[id]; !ok {
		// Whether it exists for another portal is none of this one's business.
		return fail(ctlmsg.CodeNoRegion, "rekey: region %#x is not registered by %s", req.Region, c.who())
	}
	kr := aesni.Key(req.Key)
	rerr, err := c.execPortal(func(core *engine.Core) error { return core.Rekey(c.portal, id, kr) })
	kr = aesni.Key{}
	if err != nil {
		return execFail(req.Op, err)
	}
	switch {
	case rerr == nil:
		c.s.log.Debug().Uint64("conn", c.id).Str("name", c.name).Uint32("region", req.Region).Msg("region rekeyed")
		return nil
	case errors.Is(rerr, errPortalGone):
		return fail(ctlmsg.CodeState, "rekey %#x: %v", req.Region, rerr)
	case errors.Is(rerr, engine.ErrNoRegion), errors.Is(rerr, engine.ErrNotOwner):
		return fail(ctlmsg.CodeNoRegion, "rekey %#x: the core no longer holds it for %s", req.Region, c.who())
	}
	return fail(ctlmsg.CodeInternal, "rekey %#x: %v", req.Region, rerr)
}

// reclaim returns everything the portal held: regions are deregistered and
// the portal closed on the core first, then the memory is unmapped.
func (c *conn) reclaim() {
	if !c.open {
		return
	}
	c.open = false
	log := c.s.log.With().Uint64("conn", c.id).Str("name", c.name).Int32("pid", c.cred.Pid).Logger()
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
	err := c.s.exec.Exec(func(core *engine.Core) {
		if c.s.owner[c.portal] != c {
			gone = true // closed by the core itself, and the id reused
			return
		}
		delete(c.s.owner, c.portal)
		delete(c.s.ownerName, c.portal)
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
	if err != nil || cerr != nil || len(derrs) > 0 {
		// The core did not confirm it let go of the memory: leaking the
		// mappings is safe, unmapping them might not be.
		log.Error().Err(err).AnErr("close_portal", cerr).Errs("deregister", derrs).
			Int("regions", len(ids)).Uint64("region_bytes", c.regionBytes).
			Msg("portal reclaim not confirmed by the core; its memory stays mapped")
		return
	}
	var uerr error
	for _, id := range ids {
		uerr = errors.Join(uerr, c.regions[id].mem.release())
	}
	uerr = errors.Join(uerr, c.seg.release())
	if c.bell != nil { // the core forgot it with the portal
		uerr = errors.Join(uerr, unix.Close(c.bell.fd))
		c.bell = nil
	}
	if uerr != nil {
		log.Error().Err(uerr).Msg("munmap failed during reclaim")
	}
	log.Info().Uint16("portal", uint16(c.portal)).Bool("closed_by_core", gone).Int("slots", c.slots).Int("regions", len(ids)).
		Uint64("region_bytes", c.regionBytes).Msg("portal closed and reclaimed")
	c.regions, c.regionBytes, c.slots, c.seg = nil, 0, 0, nil
}
