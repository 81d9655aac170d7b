package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onerma/onerma/kv"
)

// pollUpdates polls c until want more updates have been reported (each tag
// recorded in got) or a deadline passes.
func pollUpdates(t *testing.T, c *kv.Client, got map[uint64]error, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < want; {
		n += c.PollUpdates(func(tag uint64, err error) {
			if _, dup := got[tag]; dup {
				t.Fatalf("update %d reported twice", tag)
			}
			got[tag] = err
		})
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d updates reported after 10 s (%d outstanding)", n, want, c.UpdatesOutstanding())
		}
	}
}

// Asynchronous SETs and DELETEs: pipelined on each replica's connection,
// at most MaxUpdates outstanding, each reported exactly once with its
// result; GETs go on meanwhile; a replica that goes away fails its part
// of every update outstanding or started later, which still succeed on
// the other replicas.
func TestStartSet(t *testing.T) {
	cl := newCluster(t, 3, kv.ServerConfig{SlabBytes: 8 << 20})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 8, MaxUpdates: 4})
	key := func(i int) []byte { return fmt.Appendf(nil, "async-%d", i) }
	size := func(i int) int { return []int{8, 40, 1000, 5000}[i%4] }
	got := make(map[uint64]error)

	// Fill the pool, then one more.
	for i := range 4 {
		if err := c.StartSet(key(i), value(i, size(i)), uint64(i)); err != nil {
			t.Fatalf("StartSet %d: %v", i, err)
		}
	}
	if err := c.StartSet(key(4), value(4, 8), 4); !errors.Is(err, kv.ErrBusy) {
		t.Fatalf("StartSet beyond MaxUpdates: %v, want ErrBusy", err)
	}
	pollUpdates(t, c, got, 4)

	// A stream of 200, four outstanding at a time, with GETs of the keys
	// whose SETs were reported in between.
	const n = 200
	var buf []byte
	for i := 4; i < n; {
		switch err := c.StartSet(key(i), value(i, size(i)), uint64(i)); {
		case err == nil:
			i++
			continue
		case !errors.Is(err, kv.ErrBusy):
			t.Fatalf("StartSet %d: %v", i, err)
		}
		c.PollUpdates(func(tag uint64, err error) { got[tag] = err })
		j := i / 2
		if _, reported := got[uint64(j)]; !reported {
			continue // its SET may not have reached every replica yet
		}
		if v, err := c.Get(key(j), buf); err != nil || !bytes.Equal(v, value(j, size(j))) {
			t.Fatalf("GET %d while SETs are outstanding: %d bytes, %v", j, len(v), err)
		}
	}
	pollUpdates(t, c, got, n-len(got))
	for i := range n {
		if err, ok := got[uint64(i)]; !ok || err != nil {
			t.Fatalf("update %d: reported %v, %v", i, ok, err)
		}
		v, err := c.Get(key(i), buf)
		if err != nil || !bytes.Equal(v, value(i, size(i))) {
			t.Fatalf("GET %d: %d bytes, %v", i, len(v), err)
		}
		buf = v
	}
	// DELETE: a key held, and one no replica holds.
	if err := c.StartDelete(key(0), 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.StartDelete([]byte("never-set"), 1001); err != nil {
		t.Fatal(err)
	}
	pollUpdates(t, c, got, 2)
	if got[1000] != nil || !errors.Is(got[1001], kv.ErrNotFound) {
		t.Fatalf("DELETEs: %v and %v, want nil and ErrNotFound", got[1000], got[1001])
	}
	if _, err := c.Get(key(0), nil); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	for i, s := range cl.servers {
		if ss := s.Stats(); ss.Sets != n || ss.Deletes != 1 {
			t.Errorf("server %d applied %d SETs and %d DELETEs, want %d and 1", i, ss.Sets, ss.Deletes, n)
		}
	}

	// One replica goes away with updates outstanding and after.
	for i := range 4 {
		if err := c.StartSet(key(i), value(i+1, 16), uint64(2000+i)); err != nil {
			t.Fatal(err)
		}
	}
	cl.servers[2].Close()
	pollUpdates(t, c, got, 4)
	for i := 4; i < 12; {
		if err := c.StartSet(key(i), value(i+1, 16), uint64(2000+i)); err == nil {
			i++
			continue
		} else if !errors.Is(err, kv.ErrBusy) {
			t.Fatal(err)
		}
		pollUpdates(t, c, got, 1)
	}
	pollUpdates(t, c, got, c.UpdatesOutstanding())
	for i := range 12 {
		if err := got[uint64(2000+i)]; err != nil {
			t.Fatalf("update %d with one replica gone: %v", i, err)
		}
	}
	if c.UpdatesOutstanding() != 0 {
		t.Fatalf("%d updates outstanding after all were reported", c.UpdatesOutstanding())
	}
	st := c.Stats()
	if st.Replicas[2].SetErrors == 0 || st.Replicas[0].SetErrors != 0 || st.Replicas[1].SetErrors != 0 {
		t.Fatalf("SetErrors by replica %d %d %d: want some on the closed one only",
			st.Replicas[0].SetErrors, st.Replicas[1].SetErrors, st.Replicas[2].SetErrors)
	}
	// A synchronous SET while asynchronous ones are outstanding.
	if err := c.StartSet(key(1), value(7, 16), 3000); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(key(2), value(8, 16)); err != nil {
		t.Fatal(err)
	}
	pollUpdates(t, c, got, 1)
	if err := got[3000]; err != nil {
		t.Fatal(err)
	}
	// WaitUpdates blocks until one has ended, and returns at once with
	// none outstanding.
	for i := range 3 {
		if err := c.StartSet(key(i), value(9, 16), uint64(4000+i)); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 3; {
		k := c.WaitUpdates(func(tag uint64, err error) { got[tag] = err })
		if k == 0 {
			t.Fatalf("WaitUpdates returned nothing with %d updates outstanding", c.UpdatesOutstanding())
		}
		n += k
	}
	if n := c.WaitUpdates(func(uint64, error) {}); n != 0 || got[4000] != nil || got[4001] != nil || got[4002] != nil {
		t.Fatalf("WaitUpdates with none outstanding: %d; results %v %v %v", n, got[4000], got[4001], got[4002])
	}
}
