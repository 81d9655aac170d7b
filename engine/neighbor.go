package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/onerma/onerma/wire"
)

// The neighbor table maps peer IPv4 addresses to MACs (ARP, RFC 826). It is
// a fixed open-addressing table: no growth, no eviction of static entries;
// when it is more than half full a new peer cannot be resolved and ops to it
// complete with StatusUnreachable (an explicit, finite resource like every
// other table of the engine). It knows nothing of the ops waiting for an
// entry: the initiator keeps those (its resolving list), and arp fills the
// table from the wire. Entries are of next hops (route.go): a gateway's
// serves every destination behind it.
//
// Aging (after RFC 4861's neighbor unreachability detection, with ARP
// as the probe): an entry is good for NeighborReachable after a reply to
// our own request confirmed it. An op that uses it past 3/4 of that time
// sends a new request (broadcast, at most one per ARPRetry) and goes on
// with the known MAC, so nothing stalls while it is refreshed; if no
// reply came by the end, the next op to use it finds it expired:
// incomplete, and ops wait for it (ResolveTimeout: UNREACHABLE) as for a
// new neighbor. Static entries never age.
//
// What ARP may change (see SECURITY.md): a MAC, new or changed, is taken
// only from a reply to a request of ours that is outstanding (for that
// address, sent within ResolveTimeout, not answered yet), addressed to
// our MAC and address. Other replies are ignored (ARPUnsolicited), and
// requests teach nothing: a request for our address is answered, and
// the serving side answers a request's frames to the MAC they came from
// without the table. Gratuitous ARP (sender address = target address),
// as a neighbor announces a new MAC (a gateway failing over), is not
// learned either (ARPGratuitous): for a resolved entry it triggers a
// request of ours at once (within the ARPRetry limit), and the reply to
// that request is taken.
//
// Bounds (see SECURITY.md): an op that names an address nobody answers
// holds an incomplete entry until it gives up (ResolveTimeout), and ARP
// asks for that address every ARPRetry meanwhile. An incomplete entry is
// therefore charged to the tenant whose op created it, and a tenant has
// at most NeighborsPerTenant of them at once on a core: beyond that its
// op to yet another new on-link address ends UNREACHABLE at once
// (TenantCounters.NeighborRefused), so no tenant can fill the table and
// deny the others new neighbors. The charge ends when the entry resolves
// or is forgotten. A gateway's entry (the next hop of a route, which the
// configuration names, not the op) and static ones are nobody's; so are
// resolved entries, and a resolved entry that expires stays uncharged.
// The engine's ARP requests, all its cores together, are bounded by a
// token bucket (arpLimit: ARPRate a second, ARPBurst at once); a request
// over it is deferred to the entry's next retry (ARPRateLimited). Only a
// first request for an entry (nothing of ours outstanding for it) may
// take the bucket's last ARPBurst/2 tokens: retries of unanswered
// requests cannot starve the first request of another tenant's new
// neighbor.

type nbrState uint8

const (
	nbrEmpty nbrState = iota
	nbrIncomplete
	nbrResolved
	nbrStatic
)

type neighbor struct {
	ip    uint32
	mac   wire.MAC
	state nbrState
	// asked: an ARP request of ours for ip is outstanding (sent at
	// lastReq, within ResolveTimeout); only its reply may set mac.
	asked bool
	// charged is 1 + the tenant charged for this incomplete entry (0:
	// nobody: a gateway's, a static one, resolved once).
	charged   uint16
	lastReq   int64 // last ARP request sent (ns)
	lastTry   int64 // last request sent or deferred by the rate bound (ns): at most one per ARPRetry
	confirmed int64 // a reply to our request last set or confirmed mac (ns)
}

// nbrTable is the neighbor table.
type nbrTable struct {
	e []neighbor // a power of two long
	n int        // entries in use
	// charged counts the incomplete entries charged to each tenant (by
	// PortalSpec.Tenant), at most perTenant each.
	charged   []int32
	perTenant int32
}

func newNbrTable(size, tenants, perTenant int, static []Neighbor) *nbrTable {
	t := &nbrTable{e: make([]neighbor, size), charged: make([]int32, tenants), perTenant: int32(perTenant)}
	for _, s := range static {
		e := t.lookup(ip4(s.IP.As4()), true)
		e.mac, e.state = s.MAC, nbrStatic
	}
	return t
}

func (t *nbrTable) home(ip uint32) int { return int((ip*2654435761)>>7) & (len(t.e) - 1) }

// slot is where ip's entry is, or the empty slot where it would go.
func (t *nbrTable) slot(ip uint32) int {
	mask := len(t.e) - 1
	i := t.home(ip)
	for {
		e := &t.e[i]
		if e.state == nbrEmpty || e.ip == ip {
			return i
		}
		i = (i + 1) & mask
	}
}

// lookup returns the entry for ip, creating an incomplete one when create
// is set and there is room; nil when there is none.
func (t *nbrTable) lookup(ip uint32, create bool) *neighbor {
	e := &t.e[t.slot(ip)]
	if e.state != nbrEmpty {
		return e
	}
	// At most half the table is used (short probe chains). Entries of
	// addresses that never answer are forgotten when their last op gives
	// up (initiator.forgetIfUnwanted), so they hold room for
	// ResolveTimeout at most.
	if !create || t.n >= len(t.e)/2 {
		return nil
	}
	t.n++
	*e = neighbor{ip: ip, state: nbrIncomplete, lastReq: -1 << 62, lastTry: -1 << 62}
	return e
}

// add creates an incomplete entry for ip, which has none, charged to
// tenant (-1: to nobody). It returns nil when the tenant has its
// perTenant incomplete entries already (over set) or the table is full.
func (t *nbrTable) add(ip uint32, tenant int) (e *neighbor, over bool) {
	if tenant >= 0 && t.charged[tenant] >= t.perTenant {
		return nil, true
	}
	if e = t.lookup(ip, true); e != nil && tenant >= 0 {
		t.charged[tenant]++
		e.charged = uint16(tenant + 1)
	}
	return e, false
}

// uncharge ends e's charge to its tenant (it resolved, or goes).
func (t *nbrTable) uncharge(e *neighbor) {
	if e.charged != 0 {
		t.charged[e.charged-1]--
		e.charged = 0
	}
}

// audit checks the tenants' charges against the entries.
func (t *nbrTable) audit() error {
	want := make([]int32, len(t.charged))
	n := 0
	for i := range t.e {
		e := &t.e[i]
		if e.state == nbrEmpty {
			continue
		}
		n++
		if e.charged != 0 {
			if e.state != nbrIncomplete {
				return fmt.Errorf("audit: neighbor %08x in state %d charged to tenant %d", e.ip, e.state, e.charged-1)
			}
			want[e.charged-1]++
		}
	}
	if n != t.n {
		return fmt.Errorf("audit: neighbor table counts %d entries, holds %d", t.n, n)
	}
	for k := range want {
		if want[k] != t.charged[k] || want[k] > t.perTenant {
			return fmt.Errorf("audit: tenant %d charged %d incomplete neighbors, entries say %d (bound %d)", k, t.charged[k], want[k], t.perTenant)
		}
	}
	return nil
}

// forget drops ip's entry if it is still unresolved.
func (t *nbrTable) forget(ip uint32) {
	i := t.slot(ip)
	if e := &t.e[i]; e.state != nbrIncomplete || e.ip != ip {
		return
	}
	t.uncharge(&t.e[i])
	// Backward-shift deletion keeps linear probe chains intact without
	// tombstones: move later entries of the chain into the hole when their
	// home slot does not lie cyclically in (hole, j].
	mask := len(t.e) - 1
	hole := i
	for j := (i + 1) & mask; t.e[j].state != nbrEmpty; j = (j + 1) & mask {
		k := t.home(t.e[j].ip)
		if (hole <= j && hole < k && k <= j) || (hole > j && (hole < k || k <= j)) {
			continue
		}
		t.e[hole] = t.e[j]
		hole = j
	}
	t.e[hole] = neighbor{}
	t.n--
}

// arp speaks ARP for a core: it asks for the MACs of next hops, answers
// for its own address, and fills the neighbor table from the replies to
// its own requests. Every core of an engine keeps its own neighbor table
// and sees every ARP frame (Steer: SteerAll): each takes the replies to
// its own requests only, and one core (the engine's first) answers the
// requests for the engine's address.
type arp struct {
	t          *nbrTable
	out        *sender
	st         *Stats
	limit      *arpLimit // the engine's, shared by its cores
	answers    bool      // this core answers requests for the engine's address
	retry      int64     // ARPRetry: at most one request per entry this often
	resolve    int64     // ResolveTimeout: a request is outstanding this long
	reachable  int64     // NeighborReachable
	refreshAge int64     // 3/4 of it: an entry this old is refreshed when used
}

func newARP(cfg *Config, t *nbrTable, out *sender, st *Stats, limit *arpLimit, answers bool) *arp {
	return &arp{
		t: t, out: out, st: st, limit: limit, answers: answers,
		retry:      int64(cfg.ARPRetry),
		resolve:    int64(cfg.ResolveTimeout),
		reachable:  int64(cfg.NeighborReachable),
		refreshAge: int64(cfg.NeighborReachable) / 4 * 3,
	}
}

// due reports whether e may be asked for now: at most one request (sent
// or deferred) per ARPRetry.
func (a *arp) due(now int64, e *neighbor) bool { return now-e.lastTry >= a.retry }

// request broadcasts an ARP request for e's address, if the engine's ARP
// rate bound allows it now; else the request is deferred to e's next
// retry (counted). retry marks a request that may not take the bucket's
// reserve: a retry of an unanswered request, or one a gratuitous ARP
// triggered. It reports false when the rate bound deferred the request
// (a frame that found no tx buffer is counted as TxNoBuffer).
func (a *arp) request(now int64, e *neighbor, retry bool) bool {
	b := a.out.buffer()
	if b == nil {
		return true
	}
	e.lastTry = now
	if !a.limit.take(now, retry) {
		a.st.ARPRateLimited++
		return false
	}
	m := wire.ARP{
		Op: wire.ARPRequest, SenderMAC: a.out.mac, SenderIP: a.out.ip, TargetIP: e.ip,
		EthDst: wire.Broadcast, EthSrc: a.out.mac,
	}
	a.out.send(wire.EncodeARP(b, &m))
	a.st.ARPRequests++
	e.lastReq, e.asked = now, true
	return true
}

// usable reports whether an op may use e's MAC now. It ages a resolved
// entry: past 3/4 of its reachable time it asks again (rate-limited)
// and the MAC stays usable; past all of it the entry expires, becomes
// incomplete, and the op must wait for resolution.
func (a *arp) usable(now int64, e *neighbor) bool {
	switch e.state {
	case nbrStatic:
		return true
	case nbrResolved:
		age := now - e.confirmed
		if age >= a.reachable {
			e.state = nbrIncomplete
			a.st.NeighborExpiries++
			return false
		}
		if age >= a.refreshAge && a.due(now, e) && a.request(now, e, e.asked) {
			a.st.NeighborRefreshes++
		}
		return true
	}
	return false
}

// receive handles an ARP frame: it answers a request for our address and
// takes the reply to a request of ours (see the rules above). It returns
// the address it resolved (an entry that was incomplete: ops may wait for
// it), if any.
func (a *arp) receive(now int64, frame []byte) (ip uint32, mac wire.MAC, resolved bool) {
	var m wire.ARP
	if err := wire.DecodeARP(frame, &m); err != nil {
		a.st.RxDropped++
		return 0, mac, false
	}
	if m.EthDst != a.out.mac && m.EthDst != wire.Broadcast {
		a.st.RxDropped++
		return 0, mac, false
	}
	if m.SenderIP == m.TargetIP { // gratuitous: an announcement, never learned
		a.st.ARPGratuitous++
		if e := a.t.lookup(m.SenderIP, false); e != nil && e.state == nbrResolved && a.due(now, e) &&
			a.request(now, e, true) { // its reply, if any, is taken
			a.st.NeighborRefreshes++
		}
		return 0, mac, false
	}
	if m.Op == wire.ARPRequest {
		if m.TargetIP == a.out.ip && a.answers {
			a.answer(&m)
		}
		return 0, mac, false
	}
	e := a.t.lookup(m.SenderIP, false)
	if e == nil || !e.asked || now-e.lastReq > a.resolve || e.state == nbrStatic ||
		m.TargetIP != a.out.ip || m.TargetMAC != a.out.mac {
		a.st.ARPUnsolicited++ // no request of ours asked for it (or no longer)
		return 0, mac, false
	}
	if m.SenderMAC == (wire.MAC{}) || m.SenderMAC[0]&1 != 0 {
		a.st.RxDropped++ // multicast or zero: no neighbor's
		return 0, mac, false
	}
	wasIncomplete := e.state == nbrIncomplete
	if !wasIncomplete && e.mac != m.SenderMAC {
		a.st.NeighborChanges++
	}
	e.mac, e.state, e.asked, e.confirmed = m.SenderMAC, nbrResolved, false, now
	a.t.uncharge(e)
	return e.ip, e.mac, wasIncomplete
}

// answer replies to an ARP request for our address.
func (a *arp) answer(m *wire.ARP) {
	b := a.out.buffer()
	if b == nil {
		return
	}
	r := wire.ARP{
		Op: wire.ARPReply, SenderMAC: a.out.mac, SenderIP: a.out.ip,
		TargetMAC: m.SenderMAC, TargetIP: m.SenderIP,
		EthDst: m.SenderMAC, EthSrc: a.out.mac,
	}
	a.out.send(wire.EncodeARP(b, &r))
	a.st.ARPReplies++
}

// arpLimit is the engine's ARP request rate bound: a token bucket of
// ARPBurst tokens refilled at ARPRate a second, kept as one word (GCRA:
// tat is the time at which the bucket would be full again, so it holds
// (now+burst-tat)/interval tokens) that the engine's cores share. A core
// touches it only when it is about to send a request (a new neighbor, a
// retry, a refresh), never for an op whose neighbor is resolved. Time a
// core sees behind another's refills nothing (the bucket is then
// emptier for it, not fuller).
type arpLimit struct {
	_        [64]byte
	tat      atomic.Int64
	_        [56]byte
	interval int64 // ns per token: 1e9/ARPRate, rounded up
	burst    int64 // ARPBurst tokens, in ns
	reserve  int64 // ARPBurst/2 tokens, in ns: what a retry may not take
}

func newARPLimit(rate, burst int) *arpLimit {
	iv := (int64(1e9) + int64(rate) - 1) / int64(rate)
	l := &arpLimit{interval: iv, burst: int64(burst) * iv, reserve: int64(burst/2) * iv}
	l.tat.Store(-1 << 62)
	return l
}

// take spends a token at time now if there is one (retry: if more than
// the reserve is left).
func (l *arpLimit) take(now int64, retry bool) bool {
	limit := l.burst
	if retry {
		limit -= l.reserve
	}
	for {
		old := l.tat.Load()
		t := max(old, now) + l.interval
		if t-now > limit {
			return false
		}
		if l.tat.CompareAndSwap(old, t) {
			return true
		}
	}
}
