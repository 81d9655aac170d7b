package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/onerma/onerma/ctlmsg"
)

// One core: a counter a line, as rmactl has always printed them. Several:
// a column per core after the sum, and each portal's core.
func TestPrintStats(t *testing.T) {
	one := &ctlmsg.Stats{Posted: 7, Port: &ctlmsg.PortStats{Name: "net_memif0"}, Loop: &ctlmsg.LoopStats{Stalls: 2},
		Portals: []ctlmsg.PortalStats{{ID: 3, Name: "reader"}},
		Tenants: []ctlmsg.TenantStats{{Name: "main uid 1000", Socket: "/run/onerma/rmad.sock",
			TenantUsage: ctlmsg.TenantUsage{Conns: 2, Portals: 1, Slots: 16, Regions: 3, MemoryBytes: 5 << 20, HugepageBytes: 4 << 20},
			Quota:       ctlmsg.TenantUsage{Conns: 64, Portals: 32, Slots: 512, Regions: 512, MemoryBytes: 6 << 30, HugepageBytes: 256 << 20},
			Guarantee:   ctlmsg.TenantUsage{Conns: 4, Portals: 2, Slots: 64, Regions: 16, MemoryBytes: 64 << 20, HugepageBytes: 8 << 20},
			Datapath:    &ctlmsg.TenantDatapath{Posted: 900, ShareWaits: 12, Borrowed: 30, BorrowedBytes: 122880, WindowShare: 131072}},
			{Name: "web", Socket: "/run/onerma/web.sock"}}}
	var b bytes.Buffer
	printStats(&b, one)
	for _, want := range []string{"posted              7\n", "port.name                net_memif0\n", "loop.stalls              2\n",
		"tenant (held/guarantee/quota) conns       portals     slots          regions        memory_mib           hugepage_mib          socket\n",
		"main uid 1000                 2/4/64      1/2/32      16/64/512      3/16/512       5/64/6144            4/8/256               /run/onerma/rmad.sock\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("one core: no %q in\n%s", want, b.String())
		}
	}
	for _, re := range []string{`(?m)^tenant \(data path\) +posted +share_waits +share_dispatch_timeouts +borrowed +borrowed_bytes +window_held +window_share +queued +nacked +nacked_owner +nacked_sender +pulls_deferred +iv_mismatch +replay_lanes_refused +replay_evictions +neighbor_refused$`,
		`(?m)^main uid 1000 +900 +12 +0 +30 +122880 +0 +131072 +0 +0 +0 +0 +0 +0 +0 +0 +0$`} {
		if !regexp.MustCompile(re).MatchString(b.String()) {
			t.Errorf("one core: no line matching %s in\n%s", re, b.String())
		}
	}
	if n := len(regexp.MustCompile(`(?m)^web `).FindAllString(b.String(), -1)); n != 1 {
		t.Errorf("a tenant without data-path counters has a row of them:\n%s", b.String())
	}
	if strings.Contains(b.String(), "nack_threshold") {
		t.Errorf("a NACK threshold nobody gave:\n%s", b.String())
	}
	one.NackThreshold = &ctlmsg.NackThreshold{Threshold: 849, Source: "derived", Derived: 849,
		Formula: "(7ms − 1.532ms − 0s) × 155340/s = 849.4 → 849 (within [1, 1024])", Inputs: "timeout: port net_tap's default"}
	b.Reset()
	printStats(&b, one)
	if want := "\nnack_threshold 849 (derived: (7ms − 1.532ms − 0s) × 155340/s = 849.4 → 849 (within [1, 1024]))\n  timeout: port net_tap's default\n"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in\n%s", want, b.String())
	}
	one.NackThreshold.Threshold, one.NackThreshold.Source = 500, "engine.nack_threshold"
	b.Reset()
	printStats(&b, one)
	if want := "\nnack_threshold 500 (engine.nack_threshold; derived would be 849: (7ms"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in\n%s", want, b.String())
	}
	one.NackThreshold = nil
	if strings.Contains(b.String(), "this tenant only") {
		t.Errorf("an operator's reply said to be one tenant's:\n%s", b.String())
	}
	one.TenantOnly = true
	b.Reset()
	printStats(&b, one)
	if !strings.Contains(b.String(), "\nthe portals and usage of this tenant only") {
		t.Errorf("a tenant's reply not said to be its own:\n%s", b.String())
	}
	core := func(i int, posted, out, stalls uint64) ctlmsg.CoreStats {
		return ctlmsg.CoreStats{Core: i, Stats: ctlmsg.Stats{Posted: posted,
			Port: &ctlmsg.PortStats{Name: "net_memif0", Driver: ctlmsg.PortDriverStats{HandedOut: out}},
			Loop: &ctlmsg.LoopStats{Stalls: stalls}}}
	}
	two := &ctlmsg.Stats{Posted: 10, Port: &ctlmsg.PortStats{Name: "net_memif0", Driver: ctlmsg.PortDriverStats{HandedOut: 12}},
		Loop:    &ctlmsg.LoopStats{Stalls: 1},
		Cores:   []ctlmsg.CoreStats{core(0, 4, 5, 0), core(1, 6, 7, 1)},
		Portals: []ctlmsg.PortalStats{{ID: 0, Core: 1, Name: "app"}}}
	b.Reset()
	printStats(&b, two)
	for _, re := range []string{`(?m)^counter +sum +core0 +core1$`, `(?m)^posted +10 +4 +6$`, `(?m)^port\.driver\.handed_out +12 +5 +7$`,
		`(?m)^loop\.stalls +1 +0 +1$`, `(?m)^1 +0 +app `} {
		if !regexp.MustCompile(re).MatchString(b.String()) {
			t.Errorf("two cores: no line matching %s in\n%s", re, b.String())
		}
	}
}
