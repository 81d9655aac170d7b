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
// table from the wire.

type nbrState uint8

const (
	nbrEmpty nbrState = iota
	nbrIncomplete
	nbrResolved
	nbrStatic
)

type neighbor struct {
	ip      uint32
	mac     wire.MAC
	state   nbrState
	lastReq int64 // last ARP request sent (ns)
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

// arp speaks ARP for a core: it asks for the MACs of peers, answers for
// its own address, and fills the neighbor table from what it hears.
type arp struct {
	t   *nbrTable
	out *sender
	st  *Stats
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
	e.lastReq = now
}

// receive handles an ARP frame: it learns the sender of a reply or of a
// request for our address, and answers a request for our address. It
// returns the address it resolved (an entry that was incomplete: ops may
// wait for it), if any.
func (a *arp) receive(frame []byte) (ip uint32, mac wire.MAC, resolved bool) {
	var m wire.ARP
	if err := wire.DecodeARP(frame, &m); err != nil {
		a.st.RxDropped++
		return 0, mac, false
	}
	if m.EthDst != a.out.mac && m.EthDst != wire.Broadcast {
		a.st.RxDropped++
		return 0, mac, false
	}
	if m.TargetIP == a.out.ip || m.Op == wire.ARPReply {
		resolved = a.learn(m.SenderIP, m.SenderMAC)
	}
	if m.Op == wire.ARPRequest && m.TargetIP == a.out.ip {
		if b := a.out.buffer(); b != nil {
			r := wire.ARP{
				Op: wire.ARPReply, SenderMAC: a.out.mac, SenderIP: a.out.ip,
				TargetMAC: m.SenderMAC, TargetIP: m.SenderIP,
				EthDst: m.SenderMAC, EthSrc: a.out.mac,
			}
			a.out.send(wire.EncodeARP(b, &r))
			a.st.ARPReplies++
		}
	}
	return m.SenderIP, m.SenderMAC, resolved
}

// learn records ip -> mac from a valid ARP packet and reports whether it
// resolved an incomplete entry. Static entries never change.
func (a *arp) learn(ip uint32, mac wire.MAC) bool {
	if ip == 0 || ip == a.out.ip || mac == wire.Broadcast || mac[0]&1 != 0 {
		return false
	}
	e := a.t.lookup(ip, true)
	if e == nil || e.state == nbrStatic {
		return false
	}
	wasIncomplete := e.state == nbrIncomplete
	e.mac = mac
	e.state = nbrResolved
	return wasIncomplete
}
