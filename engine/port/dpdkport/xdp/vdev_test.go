package xdp

import (
	"strings"
	"testing"
)

func TestParseVdev(t *testing.T) {
	ok := []struct {
		arg  string
		want Vdev
	}{
		{"net_af_xdp0,iface=eth1", Vdev{Name: "net_af_xdp0", Iface: "eth1", QueueCount: 1}},
		{"net_af_xdp_x,iface=ens5,start_queue=3,queue_count=2,busy_budget=0,xdp_prog=/tmp/p.o",
			Vdev{Name: "net_af_xdp_x", Iface: "ens5", StartQueue: 3, QueueCount: 2, Prog: "/tmp/p.o"}},
	}
	for _, c := range ok {
		got, err := ParseVdev(c.arg)
		c.want.arg = c.arg
		if err != nil || got != c.want {
			t.Errorf("ParseVdev(%q) = %+v, %v; want %+v", c.arg, got, err, c.want)
		}
		if !IsAFXDP(c.arg) {
			t.Errorf("IsAFXDP(%q) = false", c.arg)
		}
	}
	bad := map[string]string{
		"net_af_packet0,iface=eth1":                            "not a net_af_xdp device",
		"net_af_xdp0":                                          "no iface=",
		"net_af_xdp0,iface=eth1,start_queue=x":                 "start_queue",
		"net_af_xdp0,iface=eth1,start_queue=256":               "start_queue 256",
		"net_af_xdp0,iface=eth1,queue_count=0":                 "queue_count 0",
		"net_af_xdp0,iface=eth1,queue_count=2,start_queue=255": "queue_count 2",
		"net_af_xdp0,iface":                                    "not key=value",
	}
	for arg, want := range bad {
		if _, err := ParseVdev(arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVdev(%q) = %v, want an error saying %q", arg, err, want)
		}
	}
	for _, a := range []string{"net_tap0,iface=x", "net_af_packet0,iface=x", "", "af_xdp0"} {
		if IsAFXDP(a) {
			t.Errorf("IsAFXDP(%q) = true", a)
		}
	}
}

func TestWithProg(t *testing.T) {
	v, err := ParseVdev("net_af_xdp0,iface=eth1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.WithProg("/run/onerma/steer.o")
	if err != nil || got != "net_af_xdp0,iface=eth1,xdp_prog=/run/onerma/steer.o" {
		t.Errorf("WithProg = %q, %v", got, err)
	}
	if _, err := v.WithProg("/a,b"); err == nil {
		t.Error("WithProg of a path with a comma succeeded")
	}
	given, _ := ParseVdev(got)
	if _, err := given.WithProg("/x"); err == nil {
		t.Error("WithProg on a vdev naming a program succeeded")
	}
}
