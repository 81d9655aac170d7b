package metrics_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/metrics"
)

// fill sets every uint64 field of the struct v points to (through nested
// structs and pointers to structs, which it allocates) to a value of its
// own, and returns each field's path and value.
func fill(v reflect.Value, path string, next *uint64, out map[string]uint64) {
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), path+v.Type().Field(i).Name
		switch {
		case f.Kind() == reflect.Uint64:
			*next += 1000
			f.SetUint(*next)
			out[name] = *next
		case f.Kind() == reflect.Struct:
			fill(f, name+".", next, out)
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
			f.Set(reflect.New(f.Type().Elem()))
			fill(f.Elem(), name+".", next, out)
		}
	}
}

// TestEveryCounterExported: every counter of the stats reply (the core's,
// the loop's, the port's and an AF_XDP port's) is a sample of the page,
// as it is or converted from ns to seconds; a counter added to ctlmsg and
// not to the collector fails here. The fault injector's counters (a test
// facility) are the only ones left out.
func TestEveryCounterExported(t *testing.T) {
	var (
		st   ctlmsg.Stats
		next uint64
	)
	fields := map[string]uint64{}
	fill(reflect.ValueOf(&st).Elem(), "", &next, fields)
	st.Port.Name = "net_test0"
	col, err := metrics.NewCollector(metrics.Config{Cores: []metrics.Core{{ID: 3, Snapshot: func(s *metrics.Snapshot) error {
		s.Stats = &st
		return nil
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	pg := scrape(t, col)
	seen := map[float64]bool{}
	for _, f := range pg.fams {
		for _, m := range f.Metric {
			seen[m.GetCounter().GetValue()] = true
			seen[m.GetGauge().GetValue()] = true
		}
	}
	for name, v := range fields {
		if seen[float64(v)] || seen[float64(v)/1e9] {
			continue
		}
		if len(name) > 6 && name[:6] == "Fault." {
			continue
		}
		t.Errorf("%s (%d) is not on the page", name, v)
	}
	if got := pg.value("onerma_port_packets_total", map[string]string{"core": "3", "port": "net_test0", "dir": "rx"}); got != float64(st.Port.Dev.RxPackets) {
		t.Errorf("port series: %v, want %d", got, st.Port.Dev.RxPackets)
	}
	promtoolCheck(t, pg.text)
}

// TestCoreDownAndTenants: a core whose loop does not answer is reported
// down and nothing else of it; the others are reported; the tenant hook's
// usage and quotas are gauges.
func TestCoreDownAndTenants(t *testing.T) {
	up := &ctlmsg.Stats{Posted: 7, Portals: []ctlmsg.PortalStats{{ID: 1, Name: "a", UID: 1000, Slots: 4, Regions: 1, RegionBytes: 4096}}}
	col, err := metrics.NewCollector(metrics.Config{
		Cores: []metrics.Core{
			{ID: 0, Snapshot: func(s *metrics.Snapshot) error { return errors.New("runner: stopped") }},
			{ID: 1, Snapshot: func(s *metrics.Snapshot) error { s.Stats = up; return nil }},
		},
		Tenants: func() []metrics.TenantUsage {
			return []metrics.TenantUsage{{Tenant: "sock=/run/pod1 uid=1000", Resource: "region_bytes", Used: 4096, Quota: 1 << 30, Guarantee: 1 << 20}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	pg := scrape(t, col)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"onerma_core_up", map[string]string{"core": "0"}, 0},
		{"onerma_core_up", map[string]string{"core": "1"}, 1},
		{"onerma_commands_posted_total", map[string]string{"core": "1"}, 7},
		{"onerma_commands_posted_total", map[string]string{"core": "0"}, math.NaN()},
		{"onerma_uid_slots", map[string]string{"uid": "1000"}, 4},
		{"onerma_uid_region_bytes", map[string]string{"uid": "1000"}, 4096},
		{"onerma_tenant_usage", map[string]string{"tenant": "sock=/run/pod1 uid=1000", "resource": "region_bytes"}, 4096},
		{"onerma_tenant_quota", map[string]string{"tenant": "sock=/run/pod1 uid=1000", "resource": "region_bytes"}, 1 << 30},
		{"onerma_tenant_guarantee", map[string]string{"tenant": "sock=/run/pod1 uid=1000", "resource": "region_bytes"}, 1 << 20},
	} {
		got := pg.value(c.name, c.labels)
		if got != c.want && !(math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, err := metrics.NewCollector(metrics.Config{Cores: []metrics.Core{{ID: 0}}}); err == nil {
		t.Error("a core without Snapshot accepted")
	}
	promtoolCheck(t, pg.text)
}

// TestEveryTenantCounterExported: every counter of a tenant's data path
// (ctlmsg.TenantDatapath) is on the page, labelled with the tenant's name
// only; a tenant without them (not active) has none.
func TestEveryTenantCounterExported(t *testing.T) {
	var (
		dp   ctlmsg.TenantDatapath
		next uint64
	)
	fields := map[string]uint64{}
	fill(reflect.ValueOf(&dp).Elem(), "", &next, fields)
	rows := []ctlmsg.TenantStats{{Name: "pod", Datapath: &dp}, {Name: "idle"}}
	col, err := metrics.NewCollector(metrics.Config{Datapath: func() []metrics.TenantDatapath { return metrics.DatapathOf(rows) }})
	if err != nil {
		t.Fatal(err)
	}
	pg := scrape(t, col)
	seen := map[float64]bool{}
	for _, f := range pg.fams {
		if !strings.HasPrefix(f.GetName(), "onerma_") {
			continue // the process's and Go runtime's
		}
		for _, m := range f.Metric {
			if len(m.Label) != 1 || m.Label[0].GetName() != "tenant" || m.Label[0].GetValue() != "pod" {
				t.Errorf("%s: labels %v, want tenant=pod only", f.GetName(), m.Label)
			}
			seen[m.GetCounter().GetValue()] = true
			seen[m.GetGauge().GetValue()] = true
		}
	}
	for name, v := range fields {
		if !seen[float64(v)] {
			t.Errorf("%s (%d) is not on the page", name, v)
		}
	}
	if got := pg.value("onerma_tenant_window_share_bytes", map[string]string{"tenant": "pod"}); got != float64(dp.WindowShare) {
		t.Errorf("onerma_tenant_window_share_bytes = %v, want %d", got, dp.WindowShare)
	}
	promtoolCheck(t, pg.text)
}

// TestLabelsBounded: a tenant that opens portals from many processes,
// under many uids and names of its choosing, adds no series by default:
// no per-portal series, no label holding a name or an identity, and
// per-uid series for UIDSeries uids plus "other", which sums the rest.
// With PortalSeries the operator gets a series per portal.
func TestLabelsBounded(t *testing.T) {
	const n = metrics.UIDSeries + 8
	var cores [2]ctlmsg.Stats
	for i := range n {
		cores[i%2].Portals = append(cores[i%2].Portals, ctlmsg.PortalStats{ID: uint32(i / 2), Name: fmt.Sprintf("proc-%d", i),
			UID: uint32(100000 + i), PID: uint32(1<<22 + i), Class: "low", Tenant: "team-a", Slots: 1, Regions: 1, RegionBytes: 4096})
	}
	for _, portals := range []bool{false, true} {
		col, err := metrics.NewCollector(metrics.Config{PortalSeries: portals, Cores: []metrics.Core{
			{ID: 0, Snapshot: func(s *metrics.Snapshot) error { s.Stats = &cores[0]; return nil }},
			{ID: 1, Snapshot: func(s *metrics.Snapshot) error { s.Stats = &cores[1]; return nil }},
		}})
		if err != nil {
			t.Fatal(err)
		}
		pg := scrape(t, col)
		uids := map[string]float64{}
		portalSeries := 0
		for _, f := range pg.fams {
			for _, m := range f.Metric {
				for _, l := range m.Label {
					if !portals && (l.GetName() == "name" || l.GetName() == "pid") {
						t.Errorf("%s carries label %s=%q", f.GetName(), l.GetName(), l.GetValue())
					}
					if f.GetName() == "onerma_uid_portals" && l.GetName() == "uid" {
						uids[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
			if f.GetName() == "onerma_portal_slots" {
				portalSeries += len(f.Metric)
			}
		}
		if len(uids) != metrics.UIDSeries+1 || uids[metrics.OtherUID] != n-metrics.UIDSeries || uids["100000"] != 1 || uids[fmt.Sprint(100000+n-1)] != 0 {
			t.Errorf("PortalSeries %v: onerma_uid_portals by uid %v: want the %d lowest and %s holding %d", portals, uids, metrics.UIDSeries, metrics.OtherUID, n-metrics.UIDSeries)
		}
		if want := map[bool]int{false: 0, true: n}[portals]; portalSeries != want {
			t.Errorf("PortalSeries %v: %d series of onerma_portal_slots, want %d", portals, portalSeries, want)
		}
		got := 0.0
		for _, m := range pg.fams["onerma_regions"].GetMetric() {
			got += m.GetGauge().GetValue()
		}
		if got != n {
			t.Errorf("PortalSeries %v: onerma_regions sums to %v, want %d", portals, got, n)
		}
		promtoolCheck(t, pg.text)
	}
}
