package ctl

import (
	"errors"
	"os"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// Opening a portal takes two requests: open creates its segment, which
// the application maps; attach seals it and gives it to the core.

// openPortal applies the socket's policy, charges the tenant a portal and
// its segment, and creates the segment. The core does not see it until
// attach.
func (c *conn) openPortal(req *ctlmsg.Request, resp *ctlmsg.Response) (int, *reqError) {
	if c.open {
		return -1, fail(ctlmsg.CodeState, "open: this connection already holds %s; one portal per connection", c.who())
	}
	if rerr := c.identify(req.Op); rerr != nil {
		return -1, rerr
	}
	g := c.l.cfg.Policy.match(&c.peer)
	if g.MaxSlots == 0 {
		return -1, fail(ctlmsg.CodeSlotCap, "open: %s of socket %s gives uid %d a cap of 0 slots", g.From, c.l.cfg.label(), c.peer.uid)
	}
	// The application gets the class it asks for, if the policy allows
	// it: a rule granting high permits high, it does not impose it.
	// (abi.ClassHigh > abi.ClassLow.)
	class, _ := abi.ParseClass(req.Class) // DecodeRequest has checked it
	c.askCore = -1
	if req.PinCore {
		if int(req.Core) >= len(c.s.execs) {
			return -1, fail(ctlmsg.CodeBadRequest, "open: portal %q asks for core %d; the engine has %d cores", req.Name, req.Core, len(c.s.execs))
		}
		c.askCore = int(req.Core)
	}
	if class > g.Class {
		return -1, fail(ctlmsg.CodeClass, "open: portal %q (identity %d, uid %d) asks for class %s, but %s of socket %s grants it %s",
			req.Name, c.ident, c.peer.uid, class.String(), g.From, c.l.cfg.label(), g)
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
	// The portal counts, with its segment's memory, until the segment is
	// gone (memwatch.go).
	seg, rerr := c.newMem(req.Op, "onerma-portal-"+req.Name, layout.Size, true, ctlmsg.TenantUsage{Portals: 1})
	if rerr != nil {
		return -1, rerr
	}
	fd, err := seg.dupFD()
	if err != nil {
		seg.release() // refunded once gone
		return -1, fail(ctlmsg.CodeResource, "open: dup of the segment's memfd: %v", err)
	}
	c.open, c.name, c.layout, c.class, c.seg = true, req.Name, layout, class, seg
	c.maxSlots, c.capFrom = g.MaxSlots, g.From
	c.regions = make(map[abi.RegionID]*region)
	resp.Open = &ctlmsg.OpenReply{
		Size: layout.Size, MapSize: uint64(len(seg.mem)),
		CmdCap: cmdCap, CplCap: cplCap, Class: class.String(), MaxSlots: g.MaxSlots, Hugetlb: seg.hugetlb,
		Identity: c.identity(),
	}
	c.s.log.Info().Uint64("conn", c.id).Str("name", c.name).Str("tenant", c.tenant.name).Uint32("identity", c.ident).
		Int32("os_pid", c.peer.pid).Uint32("uid", c.peer.uid).Uint32("gid", c.peer.gid).Uint32("cmd_cap", cmdCap).Uint32("cpl_cap", cplCap).
		Str("class", class.String()).Str("max_class", g.Class.String()).Int("max_slots", g.MaxSlots).Str("granted_by", g.From).
		Bool("hugetlb", seg.hugetlb).Msg("portal opened")
	return fd, nil
}

// newMem charges the tenant for a memory object of size bytes (plus
// extra) and creates it: on huge pages when the engine has them, size
// fits them (or anyHuge) and the tenant's hugepage_bytes quota allows,
// else on ordinary pages. The charge lasts until the object is gone, the
// engine's and the application's descriptors and mappings of it
// (memwatch.go): the caller only ever releases it.
func (c *conn) newMem(op ctlmsg.Op, name string, size uint64, anyHuge bool, extra ctlmsg.TenantUsage) (*shm, *reqError) {
	huge := c.s.hugePage
	if huge > 0 && (anyHuge || size%huge == 0) {
		use := extra
		use.MemoryBytes += roundUp(size, huge)
		use.HugepageBytes += roundUp(size, huge)
		if c.s.chargeMem(op, c.tenant, use) == nil {
			m, err := newShm(name, size, huge)
			if err == nil {
				return c.watch(op, m, use)
			}
			c.s.unchargeMem(c.tenant, use) // no huge pages left: ordinary pages below
		}
	}
	use := extra
	use.MemoryBytes += roundUp(size, uint64(os.Getpagesize()))
	if rerr := c.s.chargeMem(op, c.tenant, use); rerr != nil {
		return nil, rerr
	}
	m, err := newShm(name, size, 0)
	if err != nil {
		c.s.unchargeMem(c.tenant, use)
		return nil, fail(ctlmsg.CodeResource, "%s: %v", op, err)
	}
	return c.watch(op, m, use)
}

// watch makes the charge of the memory newMem created last until it is
// gone.
func (c *conn) watch(op ctlmsg.Op, m *shm, use ctlmsg.TenantUsage) (*shm, *reqError) {
	if err := c.s.watchMem(m, c.tenant, use); err != nil {
		m.release()
		c.s.unchargeMem(c.tenant, use)
		c.s.sampled.Error().Err(err).Msg("a memory object cannot be watched: it is not created")
		return nil, fail(ctlmsg.CodeResource, "%s: %v", op, err)
	}
	return m, nil
}

// attach seals and maps the segment the application has mapped, opens the
// portal on the core and writes the segment header.
func (c *conn) attach(resp *ctlmsg.Response) *reqError {
	if c.attached {
		return fail(ctlmsg.CodeState, "attach: %s is attached already", c.who())
	}
	if !c.seg.attached { // else an earlier attach failed in the core: try it again
		if err := c.seg.attach(false); err != nil {
			return fail(ctlmsg.CodeResource, "attach: the segment of %s: %v", c.who(), err)
		}
		c.noteLocked(c.seg)
	}
	seg := c.seg.mem
	// The tenant is active while the connection lasts: its index stays.
	c.s.mu.Lock()
	tenantIdx, epoch, weight := c.tenant.idx, c.tenant.epoch, c.tenant.weight
	c.s.mu.Unlock()
	spec := engine.PortalSpec{
		CmdRing: c.layout.CmdRing(seg), CmdCap: c.layout.CmdCap,
		CplRing: c.layout.CplRing(seg), CplCap: c.layout.CplCap,
		Class: c.class, MaxSlots: c.maxSlots, PID: c.ident,
		Tenant: tenantIdx, Weight: weight, TenantEpoch: epoch,
		SummaryFlag: seg[abi.SegmentSummaryOff : abi.SegmentSummaryOff+4],
	}
	var (
		id   engine.PortalID
		oerr error
	)
	// The core that serves the portal: the one open asked for, or the
	// least loaded.
	k := c.s.pickCore(c.askCore)
	book := c.s.cores[k]
	if err := c.s.execs[k].Exec(func(core *engine.Core) {
		id, oerr = core.OpenPortal(spec)
		if oerr == nil {
			// If another connection still thinks it holds id, the core
			// closed that portal on its own (corrupt rings) and reused
			// the entry: from now on that connection's execPortal sees
			// it is gone.
			book.owner[id] = c
			book.ownerName[id] = c.name
		}
	}); err != nil {
		c.s.unpickCore(k)
		return execFail(ctlmsg.OpAttach, err)
	}
	if oerr != nil {
		c.s.unpickCore(k)
		code := ctlmsg.CodeInternal
		if errors.Is(oerr, engine.ErrPortalsFull) {
			code = ctlmsg.CodeResource
		}
		return fail(code, "attach: %v", oerr)
	}
	c.layout.Portal = uint32(id)
	c.layout.Encode(seg)
	c.portal, c.core, c.attached = id, k, true
	c.s.noteChange(c.tenant)
	resp.Attach = &ctlmsg.AttachReply{Portal: uint32(id), Core: uint32(k)}
	c.s.log.Debug().Uint64("conn", c.id).Str("name", c.name).Uint16("portal", uint16(id)).Int("core", k).Bool("asked", c.askCore >= 0).
		Bool("locked", c.seg.locked).Msg("portal attached")
	return nil
}

// noteLocked warns, once per server, that region memory is not locked.
func (c *conn) noteLocked(m *shm) {
	if !m.locked && !m.hugetlb && c.s.unlocked.CompareAndSwap(false, true) {
		c.s.log.Warn().Msg("shared memory could not be locked (mlock: RLIMIT_MEMLOCK or CAP_IPC_LOCK): under memory pressure with swap, the poll loop may fault on a swapped-out page")
	}
}

// summary returns a copy of the memfd of the summary doorbell of the core
// that serves the portal (ctlmsg.OpSummary).
func (c *conn) summary(resp *ctlmsg.Response) (int, *reqError) {
	if c.s.summaries == nil {
		return -1, fail(ctlmsg.CodeState, "summary: this engine gives no summary doorbell (ctl.no_summary): every portal's ring is read in every poll")
	}
	m := c.s.summaries[c.core]
	fd, err := m.dupFD()
	if err != nil {
		return -1, fail(ctlmsg.CodeResource, "summary: dup of the summary's memfd: %v", err)
	}
	resp.Summary = &ctlmsg.SummaryReply{Size: c.s.summaryBytes, MapSize: uint64(len(m.mem))}
	return fd, nil
}
