package testbed

import (
	"fmt"
	"net/netip"
	"os/exec"
)

// TapLAN is n engines on net_tap ports joined by one Linux bridge in the
// current network namespace: one broadcast domain, as hosts on a switch,
// so that any engine reaches any other directly (a client engine and
// three replicas' engines, say). The bridge forwards no multicast
// snooping queries and IPv6 is off on every interface of it, so the
// engines see only each other's frames.
//
// An engine's tap exists only while its rmad runs: start the engine with
// Options(i), then Attach(i) (again after a restart). Close removes the
// bridge; stop the engines first.
type TapLAN struct {
	Bridge string
	Hosts  []TapHost
}

// TapHost is one engine's place on the LAN.
type TapHost struct {
	Name  string     // engine name: <prefix>-<i>
	Iface string     // its tap interface
	MAC   string     // the port's MAC (the tap carries it)
	Addr  netip.Addr // the engine's address
}

// NewTapLAN plans n hosts (addresses base, base+1, ...) and creates the
// bridge, replacing a leftover of the same prefix. prefix names the
// bridge and taps: at most 10 characters, unique to the run.
func NewTapLAN(prefix string, n int, base netip.Addr) (*TapLAN, error) {
	if prefix == "" || len(prefix) > 10 || n < 1 || n > 200 || !base.Is4() {
		return nil, fmt.Errorf("testbed: tap LAN %q of %d hosts from %v: want a prefix of 1 to 10 characters, 1..200 hosts, an IPv4 base", prefix, n, base)
	}
	l := &TapLAN{Bridge: prefix + "br"}
	a := base
	for i := range n {
		b := a.As4()
		l.Hosts = append(l.Hosts, TapHost{Name: fmt.Sprintf("%s-%d", prefix, i), Iface: fmt.Sprintf("%st%d", prefix, i),
			MAC: fmt.Sprintf("02:4c:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3]), Addr: a})
		a = a.Next()
	}
	l.Close()
	steps := [][]string{
		{"link", "add", l.Bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		{"link", "set", l.Bridge, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			l.Close()
			return nil, err
		}
	}
	noIPv6(l.Bridge)
	return l, nil
}

func noIPv6(iface string) {
	exec.Command("sysctl", "-qw", "net.ipv6.conf."+iface+".disable_ipv6=1").Run()
}

// Options are host i's engine options: a net_tap port with the host's
// MAC, idle backoff polling.
func (l *TapLAN) Options(i int, rmad, dir string) Options {
	h := &l.Hosts[i]
	return Tap(rmad, dir, h.Name, h.Addr.String(), h.Iface, h.MAC)
}

// Attach makes host i's tap (its engine running) a port of the bridge.
func (l *TapLAN) Attach(i int) error {
	h := &l.Hosts[i]
	noIPv6(h.Iface)
	if err := ip("link", "set", h.Iface, "master", l.Bridge); err != nil {
		return err
	}
	return ip("link", "set", h.Iface, "up")
}

// Close deletes the bridge (the taps go with their engines).
func (l *TapLAN) Close() { exec.Command("ip", "link", "del", l.Bridge).Run() }
