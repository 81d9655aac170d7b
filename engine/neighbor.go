package engine

import (
	"github.com/onerma/onerma/wire"
)

// The neighbor table maps peer IPv4 addresses to MACs (ARP, RFC 826). It is
// a fixed open-addressing table: no growth, no eviction of static entries;
// when it is more than half full a new peer cannot be resolved and ops to it
// complete with StatusUnreachable (an explicit, finite resource like every
// other table of the engine).

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

func (c *Core) nbrHome(ip uint32) int { return int((ip*2654435761)>>7) & (len(c.nbrs) - 1) }

func (c *Core) nbrSlot(ip uint32) int {
	mask := len(c.nbrs) - 1
	i := c.nbrHome(ip)
	for {
		e := &c.nbrs[i]
		if e.state == nbrEmpty || e.ip == ip {
			return i
		}
		i = (i + 1) & mask
	}
}

// nbrLookup returns the entry for ip, creating an incomplete one when there
// is room; nil when the table is full.
func (c *Core) nbrLookup(ip uint32, create bool) *neighbor {
	i := c.nbrSlot(ip)
	e := &c.nbrs[i]
	if e.state != nbrEmpty {
		return e
	}
	// At most half the table is used (short probe chains). Entries of
	// addresses that never answer are forgotten when their last op gives
	// up (forgetIfUnwanted), so they hold room for ResolveTimeout at most.
	if !create || c.nbrCount >= len(c.nbrs)/2 {
		return nil
	}
	c.nbrCount++
	*e = neighbor{ip: ip, state: nbrIncomplete, lastReq: -1 << 62}
	return e
}

// forgetIfUnwanted drops an unresolved entry once no op waits for it.
func (c *Core) forgetIfUnwanted(ip uint32) {
	for i := c.lists[listResolving].head; i >= 0; i = c.slots[i].next {
		if c.slots[i].remoteIP == ip {
			return
		}
	}
	i := c.nbrSlot(ip)
	if e := &c.nbrs[i]; e.state != nbrIncomplete || e.ip != ip {
		return
	}
	// Backward-shift deletion keeps linear probe chains intact without
	// tombstones: move later entries of the chain into the hole when their
	// home slot does not lie cyclically in (hole, j].
	mask := len(c.nbrs) - 1
	hole := i
	for j := (i + 1) & mask; c.nbrs[j].state != nbrEmpty; j = (j + 1) & mask {
		k := c.nbrHome(c.nbrs[j].ip)
		if (hole <= j && hole < k && k <= j) || (hole > j && (hole < k || k <= j)) {
			continue
		}
		c.nbrs[hole] = c.nbrs[j]
		hole = j
	}
	c.nbrs[hole] = neighbor{}
	c.nbrCount--
}

// learn records ip -> mac from a frame that proved itself (a valid ARP
// packet or an authenticated request). Static entries never change.
func (c *Core) learn(now int64, ip uint32, mac wire.MAC) {
	if ip == 0 || ip == c.ip || mac == wire.Broadcast || mac[0]&1 != 0 {
		return
	}
	e := c.nbrLookup(ip, true)
	if e == nil || e.state == nbrStatic {
		return
	}
	wasIncomplete := e.state == nbrIncomplete
	e.mac = mac
	e.state = nbrResolved
	if wasIncomplete {
		c.wakeResolved(now, ip, mac)
	}
}

// wakeResolved moves every op waiting for ip into its arbiter FIFO.
func (c *Core) wakeResolved(now int64, ip uint32, mac wire.MAC) {
	for i := c.lists[listResolving].head; i >= 0; {
		s := &c.slots[i]
		next := s.next
		if s.remoteIP == ip {
			c.unlink(i)
			s.mac = mac
			c.enqueue(now, i)
		}
		i = next
	}
}

func (c *Core) sendARPRequest(now int64, e *neighbor) {
	b := c.tx.Buffer()
	if b == nil {
		c.stats.TxNoBuffer++
		return
	}
	a := wire.ARP{
		Op: wire.ARPRequest, SenderMAC: c.mac, SenderIP: c.ip, TargetIP: e.ip,
		EthDst: wire.Broadcast, EthSrc: c.mac,
	}
	c.tx.Send(wire.EncodeARP(b, &a))
	c.stats.TxFrames++
	c.stats.ARPRequests++
	e.lastReq = now
}

func (c *Core) receiveARP(now int64, frame []byte) {
	var a wire.ARP
	if err := wire.DecodeARP(frame, &a); err != nil {
		c.stats.RxDropped++
		return
	}
	if a.EthDst != c.mac && a.EthDst != wire.Broadcast {
		c.stats.RxDropped++
		return
	}
	if a.TargetIP == c.ip || a.Op == wire.ARPReply {
		c.learn(now, a.SenderIP, a.SenderMAC)
	}
	if a.Op != wire.ARPRequest || a.TargetIP != c.ip {
		return
	}
	b := c.tx.Buffer()
	if b == nil {
		c.stats.TxNoBuffer++
		return
	}
	r := wire.ARP{
		Op: wire.ARPReply, SenderMAC: c.mac, SenderIP: c.ip,
		TargetMAC: a.SenderMAC, TargetIP: a.SenderIP,
		EthDst: a.SenderMAC, EthSrc: c.mac,
	}
	c.tx.Send(wire.EncodeARP(b, &r))
	c.stats.TxFrames++
	c.stats.ARPReplies++
}
