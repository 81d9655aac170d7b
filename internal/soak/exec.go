package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// Executor transfers: each engine's executor application WRITEs a range
// of 1 to 16 MB of its partition of another engine's exec region through
// a portal.Executor, checks that the owner's memory holds it, READs it
// back into a second buffer and checks that too; then the next engine.
const (
	minTransfer = 1 << 20
	maxTransfer = partBytes
	// execSlots bounds the executor's ops in flight: with the raw
	// worker's 24 slots the engine's 256 KB solicitation window is never
	// full, so no op waits for window (DISPATCH_TIMEOUT) behind ops to a
	// dead engine.
	execSlots = 16
)

// execCounts are an executor application's transfers.
type execCounts struct {
	Transfers [2]uint64 // by op: 0 READ, 1 WRITE
	Verified  [2]uint64
	Bytes     [2]uint64 // verified
	Failed    map[string]uint64
	Explained [nWindowKinds]uint64
	Ops       uint64 // ops the executors posted (portal.ExecutorStats.Ops), retries included
	Retries   uint64
	Chunks    uint64 // ops of verified transfers (one per ChunkBytes)
}

func (c *execCounts) add(o *execCounts) {
	for k := range 2 {
		c.Transfers[k] += o.Transfers[k]
		c.Verified[k] += o.Verified[k]
		c.Bytes[k] += o.Bytes[k]
	}
	if c.Failed == nil {
		c.Failed = map[string]uint64{}
	}
	for k, v := range o.Failed {
		c.Failed[k] += v
	}
	for k := range c.Explained {
		c.Explained[k] += o.Explained[k]
	}
	c.Ops += o.Ops
	c.Retries += o.Retries
	c.Chunks += o.Chunks
}

type execWorker struct {
	s         *soak
	i         int
	p         *portal.Portal
	e         *portal.Executor
	src, sink *portal.Region
	ring      *keyring
	gen       []uint64 // per target: the last generation written to our partition
	rng       *rand.Rand
	rate      float64 // bytes a second (written and read) on average, 0: unpaced

	St         execCounts
	Reconnects int
}

func newExecWorker(s *soak, i int, rate float64) (*execWorker, error) {
	x := &execWorker{s: s, i: i, ring: newKeyring(s.creds, s.owners, roleExec), gen: make([]uint64, engines),
		rng: rand.New(rand.NewPCG(uint64(i), 11)), rate: rate, St: execCounts{Failed: map[string]uint64{}}}
	p, err := portal.DialOptions(s.bed.socket(i), fmt.Sprintf("soak-exec%d", i+1), portal.Options{WaitSpins: -1})
	if err != nil {
		return nil, err
	}
	if err := x.attach(p); err != nil {
		p.Close()
		return nil, err
	}
	return x, nil
}

func (x *execWorker) attach(p *portal.Portal) error {
	var err error
	if x.src, err = p.RegisterRegion(maxTransfer, portal.PermLocalRead|portal.PermLocalWrite); err != nil {
		return err
	}
	if x.sink, err = p.RegisterRegion(maxTransfer, portal.PermLocalRead|portal.PermLocalWrite); err != nil {
		return err
	}
	cfg := portal.DefaultExecutorConfig()
	cfg.Slots, cfg.CC = execSlots, testbed.BackoffCC()
	if x.e, err = portal.NewExecutor(p, cfg); err != nil {
		return err
	}
	x.p = p
	return nil
}

// run moves transfers until the soak stops (the transfer in progress
// finishes). Paced, a round that moved n bytes is followed by a pause
// that brings it to n/rate; the executors start a quarter second apart.
func (x *execWorker) run(ctx context.Context) error {
	defer x.ring.close()
	time.Sleep(time.Duration(x.i) * time.Second / 4)
	for t := (x.i + 1) % engines; !x.s.stopping.Load(); t = (t + 1) % engines {
		if t == x.i {
			continue
		}
		t0 := time.Now()
		moved := x.St.Bytes[0] + x.St.Bytes[1]
		if err := x.round(ctx, t); err != nil {
			return err
		}
		if x.rate <= 0 {
			continue
		}
		// Paused, the application still follows its engine: it
		// reconnects as soon as the engine is gone.
		end := t0.Add(time.Duration(float64(x.St.Bytes[0]+x.St.Bytes[1]-moved) / x.rate * float64(time.Second)))
		for time.Now().Before(end) && !x.s.stopping.Load() {
			if x.p.Gone() != nil {
				if err := x.settle(); err != nil {
					return err
				}
				continue
			}
			time.Sleep(min(time.Until(end), 20*time.Millisecond))
		}
	}
	return nil
}

// round writes a range of target t's exec region and reads it back.
func (x *execWorker) round(ctx context.Context, t int) error {
	ks, err := x.ring.get(t, x.p.Identity())
	if ks == nil {
		if err != nil && x.ring.Failed%50 == 1 {
			x.s.logf("engine %d executor: %v (retrying)", x.i+1, err)
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	size := uint64(minTransfer + x.rng.IntN((maxTransfer-minTransfer)/64+1)*64)
	off := uint64(x.rng.IntN(int((partBytes-size)/64)+1)) * 64
	part := uint64(x.i) * partBytes // our partition in t's region
	x.gen[t]++
	gen, tag := x.gen[t], partTag(t, x.i)
	src := x.src.Bytes()[:size]
	fillRange(src, tag, gen, off)
	if !x.transfer(ctx, portal.OpWrite, t, ks, part+off, size) {
		return x.settle()
	}
	if err := x.s.owners[t].holds(roleExec, part+off, src); err != nil {
		x.s.errs.add("engine %d executor: WRITE of %d B to engine %d returned OK: %v", x.i+1, size, t+1, err)
		return nil
	}
	x.verified(portal.OpWrite, size)
	// The range holds gen now; read it back until a READ succeeds (each
	// failure explained), also when the soak is stopping.
	for {
		sink := x.sink.Bytes()[:size]
		clear(sink[:64])
		if ks, _ = x.ring.get(t, x.p.Identity()); ks == nil {
			time.Sleep(20 * time.Millisecond)
		} else if x.transfer(ctx, portal.OpRead, t, ks, part+off, size) {
			// Checked against the content, not src: a reconnection
			// in between replaced the source region.
			if err := checkRange(sink, tag, gen, off); err != nil {
				x.s.errs.add("engine %d executor: READ of %d B from engine %d returned OK: %v", x.i+1, size, t+1, err)
				return nil
			}
			x.verified(portal.OpRead, size)
			return nil
		} else if err := x.settle(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("executor on engine %d: reading back %d B from engine %d: %w", x.i+1, size, t+1, err)
		}
	}
}

func (x *execWorker) verified(op portal.OpType, size uint64) {
	k := 0
	if op == portal.OpWrite {
		k = 1
	}
	x.St.Verified[k]++
	x.St.Bytes[k] += size
	x.St.Chunks += (size + blockBytes - 1) / blockBytes
	x.s.verified.Add(1)
}

// transfer runs one transfer and reports whether it succeeded; a failure
// is counted, and an error of the run unless a fault window explains it.
func (x *execWorker) transfer(ctx context.Context, op portal.OpType, t int, ks *keys, off, size uint64) bool {
	k := 0
	if op == portal.OpWrite {
		k = 1
	}
	x.St.Transfers[k]++
	t0 := time.Now()
	var err error
	if op == portal.OpWrite {
		err = x.e.Write(ctx, portal.Transfer{
			Remote: ks.addr, RemoteRegion: ks.id, RemoteOffset: off, Key: ks.write,
			Local: x.src, Length: size,
		})
	} else {
		err = x.e.Read(ctx, portal.Transfer{
			Remote: ks.addr, RemoteRegion: ks.id, RemoteOffset: off, Key: ks.read,
			Local: x.sink, Length: size,
		})
	}
	if err == nil {
		return true
	}
	now := time.Now()
	var ce *portal.ChunkError
	st := portal.StatusEngineGone
	switch {
	case errors.As(err, &ce):
		st = ce.Status
	case errors.Is(err, portal.ErrEngineGone):
	default:
		x.s.errs.add("engine %d executor: %v of %d B with engine %d: %v", x.i+1, op, size, t+1, err)
		return false
	}
	x.St.Failed[st.String()]++
	span := opSpan{initiator: x.i, target: t, region: roleExec, posted: t0, done: now, keyAt: ks.at}
	x.s.faults.judgeLater(span, st, &x.St.Explained, func() string {
		return fmt.Sprintf("engine %d executor: %v of %d B with engine %d from %v to %v failed outside every fault window that could explain it: %v",
			x.i+1, op, size, t+1, x.s.since(t0), x.s.since(now), err)
	}, &x.s.errs)
	if st == portal.StatusRemoteAuthFailure {
		x.ring.stale(t, ks.at)
	}
	return false
}

// settle, after a failed transfer, follows the engine to its next
// incarnation if it is gone.
func (x *execWorker) settle() error {
	g := x.p.Gone()
	if g == nil {
		time.Sleep(10 * time.Millisecond)
		return nil
	}
	var ge *portal.EngineGoneError
	errors.As(g, &ge)
	x.collect()
	x.e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	np, err := x.p.Redial(ctx)
	if err != nil {
		return fmt.Errorf("executor on engine %d: %w", x.i+1, err)
	}
	x.p.Close()
	if err := x.attach(np); err != nil {
		np.Close()
		return fmt.Errorf("executor on engine %d: after redial: %w", x.i+1, err)
	}
	x.ring.forget()
	x.Reconnects++
	// A WRITE chunk the dead engine sent may still be committed until
	// the serving engine's TIMEOUT after its pull.
	time.Sleep(time.Until(ge.At.Add(2 * engineTimeout)))
	x.s.reconnected(x.i)
	return nil
}

// collect adds the executor's op counters to the worker's.
func (x *execWorker) collect() {
	st := x.e.Stats()
	x.St.Ops += st.Ops
	x.St.Retries += st.Retries
}

// close closes the executor and the portal (collect first).
func (x *execWorker) close() error {
	x.e.Close()
	return x.p.Close()
}
