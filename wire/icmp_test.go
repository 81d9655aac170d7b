package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

var (
	pingerMAC = MAC{2, 0, 0, 0, 0, 9}
	engineMAC = MAC{2, 0, 0, 0, 0, 1}
)

const (
	pingerIP = 0x0a000009 // 10.0.0.9
	engineIP = 0x0a000001 // 10.0.0.1
)

// icmpFrame builds an IPv4 frame from h carrying the ICMP message msg,
// whose checksum it fills in.
func icmpFrame(h IPv4, msg []byte) []byte {
	m := append([]byte(nil), msg...)
	m[2], m[3] = 0, 0
	binary.BigEndian.PutUint16(m[2:4], Checksum(m))
	b := make([]byte, max(EthLen+IPv4Len+len(m), MinFrame))
	h.Protocol = ProtoICMP
	n := EncodeIPv4(b, &h, len(m))
	copy(b[EthLen+IPv4Len:], m)
	return b[:n]
}

// echoRequest is a ping from 10.0.0.9 to 10.0.0.1 with data bytes.
func echoRequest(id, seq uint16, data []byte) []byte {
	m := make([]byte, ICMPHeaderLen+len(data))
	m[0] = ICMPEchoRequest
	binary.BigEndian.PutUint16(m[4:6], id)
	binary.BigEndian.PutUint16(m[6:8], seq)
	copy(m[ICMPHeaderLen:], data)
	return icmpFrame(IPv4{DstMAC: engineMAC, SrcMAC: pingerMAC, SrcIP: pingerIP, DstIP: engineIP, TOS: 0x10}, m)
}

// fragNeeded is a router's (10.0.0.254) fragmentation-needed message to
// 10.0.0.1 about the frame quoted (its IPv4 header and at least 8 bytes
// after it).
func fragNeeded(mtu uint16, quoted []byte) []byte {
	m := make([]byte, ICMPHeaderLen+len(quoted))
	m[0], m[1] = ICMPDestUnreachable, ICMPCodeFragNeeded
	binary.BigEndian.PutUint16(m[6:8], mtu)
	copy(m[ICMPHeaderLen:], quoted)
	return icmpFrame(IPv4{DstMAC: engineMAC, SrcMAC: pingerMAC, SrcIP: 0x0a0000fe, DstIP: engineIP}, m)
}

// sum16 is the Internet checksum written the slow, obvious way: the
// one's-complement sum of 16-bit big-endian words, odd byte padded.
func sum16(b []byte) uint16 {
	s := uint32(0)
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func TestEchoReply(t *testing.T) {
	for _, size := range []int{0, 1, 17, 56, 1472} { // 56: ping's default; 1472 fills a 1500 MTU
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*13 + 5)
		}
		req := echoRequest(0x1234, 7, data)
		var h IPv4
		msg, err := DecodeIPv4(req, &h)
		if err != nil {
			t.Fatalf("size %d: request: %v", size, err)
		}
		var m ICMP
		if err := DecodeICMP(msg, &m); err != nil || m != (ICMP{Type: ICMPEchoRequest, ID: 0x1234, Seq: 7}) {
			t.Fatalf("size %d: request: %v %+v", size, err, m)
		}
		b := make([]byte, replyBuf(size))
		n := EncodeEchoReply(b, &h, msg, engineMAC)
		if want := max(EthLen+IPv4Len+ICMPHeaderLen+size, MinFrame); n != want {
			t.Fatalf("size %d: reply length %d, want %d", size, n, want)
		}
		rep := b[:n]
		// Checked independently of the decoders: both checksums, by the
		// obvious sum.
		ip := rep[EthLen : EthLen+IPv4Len]
		icmp := rep[EthLen+IPv4Len : EthLen+IPv4Len+ICMPHeaderLen+size]
		if sum16(ip) != 0 || sum16(icmp) != 0 {
			t.Fatalf("size %d: checksums do not verify: ip %#x icmp %#x", size, sum16(ip), sum16(icmp))
		}
		var rh IPv4
		rmsg, err := DecodeIPv4(rep, &rh)
		if err != nil {
			t.Fatalf("size %d: reply: %v", size, err)
		}
		want := IPv4{DstMAC: pingerMAC, SrcMAC: engineMAC, SrcIP: engineIP, DstIP: pingerIP, Protocol: ProtoICMP, TTL: 64, TOS: 0x10}
		if rh != want {
			t.Fatalf("size %d: reply headers (-want +got)\n%+v\n%+v", size, want, rh)
		}
		if f := binary.BigEndian.Uint16(ip[6:8]); f != 0x4000 {
			t.Fatalf("size %d: flags/offset %#x, want DF", size, f)
		}
		var rm ICMP
		if err := DecodeICMP(rmsg, &rm); err != nil || rm != (ICMP{Type: ICMPEchoReply, ID: 0x1234, Seq: 7}) {
			t.Fatalf("size %d: reply ICMP: %v %+v", size, err, rm)
		}
		if !bytes.Equal(rmsg[ICMPHeaderLen:], data) {
			t.Fatalf("size %d: data not echoed", size)
		}
		for _, p := range rep[EthLen+IPv4Len+len(rmsg):] {
			if p != 0 {
				t.Fatalf("size %d: padding not zero", size)
			}
		}
	}
}

// MaxFrame is the buffer an echo reply to size data bytes needs.
func replyBuf(size int) int { return max(EthLen+IPv4Len+ICMPHeaderLen+size, MinFrame) }

// TestEchoReplyChecksumIncremental checks the reply's checksum, computed
// over the whole message, against the incremental update (RFC 1624) of
// the request's: only the type changed, 8 -> 0, so the reply's checksum
// is the request's plus 0x0800 in one's-complement arithmetic. The
// request is shaped as Linux ping sends it (56 data bytes, a timestamp
// then a byte pattern).
func TestEchoReplyChecksumIncremental(t *testing.T) {
	data := make([]byte, 56)
	for i := 8; i < 56; i++ {
		data[i] = byte(i) // ping's pattern after its 8-byte timestamp
	}
	copy(data, []byte{0x6e, 0x7f, 0x65, 0x66, 0, 0, 0, 0})
	req := echoRequest(0x5a1c, 1, data)
	var h IPv4
	msg, err := DecodeIPv4(req, &h)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, replyBuf(56))
	n := EncodeEchoReply(b, &h, msg, engineMAC)
	reqSum := uint32(binary.BigEndian.Uint16(msg[2:4]))
	s := reqSum + 0x0800
	want := uint16(s&0xffff + s>>16)
	if got := binary.BigEndian.Uint16(b[EthLen+IPv4Len+2:]); got != want || n != EthLen+IPv4Len+64 {
		t.Fatalf("reply checksum %#x, want %#x (request's %#x); length %d", got, want, reqSum, n)
	}
}

func TestDecodeIPv4Errors(t *testing.T) {
	good := echoRequest(1, 1, make([]byte, 32))
	for _, tc := range []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:EthLen+IPv4Len-1] }, ErrShort},
		{"not ipv4", func(b []byte) []byte { b[12] = 0x86; return b }, ErrNotIPv4},
		{"options", func(b []byte) []byte { b[EthLen] = 0x46; return b }, ErrIPOptions},
		{"ihl 4", func(b []byte) []byte { b[EthLen] = 0x44; return b }, ErrIPHeader},
		{"version 6", func(b []byte) []byte { b[EthLen] = 0x65; return b }, ErrIPHeader},
		{"total length beyond frame", func(b []byte) []byte { return b[:len(b)-1] }, ErrIPHeader},
		{"total length below header", func(b []byte) []byte { b[EthLen+2], b[EthLen+3] = 0, 19; return b }, ErrIPHeader},
		{"more fragments", func(b []byte) []byte { b[EthLen+6] |= 0x20; return b }, ErrFragment},
		{"fragment offset", func(b []byte) []byte { b[EthLen+7] = 1; return b }, ErrFragment},
		{"ttl 0", func(b []byte) []byte { b[EthLen+8] = 0; return b }, ErrTTLZero},
		{"header checksum", func(b []byte) []byte { b[EthLen+10] ^= 1; return b }, ErrIPChecksum},
		{"address bit", func(b []byte) []byte { b[EthLen+13] ^= 4; return b }, ErrIPChecksum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mod(append([]byte(nil), good...))
			h := IPv4{TTL: 99}
			p, err := DecodeIPv4(b, &h)
			if !errors.Is(err, tc.want) || p != nil || h != (IPv4{TTL: 99}) {
				t.Fatalf("got %v (payload %d bytes, %+v), want %v", err, len(p), h, tc.want)
			}
		})
	}
}

// TestDecodeIPv4Padding: Ethernet padding after a short datagram is not
// payload.
func TestDecodeIPv4Padding(t *testing.T) {
	req := echoRequest(1, 2, nil) // 42 bytes, padded to 60
	if len(req) != MinFrame {
		t.Fatal(len(req))
	}
	var h IPv4
	p, err := DecodeIPv4(req, &h)
	if err != nil || len(p) != ICMPHeaderLen {
		t.Fatalf("%v, payload %d bytes", err, len(p))
	}
}

// quotedUDP is the first 28 bytes of a OneRMA frame from 10.0.0.1:4793
// to 10.2.0.2:4792 as a router quotes it; ihl > 5 quotes options too.
func quotedUDP(ihl int) []byte {
	q := make([]byte, ihl*4+8)
	q[0] = byte(0x40 | ihl)
	binary.BigEndian.PutUint16(q[2:4], 1500)
	q[8], q[9] = 63, ProtoUDP
	binary.BigEndian.PutUint32(q[12:16], engineIP)
	binary.BigEndian.PutUint32(q[16:20], 0x0a020002)
	binary.BigEndian.PutUint16(q[ihl*4:], 4793)
	binary.BigEndian.PutUint16(q[ihl*4+2:], 4792)
	return q
}

func TestDecodeFragNeeded(t *testing.T) {
	want := ICMP{Type: ICMPDestUnreachable, Code: ICMPCodeFragNeeded, NextHopMTU: 1280,
		InnerSrcIP: engineIP, InnerDstIP: 0x0a020002, InnerProtocol: ProtoUDP, InnerSrcPort: 4793, InnerDstPort: 4792}
	for _, tc := range []struct {
		name   string
		quoted []byte
	}{
		{"rfc 792: header and 8 bytes", quotedUDP(5)},
		{"rfc 1812: more of the datagram", append(quotedUDP(5), make([]byte, 100)...)},
		{"quoted header with options", quotedUDP(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h IPv4
			msg, err := DecodeIPv4(fragNeeded(1280, tc.quoted), &h)
			if err != nil {
				t.Fatal(err)
			}
			var m ICMP
			if err := DecodeICMP(msg, &m); err != nil || m != want {
				t.Fatalf("%v (-want +got)\n%+v\n%+v", err, want, m)
			}
		})
	}
}

func TestDecodeICMPErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  func() []byte // the ICMP message, checksum filled in after
		want error
	}{
		{"short header", func() []byte { return []byte{ICMPEchoRequest, 0, 0, 0, 0, 0, 0} }, ErrICMP},
		{"frag needed without quote", func() []byte {
			return []byte{ICMPDestUnreachable, ICMPCodeFragNeeded, 0, 0, 0, 0, 5, 0}
		}, ErrICMP},
		{"frag needed, quote short of 8 bytes", func() []byte {
			q := quotedUDP(5)
			return append([]byte{ICMPDestUnreachable, ICMPCodeFragNeeded, 0, 0, 0, 0, 5, 0}, q[:len(q)-1]...)
		}, ErrICMP},
		{"frag needed, quoted options cut", func() []byte {
			q := quotedUDP(7)
			return append([]byte{ICMPDestUnreachable, ICMPCodeFragNeeded, 0, 0, 0, 0, 5, 0}, q[:27]...)
		}, ErrICMP},
		{"frag needed, quoted ihl 4", func() []byte {
			q := quotedUDP(5)
			q[0] = 0x44
			return append([]byte{ICMPDestUnreachable, ICMPCodeFragNeeded, 0, 0, 0, 0, 5, 0}, q...)
		}, ErrICMP},
		{"frag needed, quoted version 6", func() []byte {
			q := quotedUDP(5)
			q[0] = 0x65
			return append([]byte{ICMPDestUnreachable, ICMPCodeFragNeeded, 0, 0, 0, 0, 5, 0}, q...)
		}, ErrICMP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.msg()
			if len(m) >= 4 {
				binary.BigEndian.PutUint16(m[2:4], Checksum(m))
			}
			got := ICMP{Seq: 99}
			if err := DecodeICMP(m, &got); !errors.Is(err, tc.want) || got != (ICMP{Seq: 99}) {
				t.Fatalf("got %v %+v, want %v", err, got, tc.want)
			}
		})
	}
}

// TestDecodeICMPChecksum: every single-bit flip of an echo request or a
// fragmentation-needed message is refused.
func TestDecodeICMPChecksum(t *testing.T) {
	for _, frame := range [][]byte{echoRequest(3, 4, []byte("abcdefg")), fragNeeded(1400, quotedUDP(5))} {
		var h IPv4
		msg, err := DecodeIPv4(frame, &h)
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(msg) * 8 {
			b := append([]byte(nil), msg...)
			b[i/8] ^= 1 << (i % 8)
			var m ICMP
			if err := DecodeICMP(b, &m); err != ErrICMPChecksum {
				t.Fatalf("bit %d flipped: %v, want %v", i, err, ErrICMPChecksum)
			}
		}
	}
}

func TestIPv4Protocol(t *testing.T) {
	if p := IPv4Protocol(echoRequest(1, 1, nil)); p != ProtoICMP {
		t.Fatal(p)
	}
	if p := IPv4Protocol(sampleFrame(t, 64)); p != ProtoUDP {
		t.Fatal(p)
	}
	arp := make([]byte, MinFrame)
	EncodeARP(arp, &ARP{Op: ARPRequest})
	if p := IPv4Protocol(arp); p != 0 {
		t.Fatal(p)
	}
	if p := IPv4Protocol(make([]byte, EthLen+IPv4Len-1)); p != 0 {
		t.Fatal(p)
	}
}

func TestICMPAllocs(t *testing.T) {
	req := echoRequest(1, 1, make([]byte, 56))
	fn := fragNeeded(1280, quotedUDP(5))
	out := make([]byte, replyBuf(56))
	var h IPv4
	var m ICMP
	if n := testing.AllocsPerRun(100, func() {
		msg, _ := DecodeIPv4(req, &h)
		_ = DecodeICMP(msg, &m)
		EncodeEchoReply(out, &h, msg, engineMAC)
		msg, _ = DecodeIPv4(fn, &h)
		_ = DecodeICMP(msg, &m)
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// FuzzDecodeICMP: DecodeIPv4 and DecodeICMP never panic; an error leaves
// no payload; a valid datagram re-encodes to the same headers; every
// valid echo request gets a reply that decodes as its echo, with both
// checksums valid.
func FuzzDecodeICMP(f *testing.F) {
	f.Add(echoRequest(1, 1, nil))
	f.Add(echoRequest(0xffff, 0xfffe, make([]byte, 57)))
	f.Add(fragNeeded(1280, quotedUDP(5)))
	f.Add(fragNeeded(0, quotedUDP(6)))
	f.Add(sampleFrame(f, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h IPv4
		msg, err := DecodeIPv4(b, &h)
		if err != nil {
			if msg != nil {
				t.Fatal("payload on error")
			}
			return
		}
		// The headers re-encode (ID, flags and TTL are the encoder's own).
		out := make([]byte, max(EthLen+IPv4Len+len(msg), MinFrame))
		copy(out[EthLen+IPv4Len:], msg)
		EncodeIPv4(out, &h, len(msg))
		var g IPv4
		q, err := DecodeIPv4(out, &g)
		h.TTL = 64
		if err != nil || g != h || !bytes.Equal(q, msg) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, h, g)
		}
		var m ICMP
		if err := DecodeICMP(msg, &m); err != nil || m.Type != ICMPEchoRequest {
			return
		}
		rep := make([]byte, max(EthLen+IPv4Len+len(msg), MinFrame))
		n := EncodeEchoReply(rep, &h, msg, engineMAC)
		var rh IPv4
		rmsg, err := DecodeIPv4(rep[:n], &rh)
		if err != nil || rh.SrcIP != h.DstIP || rh.DstIP != h.SrcIP || rh.DstMAC != h.SrcMAC {
			t.Fatalf("reply headers: %v %+v", err, rh)
		}
		var rm ICMP
		if err := DecodeICMP(rmsg, &rm); err != nil || rm.Type != ICMPEchoReply || rm.ID != m.ID || rm.Seq != m.Seq ||
			!bytes.Equal(rmsg[ICMPHeaderLen:], msg[ICMPHeaderLen:]) {
			t.Fatalf("reply: %v %+v", err, rm)
		}
	})
}
