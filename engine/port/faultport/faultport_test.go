package faultport

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
)

// mkFrame is frame seq: 60..259 bytes, the sequence number first, then
// bytes derived from it, so any frame can be checked byte for byte.
func mkFrame(seq uint64) []byte {
	f := make([]byte, 60+seq%200)
	fill(f, seq)
	return f
}

func fill(f []byte, seq uint64) {
	binary.LittleEndian.PutUint64(f, seq)
	for j := 8; j < len(f); j++ {
		f[j] = byte(seq*7 + uint64(j))
	}
}

// parse returns the sequence number of f and whether f is exactly frame
// seq (not truncated, not overwritten).
func parse(f []byte) (uint64, bool) {
	if len(f) < 8 {
		return 0, false
	}
	seq := binary.LittleEndian.Uint64(f)
	if uint64(len(f)) != 60+seq%200 {
		return seq, false
	}
	for j := 8; j < len(f); j++ {
		if f[j] != byte(seq*7+uint64(j)) {
			return seq, false
		}
	}
	return seq, true
}

type clock struct{ t int64 }

func (c *clock) now() int64 { return c.t }

// fake is an inner port. Rx: Recv hands out up to burst of the frames
// queued with feed, in buffers it overwrites with 0xee at the next Recv
// (so a frame kept past it is caught). Tx: one buffer, returned by Buffer
// until Send (nil while noBuffer); Send records a copy and the time.
type fake struct {
	clk   *clock
	burst int

	pending []uint64 // rx: frames to receive, in order
	bufs    [][]byte
	views   [][]byte
	arrived map[uint64]int64 // rx: when Recv handed the frame out

	txb      []byte
	noBuffer bool
	sent     []sentFrame // tx: every frame the inner port was given
	flushes  int
	closed   bool
}

type sentFrame struct {
	f  []byte
	at int64
}

func newFake(clk *clock, burst int) *fake {
	k := &fake{clk: clk, burst: burst, views: make([][]byte, 0, burst), arrived: map[uint64]int64{},
		txb: make([]byte, engine.MaxFrameBytes)}
	for range burst {
		k.bufs = append(k.bufs, make([]byte, engine.MaxFrameBytes))
	}
	return k
}

func (k *fake) feed(from, n uint64) {
	for s := from; s < from+n; s++ {
		k.pending = append(k.pending, s)
	}
}

func (k *fake) Recv() [][]byte {
	for _, v := range k.views {
		for j := range v {
			v[j] = 0xee
		}
	}
	k.views = k.views[:0]
	for len(k.views) < k.burst && len(k.pending) > 0 {
		s := k.pending[0]
		k.pending = k.pending[1:]
		b := k.bufs[len(k.views)][:60+s%200]
		fill(b, s)
		k.views = append(k.views, b)
		k.arrived[s] = k.clk.t
	}
	return k.views
}

func (k *fake) Buffer() []byte {
	if k.noBuffer {
		return nil
	}
	return k.txb
}

func (k *fake) Send(n int) {
	if n < 1 || n > len(k.txb) {
		panic("fake: bad Send")
	}
	k.sent = append(k.sent, sentFrame{append([]byte(nil), k.txb[:n]...), k.clk.t})
	for j := range k.txb[:n] {
		k.txb[j] = 0xee // the next frame starts from garbage
	}
}

func (k *fake) Flush() { k.flushes++ }
func (k *fake) Close() { k.closed = true }

// delivery is a frame as a Port delivered it.
type delivery struct {
	seq     uint64
	latency int64 // delivery time minus arrival (rx) or Send (tx) time
}

// runRx receives frames 0..n-1 through a Port over a fake with bursts of
// 32, advancing the clock by step per Recv, until everything held is
// delivered. It checks every frame delivered is intact and every Recv
// returns at most cfg.Burst frames.
func runRx(t *testing.T, cfg Config, n int, step int64) ([]delivery, Stats) {
	t.Helper()
	clk := &clock{t: 1000}
	k := newFake(clk, 32)
	p, err := New(k, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	k.feed(0, uint64(n))
	var out []delivery
	limit := 10*n + int((cfg.DelayNs+cfg.JitterNs)/step) + 100
	for iter := 0; ; iter++ {
		if iter > limit {
			t.Fatalf("not drained after %d Recvs: %+v", iter, p.Stats())
		}
		got := p.Recv()
		if len(got) > cfg.Burst {
			t.Fatalf("Recv returned %d frames, Burst is %d", len(got), cfg.Burst)
		}
		for _, f := range got {
			seq, ok := parse(f)
			if !ok {
				t.Fatalf("frame %d delivered damaged (len %d)", seq, len(f))
			}
			out = append(out, delivery{seq, clk.t - k.arrived[seq]})
		}
		if len(got) == 0 && len(k.pending) == 0 && p.Stats().Held == 0 {
			break
		}
		clk.t += step
	}
	return out, p.Stats()
}

// runTx sends frames 0..n-1 through a Port over a fake, as a core would,
// with a Flush after every group of 8 and the clock advanced by step per
// Flush, then Flushes (with nothing sent) until nothing is held.
func runTx(t *testing.T, cfg Config, n int, step int64) ([]delivery, Stats) {
	t.Helper()
	clk := &clock{t: 1000}
	k := newFake(clk, 32)
	p, err := New(k, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	sentAt := make([]int64, n)
	for s := range n {
		b := p.Buffer()
		f := mkFrame(uint64(s))
		copy(b, f)
		p.Send(len(f))
		sentAt[s] = clk.t
		if s%8 == 7 {
			p.Flush()
			clk.t += step
		}
	}
	limit := int((cfg.DelayNs+cfg.JitterNs)/step) + 100
	for iter := 0; p.Stats().Held > 0; iter++ {
		if iter > limit {
			t.Fatalf("not drained after %d Flushes: %+v", iter, p.Stats())
		}
		p.Flush()
		clk.t += step
	}
	var out []delivery
	for _, sf := range k.sent {
		seq, ok := parse(sf.f)
		if !ok {
			t.Fatalf("frame %d sent damaged (len %d)", seq, len(sf.f))
		}
		out = append(out, delivery{seq, sf.at - sentAt[seq]})
	}
	return out, p.Stats()
}

// checkInvariants checks the counters' accounting once everything held
// was delivered.
func checkInvariants(t *testing.T, d DirStats, delivered int) {
	t.Helper()
	if in := d.Passed + d.Dropped + d.Delayed + d.Reordered + d.Deferred + d.Overflow; in != d.Frames {
		t.Errorf("Frames %d != Passed+Dropped+Delayed+Reordered+Deferred+Overflow %d: %+v", d.Frames, in, d)
	}
	if held := d.Duplicated + d.Delayed + d.Reordered + d.Deferred; held != d.Released {
		t.Errorf("Released %d != Duplicated+Delayed+Reordered+Deferred %d: %+v", d.Released, held, d)
	}
	if uint64(delivered) != d.Passed+d.Released {
		t.Errorf("delivered %d != Passed+Released %d: %+v", delivered, d.Passed+d.Released, d)
	}
}

func dirStats(st Stats, dir string) DirStats {
	if dir == DirTx {
		return st.Tx
	}
	return st.Rx
}

func run(t *testing.T, dir string, cfg Config, n int, step int64) ([]delivery, Stats) {
	t.Helper()
	if dir == DirTx {
		return runTx(t, cfg, n, step)
	}
	return runRx(t, cfg, n, step)
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if c.Active() {
		t.Fatal("DefaultConfig injects faults")
	}
	tests := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Direction = "" }, `Direction = "", want "rx", "tx" or "both"`},
		{func(c *Config) { c.Direction = "RX" }, `Direction = "RX"`},
		{func(c *Config) { c.Drop = -0.1 }, "Drop = -0.1, want a probability in [0, 1]"},
		{func(c *Config) { c.Drop = 1.5 }, "Drop = 1.5"},
		{func(c *Config) { c.Duplicate = math.NaN() }, "Duplicate = NaN"},
		{func(c *Config) { c.Reorder = math.Inf(1) }, "Reorder = +Inf"},
		{func(c *Config) { c.Delay = 2 }, "Delay = 2"},
		{func(c *Config) { c.ReorderDepth = 0 }, "ReorderDepth = 0, want 1..65536"},
		{func(c *Config) { c.DelayNs = -1 }, "DelayNs = -1, want 0..10000000000"},
		{func(c *Config) { c.JitterNs = -5 }, "JitterNs = -5"},
		{func(c *Config) { c.DelayNs, c.JitterNs = MaxDelayNs-10, 11 }, "JitterNs = 11, want 0..10 (DelayNs + JitterNs at most 10000000000)"},
		{func(c *Config) { c.Delay = 0.1 }, "Delay = 0.1 with DelayNs = JitterNs = 0"},
		{func(c *Config) { c.Pool = 0 }, "Pool = 0, want 1..4096"},
		{func(c *Config) { c.Pool = MaxPool + 1 }, "Pool = 4097"},
		{func(c *Config) { c.Burst = 0 }, "Burst = 0, want 1..512"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: Validate = %v, want %q", c, err, tt.want)
		}
		if _, err := New(newFake(&clock{}, 1), c, nil); err == nil {
			t.Errorf("%+v: New accepted it", c)
		}
	}
	// Boundaries are valid.
	c = DefaultConfig()
	c.Direction, c.Drop, c.Duplicate, c.Reorder, c.Delay, c.JitterNs = DirBoth, 1, 1, 1, 1, MaxDelayNs
	if err := c.Validate(); err != nil {
		t.Errorf("boundaries: %v", err)
	}
	if _, err := New(nil, DefaultConfig(), nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New(nil) = %v", err)
	}
}

// TestPassThrough: with no probability set, or in the direction not
// faulted, the Port hands out the inner port's own slice and buffers and
// allocates no pool.
func TestPassThrough(t *testing.T) {
	for _, tt := range []struct {
		name           string
		cfg            Config
		rxPure, txPure bool
	}{
		{"zero", DefaultConfig(), true, true},
		{"zero both", func() Config { c := DefaultConfig(); c.Direction = DirBoth; return c }(), true, true},
		{"tx only", func() Config { c := DefaultConfig(); c.Direction, c.Drop = DirTx, 0.5; return c }(), true, false},
		{"rx only", func() Config { c := DefaultConfig(); c.Drop = 0.5; return c }(), false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := &clock{}
			k := newFake(clk, 32)
			p, err := New(k, tt.cfg, clk.now)
			if err != nil {
				t.Fatal(err)
			}
			if pooled := len(p.pool.bufs) > 0; pooled != tt.cfg.Active() {
				t.Errorf("pool of %d buffers, config active %v", len(p.pool.bufs), tt.cfg.Active())
			}
			k.feed(0, 100)
			if tt.rxPure {
				for range 4 {
					got := p.Recv()
					if len(got) != 32 && len(got) != 4 {
						t.Fatalf("Recv returned %d frames", len(got))
					}
					if len(got) > 0 && &got[0] != &k.views[0] {
						t.Fatal("Recv did not return the inner port's slice")
					}
				}
				if st := p.Stats(); st.Rx.Frames != 100 || st.Rx.Passed != 100 || st.Held != 0 {
					t.Errorf("rx stats %+v", st)
				}
			}
			if tt.txPure {
				for s := range 50 {
					b := p.Buffer()
					if &b[0] != &k.txb[0] {
						t.Fatal("Buffer is not the inner port's")
					}
					f := mkFrame(uint64(s))
					copy(b, f)
					p.Send(len(f))
				}
				p.Flush()
				if len(k.sent) != 50 || k.flushes != 1 {
					t.Fatalf("sent %d, flushes %d", len(k.sent), k.flushes)
				}
				for s, sf := range k.sent {
					if seq, ok := parse(sf.f); !ok || seq != uint64(s) {
						t.Fatalf("sent[%d] is frame %d (intact %v)", s, seq, ok)
					}
				}
				if st := p.Stats(); st.Tx.Frames != 50 || st.Tx.Passed != 50 {
					t.Errorf("tx stats %+v", st)
				}
			}
			if p.Inner() != k || p.Config() != tt.cfg {
				t.Error("Inner or Config")
			}
		})
	}
}

// TestDropRate: over 100k frames the number dropped is within 5 standard
// deviations of n·p, in either direction, and nothing else happens.
func TestDropRate(t *testing.T) {
	const n = 100_000
	for _, dir := range []string{DirRx, DirTx} {
		for _, prob := range []float64{0.01, 0.05, 0.5, 1} {
			cfg := DefaultConfig()
			cfg.Direction, cfg.Drop, cfg.Seed = dir, prob, 42
			got, st := run(t, dir, cfg, n, 100)
			d := dirStats(st, dir)
			mean, sd := n*prob, math.Sqrt(n*prob*(1-prob))
			if diff := math.Abs(float64(d.Dropped) - mean); diff > 5*sd+0.5 {
				t.Errorf("%s drop %v: dropped %d of %d, want %.0f ± %.0f", dir, prob, d.Dropped, n, mean, 5*sd)
			}
			if uint64(len(got)) != n-d.Dropped || d.Frames != n || d.Passed != n-d.Dropped {
				t.Errorf("%s drop %v: delivered %d, stats %+v", dir, prob, len(got), d)
			}
			// Survivors keep their order and arrive at once.
			for i := 1; i < len(got); i++ {
				if got[i].seq <= got[i-1].seq || got[i].latency != 0 {
					t.Fatalf("%s drop %v: frame %d after %d, latency %d", dir, prob, got[i].seq, got[i-1].seq, got[i].latency)
				}
			}
			checkInvariants(t, d, len(got))
			if st.Held != 0 {
				t.Errorf("held %d", st.Held)
			}
		}
	}
}

// TestDuplicate: duplicates are byte-identical copies (runRx/runTx check
// every frame), each frame is delivered once or twice, the number
// delivered twice is the Duplicated counter, and their rate is right.
func TestDuplicate(t *testing.T) {
	const n = 20_000
	for _, dir := range []string{DirRx, DirTx} {
		cfg := DefaultConfig()
		cfg.Direction, cfg.Duplicate, cfg.Drop, cfg.Seed = dir, 0.1, 0.02, 9
		got, st := run(t, dir, cfg, n, 100)
		d := dirStats(st, dir)
		count := make([]int, n)
		for _, g := range got {
			count[g.seq]++
		}
		twice := 0
		for s, c := range count {
			switch c {
			case 0, 1:
			case 2:
				twice++
			default:
				t.Fatalf("%s: frame %d delivered %d times", dir, s, c)
			}
		}
		if uint64(twice) != d.Duplicated || d.PoolEmpty != 0 {
			t.Errorf("%s: %d frames delivered twice, stats %+v", dir, twice, d)
		}
		kept := float64(n) * 0.98
		if mean, sd := kept*0.1, math.Sqrt(kept*0.1*0.9); math.Abs(float64(twice)-mean) > 5*sd {
			t.Errorf("%s: %d duplicates, want %.0f ± %.0f", dir, twice, mean, 5*sd)
		}
		checkInvariants(t, d, len(got))
	}
}

// fenwick counts the sequence numbers seen so far above a value.
type fenwick []int

func (f fenwick) add(i int) {
	for i++; i < len(f); i += i & -i {
		f[i]++
	}
}

func (f fenwick) prefix(i int) int { // how many seen are <= i
	s := 0
	for i++; i > 0; i -= i & -i {
		s += f[i]
	}
	return s
}

// TestReorder: reordering loses and duplicates nothing, changes the order,
// and a reordered frame is overtaken by at least ReorderDepth frames
// (except at the end of the stream, where the idle direction releases it
// early); frames not reordered keep their relative order.
func TestReorder(t *testing.T) {
	const n = 20_000
	for _, dir := range []string{DirRx, DirTx} {
		for _, depth := range []int{1, 3, 16} {
			cfg := DefaultConfig()
			cfg.Direction, cfg.Reorder, cfg.ReorderDepth, cfg.Seed = dir, 0.1, depth, 3
			got, st := run(t, dir, cfg, n, 100)
			d := dirStats(st, dir)
			if len(got) != n {
				t.Fatalf("%s depth %d: delivered %d of %d", dir, depth, len(got), n)
			}
			seen := make([]bool, n)
			fw := make(fenwick, n+1)
			overtaken, short := 0, 0
			for i, g := range got {
				if seen[g.seq] {
					t.Fatalf("%s: frame %d twice", dir, g.seq)
				}
				seen[g.seq] = true
				if over := i - fw.prefix(int(g.seq)); over > 0 {
					overtaken++
					if over < depth {
						short++
					}
				}
				fw.add(int(g.seq))
			}
			if overtaken == 0 || uint64(overtaken) > d.Reordered || d.Reordered == 0 {
				t.Errorf("%s depth %d: %d frames overtaken, %d reordered", dir, depth, overtaken, d.Reordered)
			}
			// Only frames reordered within the last depth frames of the
			// stream (released when it went idle) may be overtaken less.
			if short > depth {
				t.Errorf("%s depth %d: %d frames overtaken by fewer than depth", dir, depth, short)
			}
			if mean, sd := n*0.1, math.Sqrt(n*0.1*0.9); math.Abs(float64(d.Reordered)-mean) > 5*sd {
				t.Errorf("%s: %d reordered, want %.0f ± %.0f", dir, d.Reordered, mean, 5*sd)
			}
			checkInvariants(t, d, len(got))
		}
	}
}

// TestDelay: a delayed frame is never delivered before its due time, and
// at most a few loop iterations after the latest it can be due; every
// frame is delivered; frames not delayed are delivered at once.
func TestDelay(t *testing.T) {
	const n, step = 20_000, 100
	for _, dir := range []string{DirRx, DirTx} {
		for _, tt := range []struct{ delay, jitter int64 }{{2000, 0}, {2000, 1500}, {300, 700}, {50_000, 0}} {
			cfg := DefaultConfig()
			cfg.Direction, cfg.Delay, cfg.DelayNs, cfg.JitterNs, cfg.Seed = dir, 0.2, tt.delay, tt.jitter, 5
			cfg.Pool = 4096
			got, st := run(t, dir, cfg, n, step)
			d := dirStats(st, dir)
			if len(got) != n {
				t.Fatalf("%s %+v: delivered %d of %d", dir, tt, len(got), n)
			}
			late, minLat, maxLat := 0, int64(math.MaxInt64), int64(0)
			for _, g := range got {
				if g.latency == 0 {
					continue
				}
				late++
				minLat, maxLat = min(minLat, g.latency), max(maxLat, g.latency)
			}
			// Rx delivers at most Burst released frames per Recv; with a
			// 20 % delay a few Recvs of backlog at most.
			if minLat < tt.delay || maxLat > tt.delay+tt.jitter+8*step {
				t.Errorf("%s %+v: delayed frames' latency %d..%d", dir, tt, minLat, maxLat)
			}
			if uint64(late) != d.Delayed || d.PoolEmpty != 0 {
				t.Errorf("%s %+v: %d late frames, stats %+v", dir, tt, late, d)
			}
			if tt.jitter > 0 && maxLat-minLat < tt.jitter/2 {
				t.Errorf("%s %+v: latency %d..%d: no jitter", dir, tt, minLat, maxLat)
			}
			if mean, sd := n*0.2, math.Sqrt(n*0.2*0.8); math.Abs(float64(d.Delayed)-mean) > 5*sd {
				t.Errorf("%s: %d delayed, want %.0f ± %.0f", dir, d.Delayed, mean, 5*sd)
			}
			checkInvariants(t, d, len(got))
		}
	}
}

// TestDelayNotBeforeDue: the clock standing still, a delayed frame stays
// held however often Recv and Flush are called; it comes out at its due
// time exactly.
func TestDelayNotBeforeDue(t *testing.T) {
	clk := &clock{t: 5000}
	k := newFake(clk, 32)
	cfg := DefaultConfig()
	cfg.Direction, cfg.Delay, cfg.DelayNs = DirBoth, 1, 1000
	p, err := New(k, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	k.feed(0, 3)
	b := p.Buffer()
	f := mkFrame(77)
	copy(b, f)
	p.Send(len(f))
	for range 100 {
		if got := p.Recv(); len(got) != 0 {
			t.Fatalf("delivered %d frames before due", len(got))
		}
		p.Flush()
	}
	clk.t = 5999
	if got := p.Recv(); len(got) != 0 {
		t.Fatal("delivered 1 ns early")
	}
	p.Flush()
	if len(k.sent) != 0 {
		t.Fatal("sent 1 ns early")
	}
	clk.t = 6000
	got := p.Recv()
	if len(got) != 3 {
		t.Fatalf("at due time: %d frames", len(got))
	}
	for i, f := range got {
		if s, ok := parse(f); !ok || s != uint64(i) {
			t.Errorf("frame %d: %d (intact %v)", i, s, ok)
		}
	}
	p.Flush()
	if len(k.sent) != 1 || k.sent[0].at != 6000 {
		t.Fatalf("sent %+v", k.sent)
	}
	if s, ok := parse(k.sent[0].f); !ok || s != 77 {
		t.Errorf("sent frame %d (intact %v)", s, ok)
	}
}

// TestDeterministic: the same seed and frames give the same deliveries and
// counters; another seed does not.
func TestDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Direction, cfg.Drop, cfg.Duplicate, cfg.Reorder, cfg.Delay = DirBoth, 0.05, 0.05, 0.05, 0.05
	cfg.DelayNs, cfg.JitterNs, cfg.Seed = 1000, 1000, 11
	for _, dir := range []string{DirRx, DirTx} {
		a, sa := run(t, dir, cfg, 10_000, 100)
		b, sb := run(t, dir, cfg, 10_000, 100)
		if !slices.Equal(a, b) || sa != sb {
			t.Errorf("%s: two runs with seed 11 differ", dir)
		}
		c2 := cfg
		c2.Seed = 12
		c, sc := run(t, dir, c2, 10_000, 100)
		if slices.Equal(a, c) || sa == sc {
			t.Errorf("%s: seeds 11 and 12 give the same run", dir)
		}
	}
}

// TestPoolExhaustion: frames that find the pool empty pass unfaulted and
// are counted; the held ones still come out.
func TestPoolExhaustion(t *testing.T) {
	for _, dir := range []string{DirRx, DirTx} {
		cfg := DefaultConfig()
		cfg.Direction, cfg.Pool, cfg.Delay, cfg.DelayNs = dir, 4, 1, 1_000_000
		got, st := run(t, dir, cfg, 100, 100)
		d := dirStats(st, dir)
		if d.Delayed != 4 || d.PoolEmpty != 96 || d.Passed != 96 || len(got) != 100 {
			t.Errorf("%s: delivered %d, stats %+v", dir, len(got), d)
		}
		for i, g := range got {
			if want := i < 96; (g.latency == 0) != want {
				t.Errorf("%s: delivery %d (frame %d) latency %d", dir, i, g.seq, g.latency)
			}
		}
		checkInvariants(t, d, len(got))

		// Duplicates: a copy is made only while a buffer is free.
		cfg = DefaultConfig()
		cfg.Direction, cfg.Pool, cfg.Duplicate = dir, 1, 1
		got, st = run(t, dir, cfg, 100, 100)
		d = dirStats(st, dir)
		if d.Duplicated == 0 || d.Duplicated+d.PoolEmpty != 100 || uint64(len(got)) != 100+d.Duplicated {
			t.Errorf("%s dup: delivered %d, stats %+v", dir, len(got), d)
		}
		checkInvariants(t, d, len(got))
	}
}

// TestBurstLimit: an inner port with larger bursts than Burst: the rest
// wait in the pool (Deferred) and come out in order, or are lost
// (Overflow) when it is empty.
func TestBurstLimit(t *testing.T) {
	clk := &clock{}
	k := newFake(clk, 8)
	cfg := DefaultConfig()
	cfg.Burst, cfg.Pool, cfg.Drop = 4, 2, 1e-300 // active, never drops
	p, err := New(k, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	k.feed(0, 16)
	var seqs []uint64
	for range 8 {
		got := p.Recv()
		if len(got) > 4 {
			t.Fatalf("Recv returned %d > Burst", len(got))
		}
		for _, f := range got {
			s, ok := parse(f)
			if !ok {
				t.Fatal("damaged")
			}
			seqs = append(seqs, s)
		}
	}
	// Each inner burst of 8: 4 passed, 2 deferred, 2 lost.
	want := []uint64{0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13}
	if !slices.Equal(seqs, want) {
		t.Errorf("delivered %v, want %v", seqs, want)
	}
	st := p.Stats().Rx
	if st.Passed != 8 || st.Deferred != 4 || st.Overflow != 4 || st.Released != 4 {
		t.Errorf("stats %+v", st)
	}
	checkInvariants(t, st, len(seqs))
}

// TestTxNoBuffer: held tx frames wait while the inner port has no buffer
// and go out once it has one.
func TestTxNoBuffer(t *testing.T) {
	clk := &clock{}
	k := newFake(clk, 32)
	cfg := DefaultConfig()
	cfg.Direction, cfg.Duplicate = DirTx, 1
	p, err := New(k, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	for s := range 3 {
		b := p.Buffer()
		f := mkFrame(uint64(s))
		copy(b, f)
		p.Send(len(f))
	}
	k.noBuffer = true
	p.Flush()
	p.Flush()
	if st := p.Stats(); len(k.sent) != 3 || st.Tx.NoBuffer != 2 || st.Held != 3 {
		t.Fatalf("sent %d, stats %+v", len(k.sent), st)
	}
	if p.Buffer() != nil {
		t.Fatal("Buffer not nil")
	}
	k.noBuffer = false
	p.Flush()
	var seqs []uint64
	for _, sf := range k.sent {
		s, ok := parse(sf.f)
		if !ok {
			t.Fatal("damaged")
		}
		seqs = append(seqs, s)
	}
	if !slices.Equal(seqs, []uint64{0, 1, 2, 0, 1, 2}) {
		t.Errorf("sent %v", seqs)
	}
	if st := p.Stats(); st.Held != 0 || st.Tx.Released != 3 {
		t.Errorf("stats %+v", st)
	}
}

// TestSendMisuse: the Tx contract is enforced when tx is faulted.
func TestSendMisuse(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Direction, cfg.Drop = DirTx, 0.5
	p, err := New(newFake(&clock{}, 1), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"no Buffer":  func() { p.Send(60) },
		"zero":       func() { p.Buffer(); p.Send(0) },
		"too long":   func() { p.Buffer(); p.Send(engine.MaxFrameBytes + 1) },
		"Send twice": func() { p.Buffer(); p.Send(60); p.Send(60) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestClose: held frames are let go and the inner port is closed.
func TestClose(t *testing.T) {
	clk := &clock{}
	k := newFake(clk, 32)
	cfg := DefaultConfig()
	cfg.Direction, cfg.Delay, cfg.DelayNs, cfg.Duplicate = DirBoth, 1, 1e9, 1
	p, err := New(k, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	k.feed(0, 10)
	p.Recv()
	p.Recv()
	b := p.Buffer()
	copy(b, mkFrame(1))
	p.Send(61)
	if p.Stats().Held == 0 {
		t.Fatal("nothing held")
	}
	p.Close()
	if st := p.Stats(); st.Held != 0 || !k.closed {
		t.Errorf("after Close: held %d, inner closed %v", st.Held, k.closed)
	}
}

// TestAllocs: no allocation per frame, Recv, Send or Flush, faulting every
// way in both directions over memport, and passing through.
func TestAllocs(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"faults", func() Config {
			c := DefaultConfig()
			c.Direction, c.Drop, c.Duplicate, c.Reorder, c.Delay = DirBoth, 0.05, 0.05, 0.05, 0.1
			c.DelayNs, c.JitterNs = 500, 500
			return c
		}()},
		{"pool exhausted", func() Config {
			c := DefaultConfig()
			c.Direction, c.Delay, c.DelayNs, c.Pool = DirBoth, 0.5, 1e9, 8
			return c
		}()},
		{"pass-through", DefaultConfig()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b, err := memport.Pair(memport.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			clk := &clock{t: 1}
			p, err := New(a, tt.cfg, clk.now)
			if err != nil {
				t.Fatal(err)
			}
			frame := mkFrame(5)
			send := func(tx interface {
				Buffer() []byte
				Send(int)
			}, n int) {
				for range n {
					buf := tx.Buffer()
					if buf == nil {
						return
					}
					copy(buf, frame)
					tx.Send(len(frame))
				}
			}
			round := func() {
				send(b, 32)
				b.Flush()
				for _, f := range p.Recv() {
					if _, ok := parse(f); !ok {
						panic("damaged rx frame")
					}
				}
				send(p, 32)
				p.Flush()
				for len(b.Recv()) > 0 {
				}
				clk.t += 200
			}
			for range 200 { // warm up: fill the pool's queues
				round()
			}
			if allocs := testing.AllocsPerRun(500, round); allocs != 0 {
				t.Errorf("%v allocations per round", allocs)
			}
			st := p.Stats()
			if tt.name == "faults" && (st.Rx.Dropped == 0 || st.Tx.Dropped == 0 || st.Rx.Delayed == 0 || st.Tx.Delayed == 0 ||
				st.Rx.Duplicated == 0 || st.Tx.Duplicated == 0 || st.Rx.Reordered == 0 || st.Tx.Reordered == 0) {
				t.Errorf("not every fault injected: %+v", st)
			}
			if tt.name == "pool exhausted" && (st.Rx.PoolEmpty == 0 || st.Tx.PoolEmpty == 0) {
				t.Errorf("pool never empty: %+v", st)
			}
		})
	}
}
