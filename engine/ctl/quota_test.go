package ctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/onerma/onerma/ctlmsg"
)

func TestAmountJSON(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Amount
	}{
		{`0`, Amount{}},
		{`1073741824`, Amount{N: 1 << 30}},
		{`"25%"`, Amount{Percent: 25}},
		{`"100%"`, Amount{Percent: 100}},
	} {
		var a Amount
		if err := json.Unmarshal([]byte(tt.in), &a); err != nil || a != tt.want {
			t.Errorf("%s: %+v %v", tt.in, a, err)
		}
		if b, _ := json.Marshal(a); string(b) != tt.in {
			t.Errorf("%+v renders as %s, want %s", a, b, tt.in)
		}
	}
	for _, bad := range []string{`-1`, `1.5`, `"0%"`, `"101%"`, `"25"`, `"%"`, `"x%"`, `true`} {
		var a Amount
		if err := json.Unmarshal([]byte(bad), &a); err == nil || !strings.Contains(err.Error(), "quota") {
			t.Errorf("%s: %+v %v", bad, a, err)
		}
	}
}

// The defaults: a quarter of the memory, half of the huge pages, portals
// and slots; a socket's quota replaces them field by field.
func TestQuotaResolve(t *testing.T) {
	r := Resources{MemoryBytes: 24 << 30, HugepageBytes: 186 << 21, Portals: 64, Slots: 1024, Regions: 1024, Conns: 256}
	got := DefaultQuota().Resolve(r)
	want := ctlmsg.TenantUsage{Conns: 64, MemoryBytes: 6 << 30, HugepageBytes: 93 << 21, Portals: 32, Slots: 512, Regions: 512}
	if got != want {
		t.Fatalf("default quota %+v, want %+v", got, want)
	}
	q := Quota{MemoryBytes: Count(1 << 20), Portals: Pct(100), Conns: Count(1000)}.Over(DefaultQuota())
	want = ctlmsg.TenantUsage{Conns: 256, MemoryBytes: 1 << 20, HugepageBytes: 93 << 21, Portals: 64, Slots: 512, Regions: 512}
	if got := q.Resolve(r); got != want {
		t.Fatalf("socket quota %+v, want %+v (a count beyond the total: the total)", got, want)
	}
	// The default guarantees fit eight newcomers in the default tables.
	g := DefaultGuarantee().Resolve(r)
	if want := (ctlmsg.TenantUsage{Conns: 4, Portals: 2, Slots: 64, Regions: 16, MemoryBytes: 64 << 20, HugepageBytes: 8 << 20}); g != want {
		t.Fatalf("default guarantee %+v, want %+v", g, want)
	}
	a := amountsOf(g)
	for p := range numPools {
		if 8*a[p] > r.total(p) {
			t.Errorf("%s: 8 × %d > %d", p, a[p], r.total(p))
		}
	}
	if Pct(33).Of(1<<64-1) != (1<<64-1)/100*33+(1<<64-1)%100*33/100 || Pct(50).Of(3) != 1 {
		t.Fatal("percentages of large or small totals")
	}
}

func TestLargestTenants(t *testing.T) {
	var ts []ctlmsg.TenantStats
	for i := range 100 {
		ts = append(ts, ctlmsg.TenantStats{Name: fmt.Sprintf("t%03d", i), TenantUsage: ctlmsg.TenantUsage{MemoryBytes: uint64(i)}})
	}
	got := largest(ts, 64)
	if len(got) != 64 || got[0].Name != "t036" || got[63].Name != "t099" {
		t.Fatalf("%d tenants, first %s last %s", len(got), got[0].Name, got[63].Name)
	}
}
