package sim

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/onerma/onerma/wire"
)

// TestCorruptionIsDetectable: every frame the fabric corrupts is either
// rejected by wire.Decode / wire.CheckICRC or decodes to exactly the
// original headers and payload (a flip in a field nobody reads, such as the
// UDP checksum). So a core that checks both never accepts damaged data,
// and a data mismatch in a run is the core's fault, not the fabric's.
func TestCorruptionIsDetectable(t *testing.T) {
	s := &Sim{netRng: rand.New(rand.NewPCG(1, 2))}
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 9014)
	var rejected, harmless int
	for i := 0; i < 200_000; i++ {
		plen := 0
		typ := wire.TypeReadReq
		if r.IntN(2) == 0 {
			typ = wire.TypeReadResp
			plen = 1 + r.IntN(1408)
		}
		f := wire.Fields{
			DstMAC: wire.MAC{2, 0, 0, 0, 0, 2}, SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1},
			SrcIP: 0x0a000001, DstIP: 0x0a000002, SrcPort: 4792, DstPort: 4792,
			Type: typ, Tag: r.Uint64(), Region: r.Uint32(), Length: uint32(plen), Offset: r.Uint64N(4096),
		}
		n := wire.Encode(buf, &f, plen)
		for j := 0; j < plen; j++ {
			buf[wire.PayloadOffset+j] = byte(r.Uint32())
		}
		wire.SealICRC(buf, plen)
		orig := append([]byte(nil), buf[:n]...)
		fr := &frame{buf: buf, n: n}
		if !s.corrupt(fr) {
			t.Fatal("corrupt refused an IPv4 frame")
		}
		var g wire.Fields
		p, err := wire.Decode(buf[:n], &g)
		if err == nil {
			err = wire.CheckICRC(buf[:n], len(p))
		}
		if err != nil {
			rejected++
			continue
		}
		var o wire.Fields
		op, _ := wire.Decode(orig, &o)
		if g != o || !bytes.Equal(p, op) {
			t.Fatalf("iteration %d: corrupted frame accepted with different content:\n got %+v\nwant %+v", i, g, o)
		}
		harmless++
	}
	t.Logf("rejected %d, harmless %d", rejected, harmless)
}

func TestEventHeapOrder(t *testing.T) {
	var h eventHeap
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 10_000; i++ {
		h.push(event{t: r.Int64N(100), seq: uint64(i)})
	}
	var last event
	for i := 0; len(h) > 0; i++ {
		e := h.pop()
		if i > 0 && (e.t < last.t || e.t == last.t && e.seq < last.seq) {
			t.Fatalf("pop %d: (%d,%d) after (%d,%d)", i, e.t, e.seq, last.t, last.seq)
		}
		last = e
	}
	var d deadlineHeap
	for i := 0; i < 10_000; i++ {
		d.push(deadline{t: r.Int64N(1000), cookie: uint64(i)})
	}
	prev := int64(-1)
	for len(d) > 0 {
		if d[0].t < prev {
			t.Fatalf("deadline %d after %d", d[0].t, prev)
		}
		prev = d[0].t
		d.pop()
	}
}

func TestAlignedBytes(t *testing.T) {
	for n := 1; n < 300; n += 7 {
		b := alignedBytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("alignedBytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		if addr := uintptrOf(b); addr%64 != 0 {
			t.Fatalf("alignedBytes(%d) at %#x", n, addr)
		}
	}
}
