package ctl

import (
	"errors"
	"fmt"
	"os"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl/ctlmsg"
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

// SlotRule caps the command slots of matching applications. A rule matches
// when every field it sets matches: UID (from SO_PEERCRED, so it cannot be
// forged) and Name (chosen by the application; bind it to a UID to keep
// other users from claiming it).
type SlotRule struct {
	UID      *uint32 `json:"uid,omitempty"`
	Name     string  `json:"name,omitempty"`
	MaxSlots int     `json:"max_slots"`
}

func (r *SlotRule) String() string {
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

// SlotPolicy is the per-application slot cap (SPEC §2 "business
// priority"): the first matching rule wins, else Default.
type SlotPolicy struct {
	Default int        `json:"default"`
	Rules   []SlotRule `json:"rules,omitempty"`
}

// Cap returns the slot cap of an application and a description of where it
// came from (for logs and error messages).
func (p *SlotPolicy) Cap(uid uint32, name string) (int, string) {
	for i := range p.Rules {
		r := &p.Rules[i]
		if (r.UID == nil || *r.UID == uid) && (r.Name == "" || r.Name == name) {
			return r.MaxSlots, fmt.Sprintf("slot policy rule %d (%s)", i, r.String())
		}
	}
	return p.Default, "the default slot cap"
}

// Validate checks the policy.
func (p *SlotPolicy) Validate() error {
	if p.Default < 0 || p.Default > ctlmsg.MaxAllocSlots {
		return fmt.Errorf("%w: SlotPolicy.Default = %d, want 0..%d", ErrConfig, p.Default, ctlmsg.MaxAllocSlots)
	}
	for i, r := range p.Rules {
		if r.MaxSlots < 0 || r.MaxSlots > ctlmsg.MaxAllocSlots {
			return fmt.Errorf("%w: SlotPolicy.Rules[%d].MaxSlots = %d, want 0..%d", ErrConfig, i, r.MaxSlots, ctlmsg.MaxAllocSlots)
		}
		if r.Name != "" {
			if err := ctlmsg.ValidName(r.Name); err != nil {
				return fmt.Errorf("%w: SlotPolicy.Rules[%d].Name: %v", ErrConfig, i, err)
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

	Slots SlotPolicy

	MaxConns            int    // control connections at once (each may hold one portal)
	MaxConnsPerUID      int    // control connections at once of one peer uid
	MaxRegionsPerPortal int    // regions one portal may hold
	MaxRegionBytes      uint64 // bytes of one region
	MaxPortalBytes      uint64 // bytes of all regions of one portal

	Hugetlb string // HugetlbAuto or HugetlbOff
}

// DefaultConfig returns defaults matching engine.DefaultConfig.
func DefaultConfig() Config {
	return Config{
		SocketPath:          "/run/onerma/rmad.sock",
		SocketMode:          0o666,
		CmdCap:              256,
		CplCap:              1024,
		Slots:               SlotPolicy{Default: 256},
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
