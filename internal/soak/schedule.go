package soak

import (
	"math"
	"sort"
	"time"
)

// Floors are what a run must reach, scaled from the 30-minute floors by
// its duration (linearly, rounded up, with the minimums below).
type Floors struct {
	VerifiedOps  uint64 // 10 M per 30 minutes
	Kills        int    // engine SIGKILLs and restarts: 5 per 30 minutes, at least 1
	Flaps        int    // router link down and up: 10 per 30 minutes, at least 2
	LocalRekeys  int    // portal.Rekey by an owner: one per 45 s, at least 2
	RemoteRekeys int    // REKEY ops from another engine: one per 90 s, at least 1
}

// FloorsFor returns the floors of a run of d.
func FloorsFor(d time.Duration) Floors {
	scale := float64(d) / float64(30*time.Minute)
	up := func(per30 float64, least int) int { return max(least, int(math.Ceil(per30*scale-1e-9))) }
	return Floors{
		VerifiedOps:  uint64(math.Ceil(10e6*scale - 1e-9)),
		Kills:        up(5, 1),
		Flaps:        up(10, 2),
		LocalRekeys:  up(40, 2),
		RemoteRekeys: up(20, 1),
	}
}

// eventKind is what the fault schedule does at one point.
type eventKind int

const (
	evKill eventKind = iota
	evFlap
	evLocalRekey
	evRemoteRekey
)

// event is one entry of the schedule.
type event struct {
	at     time.Duration // from the start of the load
	kind   eventKind
	engine int  // kill: the engine; rekeys: the region's owner
	subnet int  // flap
	role   role // local rekey: which region
	by     int  // remote rekey: the engine of the application that sends the REKEY
}

// quiet is how long a run begins and ends without faults: the load
// starts, the engines warm up (RSS) and the end state settles.
func quiet(d time.Duration) (lead, tail time.Duration) {
	return min(max(d/12, 10*time.Second), 2*time.Minute), min(max(d/20, 5*time.Second), time.Minute)
}

// plan spreads f's events evenly over the part of a run of d between its
// quiet lead and tail, each kind on its own evenly spaced grid, offset
// from the others' so that they seldom meet (the schedule runs them one
// at a time anyway). Kills go round the engines starting with the AF_XDP
// one, flaps alternate subnets, rekeys go round the owners.
func plan(d time.Duration, f Floors) []event {
	lead, tail := quiet(d)
	span := d - lead - tail
	var evs []event
	grid := func(n int, phase float64, mk func(k int) event) {
		for k := range n {
			e := mk(k)
			e.at = lead + time.Duration((float64(k)+phase)*float64(span)/float64(n))
			evs = append(evs, e)
		}
	}
	killOrder := []int{1, 3, 0, 2}
	grid(f.Kills, 0.5, func(k int) event { return event{kind: evKill, engine: killOrder[k%engines]} })
	grid(f.Flaps, 0.25, func(k int) event { return event{kind: evFlap, subnet: 1 - k%2} })
	grid(f.LocalRekeys, 0.1, func(k int) event {
		return event{kind: evLocalRekey, engine: (k / 2) % engines, role: role(k % 2)}
	})
	grid(f.RemoteRekeys, 0.8, func(k int) event {
		j := (k + 2) % engines
		return event{kind: evRemoteRekey, engine: j, by: (j + 1) % engines}
	})
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	return evs
}
