package ctl

import (
	"errors"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// A region's memory is created (create_region) and registered
// (register_region) in two requests, so that the engine seals it against
// hole punching only after the application has mapped it writable (a
// sealed memfd takes no new writable mapping), and maps it for the core
// only once sealed. See shm.

// A region's memory costs its tenant one regions unit and its bytes from
// create_region until the memory is gone (memwatch.go): the engine
// releases it when it is deregistered or dropped unregistered, and the
// tenant is refunded once the application has let go of it too.

// region is a registered region.
type region struct {
	mem  *shm
	size uint64
	perm abi.Perm
}

// pendingMem is memory created and not yet registered: charged to the
// tenant, unknown to the core.
type pendingMem struct {
	handle uint32
	mem    *shm
	size   uint64
}

// dropPending releases memory created and never registered.
func (c *conn) dropPending() {
	if p := c.pending; p != nil {
		p.mem.release() // the core never saw it
		c.pending = nil
	}
}

// createRegion charges the tenant and creates the memory of a region; the
// application maps it, faults it in and registers it. A previous memory
// still unregistered is discarded: a connection has at most one.
func (c *conn) createRegion(req *ctlmsg.Request, resp *ctlmsg.Response) (int, *reqError) {
	cfg := &c.s.cfg
	switch {
	case req.Size > cfg.MaxRegionBytes:
		return -1, fail(ctlmsg.CodeLimit, "create_region: %d bytes exceeds the engine's region limit of %d bytes", req.Size, cfg.MaxRegionBytes)
	case len(c.regions) >= cfg.MaxRegionsPerPortal:
		return -1, fail(ctlmsg.CodeLimit, "create_region: %s already holds %d regions, the limit per portal", c.who(), len(c.regions))
	case c.regionBytes+req.Size > cfg.MaxPortalBytes:
		return -1, fail(ctlmsg.CodeLimit, "create_region: %s holds %d region bytes; %d more would exceed the limit of %d per portal",
			c.who(), c.regionBytes, req.Size, cfg.MaxPortalBytes)
	}
	c.dropPending()
	// Huge pages only when the size is a whole number of them: no waste,
	// and the region's bounds are the mapping's.
	m, rerr := c.newMem(req.Op, "onerma-region-"+c.name, req.Size, false, ctlmsg.TenantUsage{Regions: 1})
	if rerr != nil {
		return -1, rerr
	}
	fd, err := m.dupFD()
	if err != nil {
		m.release()
		return -1, fail(ctlmsg.CodeResource, "create_region: dup of the memfd: %v", err)
	}
	c.nextMem++
	if c.nextMem == 0 {
		c.nextMem = 1
	}
	c.pending = &pendingMem{handle: c.nextMem, mem: m, size: req.Size}
	resp.Memory = &ctlmsg.MemoryReply{Memory: c.nextMem, Size: req.Size, MapSize: uint64(len(m.mem)), Hugetlb: m.hugetlb}
	return fd, nil
}

// registerRegion seals the pending memory, checks the application faulted
// it in, maps and locks it, and registers it with the core under K_r.
func (c *conn) registerRegion(req *ctlmsg.Request, resp *ctlmsg.Response) *reqError {
	p := c.pending
	if p == nil || p.handle != req.Memory {
		return fail(ctlmsg.CodeState, "register_region: memory %d is not the memory %s created last and has not registered (send create_region first)", req.Memory, c.who())
	}
	c.pending = nil
	m := p.mem
	if err := m.attach(true); err != nil {
		m.release()
		if errors.Is(err, errNotResident) {
			return fail(ctlmsg.CodeBadRequest, "register_region: memory %d of %s: %v: map the memory and fault every page in before registering it (the application is charged for its regions' memory)", req.Memory, c.who(), err)
		}
		return fail(ctlmsg.CodeResource, "register_region: memory %d: %v", req.Memory, err)
	}
	c.noteLocked(m)
	var id abi.RegionID
	mem := m.mem[:p.size:p.size]
	rerr, err := c.execPortal(func(core *engine.Core) (err error) {
		if req.Layout.BucketBytes != 0 { // a region for LOOKUPs (ctlmsg checked the layout against perm)
			id, err = core.RegisterLookupRegion(c.portal, mem, req.Perm, aesni.Key(req.Key), req.Layout)
			return err
		}
		id, err = core.RegisterRegion(c.portal, mem, req.Perm, aesni.Key(req.Key))
		return err
	})
	if err != nil || rerr != nil {
		m.release() // not registered: the core keeps no reference
	}
	if err != nil {
		return execFail(req.Op, err)
	}
	if rerr != nil {
		code := ctlmsg.CodeInternal
		switch {
		case errors.Is(rerr, errPortalGone):
			code = ctlmsg.CodeState
		case errors.Is(rerr, engine.ErrRegionsFull):
			code = ctlmsg.CodeResource
		case errors.Is(rerr, engine.ErrRegionSize), errors.Is(rerr, engine.ErrLayout), errors.Is(rerr, engine.ErrLinkedRegion):
			code = ctlmsg.CodeBadRequest
		}
		return fail(code, "register_region: %v", rerr)
	}
	c.regions[id] = &region{mem: m, size: p.size, perm: req.Perm}
	c.regionBytes += p.size
	c.s.noteChange(c.tenant)
	resp.Region = &ctlmsg.RegionReply{Region: uint32(id), Size: p.size, MapSize: uint64(len(m.mem)), Perm: req.Perm, Hugetlb: m.hugetlb}
	return nil
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
	c.s.noteChange(c.tenant)
	// Every core served the region: each must pass a quiescent point
	// before its memory goes.
	if err := c.s.quiesce(c.s.g.Version()); err != nil {
		return fail(ctlmsg.CodeUnavail, "deregister_region %#x: the engine's cores did not confirm they let go of its memory, which stays mapped: %v", req.Region, err)
	}
	delete(c.regions, id)
	c.regionBytes -= r.size
	uerr := r.mem.release() // refunded once the application lets go of it too
	if uerr != nil {
		return fail(ctlmsg.CodeInternal, "deregister_region %#x: munmap: %v", req.Region, uerr)
	}
	switch {
	case errors.Is(derr, errPortalGone):
		return fail(ctlmsg.CodeState, "deregister_region %#x: %v", req.Region, derr)
	case derr != nil:
		// The core took the region away itself: with the portal, when it
		// closed it (impossible ring indices).
		return fail(ctlmsg.CodeNoRegion, "deregister_region %#x: the core had already dropped it (%v): %v", req.Region, derr, errPortalGone)
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
