package soak

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// A fault's window stays open this long after the fault is over: an op
// posted just before a link came back, or before an engine's
// applications had reconnected, ends at most a TIMEOUT later, and one
// waiting for ARP a resolve timeout later.
const grace = engineTimeout + resolveTime + time.Second

// flapDown is how long a router link stays down: longer than TIMEOUT, so
// ops in flight across it time out, and long enough for ARP entries
// refreshed meanwhile to go unanswered.
const flapDown = 2 * time.Second

// rekeyCounts are the rekeys done, and the REKEY ops posted and
// completed (by status).
type rekeyCounts struct {
	local, remote atomic.Int32
	posted        atomic.Uint64
	done          [64]atomic.Uint64
}

// schedule runs the events at their times, one at a time (a fault is
// over, its window closed, before the next begins), until the events
// run out or ctx ends.
func (s *soak) schedule(ctx context.Context, t0 time.Time, evs []event) error {
	for _, e := range evs {
		if d := time.Until(t0.Add(e.at)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var err error
		switch e.kind {
		case evKill:
			err = s.killRestart(ctx, e.engine)
		case evFlap:
			err = s.flap(e.subnet)
		case evLocalRekey:
			w := s.faults.open(window{kind: winRekey, region: regionKey{e.engine, e.role}})
			err = s.owners[e.engine].localRekey(e.role)
			s.faults.close(w, 0)
			if err == nil {
				s.rekeys.local.Add(1)
			}
		case evRemoteRekey:
			err = s.remoteRekey(ctx, e.engine, e.by)
		}
		if err != nil {
			return fmt.Errorf("soak: fault schedule at %v: %w", e.at, err)
		}
	}
	return nil
}

// killRestart kills engine i with SIGKILL and starts its next
// incarnation; its owner application redials and registers its regions
// anew, its raw and executor applications redial on their own when they
// see ENGINE_GONE. The window closes a grace after the last of them has
// reconnected.
func (s *soak) killRestart(ctx context.Context, i int) error {
	name := s.bed.Hosts[i].Name
	s.rmu.Lock()
	want := s.recon[i] + 2 // the raw worker and the executor
	s.rmu.Unlock()
	w := s.faults.open(window{kind: winKill, engines: 1 << i})
	defer s.faults.close(w, grace)
	t0 := time.Now()
	dead := s.bed.kill(i)
	s.nonces.Died(s.bed.Hosts[i].Addr, dead.UnixNano())
	o := s.owners[i]
	for deadline := time.Now().Add(5 * time.Second); o.p.Gone() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s killed, but its owner's portal did not see it go within 5 s", name)
		}
	}
	if err := s.bed.start(i); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := o.reconnect(rctx); err != nil {
		return err
	}
	if !s.awaitReconnects(i, want, time.Minute) {
		return fmt.Errorf("the applications on %s did not reconnect within a minute of its restart", name)
	}
	s.kills.Add(1)
	s.logf("%s: SIGKILL, restarted, its applications reconnected in %v", name, time.Since(t0).Round(time.Millisecond))
	return nil
}

// flap takes the router's link to subnet sn down and up again.
func (s *soak) flap(sn int) error {
	var mask uint8
	for i, h := range s.bed.Hosts {
		if h.Subnet == sn {
			mask |= 1 << i
		}
	}
	w := s.faults.open(window{kind: winFlap, engines: mask})
	defer s.faults.close(w, grace)
	if err := s.bed.SetLink(sn, false); err != nil {
		return err
	}
	time.Sleep(flapDown)
	if err := s.bed.SetLink(sn, true); err != nil {
		return err
	}
	s.flaps.Add(1)
	return nil
}

// remoteRekey has an application on engine by install a new key for
// owner j's data region with a REKEY op (paper §5.2): it asks the
// owner's key service for its REKEY K_d, sends the new key encrypted
// under it, and on OK the soak records the key as the region's, so the
// owner's key service hands out K_d of it; readers meanwhile fail
// authentication and fetch again.
func (s *soak) remoteRekey(ctx context.Context, j, by int) error {
	p, err := portal.DialOptions(s.bed.socket(by), fmt.Sprintf("soak-rekey%d", by+1), portal.Options{WaitSpins: -1})
	if err != nil {
		return err
	}
	defer p.Close()
	slots, err := p.AllocSlots(1)
	if err != nil {
		return err
	}
	loc, err := p.RegisterRegion(portal.KeySize, portal.PermLocalRead)
	if err != nil {
		return err
	}
	var kr portal.Key
	for kr == (portal.Key{}) {
		rand.Read(kr[:])
	}
	copy(loc.Bytes(), kr[:])
	o := s.owners[j]
	v := o.region(roleData)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	g, err := keyx.Fetch(fctx, o.addr, s.creds, keyx.RequestFor(p.Identity(), v.id, portal.OpRekey))
	cancel()
	if err != nil {
		return fmt.Errorf("REKEY K_d from owner %d: %w", j+1, err)
	}
	w := s.faults.open(window{kind: winRekey, region: regionKey{j, roleData}})
	defer s.faults.close(w, 0)
	// A REKEY that ends TIMEOUT may have installed the key: it is sent
	// again, and a REMOTE_AUTHENTICATION_FAILURE then means the first
	// one took (the old key's K_d no longer works).
	timedOut := false
	for attempt := 1; attempt <= 4; attempt++ {
		t0 := time.Now()
		s.rekeys.posted.Add(1)
		if err := p.Submit(&portal.Op{
			Type: portal.OpRekey, Slot: slots[0], Cookie: uint64(attempt),
			Remote: v.addr, RemoteRegion: v.id, Key: g.Key,
			Local: loc,
		}); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*engineTimeout)
		var cpl [1]portal.Completion
		n, err := p.Wait(cctx, cpl[:])
		cancel()
		if err != nil || n != 1 || cpl[0].Cookie != uint64(attempt) {
			return fmt.Errorf("REKEY of owner %d's data region from engine %d: no completion (%v)", j+1, by+1, err)
		}
		st := cpl[0].Status
		s.rekeys.done[st&63].Add(1)
		if st == portal.StatusOK || st == portal.StatusRemoteAuthFailure && timedOut {
			o.installed(roleData, v.id, kr)
			s.rekeys.remote.Add(1)
			return nil
		}
		span := opSpan{initiator: by, target: j, region: roleData, posted: t0, done: time.Now(), keyAt: t0}
		if win := s.faults.explain(span, st); win == nil || win.kind == winRekey {
			s.errs.add("REKEY of owner %d's data region from engine %d posted at %v: %v", j+1, by+1, s.since(t0), st)
		}
		timedOut = timedOut || st == portal.StatusTimeout
		if st != portal.StatusTimeout {
			return nil
		}
	}
	return nil
}
