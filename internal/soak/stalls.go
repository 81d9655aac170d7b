package soak

import (
	"fmt"
	"sync"
	"time"

	"github.com/onerma/onerma/ctlmsg"
)

// A shared host can starve an engine of CPU for seconds: its loop does
// not run, and a WRITE it initiated then times out (the serving engine
// pulls the data, gets none within its TIMEOUT and gives up; the
// initiator's own deadlines move by the gap, the server's do not). The
// engine measures it: every gap between two iterations of its loop over
// 1 ms is a stall (`loop.stalls`, `loop.stalled_ns` in rmactl stats).
// The soak reads those counters every second and opens a stall window
// for an engine whose loop stalled for at least stallFloor in all since
// the previous reading and for at least half of that time: a long stall,
// not the many short ones of a busy host. A stall window explains
// TIMEOUT and UNREACHABLE of ops to or from that engine, and the report
// lists every one: a run on a quiet host has none.
const (
	stallEvery = time.Second
	stallFloor = engineTimeout / 2
)

// stallRecord is one stall window, for the report.
type stallRecord struct {
	engine string
	at     time.Duration // from the start of the load
	stall  time.Duration // loop time stalled since the previous reading
	over   time.Duration // the time since the previous reading
}

// watchStalls samples the engines' loop counters until done is closed.
func (s *soak) watchStalls(done chan struct{}) {
	type reading struct {
		at  time.Time
		ns  uint64
		gen int
		ok  bool
	}
	prev := make([]reading, engines)
	last := false
	tick := time.NewTicker(stallEvery)
	defer tick.Stop()
	for {
		for i, o := range s.owners {
			st, gen, err := o.stats()
			now := time.Now()
			if err != nil || st.Loop == nil {
				prev[i].ok = false
				continue
			}
			p := prev[i]
			prev[i] = reading{at: now, ns: st.Loop.StalledNs, gen: gen, ok: true}
			if !p.ok || p.gen != gen || st.Loop.StalledNs < p.ns {
				continue
			}
			d, over := time.Duration(st.Loop.StalledNs-p.ns), now.Sub(p.at)
			if d < stallFloor || d < over/2 {
				continue
			}
			// The stall ended by now: the loop adds a gap to its
			// counters when it runs again, so a stall that straddled
			// the previous reading began d before now, not after it;
			// ops it made fail end a grace later.
			start := p.at
			if began := now.Add(-d); began.Before(start) {
				start = began
			}
			s.faults.add(window{kind: winStall, engines: 1 << i, start: start.Add(-100 * time.Millisecond), end: now.Add(grace)})
			s.stallMu.Lock()
			s.stalls = append(s.stalls, stallRecord{engine: s.bed.Hosts[i].Name, at: s.since(p.at), stall: d, over: over})
			s.stallMu.Unlock()
		}
		if last {
			return
		}
		select {
		case <-done:
			// One more reading: a stall that ended since the last one
			// may explain failures of the last second of load.
			last = true
		case <-tick.C:
		}
	}
}

// stats reads the owner's engine's counters through its portal, and the
// registration they belong to (a restarted engine counts from 0).
func (o *owner) stats() (*ctlmsg.Stats, int, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	st, err := o.p.Stats()
	return st, o.gen, err
}

// stallLog is the stall windows of a run. Safe for concurrent use.
type stallLog struct {
	stallMu sync.Mutex
	stalls  []stallRecord
}

func (r stallRecord) String() string {
	return fmt.Sprintf("%s at %v: loop stalled %v of %v", r.engine, r.at, r.stall.Round(time.Millisecond), r.over.Round(time.Millisecond))
}
