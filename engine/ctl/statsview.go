package ctl

import (
	"sync"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// The stats request (conn.stats) is the one request any connection may
// send, before or without a portal: it is bounded three ways.
//
//   - Per tenant, a token bucket (Config.StatsRate a second,
//     Config.StatsBurst at once) over all its connections; beyond it the
//     request is refused with ctlmsg.CodeLimit.
//   - On the cores, at most one collection runs at a time, a new one
//     starts at least statsMinInterval after the previous one did, and a
//     snapshot younger than statsReuse answers every connection that has
//     not had it yet (statsCache). A connection never gets the same
//     snapshot twice, so a poller sees its counters move; many askers at
//     once share one collection. No snapshot predates a change the
//     asker's tenant made before it asked (an operator: any tenant's):
//     a portal attached or reclaimed, slots taken, a region registered
//     or deregistered (Server.noteChange): a tenant reads its own
//     control operations back. One that changes its portals between
//     its stats requests has each collected anew, still one collection
//     at a time, statsMinInterval apart, within its rate.
//   - What it shows: the engine-wide counters (every core's, its port's,
//     its loop's) to everyone; the portals and tenant rows of the asking
//     tenant only, unless the asker is an operator (uid 0 or a member of
//     Config.OperatorGID, on a socket that splits tenants by uid), who
//     sees every tenant's.
//
// Rmad's metrics read the cores themselves (Server.CoreStats, Tenants),
// bounded on their own side (engine/metrics).

// Defaults of Config.StatsRate and StatsBurst: above what a poller
// waiting for each answer can ask (one connection gets a new snapshot at
// most every statsMinInterval), so only a tenant asking over many
// connections at once meets the bound.
const (
	DefaultStatsRate  = 100
	DefaultStatsBurst = 200
)

const (
	// statsReuse is how long a snapshot answers connections that have
	// not had it: the engine-wide cost of many askers.
	statsReuse = 100 * time.Millisecond
	// statsMinInterval spaces collections: the cores run at most one
	// stats Exec each per interval, whoever asks.
	statsMinInterval = 10 * time.Millisecond
)

// bucket is a token bucket. The zero value is full. Guarded by the
// server's mu.
type bucket struct {
	tokens float64
	at     time.Time
}

// level returns the tokens at now.
func (b *bucket) level(now time.Time, rate float64, burst int) float64 {
	if b.at.IsZero() {
		return float64(burst)
	}
	return min(float64(burst), b.tokens+now.Sub(b.at).Seconds()*rate)
}

// take spends one token; if there is none it returns how long until
// there is.
func (b *bucket) take(now time.Time, rate float64, burst int) (bool, time.Duration) {
	b.tokens, b.at = b.level(now, rate, burst), now
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}

// full reports a bucket that has refilled: forgetting it gives nothing away.
func (b *bucket) full(now time.Time, rate float64, burst int) bool {
	return b.level(now, rate, burst) >= float64(burst)
}

// statsSnap is one collection: the engine-wide counters and every
// portal, with each portal's tenant (keys[i] is Portals[i]'s). Never
// changed once published: each answer copies what it shows.
type statsSnap struct {
	seq  uint64    // 1, 2, ... in order of collection
	at   time.Time // when its collection started
	gen  uint64    // the changes counted when it started (Server.changes): it shows them all
	st   *ctlmsg.Stats
	keys []tenantKey
	dp   []engine.TenantCounters // the data path's counters by tenant index (sumDatapath)
}

// statsCache runs the collections of the stats request.
type statsCache struct {
	collect func() (*statsSnap, error)
	gen     func() uint64 // the changes counted so far
	now     func() time.Time
	sleep   func(time.Duration)

	mu        sync.Mutex
	last      *statsSnap
	running   chan struct{} // closed when the collection in progress ends; nil: none
	lastStart time.Time
	seq       uint64
}

func newStatsCache(collect func() (*statsSnap, error), gen func() uint64) *statsCache {
	return &statsCache{collect: collect, gen: gen, now: time.Now, sleep: time.Sleep}
}

// get returns a snapshot for an asker that last had snapshot seen (0:
// none) and must see every change counted up to since: the latest if it
// is another, shows them, and is younger than statsReuse or began after
// the asker asked; else a new one, collected by this asker or by the one
// collecting already. The error is the collection's.
func (c *statsCache) get(seen, since uint64) (*statsSnap, error) {
	asked := c.now()
	c.mu.Lock()
	for {
		if l := c.last; l != nil && l.seq != seen && l.gen >= since && (c.now().Sub(l.at) < statsReuse || !l.at.Before(asked)) {
			c.mu.Unlock()
			return l, nil
		}
		if ch := c.running; ch != nil {
			c.mu.Unlock()
			<-ch
			c.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		c.running = ch
		wait := c.lastStart.Add(statsMinInterval).Sub(c.now())
		c.mu.Unlock()
		if wait > 0 {
			c.sleep(wait)
		}
		// Read before the collection: every change counted by now is
		// done on the cores, which the collection reads after it.
		gen, start := c.gen(), c.now()
		snap, err := c.collect()
		c.mu.Lock()
		c.lastStart, c.running = start, nil
		close(ch)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		c.seq++
		snap.seq, snap.at, snap.gen = c.seq, start, gen
		c.last = snap
		c.mu.Unlock()
		return snap, nil
	}
}

// collectStats is one collection for the stats request: Server.Stats's
// counters and portals, without the tenants (each answer reads those
// from the server's books).
func (s *Server) collectStats() (*statsSnap, error) {
	st, keys, dp, err := s.collect(nil)
	if err != nil {
		return nil, err
	}
	return &statsSnap{st: st, keys: keys, dp: dp}, nil
}

// noteChange counts a change of t's portals as the stats reply lists
// them (a portal attached or reclaimed, slots taken, a region registered
// or deregistered), once the core has made it: from now on no stats
// reply to t, or to an operator, predates it.
func (s *Server) noteChange(t *tenant) {
	n := s.changes.Add(1)
	s.mu.Lock()
	t.changed = max(t.changed, n)
	s.mu.Unlock()
}

// operator reports a peer that sees every tenant's portals and usage:
// uid 0, or a member of Config.OperatorGID, connecting through a socket
// that splits tenants by uid. On a socket that is one tenant (a pod's,
// a container's) nobody is: that tenant's root is not the host's
// operator.
func (s *Server) operator(l *listener, p *peer) bool {
	if l.cfg.Tenant != TenantByUID {
		return false
	}
	return p.uid == 0 || (s.cfg.OperatorGID != nil && p.inGroup(*s.cfg.OperatorGID))
}

// stats answers the stats request: within the tenant's rate, from a
// snapshot of the cores (statsCache), showing an operator everything
// and a tenant the engine-wide counters and its own portals and row.
func (c *conn) stats(op ctlmsg.Op) (*ctlmsg.Stats, *reqError) {
	s := c.s
	operator := s.operator(c.l, &c.peer)
	s.mu.Lock()
	ok, wait := c.tenant.stats.take(time.Now(), s.cfg.StatsRate, s.cfg.StatsBurst)
	since := c.tenant.changed
	s.mu.Unlock()
	if !ok {
		return nil, fail(ctlmsg.CodeLimit, "%s: tenant %q asks for stats faster than %g a second (burst %d); try again in %v",
			op, c.tenant.name, s.cfg.StatsRate, s.cfg.StatsBurst, wait.Round(time.Millisecond))
	}
	if operator {
		since = s.changes.Load()
	}
	snap, err := s.stats.get(c.statsSeen, since)
	if err != nil {
		return nil, execFail(op, err)
	}
	c.statsSeen = snap.seq
	st := *snap.st // shallow: the snapshot's maps and slices are only read
	if operator {
		st.Tenants = largest(s.tenantRows(snap.dp), maxStatsTenants)
		return &st, nil
	}
	st.TenantOnly = true
	st.Portals = nil
	for i := range snap.st.Portals {
		if snap.keys[i] == c.tenant.key {
			st.Portals = append(st.Portals, snap.st.Portals[i])
		}
	}
	s.drainMem() // memory the applications let go of since
	s.mu.Lock()
	st.Tenants = []ctlmsg.TenantStats{c.tenant.row(snap.dp)}
	s.mu.Unlock()
	return &st, nil
}
