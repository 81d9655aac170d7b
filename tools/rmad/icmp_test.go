package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// TestICMPConfig: engine.icmp_rate and icmp_burst come from the default,
// the file and the flags, and reach engine.Config; 0 turns replies off.
func TestICMPConfig(t *testing.T) {
	for _, tc := range []struct {
		name        string
		file        string
		args        []string
		rate, burst int
	}{
		{"default", "", nil, 1000, 50},
		{"file", `{"engine": {"icmp_rate": 0}}`, nil, 0, 50},
		{"flags over the file", `{"engine": {"icmp_rate": 0, "icmp_burst": 3}}`, []string{"-icmp-rate", "20", "-icmp-burst", "5"}, 20, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"-config", writeFile(t, tc.file)}, args...)
			}
			cfg, _, err := loadConfig(args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			ec, err := cfg.engineConfig(wire.MAC{2, 0, 0, 0, 0, 1}, aesni.NewVolatileIVSource(aesni.IVConfig{}))
			if err != nil {
				t.Fatal(err)
			}
			if ec.ICMPRate != tc.rate || ec.ICMPBurst != tc.burst {
				t.Fatalf("ICMPRate %d ICMPBurst %d, want %d %d", ec.ICMPRate, ec.ICMPBurst, tc.rate, tc.burst)
			}
		})
	}
}

// TestFragWatch: a warning per check that finds new fragmentation-needed
// reports, naming the latest destination, its MTU, the engine's and how
// many came; nothing when none came.
func TestFragWatch(t *testing.T) {
	var out bytes.Buffer
	cfg := defaultConfig()
	w := &fragWatch{log: zerolog.New(&out), cfg: &cfg, engineMTU: 1500}
	lines := func() []map[string]any {
		var ls []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			ls = append(ls, m)
		}
		out.Reset()
		return ls
	}
	w.check(&engine.Stats{})
	if ls := lines(); len(ls) != 0 {
		t.Fatalf("logged without a report: %v", ls)
	}
	w.check(&engine.Stats{ICMPFragNeeded: 2, FragNeededDst: 0x0a020002, FragNeededMTU: 1280})
	ls := lines()
	want := "icmp fragmentation needed: dst 10.2.0.2 path_mtu 1280 engine_mtu 1500 (set engine.routes mtu for this destination)"
	if len(ls) != 1 || ls[0]["message"] != want || ls[0]["level"] != "warn" || ls[0]["dst"] != "10.2.0.2" ||
		ls[0]["path_mtu"] != 1280.0 || ls[0]["engine_mtu"] != 1500.0 || ls[0]["messages"] != 2.0 || ls[0]["route"] != "on-link" {
		t.Fatalf("got %v", ls)
	}
	w.check(&engine.Stats{ICMPFragNeeded: 2, FragNeededDst: 0x0a020002, FragNeededMTU: 1280})
	if ls := lines(); len(ls) != 0 {
		t.Fatalf("logged again without a new report: %v", ls)
	}
	w.check(&engine.Stats{ICMPFragNeeded: 3, FragNeededDst: 0x0a030009, FragNeededMTU: 0})
	if ls := lines(); len(ls) != 1 || ls[0]["dst"] != "10.3.0.9" || ls[0]["path_mtu"] != 0.0 || ls[0]["messages"] != 1.0 {
		t.Fatalf("got %v", ls)
	}
}
