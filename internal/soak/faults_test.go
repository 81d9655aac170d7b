package soak

import (
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
)

func TestExplain(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	f := &faults{ws: []window{
		{kind: winKill, engines: 1 << 1, start: at(10), end: at(20)},                   // engine 2
		{kind: winFlap, engines: 1<<2 | 1<<3, start: at(30), end: at(35)},              // subnet 2
		{kind: winRekey, region: regionKey{0, roleData}, start: at(40), end: at(40.1)}, // engine 1's data region
		{kind: winKill, engines: 1 << 0, start: at(50)},                                // engine 1, still open
		{kind: winStall, engines: 1 << 3, start: at(70), end: at(72)},                  // engine 4's loop
	}}
	op := func(ini, tgt int, r role, from, to float64) opSpan {
		return opSpan{initiator: ini, target: tgt, region: r, posted: at(from), done: at(to), keyAt: at(from)}
	}
	cases := []struct {
		name string
		op   opSpan
		st   abi.Status
		want windowKind // -1: unexplained
	}{
		{"ENGINE_GONE of the killed engine's op", op(1, 0, roleData, 9, 11), abi.StatusEngineGone, winKill},
		{"ENGINE_GONE of another engine's op", op(2, 1, roleData, 9, 11), abi.StatusEngineGone, -1},
		{"TIMEOUT to the killed engine", op(2, 1, roleData, 19, 21), abi.StatusTimeout, winKill},
		{"TIMEOUT before the kill", op(2, 1, roleData, 5, 9), abi.StatusTimeout, -1},
		{"TIMEOUT between two others", op(2, 3, roleData, 11, 12), abi.StatusTimeout, -1},
		{"UNREACHABLE across the flapped subnet", op(0, 2, roleData, 31, 32), abi.StatusUnreachable, winFlap},
		{"TIMEOUT within the other subnet", op(0, 1, roleData, 31, 32), abi.StatusTimeout, -1},
		{"auth failure after the rekey, key fetched before", opSpan{initiator: 2, target: 0, region: roleData, posted: at(41), done: at(41), keyAt: at(39)}, abi.StatusRemoteAuthFailure, winRekey},
		{"auth failure with a key fetched after the rekey", op(2, 0, roleData, 41, 41), abi.StatusRemoteAuthFailure, -1},
		{"auth failure on the other region", opSpan{initiator: 2, target: 0, region: roleExec, posted: at(41), done: at(41), keyAt: at(39)}, abi.StatusRemoteAuthFailure, -1},
		{"auth failure after the target's restart", opSpan{initiator: 0, target: 1, region: roleExec, posted: at(21), done: at(21), keyAt: at(5)}, abi.StatusRemoteAuthFailure, winKill},
		{"a window still open", op(0, 2, roleData, 60, 61), abi.StatusEngineGone, winKill},
		{"TIMEOUT of a WRITE from a stalled engine", op(3, 1, roleData, 69, 71), abi.StatusTimeout, winStall},
		{"TIMEOUT between two engines that did not stall", op(1, 2, roleData, 69, 71), abi.StatusTimeout, -1},
		{"auth failure during a stall", op(3, 1, roleData, 69, 71), abi.StatusRemoteAuthFailure, -1},
		{"NACK, even in a window", op(1, 0, roleData, 9, 11), abi.StatusNack, -1},
		{"DISPATCH_TIMEOUT", op(1, 0, roleData, 9, 11), abi.StatusDispatchTimeout, -1},
	}
	for _, c := range cases {
		w := f.explain(c.op, c.st)
		switch {
		case c.want < 0 && w != nil:
			t.Errorf("%s: explained by a %v window", c.name, w.kind)
		case c.want >= 0 && w == nil:
			t.Errorf("%s: unexplained, want a %v window", c.name, c.want)
		case c.want >= 0 && w.kind != c.want:
			t.Errorf("%s: explained by a %v window, want %v", c.name, w.kind, c.want)
		}
	}
}

// A TIMEOUT that completes before the stall window explaining it is
// opened (the stall watcher sees a stall only once the loop runs again)
// is judged again by settle; an unexplained one, and any other status,
// is an error.
func TestJudgeLater(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var f faults
	var errs errorLog
	var explained [nWindowKinds]uint64
	op := func(ini, tgt int, from, to float64) opSpan {
		return opSpan{initiator: ini, target: tgt, region: roleData, posted: at(from), done: at(to), keyAt: at(from)}
	}
	f.judgeLater(op(2, 1, 27.2, 28.2), abi.StatusTimeout, &explained, func() string { return "timeout to the stalled engine" }, &errs)
	f.judgeLater(op(2, 3, 27.2, 28.2), abi.StatusTimeout, &explained, func() string { return "timeout between two others" }, &errs)
	f.judgeLater(op(2, 1, 27.2, 28.2), abi.StatusRemoteBounds, &explained, func() string { return "remote bounds" }, &errs)
	if n, _ := errs.snapshot(); n != 1 {
		t.Fatalf("before settle: %d errors, want 1 (the status no window explains)", n)
	}
	// Engine 2's loop stalled from 27.1 s; the watcher reads it at 28.4 s.
	f.add(window{kind: winStall, engines: 1 << 1, start: at(27.0), end: at(28.6)})
	f.settle(&errs)
	n, msgs := errs.snapshot()
	if n != 2 || msgs[1] != "timeout between two others" || explained[winStall] != 1 {
		t.Fatalf("after settle: %d errors %q, %d explained by a stall", n, msgs, explained[winStall])
	}
}
