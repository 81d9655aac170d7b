package opgen

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/stage"
)

// opSource is a SelfTest's part on one core, the engine.OpSource attached
// to it: it stands in the core's portal table as an entry with no rings,
// posts its ops straight into the initiator from the core's Poll
// (engine.SourcePort.Post), as the core does an application's commands,
// and takes their completions as the core makes them (Completed). It
// checks the data of the ops that completed OK in a batch at the top of
// its next Poll, before it posts again on their slots (a stage of its
// own with cost accounting: stage.Check, the selftest's cost, not the
// engine's). Like an application it holds slots and a local region of
// its own, which is each slot's READ sink and WRITE source (4 KB apiece:
// slot k's at k*MaxOpBytes), and behind them the sinks of the read-back.
//
// Slot k's op carries cookie k. A completed slot waits on ready until the
// next Poll posts its next op: an op is never posted from inside a
// completion (the initiator may be walking one of its lists).
//
// Nothing here allocates, locks or makes a system call once attached; the
// one atomic the data path touches is the SelfTest's start flag, loaded
// until the source has started, and the source's done word, stored once.
type opSource struct {
	t     *SelfTest
	core  int
	port  *engine.SourcePort // its entry on the core
	state srcState
	// The op posted next, filled in place: the fields every op shares are
	// set once (attach), a post sets the slot's.
	cmd   abi.Command
	slots []abi.SlotID
	local []byte // the local region: sources or sinks, then read-back sinks
	// remOff is slot k's op's offset in the target region; area, where it
	// starts: a READ alternates between area and area+64 (consecutive
	// READs of a slot differ in every byte: internal/pattern), a WRITE
	// always writes its own area.
	remOff, area []uint64
	lastOK       []bool   // WRITE: slot k's last op completed OK (read back at the end)
	ready        slotFIFO // slots whose last op completed, waiting for the next Poll
	// unchecked holds the slots whose op completed OK, their data not
	// checked yet (the next Poll checks them); inWin and delay are each
	// one's completion: in the measured window, and its total delay.
	unchecked slotFIFO
	inWin     []bool
	delay     []uint32
	inflight  int
	stamp     uint64 // WRITE: the next op's stamp (core in the top byte)

	start, end int64 // the measured window, from the first Poll after Start
	res        CoreResult
	fail       failure

	// stg is the core's cost accounting (Config.Stages; nil: none),
	// snapshot at the first Poll of the window (stgStart, stgOn) and at
	// the first after it (stgEnd, stgDone).
	stg              *stage.Stages
	stgStart, stgEnd stage.Snapshot
	stgOn, stgDone   bool
}

type srcState uint8

const (
	srcIdle     srcState = iota // posts nothing (not an initiating core); done
	srcWaiting                  // attached, waiting for SelfTest.Start
	srcRunning                  // posting: warm-up, then the measured window
	srcDraining                 // posting no more: waiting for the ops in flight
	srcReadBack                 // reading back what the last WRITE of each slot wrote
	srcDone
)

// failure is the first op that failed or did not verify, kept as numbers
// on the data path and described by SelfTest.Result.
type failure struct {
	kind   failKind
	op     abi.Op
	status abi.Status
	slot   int
	off    uint64 // the op's offset in the target region
	at     int    // the first byte that differed, within the op
	got    byte
	want   byte
}

type failKind uint8

const (
	failNone     failKind = iota
	failStatus            // completed with a status other than OK
	failRead              // a READ's data is not the region's
	failWrite             // the region does not hold what a WRITE wrote (checked at the target)
	failReadBack          // reading back a WRITE's range did not give what it wrote
)

var _ engine.OpSource = (*opSource)(nil)

// Poll posts the ops of the slots whose last op completed and moves the
// source through its phases; it returns the ops posted.
func (s *opSource) Poll(now int64) int {
	if s.unchecked.n > 0 {
		s.checkAll()
	}
	switch s.state {
	case srcIdle, srcDone:
		return 0
	case srcWaiting:
		if !s.t.run.Load() {
			return 0
		}
		s.state = srcRunning
		s.start = now + int64(s.t.cfg.Warmup)
		s.end = s.start + int64(s.t.cfg.Duration)
		for k := range s.slots {
			s.post(now, int32(k))
		}
		return len(s.slots)
	case srcRunning:
		if s.stg != nil {
			s.stages(now)
		}
		if now >= s.end {
			s.state = srcDraining
		}
	}
	n := 0
	if s.state == srcRunning {
		// Only those ready now: an op that fails at once is ready again,
		// and waits for the next Poll.
		for k := s.ready.n; k > 0; k-- {
			s.post(now, s.ready.pop())
			n++
		}
		return n
	}
	if s.inflight > 0 {
		return 0
	}
	if s.state == srcDraining && s.t.readBack && s.res.Mismatches == 0 {
		s.state = srcReadBack
		s.cmd.Op, s.cmd.Key = abi.OpRead, s.t.readKey
		for k := range s.slots {
			if s.lastOK[k] {
				s.cmd.Slot, s.cmd.Cookie = s.slots[k], uint64(k)
				s.cmd.RemoteOffset, s.cmd.LocalOffset = s.area[k], s.readBackOff(k)
				s.submit(now)
				n++
			}
		}
		if n > 0 {
			return n
		}
	}
	s.state = srcDone
	s.t.done[s.core].v.Store(true) // the results are the reader's from here (SelfTest.Done)
	return 1
}

// stages snapshots the core's Stages when the measured window opens and
// when it closes.
func (s *opSource) stages(now int64) {
	switch {
	case !s.stgOn && now >= s.start:
		s.stgStart, s.stgOn = s.stg.Snapshot(now), true
	case s.stgOn && !s.stgDone && now >= s.end:
		s.stgEnd, s.stgDone = s.stg.Snapshot(now), true
	}
}

// post posts slot k's next op.
func (s *opSource) post(now int64, k int32) {
	c := &s.cmd
	c.Slot, c.Cookie = s.slots[k], uint64(k)
	if c.Op == abi.OpRead {
		s.remOff[k] = 2*s.area[k] + 64 - s.remOff[k] // area, area+64, area, ...
	} else {
		s.stampSource(int(k))
	}
	c.RemoteOffset, c.LocalOffset = s.remOff[k], uint64(k)*abi.MaxOpBytes
	s.submit(now)
}

// submit hands the command built in s.cmd to the initiator, as the core
// hands an application's (which may complete it at once).
func (s *opSource) submit(now int64) {
	s.res.Posted++
	s.inflight++
	s.port.Post(now, &s.cmd)
}

// stampSource writes a new stamp into every 64-byte unit of slot k's
// source, so that each WRITE carries bytes its slot's area has never
// held: a WRITE that did not land, or landed in part, shows.
func (s *opSource) stampSource(k int) {
	src := s.local[k*abi.MaxOpBytes : k*abi.MaxOpBytes+s.t.cfg.Size]
	s.stamp++
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], s.stamp)
	for u := 0; u < len(src); u += 64 {
		copy(src[u:], b[:])
	}
}

func (s *opSource) readBackOff(k int) uint64 { return uint64(len(s.slots)+k) * abi.MaxOpBytes }

// Completed takes the completion of one of the source's ops (from the
// core's portal table): it counts it, checks its data and makes its slot
// ready for the next op.
func (s *opSource) Completed(now int64, cpl abi.Completion) {
	k := int(cpl.Cookie)
	s.inflight--
	if s.state == srcReadBack {
		s.readBackDone(k, cpl.Status)
		return
	}
	if cpl.Status != abi.StatusOK {
		s.res.Errors++
		if s.res.FirstStatus == abi.StatusOK {
			s.res.FirstStatus = cpl.Status
		}
		s.lastOK[k] = false
		s.record(failure{kind: failStatus, op: cpl.Op, status: cpl.Status, slot: k, off: s.remOff[k]})
	} else {
		s.inWin[k], s.delay[k] = now >= s.start && now < s.end, cpl.TotalDelayNs
		s.unchecked.push(int32(k)) // room for every slot
		return
	}
	if s.state == srcRunning {
		s.ready.push(int32(k)) // room for every slot
	}
}

// checkAll checks the data of the ops that completed OK since the last
// Poll, counts those in the measured window, and makes their slots ready
// for the next op; with cost accounting, as stage Check.
func (s *opSource) checkAll() {
	var prev stage.Stage
	if s.stg != nil {
		prev = s.stg.Enter(stage.Check)
	}
	for j := s.unchecked.n; j > 0; j-- {
		k := int(s.unchecked.pop())
		if !s.check(k) {
			continue
		}
		if s.inWin[k] {
			s.res.Ops++
			s.res.Latency.Add(uint64(s.delay[k]))
		}
		if s.state == srcRunning {
			s.ready.push(int32(k))
		}
	}
	if s.stg != nil {
		s.stg.Enter(prev)
	}
}

// check verifies slot k's op that completed OK: a READ's sink against the
// bytes the target region holds, a WRITE at the target when it is this
// engine's; a WRITE to a peer is read back at the end.
func (s *opSource) check(k int) bool {
	size := uint64(s.t.cfg.Size)
	own := s.local[k*abi.MaxOpBytes:][:size] // the READ's sink, the WRITE's source
	off := s.remOff[k]
	var got, want []byte
	kind := failRead
	switch {
	case s.cmd.Op == abi.OpRead:
		got, want = own, s.t.expect[off:][:size]
	case s.t.target != nil:
		got, want, kind = s.t.target[off:][:size], own, failWrite
	default: // acknowledged after its commit; the slot's last one is read back
		s.lastOK[k] = true
		s.res.Verified++
		return true
	}
	if bytes.Equal(got, want) {
		s.res.Verified++
		return true
	}
	s.res.Mismatches++
	s.failed(mismatch(kind, s.cmd.Op, k, off, got, want))
	return false
}

// readBackDone checks the read-back of slot k against its source, which
// holds what the slot's last WRITE wrote.
func (s *opSource) readBackDone(k int, st abi.Status) {
	if st != abi.StatusOK {
		s.res.Errors++
		if s.res.FirstStatus == abi.StatusOK {
			s.res.FirstStatus = st
		}
		s.record(failure{kind: failStatus, op: abi.OpRead, status: st, slot: k, off: s.area[k]})
		return
	}
	size := s.t.cfg.Size
	got := s.local[s.readBackOff(k):][:size]
	want := s.local[k*abi.MaxOpBytes:][:size]
	if bytes.Equal(got, want) {
		s.res.Verified++
		s.res.ReadBacks++
		return
	}
	s.res.Mismatches++
	s.failed(mismatch(failReadBack, abi.OpWrite, k, s.area[k], got, want))
}

// mismatch describes the first byte where got and want differ.
func mismatch(kind failKind, op abi.Op, slot int, off uint64, got, want []byte) failure {
	f := failure{kind: kind, op: op, slot: slot, off: off}
	for i := range got {
		if got[i] != want[i] {
			f.at, f.got, f.want = i, got[i], want[i]
			break
		}
	}
	return f
}

// record keeps the first failure of the run. An op that failed with a
// status is counted and its slot goes on (a TIMEOUT under a stalled host,
// say, is an error of the run, which keeps measuring, as perftest does).
func (s *opSource) record(f failure) {
	if s.fail.kind == failNone {
		s.fail = f
	}
}

// failed records a failure of the data and stops posting: the engine
// delivered wrong bytes, there is nothing more to measure; the ops in
// flight are waited for.
func (s *opSource) failed(f failure) {
	s.record(f)
	if s.state == srcRunning {
		s.state = srcDraining
	}
}

// doneWord is a source's completion flag, alone on its cache line: each
// core stores its own once.
type doneWord struct {
	v atomic.Bool
	_ [63]byte
}

// slotFIFO is a fixed-capacity FIFO of slot indices, allocated once
// (attach): room for every slot of the source.
type slotFIFO struct {
	buf     []int32
	head, n int
}

func newSlotFIFO(capacity int) slotFIFO { return slotFIFO{buf: make([]int32, capacity)} }

// push appends k; the FIFO must not be full.
func (f *slotFIFO) push(k int32) {
	i := f.head + f.n
	if i >= len(f.buf) {
		i -= len(f.buf)
	}
	f.buf[i] = k
	f.n++
}

// pop removes and returns the oldest entry; the FIFO must not be empty.
func (f *slotFIFO) pop() int32 {
	k := f.buf[f.head]
	f.head++
	if f.head == len(f.buf) {
		f.head = 0
	}
	f.n--
	return k
}
