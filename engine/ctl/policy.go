package ctl

import (
	"fmt"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
)

// AppRule grants the applications it matches a class of service and a cap
// on the command slots of each portal. It matches on what the kernel
// reports about the peer and the application cannot forge: its uid, or a
// group it is in (effective or supplementary gid), or both (then both must
// match). The uid is the peer's own, not its tenant's (uidmap.go): a rule
// for uid 1000 does not match the processes of user 1000's containers
// running as its subordinate uids, which get the default; their portals
// and slots still count against the tenant's quota, with the user's own. The socket is matched by the rule's place: every socket has its
// own policy. A portal's name is a label, chosen by the application: no
// rule matches on it.
type AppRule struct {
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// Name is refused by Validate: rules once matched on the portal's
	// name, which any application can claim. It is kept only to say so
	// to a config that still sets it.
	Name string `json:"name,omitempty"`
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
	if r.GID != nil {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("gid=%d", *r.GID)
	}
	return s
}

func (r *AppRule) matches(p *peer) bool {
	return (r.UID == nil || *r.UID == p.uid) && (r.GID == nil || p.inGroup(*r.GID))
}

// AppPolicy is the software-defined resource allocation of paper §4.3
// ("business priority") of one control socket: it maps each application,
// by its uid and groups, to the classes of service it may use and its cap
// on each portal's command slots. The first matching rule wins, else
// DefaultClass and Default, which so apply to every application the
// socket lets in (its mode decides who that is).
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

// match returns what the policy grants the peer.
func (p *AppPolicy) match(pr *peer) Grant {
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.matches(pr) {
			cl, _ := abi.ParseClass(r.Class) // Validate has checked it
			return Grant{Class: cl, MaxSlots: r.MaxSlots, From: fmt.Sprintf("slot policy rule %d (%s)", i, r.String())}
		}
	}
	cl, _ := abi.ParseClass(p.DefaultClass)
	return Grant{Class: cl, MaxSlots: p.Default, From: "the slot policy default"}
}

// Match returns what the policy grants a peer with this uid, effective
// gid and supplementary groups.
func (p *AppPolicy) Match(uid, gid uint32, groups ...uint32) Grant {
	return p.match(&peer{uid: uid, gid: gid, groups: groups})
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
		switch {
		case r.Name != "":
			return bad("rules[%d].name = %q: a rule cannot match on a portal's name, which every application chooses itself; match on uid or gid, or give the application a control socket of its own (ctl.sockets)", i, r.Name)
		case r.UID == nil && r.GID == nil:
			return bad("rules[%d] sets neither uid nor gid: it would match every application, as the default does", i)
		case r.MaxSlots < 0 || r.MaxSlots > ctlmsg.MaxAllocSlots:
			return bad("rules[%d].max_slots = %d, want 0..%d", i, r.MaxSlots, ctlmsg.MaxAllocSlots)
		}
		if _, ok := abi.ParseClass(r.Class); !ok {
			return badClass(fmt.Sprintf("rules[%d].class", i), r.Class)
		}
	}
	return nil
}
