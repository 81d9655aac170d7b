package testbed

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Routed is a routed topology of network namespaces: two subnets joined by
// a Linux router, with four engines on three kinds of port.
//
//	   subnet 1: 10.1.0.0/24          router <p>r           subnet 2: 10.2.0.0/24
//	<p>h1: eth0 ─veth─ h1 ─┐                          ┌─ h3 ─veth─ eth0 :<p>h3
//	  e1 af_packet .2      ├─ br1 .1 ══ ip ══ br2 .1 ─┤    e3 af_packet .2
//	<p>h2: eth0 ─veth─ h2 ─┘     forwarding           └─ tap4: e4 net_tap .3
//	  e2 af_xdp .3                                       (its rmad runs in <p>r)
//
// The router namespace <p>r holds a bridge per subnet carrying the
// subnet's gateway address (.1) and a fixed MAC, and forwards between
// them (net.ipv4.ip_forward=1) as a real router does: no proxy ARP, so
// an engine that ARPs for an off-subnet destination gets no answer;
// strict reverse-path filtering (each subnet is reached through its own
// bridge only); ARP answered only for an address of the interface asked
// on (arp_ignore=1); and no rate limit on the ICMP errors it sends, so
// every frame too large for a smaller MTU toward a subnet draws a
// "fragmentation needed". IPv6 is off in every namespace (no router
// solicitations or MLD reports reach the engines). Each host namespace
// <p>hN has one veth end, eth0, without an IPv4 address (the kernel must
// not answer for the engine on it); its other end, hN, is a port of its
// subnet's bridge. The net_tap engine's rmad runs inside the router
// namespace, so the tap interface it creates appears there, and Attach
// makes it a port of subnet 2's bridge.
//
// The namespaces are named after the prefix: NewRouted first removes any
// left by an earlier run with the same prefix, and Close removes them
// (and with them every interface and bridge of the topology).
type Routed struct {
	Prefix  string
	Router  string // the router namespace
	Subnets []RoutedSubnet
	Hosts   []RoutedHost
}

// RoutedSubnet is one subnet: a bridge in the router namespace that holds
// the gateway's address.
type RoutedSubnet struct {
	Prefix  netip.Prefix
	Gateway netip.Addr // the router's address on the subnet (.1)
	Bridge  string     // the bridge (the router's interface toward the subnet)
	MAC     string     // the bridge's MAC, the gateway's (GatewayMAC(s, 1) until SetGatewayMAC)
}

// PortKind is the kind of DPDK port an engine of the topology runs on.
type PortKind string

const (
	PortAFPacket PortKind = "af_packet" // net_af_packet on a veth end
	PortAFXDP    PortKind = "af_xdp"    // net_af_xdp on a veth end
	PortTap      PortKind = "net_tap"   // net_tap, a bridge port in the router namespace
)

// RoutedHost is where one engine of the topology runs.
type RoutedHost struct {
	Name   string // engine name (<prefix>-eN; the EAL file prefix and log name)
	Kind   PortKind
	Subnet int        // index into Routed.Subnets
	Addr   netip.Addr // the engine's address
	NS     string     // namespace rmad runs in
	Iface  string     // the engine's interface in NS (a veth end, or the tap it creates)
	MAC    string     // the engine's MAC if it sets one (net_tap), else "" (the port's)
	// RouterPort is the bridge port in the router namespace that leads
	// to the engine (the veth's other end, or the tap itself).
	RouterPort string
}

// routedPlan is the topology's layout: subnet, host number (last octet),
// port kind and namespace suffix of every engine.
var routedPlan = []struct {
	subnet int
	host   byte
	kind   PortKind
	ns     string // host namespace suffix; "" for the router's
}{
	{0, 2, PortAFPacket, "h1"},
	{0, 3, PortAFXDP, "h2"},
	{1, 2, PortAFPacket, "h3"},
	{1, 3, PortTap, ""},
}

// NewRouted builds the topology without its engines (start each with
// Options, then call Attach). prefix names the namespaces: at most 10
// characters, unique to the run (callers add their process id).
func NewRouted(prefix string) (*Routed, error) {
	if prefix == "" || len(prefix) > 10 {
		return nil, fmt.Errorf("testbed: routed prefix %q: want 1 to 10 characters", prefix)
	}
	r := &Routed{Prefix: prefix, Router: prefix + "r"}
	for s := 0; s < 2; s++ {
		net := netip.AddrFrom4([4]byte{10, byte(s + 1), 0, 0})
		r.Subnets = append(r.Subnets, RoutedSubnet{
			Prefix:  netip.PrefixFrom(net, 24),
			Gateway: netip.AddrFrom4([4]byte{10, byte(s + 1), 0, 1}),
			Bridge:  fmt.Sprintf("br%d", s+1),
			MAC:     GatewayMAC(s, 1),
		})
	}
	for i, p := range routedPlan {
		h := RoutedHost{
			Name:   fmt.Sprintf("%s-e%d", prefix, i+1),
			Kind:   p.kind,
			Subnet: p.subnet,
			Addr:   netip.AddrFrom4([4]byte{10, byte(p.subnet + 1), 0, p.host}),
		}
		if p.kind == PortTap {
			h.NS, h.Iface, h.RouterPort = r.Router, fmt.Sprintf("tap%d", i+1), fmt.Sprintf("tap%d", i+1)
			h.MAC = fmt.Sprintf("02:52:00:%02x:00:%02x", p.subnet+1, p.host)
		} else {
			h.NS, h.Iface, h.RouterPort = prefix+p.ns, "eth0", p.ns
		}
		r.Hosts = append(r.Hosts, h)
	}
	r.Close()
	if err := r.build(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// GatewayMAC is a locally administered MAC for subnet s's gateway, the
// n-th it has had (1: the one NewRouted gives it).
func GatewayMAC(s, n int) string { return fmt.Sprintf("02:52:01:%02x:00:%02x", s+1, n) }

// namespaces lists the topology's namespaces, the router's first.
func (r *Routed) namespaces() []string {
	ns := []string{r.Router}
	for _, h := range r.Hosts {
		if h.NS != r.Router {
			ns = append(ns, h.NS)
		}
	}
	return ns
}

func (r *Routed) build() error {
	var steps [][]string
	for _, ns := range r.namespaces() {
		steps = append(steps, []string{"netns", "add", ns})
	}
	for _, s := range r.Subnets {
		steps = append(steps,
			// No multicast snooping: a snooping bridge joins the
			// all-snoopers group and sends IGMP queries to every port.
			[]string{"-n", r.Router, "link", "add", s.Bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
			[]string{"-n", r.Router, "link", "set", s.Bridge, "address", s.MAC},
		)
	}
	for _, h := range r.Hosts {
		if h.Kind == PortTap {
			continue
		}
		steps = append(steps, []string{"-n", h.NS, "link", "add", h.Iface, "type", "veth", "peer", "name", h.RouterPort, "netns", r.Router})
	}
	for i := 0; i < len(steps); i++ {
		if err := ip(steps[i]...); err != nil {
			return err
		}
		// IPv6 off in a new namespace before any interface appears in it,
		// so every interface inherits the default.
		if steps[i][0] == "netns" {
			if err := sysctl(steps[i][2], "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
				return err
			}
		}
	}
	if err := sysctl(r.Router,
		"net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.proxy_arp=0", "net.ipv4.conf.default.proxy_arp=0",
		"net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.default.rp_filter=1",
		"net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
		"net.ipv4.conf.all.arp_notify=0", "net.ipv4.conf.default.arp_notify=0",
		"net.ipv4.icmp_ratelimit=0",
	); err != nil {
		return err
	}
	steps = steps[:0]
	for _, ns := range r.namespaces() {
		steps = append(steps, []string{"-n", ns, "link", "set", "lo", "up"})
	}
	for _, s := range r.Subnets {
		steps = append(steps,
			[]string{"-n", r.Router, "addr", "add", netip.PrefixFrom(s.Gateway, s.Prefix.Bits()).String(), "dev", s.Bridge},
			[]string{"-n", r.Router, "link", "set", s.Bridge, "up"})
	}
	for _, h := range r.Hosts {
		if h.Kind == PortTap {
			continue
		}
		steps = append(steps,
			[]string{"-n", r.Router, "link", "set", h.RouterPort, "master", r.Subnets[h.Subnet].Bridge},
			[]string{"-n", r.Router, "link", "set", h.RouterPort, "up"},
			[]string{"-n", h.NS, "link", "set", h.Iface, "up"})
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// sysctl sets kernel parameters inside namespace ns.
func sysctl(ns string, kv ...string) error {
	args := append([]string{"netns", "exec", ns, "sysctl", "-qw"}, kv...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("sysctl in %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Options returns the options of host i's engine: its address with the
// subnet's prefix length (-ip 10.x.0.y/24), the subnet's gateway
// (-gateway 10.x.0.1), idle backoff polling, on its port. Callers append
// their flags to Extra.
func (r *Routed) Options(i int, rmad, dir string) Options {
	h := &r.Hosts[i]
	s := &r.Subnets[h.Subnet]
	addr := netip.PrefixFrom(h.Addr, s.Prefix.Bits()).String()
	var o Options
	switch h.Kind {
	case PortAFPacket:
		o = AFPacket(rmad, dir, h.Name, addr, h.NS, h.Iface)
	case PortAFXDP:
		o = AFXDP(rmad, dir, h.Name, addr, h.NS, h.Iface)
	case PortTap:
		o = Tap(rmad, dir, h.Name, addr, h.Iface, h.MAC)
		o.NetNS = h.NS
	}
	o.Extra = append(o.Extra, "-gateway", s.Gateway.String())
	return o
}

// Attach completes host i once its engine runs: a net_tap engine's tap
// interface (which exists only while its rmad runs) becomes a port of its
// subnet's bridge. For other hosts it does nothing. Call it again after
// restarting a net_tap engine.
func (r *Routed) Attach(i int) error {
	h := &r.Hosts[i]
	if h.Kind != PortTap {
		return nil
	}
	if err := ip("-n", r.Router, "link", "set", h.RouterPort, "master", r.Subnets[h.Subnet].Bridge); err != nil {
		return err
	}
	return ip("-n", r.Router, "link", "set", h.RouterPort, "up")
}

// SetLink takes the router's interface toward subnet s down or up: down,
// the router neither forwards to the subnet nor answers on it (its route
// to the subnet goes with the interface); up, both come back.
func (r *Routed) SetLink(s int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("-n", r.Router, "link", "set", r.Subnets[s].Bridge, state)
}

// SetGatewayMAC gives the router's interface toward subnet s a new MAC
// (silently: the router sends no gratuitous ARP, arp_notify is 0). Frames
// still addressed to the old MAC are flooded by the bridge to its ports and
// never reach the router's IP layer.
func (r *Routed) SetGatewayMAC(s int, mac string) error {
	if err := ip("-n", r.Router, "link", "set", r.Subnets[s].Bridge, "address", mac); err != nil {
		return err
	}
	r.Subnets[s].MAC = mac
	return nil
}

// SetMTU sets the MTU of the router's interface toward subnet s: a frame
// the router forwards toward the subnet that is larger, with DF set, is
// dropped and answered with ICMP "fragmentation needed" to its sender.
func (r *Routed) SetMTU(s int, mtu int) error {
	return ip("-n", r.Router, "link", "set", r.Subnets[s].Bridge, "mtu", fmt.Sprint(mtu))
}

// Ping runs ping -c count from the router namespace to addr, one echo
// request a second, each reply awaited at most 2 s, and returns its output;
// the error is set unless every request was answered.
func (r *Routed) Ping(addr netip.Addr, count int) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", r.Router, "ping", "-n", "-c", fmt.Sprint(count), "-W", "2", addr.String()).CombinedOutput()
	if err == nil && !strings.Contains(string(out), fmt.Sprintf(" %d received", count)) {
		err = fmt.Errorf("not every echo request answered")
	}
	if err != nil {
		return string(out), fmt.Errorf("ping %s from %s: %v", addr, r.Router, err)
	}
	return string(out), nil
}

// Close removes the topology's namespaces, and with them its interfaces
// and bridges. Stop the engines first: a namespace whose name is gone
// lives on, unnamed, while a process runs in it.
func (r *Routed) Close() {
	for _, ns := range r.namespaces() {
		exec.Command("ip", "netns", "del", ns).Run()
	}
}
