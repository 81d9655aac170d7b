package engine

import (
	"encoding/binary"
	"testing"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// steerFrame encodes a OneRMA frame of type typ to dst port dport whose IV
// is addr ‖ ctr.
func steerFrame(typ wire.Type, sport, dport uint16, addr [4]byte, ctr uint64) []byte {
	b := make([]byte, MaxFrameBytes)
	f := wire.Fields{
		DstMAC: wire.MAC{2, 0, 0, 0, 0, 2}, SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1},
		SrcIP: binary.BigEndian.Uint32(addr[:]), DstIP: ipOf("10.0.0.2"),
		SrcPort: sport, DstPort: dport, Type: typ, Length: 64,
	}
	aesni.PutNonce(f.IV[:], addr, ctr)
	plen := 0
	if typ == wire.TypeReadResp || typ == wire.TypeWriteData {
		plen = 64
	}
	return b[:wire.Encode(b, &f, plen)]
}

// Every kind of frame goes to the core that owns it: answers, READ data
// and pulls to the core of their initiator port, WRITE data to the core
// of its port (core 0's to the base port, told from a request by its
// type), requests by their sender lane, ARP to every core, and anything
// else to the core that received it.
func TestSteer(t *testing.T) {
	const base, cores = 4792, 4
	a := [4]byte{10, 0, 0, 1}
	ip := func(f []byte, edit func(h []byte)) []byte { edit(f[wire.EthLen:]); return f }
	ipv6 := steerFrame(wire.TypeReadReq, 1, base, a, 1)
	ipv6[12], ipv6[13] = 0x86, 0xdd
	arp := make([]byte, 64)
	arpLen := wire.EncodeARP(arp, &wire.ARP{Op: wire.ARPRequest, EthDst: wire.Broadcast, EthSrc: wire.MAC{2, 0, 0, 0, 0, 1}})
	req := steerFrame(wire.TypeReadReq, wire.InitiatorPort(7, 1), base, a, 5)
	lane := steerRequest(req, cores)
	cases := []struct {
		name  string
		frame []byte
		want  int
	}{
		{"READ data", steerFrame(wire.TypeReadResp, base, wire.InitiatorPort(9, 2), a, 1), 2},
		{"NACK", steerFrame(wire.TypeNack, base, wire.InitiatorPort(0, 3), a, 1), 3},
		{"error", steerFrame(wire.TypeError, base, wire.InitiatorPort(255, 0), a, 1), 0},
		{"ack", steerFrame(wire.TypeAck, base+1, wire.InitiatorPort(3, 1), a, 1), 1},
		{"pull", steerFrame(wire.TypePullReq, base+2, wire.InitiatorPort(3, 1), a, 1), 1},
		{"answer for a core the engine lacks", steerFrame(wire.TypeReadResp, base, wire.InitiatorPort(3, 9), a, 1), SteerLocal},
		{"WRITE data to core 0", steerFrame(wire.TypeWriteData, wire.InitiatorPort(3, 1), base, a, 1), 0},
		{"WRITE data to core 3", steerFrame(wire.TypeWriteData, wire.InitiatorPort(3, 1), base+3, a, 1), 3},
		{"to a port past the cores", steerFrame(wire.TypeWriteData, wire.InitiatorPort(3, 1), base+4, a, 1), SteerLocal},
		{"below the base port", steerFrame(wire.TypeReadReq, wire.InitiatorPort(3, 1), base-1, a, 1), SteerLocal},
		{"READ request", req, lane},
		{"WRITE request, same lane", steerFrame(wire.TypeWriteReq, wire.InitiatorPort(200, 1), base, a, 1<<20), lane},
		{"REKEY request, same lane", steerFrame(wire.TypeRekeyReq, wire.InitiatorPort(1, 2), base, a, 99), lane},
		{"ARP", arp[:arpLen], SteerAll},
		{"ICMP", ip(steerFrame(wire.TypeReadReq, 1, base, a, 1), func(h []byte) { h[9] = 1 }), SteerLocal},
		{"IPv4 options", ip(steerFrame(wire.TypeReadReq, 1, base, a, 1), func(h []byte) { h[0] = 0x46 }), SteerLocal},
		{"fragment", ip(steerFrame(wire.TypeReadReq, 1, base, a, 1), func(h []byte) { h[6] |= 0x20 }), SteerLocal},
		{"IPv6", ipv6, SteerLocal},
		{"short", steerFrame(wire.TypeReadReq, 1, base, a, 1)[:wire.PayloadOffset-1], SteerLocal},
		{"empty", nil, SteerLocal},
	}
	for _, tc := range cases {
		if got := Steer(tc.frame, base, cores); got != tc.want {
			t.Errorf("%s: Steer = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := Steer(req, base, 1); got != 0 {
		t.Errorf("one core: a request goes to %d", got)
	}
}

// The requests of one sender lane (address and lane tag) all go to one
// core, whatever their counters, ports and types; the lanes of many
// senders spread over every core.
func TestSteerRequestsByLane(t *testing.T) {
	const base, cores = 4792, 4
	hits := make([]int, cores)
	for s := range 64 {
		addr := [4]byte{10, 0, byte(s >> 8), byte(s + 1)}
		for tag := range uint64(4) {
			want := -1
			for k := range uint64(50) {
				ctr := tag<<ivTagShift | (k*7919 + 1)
				f := steerFrame([]wire.Type{wire.TypeReadReq, wire.TypeWriteReq, wire.TypeRekeyReq}[k%3],
					wire.InitiatorPort(uint8(k), uint16(tag)), base, addr, ctr)
				got := Steer(f, base, cores)
				if want < 0 {
					want = got
					hits[got]++
				}
				if got != want {
					t.Fatalf("sender %v lane %d: request %d steered to core %d, its lane's others to %d", addr, tag, k, got, want)
				}
			}
		}
	}
	for c, n := range hits {
		if n < 256/cores/2 {
			t.Errorf("core %d serves %d of 256 lanes: %v", c, n, hits)
		}
	}
}

func TestSteerAllocs(t *testing.T) {
	f := steerFrame(wire.TypeReadReq, wire.InitiatorPort(7, 1), 4792, [4]byte{10, 0, 0, 1}, 5)
	if n := testing.AllocsPerRun(100, func() { Steer(f, 4792, 4) }); n != 0 {
		t.Fatalf("Steer allocates %v times", n)
	}
}

func BenchmarkSteer(b *testing.B) {
	req := steerFrame(wire.TypeReadReq, wire.InitiatorPort(7, 1), 4792, [4]byte{10, 0, 0, 1}, 5)
	resp := steerFrame(wire.TypeReadResp, 4792, wire.InitiatorPort(7, 1), [4]byte{10, 0, 0, 1}, 5)
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		if i&1 == 0 {
			n += Steer(req, 4792, 4)
		} else {
			n += Steer(resp, 4792, 4)
		}
	}
	_ = n
}
