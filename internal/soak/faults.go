package soak

import (
	"fmt"
	"sync"
	"time"

	"github.com/onerma/onerma/portal"
)

// A fault window is the time during which a fault may make ops fail:
// from just before the fault to a grace after its end (an op posted
// just before a link came back may still time out a TIMEOUT later). An
// op that does not complete OK must be explained by a window that
// overlaps it and whose kind can cause its status; any other failure is
// an error of the run.
type windowKind int

const (
	winKill  windowKind = iota // an engine's SIGKILL, restart and its applications' reconnection
	winFlap                    // a router link down and up
	winRekey                   // a region's key replaced (locally or by a remote REKEY)
	winStall                   // an engine's loop did not run for long (stalls.go)
	nWindowKinds
)

func (k windowKind) String() string {
	return [...]string{"kill", "flap", "rekey", "stall"}[k]
}

// window is one fault's span.
type window struct {
	kind    windowKind
	engines uint8 // kill: the engine; flap: the engines of the subnet
	region  regionKey
	start   time.Time
	end     time.Time // zero while the fault lasts
}

// regionKey names a region by its owner engine and its role.
type regionKey struct {
	engine int
	role   role
}

// role is what a region of an owner is for.
type role int

const (
	roleData role = iota // raw READs and WRITEs (and remote REKEYs)
	roleExec             // executor transfers
)

func (r role) String() string { return [...]string{"data", "exec"}[r] }

// faults is the set of windows of a run. Safe for concurrent use.
type faults struct {
	mu      sync.Mutex
	ws      []window
	pending []pendingFailure
}

// pendingFailure is a TIMEOUT or UNREACHABLE no window explained when it
// completed. A stall window opens only when the engines' counters are
// next read (stallEvery later, once the loop has run again), after the
// ops the stall made fail have completed: such failures are judged again
// by settle once the load has stopped and the last reading is in.
type pendingFailure struct {
	span      opSpan
	st        portal.Status
	explained *[nWindowKinds]uint64 // the worker's counters, by window kind
	msg       string                // the error if nothing explains it
}

// judgeLater explains op's failure st now or, for a status a stall window
// opened later may explain, once settle runs; explained counts it by
// window kind, msg is the error otherwise.
func (f *faults) judgeLater(op opSpan, st portal.Status, explained *[nWindowKinds]uint64, msg func() string, errs *errorLog) {
	if win := f.explain(op, st); win != nil {
		explained[win.kind]++
		return
	}
	if st != portal.StatusTimeout && st != portal.StatusUnreachable {
		errs.add("%s", msg())
		return
	}
	f.mu.Lock()
	f.pending = append(f.pending, pendingFailure{span: op, st: st, explained: explained, msg: msg()})
	f.mu.Unlock()
}

// settle judges the pending failures against every window: call it once
// the workers have stopped and the stall watcher has taken its last
// reading.
func (f *faults) settle(errs *errorLog) {
	f.mu.Lock()
	pending := f.pending
	f.pending = nil
	f.mu.Unlock()
	for _, p := range pending {
		if win := f.explain(p.span, p.st); win != nil {
			p.explained[win.kind]++
		} else {
			errs.add("%s", p.msg)
		}
	}
}

// open starts a window now and returns its index for close.
func (f *faults) open(w window) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.start = time.Now()
	f.ws = append(f.ws, w)
	return len(f.ws) - 1
}

// add records a window whose span is known.
func (f *faults) add(w window) {
	f.mu.Lock()
	f.ws = append(f.ws, w)
	f.mu.Unlock()
}

// close ends window i grace from now.
func (f *faults) close(i int, grace time.Duration) {
	f.mu.Lock()
	f.ws[i].end = time.Now().Add(grace)
	f.mu.Unlock()
}

// overlaps reports whether w covers some of [from, to].
func (w *window) overlaps(from, to time.Time) bool {
	return !w.start.After(to) && (w.end.IsZero() || !w.end.Before(from))
}

// opSpan is what explain needs of a failed op: who ran it against whom,
// on which region, and when. keyAt is when the K_d it used was asked
// for (a key fetched before a rekey ended may be stale).
type opSpan struct {
	initiator, target int
	region            role
	posted, done      time.Time
	keyAt             time.Time
}

// explain returns the window that accounts for status st of op, or nil:
// ENGINE_GONE only by a kill of the initiator's engine; TIMEOUT and
// UNREACHABLE by a kill of either engine, a flap of either's subnet or a
// long stall of either's loop;
// REMOTE_AUTHENTICATION_FAILURE by a rekey of the region or a restart of
// its engine (its regions are registered anew, under new ids and keys)
// since the K_d used was fetched. Nothing explains any other status.
func (f *faults) explain(op opSpan, st portal.Status) *window {
	f.mu.Lock()
	defer f.mu.Unlock()
	ini, tgt := uint8(1)<<op.initiator, uint8(1)<<op.target
	for i := range f.ws {
		w := &f.ws[i]
		ok := false
		switch st {
		case portal.StatusEngineGone:
			ok = w.kind == winKill && w.engines&ini != 0 && w.overlaps(op.posted, op.done)
		case portal.StatusTimeout, portal.StatusUnreachable:
			ok = (w.kind == winKill || w.kind == winFlap || w.kind == winStall) && w.engines&(ini|tgt) != 0 && w.overlaps(op.posted, op.done)
		case portal.StatusRemoteAuthFailure:
			ok = (w.kind == winKill && w.engines&tgt != 0 || w.kind == winRekey && w.region == regionKey{op.target, op.region}) &&
				w.overlaps(op.keyAt, op.done)
		}
		if ok {
			c := *w
			return &c
		}
	}
	return nil
}

// errorLog keeps the run's errors: every one counted, the first few kept
// in full. Safe for concurrent use.
type errorLog struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *errorLog) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 30 {
		e.first = append(e.first, fmt.Sprintf(format, args...))
	}
}

func (e *errorLog) snapshot() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, append([]string(nil), e.first...)
}
