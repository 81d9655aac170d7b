package kv

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/portal"
)

// SETs and DELETEs (updates) go to every replica of their key over the
// update RPC, pipelined: the client's goroutine writes each request on
// the replica's connection (a pipe) and goes on; the pipe's goroutine
// reads the replies, which come in the order of the requests, and hands
// each one back through the client's reply channel. An update ends when
// every replica it was sent to has answered or failed it; Set and Delete
// wait for their own, StartSet and StartDelete leave it to PollUpdates.
//
//	client goroutine                       pipe goroutine (one per connection)
//	  write request, flush ── TLS ──► server ── reply ──► read (in order)
//	  sent ◄── (update, replica, deadline) ─────────────── take the next
//	  replies ◄─────────────── (update, replica, error) ── hand it back
//
// Every request sent gets exactly one reply on the channel: its own, a
// read error, or, once the connection has failed, that failure (the pipe
// fails what is queued without reading). The channels are sized so that
// neither side ever waits for the other: sent holds at most MaxUpdates
// requests, replies at most MaxUpdates × MaxReplicas.

// updateOp is a SET or DELETE in flight: one request per replica of its
// key.
type updateOp struct {
	busy     bool
	sync     bool // Set or Delete: not reported through PollUpdates
	done     bool
	n        uint8 // replicas asked
	due      uint8 // replies still to come
	applied  uint8
	notFound uint8
	reps     [MaxReplicas]uint8
	errs     [MaxReplicas]error
	tag      uint64
	err      error // the result, once done
}

// updateReply is the answer of replica k (of its key's replicas) to
// update op.
type updateReply struct {
	op  int32
	k   uint8
	err error
}

// sentUpdate is a request a pipe's goroutine waits for the reply of.
type sentUpdate struct {
	op       int32
	k        uint8
	deadline time.Time
}

// pipe is a replica's update connection.
type pipe struct {
	rc     *rpcConn
	sent   chan sentUpdate // requests written, not answered yet, in order
	broken atomic.Bool     // the goroutine saw the connection fail
	// owed counts the requests written whose reply the goroutine has not
	// read yet: the client goroutine's increment before it queues one
	// in sent pairs with read's decrement after the reply, so at 0 the
	// goroutine is not reading rc and pipe() may (rpcConn.alive).
	owed atomic.Int32
}

// read is the pipe's goroutine: it reads the reply of each request in
// sent and hands it to out, until sent is closed.
func (p *pipe) read(out chan<- updateReply) {
	var failed error
	for s := range p.sent {
		err := failed
		if err == nil {
			p.rc.c.SetReadDeadline(s.deadline)
			_, err = p.rc.reply()
			if err != nil && !isRefusal(err) {
				failed = err
				p.broken.Store(true)
				p.rc.close()
			}
		}
		p.owed.Add(-1)
		out <- updateReply{op: s.op, k: s.k, err: err}
	}
}

func isRefusal(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// allocateUpdates makes the update pool and the reply channel.
func (c *Client) allocateUpdates() {
	c.upds = make([]updateOp, c.cfg.MaxUpdates)
	c.freeU = make([]int32, 0, len(c.upds))
	for i := len(c.upds) - 1; i >= 0; i-- {
		c.freeU = append(c.freeU, int32(i))
	}
	c.doneU = make([]int32, 0, len(c.upds))
	c.replies = make(chan updateReply, c.cfg.MaxUpdates*MaxReplicas)
}

// StartSet starts storing value under key on every replica of the key
// (the requests written, the replies not waited for) and returns; the
// result is reported with tag by PollUpdates, as Set would return it.
// Neither key nor value is kept after StartSet returns. It fails with
// ErrBusy when MaxUpdates updates are outstanding.
func (c *Client) StartSet(key, value []byte, tag uint64) error {
	_, err := c.startSet(key, value, tag, false)
	return err
}

// Set stores value under key on every replica of the key, over the RPC
// (the requests pipelined, then the replies awaited). It succeeds when at
// least one replica applied it; a replica that did not is counted
// (ReplicaStats.SetErrors) and, unless it refused the update, avoided for
// reads, since it may hold an older value. Updates started with StartSet
// or StartDelete may be outstanding: those that end meanwhile are
// reported by the next PollUpdates.
func (c *Client) Set(key, value []byte) error {
	ui, err := c.startSet(key, value, 0, true)
	if err != nil {
		return err
	}
	return c.awaitUpdate(ui)
}

// Delete removes key from every replica of the key, as Set stores it. A
// key no replica held is ErrNotFound.
func (c *Client) Delete(key []byte) error {
	ui, err := c.startDelete(key, 0, true)
	if err != nil {
		return err
	}
	return c.awaitUpdate(ui)
}

// StartDelete starts removing key, as StartSet starts storing a value.
func (c *Client) StartDelete(key []byte, tag uint64) error {
	_, err := c.startDelete(key, tag, false)
	return err
}

// PollUpdates takes the replies that have come, without blocking, and
// reports every update started with StartSet or StartDelete that has
// ended to fn (which may start new ones). It returns how many it
// reported.
func (c *Client) PollUpdates(fn func(tag uint64, err error)) int {
	c.takeReplies()
	n := 0
	for len(c.doneU) > 0 {
		ui := popFront(&c.doneU)
		u := &c.upds[ui]
		tag, err := u.tag, u.err
		c.freeUpdate(ui)
		fn(tag, err)
		n++
	}
	return n
}

// WaitUpdates is PollUpdates that, when updates are outstanding and none
// has ended, first waits until one has (each request is answered or
// failed by its deadline, RPCTimeout after it was sent).
func (c *Client) WaitUpdates(fn func(tag uint64, err error)) int {
	for len(c.doneU) == 0 && c.UpdatesOutstanding() > 0 {
		c.replied(<-c.replies)
	}
	return c.PollUpdates(fn)
}

// UpdatesOutstanding is the number of updates started and not yet
// reported.
func (c *Client) UpdatesOutstanding() int { return len(c.upds) - len(c.freeU) }

func (c *Client) startSet(key, value []byte, tag uint64, sync bool) (int32, error) {
	if len(value) > MaxValueBytes {
		return -1, ErrTooLarge
	}
	var hdr [6]byte
	ui, err := c.startUpdate(key, setHeader(&hdr, key, value), value, tag, sync)
	if err == nil {
		c.st.Sets++
	}
	return ui, err
}

func (c *Client) startDelete(key []byte, tag uint64, sync bool) (int32, error) {
	hdr := [2]byte{opDelete, byte(len(key))}
	ui, err := c.startUpdate(key, hdr[:], nil, tag, sync)
	if err == nil {
		c.st.Deletes++
	}
	return ui, err
}

// startUpdate sends the request hdr ‖ key ‖ value to every replica of key.
// A replica it cannot be sent to has failed it at once.
func (c *Client) startUpdate(key, hdr, value []byte, tag uint64, sync bool) (int32, error) {
	switch {
	case c.closed:
		return -1, portal.ErrClosed
	case len(key) == 0 || len(key) > MaxKeyBytes:
		return -1, ErrKey
	case len(c.freeU) == 0:
		return -1, ErrBusy
	}
	ui := c.freeU[len(c.freeU)-1]
	c.freeU = c.freeU[:len(c.freeU)-1]
	u := &c.upds[ui]
	*u = updateOp{busy: true, sync: sync, tag: tag}
	u.n = uint8(c.ring.replicas(KeyHash(key), c.cfg.Replicas, &u.reps))
	u.due = u.n
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	for k := range u.n {
		if err := c.reps[u.reps[k]].send(ui, k, deadline, hdr, key, value); err != nil {
			c.replied(updateReply{op: ui, k: k, err: err})
		}
	}
	return ui, nil
}

// awaitUpdate waits for the replies of update ui (Set, Delete), taking the
// others' as they come, and returns its result.
func (c *Client) awaitUpdate(ui int32) error {
	u := &c.upds[ui]
	for !u.done {
		// Every request sent is answered or failed by its deadline.
		c.replied(<-c.replies)
	}
	err := u.err
	c.freeUpdate(ui)
	return err
}

// takeReplies takes the replies that have come, without blocking.
func (c *Client) takeReplies() {
	for {
		select {
		case rp := <-c.replies:
			c.replied(rp)
		default:
			return
		}
	}
}

// replied counts one replica's answer to an update, and ends the update
// with its last.
func (c *Client) replied(rp updateReply) {
	u := &c.upds[rp.op]
	if !u.busy || u.due == 0 {
		panic("kv: a reply names no update in flight")
	}
	r := c.reps[u.reps[rp.k]]
	var re *RefusedError
	switch {
	case rp.err == nil:
		u.applied++
	case errors.As(rp.err, &re) && re.Code == codeNotFound:
		u.notFound++
	default:
		u.errs[rp.k] = rp.err
		r.st.SetErrors++
		if re == nil {
			// Unreachable: it may keep an older value; read elsewhere.
			c.avoid(r, c.now())
		}
	}
	if u.due--; u.due > 0 {
		return
	}
	u.done = true
	switch {
	case u.applied > 0:
	case u.notFound > 0:
		u.err = ErrNotFound
	default:
		u.err = fmt.Errorf("kv: no replica applied the update: %w", errors.Join(u.errs[:u.n]...))
	}
	if !u.sync {
		c.doneU = append(c.doneU, rp.op)
	}
}

func (c *Client) freeUpdate(ui int32) {
	c.upds[ui] = updateOp{}
	c.freeU = append(c.freeU, ui)
}

// send writes update ui's request to the replica (its k-th) and queues it
// for its pipe's goroutine; an error means it was not sent.
func (r *replica) send(ui int32, k uint8, deadline time.Time, hdr, key, value []byte) error {
	p, err := r.pipe()
	if err != nil {
		return err
	}
	p.rc.c.SetWriteDeadline(deadline)
	if err = p.rc.writeFrame(hdr, key, value); err == nil {
		err = p.rc.flush()
	}
	if err != nil {
		r.dropPipe()
		return err
	}
	p.owed.Add(1)
	p.sent <- sentUpdate{op: ui, k: k, deadline: deadline}
	return nil
}

// pipe is the replica's update connection, dialed (and its goroutine
// started) when there is none, the last one failed, or the server closed
// it while it was idle (ServerConfig.IdleTimeout); after a failed dial,
// not again for rpcRedial.
func (r *replica) pipe() (*pipe, error) {
	if r.upd != nil && (r.upd.broken.Load() || r.upd.owed.Load() == 0 && !r.upd.rc.alive()) {
		r.dropPipe()
	}
	if r.upd != nil {
		return r.upd, nil
	}
	if time.Now().Before(r.rpcRetry) {
		return nil, fmt.Errorf("kv: server %s: unreachable, not redialed yet", r.addr.RPC)
	}
	rc, err := r.dial()
	if err != nil {
		r.rpcRetry = time.Now().Add(rpcRedial)
		return nil, err
	}
	p := &pipe{rc: rc, sent: make(chan sentUpdate, r.c.cfg.MaxUpdates)}
	r.upd = p
	r.c.pipes.Go(func() { p.read(r.c.replies) })
	return p, nil
}

const rpcRedial = 100 * time.Millisecond

// dial opens a connection to the replica's RPC.
func (r *replica) dial() (*rpcConn, error) {
	tc, host, err := r.tlsConfig()
	if err != nil {
		return nil, err
	}
	rc, err := dialRPC(r.addr.RPC, tc, r.c.cfg.RPCTimeout)
	if err != nil {
		return nil, fmt.Errorf("kv: server %s: %w", r.addr.RPC, r.c.creds.ExplainServerCert(err, host))
	}
	return rc, nil
}

// dropPipe closes the replica's update connection: its goroutine fails
// what is still queued and ends.
func (r *replica) dropPipe() {
	if r.upd != nil {
		r.upd.rc.close()
		close(r.upd.sent)
		r.upd = nil
	}
}
