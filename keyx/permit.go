package keyx

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/onerma/onerma/portal"
)

// Ops is a set of op types a Permit grants K_d for.
type Ops uint8

// The op types of a Permit.
const (
	Read   Ops = 1 << iota // READ K_d
	Write                  // WRITE K_d
	Rekey                  // REKEY K_d: whoever holds it can install a K_r the owner does not know
	Lookup                 // LOOKUP K_d: a bucket scan of an index and the record its entry points to
	allOps = Read | Write | Rekey | Lookup
)

// opsOf is the Ops bit of one op type (0 for an unknown one).
func opsOf(op portal.OpType) Ops {
	switch op {
	case portal.OpRead:
		return Read
	case portal.OpWrite:
		return Write
	case portal.OpRekey:
		return Rekey
	case portal.OpLookup:
		return Lookup
	}
	return 0
}

// Has reports whether o holds op.
func (o Ops) Has(op portal.OpType) bool { return o&opsOf(op) != 0 }

// String is the ops' names joined by '+', e.g. "READ+WRITE"; "none" for
// the empty set.
func (o Ops) String() string {
	if o == 0 {
		return "none"
	}
	var names []string
	for _, x := range []struct {
		o    Ops
		name string
	}{{Read, "READ"}, {Write, "WRITE"}, {Rekey, "REKEY"}, {Lookup, "LOOKUP"}} {
		if o&x.o != 0 {
			names = append(names, x.name)
		}
	}
	if o&^allOps != 0 {
		names = append(names, fmt.Sprintf("%#x", uint8(o&^allOps)))
	}
	return strings.Join(names, "+")
}

// ParseOps reads op names joined by '+' ("read", "read+write",
// "read+lookup"; any case).
func ParseOps(s string) (Ops, error) {
	var o Ops
	for _, name := range strings.Split(s, "+") {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "read":
			o |= Read
		case "write":
			o |= Write
		case "rekey":
			o |= Rekey
		case "lookup":
			o |= Lookup
		default:
			return 0, fmt.Errorf("op %q unknown, want read, write, rekey or lookup (joined by +)", name)
		}
	}
	return o, nil
}

// AnyAddress, in Permit.Addrs, lets a client ask for the K_d of any
// initiator address.
var AnyAddress = netip.PrefixFrom(netip.IPv4Unspecified(), 0)

// Permit is an owner's statement of what one client may have: K_d for
// which ops, on which regions, for which initiator addresses. A Server
// grants a request only under a Permit (Config.Permits); a client no
// Permit names gets nothing.
type Permit struct {
	// Client is the client certificate's subject common name: the name
	// CA.IssueClient was given (`rmactl creds issue -name NAME`).
	Client string
	// Ops the client may have K_d for; 0 means Read alone.
	Ops Ops
	// Regions the permit covers; nil means every region the owner
	// serves, now or later.
	Regions []portal.RegionID
	// Addrs are initiator addresses the owner grants the client beyond
	// its certificate's IP addresses, which it may always ask for (the
	// owner's map of client to addresses); AnyAddress grants every one.
	Addrs []netip.Prefix
}

// ops is what p grants: Ops, or Read when it states none.
func (p *Permit) ops() Ops {
	if p.Ops == 0 {
		return Read
	}
	return p.Ops
}

// covers reports whether p grants op on region.
func (p *Permit) covers(region portal.RegionID, op portal.OpType) bool {
	return p.ops().Has(op) && (p.Regions == nil || slices.Contains(p.Regions, region))
}

// check is what a Server requires of a Permit.
func (p *Permit) check() error {
	switch {
	case p.Client == "":
		return errors.New("no client name")
	case p.Ops&^allOps != 0:
		return fmt.Errorf("ops %v unknown", p.Ops)
	case p.Regions != nil && len(p.Regions) == 0:
		return errors.New("an empty region list (nil means every region)")
	case slices.Contains(p.Regions, 0):
		return errors.New("region 0 is never registered")
	}
	for _, a := range p.Addrs {
		if !a.IsValid() || !a.Addr().Is4() {
			return fmt.Errorf("address %v is not an IPv4 address or prefix", a)
		}
	}
	return nil
}

// String is the permit in ParsePermit's syntax, with its regions after
// ':' when it names some (ParsePermit takes no regions).
func (p Permit) String() string {
	s := p.Client + "=" + strings.ToLower(p.ops().String())
	if p.Regions != nil {
		r := make([]string, len(p.Regions))
		for i, id := range p.Regions {
			r[i] = fmt.Sprintf("%#x", uint32(id))
		}
		s += ":" + strings.Join(r, "+")
	}
	if len(p.Addrs) > 0 {
		a := make([]string, len(p.Addrs))
		for i, pf := range p.Addrs {
			switch {
			case pf == AnyAddress:
				a[i] = "any"
			case pf.IsSingleIP():
				a[i] = pf.Addr().String()
			default:
				a[i] = pf.String()
			}
		}
		s += "@" + strings.Join(a, "+")
	}
	return s
}

// ParsePermit reads a permit as tools take it (rmaperf server -grant):
//
//	NAME[=OPS][@ADDRS]
//
// NAME the client certificate's name; OPS op names joined by '+' (read,
// write, rekey; default read); ADDRS addresses or prefixes joined by '+',
// or "any", granted beyond the certificate's own. The permit covers every
// region. "alice" grants alice READ for her certificate's addresses;
// "bob=read+write@10.0.0.7" grants bob READ and WRITE for his and
// 10.0.0.7; "onerma-client=read+write@any" for any address.
func ParsePermit(s string) (Permit, error) {
	var p Permit
	rest := s
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		for _, a := range strings.Split(rest[i+1:], "+") {
			if a == "any" {
				p.Addrs = append(p.Addrs, AnyAddress)
				continue
			}
			pf, err := netip.ParsePrefix(a)
			if err != nil {
				ip, err2 := netip.ParseAddr(a)
				if err2 != nil {
					return Permit{}, fmt.Errorf("permit %q: address %q: want an IPv4 address, a prefix (10.0.0.0/24) or any", s, a)
				}
				pf = netip.PrefixFrom(ip, ip.BitLen())
			}
			p.Addrs = append(p.Addrs, pf.Masked())
		}
		rest = rest[:i]
	}
	if i := strings.IndexByte(rest, '='); i >= 0 {
		ops, err := ParseOps(rest[i+1:])
		if err != nil {
			return Permit{}, fmt.Errorf("permit %q: %w", s, err)
		}
		p.Ops = ops
		rest = rest[:i]
	}
	p.Client = rest
	if err := p.check(); err != nil {
		return Permit{}, fmt.Errorf("permit %q: %w", s, err)
	}
	return p, nil
}

// policy is a Server's permits by client name. It is never changed once
// built (SetPermits swaps it whole).
type policy struct {
	byClient map[string][]Permit
}

func newPolicy(permits []Permit) (*policy, error) {
	if len(permits) == 0 {
		return nil, errors.New("no permits: name the clients that may have K_d (Config.Permits)")
	}
	p := &policy{byClient: map[string][]Permit{}}
	for i := range permits {
		if err := permits[i].check(); err != nil {
			return nil, fmt.Errorf("permit %d (%q): %w", i, permits[i].Client, err)
		}
		pm := permits[i]
		pm.Regions, pm.Addrs = slices.Clone(pm.Regions), slices.Clone(pm.Addrs)
		p.byClient[pm.Client] = append(p.byClient[pm.Client], pm)
	}
	return p, nil
}

// ops is every op the client of cert is granted on some region.
func (p *policy) ops(cert *x509.Certificate) Ops {
	var o Ops
	for i := range p.byClient[cert.Subject.CommonName] {
		o |= p.byClient[cert.Subject.CommonName][i].ops()
	}
	return o
}

// check says whether the client of cert may have req's K_d: a Permit of
// its name covers the region and op, and the initiator address is one of
// the certificate's or one that Permit grants. Its errors are refusals
// (CodeNotGranted, CodeAddress) a reader is told.
func (p *policy) check(cert *x509.Certificate, req *Request) (Code, error) {
	name := cert.Subject.CommonName
	permits := p.byClient[name]
	if len(permits) == 0 {
		return CodeNotGranted, fmt.Errorf("certificate %q is granted nothing by this owner", name)
	}
	var covering []*Permit
	var granted Ops
	for i := range permits {
		if permits[i].covers(req.Region, req.Op) {
			covering = append(covering, &permits[i])
		}
		if permits[i].Regions == nil || slices.Contains(permits[i].Regions, req.Region) {
			granted |= permits[i].ops()
		}
	}
	if len(covering) == 0 {
		return CodeNotGranted, fmt.Errorf("certificate %q is not granted %v on region %#x (granted: %v)", name, req.Op, uint32(req.Region), granted)
	}
	for _, ip := range cert.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap() == req.Initiator {
			return CodeOK, nil
		}
	}
	for _, pm := range covering {
		for _, pf := range pm.Addrs {
			if pf.Contains(req.Initiator) {
				return CodeOK, nil
			}
		}
	}
	names := make([]string, 0, len(cert.IPAddresses))
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	has := "names no address"
	if len(names) > 0 {
		has = "names " + strings.Join(names, ", ")
	}
	return CodeAddress, fmt.Errorf("initiator %v is not an address of certificate %q (it %s) nor one the owner granted it", req.Initiator, name, has)
}
