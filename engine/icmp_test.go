package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// The pinger: a host on the engine's link (10.0.0.9) and a router
// (10.0.0.254) that reports a smaller next-hop MTU.
var (
	pingMAC   = wire.MAC{2, 9, 9, 9, 9, 9}
	pingIP    = ipOf("10.0.0.9")
	routerMAC = wire.MAC{2, 0xfe, 0, 0, 0, 1}
	routerIP  = ipOf("10.0.0.254")
)

// icmpBackends are the seal backends of this build (ReceiveBurst runs
// frame by frame on "go", with an open batch on "ipsec-mb").
func icmpBackends() []string {
	if mbBuilt {
		return []string{CryptoGo, CryptoIPsecMB}
	}
	return []string{CryptoGo}
}

// rxPaths hand frames to a core: one Receive each, or one ReceiveBurst.
var rxPaths = []struct {
	name string
	rx   func(c *Core, now int64, frames ...[]byte)
}{
	{"Receive", func(c *Core, now int64, frames ...[]byte) {
		for _, f := range frames {
			c.Receive(now, f)
		}
	}},
	{"ReceiveBurst", func(c *Core, now int64, frames ...[]byte) { c.ReceiveBurst(now, frames) }},
}

// forEachRx runs test for every backend and receive path.
func forEachRx(t *testing.T, test func(t *testing.T, crypto string, rx func(c *Core, now int64, frames ...[]byte))) {
	for _, crypto := range icmpBackends() {
		for _, p := range rxPaths {
			t.Run(crypto+"/"+p.name, func(t *testing.T) { test(t, crypto, p.rx) })
		}
	}
}

// icmpCore is a core at 10.0.0.1 (MAC 02:00:00:00:00:01) on backend
// crypto, edited by edit.
func icmpCore(t *testing.T, crypto string, edit func(*Config)) (*Core, *testTx) {
	t.Helper()
	cfg := testConfig("10.0.0.1", 1)
	cfg.Crypto = crypto
	if edit != nil {
		edit(&cfg)
	}
	tx := newTestTx(64)
	return newCore(t, cfg, tx), tx
}

// ipv4Frame is a frame from h carrying msg, an ICMP message whose
// checksum it fills in (when proto is ICMP).
func ipv4Frame(h wire.IPv4, msg []byte) []byte {
	m := append([]byte(nil), msg...)
	if h.Protocol == wire.ProtoICMP {
		m[2], m[3] = 0, 0
		binary.BigEndian.PutUint16(m[2:4], wire.Checksum(m))
	}
	b := make([]byte, max(wire.EthLen+wire.IPv4Len+len(m), wire.MinFrame))
	n := wire.EncodeIPv4(b, &h, len(m))
	copy(b[wire.EthLen+wire.IPv4Len:], m)
	return b[:n]
}

// echoTo is an echo request from the pinger to dst (MAC, address).
func echoTo(mac wire.MAC, ip uint32, id, seq uint16, data []byte) []byte {
	m := make([]byte, wire.ICMPHeaderLen+len(data))
	m[0] = wire.ICMPEchoRequest
	binary.BigEndian.PutUint16(m[4:6], id)
	binary.BigEndian.PutUint16(m[6:8], seq)
	copy(m[wire.ICMPHeaderLen:], data)
	return ipv4Frame(wire.IPv4{DstMAC: mac, SrcMAC: pingMAC, SrcIP: pingIP, DstIP: ip, Protocol: wire.ProtoICMP}, m)
}

// echo is an echo request to 10.0.0.1.
func echo(id, seq uint16, data []byte) []byte {
	return echoTo(wire.MAC{2, 0, 0, 0, 0, 1}, ipOf("10.0.0.1"), id, seq, data)
}

// fragNeeded is the router's fragmentation-needed message to dstMAC,
// dstIP quoting quoted (an IPv4 header and the 8 bytes after it, as RFC
// 792 asks).
func fragNeeded(dstMAC wire.MAC, dstIP uint32, quoted []byte, mtu uint16) []byte {
	m := make([]byte, wire.ICMPHeaderLen+len(quoted))
	m[0], m[1] = wire.ICMPDestUnreachable, wire.ICMPCodeFragNeeded
	binary.BigEndian.PutUint16(m[6:8], mtu)
	copy(m[wire.ICMPHeaderLen:], quoted)
	return ipv4Frame(wire.IPv4{DstMAC: dstMAC, SrcMAC: routerMAC, SrcIP: routerIP, DstIP: dstIP, Protocol: wire.ProtoICMP}, m)
}

// fragNeededAbout is the router's fragmentation-needed message about
// sent (a frame) to its source.
func fragNeededAbout(sent []byte, mtu uint16) []byte {
	return fragNeeded(wire.MAC(sent[6:12]), binary.BigEndian.Uint32(sent[wire.EthLen+12:]), sent[wire.EthLen:wire.EthLen+wire.IPv4Len+8], mtu)
}

// checkReply checks that rep is the reply to an echo with id, seq and
// data from the pinger, from 10.0.0.1: both checksums verified over the
// bytes themselves, then every field.
func checkReply(t *testing.T, rep []byte, id, seq uint16, data []byte) {
	t.Helper()
	if len(rep) < wire.EthLen+wire.IPv4Len+wire.ICMPHeaderLen {
		t.Fatalf("reply of %d bytes", len(rep))
	}
	tot := int(binary.BigEndian.Uint16(rep[wire.EthLen+2:]))
	if tot != wire.IPv4Len+wire.ICMPHeaderLen+len(data) || wire.EthLen+tot > len(rep) {
		t.Fatalf("reply total length %d, want %d", tot, wire.IPv4Len+wire.ICMPHeaderLen+len(data))
	}
	if s := wire.Checksum(rep[wire.EthLen : wire.EthLen+wire.IPv4Len]); s != 0 {
		t.Fatalf("IPv4 header checksum does not verify (%#x)", s)
	}
	if s := wire.Checksum(rep[wire.EthLen+wire.IPv4Len : wire.EthLen+tot]); s != 0 {
		t.Fatalf("ICMP checksum does not verify (%#x)", s)
	}
	var h wire.IPv4
	msg, err := wire.DecodeIPv4(rep, &h)
	if err != nil {
		t.Fatal(err)
	}
	want := wire.IPv4{DstMAC: pingMAC, SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1}, SrcIP: ipOf("10.0.0.1"), DstIP: pingIP, Protocol: wire.ProtoICMP, TTL: 64}
	if h != want {
		t.Fatalf("reply headers (-want +got)\n%+v\n%+v", want, h)
	}
	var m wire.ICMP
	if err := wire.DecodeICMP(msg, &m); err != nil || m != (wire.ICMP{Type: wire.ICMPEchoReply, ID: id, Seq: seq}) {
		t.Fatalf("reply ICMP: %v %+v", err, m)
	}
	if !bytes.Equal(msg[wire.ICMPHeaderLen:], data) {
		t.Fatal("reply does not echo the request's data")
	}
}

func TestICMPEchoAnswered(t *testing.T) {
	forEachRx(t, func(t *testing.T, crypto string, rx func(*Core, int64, ...[]byte)) {
		c, tx := icmpCore(t, crypto, nil)
		for _, size := range []int{0, 56, 1472} { // 1472: the largest a 1500 MTU answers
			data := make([]byte, size)
			pattern(data, byte(size))
			rx(c, 1000, echo(0x77, uint16(size), data))
			out := tx.take()
			if len(out) != 1 {
				t.Fatalf("size %d: %d frames sent, want 1 reply", size, len(out))
			}
			checkReply(t, out[0], 0x77, uint16(size), data)
		}
		if s := c.Stats(); s.ICMPEchoReplies != 3 || s.TxFrames != 3 || s.RxFrames != 3 || s.RxDropped != 0 || s.ICMPRateLimited != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestICMPEchoRateLimited(t *testing.T) {
	forEachRx(t, func(t *testing.T, crypto string, rx func(*Core, int64, ...[]byte)) {
		c, tx := icmpCore(t, crypto, func(cfg *Config) { cfg.ICMPRate, cfg.ICMPBurst = 10, 3 })
		const sec = int64(1e9)
		now := 5 * sec
		burst := func(n int) (answered int) {
			fr := make([][]byte, n)
			for i := range fr {
				fr[i] = echo(1, uint16(i), []byte("x"))
			}
			rx(c, now, fr...)
			return len(tx.take())
		}
		steps := []struct {
			after int64 // ns since the previous step
			send  int
			want  int
		}{
			{0, 5, 3},            // a full bucket: the burst
			{0, 1, 0},            // empty
			{sec / 20, 1, 0},     // half a token
			{sec / 20, 2, 1},     // one token at 10/s after 100 ms
			{10 * sec, 9, 3},     // a long quiet spell refills the burst, no more
			{3 * sec / 10, 5, 3}, // 3 tokens in 300 ms
			{-sec, 1, 0},         // time going backwards refills nothing
		}
		sent, ok := 0, 0
		for i, s := range steps {
			now += s.after
			if got := burst(s.send); got != s.want {
				t.Fatalf("step %d: %d of %d answered, want %d", i, got, s.send, s.want)
			}
			sent, ok = sent+s.send, ok+s.want
		}
		if s := c.Stats(); s.ICMPEchoReplies != uint64(ok) || s.ICMPRateLimited != uint64(sent-ok) {
			t.Fatalf("answered %d, rate-limited %d; want %d, %d", s.ICMPEchoReplies, s.ICMPRateLimited, ok, sent-ok)
		}
	})
}

// TestICMPRateZero: ICMPRate 0 answers no echo, and counts each.
func TestICMPRateZero(t *testing.T) {
	c, tx := icmpCore(t, CryptoGo, func(cfg *Config) { cfg.ICMPRate, cfg.ICMPBurst = 0, 0 })
	for i := range 3 {
		c.Receive(int64(i)*1e9, echo(1, 1, nil))
	}
	if n := len(tx.take()); n != 0 {
		t.Fatalf("%d replies with ICMPRate 0", n)
	}
	if s := c.Stats(); s.ICMPRateLimited != 3 || s.ICMPEchoReplies != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestICMPEchoNotAnswered: echoes that are not the engine's to answer, or
// that it must not answer, get no reply, each with its counter.
func TestICMPEchoNotAnswered(t *testing.T) {
	us := wire.MAC{2, 0, 0, 0, 0, 1}
	from := func(srcMAC wire.MAC, srcIP uint32) []byte {
		f := echo(5, 6, []byte("data"))
		*(*wire.MAC)(f[6:12]) = srcMAC
		binary.BigEndian.PutUint32(f[wire.EthLen+12:], srcIP)
		f[wire.EthLen+10], f[wire.EthLen+11] = 0, 0
		binary.BigEndian.PutUint16(f[wire.EthLen+10:], wire.Checksum(f[wire.EthLen:wire.EthLen+wire.IPv4Len]))
		return f
	}
	big := echo(1, 1, make([]byte, 1473)) // a 1501-byte datagram: its reply would exceed the 1500 MTU
	reply := echo(1, 1, nil)
	reply[wire.EthLen+wire.IPv4Len] = wire.ICMPEchoReply
	binary.BigEndian.PutUint16(reply[wire.EthLen+wire.IPv4Len+2:], 0)
	binary.BigEndian.PutUint16(reply[wire.EthLen+wire.IPv4Len+2:], wire.Checksum(reply[wire.EthLen+wire.IPv4Len:wire.EthLen+wire.IPv4Len+8]))
	badSum := echo(1, 1, []byte("abc"))
	badSum[wire.EthLen+wire.IPv4Len+wire.ICMPHeaderLen] ^= 1
	for _, tc := range []struct {
		name  string
		frame []byte
		want  func(s *Stats) uint64 // the counter that counts it
	}{
		{"another address", echoTo(us, ipOf("10.0.0.77"), 1, 1, nil), func(s *Stats) uint64 { return s.RxDropped }},
		{"another MAC", echoTo(wire.MAC{2, 0, 0, 0, 0, 7}, ipOf("10.0.0.1"), 1, 1, nil), func(s *Stats) uint64 { return s.RxDropped }},
		{"broadcast MAC", echoTo(wire.Broadcast, ipOf("10.0.0.1"), 1, 1, nil), func(s *Stats) uint64 { return s.RxDropped }},
		{"broadcast address", echoTo(us, math.MaxUint32, 1, 1, nil), func(s *Stats) uint64 { return s.RxDropped }},
		{"from a multicast MAC", from(wire.MAC{1, 0, 0x5e, 0, 0, 1}, pingIP), func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"from 0.0.0.0", from(pingMAC, 0), func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"from a multicast address", from(pingMAC, ipOf("224.0.0.1")), func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"from the limited broadcast", from(pingMAC, math.MaxUint32), func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"from loopback", from(pingMAC, ipOf("127.0.0.1")), func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"from the engine's own address", from(pingMAC, ipOf("10.0.0.1")), func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"bad ICMP checksum", badSum, func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"truncated ICMP", ipv4Frame(wire.IPv4{DstMAC: us, SrcMAC: pingMAC, SrcIP: pingIP, DstIP: ipOf("10.0.0.1"), Protocol: wire.ProtoICMP}, []byte{8, 0, 0, 0, 0}),
			func(s *Stats) uint64 { return s.RxICMPMalformed }},
		{"reply larger than the MTU", big, func(s *Stats) uint64 { return s.ICMPEchoTooBig }},
		{"an echo reply", reply, func(s *Stats) uint64 { return s.RxICMPOther }},
		{"bad IPv4 header checksum", func() []byte { f := echo(1, 1, nil); f[wire.EthLen+10] ^= 0x10; return f }(), func(s *Stats) uint64 { return s.RxDropped }},
		{"TCP to the engine", ipv4Frame(wire.IPv4{DstMAC: us, SrcMAC: pingMAC, SrcIP: pingIP, DstIP: ipOf("10.0.0.1"), Protocol: 6}, make([]byte, 20)),
			func(s *Stats) uint64 { return s.RxDropped }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, crypto := range icmpBackends() {
				c, tx := icmpCore(t, crypto, nil)
				c.ReceiveBurst(1000, [][]byte{tc.frame})
				c.Receive(1000, tc.frame)
				s := c.Stats()
				if n := len(tx.take()); n != 0 || s.ICMPEchoReplies != 0 {
					t.Fatalf("%s: %d frames sent, %d replies counted", crypto, n, s.ICMPEchoReplies)
				}
				if got := tc.want(&s); got != 2 {
					t.Fatalf("%s: its counter is %d, want 2; stats %+v", crypto, got, s)
				}
			}
		})
	}
}

// TestFragNeeded: a router's fragmentation-needed about a frame the
// engine sent is counted and its destination and MTU recorded; the
// engine's MTU stays as configured. Forged ones about datagrams the
// engine did not send change nothing but RxICMPOther.
func TestFragNeeded(t *testing.T) {
	forEachRx(t, func(t *testing.T, crypto string, rx func(*Core, int64, ...[]byte)) {
		p := newSecPairCrypto(t, crypto)
		req := p.requestFrame(t, 1, 4096) // a's READ request to 10.0.0.2, from UDP port 4792+0
		maxPayload := p.a.out.maxPayload
		rx(p.a, p.now, fragNeededAbout(req, 1280))
		s := p.a.Stats()
		if s.ICMPFragNeeded != 1 || s.FragNeededDst != ipOf("10.0.0.2") || s.FragNeededMTU != 1280 || s.RxICMPOther != 0 {
			t.Fatalf("after a genuine one: %+v", s)
		}
		// Forgeries: the quoted datagram is not one a sent.
		forge := func(edit func(ip []byte)) []byte {
			q := append([]byte(nil), req[wire.EthLen:wire.EthLen+wire.IPv4Len+8]...)
			edit(q)
			return fragNeeded(wire.MAC{2, 0, 0, 0, 0, 1}, ipOf("10.0.0.1"), q, 576)
		}
		forged := [][]byte{
			forge(func(ip []byte) { ip[12] = 192 }),           // another source address
			forge(func(ip []byte) { ip[15] = 2 }),             // the peer's address
			forge(func(ip []byte) { ip[9] = 6 }),              // TCP
			forge(func(ip []byte) { ip[9] = wire.ProtoICMP }), // ICMP (a ping of ours, were there any)
		}
		rx(p.a, p.now, forged...)
		s = p.a.Stats()
		if s.ICMPFragNeeded != 1 || s.FragNeededDst != ipOf("10.0.0.2") || s.FragNeededMTU != 1280 || s.RxICMPOther != uint64(len(forged)) {
			t.Fatalf("after forgeries: %+v", s)
		}
		// A frame from the other side of an op (b's answer to a request):
		// counted, an RFC 792 router's MTU 0 recorded as is.
		resp := p.serve(req)
		if len(resp) == 0 {
			t.Fatal("no response")
		}
		rx(p.b, p.now, fragNeededAbout(resp[0], 0))
		if s := p.b.Stats(); s.ICMPFragNeeded != 1 || s.FragNeededDst != ipOf("10.0.0.1") || s.FragNeededMTU != 0 {
			t.Fatalf("server side: %+v", s)
		}
		if p.a.out.maxPayload != maxPayload || p.a.cfg.MTU != 1500 {
			t.Fatal("fragmentation needed changed the engine's MTU")
		}
		// The op whose request was quoted still completes: nothing else
		// changed.
		rx(p.a, p.now, resp...)
		p.run()
		if c := p.app.completions(); len(c) != 1 || c[0].Status != abi.StatusOK {
			t.Fatalf("completions %+v", c)
		}
	})
}

// TestIPv4Hygiene: IPv4 with options, fragments and TTL 0, OneRMA or
// ICMP, each counted on its own and never processed; the same frames to
// another engine are RxDropped.
func TestIPv4Hygiene(t *testing.T) {
	forEachRx(t, func(t *testing.T, crypto string, rx func(*Core, int64, ...[]byte)) {
		p := newSecPairCrypto(t, crypto)
		req := p.requestFrame(t, 1, 64)
		ping := echoTo(wire.MAC{2, 0, 0, 0, 0, 2}, ipOf("10.0.0.2"), 1, 1, []byte("x"))
		edits := []func(ip []byte){
			func(ip []byte) { ip[0] = 0x46 },  // options
			func(ip []byte) { ip[6] |= 0x20 }, // more fragments
			func(ip []byte) { ip[7] = 0xb9 },  // a fragment's offset
			func(ip []byte) { ip[8] = 0 },     // TTL 0
		}
		before := p.b.Stats()
		var frames, elsewhere [][]byte
		for _, e := range edits {
			for _, f := range [][]byte{req, ping} {
				g := append([]byte(nil), f...)
				e(g[wire.EthLen:])
				binary.BigEndian.PutUint16(g[wire.EthLen+10:], 0)
				binary.BigEndian.PutUint16(g[wire.EthLen+10:], wire.Checksum(g[wire.EthLen:wire.EthLen+wire.IPv4Len]))
				frames = append(frames, g)
				h := append([]byte(nil), g...)
				h[wire.EthLen+19] = 77 // 10.0.0.77
				elsewhere = append(elsewhere, h)
			}
		}
		rx(p.b, p.now, frames...)
		p.b.Poll(p.now)
		s := p.b.Stats()
		if s.RxIPOptions != 2 || s.RxFragments != 4 || s.RxTTLZero != 2 {
			t.Fatalf("options %d, fragments %d, TTL 0 %d; want 2, 4, 2", s.RxIPOptions, s.RxFragments, s.RxTTLZero)
		}
		if s.RxDropped != before.RxDropped || s.ReqServed != before.ReqServed || s.ICMPEchoReplies != 0 || len(p.tb.take()) != 0 {
			t.Fatalf("processed: %+v", s)
		}
		rx(p.b, p.now, elsewhere...)
		if s2 := p.b.Stats(); s2.RxDropped != before.RxDropped+uint64(len(elsewhere)) || s2.RxIPOptions != 2 || s2.RxFragments != 4 || s2.RxTTLZero != 2 {
			t.Fatalf("frames for another address: %+v", s2)
		}
		rx(p.b, p.now, req) // the genuine request is served as usual
		p.run()
		if c := p.app.completions(); len(c) != 1 || c[0].Status != abi.StatusOK {
			t.Fatalf("completions %+v", c)
		}
		auditBoth(t, p.pair)
	})
}

// TestICMPInBurstOrder: an echo in a burst is answered after the frames
// before it and before those after it, on both backends: the same frames
// in the same order as frame by frame, here around answers sent in
// finish (REMOTE_AUTHENTICATION_FAILURE for requests naming no region).
func TestICMPInBurstOrder(t *testing.T) {
	var got [][][]byte
	for _, crypto := range icmpBackends() {
		p := newSecPairCrypto(t, crypto)
		bogus := func(k int) []byte {
			p.app.post(t, readCmd(p.app.slots[k], ipOf("10.0.0.2"), abi.MakeRegionID(9, 3), 0, p.rd, 0, 64, uint64(k)))
			p.a.Poll(p.now)
			return p.ta.take()[0]
		}
		r1, r2 := bogus(1), bogus(2)
		ping := echoTo(wire.MAC{2, 0, 0, 0, 0, 2}, ipOf("10.0.0.2"), 3, 4, []byte("order"))
		p.b.ReceiveBurst(p.now, [][]byte{r1, ping, r2, ping})
		out := p.tb.take()
		kinds := ""
		for _, f := range out {
			if wire.IPv4Protocol(f) == wire.ProtoICMP {
				kinds += "E"
			} else {
				kinds += "R"
			}
		}
		if kinds != "RERE" {
			t.Fatalf("%s: frames sent %q, want RERE (answer, echo reply, answer, echo reply)", crypto, kinds)
		}
		got = append(got, out)
	}
	if len(got) == 2 {
		for i := range got[0] {
			if wire.IPv4Protocol(got[0][i]) == wire.ProtoICMP && !bytes.Equal(got[0][i], got[1][i]) {
				t.Fatalf("echo reply %d differs between backends", i)
			}
		}
	}
}

func TestICMPAllocs(t *testing.T) {
	for _, crypto := range icmpBackends() {
		p := newSecPairCrypto(t, crypto)
		req := p.requestFrame(t, 1, 64)
		fn := fragNeededAbout(req, 1400)
		ping := echo(1, 2, make([]byte, 56))
		bad := append([]byte(nil), ping...)
		bad[wire.EthLen+8] = 0 // TTL 0
		burst := [][]byte{ping, fn, bad}
		now := p.now
		allocs := testing.AllocsPerRun(100, func() {
			p.a.Receive(now, ping)
			p.a.Receive(now, fn)
			p.a.ReceiveBurst(now, burst)
			p.ta.free = append(p.ta.free, p.ta.q...)
			p.ta.q, p.ta.qlen = p.ta.q[:0], p.ta.qlen[:0]
			now += 1e9
		})
		if allocs != 0 {
			t.Fatalf("%s: %v allocs", crypto, allocs)
		}
		if s := p.a.Stats(); s.ICMPEchoReplies == 0 || s.ICMPFragNeeded == 0 || s.RxTTLZero == 0 {
			t.Fatalf("%s: stats %+v", crypto, s)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	for _, tc := range []struct {
		rate, burst int
		times       []int64 // ns
		want        string  // per take: 1 allowed, 0 refused
	}{
		{1000, 2, []int64{0, 0, 0, 1e6, 1e6, 2e6, 3e6}, "1101011"},
		{1, 1, []int64{1, 1, 999_999_999, 1_000_000_001, 1_000_000_002}, "10010"},
		{maxICMPRate, maxICMPBurst, []int64{math.MaxInt64 / 2, math.MaxInt64 - 1}, "11"}, // huge gaps: no overflow
		{3, 5, []int64{-100, -100, -100, -100, -100, -100}, "111110"},                    // starts full, whatever the clock
		{0, 0, []int64{0, 1e12}, "00"},
	} {
		t.Run(fmt.Sprintf("%d/s burst %d", tc.rate, tc.burst), func(t *testing.T) {
			b := newTokenBucket(tc.rate, tc.burst)
			got := ""
			for _, now := range tc.times {
				if b.take(now) {
					got += "1"
				} else {
					got += "0"
				}
			}
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestICMPConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		rate, burst int
		ok          bool
	}{
		{1000, 50, true}, {0, 0, true}, {1, 1, true}, {maxICMPRate, maxICMPBurst, true},
		{-1, 50, false}, {maxICMPRate + 1, 50, false}, {10, 0, false}, {10, -1, false}, {10, maxICMPBurst + 1, false},
	} {
		cfg := testConfig("10.0.0.1", 1)
		cfg.ICMPRate, cfg.ICMPBurst = tc.rate, tc.burst
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("rate %d burst %d: %v", tc.rate, tc.burst, err)
		}
	}
}
