package metrics

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/telemetry"
)

// Core is one engine core as the collector reads it.
type Core struct {
	ID     int    // the core label's value
	Limits Limits // its sizes: usage gauges are reported against them
	// Snapshot reads the core: its control server's stats reply and its
	// delay histograms, of one moment, read on the core's goroutine
	// (runner.Exec). It is called once per scrape, from the scraping
	// goroutine. An error (the core is not running) sets onerma_core_up
	// to 0 and leaves the core's other series out of that scrape.
	Snapshot func(s *Snapshot) error
}

// Snapshot is one core at one moment.
type Snapshot struct {
	Stats  *ctlmsg.Stats // the stats reply (engine/ctl.Server.Stats)
	Delays telemetry.Delays
}

// Limits are what a core and its control server were sized with.
type Limits struct {
	WindowBytes         uint64 // solicitation window
	Slots               int    // command slots (CST)
	Portals             int    // portal table
	Regions             int    // region table (RRT)
	MaxRegionsPerPortal int    // regions one portal may hold
	MaxPortalBytes      uint64 // region bytes one portal may hold
}

// TenantUsage is one tenant's use of one pool against its quota and
// guarantee.
type TenantUsage struct {
	// Tenant is the tenant's name: what its applications cannot choose
	// (the control socket they connect through, their uid), and the only
	// label that tells tenants apart.
	Tenant    string
	Resource  string  // the pool: "conns", "portals", "slots", "regions", "memory_bytes", "hugepage_bytes"
	Used      float64 // in the pool's unit
	Quota     float64 // the most it may hold (0: none)
	Guarantee float64 // what it is given however much the others hold
}

// TenantsOf is the usage against quota and guarantee of each tenant the
// control server reports (engine/ctl.Server.Tenants), a series per pool.
func TenantsOf(ts []ctlmsg.TenantStats) []TenantUsage {
	out := make([]TenantUsage, 0, 6*len(ts))
	for _, t := range ts {
		u, q, g := &t.TenantUsage, &t.Quota, &t.Guarantee
		out = append(out,
			TenantUsage{t.Name, ctlmsg.QuotaConns, float64(u.Conns), float64(q.Conns), float64(g.Conns)},
			TenantUsage{t.Name, ctlmsg.QuotaPortals, float64(u.Portals), float64(q.Portals), float64(g.Portals)},
			TenantUsage{t.Name, ctlmsg.QuotaSlots, float64(u.Slots), float64(q.Slots), float64(g.Slots)},
			TenantUsage{t.Name, ctlmsg.QuotaRegions, float64(u.Regions), float64(q.Regions), float64(g.Regions)},
			TenantUsage{t.Name, ctlmsg.QuotaMemoryBytes, float64(u.MemoryBytes), float64(q.MemoryBytes), float64(g.MemoryBytes)},
			TenantUsage{t.Name, ctlmsg.QuotaHugepageBytes, float64(u.HugepageBytes), float64(q.HugepageBytes), float64(g.HugepageBytes)})
	}
	return out
}

// TenantDatapath is one tenant's counters in the engine's data path,
// summed over the cores (ctlmsg.TenantDatapath).
type TenantDatapath struct {
	Tenant string // its name, the only label
	ctlmsg.TenantDatapath
}

// DatapathOf is the data-path counters of each tenant the control server
// reports (engine/ctl.Server.Tenants) that has them (an active tenant).
func DatapathOf(ts []ctlmsg.TenantStats) []TenantDatapath {
	out := make([]TenantDatapath, 0, len(ts))
	for _, t := range ts {
		if t.Datapath != nil {
			out = append(out, TenantDatapath{t.Name, *t.Datapath})
		}
	}
	return out
}

// Config of a Collector.
type Config struct {
	Cores []Core
	// Tenants, if set, reports each tenant's usage against its quotas
	// and guarantees at every scrape (onerma_tenant_usage,
	// onerma_tenant_quota, onerma_tenant_guarantee): rmad's
	// is TenantsOf its control server's Tenants, which reads the server's
	// books, not the cores. Without it the collector exports usage per
	// portal and per uid only.
	Tenants func() []TenantUsage
	// Datapath, if set, reports each tenant's counters in the data path
	// at every scrape (onerma_tenant_*: its window share and use, ops
	// delayed by its share; labelled with the tenant's name only):
	// rmad's is DatapathOf its control server's Tenants, which sums
	// the cores' counters.
	Datapath func() []TenantDatapath
	// PortalSeries exports a series per open portal (onerma_portal_*,
	// labelled with its core, id, name, uid, identity as pid, class and
	// tenant: rmad's metrics.portals). Off by default: the name is the
	// application's choice and each process a new identity, so a tenant
	// would add series as fast as it starts processes. An operator turns
	// it on to look at one engine, not for a long-lived time series
	// database.
	PortalSeries bool
}

// UIDSeries is the most uids the per-uid gauges (onerma_uid_*) name, the
// lowest first; the portals of further uids are summed under uid
// "other". A tenant runs its processes under as many uids as it has
// (a rootless container's subordinate range: 65,536), so the series are
// capped at UIDSeries + 1 whatever it does; the host's own users, whose
// uids are below every subordinate range, keep series of their own.
const UIDSeries = 32

// OtherUID is the uid label of the portals of uids beyond UIDSeries.
const OtherUID = "other"

// Collector is a prometheus.Collector of an engine's cores. Register it
// once; every scrape reads every core (Core.Snapshot).
type Collector struct {
	cfg Config
	d   descs
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of cfg's cores.
func NewCollector(cfg Config) (*Collector, error) {
	seen := map[int]bool{}
	for _, c := range cfg.Cores {
		if c.Snapshot == nil {
			return nil, fmt.Errorf("metrics: core %d: no Snapshot", c.ID)
		}
		if seen[c.ID] {
			return nil, fmt.Errorf("metrics: core %d listed twice", c.ID)
		}
		seen[c.ID] = true
	}
	return &Collector{cfg: cfg, d: newDescs()}, nil
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d.all() {
		ch <- d
	}
}

// Collect reads every core and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	users := map[uint32]*uidUse{}
	for _, core := range c.cfg.Cores {
		id := strconv.Itoa(core.ID)
		var s Snapshot
		if err := core.Snapshot(&s); err != nil || s.Stats == nil {
			ch <- gauge(c.d.up, 0, id)
			continue
		}
		ch <- gauge(c.d.up, 1, id)
		c.collectCore(ch, id, &core.Limits, &s)
		for i := range s.Stats.Portals {
			p := &s.Stats.Portals[i]
			u := users[p.UID]
			if u == nil {
				u = new(uidUse)
				users[p.UID] = u
			}
			u.portals++
			u.slots += p.Slots
			u.regions += p.Regions
			u.regionBytes += p.RegionBytes
		}
	}
	uids := make([]uint32, 0, len(users))
	for uid := range users {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var other uidUse
	for i, uid := range uids {
		u := users[uid]
		if i >= UIDSeries {
			other.add(u)
			continue
		}
		c.uidGauges(ch, u, strconv.FormatUint(uint64(uid), 10))
	}
	if len(uids) > UIDSeries {
		c.uidGauges(ch, &other, OtherUID)
	}
	if c.cfg.Tenants != nil {
		for _, t := range c.cfg.Tenants() {
			ch <- gauge(c.d.tenantUsage, t.Used, t.Tenant, t.Resource)
			ch <- gauge(c.d.tenantQuota, t.Quota, t.Tenant, t.Resource)
			ch <- gauge(c.d.tenantGuarantee, t.Guarantee, t.Tenant, t.Resource)
		}
	}
	if c.cfg.Datapath != nil {
		for _, t := range c.cfg.Datapath() {
			emit(ch, c.d.tenantDatapath, tenantDatapathFamilies, &t.TenantDatapath, t.Tenant)
		}
	}
}

// uidUse sums the portals of one uid over every core.
type uidUse struct {
	portals, slots, regions int
	regionBytes             uint64
}

func (u *uidUse) add(v *uidUse) {
	u.portals += v.portals
	u.slots += v.slots
	u.regions += v.regions
	u.regionBytes += v.regionBytes
}

// uidGauges sends u's gauges labelled uid.
func (c *Collector) uidGauges(ch chan<- prometheus.Metric, u *uidUse, uid string) {
	ch <- gauge(c.d.uidPortals, float64(u.portals), uid)
	ch <- gauge(c.d.uidSlots, float64(u.slots), uid)
	ch <- gauge(c.d.uidRegions, float64(u.regions), uid)
	ch <- gauge(c.d.uidRegionBytes, float64(u.regionBytes), uid)
}

func (c *Collector) collectCore(ch chan<- prometheus.Metric, core string, l *Limits, s *Snapshot) {
	st := s.Stats
	emit(ch, c.d.stats, statsFamilies, st, core)
	for _, op := range sortedKeys(st.CompletedByOp) {
		byStatus := st.CompletedByOp[op]
		for _, status := range sortedKeys(byStatus) {
			ch <- counter(c.d.completions, float64(byStatus[status]), core, op, status)
		}
	}
	for _, status := range sortedKeys(st.CompletedLookup) {
		ch <- counter(c.d.completions, float64(st.CompletedLookup[status]), core, abi.OpLookup.String(), status)
	}
	if st.Loop != nil {
		emit(ch, c.d.loop, loopFamilies, st.Loop, core)
	}
	if p := st.Port; p != nil {
		emit(ch, c.d.port, portFamilies, p, core, p.Name)
		if x := p.XDP; x != nil {
			emit(ch, c.d.xdp, xdpFamilies, x, core, p.Name)
		}
	}
	regions := 0
	for i := range st.Portals {
		p := &st.Portals[i]
		regions += p.Regions
		if !c.cfg.PortalSeries {
			continue
		}
		closed := 0.0
		if p.Closed {
			closed = 1
		}
		lv := []string{core, strconv.FormatUint(uint64(p.ID), 10), p.Name, strconv.FormatUint(uint64(p.UID), 10),
			strconv.FormatUint(uint64(p.PID), 10), p.Class, p.Tenant}
		for _, g := range []struct {
			d *prometheus.Desc
			v float64
		}{
			{c.d.portalSlots, float64(p.Slots)}, {c.d.portalSlotsLimit, float64(p.MaxSlots)},
			{c.d.portalInFlight, float64(p.InFlight)},
			{c.d.portalCmdDepth, float64(p.CmdDepth)}, {c.d.portalCmdCap, float64(p.CmdCap)},
			{c.d.portalCplDepth, float64(p.CplDepth)}, {c.d.portalCplCap, float64(p.CplCap)},
			{c.d.portalRegions, float64(p.Regions)}, {c.d.portalRegionsLimit, float64(l.MaxRegionsPerPortal)},
			{c.d.portalRegionBytes, float64(p.RegionBytes)}, {c.d.portalRegionBytesLimit, float64(l.MaxPortalBytes)},
			{c.d.portalClosed, closed},
		} {
			ch <- gauge(g.d, g.v, lv...)
		}
	}
	for _, g := range []struct {
		d *prometheus.Desc
		v float64
	}{
		{c.d.windowSize, float64(l.WindowBytes)}, {c.d.slots, float64(l.Slots)},
		{c.d.portals, float64(len(st.Portals))}, {c.d.portalsMax, float64(l.Portals)},
		{c.d.regions, float64(regions)}, {c.d.regionsMax, float64(l.Regions)},
	} {
		ch <- gauge(g.d, g.v, core)
	}
	for op := range telemetry.DelayOps {
		if s.Delays.Count(op) == 0 {
			continue
		}
		for k, d := range []*prometheus.Desc{c.d.issueDelay, c.d.totalDelay, c.d.remoteDelay} {
			ch <- delayHistogram(d, &s.Delays, op, telemetry.DelayKind(k), core)
		}
	}
}

// OpName is an op's value of the op label: abi's name, OTHER for
// commands that named no valid op (as the stats reply names them).
func OpName(op int) string {
	if op == 0 {
		return "OTHER"
	}
	return abi.Op(op).String()
}

// FirstBucket is the first of the core's log2 delay buckets exported as
// a bucket of its own (le = 2^8 ns = 256 ns): the loop reads its clock
// once per iteration, so shorter delays are not resolved; the first
// exported bucket holds every delay up to it.
const FirstBucket = 8

// delayHistogram is op's histogram of kind k, in seconds.
func delayHistogram(d *prometheus.Desc, h *telemetry.Delays, op int, k telemetry.DelayKind, core string) prometheus.Metric {
	b := &h.Buckets[op][k]
	buckets := make(map[float64]uint64, telemetry.DelayBuckets-FirstBucket)
	var n uint64
	for i, c := range b {
		n += c
		if i >= FirstBucket {
			buckets[float64(telemetry.DelayBucketLeNs(i))/1e9] = n
		}
	}
	return prometheus.MustNewConstHistogram(d, n, float64(h.SumNs[op][k])/1e9, buckets, core, OpName(op))
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// family is one metric whose series read fields of a T.
type family[T any] struct {
	name, help string
	typ        prometheus.ValueType
	labels     []string // after core and the caller's prefix labels
	series     []series[T]
}

type series[T any] struct {
	values []string // of the family's labels
	get    func(*T) float64
}

// one is a family of one series.
func one[T any](name, help string, typ prometheus.ValueType, get func(*T) float64) family[T] {
	return family[T]{name: name, help: help, typ: typ, series: []series[T]{{get: get}}}
}

// by is a family with one label, a series per value.
func by[T any](name, help string, typ prometheus.ValueType, label string, s ...series[T]) family[T] {
	return family[T]{name: name, help: help, typ: typ, labels: []string{label}, series: s}
}

// sv is the series of a family's label value.
func sv[T any](value string, get func(*T) float64) series[T] {
	return series[T]{values: []string{value}, get: get}
}

// describe makes the families' descriptions; prefix are the labels
// between core and each family's own.
func describe[T any](fams []family[T], prefix ...string) []*prometheus.Desc {
	return describeBy(fams, append([]string{"core"}, prefix...)...)
}

// describeBy makes the families' descriptions, labelled first with
// labels.
func describeBy[T any](fams []family[T], labels ...string) []*prometheus.Desc {
	out := make([]*prometheus.Desc, len(fams))
	for i, f := range fams {
		out[i] = prometheus.NewDesc("onerma_"+f.name, f.help, append(slices.Clip(labels), f.labels...), nil)
	}
	return out
}

// emit sends every series of fams read from v; prefix are the values of
// core and the prefix labels.
func emit[T any](ch chan<- prometheus.Metric, descs []*prometheus.Desc, fams []family[T], v *T, prefix ...string) {
	for i, f := range fams {
		for _, x := range f.series {
			labels := append(slices.Clip(prefix), x.values...)
			ch <- prometheus.MustNewConstMetric(descs[i], f.typ, x.get(v), labels...)
		}
	}
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	slices.Sort(k)
	return k
}
