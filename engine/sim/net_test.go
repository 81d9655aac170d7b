package sim

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// TestCorruptionIsDetectable: every frame the fabric corrupts is either
// rejected (by wire.Decode, or by AES-GCM authentication as the receiving
// core does it: OpenRequest for requests, OpenResponse for answers with
// the request's IV curried, the reserved key for
// REMOTE_AUTHENTICATION_FAILURE) or decodes to exactly the original
// headers and payload (a flip in a field nobody reads, such as the TTL or
// the UDP checksum). The fabric checks no integrity itself; so a core that
// authenticates every frame never accepts damaged data, and a data
// mismatch in a run is the core's fault, not the fabric's.
func TestCorruptionIsDetectable(t *testing.T) {
	s := &Sim{netRng: rand.New(rand.NewPCG(1, 2))}
	r := rand.New(rand.NewPCG(3, 4))
	kd := aesni.DeriveKey(aesni.Key{1, 2, 3}, [4]byte{10, 0, 0, 1}, 1000, uint8(abi.OpRead))
	a, err := aesni.NewAEAD(kd)
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := aesni.NewReservedAEAD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9014)
	plain := make([]byte, 9014)
	var rejected, harmless [4]int
	for i := 0; i < 200_000; i++ {
		plen := 0
		kind := r.IntN(4) // request, response, error, auth failure
		f := wire.Fields{
			DstMAC: wire.MAC{2, 0, 0, 0, 0, 2}, SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1},
			SrcIP: 0x0a000001, DstIP: 0x0a000002, SrcPort: 4792, DstPort: 4792,
			Type: wire.TypeReadReq, PID: 1000, Tag: r.Uint64(), Region: r.Uint32(), Offset: r.Uint64N(4096),
		}
		var reqIV [12]byte
		aesni.PutNonce(reqIV[:], [4]byte{10, 0, 0, 2}, 1+r.Uint64N(1<<40))
		aesni.PutNonce(f.IV[:], [4]byte{10, 0, 0, 1}, 1+r.Uint64N(1<<40))
		switch kind {
		case 1:
			f.Type = wire.TypeReadResp
			plen = 1 + r.IntN(1408)
		case 2:
			f.Type, f.Status = wire.TypeError, uint8(abi.StatusRemoteBounds)
		case 3:
			f.Type, f.Status = wire.TypeError, uint8(abi.StatusRemoteAuthFailure)
		}
		f.Length = uint32(plen)
		n := wire.Encode(buf, &f, plen)
		for j := 0; j < plen; j++ {
			plain[j] = byte(r.Uint32())
		}
		switch kind {
		case 0:
			a.SealRequest(wire.Trailer(buf, 0), wire.IV(buf), wire.AAD(buf))
		case 1, 2:
			a.SealResponse(wire.Sealed(buf, plen), plain[:plen], wire.IV(buf), wire.AAD(buf), reqIV[:])
		case 3:
			reserved.SealAuthFailure(wire.Trailer(buf, 0), wire.IV(buf), wire.AAD(buf), reqIV[:])
		}
		orig := append([]byte(nil), buf[:n]...)
		fr := &frame{buf: buf, n: n}
		if !s.corrupt(fr) {
			t.Fatal("corrupt refused an IPv4 frame")
		}
		var g wire.Fields
		p, err := wire.Decode(buf[:n], &g)
		if err == nil {
			switch {
			case g.Type == wire.TypeReadReq:
				err = a.OpenRequest(wire.Trailer(buf, 0), wire.IV(buf), wire.AAD(buf))
			case g.Type == wire.TypeError && abi.Status(g.Status) == abi.StatusRemoteAuthFailure:
				err = reserved.OpenAuthFailure(wire.Trailer(buf, 0), wire.IV(buf), wire.AAD(buf), reqIV[:])
			default:
				err = a.OpenResponse(p, wire.Sealed(buf, len(p)), wire.IV(buf), wire.AAD(buf), reqIV[:])
			}
		}
		if err != nil {
			rejected[kind]++
			continue
		}
		var o wire.Fields
		if _, err := wire.Decode(orig, &o); err != nil {
			t.Fatal(err)
		}
		g.DSCP = o.DSCP // decoded, but outside the AAD: a fabric may remark it, the core ignores it
		if g != o || !bytes.Equal(p, plain[:plen]) {
			t.Fatalf("iteration %d: corrupted frame accepted with different content:\n got %+v\nwant %+v", i, g, o)
		}
		harmless[kind]++
	}
	t.Logf("request/response/error/auth-failure: rejected %v, harmless %v", rejected, harmless)
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
