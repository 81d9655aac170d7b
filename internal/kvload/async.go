package kvload

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// errLost is an operation still in flight when its client gave up
// waiting (the end of the drain).
var errLost = errors.New("kvload: operation never completed")

// asyncOps is an async client's operations in flight, GETs and SETs: a
// slot per tag, each with its key and value buffers, and the free tags.
// A SET holds a slot as a GET does, so depth bounds both together, as
// depth connections would.
type asyncOps struct {
	c     *client
	a     AsyncStore
	slots []asyncSlot
	free  []uint64
	w     Waiter                                  // a.(Waiter), or nil
	done  func(tag uint64, val []byte, err error) // Poll's callback, made once
	// held is the operation the store last refused as busy, started
	// before any new draw so the mix stays the workload's.
	held    Op
	holding bool
}

type asyncSlot struct {
	busy bool // posted, not reported yet
	op   Op
	at   time.Duration // sent (closed loop) or arrived (open loop)
	key  [KeyBytes]byte
	dst  []byte
}

func newAsyncOps(c *client, depth int) *asyncOps {
	g := &asyncOps{c: c, a: c.st.(AsyncStore), slots: make([]asyncSlot, depth), free: make([]uint64, 0, depth)}
	for i := range g.slots {
		g.slots[i].dst = make([]byte, 0, c.cfg.Workload.ValueBytes)
		g.free = append(g.free, uint64(depth-1-i))
	}
	g.w, _ = c.st.(Waiter)
	g.done = g.ended
	return g
}

// spin reports what ended, without blocking; when nothing had, it gives
// the CPU to any other thread ready to run on it (sched_yield): an
// engine polling the same CPU, in yield mode, does the same when idle, so
// the two take turns where a spinning client would hold the CPU until
// the scheduler takes it away (milliseconds).
func (g *asyncOps) spin() {
	if g.a.Poll(g.done) == 0 {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// wait reports what ended: with a Waiter, after waiting for at least one
// operation when none has ended yet; else at once (Poll).
func (g *asyncOps) wait() {
	if g.w != nil {
		g.w.Wait(g.done)
		return
	}
	g.a.Poll(g.done)
}

func (g *asyncOps) inFlight() int { return len(g.slots) - len(g.free) }

// start posts the next operation (the one held, or a new draw), which
// arrived or was sent at at: false (and nothing posted, the operation
// held) when the store is busy. Any other refusal counts as the
// operation's failure.
func (g *asyncOps) start(at time.Duration) bool {
	op := g.held
	if !g.holding {
		op = g.c.src.next()
	}
	tag := g.free[len(g.free)-1]
	s := &g.slots[tag]
	s.op, s.at = op, at
	var err error
	if op.Set {
		err = g.a.StartSet(Key(s.key[:], op.Key), Value(g.c.val, op.Key, g.c.cfg.Workload.ValueBytes), tag)
	} else {
		err = g.a.StartGet(Key(s.key[:], op.Key), s.dst[:0], tag)
	}
	g.holding = false
	switch {
	case err == nil:
		s.busy = true
		g.free = g.free[:len(g.free)-1]
	case errors.Is(err, ErrBusy):
		g.held, g.holding = op, true
		return false
	default:
		g.c.account(op, err, at, g.c.clk.now())
	}
	return true
}

// ended is Poll's callback: it checks a GET's value, accounts the
// operation and frees its slot.
func (g *asyncOps) ended(tag uint64, val []byte, err error) {
	s := &g.slots[tag]
	s.busy = false
	if err == nil && !s.op.Set {
		if !checkValue(val, s.op.Key, g.c.cfg.Workload.ValueBytes) {
			err = errBadValue
		} else {
			s.dst = val[:0]
		}
	}
	g.c.account(s.op, err, s.at, g.c.clk.now())
	g.free = append(g.free, tag)
}

// abandon counts the operations still in flight as failed; the client is
// done with the store.
func (g *asyncOps) abandon() {
	for tag := range g.slots {
		if s := &g.slots[tag]; s.busy {
			s.busy = false
			g.c.account(s.op, errLost, s.at, g.c.clk.now())
			g.free = append(g.free, uint64(tag))
		}
	}
}

// closedAsync is a closed-loop client of an AsyncStore keeping depth
// operations in flight (fewer while the store refuses one as busy: it is
// started again after the next poll).
func (c *client) closedAsync(depth int) {
	g := newAsyncOps(c, depth)
	for {
		now := c.clk.now()
		if now >= c.clk.end && g.inFlight() == 0 {
			return
		}
		if now >= c.clk.drainEnd {
			g.abandon()
			return
		}
		sent := 0
		for now < c.clk.end && len(g.free) > 0 {
			if !g.start(now) {
				break
			}
			sent++
			now = c.clk.now()
		}
		if sent > 0 {
			g.a.Poll(g.done)
		} else {
			g.wait()
		}
	}
}

// waitAhead is how far off the next arrival must be for an open-loop
// client with operations in flight to wait for one of them to end rather
// than spin (about a GET's latency on a loopback engine).
const waitAhead = 50 * time.Microsecond

// openAsync is an open-loop client of an AsyncStore: it sends each
// arrival it takes as soon as its time has come and fewer than depth
// operations are in flight, polls while any are, and sleeps until the next arrival
// when none is.
func (c *client) openAsync(arr *arrivals, depth int) {
	g := newAsyncOps(c, depth)
	var (
		at      time.Duration
		pending bool // at is an arrival not sent yet
		more    = true
	)
	for {
		if !pending && more {
			at, more = arr.claim()
			pending = more
		}
		if !pending && g.inFlight() == 0 {
			return
		}
		now := c.clk.now()
		if now >= c.clk.drainEnd {
			for ; pending; at, pending = arr.claim() {
				if at >= c.clk.warm {
					c.res.Unserved++
				}
			}
			g.abandon()
			return
		}
		if pending && at <= now && len(g.free) > 0 {
			if g.start(at) {
				if at >= c.clk.warm {
					record(c.res.Lag, now-at)
				}
				pending = false
				continue
			}
		}
		if g.inFlight() > 0 {
			// Wait for a completion (a Waiter sleeps on it) only when the
			// next arrival is not due soon; one that falls due meanwhile
			// is sent late, and charged for it (latency from arrival).
			if !pending || at-now > waitAhead {
				g.wait()
			} else {
				g.spin()
			}
			continue
		}
		if err := c.pace.until(c.clk.t0, at); err != nil {
			// The timer failed: count the arrival failed and go on
			// (the next wait spins if the timer fails again).
			c.account(Op{}, err, at, c.clk.now())
			pending = false
		}
	}
}
