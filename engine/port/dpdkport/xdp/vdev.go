package xdp

import (
	"fmt"
	"strconv"
	"strings"
)

// Driver is the name of DPDK's AF_XDP driver; a vdev whose name starts
// with it (net_af_xdp0, net_af_xdp_eth1) creates an AF_XDP port.
const Driver = "net_af_xdp"

// IsAFXDP reports whether the --vdev argument vdev creates an AF_XDP port.
func IsAFXDP(vdev string) bool {
	name, _, _ := strings.Cut(vdev, ",")
	return strings.HasPrefix(name, Driver)
}

// Vdev is a parsed net_af_xdp --vdev argument, such as
// "net_af_xdp0,iface=eth1,start_queue=2,xdp_prog=/run/steer.o".
type Vdev struct {
	Name       string // the ethdev's name
	Iface      string // iface: the kernel interface (required)
	StartQueue int    // start_queue: the first rx queue with a socket (default 0)
	QueueCount int    // queue_count: queues with a socket (default 1)
	Prog       string // xdp_prog: the XDP object DPDK attaches ("": its default program)
	arg        string
}

// ParseVdev parses a net_af_xdp --vdev argument. Keys other than those of
// Vdev are left to DPDK.
func ParseVdev(arg string) (Vdev, error) {
	fields := strings.Split(arg, ",")
	v := Vdev{Name: fields[0], QueueCount: 1, arg: arg}
	if !strings.HasPrefix(v.Name, Driver) {
		return Vdev{}, fmt.Errorf("xdp: vdev %q: not a %s device", arg, Driver)
	}
	for _, f := range fields[1:] {
		k, val, ok := strings.Cut(f, "=")
		if !ok {
			return Vdev{}, fmt.Errorf("xdp: vdev %q: %q is not key=value", arg, f)
		}
		var err error
		switch k {
		case "iface":
			v.Iface = val
		case "xdp_prog":
			v.Prog = val
		case "start_queue":
			v.StartQueue, err = strconv.Atoi(val)
		case "queue_count":
			v.QueueCount, err = strconv.Atoi(val)
		}
		if err != nil {
			return Vdev{}, fmt.Errorf("xdp: vdev %q: %s: %w", arg, k, err)
		}
	}
	switch {
	case v.Iface == "":
		return Vdev{}, fmt.Errorf("xdp: vdev %q: no iface=", arg)
	case v.StartQueue < 0 || v.StartQueue >= MaxQueues:
		return Vdev{}, fmt.Errorf("xdp: vdev %q: start_queue %d, want 0..%d", arg, v.StartQueue, MaxQueues-1)
	case v.QueueCount < 1 || v.StartQueue+v.QueueCount > MaxQueues:
		return Vdev{}, fmt.Errorf("xdp: vdev %q: queue_count %d, want 1..%d", arg, v.QueueCount, MaxQueues-v.StartQueue)
	}
	return v, nil
}

// WithProg is the argument with xdp_prog=path added (path may not hold a
// comma: DPDK splits its arguments at commas).
func (v Vdev) WithProg(path string) (string, error) {
	if v.Prog != "" {
		return "", fmt.Errorf("xdp: vdev %q already names a program", v.arg)
	}
	if strings.ContainsAny(path, ",=") {
		return "", fmt.Errorf("xdp: program path %q holds a comma or '='", path)
	}
	return v.arg + ",xdp_prog=" + path, nil
}

// String is the argument as given.
func (v Vdev) String() string { return v.arg }
