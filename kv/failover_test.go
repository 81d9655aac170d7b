package kv_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/kv"
)

// load keeps 8 GETs of keys outstanding (the clients' MaxInFlight is at
// least that) and checks every answer until stop returns true; it returns
// how many GETs ended in an error.
func load(t *testing.T, c *kv.Client, keys [][]byte, vals [][]byte, stop func(n int) bool) (gets, errs int) {
	t.Helper()
	bufs := make([][]byte, 8)
	free := []int{}
	for i := range bufs {
		bufs[i] = make([]byte, 0, 256)
		free = append(free, i)
	}
	fn := func(tag uint64, val []byte, err error) {
		free = append(free, int(tag&0xff))
		gets++
		k := int(tag >> 8)
		if err != nil {
			errs++
			t.Errorf("GET %s: %v", keys[k], err)
		} else if !bytes.Equal(val, vals[k]) {
			t.Fatalf("GET %s: %q, want %q", keys[k], val, vals[k])
		}
	}
	next := 0
	for !stop(gets) {
		for len(free) > 0 {
			b := free[len(free)-1]
			k := next % len(keys)
			next++
			if err := c.StartGet(keys[k], bufs[b], uint64(k)<<8|uint64(b)); err != nil {
				st := c.Stats()
				t.Fatalf("%v with %d GETs outstanding (%d of %d attempts free)", err, c.Outstanding(), st.FreeAttempts, st.Attempts)
			}
			free = free[:len(free)-1]
		}
		if _, err := c.WaitGets(fn); err != nil {
			t.Fatal(err)
		}
	}
	for c.Outstanding() > 0 {
		c.WaitGets(fn)
	}
	return gets, errs
}

func fill(t *testing.T, c *kv.Client, n int) (keys, vals [][]byte) {
	t.Helper()
	for i := range n {
		keys = append(keys, fmt.Appendf(nil, "key-%03d", i))
		vals = append(vals, fmt.Appendf(nil, "value-%d-%s", i, bytes.Repeat([]byte{'x'}, i%100)))
		if err := c.Set(keys[i], vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	return keys, vals
}

// A replica rekeyed under load: its READs fail with
// REMOTE_AUTHENTICATION_FAILURE, each GET goes to the next replica at
// once (no GET fails), the client fetches the new K_d and the replica
// serves again.
func TestFailoverRekey(t *testing.T) {
	cl := newCluster(t, 3, kv.ServerConfig{})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 16})
	keys, vals := fill(t, c, 200)
	load(t, c, keys, vals, func(n int) bool { return n >= 2000 })
	before := c.Stats().Replicas[1].Served
	if err := cl.servers[1].Rekey(); err != nil {
		t.Fatal(err)
	}
	_, errs := load(t, c, keys, vals, func(n int) bool { return n >= 1000 && c.Stats().Replicas[1].Refreshes > 0 })
	mid := c.Stats().Replicas[1].Served
	load(t, c, keys, vals, func(n int) bool { return n >= 3000 })
	st := c.Stats()
	r1 := st.Replicas[1]
	t.Logf("failovers: auth %d, region %d; replica 1: downs %d, refreshes %d, served %d before, %d after",
		st.Failovers[abi.StatusRemoteAuthFailure], st.Failovers[abi.StatusRemoteRegion], r1.Downs, r1.Refreshes, before, r1.Served-mid)
	if errs != 0 || st.Errors != 0 {
		t.Fatalf("%d GETs failed", st.Errors)
	}
	if st.Failovers[abi.StatusRemoteAuthFailure] == 0 || r1.Downs == 0 || r1.Refreshes == 0 {
		t.Fatalf("the rekey went unnoticed: %+v", r1)
	}
	if r1.Served == mid || !r1.Up {
		t.Fatalf("the rekeyed replica serves no GET with its new K_d: %+v", r1)
	}
}

// A replica's server goes away (its portal closed: the engine reclaims its
// regions): READs of it fail at once, GETs go to the other replicas (none
// fails), the replica stays avoided (its probes fail, its RPC is gone) and
// SETs still succeed on the others.
func TestFailoverServerGone(t *testing.T) {
	cl := newCluster(t, 3, kv.ServerConfig{})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 16, AvoidFor: time.Millisecond, AvoidMax: 4 * time.Millisecond})
	keys, vals := fill(t, c, 200)
	load(t, c, keys, vals, func(n int) bool { return n >= 1000 })
	cl.servers[2].Close()
	killed := time.Now()
	_, errs := load(t, c, keys, vals, func(int) bool { return time.Since(killed) > 200*time.Millisecond })
	st := c.Stats()
	r2 := st.Replicas[2]
	t.Logf("failovers: auth %d, region %d; replica 2: downs %d, probes %d (%d OK), up %v; refresh: %v",
		st.Failovers[abi.StatusRemoteAuthFailure], st.Failovers[abi.StatusRemoteRegion], r2.Downs, r2.Probes, r2.ProbesOK, r2.Up, c.ReplicaError(2))
	if errs != 0 || st.Errors != 0 {
		t.Fatalf("%d GETs failed", st.Errors)
	}
	if st.Failovers[abi.StatusRemoteAuthFailure]+st.Failovers[abi.StatusRemoteRegion] == 0 || r2.Up || r2.Probes < 2 || r2.ProbesOK != 0 {
		t.Fatalf("replica 2 after its server went away: %+v", r2)
	}
	if c.ReplicaError(2) == nil {
		t.Fatal("the gone server's view was refreshed")
	}
	for i := range 20 {
		if err := c.Set(keys[i], []byte("new")); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(keys[i], nil); err != nil || string(v) != "new" {
			t.Fatalf("after a SET with a replica gone: %q %v", v, err)
		}
	}
}

// The asynchronous GET path allocates nothing: a hit, a miss, a value in
// the slab. The count is the process's, so the hints' partial batches
// wait for a full one (HintFlush long): their sends and the server's
// reading of them are other goroutines' work, not the GET's.
func TestGetAllocs(t *testing.T) {
	cl := newCluster(t, 3, kv.ServerConfig{})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 4, HintFlush: time.Hour})
	c.Set([]byte("small"), []byte("value"))
	c.Set([]byte("large"), bytes.Repeat([]byte{1}, 6000))
	buf := make([]byte, 0, 8192)
	var got error
	fn := func(_ uint64, _ []byte, err error) { got = err }
	for _, key := range []string{"small", "large", "absent"} {
		k := []byte(key)
		allocs := testing.AllocsPerRun(200, func() {
			if err := c.StartGet(k, buf, 1); err != nil {
				t.Fatal(err)
			}
			for c.Outstanding() > 0 {
				c.WaitGets(fn)
			}
		})
		t.Logf("%s: %v allocations per GET (%v)", key, allocs, got)
		if allocs != 0 {
			t.Errorf("%s: %v allocations per GET", key, allocs)
		}
	}
}

// Hedging every GET at once (HedgeMin 1 ns, no p99 yet): each GET goes to
// two replicas and the slower READ completes as an orphan. StartGet is
// refused only at MaxInFlight, and once every GET is reported every
// attempt and slot is back (resource audit).
func TestHedgeEveryGet(t *testing.T) {
	cl := newCluster(t, 3, kv.ServerConfig{})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 8, Hedge: true, HedgeMin: time.Nanosecond})
	keys, vals := fill(t, c, 100)
	gets, errs := load(t, c, keys, vals, func(n int) bool { return n >= 5000 })
	st := c.Stats()
	t.Logf("%d GETs, %d hedges, %d won by the hedge", gets, st.Hedges, st.HedgeWins)
	if errs != 0 || st.Hedges == 0 {
		t.Fatalf("%d errors, %d hedges", errs, st.Hedges)
	}
	// Orphans finish within a round trip.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.PollGets(func(uint64, []byte, error) {})
		st := c.Stats()
		if st.FreeAttempts == st.Attempts && st.FreeSlots == st.Slots {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempts %d of %d free, slots %d of %d", st.FreeAttempts, st.Attempts, st.FreeSlots, st.Slots)
		}
	}
}
