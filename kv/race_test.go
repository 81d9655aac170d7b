package kv_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/kv"
)

// versioned is a value that proves itself: a version, bytes derived from
// the key and the version, and a sum over both. A value mixing two
// versions, or cut short, fails check.
func versioned(key []byte, ver uint64, n int) []byte {
	n = max(n, 16)
	v := make([]byte, n)
	binary.LittleEndian.PutUint64(v, ver)
	seed := xxhash.Sum64(key) ^ ver*0x9e3779b97f4a7c15
	for i := 8; i < n-8; i++ {
		v[i] = byte(seed >> (8 * (i % 8)))
		if i%8 == 7 {
			seed = seed*6364136223846793005 + 1442695040888963407
		}
	}
	binary.LittleEndian.PutUint64(v[n-8:], xxhash.Sum64(v[:n-8]))
	return v
}

func checkVersioned(key, v []byte, n int) error {
	if len(v) != max(n, 16) {
		return fmt.Errorf("%d bytes, want %d", len(v), max(n, 16))
	}
	want := versioned(key, binary.LittleEndian.Uint64(v), n)
	if !bytes.Equal(v, want) {
		return fmt.Errorf("version %d: torn or corrupt", binary.LittleEndian.Uint64(v))
	}
	return nil
}

// GETs racing SETs of the same keys, inline and in the slab (records of
// one to several READs): every value returned is one that was set, whole.
// The writers call the servers directly (no RPC in between) to make the
// races as frequent as the server can; readers count the reads they had
// to do again.
func TestConcurrentSetGetNoTornValues(t *testing.T) {
	cl := newCluster(t, 2, kv.ServerConfig{Buckets: 64, SlabBytes: 8 << 20})
	sizes := []int{30, 300, 5000, 20 << 10}
	keys := [][]byte{}
	for i := range 8 {
		keys = append(keys, fmt.Appendf(nil, "hot-%d", i))
	}
	size := func(k int) int { return sizes[k%len(sizes)] }
	for k, key := range keys {
		for _, s := range cl.servers {
			if err := s.Set(key, versioned(key, 0, size(k))); err != nil {
				t.Fatal(err)
			}
		}
	}
	d := 2 * time.Second
	if testing.Short() {
		d = 300 * time.Millisecond
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sets atomic.Uint64
	for si, s := range cl.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ver := uint64(1); ; ver++ {
				select {
				case <-stop:
					return
				default:
				}
				k := int(ver) % len(keys)
				if err := s.Set(keys[k], versioned(keys[k], ver, size(k))); err != nil {
					t.Errorf("server %d: set: %v", si, err)
					return
				}
				sets.Add(1)
			}
		}()
	}
	type result struct {
		gets, hits uint64
		st         kv.ClientStats
	}
	results := make(chan result, 2)
	for r := range 2 {
		c := cl.dial(kv.ClientConfig{MaxInFlight: 16, Replicas: 2})
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res result
			bufs := make([][]byte, 16)
			for i := range bufs {
				bufs[i] = make([]byte, 0, 20<<10+16)
			}
			free := make([]int, 0, len(bufs))
			for i := range bufs {
				free = append(free, i)
			}
			fn := func(tag uint64, val []byte, err error) {
				free = append(free, int(tag&0xff))
				res.gets++
				k := int(tag>>8) % len(keys)
				if err != nil {
					t.Errorf("reader %d: %s: %v", r, keys[k], err)
					return
				}
				if err := checkVersioned(keys[k], val, size(k)); err != nil {
					t.Errorf("reader %d: %s: %v", r, keys[k], err)
				}
				res.hits++
			}
			next := uint64(r)
			for {
				select {
				case <-stop:
					for c.Outstanding() > 0 {
						c.WaitGets(fn)
					}
					res.st = c.Stats()
					results <- res
					return
				default:
				}
				for len(free) > 0 {
					slot := free[len(free)-1]
					next++
					if err := c.StartGet(keys[int(next)%len(keys)], bufs[slot][:0], next<<8|uint64(slot)); err != nil {
						t.Errorf("reader %d: start: %v", r, err)
						break
					}
					free = free[:len(free)-1]
				}
				if _, err := c.WaitGets(fn); err != nil {
					t.Errorf("reader %d: %v", r, err)
				}
			}
		}()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	for range 2 {
		res := <-results
		t.Logf("reader: %d GETs, %d hits, %d retries (reads that raced a SET), %d GETs that raced %d times and moved on, %d failovers; %d SETs in all",
			res.gets, res.hits, res.st.Retries, res.st.RetriesExhausted, 32, res.st.FailoversTotal(), sets.Load())
		if res.hits == 0 || res.hits != res.gets {
			t.Errorf("%d of %d GETs returned a value", res.hits, res.gets)
		}
		// The writers spin on this test's CPUs, so the engine's loop can
		// be late enough for a TIMEOUT (a failover to the other replica);
		// a value the client could not decode would be a bug.
		for st, n := range res.st.Failovers {
			if n > 0 {
				t.Logf("failovers on %v: %d", abi.Status(st), n)
			}
		}
		if res.st.Corrupt != 0 {
			t.Errorf("%d replicas left for returning what could not be decoded", res.st.Corrupt)
		}
	}
}
