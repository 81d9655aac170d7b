package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/kv"
)

// benchOptions are rmakv bench's flags.
type benchOptions struct {
	clientFlags
	keys, size int
	load       bool
	d          time.Duration
}

func parseBench(args []string, out io.Writer) (*benchOptions, error) {
	fs := newFlags("bench", out)
	o := &benchOptions{}
	o.register(fs)
	fs.IntVar(&o.keys, "keys", 100_000, "keys (key-0000000 ...: 16 bytes)")
	fs.IntVar(&o.size, "s", 32, "value bytes (with -load)")
	fs.BoolVar(&o.load, "load", false, "SET every key first")
	fs.DurationVar(&o.d, "D", 5*time.Second, "how long to run the GETs")
	fs.Alias("value", "s")
	fs.Alias("d", "D")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	switch {
	case o.keys < 1:
		return nil, fmt.Errorf("-keys %d: want at least 1", o.keys)
	case o.size < 0 || o.size > kv.MaxValueBytes:
		return nil, fmt.Errorf("-s %d: want 0..%d", o.size, kv.MaxValueBytes)
	case o.d <= 0:
		return nil, fmt.Errorf("-D %v: want a positive duration", o.d)
	}
	return o, nil
}

// benchCmd is a closed loop of GETs from one client: -O GETs
// outstanding, keys uniformly random over -keys, each GET's latency from
// its start to its report. -load first SETs every key. (make bench's
// YCSB workloads, Zipfian keys and open loop are rmabench's kv setups.)
func benchCmd(args []string) error {
	o, err := parseBench(args, os.Stderr)
	if err != nil {
		return err
	}
	c, _, err := o.dial("rmakv-bench")
	if err != nil {
		return err
	}
	defer c.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%011d", i) }
	if o.load {
		t0 := time.Now()
		val := make([]byte, o.size)
		for i := range o.keys {
			for j := range val {
				val[j] = byte(i + j)
			}
			if err := c.Set(key(i), val); err != nil {
				return fmt.Errorf("set %s: %w", key(i), err)
			}
		}
		logf("loaded %d keys of %d B in %v", o.keys, o.size, time.Since(t0).Round(time.Millisecond))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	allKeys := make([][]byte, o.keys)
	for i := range allKeys {
		allKeys[i] = key(i)
	}
	bufs := make([][]byte, o.inflight)
	starts := make([]time.Time, o.inflight)
	free := make([]int, 0, o.inflight)
	for i := range bufs {
		bufs[i] = make([]byte, 0, max(o.size, 64))
		free = append(free, i)
	}
	lat := make([]time.Duration, 0, 1<<20)
	var hits, misses, errs int
	fn := func(tag uint64, _ []byte, err error) {
		lat = append(lat, time.Since(starts[tag]))
		free = append(free, int(tag))
		switch {
		case err == nil:
			hits++
		case err == kv.ErrNotFound:
			misses++
		default:
			errs++
		}
	}
	t0 := time.Now()
	for time.Since(t0) < o.d {
		for len(free) > 0 {
			b := free[len(free)-1]
			starts[b] = time.Now()
			if err := c.StartGet(allKeys[rng.IntN(o.keys)], bufs[b], uint64(b)); err != nil {
				return err
			}
			free = free[:len(free)-1]
		}
		if _, err := c.WaitGets(fn); err != nil {
			return err
		}
	}
	for c.Outstanding() > 0 {
		c.WaitGets(fn)
	}
	el := time.Since(t0)
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	st := c.Stats()
	fmt.Printf("%d GETs in %v: %.0f GETs/s, p50 %v p99 %v p99.9 %v; hits %d misses %d errors %d; retries %d failovers %d hedges %d (won %d)\n",
		len(lat), el.Round(time.Millisecond), float64(len(lat))/el.Seconds(), q(0.5), q(0.99), q(0.999),
		hits, misses, errs, st.Retries, st.FailoversTotal(), st.Hedges, st.HedgeWins)
	for s, n := range st.Failovers {
		if n > 0 {
			fmt.Printf("  failovers on %v: %d\n", abi.Status(s), n)
		}
	}
	return nil
}
