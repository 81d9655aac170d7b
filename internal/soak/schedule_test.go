package soak

import (
	"testing"
	"time"
)

func TestFloors(t *testing.T) {
	if f, want := FloorsFor(30*time.Minute), (Floors{VerifiedOps: 10e6, Kills: 5, Flaps: 10, LocalRekeys: 40, RemoteRekeys: 20}); f != want {
		t.Errorf("30 minutes: %+v, want %+v", f, want)
	}
	if f, want := FloorsFor(time.Minute), (Floors{VerifiedOps: 333334, Kills: 1, Flaps: 2, LocalRekeys: 2, RemoteRekeys: 1}); f != want {
		t.Errorf("1 minute: %+v, want %+v", f, want)
	}
	if f := FloorsFor(2 * time.Hour); f.VerifiedOps != 40e6 || f.Kills != 20 || f.Flaps != 40 {
		t.Errorf("2 hours: %+v", f)
	}
}

func TestPlan(t *testing.T) {
	for _, d := range []time.Duration{time.Minute, 30 * time.Minute} {
		f := FloorsFor(d)
		evs := plan(d, f)
		lead, tail := quiet(d)
		n := map[eventKind]int{}
		killed := map[int]bool{}
		var last time.Duration
		for _, e := range evs {
			n[e.kind]++
			if e.at < lead || e.at > d-tail || e.at < last {
				t.Errorf("%v: event %+v outside [%v, %v] or out of order", d, e, lead, d-tail)
			}
			last = e.at
			if e.kind == evKill {
				killed[e.engine] = true
			}
			if e.kind == evRemoteRekey && e.by == e.engine {
				t.Errorf("%v: a REKEY sent by the region's own engine: %+v", d, e)
			}
		}
		if n[evKill] != f.Kills || n[evFlap] != f.Flaps || n[evLocalRekey] != f.LocalRekeys || n[evRemoteRekey] != f.RemoteRekeys {
			t.Errorf("%v: %v events by kind, want the floors %+v", d, n, f)
		}
		// Five kills in 30 minutes reach every engine; one in a minute
		// the AF_XDP engine's.
		if d == time.Minute && !killed[1] || d == 30*time.Minute && len(killed) != engines {
			t.Errorf("%v: engines killed %v", d, killed)
		}
	}
}
