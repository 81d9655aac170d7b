package engine

import (
	"encoding/binary"

	"github.com/onerma/onerma/wire"
)

// Limits of Config.ICMPRate and ICMPBurst: they keep the token bucket's
// arithmetic (nanotokens in an int64) far from overflow.
const (
	maxICMPRate  = 1_000_000_000
	maxICMPBurst = 1_000_000
)

// icmp is a core's IPv4 below OneRMA: every IPv4 frame that is not a
// well-formed OneRMA message (wire.Decode refused it) comes here. It
// answers ICMP echo to the engine's own address, so that ping works,
// rate-limited by a token bucket; it records "fragmentation needed"
// about a datagram this core sent (counted, the latest one kept for the
// driver to log); and it counts what it drops: IPv4 options, fragments,
// TTL 0, malformed and other ICMP, precisely for frames addressed to the
// engine and as RxDropped for the rest.
//
// A fragmentation-needed message changes nothing but counters: it is
// not authenticated, and anyone on the path could forge one to shrink
// the engine's frames (SECURITY.md). A route's configured MTU sets the
// payload size toward a destination behind a smaller link.
type icmp struct {
	out    *sender
	st     *Stats
	mtu    int // the IPv4 MTU: an echo whose reply would exceed it is not answered
	bucket tokenBucket
	h      wire.IPv4 // the frame being handled
	m      wire.ICMP
}

func newICMP(cfg *Config, out *sender, st *Stats) *icmp {
	return &icmp{out: out, st: st, mtu: cfg.MTU, bucket: newTokenBucket(cfg.ICMPRate, cfg.ICMPBurst)}
}

// receive handles an IPv4 frame that wire.Decode did not accept as a
// OneRMA message. The frame is borrowed for the call only; a reply goes
// out at once, so in a burst the caller ends its open batch first (see
// dispatch.go).
func (p *icmp) receive(now int64, frame []byte) {
	// Addressed to the engine? The destination address is at the same
	// offset whatever else is wrong with the header.
	if len(frame) < wire.EthLen+wire.IPv4Len || wire.MAC(frame[0:6]) != p.out.mac ||
		binary.BigEndian.Uint32(frame[wire.EthLen+16:]) != p.out.ip {
		p.st.RxDropped++
		return
	}
	h, m := &p.h, &p.m
	msg, err := wire.DecodeIPv4(frame, h)
	switch err {
	case nil:
	case wire.ErrIPOptions:
		p.st.RxIPOptions++
		return
	case wire.ErrFragment:
		p.st.RxFragments++
		return
	case wire.ErrTTLZero:
		p.st.RxTTLZero++
		return
	default:
		p.st.RxDropped++
		return
	}
	if h.Protocol != wire.ProtoICMP { // UDP that is no OneRMA message, or another protocol
		p.st.RxDropped++
		return
	}
	if wire.DecodeICMP(msg, m) != nil {
		p.st.RxICMPMalformed++
		return
	}
	switch {
	case m.Type == wire.ICMPEchoRequest:
		p.echo(now, msg)
	case m.Type == wire.ICMPDestUnreachable && m.Code == wire.ICMPCodeFragNeeded && p.ours(m):
		p.st.ICMPFragNeeded++
		p.st.FragNeededDst, p.st.FragNeededMTU = m.InnerDstIP, uint64(m.NextHopMTU)
	default:
		p.st.RxICMPOther++
	}
}

// ours reports whether the datagram a fragmentation-needed message
// quotes is one the engine sent: UDP from the engine's address. The
// address is the engine's alone on its port (the kernel's side of the
// link has none), so no other UDP comes from it; the quoted ports are
// not checked, whichever of its cores and ports the engine sent from.
func (p *icmp) ours(m *wire.ICMP) bool {
	return m.InnerSrcIP == p.out.ip && m.InnerProtocol == wire.ProtoUDP
}

// echo answers the echo request msg (whose headers are in p.h) when its
// source can be answered, its reply fits the MTU and the bucket has a
// token.
func (p *icmp) echo(now int64, msg []byte) {
	h := &p.h
	if h.SrcMAC[0]&1 != 0 || !unicastIPv4(h.SrcIP) || h.SrcIP == p.out.ip {
		p.st.RxICMPMalformed++
		return
	}
	if wire.IPv4Len+len(msg) > p.mtu {
		p.st.ICMPEchoTooBig++
		return
	}
	if !p.bucket.take(now) {
		p.st.ICMPRateLimited++
		return
	}
	b := p.out.buffer()
	if b == nil { // counted (TxNoBuffer)
		return
	}
	p.out.send(wire.EncodeEchoReply(b, h, msg, p.out.mac))
	p.st.ICMPEchoReplies++
}

// unicastIPv4 reports whether a is an address a reply may go to: not
// 0.0.0.0/8 ("this network"), not loopback, not multicast or reserved
// (224.0.0.0 and up, the limited broadcast among them).
func unicastIPv4(a uint32) bool {
	first := a >> 24
	return first != 0 && first != 127 && first < 224
}

// tokenBucket allows rate events per second, burst at once, on the time
// it is given (ns). Credit is kept in nanotokens (a token is 1e9), so a
// refill is one multiplication, exact at any rate.
type tokenBucket struct {
	rate   int64 // tokens per second; 0: nothing is ever allowed
	full   int64 // burst tokens, in nanotokens
	credit int64 // nanotokens available
	last   int64 // time of the last refill
}

const nanotokens = 1_000_000_000

// newTokenBucket is a full bucket. rate and burst are within
// maxICMPRate and maxICMPBurst (Config.Validate).
func newTokenBucket(rate, burst int) tokenBucket {
	full := int64(burst) * nanotokens
	return tokenBucket{rate: int64(rate), full: full, credit: full}
}

// take spends a token if there is one at time now. Time that goes
// backwards refills nothing.
func (b *tokenBucket) take(now int64) bool {
	if b.rate == 0 {
		return false
	}
	if d := now - b.last; d > 0 {
		// Past full/rate ns the bucket is full whatever the credit: the
		// product below stays under full+rate, far from overflow.
		if d > b.full/b.rate {
			b.credit = b.full
		} else {
			b.credit = min(b.full, b.credit+d*b.rate)
		}
		b.last = now
	}
	if b.credit < nanotokens {
		return false
	}
	b.credit -= nanotokens
	return true
}
