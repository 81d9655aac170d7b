package runner

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/stage"
)

// TestIterateAllocs: one loop iteration (rx burst -> Receive -> Poll ->
// Flush) allocates nothing, with and without frames.
func TestIterateAllocs(t *testing.T) {
	a, b, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(core, a, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1e9)
	allocs := testing.AllocsPerRun(200, func() {
		for range 8 {
			if f := b.Buffer(); f != nil {
				clear(f[:60])
				b.Send(60)
			}
		}
		b.Flush()
		b.Recv()
		now += 1000
		r.iterate(now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per iteration, want 0", allocs)
	}
}

// traceCounter's reads differ by distinct powers of two, so each stage's
// cycles say which sections it was charged (trace).
type traceCounter struct{ k uint }

func (c *traceCounter) read() uint64 {
	c.k++
	return 1<<c.k - 1
}

// trace is the stages s charged its sections to, in order, consecutive
// sections of one stage as one, the section running now last.
func trace(s *stage.Stages) []stage.Stage {
	sn := s.Snapshot(0)
	var out []stage.Stage
	for bit := 1; bit < 64; bit++ {
		for st := range stage.NumStages {
			if sn.Cycles[st]&(1<<bit) != 0 && (len(out) == 0 || out[len(out)-1] != st) {
				out = append(out, st)
			}
		}
	}
	return out
}

// TestIterateStages: the loop's own marks. An iteration whose rx poll
// finds nothing charges it to EmptyRx, and the rest of it, Poll finding
// nothing to do, to EmptyPoll; one with frames charges its rx poll to
// Receive, Poll's phases follow, then Transmit from the end of Poll
// through Flush, and Clock from there to the next rx poll. Neither
// allocates.
func TestIterateStages(t *testing.T) {
	a, b, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	var k traceCounter
	s := stage.New(k.read)
	core.SetStages(s)
	cfg := DefaultConfig()
	cfg.Stages = s
	r, err := New(core, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.iterate(1e9) // nothing received
	for range 3 {  // frames the engine drops
		f := b.Buffer()
		clear(f[:60])
		b.Send(60)
	}
	b.Flush()
	r.iterate(2e9)
	L, X, E, R, P, B, T, K := stage.Loop, stage.EmptyRx, stage.EmptyPoll, stage.Receive, stage.Protocol, stage.Build, stage.Transmit, stage.Clock
	want := []stage.Stage{L, X, E, K, R, P, B, T, K}
	if got := trace(s); !slices.Equal(got, want) {
		t.Errorf("sections %v, want %v", got, want)
	}
	if sn := s.Snapshot(0); sn.Frames != 3 || sn.Sections[stage.EmptyRx] != 1 || sn.Sections[stage.EmptyPoll] != 3 || sn.Sections[stage.Transmit] != 1 {
		t.Errorf("frames %d, empty rx polls %d, empty poll sections %d, transmits %d", sn.Frames, sn.Sections[stage.EmptyRx], sn.Sections[stage.EmptyPoll], sn.Sections[stage.Transmit])
	}
	now := int64(3e9)
	allocs := testing.AllocsPerRun(200, func() {
		s.Reset()
		k.k = 0
		f := b.Buffer()
		clear(f[:60])
		b.Send(60)
		b.Flush()
		b.Recv()
		now += 1000
		r.iterate(now)
		r.iterate(now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per two iterations with stages, want 0", allocs)
	}
}

// TestLoopStages: a running loop charges its idle iterations (EmptyRx,
// EmptyPoll, Clock) and the closures it runs (Loop) to its Stages.
func TestLoopStages(t *testing.T) {
	a, _, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	var c atomic.Uint64
	s := stage.New(func() uint64 { return c.Add(1) })
	core.SetStages(s)
	cfg := DefaultConfig()
	cfg.Mode, cfg.Stages = Busy, s
	r, err := New(core, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	time.Sleep(10 * time.Millisecond)
	var sn stage.Snapshot
	if err := r.Exec(func(*engine.Core) { sn = s.Snapshot(0) }); err != nil {
		t.Fatal(err)
	}
	// The closure's own section has not ended: its cycles so far are
	// charged, it is not counted yet.
	if sn.Sections[stage.Clock] == 0 || sn.Sections[stage.EmptyRx] == 0 || sn.Cycles[stage.Loop] == 0 ||
		sn.Sections[stage.EmptyPoll] < sn.Sections[stage.EmptyRx] || sn.Frames != 0 {
		t.Errorf("sections %v, frames %d", sn.Sections, sn.Frames)
	}
}
