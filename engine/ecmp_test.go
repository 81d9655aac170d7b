package engine

import (
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// runLogged moves frames both ways (Receive, frame by frame) and polls
// until nothing happens, and returns every OneRMA frame each core sent,
// decoded.
func (p *pair) runLogged(t *testing.T) (fromA, fromB []wire.Fields) {
	t.Helper()
	for k := 0; k < 100; k++ {
		w := p.a.Poll(p.now) + p.b.Poll(p.now)
		fa, fb := p.ta.take(), p.tb.take()
		for _, fr := range fa {
			var f wire.Fields
			if _, err := wire.Decode(fr, &f); err == nil {
				fromA = append(fromA, f)
			}
			p.b.Receive(p.now, fr)
		}
		for _, fr := range fb {
			var f wire.Fields
			if _, err := wire.Decode(fr, &f); err == nil {
				fromB = append(fromB, f)
			}
			p.a.Receive(p.now, fr)
		}
		p.now += 1000
		if w+len(fa)+len(fb) == 0 {
			return fromA, fromB
		}
	}
	t.Fatal("the pair never went quiet")
	return nil, nil
}

// Each op leaves from its own initiator port (entropy mixed from its slot
// and sequence, the core's id in the low bits); its answers, READ data
// and pull come back to that port, its WRITE data leaves from it to the
// serving core's port. Frames to another core's port are dropped, and to
// another op's port of this core are stale.
func TestECMPSourcePorts(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	ca.CoreID, cb.CoreID = 3, 5
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, abi.ClassLow, 16)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ := p.b.RegisterRegion(srv.id, make([]byte, 1<<16), abi.PermAll, testKr)
	rd, _ := p.a.RegisterRegion(app.id, make([]byte, 1<<16), abi.PermAll, testKr)
	ports := map[uint64]uint16{} // tag -> the op's port
	seen := map[uint16]bool{}
	for round := range 3 { // 16 slots, 3 ops each: 48 ops
		for k := range 16 {
			cmd := readCmd(app.slots[k], ipOf("10.0.0.2"), rs, uint64(k)*4096, rd, uint64(k)*4096, 4096, uint64(k))
			if (k+round)%2 == 1 {
				cmd.Op = abi.OpWrite
			}
			app.post(t, cmd)
		}
		fromA, fromB := p.runLogged(t)
		if got := app.completions(); len(got) != 16 {
			t.Fatalf("round %d: %d completions", round, len(got))
		} else {
			for _, c := range got {
				if c.Status != abi.StatusOK {
					t.Fatalf("round %d: %+v", round, c)
				}
			}
		}
		for _, f := range fromA {
			switch f.Type {
			case wire.TypeReadReq, wire.TypeWriteReq:
				core, ok := wire.PortCore(f.SrcPort)
				if !ok || core != 3 || f.DstPort != cb.UDPPort {
					t.Fatalf("request from port %#x (core %d, %v) to %d", f.SrcPort, core, ok, f.DstPort)
				}
				ports[f.Tag] = f.SrcPort
				seen[f.SrcPort] = true
			case wire.TypeWriteData:
				if f.SrcPort != ports[f.Tag] || f.DstPort != cb.UDPPort+5 {
					t.Fatalf("WRITE data %d -> %d, its request left from %d", f.SrcPort, f.DstPort, ports[f.Tag])
				}
			}
		}
		for _, f := range fromB {
			if f.DstPort != ports[f.Tag] {
				t.Fatalf("%v to port %#x, its request left from %#x", f.Type, f.DstPort, ports[f.Tag])
			}
			if want := cb.UDPPort; f.Type == wire.TypePullReq {
				want += 5 // the serving core's port: its data comes back there
				if f.SrcPort != want {
					t.Fatalf("pull from %d", f.SrcPort)
				}
			}
		}
	}
	if len(ports) != 48 || len(seen) < 32 {
		t.Fatalf("48 ops used %d distinct ports", len(seen))
	}
	t.Logf("48 ops used %d distinct ports", len(seen))

	// A genuine answer, re-addressed: to another core's port it is
	// dropped, to another of this core's ports it is stale.
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 64, 99))
	p.a.Poll(p.now)
	req := p.ta.take()
	p.b.Receive(p.now, req[0])
	p.b.Poll(p.now)
	ans := p.tb.take()
	var f wire.Fields
	if len(ans) != 1 {
		t.Fatalf("%d answers", len(ans))
	}
	wire.Decode(ans[0], &f)
	for _, port := range []uint16{f.DstPort&^63 | 4, ca.UDPPort + 3, f.DstPort ^ 0x40} {
		g := f
		g.DstPort = port
		b := append([]byte(nil), ans[0]...)
		wire.Encode(b, &g, int(f.Length))
		p.a.Receive(p.now, b)
	}
	if s := p.a.Stats(); s.RxDropped != 2 || s.RxStale != 1 {
		t.Fatalf("re-addressed answers: dropped %d, stale %d", s.RxDropped, s.RxStale)
	}
	p.a.Receive(p.now, ans[0])
	p.a.Poll(p.now)
	if got := app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Cookie != 99 {
		t.Fatalf("%+v", got)
	}
	auditBoth(t, p)
}

// Every frame of an op carries the DSCP of its class: the initiator's
// (request, WRITE data) from its table, the serving engine's (READ data,
// pull, acknowledgment, NACK and errors) from its own, by the request's
// class.
func TestDSCPPerClass(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	ca.DSCP = [abi.NumClass]uint8{abi.ClassLow: 10, abi.ClassHigh: 46}
	cb.DSCP = [abi.NumClass]uint8{abi.ClassLow: 12, abi.ClassHigh: 34}
	p := newPair(t, ca, cb)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	rs, _ := p.b.RegisterRegion(srv.id, make([]byte, 1<<16), abi.PermAll, testKr)
	rro, _ := p.b.RegisterRegion(srv.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	for _, cl := range []abi.Class{abi.ClassLow, abi.ClassHigh} {
		app := openApp(t, p.a, cl, 4)
		rd, _ := p.a.RegisterRegion(app.id, make([]byte, 1<<16), abi.PermAll, testKr)
		app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 4096, 1))
		w := readCmd(app.slots[1], ipOf("10.0.0.2"), rs, 4096, rd, 4096, 4096, 2)
		w.Op = abi.OpWrite
		app.post(t, w)
		app.post(t, readCmd(app.slots[2], ipOf("10.0.0.2"), rro, 4000, rd, 0, 200, 3)) // REMOTE_BOUNDS
		fromA, fromB := p.runLogged(t)
		if got := app.completions(); len(got) != 3 {
			t.Fatalf("%v: %+v", cl, got)
		}
		types := map[wire.Type]bool{}
		for _, f := range fromA {
			types[f.Type] = true
			if f.DSCP != ca.DSCP[cl] {
				t.Fatalf("%v: a sent %v with DSCP %d, want %d", cl, f.Type, f.DSCP, ca.DSCP[cl])
			}
		}
		for _, f := range fromB {
			types[f.Type] = true
			if f.DSCP != cb.DSCP[cl] {
				t.Fatalf("%v: b sent %v with DSCP %d, want %d", cl, f.Type, f.DSCP, cb.DSCP[cl])
			}
		}
		for _, ty := range []wire.Type{wire.TypeReadReq, wire.TypeReadResp, wire.TypeWriteReq, wire.TypePullReq, wire.TypeWriteData, wire.TypeAck, wire.TypeError} {
			if !types[ty] {
				t.Fatalf("%v: no frame of type %v seen", cl, ty)
			}
		}
	}
}
