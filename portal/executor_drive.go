package portal

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// noTimer is e.timer when no pacing or backoff deadline is pending.
const noTimer = math.MaxInt64

// now is the executor's clock in ns.
func (e *Executor) now() int64 { return int64(time.Since(e.epoch)) }

// drive runs the data path until self has finished, then hands the drive
// to another transfer's goroutine (or stops driving if none is left).
func (e *Executor) drive(self *transfer) {
	e.self = self
	spins := 0
	dirty := true // something changed since the last issue pass
	for {
		if e.pending.Load() {
			e.qmu.Lock()
			e.absorbLocked()
			e.qmu.Unlock()
			dirty = true
		}
		if e.closing.Load() || e.cancels.Load() != e.seen {
			e.checkStops()
			dirty = true
		}
		busy := false
		now := int64(-1)
		if e.fatal == nil {
			if n, err := e.p.poll(e.cpl[:], false); n > 0 {
				now = e.now()
				for i := range n {
					e.complete(now, &e.cpl[i])
				}
				busy, dirty = true, true
			} else if err != nil {
				// The engine is gone (or the portal closed or
				// corrupt), and its last completions are in: none
				// will come for the ops still in flight.
				e.die(err)
				dirty = true
				continue
			}
		}
		if e.timer != noTimer && !dirty {
			if now < 0 {
				now = e.now()
			}
			dirty = now >= e.timer
		}
		// The issue pass runs only when it may find something to post: a
		// window or slot freed, a new transfer, a pacer or backoff due.
		if dirty && e.fatal == nil {
			if now < 0 {
				now = e.now()
			}
			if e.issue(now) > 0 {
				e.p.Flush()
				busy = true
			}
			dirty = e.ringFull // try again at once: the engine is draining the ring
		}
		if self.finished {
			e.handoff()
			return
		}
		if e.yield {
			// A transfer of another goroutine finished: let it run now.
			// The driver spins on the completion ring, and on a single
			// CPU (GOMAXPROCS 1, or an application pinned to one CPU)
			// the goroutine it woke would otherwise wait for the Go
			// scheduler's 10 ms preemption: a short READ behind a long
			// transfer on the same executor would take milliseconds
			// (rmabench's loopback-hol row measures it: rmaperf read_lat
			// -exec -bg, pinned to one CPU).
			e.yield = false
			runtime.Gosched()
		}
		if busy {
			spins = 0
			e.nap = waitSleepMin
			continue
		}
		if e.fatal == nil && (e.p.closed || e.p.Corrupt()) {
			err := ErrClosed
			if !e.p.closed {
				err = ErrRingCorrupt
			}
			e.die(err)
			dirty = true
			continue
		}
		if e.timer != noTimer && now < 0 {
			now = e.now()
		}
		if (e.timer != noTimer && e.timer-now < e.spin) || (e.inflight > 0 && spins < e.p.spins) || e.ringFull {
			spins++
			if spins%64 == 0 {
				runtime.Gosched() // callers submitting transfers may share this CPU
			}
			continue
		}
		e.sleep(now)
		spins = 0
	}
}

// handoff gives the drive to the goroutine of an unfinished transfer, or
// stops driving.
func (e *Executor) handoff() {
	e.self = nil
	e.qmu.Lock()
	e.absorbLocked()
	var next *transfer
	if len(e.active) > 0 {
		next = e.active[0]
	} else {
		e.driving = false
		if e.closed {
			close(e.idle)
		}
	}
	e.qmu.Unlock()
	if next != nil {
		next.drive <- struct{}{}
	}
}

// absorbLocked moves new transfers to the active list (qmu held).
func (e *Executor) absorbLocked() {
	for i, t := range e.incoming {
		e.incoming[i] = nil
		p := e.peers[t.key]
		if p == nil {
			p = &peerState{key: t.key}
			e.peers[t.key] = p
		}
		t.peer = p
		if t.short = t.length <= e.chunk; t.short {
			e.shortActive++
			e.shortStarted(e.now())
		}
		e.active = append(e.active, t)
		switch {
		case e.fatal != nil:
			e.stop(t, t.fatalErr(e.fatal))
		case e.closing.Load():
			e.stop(t, ErrExecutorClosed)
		case t.cancelled.Load(): // its context ended before the driver saw it
			e.stop(t, t.ctxErr())
		}
	}
	e.incoming = e.incoming[:0]
	e.pending.Store(false)
}

// checkStops stops transfers whose context ended, or all on Close.
func (e *Executor) checkStops() {
	e.seen = e.cancels.Load()
	closing := e.closing.Load()
	for i := len(e.active) - 1; i >= 0; i-- {
		if i >= len(e.active) {
			continue
		}
		t := e.active[i]
		switch {
		case t.stopped:
		case closing:
			e.stop(t, ErrExecutorClosed)
		case t.cancelled.Load():
			e.stop(t, t.ctxErr())
		}
	}
}

// stop makes t issue nothing more and fail with err once its ops in
// flight have completed.
func (e *Executor) stop(t *transfer, err error) {
	if t.stopped {
		return
	}
	t.stopped, t.err = true, err
	for i := t.retryHead; i >= 0; {
		next := e.ops[i].next
		e.freeOp(i)
		i = next
	}
	t.retryHead, t.retryTail, t.nretry = -1, -1, 0
	e.maybeFinish(t)
}

// die: the engine is gone, or the portal is closed or corrupt. No
// completion will come, so every transfer fails at once, with err named
// in its error (errors.Is works: ErrEngineGone, ErrClosed, ...).
func (e *Executor) die(err error) {
	e.fatal = err
	for i := range e.ops {
		if o := &e.ops[i]; o.t != nil && o.posted {
			o.t.inflight--
			o.t.peer.inflight--
			if !o.t.short {
				e.longInflight--
			}
			e.freeOp(int32(i))
		}
	}
	e.inflight = 0
	for i := len(e.active) - 1; i >= 0; i-- {
		if i < len(e.active) {
			t := e.active[i]
			e.stop(t, t.fatalErr(err))
		}
	}
}

// fatalErr is the error of a transfer the executor's death (die) ended:
// how far it got, and why.
func (t *transfer) fatalErr(err error) error {
	return fmt.Errorf("portal: executor: %v of %d bytes at remote offset %d stopped with %d bytes done: %w",
		t.op, t.length, t.remoteOff, t.okBytes, err)
}

func (e *Executor) maybeFinish(t *transfer) {
	if t.inflight > 0 || t.nretry > 0 || (!t.stopped && t.okBytes < t.length) {
		return
	}
	for i, u := range e.active {
		if u == t {
			copy(e.active[i:], e.active[i+1:])
			e.active[len(e.active)-1] = nil
			e.active = e.active[:len(e.active)-1]
			if e.rr > i {
				e.rr--
			}
			break
		}
	}
	if t.short {
		e.shortActive--
		if e.shortActive == 0 {
			e.shortUntil = e.now() + e.shortHold()
		}
	}
	e.st.transfers.Add(1)
	if t.err != nil {
		e.st.failed.Add(1)
		if ce, ok := t.err.(*ChunkError); ok {
			ce.Done = t.okBytes
		}
	}
	t.finished = true
	if t != e.self {
		t.done <- struct{}{}
		e.yield = true
	}
}

func (e *Executor) freeOp(i int32) {
	o := &e.ops[i]
	o.t, o.posted, o.next = nil, false, -1
	e.freeOps = append(e.freeOps, i)
}

// sleep waits for a completion (on the engine's doorbell), a new
// transfer, a cancellation or Close (on wakeFD), or the next pacing or
// backoff deadline, whichever comes first.
func (e *Executor) sleep(now int64) {
	timeout := int64(waitBellMaxMs) * int64(time.Millisecond)
	if e.timer != noTimer { // now was read
		timeout = min(timeout, max(e.timer-now, 0))
	}
	bell := e.p.arm != nil && e.inflight > 0
	if e.inflight > 0 && !bell {
		// No doorbell: poll the ring with backoff, as Wait does.
		timeout = min(timeout, int64(e.nap))
		e.nap = min(2*e.nap, waitSleepMax)
	}
	e.sleeping.Store(true)
	if e.pending.Load() || e.closing.Load() || e.cancels.Load() != e.seen {
		e.sleeping.Store(false)
		return
	}
	nfd := 1
	if bell {
		e.p.arm.Store(1) // pairs with the engine's CompareAndSwap after it publishes
		if e.p.cpl.Peek() != nil {
			e.p.arm.Store(0)
			e.sleeping.Store(false)
			return
		}
		nfd = 2
	}
	e.ts = unix.NsecToTimespec(timeout)
	e.pfd[0].Revents, e.pfd[1].Revents = 0, 0
	if n, _ := unix.Ppoll(e.pfd[:nfd], &e.ts, nil); n > 0 {
		if e.pfd[0].Revents&unix.POLLIN != 0 {
			unix.Read(e.wakeFD, e.evbuf[:])
		}
		if bell && e.pfd[1].Revents&unix.POLLIN != 0 {
			unix.Read(e.p.bellFD, e.evbuf[:])
		}
	}
	if bell {
		e.p.arm.Store(0)
	}
	e.sleeping.Store(false)
}

// wake rouses a sleeping driver.
func (e *Executor) wake() {
	if e.sleeping.Load() {
		one := [8]byte{1}
		unix.Write(e.wakeFD, one[:])
	}
}
