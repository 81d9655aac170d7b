package sim

import (
	"bytes"
	"math"

	"github.com/onerma/onerma/abi"
)

// Flow ops: issuing each flow's READs (static rate, outstanding cap or
// CC), and checking and recording their completions.

// setTimer asks for a call of pump at t (absolute).
func (f *flowState) setTimer(t int64) {
	s := f.fr.s
	if f.timerAt != 0 && f.timerAt <= t {
		return
	}
	f.timerAt = t
	s.schedule(t, evFlow, f.spec.Client, int64(f.idx), nil)
}

// timer: a flow's issue timer fired.
func (fr *flowRun) timer(i int64) {
	f := fr.flows[i]
	if f.timerAt != 0 && f.timerAt <= fr.s.now {
		f.timerAt = 0
	}
	f.pump()
}

func (f *flowState) bucket(t int64) *FlowBucket {
	i := int((t - f.fr.s.t0) / f.fr.bucketNs)
	if i >= len(f.st.Buckets) {
		f.st.Buckets = append(f.st.Buckets, make([]FlowBucket, i+1-len(f.st.Buckets))...)
	}
	return &f.st.Buckets[i]
}

// pump posts what the flow may post now and arms its timer for later.
func (f *flowState) pump() {
	fr := f.fr
	s := fr.s
	now := s.now
	if now < f.start || now >= f.stop || now >= s.postEnd || s.err != nil {
		return
	}
	posted := false
	defer func() {
		if posted {
			f.fp.cmd.Publish()
			f.fp.n.kickAll()
		}
	}()
	for {
		switch {
		case f.spec.CC:
			ck := ccKey{f.spec.Client, f.key}
			if fr.inflight[ck] >= f.ctl.MaxInFlight(f.key) {
				return // a completion calls pump again
			}
			if w := f.pacer.Wait(now); w > 0 {
				f.setTimer(now + w)
				return
			}
		case f.spec.RateBps > 0:
			if float64(now) < f.nextIssue {
				f.setTimer(int64(math.Ceil(f.nextIssue)))
				return
			}
			f.nextIssue += f.gap
			if (f.spec.MaxOutstanding > 0 && f.out >= f.spec.MaxOutstanding) || len(f.fp.idle) == 0 {
				f.st.Skipped++
				continue
			}
		default:
			if f.spec.MaxOutstanding > 0 && f.out >= f.spec.MaxOutstanding {
				return
			}
		}
		if len(f.fp.idle) == 0 {
			return // a completion calls pump again
		}
		if !f.post(now) {
			return
		}
		posted = true
		if f.spec.CC {
			f.pacer.Issued(now, f.ctl.Gap(f.key, f.spec.OpBytes))
		}
	}
}

// post writes one READ of the flow's next chunk (a failed one first).
func (f *flowState) post(now int64) bool {
	fr := f.fr
	s := fr.s
	fp := f.fp
	entry := fp.cmd.Reserve()
	if entry == nil {
		return false
	}
	k := fp.idle[len(fp.idle)-1]
	area := fp.sink[k*f.spec.OpBytes : (k+1)*f.spec.OpBytes]
	if i := firstNotPoison(area); i >= 0 {
		s.fail("flow %d: byte %d of idle slot %d's sink area written (%#02x): a late response landed after its op completed", f.idx, i, k, area[i])
		return false
	}
	fp.idle = fp.idle[:len(fp.idle)-1]
	op := flowOp{live: true, postedAt: now, firstAt: now, length: uint32(f.spec.OpBytes)}
	if n := len(f.retry); n > 0 {
		r := f.retry[0]
		f.retry = f.retry[1:]
		op.off, op.firstAt = r.off, r.firstAt
		f.st.Retried++
	} else {
		op.off = f.nextChunk
		f.nextChunk += uint64(f.spec.OpBytes)
		if f.nextChunk+uint64(f.spec.OpBytes) > uint64(len(f.srv.obj)) {
			f.nextChunk = 0 // the next transfer of the object
		}
	}
	f.seq++
	op.cookie = uint64(f.idx)<<48 | f.seq
	fp.busy[k] = op
	c := abi.Command{
		Op: abi.OpRead, Slot: fp.slots[k], Cookie: op.cookie,
		RemoteAddr: f.key.Peer, RemoteRegion: f.srv.id, RemoteOffset: op.off,
		LocalRegion: fp.sinkID, LocalOffset: uint64(k * f.spec.OpBytes), Length: op.length, Key: f.kd,
	}
	c.Encode(entry)
	fp.cmd.Commit()
	f.out++
	fr.outstanding++
	fr.inflight[ccKey{f.spec.Client, f.key}]++
	f.st.Posted++
	f.bucket(now).Posted++
	s.digest(0xf1, op.cookie, uint64(now))
	return true
}

// harvest reads the portal's completions (inside the node's step).
func (fp *flowPortal) harvest() {
	if fp.closed {
		return
	}
	s := fp.fr.s
	got := false
	for {
		e := fp.cpl.Peek()
		if e == nil {
			break
		}
		var c abi.Completion
		c.Decode(e)
		fp.cpl.Advance()
		fp.n.app.completions++
		got = true
		fp.complete(&c)
		if s.err != nil {
			break
		}
	}
	fp.cpl.Release()
	if fp.cpl.Corrupt() {
		s.fail("node %d flow portal %d: the core wrote an impossible completion-ring producer index", fp.n.id, fp.id)
	}
	if got && s.err == nil {
		// The executor reacts at once: the node's CC flows may issue more
		// (the local window is shared), this flow may reuse its slots.
		for _, q := range fp.n.app.flows {
			if q.f != nil && (q == fp || q.f.spec.CC) {
				q.f.pump()
			}
		}
	}
}

// complete checks and records one completion.
func (fp *flowPortal) complete(c *abi.Completion) {
	fr := fp.fr
	s := fr.s
	f := fp.f
	s.digest(0xf2, c.Cookie, uint64(c.Status), uint64(s.now))
	if f == nil {
		s.fail("node %d: completion %+v on a server portal, which posts nothing", fp.n.id, *c)
		return
	}
	k, ok := fp.slotIx[c.Slot]
	if !ok || !fp.busy[k].live || fp.busy[k].cookie != c.Cookie {
		s.fail("flow %d: completion {cookie=%#x slot=%d status=%v}: no such op outstanding", f.idx, c.Cookie, c.Slot, c.Status)
		return
	}
	op := fp.busy[k]
	e := &fp.n.ecfg
	age := s.now - op.postedAt
	issue, total := int64(c.IssueDelayNs), int64(c.TotalDelayNs)
	bound := int64(e.DispatchTimeout+e.Timeout) + 100_000
	switch c.Status {
	case abi.StatusOK, abi.StatusNack, abi.StatusTimeout, abi.StatusDispatchTimeout:
	default:
		s.fail("flow %d: op %#x (chunk %d) completed %v: only congestion outcomes are possible here", f.idx, op.cookie, op.off, c.Status)
		return
	}
	switch {
	case c.Op != abi.OpRead:
		s.fail("flow %d: op %#x completed with op %v", f.idx, op.cookie, c.Op)
	case c.Status == abi.StatusOK && c.Length != op.length:
		s.fail("flow %d: op %#x completed OK with length %d, want %d", f.idx, op.cookie, c.Length, op.length)
	case issue > total || total > age:
		s.fail("flow %d: op %#x: issue_delay %d, total_delay %d, but it was posted %dns ago", f.idx, op.cookie, issue, total, age)
	case age > bound:
		s.fail("flow %d: op %#x completed %dns after it was posted (bound %dns)", f.idx, op.cookie, age, bound)
	case c.Status == abi.StatusDispatchTimeout && total < int64(e.DispatchTimeout):
		s.fail("flow %d: op %#x: DISPATCH_TIMEOUT after %dns (DispatchTimeout %v)", f.idx, op.cookie, total, e.DispatchTimeout)
	case c.Status == abi.StatusTimeout && total-issue < int64(e.Timeout):
		s.fail("flow %d: op %#x: TIMEOUT after %dns in service (Timeout %v)", f.idx, op.cookie, total-issue, e.Timeout)
	}
	if s.err != nil {
		return
	}
	// The data: exactly the object's bytes (OK), or each byte the object's
	// or untouched (a failure after some chunks landed). Then poison the
	// area again for the slot's next op. (The object's bytes as the
	// pattern defines them, not as its memory holds them: a server that
	// changed them must be caught.)
	area := fp.sink[k*f.spec.OpBytes : (k+1)*f.spec.OpBytes]
	want := s.expect[:op.length]
	fillPatternAt(want, f.srv.pattern, op.off)
	if c.Status == abi.StatusOK {
		if !bytes.Equal(area[:op.length], want) {
			s.fail("flow %d: op %#x completed OK with wrong data", f.idx, op.cookie)
			return
		}
	} else if firstNotPoison(area) >= 0 {
		for i, b := range area[:op.length] {
			if b != want[i] && b != poison {
				s.fail("flow %d: op %#x failed %v with byte %d neither the object's nor untouched", f.idx, op.cookie, c.Status, i)
				return
			}
		}
	}
	if fr.shares != nil {
		fr.shares.completed(f, &op, c)
		if s.err != nil {
			return
		}
	}
	fill(area, poison)
	fp.busy[k] = flowOp{}
	fp.idle = append(fp.idle, k)
	f.out--
	fr.outstanding--
	fr.inflight[ccKey{f.spec.Client, f.key}]--

	b := f.bucket(s.now)
	f.st.ByStatus[c.Status]++
	switch c.Status {
	case abi.StatusOK:
		b.OK++
		b.OKBytes += uint64(op.length)
		b.IssueSumNs += issue
		b.RemoteSumNs += total - issue
		f.st.OKBytes += uint64(op.length)
		f.st.OKTimes = append(f.st.OKTimes, s.now-s.t0)
		f.st.ChunkLatNs = append(f.st.ChunkLatNs, s.now-op.firstAt)
	default:
		switch c.Status {
		case abi.StatusNack:
			b.NACK++
		case abi.StatusTimeout:
			b.Timeout++
		case abi.StatusDispatchTimeout:
			b.DT++
		}
		f.retry = append(f.retry, retryChunk{op.off, op.firstAt})
	}
	if f.ctl != nil {
		f.ctl.OnCompletion(s.now, f.key, c.Status, issue, total)
		f.cur.Cwnd, f.cur.Local, f.cur.Remote = f.ctl.Cwnd(f.key), f.ctl.Local(), f.ctl.Remote(f.key)
		b.Cwnd, b.Local, b.Remote = f.cur.Cwnd, f.cur.Local, f.cur.Remote
	}
	if fr.exp.KeepSamples {
		fr.samples = append(fr.samples, FlowSample{T: s.now - s.t0, Flow: f.idx, Status: c.Status, IssueNs: issue, TotalNs: total,
			Cwnd: f.cur.Cwnd, Local: f.cur.Local, Remote: f.cur.Remote, Inflight: f.out})
	}
}

// close closes the portal at the end (every op has completed).
func (fp *flowPortal) close() {
	s := fp.fr.s
	if fp.closed {
		return
	}
	if fp.f != nil && fp.f.out != 0 {
		s.fail("flow %d: %d ops outstanding at the end", fp.f.idx, fp.f.out)
		return
	}
	if err := fp.n.cores[0].core.ClosePortal(fp.id); err != nil {
		s.fail("node %d: ClosePortal(flow portal %d): %v", fp.n.id, fp.id, err)
		return
	}
	fp.closed = true
	if i := firstNotPoison(fp.sink); i >= 0 {
		s.fail("node %d: flow portal %d: sink byte %d written after every op completed", fp.n.id, fp.id, i)
	}
}
