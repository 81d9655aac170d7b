package engine

import (
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
	asked     bool
	lastReq   int64 // last ARP request sent (ns)
	confirmed int64 // a reply to our request last set or confirmed mac (ns)
}

// nbrTable is the neighbor table.
type nbrTable struct {
	e []neighbor // a power of two long
	n int        // entries in use
}

func newNbrTable(size int, static []Neighbor) *nbrTable {
	t := &nbrTable{e: make([]neighbor, size)}
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
	*e = neighbor{ip: ip, state: nbrIncomplete, lastReq: -1 << 62}
	return e
}

// forget drops ip's entry if it is still unresolved.
func (t *nbrTable) forget(ip uint32) {
	i := t.slot(ip)
	if e := &t.e[i]; e.state != nbrIncomplete || e.ip != ip {
		return
	}
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
	answers    bool  // this core answers requests for the engine's address
	retry      int64 // ARPRetry: at most one request per entry this often
	resolve    int64 // ResolveTimeout: a request is outstanding this long
	reachable  int64 // NeighborReachable
	refreshAge int64 // 3/4 of it: an entry this old is refreshed when used
}

func newARP(cfg *Config, t *nbrTable, out *sender, st *Stats, answers bool) *arp {
	return &arp{
		t: t, out: out, st: st, answers: answers,
		retry:      int64(cfg.ARPRetry),
		resolve:    int64(cfg.ResolveTimeout),
		reachable:  int64(cfg.NeighborReachable),
		refreshAge: int64(cfg.NeighborReachable) / 4 * 3,
	}
}

// request broadcasts an ARP request for e's address.
func (a *arp) request(now int64, e *neighbor) {
	b := a.out.buffer()
	if b == nil {
		return
	}
	m := wire.ARP{
		Op: wire.ARPRequest, SenderMAC: a.out.mac, SenderIP: a.out.ip, TargetIP: e.ip,
		EthDst: wire.Broadcast, EthSrc: a.out.mac,
	}
	a.out.send(wire.EncodeARP(b, &m))
	a.st.ARPRequests++
	e.lastReq, e.asked = now, true
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
		if age >= a.refreshAge && now-e.lastReq >= a.retry {
			a.request(now, e)
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
		if e := a.t.lookup(m.SenderIP, false); e != nil && e.state == nbrResolved && now-e.lastReq >= a.retry {
			a.request(now, e) // its reply, if any, is taken
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
