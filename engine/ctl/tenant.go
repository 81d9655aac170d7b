package ctl

import (
	"fmt"
	"sort"
	"time"

	"github.com/onerma/onerma/ctlmsg"
)

// tenantKey names a tenant: a socket, and a uid when the socket splits its
// tenants by uid (uidmap.go: uid keyWholeSocket or keyOtherUIDs else).
type tenantKey struct {
	sock int
	uid  int64
}

// tenant is what one tenant holds, against its limits. The server's mu
// guards every field.
type tenant struct {
	key   tenantKey
	name  string
	l     *listener
	conns int
	use   ctlmsg.TenantUsage
	// Identity token bucket (Config.IdentityRate, IdentityBurst).
	idTokens float64
	idAt     time.Time
	stats    bucket // stats requests (Config.StatsRate, StatsBurst)
}

// tenantFor returns (creating it) the tenant of a peer connecting through
// l. Call with s.mu held.
func (s *Server) tenantFor(l *listener, p *peer) *tenant {
	k, name := s.tenantKeyOf(l, p)
	t := s.tenants[k]
	if t == nil {
		for _, o := range s.tenants { // forget those idle since
			s.dropIfIdle(o)
		}
		t = &tenant{key: k, name: name, l: l, idTokens: float64(s.cfg.IdentityBurst), idAt: time.Now()}
		s.tenants[k] = t
	}
	return t
}

// idle reports a tenant that holds nothing. Call with s.mu held.
func (t *tenant) idle() bool { return t.conns == 0 && t.use == (ctlmsg.TenantUsage{}) }

// dropIfIdle forgets a tenant that holds nothing, once its identity
// bucket has refilled (else reconnecting would refill it at once). Call
// with s.mu held.
func (s *Server) dropIfIdle(t *tenant) {
	full := t.idTokens+time.Since(t.idAt).Seconds()*s.cfg.IdentityRate >= float64(s.cfg.IdentityBurst)
	if t.idle() && full && t.stats.full(time.Now(), s.cfg.StatsRate, s.cfg.StatsBurst) {
		delete(s.tenants, t.key)
	}
}

// quotaError is a refusal naming the quota, the tenant and the numbers.
func quotaError(op ctlmsg.Op, t *tenant, quota string, have, more, limit uint64, unit func(uint64) string) *reqError {
	e := fail(ctlmsg.CodeQuota, "%s: tenant %q holds %s; %s more would exceed its %s quota of %s (socket %s)",
		op, t.name, unit(have), unit(more), quota, unit(limit), t.l.cfg.label())
	e.quota = quota
	return e
}

func count(n uint64) string { return fmt.Sprint(n) }

// charge adds d to the tenant's usage if every count stays within its
// limits; the refusal names the first quota it would break.
func (s *Server) charge(op ctlmsg.Op, t *tenant, d ctlmsg.TenantUsage) *reqError {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, lim := &t.use, &t.l.limits
	switch {
	case d.Portals > 0 && u.Portals+d.Portals > lim.Portals:
		return quotaError(op, t, ctlmsg.QuotaPortals, uint64(u.Portals), uint64(d.Portals), uint64(lim.Portals), count)
	case d.Slots > 0 && u.Slots+d.Slots > lim.Slots:
		return quotaError(op, t, ctlmsg.QuotaSlots, uint64(u.Slots), uint64(d.Slots), uint64(lim.Slots), count)
	case d.MemoryBytes > 0 && u.MemoryBytes+d.MemoryBytes > lim.MemoryBytes:
		return quotaError(op, t, ctlmsg.QuotaMemoryBytes, u.MemoryBytes, d.MemoryBytes, lim.MemoryBytes, fmtBytes)
	case d.HugepageBytes > 0 && u.HugepageBytes+d.HugepageBytes > lim.HugepageBytes:
		return quotaError(op, t, ctlmsg.QuotaHugepageBytes, u.HugepageBytes, d.HugepageBytes, lim.HugepageBytes, fmtBytes)
	}
	u.Portals += d.Portals
	u.Slots += d.Slots
	u.MemoryBytes += d.MemoryBytes
	u.HugepageBytes += d.HugepageBytes
	return nil
}

// refund takes d back from the tenant's usage.
func (s *Server) refund(t *tenant, d ctlmsg.TenantUsage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := &t.use
	if u.Portals < d.Portals || u.Slots < d.Slots || u.MemoryBytes < d.MemoryBytes || u.HugepageBytes < d.HugepageBytes {
		panic(fmt.Sprintf("ctl: tenant %q refunded %+v while holding %+v", t.name, d, *u))
	}
	u.Portals -= d.Portals
	u.Slots -= d.Slots
	u.MemoryBytes -= d.MemoryBytes
	u.HugepageBytes -= d.HugepageBytes
	s.dropIfIdle(t)
}

// memCharge is what a piece of shared memory of mapSize bytes costs.
func memCharge(mapSize uint64, hugetlb bool) ctlmsg.TenantUsage {
	d := ctlmsg.TenantUsage{MemoryBytes: mapSize}
	if hugetlb {
		d.HugepageBytes = mapSize
	}
	return d
}

// takeIdentityToken spends one of the tenant's identity tokens.
func (s *Server) takeIdentityToken(op ctlmsg.Op, t *tenant) *reqError {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	burst := float64(s.cfg.IdentityBurst)
	t.idTokens = min(burst, t.idTokens+now.Sub(t.idAt).Seconds()*s.cfg.IdentityRate)
	t.idAt = now
	if t.idTokens < 1 {
		return fail(ctlmsg.CodeLimit, "%s: tenant %q asks for new process identities faster than %g a second (burst %d); try again in %v",
			op, t.name, s.cfg.IdentityRate, s.cfg.IdentityBurst, time.Duration((1-t.idTokens)/s.cfg.IdentityRate*float64(time.Second)).Round(time.Millisecond))
	}
	t.idTokens--
	return nil
}

// Tenants reports every tenant holding a connection or resources, by
// name: its usage against its quotas.
func (s *Server) Tenants() []ctlmsg.TenantStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ctlmsg.TenantStats, 0, len(s.tenants))
	for _, t := range s.tenants {
		if !t.idle() {
			out = append(out, t.row())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// row is t's row of the stats reply. Call with s.mu held.
func (t *tenant) row() ctlmsg.TenantStats {
	ts := ctlmsg.TenantStats{Name: t.name, Socket: t.l.cfg.Path, Conns: t.conns, TenantUsage: t.use, Quota: t.l.limits}
	if t.key.uid >= 0 {
		uid := t.key.uid
		ts.UID = &uid
	}
	return ts
}

// maxStatsTenants bounds the tenants a stats reply lists, to keep it
// within ctlmsg.MaxResponseBytes (Server.Tenants has them all).
const maxStatsTenants = 64

// largest keeps the n tenants holding the most memory, in name order.
func largest(ts []ctlmsg.TenantStats, n int) []ctlmsg.TenantStats {
	if len(ts) <= n {
		return ts
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].MemoryBytes > ts[j].MemoryBytes })
	ts = ts[:n]
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts
}
