package main

import (
	"bytes"
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/wire"
)

// TestRoutingConfig: engine.ip as address/prefix length, engine.gateway,
// engine.routes, engine.dscp and engine.neighbor_reachable, from a file
// and from flags, reach engine.Config; the IV state file is named after
// the address alone.
func TestRoutingConfig(t *testing.T) {
	file := writeFile(t, `{"engine": {"ip": "10.1.0.2/24", "gateway": "10.1.0.1",
		"routes": [{"dst": "10.9.0.0/16", "via": "10.1.0.254", "mtu": 1400}, {"dst": "192.168.7.0/24"}],
		"dscp": {"low": 10, "high": 46}, "neighbor_reachable": "10s"}}`)
	fromFile, _, err := loadConfig([]string{"-config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	fromFlags, _, err := loadConfig([]string{"-ip", "10.1.0.2/24", "-gateway", "10.1.0.1",
		"-route", "10.9.0.0/16,via=10.1.0.254,mtu=1400", "-route", "192.168.7.0/24",
		"-dscp-low", "10", "-dscp-high", "46", "-neighbor-reachable", "10s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{"file": fromFile, "flags": fromFlags} {
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ec, err := cfg.engineConfig(wire.MAC{2, 0, 0, 0, 0, 1}, aesni.NewVolatileIVSource(aesni.IVConfig{}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := []engine.Route{
			{Dst: netip.MustParsePrefix("10.9.0.0/16"), Via: netip.MustParseAddr("10.1.0.254"), MTU: 1400},
			{Dst: netip.MustParsePrefix("192.168.7.0/24")},
		}
		switch {
		case ec.LocalIP != netip.MustParseAddr("10.1.0.2") || ec.Subnet != netip.MustParsePrefix("10.1.0.2/24"):
			t.Errorf("%s: address %v subnet %v", name, ec.LocalIP, ec.Subnet)
		case ec.Gateway != netip.MustParseAddr("10.1.0.1") || !reflect.DeepEqual(ec.Routes, want):
			t.Errorf("%s: gateway %v routes %+v", name, ec.Gateway, ec.Routes)
		case ec.DSCP != [abi.NumClass]uint8{abi.ClassLow: 10, abi.ClassHigh: 46} || ec.NeighborReachable != 10*time.Second:
			t.Errorf("%s: dscp %v reachable %v", name, ec.DSCP, ec.NeighborReachable)
		case cfg.Engine.IVState != DefaultIVDir+"/iv-10.1.0.2.state":
			t.Errorf("%s: iv_state %q", name, cfg.Engine.IVState)
		}
	}
	// A bare address keeps its meaning: no subnet, every destination on-link.
	bare, _, _ := loadConfig([]string{"-ip", "10.1.0.2"}, &bytes.Buffer{})
	if ec, err := bare.engineConfig(wire.MAC{2, 0, 0, 0, 0, 1}, aesni.NewVolatileIVSource(aesni.IVConfig{})); err != nil || ec.Subnet.IsValid() || ec.Gateway.IsValid() {
		t.Fatalf("bare address: %v %+v", err, ec)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-ip", "10.1.0.2/33"}, "engine.ip"},
		{[]string{"-ip", "10.1.0.2", "-gateway", "10.1.0.1"}, "engine.gateway 10.1.0.1 needs engine.ip as address/prefix length"},
		{[]string{"-ip", "10.1.0.2/24", "-gateway", "fe80::1"}, "engine.gateway"},
		{[]string{"-ip", "10.1.0.2/24", "-gateway", "10.2.0.1"}, "Gateway (not on-link"},
		{[]string{"-ip", "10.7.0.2/24", "-route", "10.1.0.0/33"}, "engine.routes[0].dst"},
		{[]string{"-ip", "10.7.0.2/24", "-route", "10.9.0.0/16,via=gw"}, "engine.routes[0].via"},
		{[]string{"-ip", "10.7.0.2/24", "-route", "10.9.0.0/16,via=10.8.0.1"}, "Routes[0].Via (not on-link"},
		{[]string{"-ip", "10.7.0.2/24", "-route", "10.9.0.0/16,mtu=100"}, "Routes[0].MTU"},
		{[]string{"-dscp-high", "64"}, "engine.dscp.high 64"},
		{[]string{"-dscp-low", "-1"}, "engine.dscp.low -1"},
		{[]string{"-neighbor-reachable", "0s"}, "NeighborReachable"},
	} {
		cfg, _, err := loadConfig(tt.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: validate = %v, want %q", tt.args, err, tt.want)
		}
	}
	for _, bad := range []string{"10.9.0.0/16,mtu=big", "10.9.0.0/16,dev=eth0", ",via=10.1.0.1"} {
		if _, _, err := loadConfig([]string{"-route", bad}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "route") {
			t.Errorf("-route %q: %v", bad, err)
		}
	}

	// -print-config shows the routing keys, and what it prints loads back.
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-print-config", "-ip", "10.1.0.2/24", "-gateway", "10.1.0.1",
		"-route", "10.9.0.0/16,via=10.1.0.254,mtu=1400"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	printed := stdout.String()
	for _, want := range []string{`"ip": "10.1.0.2/24"`, `"gateway": "10.1.0.1"`, `"dst": "10.9.0.0/16"`, `"via": "10.1.0.254"`, `"mtu": 1400`,
		`"neighbor_reachable": "30s"`, `"dscp": {`} {
		if !strings.Contains(printed, want) {
			t.Fatalf("-print-config lacks %s:\n%s", want, printed)
		}
	}
	again, _, err := loadConfig([]string{"-config", writeFile(t, printed)}, &stderr)
	if err != nil || again.Engine.Gateway != "10.1.0.1" || len(again.Engine.Routes) != 1 || again.Engine.Routes[0].MTU != 1400 {
		t.Fatalf("printed config loads as %+v, %v", again.Engine, err)
	}
}
