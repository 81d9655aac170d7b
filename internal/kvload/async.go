package kvload

import (
	"errors"
	"time"
)

// errLost is a GET still in flight when its client gave up waiting (the
// end of the drain).
var errLost = errors.New("kvload: GET never completed")

// asyncGets is an async client's GETs in flight: a slot per tag, each
// with its key and value buffers, and the free tags.
type asyncGets struct {
	c     *client
	a     AsyncStore
	slots []asyncSlot
	free  []uint64
	done  func(tag uint64, val []byte, err error) // PollGets' callback, made once
}

type asyncSlot struct {
	busy bool // posted, not reported yet
	op   Op
	at   time.Duration // sent (closed loop) or arrived (open loop)
	key  [KeyBytes]byte
	dst  []byte
}

func newAsyncGets(c *client, depth int) *asyncGets {
	g := &asyncGets{c: c, a: c.st.(AsyncStore), slots: make([]asyncSlot, depth), free: make([]uint64, 0, depth)}
	for i := range g.slots {
		g.slots[i].dst = make([]byte, 0, c.cfg.Workload.ValueBytes)
		g.free = append(g.free, uint64(depth-1-i))
	}
	g.done = g.ended
	return g
}

func (g *asyncGets) inFlight() int { return len(g.slots) - len(g.free) }

// start posts a GET of op that arrived or was sent at at: false (and
// nothing posted) when the store is busy. Any other refusal counts as the
// GET's failure.
func (g *asyncGets) start(op Op, at time.Duration) bool {
	tag := g.free[len(g.free)-1]
	s := &g.slots[tag]
	s.op, s.at = op, at
	err := g.a.StartGet(Key(s.key[:], op.Key), s.dst[:0], tag)
	switch {
	case err == nil:
		s.busy = true
		g.free = g.free[:len(g.free)-1]
	case errors.Is(err, ErrBusy):
		return false
	default:
		g.c.account(op, err, at, g.c.clk.now())
	}
	return true
}

// ended is PollGets' callback: it checks the value, accounts the GET and
// frees its slot.
func (g *asyncGets) ended(tag uint64, val []byte, err error) {
	s := &g.slots[tag]
	s.busy = false
	if err == nil {
		if !checkValue(val, s.op.Key, g.c.cfg.Workload.ValueBytes) {
			err = errBadValue
		} else {
			s.dst = val[:0]
		}
	}
	g.c.account(s.op, err, s.at, g.c.clk.now())
	g.free = append(g.free, tag)
}

// abandon counts the GETs still in flight as failed; the client is done
// with the store.
func (g *asyncGets) abandon() {
	for tag := range g.slots {
		if s := &g.slots[tag]; s.busy {
			s.busy = false
			g.c.account(s.op, errLost, s.at, g.c.clk.now())
			g.free = append(g.free, uint64(tag))
		}
	}
}

// closedAsync is a closed-loop client of an AsyncStore keeping depth GETs
// in flight; a SET is run synchronously between them. A GET the store
// refuses as busy is dropped and another drawn later: the operations are
// independent draws, so that biases nothing.
func (c *client) closedAsync(depth int) {
	g := newAsyncGets(c, depth)
	for {
		now := c.clk.now()
		if now >= c.clk.end && g.inFlight() == 0 {
			return
		}
		if now >= c.clk.drainEnd {
			g.abandon()
			return
		}
		for now < c.clk.end && len(g.free) > 0 {
			op := c.src.next()
			if op.Set {
				err := c.do(op)
				c.account(op, err, now, c.clk.now())
			} else if !g.start(op, now) {
				break
			}
			now = c.clk.now()
		}
		g.a.PollGets(g.done)
	}
}

// openAsync is an open-loop client of an AsyncStore: it sends each
// arrival it takes as soon as its time has come and fewer than depth GETs
// are in flight, polls while any are, and sleeps until the next arrival
// when none is.
func (c *client) openAsync(arr *arrivals, depth int) {
	g := newAsyncGets(c, depth)
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
			op := c.src.next()
			sent := true
			if op.Set {
				err := c.do(op)
				c.account(op, err, at, c.clk.now())
			} else {
				sent = g.start(op, at)
			}
			if sent {
				if at >= c.clk.warm {
					record(c.res.Lag, now-at)
				}
				pending = false
				continue
			}
		}
		if g.inFlight() > 0 {
			g.a.PollGets(g.done)
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
