package ctl

import (
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
	if len(m.Completed) != 2 || m.Completed["OK"] != 7 || m.Completed["NACK"] != 3 {
		t.Errorf("Completed = %v", m.Completed)
	}
}

func TestSlotPolicy(t *testing.T) {
	u1, u2 := uint32(1000), uint32(2000)
	p := SlotPolicy{Default: 8, Rules: []SlotRule{
		{UID: &u1, Name: "kv", MaxSlots: 512},
		{UID: &u1, MaxSlots: 64},
		{Name: "batch", MaxSlots: 2},
		{UID: &u2, Name: "kv", MaxSlots: 0},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uid  uint32
		name string
		want int
		from string
	}{
		{1000, "kv", 512, `rule 0 (uid=1000 name="kv")`},
		{1000, "other", 64, "rule 1 (uid=1000)"},
		{1000, "batch", 64, "rule 1 (uid=1000)"},
		{3000, "batch", 2, `rule 2 (name="batch")`},
		{2000, "kv", 0, `rule 3 (uid=2000 name="kv")`},
		{3000, "kv", 8, "the default slot cap"},
	}
	for _, tt := range tests {
		got, from := p.Cap(tt.uid, tt.name)
		if got != tt.want || !strings.Contains(from, tt.from) {
			t.Errorf("Cap(%d, %q) = %d, %q; want %d, %q", tt.uid, tt.name, got, from, tt.want, tt.from)
		}
	}
	bad := []SlotPolicy{{Default: -1}, {Default: 1 << 20}, {Rules: []SlotRule{{MaxSlots: -1}}}, {Rules: []SlotRule{{Name: "a b", MaxSlots: 1}}}}
	for _, b := range bad {
		if err := b.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", b)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"SocketPath":     func(c *Config) { c.SocketPath = "" },
		"SocketMode":     func(c *Config) { c.SocketMode = 0o1777 },
		"CmdCap":         func(c *Config) { c.CmdCap = 3 },
		"CplCap":         func(c *Config) { c.CplCap = 1 << 17 },
		"MaxConns":       func(c *Config) { c.MaxConns = 0 },
		"MaxRegionBytes": func(c *Config) { c.MaxRegionBytes = 0 },
		"MaxPortalBytes": func(c *Config) { c.MaxPortalBytes = c.MaxRegionBytes - 1 },
		"Hugetlb":        func(c *Config) { c.Hugetlb = "always" },
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
		t.Fatal(err)
	}
	defer m.release()
	if !m.hugetlb {
		t.Skip("no free huge pages: fell back to a plain memfd (as designed)")
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
