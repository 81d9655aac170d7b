package testbed

import (
	"fmt"
	"os/exec"
	"strings"
)

// VethPair is two network namespaces joined by a veth pair, for engines on
// af_packet and AF_XDP ports: frames cross the kernel's veth driver between two
// separate network stacks, as between two hosts.
type VethPair struct {
	NSA, NSB string // namespace names
	IfA, IfB string // interface names (IfA in NSA, IfB in NSB)
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewVethPair creates namespaces <prefix>a and <prefix>b with a veth pair
// between them, up, with IPv6 off (no stray router solicitations). The
// interfaces get no IPv4 address: the kernel must not answer for the
// engines. Any leftovers of an earlier run with the same prefix are
// removed first.
func NewVethPair(prefix string) (*VethPair, error) {
	v := &VethPair{NSA: prefix + "a", NSB: prefix + "b", IfA: prefix + "va", IfB: prefix + "vb"}
	v.Close()
	steps := [][]string{
		{"netns", "add", v.NSA},
		{"netns", "add", v.NSB},
		{"link", "add", v.IfA, "type", "veth", "peer", "name", v.IfB},
		{"link", "set", v.IfA, "netns", v.NSA},
		{"link", "set", v.IfB, "netns", v.NSB},
		{"-n", v.NSA, "link", "set", "lo", "up"},
		{"-n", v.NSB, "link", "set", "lo", "up"},
		{"-n", v.NSA, "link", "set", v.IfA, "up"},
		{"-n", v.NSB, "link", "set", v.IfB, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			v.Close()
			return nil, err
		}
	}
	for _, p := range [][2]string{{v.NSA, v.IfA}, {v.NSB, v.IfB}} {
		exec.Command("ip", "netns", "exec", p[0], "sysctl", "-qw", "net.ipv6.conf."+p[1]+".disable_ipv6=1").Run()
	}
	return v, nil
}

// Close removes both namespaces (and with them the veth pair).
func (v *VethPair) Close() {
	exec.Command("ip", "netns", "del", v.NSA).Run()
	exec.Command("ip", "netns", "del", v.NSB).Run()
}

// AFPacket returns engine options for an af_packet port on iface inside ns.
func AFPacket(rmad, dir, name, ip, ns, iface string) Options {
	return AFPacketQueues(rmad, dir, name, ip, ns, iface, 1)
}

// AFPacketQueues is AFPacket with qpairs queue pairs (sockets among which
// the kernel spreads the interface's frames by flow) for an engine of as
// many polling cores.
func AFPacketQueues(rmad, dir, name, ip, ns, iface string, qpairs int) Options {
	return Options{Rmad: rmad, Dir: dir, Name: name, IP: ip, NetNS: ns, CPU: -1,
		PortName: "net_af_packet0", Vdev: fmt.Sprintf("net_af_packet0,iface=%s,qpairs=%d", iface, qpairs)}
}

// AFXDP returns engine options for an AF_XDP port (DPDK's net_af_xdp) on
// iface inside ns: rmad gives the port its own XDP program, which steers
// the frames for the engine's address to it and leaves every other frame
// to the kernel, so the interface may carry a kernel address of its own
// (AddAddr). In a namespace the veth runs XDP in its driver, and its
// AF_XDP socket in copy mode (veth has no zero-copy).
func AFXDP(rmad, dir, name, ip, ns, iface string) Options {
	return Options{Rmad: rmad, Dir: dir, Name: name, IP: ip, NetNS: ns, CPU: -1,
		PortName: "net_af_xdp0", Vdev: "net_af_xdp0,iface=" + iface}
}

// AddAddr gives the kernel the address prefix (CIDR, "10.1.0.9/24") on
// iface in namespace ns ("": the current one).
func AddAddr(ns, iface, prefix string) error {
	args := []string{"addr", "add", prefix, "dev", iface}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	return ip(args...)
}

// Tap returns engine options for a net_tap port named iface. The engine
// gets its own MAC: a Linux bridge delivers frames addressed to a port's
// own interface MAC to the host instead of forwarding them, and the tap
// interface carries the port's MAC.
func Tap(rmad, dir, name, ip, iface, mac string) Options {
	return Options{Rmad: rmad, Dir: dir, Name: name, IP: ip, CPU: -1,
		PortName: "net_tap0", Vdev: "net_tap0,iface=" + iface, Extra: []string{"-mac", mac}}
}

// Bridge is a Linux bridge joining existing interfaces (the tap interfaces
// of running engines), with STP off so its ports forward at once.
type Bridge struct{ Name string }

// NewBridge creates bridge name (replacing a leftover) and enslaves ifaces.
func NewBridge(name string, ifaces ...string) (*Bridge, error) {
	b := &Bridge{Name: name}
	b.Close()
	steps := [][]string{{"link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"}}
	for _, i := range ifaces {
		steps = append(steps, []string{"link", "set", i, "master", name}, []string{"link", "set", i, "up"})
	}
	steps = append(steps, []string{"link", "set", name, "up"})
	for _, s := range steps {
		if err := ip(s...); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// Close deletes the bridge.
func (b *Bridge) Close() { exec.Command("ip", "link", "del", b.Name).Run() }
