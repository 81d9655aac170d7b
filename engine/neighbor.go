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

func (c *Core) nbrSlot(ip uint32) int {
	mask := len(c.nbrs) - 1
	i := int((ip*2654435761)>>7) & mask
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
	if !create || c.nbrCount >= len(c.nbrs)/2 {
		return nil
	}
	c.nbrCount++
	*e = neighbor{ip: ip, state: nbrIncomplete, lastReq: -1 << 62}
	return e
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
	wasResolved := e.state == nbrResolved
	e.mac = mac
	e.state = nbrResolved
	if !wasResolved {
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
			s.state = slotQueued
			c.pushBack(fifoOf(s.class), i)
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
