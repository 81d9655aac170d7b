package engine

import (
	"cmp"
	"math"
	"time"

	"github.com/onerma/onerma/abi"
)

// Priority work and the Poll's bound on bulk work (Config.PollBytes).
//
// The frames of one Poll are sealed, sent and received together, and a
// command posted during a Poll is taken at the next one: an op waits for
// the whole of every Poll it meets, at the engine of each hop. A Poll
// that starts a window's worth of low-class 4 KB READs (a lump of window
// freed at once, a backlog of requests served up to ServeBudget) is a
// hundred or more microseconds of seals and opens, and a 64-byte op beside
// it waits for all of it. So:
//
//   - An op is priority work when it is of the high class or carries at
//     most ShortBytes; every other op is bulk. The core counts the
//     priority ops in flight at its initiator (posted, not completed) and
//     the priority requests queued at its serving side (inbound or pull
//     queues).
//   - While there are any, and for Config.PriorityHold after the latest
//     was posted or queued (so that short ops that come one after another
//     find it on, also at a serving core, which cannot see a request
//     still in its rx ring), or for Config.HighHold after the latest of
//     the high class (an application the operator gave the high class
//     finds it on after a pause of its own: the host descheduling it, its
//     work between ops), each of the stages that start bulk work starts at
//     most PollBytes of it per Poll (with the frames received before
//     it): the window granted to bulk ops (arbitrate), the READ data
//     served (serve), the WRITE data pulled (startPulls) and the WRITE
//     data sent (sendChunks: on a pull, and sendData, in pull order; a
//     priority WRITE's data passes what the bound holds). A stage's first
//     bulk item of a Poll always starts, so every queue moves in every
//     Poll and no stage's work waits for another's; the rest waits, where
//     it is, for the next Poll, which the driver runs at once (Poll
//     reports the work it did). A READ is served whole and a WRITE's data
//     sent whole: the bound is checked before each op, not each frame.
//   - A Poll that begins with the bound off takes the commands of the
//     portals that rang the summary doorbell since it began once more
//     before it serves, and arbitrates them (Core.redrain): a priority op
//     posted meanwhile is started before the Poll's bulk work, and turns
//     the bound on for it.
//   - The initiator keeps each tenant's queued short ops of a class on a
//     list of their own (slot.link[byShort]): a grant that would take a
//     bulk op with short ops of its tenant and class queued behind it
//     takes the oldest of those instead, shortBurst (8) times in a row at
//     most (initiator.shortFirst). A short op then waits for the bulk ops
//     ahead of it in its own application's queue, or its tenant's, no
//     more than for another tenant's, whose turns let it pass.
//   - The serving side does the same in its inbound queues: a short
//     request goes ahead of the bulk requests its region's owner has
//     queued, shortBurst in a row at most (fairQueue.placeShort), so a
//     64-byte READ beside a transfer from the same region is served in
//     the Poll that receives it, not behind the chunks queued there.
//   - ReceiveBurst takes the short frames of a burst first (requests,
//     answers, pulls, and data of at most ShortBytes at offset 0: a
//     priority op's whole READ data or WRITE data), publishes the
//     completions they made, and only then opens the bulk chunks
//     (dispatch.go).
//
// With no priority work in progress or seen lately the bound is off, and a
// Poll does what it did before: a bulk transfer alone pays nothing for it.
// Stats.BulkHeld counts the bulk items held back, Stats.RxSplit the
// bursts taken in two passes.

// ShortBytes is the most data a short op carries (Config.PollBytes).
const ShortBytes = 256

// The stages that start bulk work, each bounded apart.
const (
	bulkGrant = iota // arbitrate: window granted to bulk READs
	bulkServe        // serve: READ data streamed
	bulkPull         // startPulls: WRITE data pulled
	bulkData         // sendChunks: WRITE data sent
	numBulk
)

// bulkBound is a core's count of priority work and what the current Poll
// may still start of bulk work; the initiator, the serving side and the
// Core share it.
type bulkBound struct {
	limit int          // Config.PollBytes (0: no bound)
	left  [numBulk]int // bulk bytes each stage may still start in this Poll while priority work is in progress
	// ini counts the initiator's priority ops in flight (posted, not
	// completed), srv the serving side's priority requests queued.
	ini, srv int
	// seen is when the latest priority op was posted or priority request
	// queued; the bound stays on for hold after it (Config.PriorityHold).
	seen, hold int64
	// seenHigh is when the latest of them of the high class was; the
	// bound stays on for holdHigh after it (Config.HighHold).
	seenHigh, holdHigh int64
	st                 *Stats
}

// Old bulk work is never held back, so that the bound makes none of it
// TIMEOUT by its wait, whatever the load (the callers say which is old):
// a request queued at the serving side, or a WRITE's data at its
// initiator, that has waited TIMEOUT/bulkAgeDiv (since its arrival; since
// the WRITE's issue). Grants of window are not aged: the ops waiting for
// them have waited for the window, and a lump of it freed at once is what
// the bound is there to spread (a held grant goes first in the next
// Poll).
const bulkAgeDiv = 2

// DefaultPriorityHold is Config.PriorityHold's default: the executor's
// (portal.ExecutorConfig.ShortHold), for which it keeps long transfers
// capped after a short one.
const DefaultPriorityHold = 50 * time.Microsecond

// DefaultHighHold is Config.HighHold's default: the executor's longest
// hold (portal.ExecutorConfig.ShortHoldMax), longer than the pauses a
// busy application's ops leave when a host of few CPUs deschedules it.
// With PriorityHold alone, a high-class op posted after such a pause
// found the bound off, and waited for a Poll's whole window of bulk work
// (the isolation setup's tail, bench/HISTORY.md).
const DefaultHighHold = time.Millisecond

func newBulkBound(cfg *Config, st *Stats) *bulkBound {
	hold := cmp.Or(cfg.PriorityHold, DefaultPriorityHold)
	holdHigh := cmp.Or(cfg.HighHold, DefaultHighHold)
	b := &bulkBound{
		limit: cfg.PollBytes, st: st,
		hold: int64(hold), seen: math.MinInt64 / 2,
		holdHigh: int64(holdHigh), seenHigh: math.MinInt64 / 2,
	}
	b.reset()
	return b
}

// prio reports whether an op of class cl and length bytes is priority
// work.
func prio(cl abi.Class, length uint32) bool {
	return cl == abi.ClassHigh || length <= ShortBytes
}

// saw records priority work of class cl seen at now.
func (b *bulkBound) saw(now int64, cl abi.Class) {
	b.seen = now
	if cl == abi.ClassHigh {
		b.seenHigh = now
	}
}

// on reports whether the bound applies at now: PollBytes is set, and
// priority work is in progress, or was seen within hold, or work of the
// high class within holdHigh.
func (b *bulkBound) on(now int64) bool {
	return b.limit > 0 && (b.ini+b.srv > 0 || now-b.seen < b.hold || now-b.seenHigh < b.holdHigh)
}

// reset gives every stage its allowance for the next Poll.
func (b *bulkBound) reset() {
	for k := range b.left {
		b.left[k] = b.limit
	}
}

// take reports whether stage k may start work of n bytes of an op of
// class cl at now, and counts it: always when the op is priority work,
// when it is old (see bulkAgeDiv), or when the bound is off; else while
// the stage has started less than PollBytes of bulk work in this Poll.
func (b *bulkBound) take(now int64, k int, cl abi.Class, n uint32, old bool) bool {
	if prio(cl, n) || old || !b.on(now) {
		return true
	}
	if b.left[k] <= 0 {
		b.st.BulkHeld++
		return false
	}
	b.left[k] -= int(n)
	return true
}
