package cc

import (
	"math"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
)

const us = 1000

func params() Params {
	p := DefaultParams()
	p.CwndInit = 4
	p.LocalTarget = 10 * us
	p.RemoteTarget = 20 * us
	p.RTT = 8 * us
	return p
}

func newC(t *testing.T, p Params) *Controller {
	t.Helper()
	c, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var kA = Key{Peer: 0x0a000001, Dir: Read}
var kB = Key{Peer: 0x0a000002, Dir: Read}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// One completion applied to fresh windows (local 4, remote 4): the table
// of every rule of Algorithm 1.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name          string
		st            abi.Status
		issue, total  int64
		local, remote float64
	}{
		{"ok below both targets: AI on both", abi.StatusOK, 1 * us, 5 * us, 4 + 0.25/4, 4 + 0.25/4},
		{"issue_delay at target: MD local", abi.StatusOK, 20 * us, 25 * us, 4 * (1 - 0.8*10.0/20), 4 + 0.25/4},
		{"remote_delay above target: MD remote", abi.StatusOK, 1 * us, 41 * us, 4 + 0.25/4, 4 * (1 - 0.8*20.0/40)},
		{"huge issue_delay: MD bounded by 0.5", abi.StatusOK, 1000 * us, 1001 * us, 2, 4 + 0.25/4},
		{"delay exactly at target decreases (factor 1)", abi.StatusOK, 10 * us, 15 * us, 4, 4 + 0.25/4},
		{"DISPATCH_TIMEOUT cuts local 10x", abi.StatusDispatchTimeout, 10 * us, 10 * us, 0.4, 4},
		{"TIMEOUT cuts remote 10x", abi.StatusTimeout, 1 * us, 100 * us, 4, 0.4},
		{"NACK cuts remote 10x", abi.StatusNack, 1 * us, 5 * us, 4, 0.4},
		{"REMOTE_AUTHENTICATION_FAILURE: no change", abi.StatusRemoteAuthFailure, 1 * us, 5 * us, 4, 4},
		{"ABORTED: no change", abi.StatusAborted, 1 * us, 5 * us, 4, 4},
		{"refusal: no change", abi.StatusRemoteBounds, 1 * us, 5 * us, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newC(t, params())
			c.OnCompletion(100*us, kA, tc.st, tc.issue, tc.total)
			if !near(c.Local(), tc.local) || !near(c.Remote(kA), tc.remote) {
				t.Fatalf("local %v remote %v, want %v %v", c.Local(), c.Remote(kA), tc.local, tc.remote)
			}
			if !near(c.Remote(kB), 4) {
				t.Fatalf("another key's window moved: %v", c.Remote(kB))
			}
			if want := min(tc.local, tc.remote); !near(c.Cwnd(kA), want) {
				t.Fatalf("Cwnd %v, want min %v", c.Cwnd(kA), want)
			}
		})
	}
}

func TestAdditiveIncreaseBelowOneAndCap(t *testing.T) {
	p := params()
	p.CwndInit = 0.5
	p.CwndMax = 2
	c := newC(t, p)
	c.OnCompletion(0, kA, abi.StatusOK, 1*us, 2*us)
	if !near(c.Local(), 0.75) || !near(c.Remote(kA), 0.75) {
		t.Fatalf("below 1: += AI: %v %v", c.Local(), c.Remote(kA))
	}
	for range 100 {
		c.OnCompletion(0, kA, abi.StatusOK, 1*us, 2*us)
	}
	if c.Local() != 2 || c.Remote(kA) != 2 {
		t.Fatalf("not capped at CwndMax: %v %v", c.Local(), c.Remote(kA))
	}
}

// A window of w grows by about AI per w OK completions: one RTT's worth.
func TestAdditiveIncreasePerRTT(t *testing.T) {
	c := newC(t, params())
	for range 4 {
		c.OnCompletion(0, kA, abi.StatusOK, 1*us, 2*us)
	}
	if got := c.Local(); got < 4.24 || got > 4.25 {
		t.Fatalf("after one window of OKs: %v, want ~4.25", got)
	}
}

// Decreases and cuts of one window happen at most once per RTT; the two
// windows are independent; the RTT is the smoothed one.
func TestOncePerRTT(t *testing.T) {
	c := newC(t, params()) // RTT 8 µs until measured
	c.OnCompletion(100*us, kA, abi.StatusTimeout, 0, 0)
	c.OnCompletion(101*us, kA, abi.StatusNack, 0, 0)
	c.OnCompletion(102*us, kA, abi.StatusOK, 1*us, 100*us) // MD within the RTT too
	if !near(c.Remote(kA), 0.4) {
		t.Fatalf("second decrease within one RTT: %v", c.Remote(kA))
	}
	c.OnCompletion(103*us, kA, abi.StatusDispatchTimeout, 0, 0) // local: its own clock
	if !near(c.Local(), (4+0.25/4)/10) {                        // the OK at 102 µs increased it first
		t.Fatalf("local cut blocked by the remote one: %v", c.Local())
	}
	c.OnCompletion(103*us, kB, abi.StatusTimeout, 0, 0) // another key: its own clock
	if !near(c.Remote(kB), 0.4) {
		t.Fatalf("key B cut blocked by key A's: %v", c.Remote(kB))
	}
	rtt := c.RTT()
	c.OnCompletion(100*us+rtt, kA, abi.StatusTimeout, 0, 0)
	if !near(c.Remote(kA), 0.04) {
		t.Fatalf("cut one RTT later refused: %v", c.Remote(kA))
	}
	for range 10 {
		c.OnCompletion(1000*us, kA, abi.StatusTimeout, 0, 0)
		c.OnCompletion(2000*us, kA, abi.StatusTimeout, 0, 0)
	}
	if c.Remote(kA) != c.Params().CwndMin {
		t.Fatalf("not floored at CwndMin: %v", c.Remote(kA))
	}
}

func TestRTTSmoothing(t *testing.T) {
	c := newC(t, params())
	if c.RTT() != 8*us {
		t.Fatal(c.RTT())
	}
	c.OnCompletion(0, kA, abi.StatusOK, 2*us, 18*us) // remote_delay 16 µs
	if c.RTT() != 9*us {
		t.Fatalf("srtt %v, want 9 µs", c.RTT())
	}
	c.OnCompletion(0, kA, abi.StatusTimeout, 0, 1000*us) // failures are not samples
	c.OnCompletion(0, kA, abi.StatusOK, 5*us, 3*us)      // negative remote delay: ignored
	if c.RTT() != 9*us {
		t.Fatalf("srtt %v after non-samples", c.RTT())
	}
}

func TestCombined(t *testing.T) {
	p := params()
	p.Combined = true
	c := newC(t, p)
	// issue_delay far above its target but total under LocalTarget+RemoteTarget: increase.
	c.OnCompletion(0, kA, abi.StatusOK, 25*us, 28*us)
	if !near(c.Remote(kA), 4.0625) || c.Local() != p.CwndMax {
		t.Fatalf("combined OK: remote %v local %v", c.Remote(kA), c.Local())
	}
	c.OnCompletion(100*us, kA, abi.StatusDispatchTimeout, 0, 0)
	if !near(c.Remote(kA), 0.40625) {
		t.Fatalf("combined DISPATCH_TIMEOUT must cut the key's window: %v", c.Remote(kA))
	}
	c.OnCompletion(200*us, kA, abi.StatusOK, 1*us, 60*us) // total 60 ≥ 30: MD
	if !near(c.Remote(kA), 0.40625*(1-0.8*30.0/60)) {
		t.Fatalf("combined MD: %v", c.Remote(kA))
	}
}

func TestInFlightAndGap(t *testing.T) {
	c := newC(t, params())
	if c.MaxInFlight(kA) != 4 {
		t.Fatal(c.MaxInFlight(kA))
	}
	// 4 ops of 4 KB per 8 µs RTT: one every 2 µs; a 1 KB op a quarter of that.
	if g := c.Gap(kA, 4096); g != 2*us {
		t.Fatalf("gap %v", g)
	}
	if g := c.Gap(kA, 1024); g != 500 {
		t.Fatalf("gap %v", g)
	}
	c.OnCompletion(100*us, kA, abi.StatusTimeout, 0, 0) // remote 0.4
	if c.MaxInFlight(kA) != 1 {
		t.Fatalf("below one op: %v", c.MaxInFlight(kA))
	}
	if g := c.Gap(kA, 4096); g != 20*us {
		t.Fatalf("gap below one op: %v (want RTT/0.4)", g)
	}
}

func TestPacer(t *testing.T) {
	var p Pacer
	if p.Wait(5) != 0 {
		t.Fatal("zero pacer must allow at once")
	}
	p.Issued(100, 10)
	for _, c := range []struct{ now, wait int64 }{{100, 10}, {105, 5}, {110, 0}, {200, 0}} {
		if w := p.Wait(c.now); w != c.wait {
			t.Fatalf("Wait(%d) = %d, want %d", c.now, w, c.wait)
		}
	}
	p.Issued(110, 10) // on time: next at 120
	if p.Wait(119) != 1 {
		t.Fatal(p.Wait(119))
	}
	// Idle for long: catch up by one gap at most, not a burst.
	p.Issued(1000, 10)
	if p.Wait(1000) != 0 {
		t.Fatal("one catch-up issue expected")
	}
	p.Issued(1000, 10)
	if p.Wait(1000) != 10 {
		t.Fatalf("burst after idle: wait %d", p.Wait(1000))
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		field string
		mut   func(*Params)
	}{
		{"AI", func(p *Params) { p.AI = 0 }},
		{"Beta", func(p *Params) { p.Beta = 1.5 }},
		{"MD", func(p *Params) { p.MD = 1 }},
		{"Cut", func(p *Params) { p.Cut = 1 }},
		{"CwndMin", func(p *Params) { p.CwndMin = 0 }},
		{"CwndMax", func(p *Params) { p.CwndMax = p.CwndMin / 2 }},
		{"CwndInit", func(p *Params) { p.CwndInit = p.CwndMax * 2 }},
		{"LocalTarget", func(p *Params) { p.LocalTarget = 0 }},
		{"RemoteTarget", func(p *Params) { p.RemoteTarget = -1 }},
		{"RTT", func(p *Params) { p.RTT = 0 }},
		{"OpSize", func(p *Params) { p.OpSize = 0 }},
		{"AI", func(p *Params) { p.AI = math.NaN() }},
	} {
		p := DefaultParams()
		tc.mut(&p)
		_, err := New(p)
		if err == nil || !strings.Contains(err.Error(), "cc: "+tc.field+" =") {
			t.Errorf("%s: err %v", tc.field, err)
		}
	}
	p := DefaultParams()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNoAllocs(t *testing.T) {
	c := newC(t, params())
	c.OnCompletion(0, kA, abi.StatusOK, 1, 2)
	var p Pacer
	n := testing.AllocsPerRun(1000, func() {
		c.OnCompletion(0, kA, abi.StatusOK, 1*us, 3*us)
		_ = c.MaxInFlight(kA) + int(c.Gap(kA, 4096))
		p.Issued(5, 7)
		_ = p.Wait(6)
	})
	if n != 0 {
		t.Fatalf("%v allocs per completion", n)
	}
}

// An op posted before a window's last decrease reports congestion the
// decrease already answered: it must not decrease the window again, even
// more than an RTT after the decrease.
func TestNoDecreaseForOpsPostedBeforeTheCut(t *testing.T) {
	c := newC(t, params())
	c.OnCompletion(100*us, kA, abi.StatusDispatchTimeout, 10*us, 10*us) // local 0.4 at 100 µs
	after := 100*us + c.RTT() + 1
	// Posted at 100 µs - 1 ns (before the cut), issue_delay far above target.
	c.OnCompletion(after, kA, abi.StatusOK, 50*us, after-(100*us-1))
	if !near(c.Local(), 0.4) {
		t.Fatalf("an op posted before the cut decreased the window again: %v", c.Local())
	}
	// Posted at the cut: its feedback counts.
	c.OnCompletion(after, kA, abi.StatusOK, 50*us, after-100*us)
	if !near(c.Local(), 0.4*0.5) {
		t.Fatalf("an op posted after the cut did not decrease: %v", c.Local())
	}
	// The same for a remote cut.
	c.OnCompletion(200*us, kB, abi.StatusTimeout, 0, 30*us)
	c.OnCompletion(300*us, kB, abi.StatusNack, 0, 150*us) // posted at 150 µs < 200 µs
	if !near(c.Remote(kB), 0.4) {
		t.Fatalf("remote: an op posted before the cut cut again: %v", c.Remote(kB))
	}
}
