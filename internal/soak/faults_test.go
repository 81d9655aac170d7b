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
