package port_test

import (
	"testing"

	"github.com/onerma/onerma/engine/port"
	"github.com/onerma/onerma/wire"
)

// record is a Handover that notes what it was given.
type record struct {
	hand   []int // the core of each Hand
	others int   // HandOthers calls
}

func (r *record) Hand(core int, f int) { r.hand = append(r.hand, core) }
func (r *record) HandOthers(f int)     { r.others++ }

// oneRMA is a payload-free OneRMA frame of type typ to UDP port dport.
func oneRMA(typ wire.Type, dport uint16) []byte {
	b := make([]byte, 128)
	f := wire.Fields{DstMAC: wire.MAC{2, 0, 0, 0, 0, 1}, SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1}, SrcIP: 1, DstIP: 1,
		SrcPort: 1, DstPort: dport, Type: typ}
	return b[:wire.Encode(b, &f, 0)]
}

// Core 1 of three keeps its own frames and those that name no core,
// hands another core's to it alone, and ARP to every other core while
// keeping it too.
func TestSteeringDeliver(t *testing.T) {
	const base = 4792
	arp := make([]byte, 64)
	arp = arp[:wire.EncodeARP(arp, &wire.ARP{Op: wire.ARPRequest, EthDst: wire.Broadcast})]
	for _, tc := range []struct {
		name   string
		frame  []byte
		keep   bool
		hand   int // -1: none
		others int
	}{
		{"its own answer", oneRMA(wire.TypeReadResp, wire.InitiatorPort(5, 1)), true, -1, 0},
		{"another core's answer", oneRMA(wire.TypeReadResp, wire.InitiatorPort(5, 2)), false, 2, 0},
		{"another core's WRITE data", oneRMA(wire.TypeWriteData, base), false, 0, 0},
		{"its own WRITE data", oneRMA(wire.TypeWriteData, base+1), true, -1, 0},
		{"ARP", arp, true, -1, 1},
		{"junk", []byte("names no core"), true, -1, 0},
	} {
		r := &record{}
		s := port.NewSteering(1, 3, base, r)
		keep := s.Deliver(tc.frame, 7)
		hand := -1
		if len(r.hand) == 1 {
			hand = r.hand[0]
		}
		if keep != tc.keep || len(r.hand) > 1 || hand != tc.hand || r.others != tc.others {
			t.Errorf("%s: keep %v, handed to %v, to the others %d times; want keep %v, to %d, %d",
				tc.name, keep, r.hand, r.others, tc.keep, tc.hand, tc.others)
		}
	}
}

func TestSteeringAllocs(t *testing.T) {
	r := &record{hand: make([]int, 0, 1)}
	s := port.NewSteering(0, 4, 4792, r)
	f := oneRMA(wire.TypeReadResp, wire.InitiatorPort(5, 2))
	if n := testing.AllocsPerRun(100, func() { r.hand = r.hand[:0]; s.Deliver(f, 0) }); n != 0 {
		t.Fatalf("Deliver allocates %v times", n)
	}
}
