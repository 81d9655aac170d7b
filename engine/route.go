package engine

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// Routing, as a host does it (RFC 1812 §5.2.4.3's longest match, with
// no metrics): an op's destination is looked up in a small fixed table,
// built once in New from Config.Subnet, Config.Gateway and Config.Routes,
// longest prefix first. The entry gives the next hop (the destination
// itself on-link, else the route's gateway), which is what ARP resolves:
// one neighbor entry serves every destination behind it. It also gives
// the chunk size of the frames sent toward the destination (the route's
// MTU). A destination that matches nothing is UNREACHABLE at once.
//
// The serving side does not route its answers: it answers to the MAC a
// request came from (a router's, for a routed initiator), as a request
// and its answers take the same path back. It uses the table only for
// the chunk size of the READ data it streams to the request's source.

// Route is a static route: destinations in Dst are reached through Via
// (zero: on-link, ARP asks for the destination itself) with frames of at
// most MTU bytes of IPv4 (0: Config.MTU; else 576 .. Config.MTU).
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
	MTU int
}

// String is the route as `ip route` would show it.
func (r Route) String() string {
	s := r.Dst.String()
	if r.Via.IsValid() {
		s += " via " + r.Via.String()
	} else {
		s += " on-link"
	}
	if r.MTU != 0 {
		s += fmt.Sprintf(" mtu %d", r.MTU)
	}
	return s
}

// MaxRoutes bounds Config.Routes: the table is scanned linearly per op.
const MaxRoutes = 16

// RoutingTable is the table the core looks destinations up in, longest
// prefix first: the connected Subnet (0.0.0.0/0 when Subnet is zero),
// the default route through Gateway, and Routes, each Dst masked. Call it
// on a valid Config.
func (c *Config) RoutingTable() []Route {
	t := make([]Route, 0, len(c.Routes)+2)
	sub := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if c.Subnet.IsValid() {
		sub = c.Subnet.Masked()
	}
	t = append(t, Route{Dst: sub})
	if c.Gateway.IsValid() {
		t = append(t, Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Via: c.Gateway})
	}
	for _, r := range c.Routes {
		r.Dst = r.Dst.Masked()
		t = append(t, r)
	}
	slices.SortStableFunc(t, func(a, b Route) int { return cmp.Compare(b.Dst.Bits(), a.Dst.Bits()) })
	return t
}

// route is one entry of the lookup table.
type route struct {
	dst, mask  uint32
	via        uint32 // next hop; 0: on-link (the destination itself)
	maxPayload int    // the most data one frame toward it carries
}

// routeTable is the core's routing table, longest prefix first.
type routeTable struct{ r []route }

func newRouteTable(cfg *Config) *routeTable {
	t := &routeTable{}
	for _, r := range cfg.RoutingTable() {
		mtu := cmp.Or(r.MTU, cfg.MTU)
		e := route{
			dst:        ip4(r.Dst.Addr().As4()),
			maxPayload: min(wire.MaxPayload(mtu), abi.MaxOpBytes),
		}
		if b := r.Dst.Bits(); b > 0 {
			e.mask = ^uint32(0) << (32 - b)
		}
		if r.Via.IsValid() {
			e.via = ip4(r.Via.As4())
		}
		t.r = append(t.r, e)
	}
	return t
}

// lookup is the longest-prefix route to ip, or nil.
func (t *routeTable) lookup(ip uint32) *route {
	for i := range t.r {
		if ip&t.r[i].mask == t.r[i].dst {
			return &t.r[i]
		}
	}
	return nil
}

// nextHop is the address ARP resolves for ip on route r.
func (r *route) nextHop(ip uint32) uint32 {
	if r.via != 0 {
		return r.via
	}
	return ip
}

// validateRoutes checks Subnet, Gateway and Routes (see Config); bad
// builds the error naming the field.
func (c *Config) validateRoutes(bad func(string, any) error) error {
	unicast := func(a netip.Addr) bool {
		return a.Is4() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255}) && a != c.LocalIP
	}
	// On-link: inside Subnet (everything, when it is zero) or inside an
	// on-link route, such as a host route to a gateway outside a /32.
	onLink := func(a netip.Addr) bool {
		if !c.Subnet.IsValid() || c.Subnet.Contains(a) {
			return true
		}
		for _, r := range c.Routes {
			if !r.Via.IsValid() && r.Dst.Contains(a) {
				return true
			}
		}
		return false
	}
	if c.Subnet.IsValid() {
		if !c.Subnet.Addr().Is4() {
			return bad("Subnet (not IPv4)", c.Subnet)
		}
		if !c.Subnet.Contains(c.LocalIP) {
			return bad("Subnet (does not contain LocalIP "+c.LocalIP.String()+")", c.Subnet)
		}
	}
	if len(c.Routes) > MaxRoutes {
		return bad(fmt.Sprintf("Routes (at most %d)", MaxRoutes), len(c.Routes))
	}
	for i, r := range c.Routes {
		switch {
		case !r.Dst.IsValid() || !r.Dst.Addr().Is4():
			return bad(fmt.Sprintf("Routes[%d].Dst (not an IPv4 prefix)", i), r.Dst)
		case r.Via.IsValid() && !unicast(r.Via):
			return bad(fmt.Sprintf("Routes[%d].Via (not a unicast IPv4 address of another host)", i), r.Via)
		case r.Via.IsValid() && !onLink(r.Via):
			return bad(fmt.Sprintf("Routes[%d].Via (not on-link: outside Subnet and every on-link route)", i), r.Via)
		case r.MTU != 0 && (r.MTU < 576 || r.MTU > c.MTU):
			return bad(fmt.Sprintf("Routes[%d].MTU (0 or 576..MTU %d)", i, c.MTU), r.MTU)
		}
	}
	if c.Gateway.IsValid() {
		switch {
		case !unicast(c.Gateway):
			return bad("Gateway (not a unicast IPv4 address of another host)", c.Gateway)
		case !c.Subnet.IsValid() || c.Subnet.Bits() == 0:
			return bad("Gateway (needs a Subnet other than /0: without one every destination is on-link)", c.Gateway)
		case !onLink(c.Gateway):
			return bad("Gateway (not on-link: outside Subnet and every on-link route)", c.Gateway)
		}
	}
	// One entry per prefix: two would tie in the longest match.
	sub := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if c.Subnet.IsValid() {
		sub = c.Subnet.Masked()
	}
	for i, r := range c.Routes {
		d := r.Dst.Masked()
		dup := ""
		switch {
		case d == sub:
			dup = "the connected Subnet's"
		case d.Bits() == 0 && c.Gateway.IsValid():
			dup = "the default route's (Gateway)"
		}
		for j := range i {
			if c.Routes[j].Dst.Masked() == d {
				dup = fmt.Sprintf("Routes[%d]'s", j)
			}
		}
		if dup != "" {
			return bad(fmt.Sprintf("Routes[%d].Dst (the prefix of %s)", i, dup), r.Dst)
		}
	}
	return nil
}
