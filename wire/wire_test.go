package wire

import (
	"bytes"
	"errors"
	"testing"
)

func sampleFields() Fields {
	return Fields{
		DstMAC: MAC{2, 0, 0, 0, 0, 2}, SrcMAC: MAC{2, 0, 0, 0, 0, 1},
		SrcIP: 0x0a000001, DstIP: 0x0a000002, SrcPort: 4793, DstPort: 4792, DSCP: 46,
		Type: TypeReadResp, PID: 1234, Tag: 0x0000000700000009, Region: 0x00010003,
		Length: 100, Offset: 64,
	}
}

func sampleFrame(t testing.TB, plen int) []byte {
	f := sampleFields()
	f.Length = uint32(plen)
	b := make([]byte, Overhead+plen+MinFrame)
	n := Encode(b, &f, plen)
	for i := 0; i < plen; i++ {
		b[PayloadOffset+i] = byte(i)
	}
	return b[:n]
}

func TestRoundTrip(t *testing.T) {
	for _, plen := range []int{1, 63, 64, 100, 1408} {
		b := sampleFrame(t, plen)
		var got Fields
		p, err := Decode(b, &got)
		if err != nil {
			t.Fatalf("plen %d: %v", plen, err)
		}
		want := sampleFields()
		want.Length = uint32(plen)
		if got != want {
			t.Fatalf("(-want +got)\n%+v\n%+v", want, got)
		}
		if len(p) != plen || p[plen-1] != byte(plen-1) {
			t.Fatalf("payload %d bytes", len(p))
		}
		if err := CheckIPv4Checksum(b); err != nil {
			t.Fatalf("plen %d: %v", plen, err)
		}
	}
}

// The header checksum Encode computes from its inputs matches RFC 1071
// over the written header, for addresses that carry in every position.
func TestEncodeChecksum(t *testing.T) {
	f := sampleFields()
	b := make([]byte, Overhead+MinFrame+1408)
	for _, a := range []uint32{0, 1, 0xffff, 0x10000, 0xfffeffff, 0xffffffff, 0x0a000001, 0xc0a800c7} {
		for _, plen := range []int{0, 1, 1408} {
			for _, dscp := range []uint8{0, 1, 10, 46, 63} {
				f.SrcIP, f.DstIP, f.DSCP = a, ^a, dscp
				Encode(b, &f, plen)
				if err := CheckIPv4Checksum(b); err != nil {
					t.Fatalf("addr %#x plen %d dscp %d: %v", a, plen, dscp, err)
				}
				if b[EthLen+1] != dscp<<2 {
					t.Fatalf("dscp %d: TOS byte %#x", dscp, b[EthLen+1])
				}
			}
		}
	}
}

// Every single-bit flip of a valid frame is either rejected by Decode or
// caught by the integrity check — except the Ethernet MAC addresses, which
// the engine checks itself, and the IPv4 fields the engine does not use
// (ID, DF and reserved flags, TTL, header checksum), which only CheckIPv4Checksum sees,
// and the DSCP (decoded, but outside the AAD on purpose: fabrics remark it).
// Every header field Decode returns, except the MACs (a link's FCS guards
// them, and the engine checks the destination MAC itself), lies inside the
// additional authenticated data, and so does the IV: a flipped bit that
// changes a decoded field, or the IV, is a flipped AAD bit, which AES-GCM
// rejects. Bits outside AAD and payload either fail Decode, change
// nothing Decode reports, or are IPv4 header fields the engine ignores.
func TestAADCoversDecodedFields(t *testing.T) {
	b := sampleFrame(t, 100)
	var orig Fields
	if _, err := Decode(b, &orig); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(IV(b), orig.IV[:]) || &IV(b)[0] != &AAD(b)[IVOffset-AADOffset] {
		t.Fatal("IV field not inside AAD")
	}
	if len(AAD(b)) != 64 || len(Trailer(b, 100)) != TrailerLen || len(Sealed(b, 100)) != 100+TrailerLen {
		t.Fatal("AAD, trailer or sealed range has the wrong size")
	}
	for i := 0; i < PayloadOffset*8; i++ {
		c := append([]byte(nil), b...)
		c[i/8] ^= 1 << (i % 8)
		var f Fields
		if _, err := Decode(c, &f); err != nil {
			continue
		}
		f.DstMAC, f.SrcMAC, f.DSCP = orig.DstMAC, orig.SrcMAC, orig.DSCP
		if f != orig && (i/8 < AADOffset || i/8 >= PayloadOffset) {
			t.Fatalf("bit %d (byte %d) changes a decoded field outside the AAD", i, i/8)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good := sampleFrame(t, 100)
	for _, tc := range []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:40] }, ErrShort},
		{"truncated payload", func(b []byte) []byte { return b[:len(b)-20] }, ErrIPHeader},
		{"not ipv4", func(b []byte) []byte { b[12] = 0x86; return b }, ErrNotIPv4},
		{"options", func(b []byte) []byte { b[EthLen] = 0x46; return b }, ErrIPOptions},
		{"ihl 4", func(b []byte) []byte { b[EthLen] = 0x44; return b }, ErrIPHeader},
		{"version 6", func(b []byte) []byte { b[EthLen] = 0x65; return b }, ErrIPHeader},
		{"fragment", func(b []byte) []byte { b[EthLen+6] = 0x20; return b }, ErrFragment},
		{"fragment offset", func(b []byte) []byte { b[EthLen+7] = 1; return b }, ErrFragment},
		{"ttl 0", func(b []byte) []byte { b[EthLen+8] = 0; return b }, ErrTTLZero},
		{"tcp", func(b []byte) []byte { b[EthLen+9] = 6; return b }, ErrNotUDP},
		{"version", func(b []byte) []byte { b[EthLen+IPv4Len+UDPLen] = 9; return b }, ErrVersion},
		{"type", func(b []byte) []byte { b[EthLen+IPv4Len+UDPLen+1] = 77; return b }, ErrType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mod(append([]byte(nil), good...))
			var f Fields
			p, err := Decode(b, &f)
			if !errors.Is(err, tc.want) || p != nil {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestChecksumKnownAnswer(t *testing.T) {
	// RFC 1071 example header (Wikipedia IPv4 header checksum example).
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := Checksum(h); got != 0xb861 {
		t.Fatalf("checksum %#x, want 0xb861", got)
	}
}

func TestARPRoundTrip(t *testing.T) {
	a := ARP{Op: ARPRequest, SenderMAC: MAC{2, 1, 2, 3, 4, 5}, SenderIP: 0x0a000001, TargetIP: 0x0a000002, EthDst: Broadcast, EthSrc: MAC{2, 1, 2, 3, 4, 5}}
	b := make([]byte, MinFrame)
	if n := EncodeARP(b, &a); n != MinFrame {
		t.Fatal(n)
	}
	var got ARP
	if err := DecodeARP(b, &got); err != nil || got != a {
		t.Fatalf("%v %+v", err, got)
	}
	b[EthLen+7] = 9
	if err := DecodeARP(b, &got); err == nil {
		t.Fatal("bad op accepted")
	}
}

func TestDecodeAllocs(t *testing.T) {
	b := sampleFrame(t, 1024)
	var f Fields
	if n := testing.AllocsPerRun(100, func() {
		_, _ = Decode(b, &f)
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// The lookup types carry the header's last word (Aux); every other
// type must leave it 0.
func TestLookupAux(t *testing.T) {
	for _, tc := range []struct {
		typ  Type
		plen int
	}{{TypeLookupReq, 0}, {TypeLookupResp, 100}} {
		f := sampleFields()
		f.Type, f.Length, f.Aux, f.Flags = tc.typ, uint32(tc.plen), 0xdeadbeef, FlagBucket
		b := make([]byte, Overhead+tc.plen+MinFrame)
		n := Encode(b, &f, tc.plen)
		var got Fields
		if _, err := Decode(b[:n], &got); err != nil || got != f {
			t.Fatalf("%v: %v\n%+v\n%+v", tc.typ, err, f, got)
		}
	}
	for _, typ := range []Type{TypeReadReq, TypeReadResp, TypeWriteReq, TypeError} {
		f := sampleFields()
		f.Type, f.Aux = typ, 1
		plen := 0
		if typ == TypeReadResp {
			plen = int(f.Length)
		}
		b := make([]byte, Overhead+plen+MinFrame)
		n := Encode(b, &f, plen)
		var got Fields
		if _, err := Decode(b[:n], &got); !errors.Is(err, ErrReservedBit) {
			t.Fatalf("%v with aux: %v", typ, err)
		}
	}
	// A lookup request carries no payload.
	f := sampleFields()
	f.Type, f.Length = TypeLookupReq, 100
	b := make([]byte, Overhead+100+MinFrame)
	n := Encode(b, &f, 100)
	var got Fields
	if _, err := Decode(b[:n], &got); !errors.Is(err, ErrLength) {
		t.Fatalf("a lookup request with a payload: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(sampleFrame(f, 0))
	f.Add(sampleFrame(f, 100))
	f.Add(sampleFrame(f, 1408))
	arp := make([]byte, MinFrame)
	EncodeARP(arp, &ARP{Op: ARPReply, SenderIP: 1, TargetIP: 2})
	f.Add(arp)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fl Fields
		p, err := Decode(b, &fl)
		if err != nil {
			if p != nil {
				t.Fatal("payload on error")
			}
		} else {
			// A valid frame re-encodes to the same headers.
			out := make([]byte, Overhead+len(p)+MinFrame)
			Encode(out, &fl, len(p))
			copy(out[PayloadOffset:], p)
			var g Fields
			q, err := Decode(out, &g)
			if err != nil || g != fl || !bytes.Equal(p, q) {
				t.Fatalf("round trip: %v\n%+v\n%+v", err, fl, g)
			}
		}
		var a ARP
		if DecodeARP(b, &a) == nil {
			out := make([]byte, MinFrame)
			EncodeARP(out, &a)
			var a2 ARP
			if DecodeARP(out, &a2) != nil || a2 != a {
				t.Fatal("ARP round trip")
			}
		}
	})
}
