package ctl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/onerma/onerma/ctlmsg"
)

// Amount is a quota's value: a count, or a percentage of what it limits
// (the host memory left to tenants, the engine's huge pages, its portals
// or slots; see Resources). In JSON a number is a count and a string
// "N%" a percentage.
type Amount struct {
	N       uint64
	Percent uint8 // 1..100; 0: N is the value
}

// Pct is the Amount p percent.
func Pct(p uint8) *Amount { return &Amount{Percent: p} }

// Count is the Amount n.
func Count(n uint64) *Amount { return &Amount{N: n} }

// Of resolves a against the total it is a share of.
func (a Amount) Of(total uint64) uint64 {
	if a.Percent == 0 {
		return a.N
	}
	p := uint64(a.Percent)
	return total/100*p + total%100*p/100 // total*p/100 without overflow
}

func (a Amount) String() string {
	if a.Percent != 0 {
		return fmt.Sprintf("%d%%", a.Percent)
	}
	return strconv.FormatUint(a.N, 10)
}

// MarshalJSON writes a count as a number, a percentage as "N%".
func (a Amount) MarshalJSON() ([]byte, error) {
	if a.Percent != 0 {
		return json.Marshal(a.String())
	}
	return []byte(strconv.FormatUint(a.N, 10)), nil
}

// UnmarshalJSON reads a number (a count) or a string "N%", N in 1..100.
func (a *Amount) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		n, err := strconv.ParseUint(string(b), 10, 64)
		if err != nil {
			return fmt.Errorf("quota %s: want a count or a percentage like \"25%%\"", b)
		}
		*a = Amount{N: n}
		return nil
	}
	v, ok := strings.CutSuffix(s, "%")
	p, err := strconv.ParseUint(v, 10, 8)
	if !ok || err != nil || p < 1 || p > 100 {
		return fmt.Errorf("quota %q: want a count or a percentage 1%%..100%%", s)
	}
	*a = Amount{Percent: uint8(p)}
	return nil
}

// Quota is, pool by pool, what one tenant may hold at once (Config.Quota:
// its maxima) or is given however much the others hold
// (Config.Guarantee: its minima). A nil field takes the value of the
// quota under it (Over): a socket's over the engine's default.
type Quota struct {
	// Conns bounds the control connections open at once (of
	// Resources.Conns, Config.MaxConns).
	Conns *Amount `json:"conns,omitempty"`
	// Portals bounds the portals open at once (of Resources.Portals). A
	// portal counts until its segment is gone from the application too.
	Portals *Amount `json:"portals,omitempty"`
	// Slots bounds the command slots held at once, over all the tenant's
	// portals (of Resources.Slots).
	Slots *Amount `json:"slots,omitempty"`
	// Regions bounds the region memory objects held at once (of
	// Resources.Regions): registered, created and not yet registered, or
	// deregistered but still mapped or open in the application.
	Regions *Amount `json:"regions,omitempty"`
	// MemoryBytes bounds the tenant's shared memory: its regions
	// (registered or only created) and portal segments, each as mapped
	// (rounded up to its page), from creation until the last descriptor
	// and mapping of it are gone. A percentage is of
	// Resources.MemoryBytes.
	MemoryBytes *Amount `json:"memory_bytes,omitempty"`
	// HugepageBytes bounds the part of it on huge pages (of
	// Resources.HugepageBytes). Beyond it, memory comes from ordinary
	// pages (within MemoryBytes) rather than being refused.
	HugepageBytes *Amount `json:"hugepage_bytes,omitempty"`
}

// DefaultQuota protects the host and the other tenants: 64 control
// connections, half of the engine's portals, slots and region table, a
// quarter of the memory left to tenants, half of the engine's huge pages.
// Root gets no exemption.
func DefaultQuota() Quota {
	return Quota{Conns: Count(64), Portals: Pct(50), Slots: Pct(50), Regions: Pct(50),
		MemoryBytes: Pct(25), HugepageBytes: Pct(50)}
}

// DefaultGuarantee is what every tenant is given whatever the others
// hold: enough to connect, open a portal or two, post and register a
// few regions. With the default Config.ReserveTenants (8) it fits an
// engine's default tables eight times over.
func DefaultGuarantee() Quota {
	return Quota{Conns: Count(4), Portals: Count(2), Slots: Count(64), Regions: Count(16),
		MemoryBytes: Count(64 << 20), HugepageBytes: Count(8 << 20)}
}

// field returns q's Amount of pool p.
func (q *Quota) field(p poolID) **Amount {
	switch p {
	case poolConns:
		return &q.Conns
	case poolPortals:
		return &q.Portals
	case poolSlots:
		return &q.Slots
	case poolRegions:
		return &q.Regions
	case poolMemory:
		return &q.MemoryBytes
	case poolHugepages:
		return &q.HugepageBytes
	}
	panic(fmt.Sprintf("ctl: pool %d", p))
}

// Over returns q with every field it leaves nil taken from base.
func (q Quota) Over(base Quota) Quota {
	for p := range numPools {
		if f := q.field(p); *f == nil {
			*f = *base.field(p)
		}
	}
	return q
}

// complete reports whether every field is set.
func (q Quota) complete() bool {
	for p := range numPools {
		if *q.field(p) == nil {
			return false
		}
	}
	return true
}

// countLimits bound a count of each pool that is not in bytes.
var countLimits = [numPools]uint64{poolConns: 1 << 20, poolPortals: 1 << 16, poolSlots: 1 << 31, poolRegions: 1 << 16}

// Validate checks the quota's counts fit what they count.
func (q Quota) Validate() error {
	for p := range numPools {
		a := *q.field(p)
		if lim := countLimits[p]; lim > 0 && a != nil && a.Percent == 0 && a.N > lim {
			return fmt.Errorf("%s = %d, want at most %d", p, a.N, lim)
		}
	}
	return nil
}

// Resources are the totals of the pools, which percentages of a quota
// are of. The server measures them when it starts, after the engine has
// taken what it needs itself (DPDK's memory and huge pages, the core's
// tables): tenants share what is left.
type Resources struct {
	// MemoryBytes: the host's memory (MemTotal) less the engine's own
	// resident memory at start.
	MemoryBytes uint64
	// HugepageBytes: free huge pages of the engine's huge page size at
	// start (0 without huge pages, or with Config.Hugetlb off).
	HugepageBytes uint64
	Portals       int // the engine cores' portal tables
	Slots         int // the engine cores' command slots
	Regions       int // the engine's region table
	Conns         int // Config.MaxConns
}

// total is r's total of pool p.
func (r Resources) total(p poolID) uint64 {
	switch p {
	case poolConns:
		return uint64(r.Conns)
	case poolPortals:
		return uint64(r.Portals)
	case poolSlots:
		return uint64(r.Slots)
	case poolRegions:
		return uint64(r.Regions)
	case poolMemory:
		return r.MemoryBytes
	}
	return r.HugepageBytes
}

// amounts are one number per pool.
type amounts [numPools]uint64

// Resolve turns q (every field set) into amounts of these resources,
// counts capped at the pool's total.
func (q Quota) Resolve(r Resources) ctlmsg.TenantUsage {
	return q.resolve(r).usage()
}

func (q Quota) resolve(r Resources) amounts {
	var a amounts
	for p := range numPools {
		a[p] = (*q.field(p)).Of(r.total(p))
		if !p.bytes() {
			a[p] = min(a[p], r.total(p))
		}
	}
	return a
}

// usage is a in the stats' form.
func (a amounts) usage() ctlmsg.TenantUsage {
	return ctlmsg.TenantUsage{
		Conns: int(a[poolConns]), Portals: int(a[poolPortals]), Slots: int(a[poolSlots]), Regions: int(a[poolRegions]),
		MemoryBytes: a[poolMemory], HugepageBytes: a[poolHugepages],
	}
}

// amountsOf is u in pool order.
func amountsOf(u ctlmsg.TenantUsage) amounts {
	return amounts{
		poolConns: uint64(u.Conns), poolPortals: uint64(u.Portals), poolSlots: uint64(u.Slots), poolRegions: uint64(u.Regions),
		poolMemory: u.MemoryBytes, poolHugepages: u.HugepageBytes,
	}
}

// measureResources reads /proc for the memory totals; hugePage is the
// huge page size the server uses (0: none).
func measureResources(hugePage uint64) (Resources, error) {
	var r Resources
	total, err := procKB("/proc/meminfo", "MemTotal:")
	if err != nil {
		return r, err
	}
	rss, err := procKB("/proc/self/status", "VmRSS:")
	if err != nil {
		return r, err
	}
	if total > rss {
		r.MemoryBytes = total - rss
	}
	if hugePage > 0 { // the default huge page size (hugePageSize), which HugePages_Free counts
		free, err := procCount("/proc/meminfo", "HugePages_Free:")
		if err != nil {
			return r, err
		}
		r.HugepageBytes = free * hugePage
	}
	return r, nil
}

// procKB reads a "Key: N kB" line of a /proc file, in bytes.
func procKB(path, key string) (uint64, error) {
	f, err := procField(path, key)
	if err != nil {
		return 0, err
	}
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("ctl: %s: %s %q is not in kB", path, key, f)
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ctl: %s: %s: %w", path, key, err)
	}
	return v << 10, nil
}

// procCount reads a "Key: N" line of a /proc file.
func procCount(path, key string) (uint64, error) {
	f, err := procField(path, key)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ctl: %s: %s: %w", path, key, err)
	}
	return v, nil
}

func procField(path, key string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ctl: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			if fs := strings.Fields(v); len(fs) > 0 {
				return fs, nil
			}
		}
	}
	return nil, fmt.Errorf("ctl: %s has no %s line", path, key)
}

// fmtBytes renders a byte count for messages: exact, and in MiB or GiB.
func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// refusalError is a pool's refusal as the client reads it: CodeQuota,
// naming the pool.
func refusalError(op string, t *tenant, r *refusal) *reqError {
	e := &reqError{code: ctlmsg.CodeQuota, msg: r.text(op, t.name, t.l.cfg.label()), quota: r.pool.String()}
	return e
}

// chargeLocked charges a to t if every pool admits it (pool.admit), else
// changes nothing and returns the first pool's refusal. t must be
// active. Call with s.mu held.
func (s *Server) chargeLocked(t *tenant, a amounts) *refusal {
	if !t.active {
		panic(fmt.Sprintf("ctl: tenant %q charged while not active", t.name))
	}
	for p := range numPools {
		if r := s.pools[p].admit(&t.shares[p], a[p]); r != nil {
			return r
		}
	}
	for p := range numPools {
		s.pools[p].take(&t.shares[p], a[p])
	}
	return nil
}

// refundLocked gives a back from t; a tenant left holding nothing stops
// being active. Call with s.mu held.
func (s *Server) refundLocked(t *tenant, a amounts) {
	for p := range numPools {
		if a[p] > t.shares[p].held {
			panic(fmt.Sprintf("ctl: tenant %q refunded %v while holding %v", t.name, a, t.held()))
		}
	}
	for p := range numPools {
		s.pools[p].give(&t.shares[p], a[p])
	}
	if t.idle() && t.active {
		for p := range numPools {
			s.pools[p].deactivate(&t.shares[p])
		}
		t.active = false
		// Its portals are closed (it holds none): no core serves it
		// under this index any more.
		s.tenantIdx = append(s.tenantIdx, t.idx)
		t.idx = -1
	}
	s.dropIfIdle(t)
}

// activateLocked makes t active, its guarantees and quotas its socket's,
// if every pool has room for its guarantee beside the active tenants'
// (else the first refusal; huge pages: it is guaranteed what is left).
// Call with s.mu held.
func (s *Server) activateLocked(t *tenant) *refusal {
	if t.active {
		return nil
	}
	for p := range numPools {
		sh := &t.shares[p]
		sh.min, sh.max = t.l.min[p], t.l.max[p]
		free, unmet := s.pools[p].free(), s.pools[p].unmet
		room := free - min(free, unmet)
		if p == poolHugepages {
			// Huge pages are the one pool a tenant is not refused: beyond
			// its share its memory comes from ordinary pages. So a newcomer
			// is not refused for want of them either: it is guaranteed what
			// is left of them.
			sh.min = min(sh.min, room)
		}
		if room < sh.unmet() {
			return &refusal{pool: p, reason: refusedNewcomer, held: sh.held, min: sh.min, max: sh.max, free: free, kept: unmet}
		}
	}
	if len(s.tenantIdx) == 0 {
		return &refusal{pool: poolConns, reason: refusedTenants, max: uint64(s.engineTenants)}
	}
	for p := range numPools {
		if r := s.pools[p].activate(&t.shares[p]); r != nil {
			panic(fmt.Sprintf("ctl: pool %s refused an activation it had room for: %+v", p, r))
		}
	}
	t.idx = s.tenantIdx[len(s.tenantIdx)-1]
	s.tenantIdx = s.tenantIdx[:len(s.tenantIdx)-1]
	s.tenantEpochs++
	t.epoch = s.tenantEpochs
	t.active = true
	return nil
}

// charge charges d to t. A refusal is final only once the memory the
// applications have let go of is refunded: the engine reads the pending
// inotify events (without blocking) and tries once more.
func (s *Server) charge(op ctlmsg.Op, t *tenant, d ctlmsg.TenantUsage) *reqError {
	a := amountsOf(d)
	for try := 0; ; try++ {
		s.mu.Lock()
		r := s.chargeLocked(t, a)
		s.mu.Unlock()
		if r == nil {
			return nil
		}
		if try > 0 {
			return refusalError(string(op), t, r)
		}
		s.drainMem()
	}
}

// refund gives d back from t.
func (s *Server) refund(t *tenant, d ctlmsg.TenantUsage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundLocked(t, amountsOf(d))
}

// Audit checks the pools' books: each pool's invariant holds (pool.go),
// and what it counts as used and unmet is what the tenants hold and miss.
func (s *Server) Audit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var used, unmet amounts
	for _, t := range s.tenants {
		for p := range numPools {
			sh := &t.shares[p]
			used[p] += sh.held
			if sh.active {
				unmet[p] += sh.unmet()
			}
			if sh.active != t.active {
				return fmt.Errorf("ctl: tenant %q active %v, its %s share %v", t.name, t.active, p, sh.active)
			}
		}
	}
	for p := range numPools {
		pl := &s.pools[p]
		if err := pl.check(); err != nil {
			return fmt.Errorf("ctl: %w", err)
		}
		if pl.used != used[p] || pl.unmet != unmet[p] {
			return fmt.Errorf("ctl: pool %s counts %d used and %d unmet; its tenants hold %d and miss %d", p, pl.used, pl.unmet, used[p], unmet[p])
		}
	}
	return nil
}

// resolvePools resolves every socket's quotas and guarantees against the
// engine's resources and sizes the pools. The rule: no guarantee exceeds
// its quota (a larger one is lowered to it: a socket's quota narrows the
// guarantee it inherits), and K (Config.ReserveTenants) times the
// largest guarantee of a pool fits its total. A pool the host measures
// (memory, huge pages: the host decides how much there is) lowers a
// guarantee it cannot give K tenants to total/K, and says so; for a pool
// the config sizes (connections, the engine's tables) it is an error.
func (s *Server) resolvePools() error {
	k := uint64(s.cfg.ReserveTenants)
	for _, l := range s.lns {
		l.max, l.min = l.quota.resolve(s.res), l.guarantee.resolve(s.res)
	}
	for p := range numPools {
		total := s.res.total(p)
		var gmax uint64
		for _, l := range s.lns {
			if l.min[p] > l.max[p] {
				s.log.Warn().Str("socket", l.cfg.label()).Str("pool", p.String()).Str("guarantee", p.amount(l.min[p])).Str("quota", p.amount(l.max[p])).
					Msg("a guarantee above its quota is the quota")
				l.min[p] = l.max[p]
			}
			gmax = max(gmax, l.min[p])
		}
		if k > 0 && gmax > total/k {
			if !p.bytes() {
				return fmt.Errorf("%w: ReserveTenants (ctl.reserve_tenants) %d × the %s guarantee %d exceeds the engine's %d %s: lower one of them, or raise the total",
					ErrConfig, k, p, gmax, total, poolNouns[p])
			}
			lowered := total / k
			if p == poolHugepages && s.hugePage > 0 {
				lowered = lowered / s.hugePage * s.hugePage
			}
			s.log.Warn().Str("pool", p.String()).Uint64("guarantee", gmax).Uint64("lowered_to", lowered).Uint64("total", total).Uint64("reserve_tenants", k).
				Msg("this host cannot give every tenant's guarantee to reserve_tenants tenants at once: the guarantee is lowered")
			for _, l := range s.lns {
				l.min[p] = min(l.min[p], lowered)
			}
			gmax = lowered
		}
		s.pools[p] = pool{id: p, total: total, newcomers: k, newcomerMin: gmax}
		s.log.Info().Str("pool", p.String()).Str("total", p.amount(total)).Uint64("reserve_tenants", k).
			Str("kept_for_tenants_to_come", p.amount(k*gmax)).Msg("tenant pool")
	}
	return nil
}
