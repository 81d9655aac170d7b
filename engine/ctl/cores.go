package ctl

import (
	"fmt"
	"sync"

	"github.com/onerma/onerma/engine"
)

// The engine's cores as the control server sees them: each core's
// executor (its poll loop's Exec), the portals the server opened on it,
// how loaded it is (where the next portal goes), and the wait for every
// core's quiescent point after a region left the engine's table.

// coreBook is what the server knows of one core's portals: the
// connection that opened each and the name it was opened with (the stats
// reply's portals). Touched only inside the core's Exec closures, which
// serialises it with every use of the core's portal ids.
type coreBook struct {
	owner     map[engine.PortalID]*conn
	ownerName map[engine.PortalID]string
}

// coreLoad is a core's share of the portals (under Server.mu): portals
// attached to it and the slots they hold.
type coreLoad struct {
	portals int
	slots   int
}

// pickCore reserves a portal on a core: the one asked for (ask >= 0) or
// the least loaded (fewest portals, then fewest slots, then the lowest
// index). unpickCore undoes it when the core refuses the portal.
func (s *Server) pickCore(ask int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := ask
	if k < 0 {
		k = 0
		for i, l := range s.load {
			if b := s.load[k]; l.portals < b.portals || (l.portals == b.portals && l.slots < b.slots) {
				k = i
			}
		}
	}
	s.load[k].portals++
	return k
}

func (s *Server) unpickCore(k int) {
	s.mu.Lock()
	s.load[k].portals--
	s.mu.Unlock()
}

// addSlots counts n slots more (or fewer) on core k.
func (s *Server) addSlots(k, n int) {
	s.mu.Lock()
	s.load[k].slots += n
	s.mu.Unlock()
}

// CoreLoad reports how many portals and slots each core holds (the load the
// server balances portals by).
func (s *Server) CoreLoad() (portals, slots []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.load {
		portals, slots = append(portals, l.portals), append(slots, l.slots)
	}
	return portals, slots
}

// quiesce waits until every core has passed a quiescent point since the
// engine's region table reached version v (engine.Group.Quiesced): from
// then on no core touches the memory of a region removed before v. Every
// core not there yet runs its quiescent point in a closure on its loop
// (engine.Group.Quiesce), all at once: the Exec takes a busy loop one
// iteration, and a loop asleep in Backoff lends its core (the point runs
// on the caller's goroutine, the loop still asleep); the caller sleeps
// meanwhile rather than spin on a CPU the loops may need. An error (a
// loop that is not running) means the cores did not confirm: the caller
// must keep the memory mapped.
func (s *Server) quiesce(v uint64) error {
	g := s.g
	var (
		wg   sync.WaitGroup
		errs = make([]error, g.Len())
	)
	for i, x := range s.execs {
		if !g.CoreQuiesced(i, v) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = x.Exec(func(*engine.Core) { g.Quiesce(i) })
			}()
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("core %d: %w", i, err)
		}
	}
	if !g.Quiesced(v) { // cannot happen: each ran its quiescent point after v
		return fmt.Errorf("the engine's cores did not reach version %d", v)
	}
	return nil
}
