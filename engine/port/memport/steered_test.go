package memport_test

import (
	"bytes"
	"testing"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/wire"
)

var _ runner.Port = (*memport.SteeredPort)(nil)

// oneRMA is a payload-free OneRMA frame of type typ to UDP port dport.
func oneRMA(typ wire.Type, dport uint16) []byte {
	b := make([]byte, 128)
	f := wire.Fields{DstMAC: wire.MAC{2, 0, 0, 0, 0, 1}, SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1}, SrcIP: 1, DstIP: 1,
		SrcPort: 1, DstPort: dport, Type: typ, Tag: uint64(dport)}
	return b[:wire.Encode(b, &f, 0)]
}

// Every frame a core sends reaches the core it is steered to: an answer
// the core of its initiator port, WRITE data the core of its port, ARP
// every core, anything else the sender; each link keeps its order.
func TestSteered(t *testing.T) {
	const base = 4792
	ps, err := memport.Steered(memport.Config{Frames: 8, FrameBytes: 256, Burst: 4}, 3, base)
	if err != nil {
		t.Fatal(err)
	}
	arp := make([]byte, 64)
	arp = arp[:wire.EncodeARP(arp, &wire.ARP{Op: wire.ARPRequest, EthDst: wire.Broadcast})]
	frames := [][]byte{
		oneRMA(wire.TypeReadResp, wire.InitiatorPort(5, 2)), // to core 2
		oneRMA(wire.TypeWriteData, base+1),                  // to core 1
		arp,                                                 // to all
		[]byte("junk that names no core, 60 bytes long.............."), // to the sender
		oneRMA(wire.TypeAck, wire.InitiatorPort(6, 2)),                 // to core 2
	}
	for _, f := range frames {
		copy(ps[0].Buffer(), f)
		ps[0].Send(len(f))
	}
	ps[0].Flush()
	want := [][]int{{2, 3}, {1, 2}, {0, 2, 4}} // frames each core receives, in order
	for c, p := range ps {
		var got [][]byte
		for k := 0; k < 3; k++ {
			for _, f := range p.Recv() {
				got = append(got, append([]byte(nil), f...))
			}
		}
		if len(got) != len(want[c]) {
			t.Fatalf("core %d received %d frames, want %d", c, len(got), len(want[c]))
		}
		for k, i := range want[c] {
			if !bytes.Equal(got[k], frames[i]) {
				t.Fatalf("core %d frame %d is not frame %d", c, k, i)
			}
		}
	}
	if st := ps[0].Stats(); st.TxFrames != 5 || st.Steered != 5 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A full link drops (counted); the buffers come back with Recv.
	for range 10 {
		f := frames[1]
		copy(ps[0].Buffer(), f)
		ps[0].Send(len(f))
		ps[0].Flush()
	}
	if st := ps[0].Stats(); st.Dropped != 2 {
		t.Fatalf("dropped %d, want 2 (8 buffers on the link)", st.Dropped)
	}
	for range 3 {
		ps[1].Recv()
	}
	ps[1].Recv()
	copy(ps[0].Buffer(), frames[1])
	ps[0].Send(len(frames[1]))
	ps[0].Flush()
	if got := ps[1].Recv(); len(got) != 1 || engine.Steer(got[0], base, 3) != 1 {
		t.Fatalf("after the receiver freed its buffers: %d frames", len(got))
	}
}
