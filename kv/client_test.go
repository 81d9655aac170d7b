package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/onerma/onerma/kv"
)

func value(i, n int) []byte {
	v := make([]byte, n)
	for j := range v {
		v[j] = byte(i*31 + j*7 + j>>8)
	}
	return v
}

// SET then GET of values inline in a slot and in the slab (up to 64 KB,
// read in 4 KB READs), misses, DELETE, and overwrites that move a key
// between a slot and a record.
func TestSetGetDelete(t *testing.T) {
	cl := newCluster(t, 3, kv.ServerConfig{SlabBytes: 16 << 20})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 8})
	sizes := []int{0, 1, 32, 47, 48, 100, 1000, 4096, 5000, 64 << 10}
	for i, n := range sizes {
		key := fmt.Appendf(nil, "key-%d", i)
		if err := c.Set(key, value(i, n)); err != nil {
			t.Fatalf("set %d bytes: %v", n, err)
		}
	}
	var buf []byte
	for i, n := range sizes {
		key := fmt.Appendf(nil, "key-%d", i)
		got, err := c.Get(key, buf)
		if err != nil || !bytes.Equal(got, value(i, n)) {
			t.Fatalf("get %q (%d bytes): %d bytes, %v", key, n, len(got), err)
		}
		buf = got
	}
	if _, err := c.Get([]byte("absent"), nil); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("absent key: %v", err)
	}
	// Overwrites: slab to inline and back.
	k := []byte("key-8")
	for round, n := range []int{10, 3000, 40, 70000 % (64 << 10)} {
		if err := c.Set(k, value(100+round, n)); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(k, nil); err != nil || !bytes.Equal(got, value(100+round, n)) {
			t.Fatalf("overwrite %d to %d bytes: %d bytes, %v", round, n, len(got), err)
		}
	}
	if err := c.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(k, nil); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	if err := c.Delete(k); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if err := c.Set(k, make([]byte, 64<<10+1)); !errors.Is(err, kv.ErrTooLarge) {
		t.Fatalf("value above the servers' MaxValue: %v", err)
	}
	st := c.Stats()
	t.Logf("stats: gets %d hits %d misses %d retries %d failovers %d", st.Gets, st.Hits, st.Misses, st.Retries, st.FailoversTotal())
	if st.FailoversTotal() != 0 || st.Errors != 0 {
		t.Fatalf("failovers or errors without a failure: %+v", st)
	}
	for i, s := range cl.servers {
		if ss := s.Stats(); ss.Items != uint64(len(sizes))-1 {
			t.Errorf("server %d holds %d keys, want %d (R = 3 of 3 servers)", i, ss.Items, len(sizes)-1)
		}
	}
}
