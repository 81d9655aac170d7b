package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/kv"
)

// benchCmd is a closed loop of GETs from one client: -inflight GETs
// outstanding, keys uniformly random over -keys, each GET's latency from
// its start to its report. -load first SETs every key. (make bench's
// YCSB workloads, Zipfian keys and open loop are rmabench's kv setups.)
func benchCmd(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	var f clientFlags
	f.register(fs)
	keys := fs.Int("keys", 100_000, "keys (key-0000000 ...: 16 bytes)")
	size := fs.Int("value", 32, "value bytes (with -load)")
	load := fs.Bool("load", false, "SET every key first")
	d := fs.Duration("d", 5*time.Second, "how long to run the GETs")
	fs.Parse(args)
	c, _, err := f.dial("rmakv-bench")
	if err != nil {
		return err
	}
	defer c.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%011d", i) }
	if *load {
		t0 := time.Now()
		val := make([]byte, *size)
		for i := range *keys {
			for j := range val {
				val[j] = byte(i + j)
			}
			if err := c.Set(key(i), val); err != nil {
				return fmt.Errorf("set %s: %w", key(i), err)
			}
		}
		logf("loaded %d keys of %d B in %v", *keys, *size, time.Since(t0).Round(time.Millisecond))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	allKeys := make([][]byte, *keys)
	for i := range allKeys {
		allKeys[i] = key(i)
	}
	bufs := make([][]byte, f.inflight)
	starts := make([]time.Time, f.inflight)
	free := make([]int, 0, f.inflight)
	for i := range bufs {
		bufs[i] = make([]byte, 0, max(*size, 64))
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
	for time.Since(t0) < *d {
		for len(free) > 0 {
			b := free[len(free)-1]
			starts[b] = time.Now()
			if err := c.StartGet(allKeys[rng.IntN(*keys)], bufs[b], uint64(b)); err != nil {
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
