package ctl

import (
	"sort"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// tenantKey names a tenant: a socket, and a uid when the socket splits its
// tenants by uid (uidmap.go: uid keyWholeSocket or keyOtherUIDs else).
type tenantKey struct {
	sock int
	uid  int64
}

// tenant is what one tenant holds of each pool, against its guarantees
// and quotas (pool.go). The server's mu guards every field.
type tenant struct {
	key    tenantKey
	name   string
	l      *listener
	shares [numPools]share
	// active: the pools hold its unmet guarantees free (from its first
	// connection until it holds nothing).
	active bool
	// idx is its index among the tenants the engine's cores serve
	// (engine.PortalSpec.Tenant), held while it is active; -1: none.
	// epoch names this tenure of the index (engine.PortalSpec.TenantEpoch):
	// the cores' counters of the index are its own from its first portal
	// on each.
	idx    int
	epoch  uint64
	weight int // engine.PortalSpec.Weight (its socket's config)
	// Identity token bucket (Config.IdentityRate, IdentityBurst).
	idTokens float64
	idAt     time.Time
	stats    bucket // stats requests (Config.StatsRate, StatsBurst)
	// changed is Server.changes after the tenant's latest change of its
	// portals: its stats replies show it (statsview.go).
	changed uint64
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
		// A tenant forgotten and back: its stats show the changes it
		// made before, as they show an operator's.
		t = &tenant{key: k, name: name, l: l, idx: -1, weight: l.cfg.weightOf(k),
			idTokens: float64(s.cfg.IdentityBurst), idAt: time.Now(), changed: s.changes.Load()}
		s.tenants[k] = t
	}
	return t
}

// idle reports a tenant that holds nothing. Call with s.mu held.
func (t *tenant) idle() bool {
	for i := range t.shares {
		if t.shares[i].held != 0 {
			return false
		}
	}
	return true
}

// held is what the tenant holds of each pool. Call with s.mu held.
func (t *tenant) held() amounts {
	var a amounts
	for i := range t.shares {
		a[i] = t.shares[i].held
	}
	return a
}

// dropIfIdle forgets a tenant that holds nothing, once its identity
// bucket has refilled (else reconnecting would refill it at once). Call
// with s.mu held.
func (s *Server) dropIfIdle(t *tenant) {
	full := t.idTokens+time.Since(t.idAt).Seconds()*s.cfg.IdentityRate >= float64(s.cfg.IdentityBurst)
	if t.idle() && full && t.stats.full(time.Now(), s.cfg.StatsRate, s.cfg.StatsBurst) {
		delete(s.tenants, t.key)
	}
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
// name: its usage against its quotas and guarantees, and its counters in
// the data path (read from every core: one Exec each; without them when
// a core is not running).
func (s *Server) Tenants() []ctlmsg.TenantStats {
	dp, err := s.readDatapath()
	if err != nil {
		dp = nil
	}
	return s.tenantRows(dp)
}

// tenantRows is Tenants with the data path's counters dp (sumDatapath;
// nil: none).
func (s *Server) tenantRows(dp []engine.TenantCounters) []ctlmsg.TenantStats {
	s.drainMem() // memory the applications let go of since
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ctlmsg.TenantStats, 0, len(s.tenants))
	for _, t := range s.tenants {
		if !t.idle() {
			out = append(out, t.row(dp))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// row is t's row of the stats reply: what it holds, its quotas and its
// guarantees (as of its activation), and, when dp is not nil, its
// counters in the data path. Call with s.mu held.
func (t *tenant) row(dp []engine.TenantCounters) ctlmsg.TenantStats {
	var min, max amounts
	for p := range t.shares {
		min[p], max[p] = t.shares[p].min, t.shares[p].max
	}
	ts := ctlmsg.TenantStats{Name: t.name, Socket: t.l.cfg.Path, TenantUsage: t.held().usage(),
		Quota: max.usage(), Guarantee: min.usage()}
	if t.idx >= 0 && t.idx < len(dp) {
		ts.Datapath = new(ctlmsg.TenantDatapath)
		if c := &dp[t.idx]; c.Epoch == t.epoch { // else its portals have not reached a core the collection read
			*ts.Datapath = *datapathMsg(c)
		}
	}
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
