package portal

import (
	"math/rand/v2"

	"github.com/onerma/onerma/abi"
)

// backoff is the wait before the k-th NACK or DISPATCH_TIMEOUT retry of a
// chunk (k >= 1): min(base·2^(k-1), max), jittered over its upper half.
func (e *Executor) backoff(k int32) int64 {
	d := int64(e.cfg.BackoffMax)
	if k <= 32 {
		d = min(int64(e.cfg.BackoffBase)<<(k-1), d)
	}
	if d < 2 {
		return d
	}
	return d/2 + rand.Int64N(d-d/2)
}

// complete handles one completion.
func (e *Executor) complete(now int64, c *abi.Completion) {
	i := int32(uint32(c.Cookie))
	if i < 0 || int(i) >= len(e.ops) || e.ops[i].gen != uint32(c.Cookie>>32) || !e.ops[i].posted || e.ops[i].slot != c.Slot {
		e.st.stray.Add(1)
		return
	}
	o := &e.ops[i]
	t, ps := o.t, o.t.peer
	o.posted = false
	ps.inflight--
	t.inflight--
	e.inflight--
	if !t.short {
		e.longInflight--
	}
	e.ctl.OnCompletion(now, ps.key, c.Status, int64(c.IssueDelayNs), int64(c.TotalDelayNs))
	retry := false
	switch c.Status {
	case abi.StatusOK:
		t.okBytes += uint64(o.length)
	case abi.StatusNack, abi.StatusDispatchTimeout:
		if c.Status == abi.StatusNack {
			e.st.nacks.Add(1)
		} else {
			e.st.dispatch.Add(1)
		}
		o.congest++
		if !t.stopped && (e.cfg.MaxAttempts < 0 || int(o.attempts) < e.cfg.MaxAttempts) {
			o.readyAt = now + e.backoff(o.congest)
			retry = true
		}
	case abi.StatusTimeout:
		e.st.timeouts.Add(1)
		o.timeouts++
		if !t.stopped && int(o.timeouts) <= e.cfg.TimeoutRetries && (e.cfg.MaxAttempts < 0 || int(o.attempts) < e.cfg.MaxAttempts) {
			o.readyAt = now
			retry = true
		}
	}
	switch {
	case retry:
		o.next = -1
		if t.retryTail < 0 {
			t.retryHead = i
		} else {
			e.ops[t.retryTail].next = i
		}
		t.retryTail = i
		t.nretry++
	case c.Status == abi.StatusOK || t.stopped:
		e.freeOp(i)
	default:
		err := &ChunkError{Op: t.op, Remote: t.addr, Region: t.region, RemoteOffset: t.remoteOff + o.off,
			LocalOffset: t.localOff + o.off, Length: o.length, Status: c.Status, Attempts: int(o.attempts), Transfer: t.length}
		e.freeOp(i)
		e.stop(t, err)
		return
	}
	e.maybeFinish(t)
}
