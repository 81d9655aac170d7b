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
		Portals: []ctlmsg.PortalStats{{ID: 3, Name: "reader"}}}
	var b bytes.Buffer
	printStats(&b, one)
	for _, want := range []string{"posted              7\n", "port.name                net_memif0\n", "loop.stalls              2\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("one core: no %q in\n%s", want, b.String())
		}
	}
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
