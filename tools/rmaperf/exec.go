package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/pattern"
	"github.com/onerma/onerma/portal"
)

// runExec measures transfers of size bytes (any size) through one
// portal.Executor: outstanding goroutines each keep one transfer going
// (READ or WRITE) for warm+dur and the transfers that complete within the
// last dur are counted. ops_per_sec counts transfers, mb_per_sec their
// bytes (goodput), the latency percentiles are per transfer (call to
// return). Each goroutine walks its own part of the remote region when
// the region holds outstanding of them (else all walk the whole region).
// With verify each goroutine has its own size-byte buffer in one local
// region; without, they all land in one (as ib_read_bw and ucx_perftest
// reuse one buffer for every message in flight), so the footprint is
// the region read plus one transfer, not plus outstanding of them.
//
// bg > 0 adds head-of-line pressure (paper Fig. 12/13): one more goroutine
// keeps READs of bg bytes going through the same executor (so the same
// portal, slots and windows) for the whole run, from the last bg bytes of
// the remote region; the measured transfers walk the rest. Its goodput
// goes in the note.
//
// rate > 0 makes the measured transfers open loop (paper Fig. 12): they
// arrive at rate per second, Poisson (exponential gaps from a fixed
// seed); one more goroutine waits for each arrival and hands it to the
// next free one of the outstanding goroutines, so up to outstanding are
// in flight at once. A transfer's latency runs from its post, as in
// closed loop, and it counts if it arrived within the measurement; how
// long arrivals waited to be posted (every goroutine busy, or this
// process not on its CPU) goes in the note, so client-side queueing shows
// there rather than as the executor's latency.
func runExec(p *portal.Portal, tg target, test string, op abi.Op, size, outstanding int,
	warm, dur time.Duration, verify bool, cfg portal.ExecutorConfig, bg int, rate float64) (benchrow.Row, error) {
	write := op == abi.OpWrite
	if uint64(size)+uint64(bg) > tg.bytes {
		return benchrow.Row{}, fmt.Errorf("-s %d -bg %d: the remote region holds %d bytes", size, bg, tg.bytes)
	}
	tgBytes := tg.bytes - uint64(bg) // the measured transfers' part of the region
	part := tgBytes / uint64(outstanding)
	if verify && write && part < uint64(size) {
		return benchrow.Row{}, fmt.Errorf("-verify of writes with -O %d needs a region of %d bytes, it has %d", outstanding, outstanding*size, tg.bytes)
	}
	e, err := portal.NewExecutor(p, cfg)
	if err != nil {
		return benchrow.Row{}, err
	}
	defer e.Close()
	bufs := uint64(1) // local buffers of size bytes: one shared, or one per goroutine
	if verify {
		bufs = uint64(outstanding)
	}
	local, err := localRegion(p, bufs*uint64(size)+uint64(bg), write)
	if err != nil {
		return benchrow.Row{}, err
	}
	type result struct {
		h     telemetry.Hist
		late  telemetry.Hist // rate > 0: post time minus arrival time
		ops   uint64
		errs  uint64
		first error
		fatal error
	}
	results := make([]result, outstanding)
	clock := time.Now()
	nowNs := func() int64 { return int64(time.Since(clock)) }
	start, end := int64(warm), int64(warm+dur)
	ctx, cancel := context.WithTimeout(context.Background(), warm+dur+60*time.Second)
	defer cancel()
	var arrived chan int64 // rate > 0: arrival times, in order
	var wg sync.WaitGroup
	if rate > 0 {
		arrived = make(chan int64, 1<<16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(arrived)
			poisson(rate, end, nowNs, arrived)
		}()
	}
	var bgBytes uint64
	var bgErr error
	if bg > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loff := bufs * uint64(size)
			for {
				t0 := nowNs()
				if t0 >= end {
					return
				}
				err := e.Read(ctx, portal.Transfer{
					Remote: tg.peer, RemoteRegion: tg.region, RemoteOffset: tgBytes, Key: tg.key,
					Local: local, LocalOffset: loff, Length: uint64(bg),
				})
				if err != nil {
					bgErr = err
					return
				}
				if t1 := nowNs(); t1 >= start && t1 < end {
					bgBytes += uint64(bg)
				}
			}
		}()
	}
	for k := range outstanding {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[k]
			base, span := uint64(0), tgBytes-uint64(size)
			if part >= uint64(size) {
				base, span = uint64(k)*part, part-uint64(size)
			}
			loff := uint64(k) * uint64(size) % (bufs * uint64(size))
			buf := local.Bytes()[loff : loff+uint64(size)]
			next := uint64(k) * 4160
			for gen := 0; ; gen++ {
				t0 := nowNs()
				at := int64(-1) // arrival (rate > 0)
				if arrived != nil {
					// Served until the schedule ends; arrivals still
					// queued at the end are taken and dropped, so the
					// schedule never blocks on a full queue.
					var ok bool
					if at, ok = <-arrived; !ok {
						return
					}
					if t0 = nowNs(); t0 >= end {
						continue
					}
				} else if t0 >= end {
					return
				}
				off := base + next%(span+1)
				next += uint64(size) + 4096 + 64
				if write && verify {
					for i := range buf { // new bytes every time, so a write that did not land shows
						buf[i] = byte(gen) + byte(i)
					}
				}
				var err error
				if write {
					err = e.Write(ctx, portal.Transfer{
						Remote: tg.peer, RemoteRegion: tg.region, RemoteOffset: off, Key: tg.key,
						Local: local, LocalOffset: loff, Length: uint64(size),
					})
				} else {
					err = e.Read(ctx, portal.Transfer{
						Remote: tg.peer, RemoteRegion: tg.region, RemoteOffset: off, Key: tg.key,
						Local: local, LocalOffset: loff, Length: uint64(size),
					})
				}
				t1 := nowNs()
				in := t1 >= start && t1 < end
				if at >= 0 {
					in = at >= start && at < end
				}
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, portal.ErrExecutorClosed) {
						r.fatal = err
						return
					}
					if in {
						r.errs++
					}
					if r.first == nil {
						r.first = err
					}
					continue
				}
				if verify {
					got := buf
					if write {
						got = tg.mem[off : off+uint64(size)]
					}
					for i, v := range got {
						want := pattern.At(off + uint64(i))
						if write {
							want = buf[i]
						}
						if v != want {
							r.fatal = fmt.Errorf("data mismatch at remote offset %d", off+uint64(i))
							return
						}
					}
				}
				if in && at >= 0 {
					r.ops++
					r.h.Add(uint64(t1 - t0))
					r.late.Add(uint64(t0 - at))
				} else if in {
					r.ops++
					r.h.Add(uint64(t1 - t0))
				}
			}
		}()
	}
	wg.Wait()
	var h, late telemetry.Hist
	var ops, errs uint64
	var first error
	for i := range results {
		r := &results[i]
		if r.fatal != nil {
			return benchrow.Row{}, fmt.Errorf("transfer %d: %w", i, r.fatal)
		}
		h.Merge(&r.h)
		late.Merge(&r.late)
		ops += r.ops
		errs += r.errs
		if first == nil {
			first = r.first
		}
	}
	secs := dur.Seconds()
	st := e.Stats()
	row := benchrow.Row{
		System: "onerma", Test: test, Size: size, Outstanding: outstanding, Cores: 1, // one portal: one engine core
		OpsPerSec: float64(ops) / secs, MBPerSec: float64(ops) * float64(size) / secs / 1e6,
		P50us: us(h.Quantile(0.5)), P99us: benchrow.F(us(h.Quantile(0.99))), P999us: benchrow.F(us(h.Quantile(0.999))),
		Ops: ops, Errors: errs, Seconds: secs,
		Note: fmt.Sprintf("through portal.Executor: %d transfers in flight, %d slots, chunks of %d B; ops/s counts transfers; %d ops posted, %d retried (NACK %d, DISPATCH_TIMEOUT %d, TIMEOUT %d)",
			outstanding, e.Slots(), cfg.ChunkBytes, st.Ops, st.Retries, st.Nacks, st.DispatchTimeouts, st.Timeouts),
	}
	if rate > 0 {
		row.Note += fmt.Sprintf("; open loop: Poisson arrivals at %.0f/s, up to %d served at once, latency from post; posts %.2f us (p50) / %.2f us (p99) after their arrival",
			rate, outstanding, us(late.Quantile(0.5)), us(late.Quantile(0.99)))
	}
	if bg > 0 {
		if bgErr != nil {
			return benchrow.Row{}, fmt.Errorf("background %d-byte reads: %w", bg, bgErr)
		}
		row.Note += fmt.Sprintf("; meanwhile %d-byte READs on the same executor moved %.1f MB/s", bg, float64(bgBytes)/secs/1e6)
	}
	if first != nil {
		row.Note += fmt.Sprintf("; first error: %v", first)
	}
	return row, nil
}

// poisson sends arrival times (the run's clock, ns) to out at rate per
// second, Poisson (exponential gaps from a fixed seed: every run offers
// the same arrivals), each when its time has come, until end. It waits
// spinning and yielding to the other goroutines (the executor's driver
// among them) on every turn: the Go runtime wakes a sleeping goroutine up
// to a millisecond late when no other runs, ten times the mean gap at
// 10 k/s. A full out (the serving goroutines that far behind) blocks it.
func poisson(rate float64, end int64, now func() int64, out chan<- int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	meanNs := 1e9 / rate
	at := now()
	for {
		at += int64(rng.ExpFloat64() * meanNs)
		if at >= end {
			return
		}
		for now() < at {
			runtime.Gosched()
		}
		out <- at
	}
}
