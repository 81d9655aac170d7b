package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
)

// The routing part of rmad's configuration: engine.ip as an address or
// address/prefix length, engine.gateway, engine.routes (-route) and
// engine.dscp, converted to engine.Config's Subnet, Gateway, Routes and
// DSCP. engine.Config.Validate checks how they fit together.

// RouteConfig is a static route (engine.Route): destinations in dst
// (a prefix) through via ("": on-link), frames of at most mtu bytes of
// IPv4 (0: engine.mtu).
type RouteConfig struct {
	Dst string `json:"dst"`
	Via string `json:"via"`
	MTU int    `json:"mtu"`
}

// DSCPConfig is the IPv4 DSCP (0..63) of each class of service's frames.
type DSCPConfig struct {
	Low  int `json:"low"`
	High int `json:"high"`
}

// engineAddr splits engine.ip into the address and the subnet (zero for a
// bare address).
func engineAddr(s string) (netip.Addr, netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		return a, netip.Prefix{}, err
	}
	p, err := netip.ParsePrefix(s)
	return p.Addr(), p, err
}

// addRoute appends a route written DST[,via=ADDR][,mtu=N] to
// engine.routes; the addresses are checked with the rest of the config.
func addRoute(c *Config, v string) error {
	parts := strings.Split(v, ",")
	r := RouteConfig{Dst: parts[0]}
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(p, "=")
		switch {
		case ok && k == "via":
			r.Via = val
		case ok && k == "mtu":
			n, err := strconv.Atoi(val)
			if err != nil {
				return fmt.Errorf("route %q: mtu: %w", v, err)
			}
			r.MTU = n
		default:
			return fmt.Errorf("route %q: %q is neither via=ADDR nor mtu=N", v, p)
		}
	}
	if r.Dst == "" {
		return fmt.Errorf("route %q: no destination prefix", v)
	}
	c.Engine.Routes = append(c.Engine.Routes, r)
	return nil
}

// routing converts the gateway, the routes and the DSCP into ec; the
// engine validates how they fit together.
func (e *EngineConfig) routing(ec *engine.Config) error {
	ec.Gateway, ec.Routes = netip.Addr{}, nil
	if e.Gateway != "" {
		gw, err := netip.ParseAddr(e.Gateway)
		if err != nil || !gw.Is4() {
			return fmt.Errorf("%w: engine.gateway %q is not an IPv4 address", errConfig, e.Gateway)
		}
		if !ec.Subnet.IsValid() {
			return fmt.Errorf("%w: engine.gateway %s needs engine.ip as address/prefix length (%s is on-link to every destination)", errConfig, gw, e.IP)
		}
		ec.Gateway = gw
	}
	for i, r := range e.Routes {
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil || !dst.Addr().Is4() {
			return fmt.Errorf("%w: engine.routes[%d].dst %q is not an IPv4 prefix", errConfig, i, r.Dst)
		}
		er := engine.Route{Dst: dst, MTU: r.MTU}
		if r.Via != "" {
			if er.Via, err = netip.ParseAddr(r.Via); err != nil || !er.Via.Is4() {
				return fmt.Errorf("%w: engine.routes[%d].via %q is not an IPv4 address", errConfig, i, r.Via)
			}
		}
		ec.Routes = append(ec.Routes, er)
	}
	for _, d := range []struct {
		name string
		v    int
		cl   abi.Class
	}{{"low", e.DSCP.Low, abi.ClassLow}, {"high", e.DSCP.High, abi.ClassHigh}} {
		if d.v < 0 || d.v > 63 {
			return fmt.Errorf("%w: engine.dscp.%s %d, want 0..63", errConfig, d.name, d.v)
		}
		ec.DSCP[d.cl] = uint8(d.v)
	}
	return nil
}
