package engine

import (
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// lowAfterHighPoll queues four low-class 4 KB READ requests and then one
// high-class 64 B READ request at engine b of a pair whose b is
// configured by cfgB, polls b once at b's arrival time plus wait, and
// returns how many of the frames b sent were high-class responses and
// how many were low-class ones (a 4 KB READ at MTU 1500 answers in three
// frames), then the same for a second Poll right after.
func lowAfterHighPoll(t *testing.T, lowAfterHigh int, wait int64) (hi, lo [2]int) {
	t.Helper()
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.LowAfterHigh = lowAfterHigh
	p := newPair(t, ca, cb)
	loApp, hiApp, src, ml, mh := lowHighApps(t, p, 8)
	for k := range 4 {
		loApp.post(t, readCmd(loApp.slots[k], ipOf("10.0.0.2"), src, 0, ml, uint64(k)*4096, 4096, uint64(100+k)))
	}
	hiApp.post(t, readCmd(hiApp.slots[0], ipOf("10.0.0.2"), src, 0, mh, 0, 64, 200))
	p.a.Poll(p.now)
	if n := p.ta.deliverTo(p.now, p.b); n != 5 {
		t.Fatalf("%d requests reached b, want 5", n)
	}
	for k := range 2 {
		p.b.Poll(p.now + wait + int64(k))
		for _, fr := range p.tb.take() {
			var f wire.Fields
			if _, err := wire.Decode(fr, &f); err != nil {
				t.Fatal(err)
			}
			if f.Type != wire.TypeReadResp {
				t.Fatalf("b sent a frame of type %v", f.Type)
			}
			if f.Length == 64 {
				hi[k]++
			} else {
				lo[k]++
			}
		}
	}
	return hi, lo
}

// A Poll that sends a high-class response sends at most LowAfterHigh
// low-class requests' responses after it; the rest follow in the next
// Poll. Without the bound (0) the Poll serves all of them.
func TestLowAfterHighBoundsLowFramesBehindHigh(t *testing.T) {
	for _, tc := range []struct {
		name         string
		lowAfterHigh int
		wantLo       [2]int
	}{
		{"bound 1", 1, [2]int{3, 9}},
		{"bound 2", 2, [2]int{6, 6}},
		{"no bound", 0, [2]int{12, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hi, lo := lowAfterHighPoll(t, tc.lowAfterHigh, 0)
			if hi != [2]int{1, 0} || lo != tc.wantLo {
				t.Fatalf("(high, low) response frames by Poll (-want +got)\n-%v %v\n+%v %v", [2]int{1, 0}, tc.wantLo, hi, lo)
			}
		})
	}
}

// The bound holds no low-class request past TIMEOUT/lowHoldDiv of
// waiting: an older one is served whatever high-class frame went first.
func TestLowAfterHighServesOldLowRequests(t *testing.T) {
	wait := int64(testConfig("10.0.0.2", 2).Timeout) / lowHoldDiv
	hi, lo := lowAfterHighPoll(t, 1, wait)
	if hi != [2]int{1, 0} || lo != [2]int{12, 0} {
		t.Fatalf("(high, low) response frames by Poll: %v %v, want [1 0] [12 0]", hi, lo)
	}
}

// A high-class request the initiator side sends in a Poll bounds the
// low-class responses the serving side sends after it in the same Poll.
func TestLowAfterHighRequestBoundsServing(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.LowAfterHigh = 1
	p := newPair(t, ca, cb)
	loApp := openApp(t, p.a, abi.ClassLow, 8)
	owner := openApp(t, p.b, abi.ClassLow, 0)
	hiApp := openApp(t, p.b, abi.ClassHigh, 8)
	src, _ := p.b.RegisterRegion(owner.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	ml, _ := p.a.RegisterRegion(loApp.id, make([]byte, 4*4096), abi.PermAll|abi.PermRemoteRead, testKr)
	mh, _ := p.b.RegisterRegion(hiApp.id, make([]byte, 4096), abi.PermAll, testKr)
	loApp.post(t, readCmd(loApp.slots[7], ipOf("10.0.0.2"), src, 0, ml, 0, 8, 99)) // resolves b
	hiApp.post(t, readCmd(hiApp.slots[7], ipOf("10.0.0.1"), ml, 0, mh, 0, 8, 99))  // resolves a
	p.run()
	loApp.completions()
	hiApp.completions()
	for k := range 4 {
		loApp.post(t, readCmd(loApp.slots[k], ipOf("10.0.0.2"), src, 0, ml, uint64(k)*4096, 4096, uint64(100+k)))
	}
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b)
	hiApp.post(t, readCmd(hiApp.slots[0], ipOf("10.0.0.1"), ml, 0, mh, 0, 64, 200))
	p.b.Poll(p.now)
	var req, lo int
	for _, fr := range p.tb.take() {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			t.Fatal(err)
		}
		switch {
		case f.Type == wire.TypeReadReq && f.Flags&wire.FlagHigh != 0:
			req++
		case f.Type == wire.TypeReadResp:
			lo++
		default:
			t.Fatalf("b sent a frame of type %v", f.Type)
		}
	}
	if req != 1 || lo != 3 {
		t.Fatalf("b's Poll sent %d high-class requests and %d low-class response frames, want 1 and 3", req, lo)
	}
}

// lowHighApps opens, on pair p, a low-class and a high-class application
// at a and a region owner at b, registers b's 4 KB source region and the
// applications' destinations (four 4 KB for the low class, one for the
// high), and resolves b with one low-class READ of resolve bytes.
func lowHighApps(t *testing.T, p *pair, resolve uint32) (loApp, hiApp *testApp, src, ml, mh abi.RegionID) {
	t.Helper()
	loApp = openApp(t, p.a, abi.ClassLow, 8)
	hiApp = openApp(t, p.a, abi.ClassHigh, 8)
	owner := openApp(t, p.b, abi.ClassLow, 0)
	src, _ = p.b.RegisterRegion(owner.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	ml, _ = p.a.RegisterRegion(loApp.id, make([]byte, 4*4096), abi.PermAll, testKr)
	mh, _ = p.a.RegisterRegion(hiApp.id, make([]byte, 4096), abi.PermAll, testKr)
	loApp.post(t, readCmd(loApp.slots[7], ipOf("10.0.0.2"), src, 0, ml, 0, resolve, 99)) // resolves b
	p.run()
	loApp.completions()
	return loApp, hiApp, src, ml, mh
}
