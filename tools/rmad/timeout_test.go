package main

import (
	"bytes"
	"testing"
	"time"
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
