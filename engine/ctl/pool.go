package ctl

import (
	"fmt"

	"github.com/onerma/onerma/ctlmsg"
)

// Pools. Every finite thing the control plane hands out (paper §2.1, §4:
// explicitly finite resources, allocated by software) is a pool
// partitioned by tenant: each tenant has a guarantee (its minimum) and a
// limit (its quota) of it, and the same admission rule holds for every
// pool, so that a tenant that holds nothing can always connect, open a
// portal and register a region however much the others hold.
//
// The rule. Tenant t, holding u_t of a pool of total T, asks for d more:
//
//   - refused if u_t + d > max_t (its quota);
//   - admitted if u_t + d ≤ min_t (within its guarantee: by construction
//     it always fits, see below);
//   - else admitted only if, afterwards, what is free still covers the
//     unmet guarantees of every other active tenant,
//     Σ_{active s ≠ t} (min_s − u_s)⁺, and the guarantees of K tenants
//     that are not active yet (K × the largest guarantee of any socket;
//     K is Config.ReserveTenants).
//
// A tenant becomes active when it connects: it is admitted only while
// its guarantee fits in what is free beside the unmet guarantees of the
// active tenants, in every pool; from then on its unmet guarantee is kept
// free for it. It stops being active when it holds nothing.
//
// Invariant: free ≥ Σ_{active s} (min_s − u_s)⁺. Activation keeps it (it
// checks exactly that), a charge within a guarantee keeps it (free and
// the sum shrink alike), a charge beyond one keeps it (it leaves the
// others' sum and more free, and the tenant's own term is 0), and a
// refund only grows free by at least what it adds to the sum. So a
// charge within a guarantee always fits; pool.take crashes if it does
// not (a broken invariant is a bug). And since the newcomers' reserve is
// only ever consumed by activations, any K tenants that arrive together
// are admitted, each with its guarantee held for it.

// poolID names a pool of the control plane.
type poolID int

const (
	poolConns     poolID = iota // control connections (Config.MaxConns)
	poolPortals                 // portals: the cores' portal tables
	poolSlots                   // command slots: the cores' slot tables
	poolRegions                 // region memory objects: the engine's region table
	poolMemory                  // bytes of shared memory: the host's memory left to tenants
	poolHugepages               // of which bytes on huge pages: the free huge pages at start
	numPools
)

// poolNames are the pools' names: ctlmsg's quota names, config keys,
// metric labels.
var poolNames = [numPools]string{
	poolConns:     ctlmsg.QuotaConns,
	poolPortals:   ctlmsg.QuotaPortals,
	poolSlots:     ctlmsg.QuotaSlots,
	poolRegions:   ctlmsg.QuotaRegions,
	poolMemory:    ctlmsg.QuotaMemoryBytes,
	poolHugepages: ctlmsg.QuotaHugepageBytes,
}

// poolNouns name a count of each counted pool's units in messages.
var poolNouns = [numPools]string{
	poolConns:   "control connections",
	poolPortals: "portals",
	poolSlots:   "slots",
	poolRegions: "regions",
}

func (p poolID) String() string { return poolNames[p] }

// bytes reports a pool counted in bytes.
func (p poolID) bytes() bool { return p == poolMemory || p == poolHugepages }

// amount renders n units of the pool: a byte count, or a bare number.
func (p poolID) amount(n uint64) string {
	if p.bytes() {
		return fmtBytes(n)
	}
	return fmt.Sprint(n)
}

// held renders a holding of n units: a byte count, or a number and its
// noun ("14 regions").
func (p poolID) held(n uint64) string {
	if p.bytes() {
		return fmtBytes(n)
	}
	return fmt.Sprintf("%d %s", n, poolNouns[p])
}

// share is one tenant's part of one pool.
type share struct {
	held     uint64
	min, max uint64 // guarantee and quota
	active   bool   // its unmet guarantee is held free (pool.unmet)
}

// unmet is what the tenant's guarantee still keeps free for it.
func (sh *share) unmet() uint64 {
	if sh.held < sh.min {
		return sh.min - sh.held
	}
	return 0
}

// pool is one finite resource partitioned by tenant: its books, against
// which pool.admit applies the rule above. The server's mu guards it.
type pool struct {
	id    poolID
	total uint64
	// newcomers is K (Config.ReserveTenants) and newcomerMin the largest
	// guarantee a tenant not yet active may have: K × newcomerMin is
	// kept free beyond the active tenants' unmet guarantees.
	newcomers   uint64
	newcomerMin uint64
	used        uint64 // Σ held over every tenant
	unmet       uint64 // Σ (min − held)⁺ over the active tenants
}

func (p *pool) free() uint64 { return p.total - p.used }

// reserve is what the pool keeps free for tenants to come.
func (p *pool) reserve() uint64 { return p.newcomers * p.newcomerMin }

// Reasons a pool refuses.
const (
	refusedQuota    = iota // beyond the tenant's quota
	refusedReserve         // beyond its guarantee, into what is kept for the others' guarantees
	refusedNewcomer        // a new tenant whose guarantee does not fit
	refusedTenants         // a new tenant while the engine serves all the tenants it can (max)
)

// refusal says why a pool refused a tenant: what it held, what it asked
// for, and the limit it met.
type refusal struct {
	pool   poolID
	reason int
	held   uint64 // what the tenant held
	more   uint64 // what it asked for
	max    uint64 // its quota
	min    uint64 // its guarantee
	free   uint64 // free in the pool
	kept   uint64 // of which kept for the guarantees of other tenants (and tenants to come)
}

// admit applies the rule to a request for d more by the tenant whose
// share of p is sh (active: every charge comes from a connected tenant).
// nil: admitted; take it with take, under the same lock.
func (p *pool) admit(sh *share, d uint64) *refusal {
	if d == 0 {
		return nil
	}
	if sh.held+d > sh.max || sh.held+d < sh.held {
		return &refusal{pool: p.id, reason: refusedQuota, held: sh.held, more: d, max: sh.max, min: sh.min}
	}
	if sh.held+d <= sh.min {
		return nil // within its guarantee: free ≥ unmet ≥ sh.unmet() ≥ d
	}
	keep := p.unmet - sh.unmet() + p.reserve()
	if free := p.free(); free < d || free-d < keep {
		return &refusal{pool: p.id, reason: refusedReserve, held: sh.held, more: d, max: sh.max, min: sh.min, free: free, kept: keep}
	}
	return nil
}

// take charges d to sh. The charge must have been admitted.
func (p *pool) take(sh *share, d uint64) {
	if d > p.free() {
		panic(fmt.Sprintf("ctl: pool %s: %d taken with %d free (used %d of %d, unmet guarantees %d): the admission invariant broke",
			p.id, d, p.free(), p.used, p.total, p.unmet))
	}
	if sh.active {
		p.unmet -= min(d, sh.unmet())
	}
	sh.held += d
	p.used += d
}

// give refunds d from sh.
func (p *pool) give(sh *share, d uint64) {
	if d > sh.held {
		panic(fmt.Sprintf("ctl: pool %s: %d refunded to a tenant holding %d", p.id, d, sh.held))
	}
	before := sh.unmet()
	sh.held -= d
	p.used -= d
	if sh.active {
		p.unmet += sh.unmet() - before
	}
}

// activate makes sh's tenant active in p: its unmet guarantee is held
// free from now on, if it fits in what is free beside the other active
// tenants' (nil), else the refusal.
func (p *pool) activate(sh *share) *refusal {
	if sh.active {
		return nil
	}
	if free := p.free(); free < p.unmet || free-p.unmet < sh.unmet() {
		return &refusal{pool: p.id, reason: refusedNewcomer, held: sh.held, min: sh.min, max: sh.max, free: free, kept: p.unmet}
	}
	sh.active = true
	p.unmet += sh.unmet()
	return nil
}

// deactivate stops holding sh's unmet guarantee free.
func (p *pool) deactivate(sh *share) {
	if !sh.active {
		return
	}
	p.unmet -= sh.unmet()
	sh.active = false
}

// check verifies the pool's invariant (tests, and Server.Audit).
func (p *pool) check() error {
	if p.used > p.total || p.free() < p.unmet {
		return fmt.Errorf("pool %s: used %d of %d, unmet guarantees %d: free no longer covers them", p.id, p.used, p.total, p.unmet)
	}
	return nil
}

// text is the refusal's message, for tenant name of socket sock and the
// request op.
func (r *refusal) text(op, name, sock string) string {
	id := r.pool
	switch r.reason {
	case refusedQuota:
		return fmt.Sprintf("%s: tenant %q holds %s; %s more would exceed its %s quota of %s (socket %s)",
			op, name, id.held(r.held), id.amount(r.more), id, id.amount(r.max), sock)
	case refusedReserve:
		return fmt.Sprintf("%s: tenant %q holds %s; %s more is beyond its %s guarantee of %s, and the engine keeps %s free for the guarantees of other tenants (%s free) (socket %s)",
			op, name, id.held(r.held), id.amount(r.more), id, id.amount(r.min), id.amount(r.kept), id.amount(r.free), sock)
	case refusedTenants:
		return fmt.Sprintf("%s: tenant %q is new, and the engine serves its maximum of %d tenants at once (engine.tenants); one must leave first (socket %s)",
			op, name, r.max, sock)
	case refusedNewcomer:
		return fmt.Sprintf("%s: tenant %q is new, and its %s guarantee of %s does not fit: %s free, of which the engine keeps %s for the guarantees of the tenants it serves (socket %s)",
			op, name, id, id.amount(r.min), id.amount(r.free), id.amount(r.kept), sock)
	}
	return fmt.Sprintf("%s: %s", op, id)
}
