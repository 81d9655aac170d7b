// Package stage is the cost accounting of a poll loop: which stage of the
// data path a core's cycles went to (rmad -selftest -profile). A Stages
// accumulator is owned by one loop goroutine; the code of that loop marks
// the boundaries between stages (Mark, Enter), and each mark charges the
// cycles since the previous one, read from a counter the loop's driver
// injects, to the stage that just ended. A span measured apart inside a
// section (the parts of one cgo crossing, stamped in C) is charged to its
// own stage and taken off that section (Charge). So every cycle between
// the first mark and the last is charged to exactly one stage, and a
// report divides them by the ops completed meanwhile (Report).
//
// The engine never reads a clock: the counter is a function its driver
// supplies (rmad: internal/tsc.Read, the CPU's time-stamp counter; tests:
// a fake that advances as they script). A core, a runner and a port given
// no Stages (nil, the default, and always in the simulator) pay one
// predictable nil check per boundary, per burst or per Poll phase, never
// per op on rmad's data path.
//
// # The stages
//
// Where the code of two stages interleaves inside one function, the mark
// sits at the closest burst-level boundary; what lands where is listed
// here and is the contract the marks keep (engine/stages_test.go scripts
// it).
//
//   - Receive (receive and parse): the port's Recv that returned frames
//     (its cgo crossing, less the parts charged to Seal and Transmit
//     below: entering and leaving C, freeing the previous rx burst, the rx
//     burst, and on an engine of several cores the frames handed in and
//     the steering), then for each frame of the burst Core.prepare
//     (EtherType, decode, checks, the lookups of its slot, pull or
//     region, its AEAD and K_d) and the queueing of its open; ARP and
//     ICMP frames, which answer at once, are received here whole.
//   - Open: the burst's open batch (one cgo call with ipsec-mb); with
//     crypto/cipher, and for the frames of the self-loop, each frame's
//     open.
//   - Protocol (protocol state): finish of every opened frame (complete
//     an op and write its completion, or hand it to an op source; queue
//     a request, check replay windows, accept a pull, commit a WRITE,
//     refund the window; frames that finish sends at once, such as a
//     pull's WRITE data, are built here too), then in Poll the region
//     table's quiescent point, the commands taken from portal rings that
//     had some, the op source's Poll (rmad -selftest posts there, its
//     checks apart: Check) and the expiry of pulls and timers.
//   - Build: Poll's arbitration of the window and the request frames it
//     grants, serving READs (response frames), starting pulls, WRITE data
//     waiting for tx buffers, and the self-loop's frames between them
//     (those are charged per frame to Receive, Open and Protocol); with
//     ipsec-mb a seal is only queued here.
//   - Seal: the seal batch's runs. With ipsec-mb on the DPDK port the
//     batch runs inside the port's crossing that sends its frames (a C
//     pre-transmit hook: engine.TxCHook), usually the next iteration's
//     Recv: the crossing's C side stamps the hook's span (dpdk
//     PortIO.SetStamps) and the port charges it, with the settling of
//     the run in Go, to Seal (Charge), out of the section the crossing
//     runs in. The batch runs the core makes itself (a full batch, a
//     region's removal; with a Tx that has no C hook, the end of Poll and
//     the Tx's Go hook) are sections of their own. With crypto/cipher, and
//     for the frames of the self-loop (sealed at once), each seal.
//   - Transmit: the frames' way out. With a port flushed every iteration
//     (memport), from the end of Poll through its Flush. With the DPDK
//     port, which sends an iteration's frames in the next iteration's Recv
//     (runner.SendsOnRecv), the parts of that crossing that send (the
//     frames handed to other cores, the tx burst, refilling the stash of
//     tx buffers), charged out of the rx poll's section as Seal is; and
//     the crossings that only transmit, each a section: a full tx burst
//     sent from within Poll when the core asks for another buffer, and the
//     Flush the loop makes before it runs closures, sleeps, yields or
//     stops.
//   - Completion: publishing the completions of portals that have new
//     ones (the producer index, doorbells) and flushing the telemetry
//     batch, at the end of Poll (and between the two passes of a burst
//     taken short frames first: engine.Config.PollBytes); a completion's
//     entry is written in Protocol.
//   - Check: an op source's check of the data its ops moved (rmad
//     -selftest verifies every op's bytes, in a batch at the top of its
//     Poll): the selftest's cost, not the engine's, never budgeted.
//
// The per-iteration overhead, what the loop costs whatever it carries:
//
//   - Clock: from Flush's return (the end of Poll, with a port that sends
//     on Recv) to the next rx poll: the loop's clock read, once per
//     iteration, and the few checks around it at the top of the loop (a
//     control-plane closure pending, a stop, a stall, the loop's
//     counters).
//   - EmptyRx: an rx poll that returned no frame (a cgo crossing each,
//     less what it sent: Seal and Transmit).
//   - EmptyPoll: the rest of an iteration whose rx poll returned no frame
//     and whose Poll found nothing to do (its marks are charged
//     provisionally, and moved here when it ends so: Provisional,
//     Settle): the cost of looking at the rings, timers, queues and
//     arbiters with nothing there. An iteration that did something keeps
//     its stages.
//   - EmptyRings: a Poll's pass over portal command rings that found no
//     command in any of them.
//   - Loop: the control-plane closures the loop runs between iterations
//     (runner.Exec), and whatever runs before the first mark.
//   - Idle: sleeping or yielding in an idle loop (Backoff, Yield): no
//     cost of an op, never budgeted.
//
// Counts: each mark, and each span charged apart (Charge), also counts a
// section of the stage it charges, so a report has beside the cycles, per
// op, the clock reads (Clock), the empty polls (EmptyRx, EmptyRings), the
// crossings that transmit (Transmit), and the open and seal batches (Open,
// Seal).
//
// The marks cost a counter read each (RDTSC: a few dozen cycles), about
// eight per loop iteration that carries frames, a few more for the spans
// charged apart (Charge reads the counter; the DPDK port's crossing reads
// it at each of its phase boundaries, in C), and none per op on rmad's
// data path (ipsec-mb, frames out of the port): the iteration's ops share
// them. They are the profiler's own: they read the injected counter, never
// the loop's clock, so the loop's invariants (engine/runner: one clock
// read per iteration, at most two crossings into C, no allocation per op)
// hold with stages as without; a loop given no Stages reads no counter at
// all, and the DPDK port's crossing then pays one branch for its stamps.
package stage

// Stage is one stage of the data path (see the package documentation).
type Stage uint8

// The stages, in the order of an op's way through a core, then the
// per-iteration overhead.
const (
	Receive Stage = iota
	Open
	Protocol
	Build
	Seal
	Transmit
	Completion
	Check
	Clock
	EmptyRx
	EmptyPoll
	EmptyRings
	Loop
	Idle
	NumStages
)

var names = [NumStages]string{"receive", "open", "protocol", "build", "seal", "transmit", "completion", "check",
	"clock", "empty_rx", "empty_poll", "empty_rings", "loop", "idle"}

// String is the stage's name in a report ("receive", "empty_rx", ...).
func (s Stage) String() string {
	if s < NumStages {
		return names[s]
	}
	return "stage?"
}

// Overhead reports whether s is part of the per-iteration overhead.
func (s Stage) Overhead() bool { return s >= Clock }

// Counter reads a monotonic cycle counter (rmad: the CPU's time-stamp
// counter, internal/tsc.Read).
type Counter func() uint64

// Stages accumulates one loop's cycles by stage. One goroutine (the
// loop's) uses it; others read it only through Snapshot on that
// goroutine (runner.Exec) or once the loop has stopped.
type Stages struct {
	read Counter
	last uint64 // the counter at the previous mark
	cur  Stage  // the stage running since then
	// acc is where marks charge: &main, or &prov between Provisional and
	// Settle.
	acc        *[NumStages]acc
	main, prov [NumStages]acc
	// frames counts received frames (the runner adds each rx burst's).
	frames uint64
}

// acc is one stage's cycles and sections, side by side: a mark touches
// one cache line of them.
type acc struct {
	cycles, n uint64
}

// New returns an accumulator reading read, its current stage Loop.
func New(read Counter) *Stages {
	s := &Stages{read: read, cur: Loop}
	s.acc = &s.main
	s.last = read()
	return s
}

// Reset forgets everything counted and starts again now, in Loop.
func (s *Stages) Reset() {
	s.main, s.prov, s.frames, s.cur = [NumStages]acc{}, [NumStages]acc{}, 0, Loop
	s.acc = &s.main
	s.last = s.read()
}

// Provisional charges the marks from now on provisionally, until Settle
// says where they go.
func (s *Stages) Provisional() { s.acc = &s.prov }

// Settle ends Provisional: with idle, every cycle and section charged
// since goes to to (the iteration turned out to do nothing: EmptyPoll),
// otherwise to the stages they were charged to. The section running now
// is not touched: it is charged when it ends, as usual.
func (s *Stages) Settle(idle bool, to Stage) {
	if s.acc != &s.prov {
		return
	}
	s.acc = &s.main
	for i := range s.prov {
		p := &s.prov[i]
		if p.n == 0 && p.cycles == 0 {
			continue
		}
		d := &s.main[i]
		if idle {
			d = &s.main[to]
		}
		d.cycles += p.cycles
		d.n += p.n
		*p = acc{}
	}
}

// Mark ends the section running since the previous mark, charging its
// cycles to done (whatever stage was entered: a section is charged to
// what it turned out to be, an rx poll that found nothing to EmptyRx),
// and starts a section of next.
func (s *Stages) Mark(done, next Stage) {
	t := s.read()
	a := &s.acc[done]
	a.cycles += t - s.last
	a.n++
	s.last, s.cur = t, next
}

// Enter ends the section running now, charging it to the stage it was
// entered as, starts a section of next, and returns the stage it ended,
// for a nested section to return to (Enter(prev)).
func (s *Stages) Enter(next Stage) Stage {
	prev := s.cur
	s.Mark(prev, next)
	return prev
}

// Charge charges to st, as one section of it, cycles spent inside the
// section running now that the caller measured apart (on a counter that
// counts as this one does: the CPU's time-stamp counter a C library reads
// at the phase boundaries of a crossing, say), and with then non-nil the
// cycles then runs for, measured here, without ending the running
// section: it goes on, and is charged that much less when it ends. So one
// span between two marks (a cgo crossing that seals, transmits and
// receives) is split between stages and charged once. Charge reads the
// counter and never charges more than the running section has run so far:
// the stages add up to the time marked whatever the measure says. then
// must not mark on s.
func (s *Stages) Charge(st Stage, cycles uint64, then func()) {
	var t uint64
	if then != nil {
		t0 := s.read()
		then()
		t = s.read()
		cycles += t - t0
	} else {
		t = s.read()
	}
	if run := t - s.last; cycles > run {
		cycles = run
	}
	a := &s.acc[st]
	a.cycles += cycles
	a.n++
	s.last += cycles
}

// Become charges the section running now, when it ends, to st instead
// of the stage it was entered as, without reading the counter: for a
// section that turns out to be of another stage than the one entered
// (a pass over rings entered as EmptyRings that found work).
func (s *Stages) Become(st Stage) { s.cur = st }

// Current is the stage of the section running now.
func (s *Stages) Current() Stage { return s.cur }

// Frames counts n received frames.
func (s *Stages) Frames(n int) { s.frames += uint64(n) }

// Snapshot is what a Stages counted up to one instant.
type Snapshot struct {
	// Now is the loop's time (ns) the caller gave; At the counter.
	Now int64  `json:"now"`
	At  uint64 `json:"at"`
	// Cycles and Sections by stage; Frames received.
	Cycles   [NumStages]uint64 `json:"cycles"`
	Sections [NumStages]uint64 `json:"sections"`
	Frames   uint64            `json:"frames"`
}

// Snapshot charges the section running now to its stage so far (it goes
// on: it is counted as a section when it ends) and returns the totals,
// stamped with now, the loop's time. Cycles charged provisionally are
// not in them yet: in a provisional iteration they are missing from a
// snapshot's stages (a window's unattributed row has them).
func (s *Stages) Snapshot(now int64) Snapshot {
	t := s.read()
	s.acc[s.cur].cycles += t - s.last
	s.last = t
	sn := Snapshot{Now: now, At: t, Frames: s.frames}
	for i := range s.main {
		sn.Cycles[i], sn.Sections[i] = s.main[i].cycles, s.main[i].n
	}
	return sn
}

// Sub is what was counted between b and a (a taken after b).
func (a Snapshot) Sub(b Snapshot) Snapshot {
	d := Snapshot{Now: a.Now - b.Now, At: a.At - b.At, Frames: a.Frames - b.Frames}
	for i := range d.Cycles {
		d.Cycles[i] = a.Cycles[i] - b.Cycles[i]
		d.Sections[i] = a.Sections[i] - b.Sections[i]
	}
	return d
}

// Add adds the deltas o (of another core, say) to a: the times and
// counter spans add up, as core time does.
func (a *Snapshot) Add(o Snapshot) {
	a.Now += o.Now
	a.At += o.At
	a.Frames += o.Frames
	for i := range a.Cycles {
		a.Cycles[i] += o.Cycles[i]
		a.Sections[i] += o.Sections[i]
	}
}

// Total is the cycles charged to every stage.
func (a *Snapshot) Total() uint64 {
	var t uint64
	for _, c := range a.Cycles {
		t += c
	}
	return t
}
