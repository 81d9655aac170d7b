package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/onerma/onerma/ctlmsg"
)

// TestNoisySelection: make bench's default runs the noisy-neighbour
// setups, and either name selects them.
func TestNoisySelection(t *testing.T) {
	for _, only := range []string{allSetups, "noisy-neighbour", "noisy-neighbour-alone", "isolation,noisy-neighbour"} {
		if !selects(only, "noisy-neighbour") {
			t.Errorf("-only %s does not run the noisy-neighbour setups", only)
		}
	}
	if selects("isolation,noisy", "noisy-neighbour") || selects("isolation", "noisy-neighbour") {
		t.Error("a list without the setups runs them")
	}
	for _, s := range []string{"noisy-neighbour-alone", "noisy-neighbour"} {
		if !slices.Contains(strings.Split(allSetups, ","), s) {
			t.Errorf("allSetups lacks %s", s)
		}
	}
}

// TestNoisyRatios: each round pairs the victim's alone and beside rows of
// a size in the order measured (odd rounds beside first); the hostile
// tenant's rows and rows without a p99 count in no round.
func TestNoisyRatios(t *testing.T) {
	var rows []Row
	for k, v := range [][2]float64{{2, 6}, {3, 3}, {4, 20}} { // p99 alone, beside
		alone := []Row{rw("onerma", "noisy-neighbour-alone", "read_lat", 64, p99us(v[0]), engP99(1)),
			rw("onerma", "noisy-neighbour-alone", "read_lat", 4096, p99us(10*v[0]))}
		beside := []Row{rw("onerma", "noisy-neighbour", "read_lat", 64, p99us(v[1]), engP99(2)),
			rw("onerma", "noisy-neighbour", "read_lat", 4096, p99us(10*v[1])),
			rw("onerma", "noisy-neighbour", "read_bw", 4096, depth(64), p99us(100)),
			rw("onerma", "noisy-neighbour", "read_bw", 64, depth(64), p99us(100))}
		if k%2 == 1 {
			rows = append(append(rows, beside...), alone...)
		} else {
			rows = append(append(rows, alone...), beside...)
		}
	}
	rows = append(rows, rw("onerma", "noisy-neighbour", "read_lat", 64)) // no p99
	s, ok := noisyRatios(rows, 64)
	if !ok || !equalF(s.ratios, []float64{3, 1, 5}) || !equalF(s.alone, []float64{2, 3, 4}) || !equalF(s.beside, []float64{6, 3, 20}) || !equalF(s.engRatios, []float64{2, 2, 2}) {
		t.Fatalf("64 B: %+v, %v", s, ok)
	}
	m, ok := noisyMetric(64)(rows)
	if !ok || m.value != "×3.00 (3 rounds; p99 6.00 µs / 3.00 µs; the engine's own p99 ×2.00)" || m.goal != "≤ ×2" || m.verdict != notMet {
		t.Errorf("64 B metric %+v", m)
	}
	if s, ok := noisyRatios(rows, 4096); !ok || !equalF(s.ratios, []float64{3, 1, 5}) || len(s.engRatios) != 0 {
		t.Errorf("4 KB: %+v, %v", s, ok)
	}
	// A round whose beside rows are cut short pairs nothing.
	if _, ok := noisyRatios(rows[:2], 64); ok {
		t.Error("a ratio from alone rows only")
	}
	good := []Row{rw("onerma", "noisy-neighbour", "read_lat", 64, p99us(3)), rw("onerma", "noisy-neighbour-alone", "read_lat", 64, p99us(2))}
	if m, ok := noisyMetric(64)(good); !ok || m.verdict != met || m.value != "×1.50 (1 rounds; p99 3.00 µs / 2.00 µs)" {
		t.Errorf("a met metric %+v", m)
	}
	// A run with more engine flags is an experiment: no headline from it.
	exp := slices.Clone(good)
	exp[0].Note = "victim tenant (uid 2012) on the loopback engine (busy on CPU 1" + nnArgsMark + "-window-bytes 16384), ..."
	if m, ok := noisyMetric(64)(exp); ok {
		t.Errorf("a headline from an experiment's rows: %+v", m)
	}
	for _, u := range ucxRatios(append(rows, rw("ucx-tcp", "tcp", "read_bw", 4096, depth(64), ops(1e5)))) {
		if strings.HasPrefix(u.row.Setup, "noisy-neighbour") {
			t.Errorf("a noisy-neighbour row paired with ucx-tcp: %+v", *u.row)
		}
	}
}

// TestNoisyConfig: the engine's config overlay is JSON naming the static
// neighbour and the passwd file, and the passwd file names both uids.
func TestNoisyConfig(t *testing.T) {
	var c struct {
		Engine struct {
			Neighbors []struct{ IP, MAC string }
		}
		Ctl struct {
			PasswdFile string `json:"passwd_file"`
			SubuidFile string `json:"subuid_file"`
		}
	}
	cfg := fmt.Appendf(nil, nnConfig, nnDeadIP, nnDeadMAC, "/d/passwd")
	if err := json.Unmarshal(cfg, &c); err != nil || len(c.Engine.Neighbors) != 1 || c.Engine.Neighbors[0].IP != nnDeadIP ||
		c.Engine.Neighbors[0].MAC != nnDeadMAC || c.Ctl.PasswdFile != "/d/passwd" || c.Ctl.SubuidFile != "" {
		t.Fatalf("config %+v, %v:\n%s", c, err, cfg)
	}
	for _, uid := range []string{":2011:2011:", ":2012:2012:"} {
		if !strings.Contains(nnPasswd, uid) {
			t.Errorf("passwd file lacks %s:\n%s", uid, nnPasswd)
		}
	}
	if nnTenant(nnVictimUID) != "main uid 2012" || nnTenant(nnHostileUID) != "main uid 2011" {
		t.Errorf("tenant names %q, %q", nnTenant(nnVictimUID), nnTenant(nnHostileUID))
	}
	if a := asUID(nnHostileUID); a.Credential.Uid != 2011 || a.Credential.Gid != 2011 || a.Pdeathsig == 0 {
		t.Errorf("hostile process attributes %+v", a)
	}
	var dst int
	for _, h := range nnHostile {
		if slices.Contains(h.args, "-dst") {
			dst++
		}
	}
	if dst != 1 {
		t.Errorf("%d hostile processes toward the dead address, want 1", dst)
	}
}

// TestMovedCounters: each tenant's data-path counters that grew (gauges
// left out), then the engine's chosen counters and non-OK completions.
func TestMovedCounters(t *testing.T) {
	before := &ctlmsg.Stats{ReqNacked: 1, RxFrames: 5, Completed: map[string]uint64{"OK": 10, "TIMEOUT": 2},
		Tenants: []ctlmsg.TenantStats{{Name: "main uid 2012", Datapath: &ctlmsg.TenantDatapath{Posted: 10, WindowHeld: 4096}}}}
	after := &ctlmsg.Stats{ReqNacked: 4, RxFrames: 50, ReqNackedOwner: 3, Completed: map[string]uint64{"OK": 20, "TIMEOUT": 66, "DISPATCH_TIMEOUT": 1},
		Tenants: []ctlmsg.TenantStats{
			{Name: "main uid 2011", Datapath: &ctlmsg.TenantDatapath{Posted: 100, NackedOwner: 3, Queued: 9}},
			{Name: "main uid 2012", Datapath: &ctlmsg.TenantDatapath{Posted: 12, ShareWaits: 1, WindowHeld: 0}}}}
	got := movedCounters(before, after, [][2]string{{"victim", "main uid 2012"}, {"hostile", "main uid 2011"}, {"other", "main uid 9"}})
	want := "victim: posted +2, share_waits +1; hostile: posted +100, nacked_owner +3; other: none; engine: req_nacked +3, req_nacked_owner +3, DISPATCH_TIMEOUT +1, TIMEOUT +64"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
