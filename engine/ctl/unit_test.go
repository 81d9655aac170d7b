package ctl

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
)

// TestStatsMsgCoversEveryField fails when engine.Stats gains a counter that
// StatsMsg does not carry.
func TestStatsMsgCoversEveryField(t *testing.T) {
	var s engine.Stats
	sv := reflect.ValueOf(&s).Elem()
	for i := range sv.NumField() {
		if f := sv.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(uint64(1000 + i))
		}
	}
	s.Completed[abi.StatusOK] = 7
	s.Completed[abi.StatusNack] = 3
	m := StatsMsg(&s)
	mv := reflect.ValueOf(m).Elem()
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		mf := mv.FieldByName(name)
		if !mf.IsValid() {
			t.Errorf("ctlmsg.Stats has no field %s", name)
			continue
		}
		if sv.Field(i).Kind() == reflect.Uint64 && mf.Uint() != sv.Field(i).Uint() {
			t.Errorf("%s = %d, want %d", name, mf.Uint(), sv.Field(i).Uint())
		}
	}
	if m.FragNeededDst != "" {
		t.Errorf("FragNeededDst = %q without one", m.FragNeededDst)
	}
	s.FragNeededDst = 0x0a020002
	if got := StatsMsg(&s).FragNeededDst; got != "10.2.0.2" {
		t.Errorf("FragNeededDst = %q, want 10.2.0.2", got)
	}
	if len(m.Completed) != 2 || m.Completed["OK"] != 7 || m.Completed["NACK"] != 3 {
		t.Errorf("Completed = %v", m.Completed)
	}
	if m.CompletedByOp != nil {
		t.Errorf("CompletedByOp without counts: %v", m.CompletedByOp)
	}
	s.CompletedByOp[abi.OpRead][abi.StatusOK] = 5
	s.CompletedByOp[abi.OpRead][abi.StatusNack] = 2
	s.CompletedByOp[abi.OpWrite][abi.StatusTimeout] = 1
	s.CompletedByOp[abi.OpRekey][abi.StatusOK] = 4
	s.CompletedByOp[0][abi.StatusBadCommand] = 9
	want := map[string]map[string]uint64{"READ": {"OK": 5, "NACK": 2}, "WRITE": {"TIMEOUT": 1}, "REKEY": {"OK": 4}, "OTHER": {"BAD_COMMAND": 9}}
	if got := StatsMsg(&s).CompletedByOp; !reflect.DeepEqual(got, want) {
		t.Errorf("CompletedByOp = %v, want %v", got, want)
	}
}

func TestAppPolicy(t *testing.T) {
	u1, u2, g1 := uint32(1000), uint32(2000), uint32(500)
	p := AppPolicy{Default: 8, DefaultClass: "low", Rules: []AppRule{
		{UID: &u1, GID: &g1, Class: "high", MaxSlots: 512}, // uid and a group
		{UID: &u1, MaxSlots: 64},                           // uid only; class unset: low
		{GID: &g1, Class: "high", MaxSlots: 4},             // group only (effective or supplementary)
		{UID: &u2, MaxSlots: 0},
		{UID: &u2, Class: "high", MaxSlots: 99}, // shadowed by the rule above
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uid, gid uint32
		groups   []uint32
		class    abi.Class
		slots    int
		from     string
	}{
		{1000, 500, nil, abi.ClassHigh, 512, "slot policy rule 0 (uid=1000 gid=500)"},
		{1000, 7, []uint32{9, 500}, abi.ClassHigh, 512, "slot policy rule 0 (uid=1000 gid=500)"},
		{1000, 7, nil, abi.ClassLow, 64, "slot policy rule 1 (uid=1000)"},
		{3000, 7, []uint32{500}, abi.ClassHigh, 4, "slot policy rule 2 (gid=500)"},
		{2000, 2000, nil, abi.ClassLow, 0, "slot policy rule 3 (uid=2000)"},
		{3000, 3000, []uint32{501}, abi.ClassLow, 8, "the slot policy default"},
	}
	for _, tt := range tests {
		g := p.Match(tt.uid, tt.gid, tt.groups...)
		if g.Class != tt.class || g.MaxSlots != tt.slots || g.From != tt.from {
			t.Errorf("Match(%d, %d, %v) = %+v; want class %d, %d slots, from %q", tt.uid, tt.gid, tt.groups, g, tt.class, tt.slots, tt.from)
		}
	}
	if g := p.Match(1000, 500).String(); g != "class high and 512 slots" {
		t.Errorf("Grant.String = %q", g)
	}
	// The default class applies when no rule matches; "" is low.
	for _, dc := range []struct {
		name string
		want abi.Class
	}{{"high", abi.ClassHigh}, {"low", abi.ClassLow}, {"", abi.ClassLow}} {
		q := AppPolicy{Default: 1, DefaultClass: dc.name}
		if err := q.Validate(); err != nil {
			t.Fatal(err)
		}
		if g := q.Match(0, 0); g.Class != dc.want || g.From != "the slot policy default" {
			t.Errorf("DefaultClass %q: %+v", dc.name, g)
		}
	}
	bad := []struct {
		p    AppPolicy
		want string
	}{
		{AppPolicy{Default: -1}, "slot policy: default = -1, want 0..65536"},
		{AppPolicy{Default: 1 << 20}, "slot policy: default = 1048576, want 0..65536"},
		{AppPolicy{DefaultClass: "HIGH"}, `slot policy: default_class = "HIGH", want "low" or "high"`},
		{AppPolicy{Rules: []AppRule{{UID: &u1, MaxSlots: 1}, {UID: &u1, MaxSlots: -1}}}, "slot policy: rules[1].max_slots = -1, want 0..65536"},
		{AppPolicy{Rules: []AppRule{{GID: &g1, Class: "medium", MaxSlots: 1}}}, `slot policy: rules[0].class = "medium", want "low" or "high"`},
		// A name is a label: a rule on it alone, or narrowed by it, is refused.
		{AppPolicy{Rules: []AppRule{{Name: "lat", Class: "high", MaxSlots: 1}}}, `slot policy: rules[0].name = "lat": a rule cannot match on a portal's name`},
		{AppPolicy{Rules: []AppRule{{UID: &u1, Name: "lat", Class: "high", MaxSlots: 1}}}, `rules[0].name = "lat"`},
		{AppPolicy{Rules: []AppRule{{Class: "high", MaxSlots: 1}}}, "slot policy: rules[0] sets neither uid nor gid"},
	}
	for _, b := range bad {
		err := b.p.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Validate(%+v) = %v, want %q", b.p, err, b.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	u := uint32(1)
	for name, mut := range map[string]func(*Config){
		"Sockets = none":    func(c *Config) { c.Sockets = nil },
		"Sockets[0].Path":   func(c *Config) { c.Sockets[0].Path = "" },
		"Sockets[0].Mode":   func(c *Config) { c.Sockets[0].Mode = 0o1777 },
		"Sockets[0].Tenant": func(c *Config) { c.Sockets[0].Tenant = "pod" },
		"Sockets[0].Name":   func(c *Config) { c.Sockets[0].Name = "a b" },
		"Sockets[1].Path": func(c *Config) {
			c.Sockets = append(c.Sockets, SocketConfig{Path: c.Sockets[0].Path, Name: "b", Tenant: "uid"})
		},
		"Sockets[1].Name": func(c *Config) { c.Sockets = append(c.Sockets, SocketConfig{Path: "/b", Name: "main", Tenant: "uid"}) },
		"Sockets[1].Quota": func(c *Config) {
			c.Sockets = append(c.Sockets, SocketConfig{Path: "/b", Tenant: "uid", Quota: Quota{Portals: Count(1 << 20)}})
		},
		"Sockets[0].Policy, socket main": func(c *Config) { c.Sockets[0].Policy.Rules = []AppRule{{UID: &u, Name: "x"}} },
		"Quota":                          func(c *Config) { c.Quota.Slots = nil },
		"Guarantee":                      func(c *Config) { c.Guarantee.Regions = nil },
		"Guarantee: regions":             func(c *Config) { c.Guarantee.Regions = Count(1 << 17) },
		"ReserveTenants":                 func(c *Config) { c.ReserveTenants = -1 },
		"OpenDeadline":                   func(c *Config) { c.OpenDeadline = 0 },
		"MaxMemoryObjects":               func(c *Config) { c.MaxMemoryObjects = -1 },
		"Sockets[1].Guarantee": func(c *Config) {
			c.Sockets = append(c.Sockets, SocketConfig{Path: "/b", Tenant: "uid", Guarantee: Quota{Conns: Count(1 << 21)}})
		},
		"CmdCap":               func(c *Config) { c.CmdCap = 3 },
		"CplCap":               func(c *Config) { c.CplCap = 1 << 17 },
		"MaxConns":             func(c *Config) { c.MaxConns = 0 },
		"MaxRegionBytes":       func(c *Config) { c.MaxRegionBytes = 0 },
		"MaxPortalBytes":       func(c *Config) { c.MaxPortalBytes = c.MaxRegionBytes - 1 },
		"Hugetlb":              func(c *Config) { c.Hugetlb = "always" },
		"MaxIdentities":        func(c *Config) { c.MaxIdentities = c.MaxConns - 1 },
		"IdentityRate":         func(c *Config) { c.IdentityRate = 0 },
		"StatsRate/StatsBurst": func(c *Config) { c.StatsBurst = 0 },
		"UIDMap[0]":            func(c *Config) { c.UIDMap = []UIDMapEntry{{UIDs: "x"}} },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestShmSealedAndSized(t *testing.T) {
	m, err := newShm("onerma-test", 5000, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.release()
	if len(m.mem) != 8192 || m.hugetlb {
		t.Fatalf("mapping %d bytes hugetlb %v, want 8192 plain", len(m.mem), m.hugetlb)
	}
	got, err := unix.FcntlInt(uintptr(m.fd), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got&seals != seals {
		t.Fatalf("seals %#x, want %#x", got, seals)
	}
	if err := unix.Ftruncate(m.fd, 4096); err == nil {
		t.Fatal("shrinking a sealed memfd succeeded")
	}
	if err := unix.Ftruncate(m.fd, 1<<20); err == nil {
		t.Fatal("growing a sealed memfd succeeded")
	}
}

// TestShmHugetlb needs free huge pages (echo 4 > /proc/sys/vm/nr_hugepages).
func TestShmHugetlb(t *testing.T) {
	hp := hugePageSize()
	if hp == 0 {
		t.Skip("no huge page size in /proc/meminfo")
	}
	m, err := newShm("onerma-test-huge", hp, hp)
	if err != nil {
		t.Skipf("no free huge pages: %v (the server then falls back to a plain memfd)", err)
	}
	defer m.release()
	if !m.hugetlb {
		t.Fatal("not marked hugetlb")
	}
	if uint64(len(m.mem)) != hp {
		t.Fatalf("mapping %d bytes, want %d", len(m.mem), hp)
	}
	got, err := unix.FcntlInt(uintptr(m.fd), unix.F_GET_SEALS, 0)
	if err != nil || got&seals != seals {
		t.Fatalf("seals %#x, %v", got, err)
	}
	m.mem[0], m.mem[hp-1] = 1, 2
}

// TestDatapathCoversEveryField fails when engine.TenantCounters gains a
// counter that the sum over cores or the stats reply does not carry.
func TestDatapathCoversEveryField(t *testing.T) {
	var c engine.TenantCounters
	cv := reflect.ValueOf(&c).Elem()
	for i := range cv.NumField() {
		cv.Field(i).SetUint(uint64(1000 + i))
	}
	c.Epoch = 5
	old := engine.TenantCounters{Epoch: 4, Posted: 99}
	sum := sumDatapath([][]engine.TenantCounters{{c}, {old}, {c}})
	sv := reflect.ValueOf(&sum[0]).Elem()
	m := reflect.ValueOf(datapathMsg(&sum[0])).Elem()
	for i := range cv.NumField() {
		name := cv.Type().Field(i).Name
		want := 2 * cv.Field(i).Uint() // the two cores of epoch 5; not the one still at 4
		if name == "Epoch" {
			if sv.Field(i).Uint() != 5 {
				t.Errorf("sum's epoch %d, want 5", sv.Field(i).Uint())
			}
			continue
		}
		if got := sv.Field(i).Uint(); got != want {
			t.Errorf("sum's %s = %d, want %d", name, got, want)
		}
		mf := m.FieldByName(name)
		if !mf.IsValid() {
			t.Errorf("ctlmsg.TenantDatapath has no field %s", name)
			continue
		}
		if mf.Uint() != want {
			t.Errorf("TenantDatapath.%s = %d, want %d", name, mf.Uint(), want)
		}
	}
}
