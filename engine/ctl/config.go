package ctl

import (
	"errors"
	"fmt"
	"os"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// Executor runs control-plane closures on the goroutine that owns a Core
// and waits for them. *runner.Runner satisfies it.
type Executor interface {
	Exec(fn func(c *engine.Core)) error
}

// Hugetlb modes for shared memory.
const (
	HugetlbAuto = "auto" // try MFD_HUGETLB, fall back to a plain memfd
	HugetlbOff  = "off"  // plain memfd only
)

// AppRule grants the applications it matches a class of service and a cap
// on their command slots. A rule matches when every field it sets matches:
// UID (from SO_PEERCRED, so it cannot be forged) and Name (chosen by the
// application; bind it to a UID to keep other users from claiming it).
type AppRule struct {
	UID  *uint32 `json:"uid,omitempty"`
	Name string  `json:"name,omitempty"`
	// Class is the highest class of service the application may ask for:
	// "high" allows high and low, "low" (or "") only
	// low.
	Class    string `json:"class,omitempty"`
	MaxSlots int    `json:"max_slots"`
}

func (r *AppRule) String() string {
	s := ""
	if r.UID != nil {
		s = fmt.Sprintf("uid=%d", *r.UID)
	}
	if r.Name != "" {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("name=%q", r.Name)
	}
	if s == "" {
		s = "any"
	}
	return s
}

// AppPolicy is the software-defined resource allocation of paper §4.3
// ("business priority"): it maps each application, by the uid the
// kernel reports and the name it presents at open, to the classes of
// service it may use and its cap on command slots. The first matching rule
// wins, else DefaultClass and Default.
//
// An application gets the class it asks for at open ("" is low) if the
// policy allows it, and an error (ctlmsg.CodeClass) if it does not: a rule
// granting high lets an application use high without forcing it to, so an
// application that does not ask for high gets low.
type AppPolicy struct {
	Default      int       `json:"default"`       // slot cap when no rule matches
	DefaultClass string    `json:"default_class"` // highest class when no rule matches; "" is low
	Rules        []AppRule `json:"rules,omitempty"`
}

// Grant is what the policy gives one application.
type Grant struct {
	Class    abi.Class // the highest class it may ask for
	MaxSlots int
	From     string // the rule (or default) it came from, for logs and errors
}

// String says what the grant allows, for messages.
func (g Grant) String() string {
	return fmt.Sprintf("class %s and %d slots", g.Class.String(), g.MaxSlots)
}

// Match returns what the policy grants the application with this uid and
// portal name.
func (p *AppPolicy) Match(uid uint32, name string) Grant {
	for i := range p.Rules {
		r := &p.Rules[i]
		if (r.UID == nil || *r.UID == uid) && (r.Name == "" || r.Name == name) {
			cl, _ := abi.ParseClass(r.Class) // Validate has checked it
			return Grant{Class: cl, MaxSlots: r.MaxSlots, From: fmt.Sprintf("slot policy rule %d (%s)", i, r.String())}
		}
	}
	cl, _ := abi.ParseClass(p.DefaultClass)
	return Grant{Class: cl, MaxSlots: p.Default, From: "the slot policy default"}
}

// Validate checks the policy. Its errors name the policy's JSON keys, the
// form operators write it in (rmad's ctl.slot_policy).
func (p *AppPolicy) Validate() error {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%w: slot policy: "+f, append([]any{ErrConfig}, args...)...)
	}
	badClass := func(key, s string) error {
		return bad("%s = %q, want %q or %q", key, s, abi.ClassLow.String(), abi.ClassHigh.String())
	}
	if p.Default < 0 || p.Default > ctlmsg.MaxAllocSlots {
		return bad("default = %d, want 0..%d", p.Default, ctlmsg.MaxAllocSlots)
	}
	if _, ok := abi.ParseClass(p.DefaultClass); !ok {
		return badClass("default_class", p.DefaultClass)
	}
	for i, r := range p.Rules {
		if r.MaxSlots < 0 || r.MaxSlots > ctlmsg.MaxAllocSlots {
			return bad("rules[%d].max_slots = %d, want 0..%d", i, r.MaxSlots, ctlmsg.MaxAllocSlots)
		}
		if _, ok := abi.ParseClass(r.Class); !ok {
			return badClass(fmt.Sprintf("rules[%d].class", i), r.Class)
		}
		if r.Name != "" {
			if err := ctlmsg.ValidName(r.Name); err != nil {
				return bad("rules[%d].name: %v", i, err)
			}
		}
	}
	return nil
}

// Config of the control socket server.
type Config struct {
	SocketPath string      // path of the unix socket
	SocketMode os.FileMode // permissions of the socket file (who may open portals)

	CmdCap uint32 // default command ring capacity (power of two)
	CplCap uint32 // default completion ring capacity (power of two)

	// Slots is the per-application policy: class of service and slot cap.
	Slots AppPolicy

	MaxConns            int    // control connections at once (each may hold one portal)
	MaxConnsPerUID      int    // control connections at once of one peer uid
	MaxRegionsPerPortal int    // regions one portal may hold
	MaxRegionBytes      uint64 // bytes of one region
	MaxPortalBytes      uint64 // bytes of all regions of one portal

	Hugetlb string // HugetlbAuto or HugetlbOff

	// FaultStats, if set, returns the counters of a fault-injecting
	// wrapper around the core's port (engine/faultport), for the stats
	// reply's "fault" key. It runs on the core's goroutine, inside the
	// same Executor.Exec as Core.Stats, where the port may be read.
	FaultStats func() *ctlmsg.FaultStats
	// PortStats, if set, returns the counters of the core's port (the
	// driver's and the device's) for the stats reply's "port" key. It
	// runs inside the same Executor.Exec as Core.Stats.
	PortStats func() *ctlmsg.PortStats
	// LoopStats, if set, returns the poll loop's counters for the stats
	// reply's "loop" key. They are atomics: it runs on the connection's
	// goroutine, not inside Exec.
	LoopStats func() *ctlmsg.LoopStats
}

// DefaultConfig returns defaults matching engine.DefaultConfig.
func DefaultConfig() Config {
	return Config{
		SocketPath:          "/run/onerma/rmad.sock",
		SocketMode:          0o666,
		CmdCap:              256,
		CplCap:              1024,
		Slots:               AppPolicy{Default: 256, DefaultClass: abi.ClassLow.String()},
		MaxConns:            256,
		MaxConnsPerUID:      64,
		MaxRegionsPerPortal: 256,
		MaxRegionBytes:      1 << 30,
		MaxPortalBytes:      4 << 30,
		Hugetlb:             HugetlbAuto,
	}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("ctl: invalid config")

// Validate checks every field; the error names the first bad one.
func (c *Config) Validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: %s = %v", ErrConfig, f, v) }
	pow2 := func(v uint32) bool { return v >= 2 && v <= ctlmsg.MaxRingCap && v&(v-1) == 0 }
	switch {
	case c.SocketPath == "" || len(c.SocketPath) > 107:
		return bad("SocketPath", fmt.Sprintf("%q (1..107 bytes)", c.SocketPath))
	case c.SocketMode&^0o777 != 0:
		return bad("SocketMode", c.SocketMode)
	case !pow2(c.CmdCap):
		return bad("CmdCap", c.CmdCap)
	case !pow2(c.CplCap):
		return bad("CplCap", c.CplCap)
	case c.MaxConns < 1:
		return bad("MaxConns", c.MaxConns)
	case c.MaxConnsPerUID < 1 || c.MaxConnsPerUID > c.MaxConns:
		return bad("MaxConnsPerUID", c.MaxConnsPerUID)
	case c.MaxRegionsPerPortal < 0:
		return bad("MaxRegionsPerPortal", c.MaxRegionsPerPortal)
	case c.MaxRegionBytes < 1 || c.MaxRegionBytes > ctlmsg.MaxRegionBytes:
		return bad("MaxRegionBytes", c.MaxRegionBytes)
	case c.MaxPortalBytes < c.MaxRegionBytes:
		return bad("MaxPortalBytes", c.MaxPortalBytes)
	case c.Hugetlb != HugetlbAuto && c.Hugetlb != HugetlbOff:
		return bad("Hugetlb", c.Hugetlb)
	}
	return c.Slots.Validate()
}
