package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// TIMEOUT's default follows the port a config creates; an explicit
// engine.timeout, in the file or on the command line, wins.
func TestTimeoutDefaultPerPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want time.Duration
	}{
		{"embedded default: net_tap", nil, 7 * time.Millisecond},
		{"memif", []string{"-vdev", "net_memif0,role=client,id=0", "-port-name", "net_memif0"}, 2 * time.Millisecond},
		{"af_packet", []string{"-vdev", "net_af_packet1,iface=eth1", "-port-name", "net_af_packet1"}, 8 * time.Millisecond},
		{"af_xdp", []string{"-vdev", "net_af_xdp0,iface=eth0", "-port-name", "net_af_xdp0"}, 6 * time.Millisecond},
		{"net_ring", []string{"-vdev", "net_ring0", "-port-name", "net_ring0"}, 2 * time.Millisecond},
		{"a NIC of DPDK's own", []string{"-vdev", "", "-port-name", "0000:03:00.0"}, 2 * time.Millisecond},
		{"another vdev", []string{"-vdev", "net_pcap0,iface=eth0", "-port-name", "net_pcap0"}, 10 * time.Millisecond},
		{"explicit flag wins", []string{"-vdev", "net_memif0", "-port-name", "net_memif0", "-timeout", "25ms"}, 25 * time.Millisecond},
		{"explicit 0: the port's", []string{"-vdev", "net_af_xdp0,iface=x", "-port-name", "net_af_xdp0", "-timeout", "0s"}, 6 * time.Millisecond},
		{"memif in backoff: at least 10 ms", []string{"-vdev", "net_memif0", "-port-name", "net_memif0", "-poll-mode", "backoff"}, 10 * time.Millisecond},
		{"memif yielding: busy's", []string{"-vdev", "net_memif0", "-port-name", "net_memif0", "-poll-mode", "yield"}, 2 * time.Millisecond},
		{"explicit flag wins in backoff", []string{"-vdev", "net_memif0", "-port-name", "net_memif0", "-poll-mode", "backoff", "-timeout", "3ms"}, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cfg, _, err := loadConfig(tc.args, &stderr)
			if err != nil {
				t.Fatal(err, stderr.String())
			}
			if got := time.Duration(cfg.Engine.Timeout); got != tc.want {
				t.Fatalf("timeout %v, want %v", got, tc.want)
			}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	file := writeFile(t, `{"port": {"name": "net_memif0", "vdev": "net_memif0"}, "engine": {"timeout": "3ms"}}`)
	var stderr bytes.Buffer
	cfg, _, err := loadConfig([]string{"-config", file}, &stderr)
	if err != nil {
		t.Fatal(err, stderr.String())
	}
	if got := time.Duration(cfg.Engine.Timeout); got != 3*time.Millisecond {
		t.Fatalf("the file's timeout lost: %v", got)
	}
}

// The NACK threshold's default is §6.1's derivation from the port type's
// measurements; engine.serve_rate and engine.timeout change its inputs,
// engine.nack_threshold overrides it, and -print-config shows the config
// (0: derived).
func TestNackThresholdDerived(t *testing.T) {
	tap := []string{}
	memif := []string{"-vdev", "net_memif0", "-port-name", "net_memif0"}
	for _, tc := range []struct {
		name   string
		args   []string
		want   int
		source string
		inputs string
	}{
		{"net_tap: (7ms − 1.532ms) × 64/412µs", tap, 849, "derived", "timeout: port net_tap's default; rtt: port net_tap's measured; serve rate: port net_tap's measured"},
		{"memif: above the queue", memif, 1024, "derived", "rtt: port net_memif's measured"},
		{"memif, a deeper queue", append(memif, "-inbound-queue", "4096"), 1186, "derived", ""},
		{"af_packet", []string{"-vdev", "net_af_packet1,iface=eth1", "-port-name", "net_af_packet1"}, 750, "derived", ""},
		{"af_xdp", []string{"-vdev", "net_af_xdp0,iface=eth0", "-port-name", "net_af_xdp0"}, 1024, "derived", ""},
		{"a NIC: memif's", []string{"-vdev", "", "-port-name", "0000:03:00.0", "-inbound-queue", "4096"}, 1186, "derived", "rtt: port nic's measured"},
		{"another vdev", []string{"-vdev", "net_pcap0,iface=eth0", "-port-name", "net_pcap0"}, 926, "derived", "rtt: a quarter of an unmeasured port's 10 ms; serve rate: the slowest measured port's"},
		{"serve_rate", []string{"-serve-rate", "100000"}, 546, "derived", "serve rate: engine.serve_rate"},
		{"timeout", []string{"-timeout", "3ms"}, 228, "derived", "timeout: engine.timeout"},
		{"override", []string{"-nack-threshold", "500"}, 500, "engine.nack_threshold", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := loadConfig(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			ec, err := cfg.engineConfig(wire.MAC{2, 0, 0, 0, 0, 1}, aesni.NewVolatileIVSource(aesni.IVConfig{}))
			if err != nil {
				t.Fatal(err)
			}
			m := cfg.nackThresholdMsg()
			if ec.NackThreshold != tc.want || m.Threshold != tc.want || m.Source != tc.source || !strings.Contains(m.Inputs, tc.inputs) {
				t.Fatalf("engine %d, stats %+v; want %d from %s", ec.NackThreshold, m, tc.want, tc.source)
			}
			if tc.source != "derived" && m.Derived != 849 {
				t.Fatalf("derived %d beside the override, want 849", m.Derived)
			}
		})
	}
	cfg, _, _ := loadConfig(nil, &bytes.Buffer{})
	if m := cfg.nackThresholdMsg(); m.Formula != "(7ms − 1.532ms − 0s) × 155340/s = 849.4 → 849 (within [1, 1024])" {
		t.Fatalf("formula %q", m.Formula)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-print-config"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"nack_threshold": 0,`) || !strings.Contains(stdout.String(), `"serve_rate": 0,`) {
		t.Fatalf("-print-config: %s", stdout.String())
	}
	cfg, _, _ = loadConfig([]string{"-serve-rate", "-1"}, &bytes.Buffer{})
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "engine.serve_rate") {
		t.Fatalf("serve_rate -1: %v", err)
	}
}
