package kv_test

import (
	"bufio"
	"bytes"
	"container/list"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/onerma/onerma/kv"
)

// The cache's hit ratio against memcached's at equal memory, on the same
// Zipfian key stream (theta 0.99), both used as caches are: a GET, and on
// a miss a SET of the key. Keys are 16 bytes, values 32 (HERD's sizes).
// The stream goes in batches of 32 keys: the GETs of a batch (asynchronous
// GETs here, one multi-get there), then the SETs of its misses. The
// cache's memory is its index region (hitBuckets × 8 slots of 64 B: a key
// and value of 48 B fit a slot) plus a 1 MB slab it does not use;
// memcached's is its -m (item memory; its hash table comes on top).
// Eviction here is LRU within a bucket by the clients' hints (every hit is
// reported, in batches); memcached's its segmented LRU.
func TestHitRatioVsMemcached(t *testing.T) {
	mc, err := exec.LookPath("memcached")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("memcached is not installed (scripts/setup.sh installs it)")
		}
		t.Skip("memcached is not installed")
	}
	// 2 MB each at scale 1: 2^12 buckets × 8 slots × 64 B, and
	// memcached -m 2; keys and GETs grow with the scale.
	scale := *hitScale
	if scale < 1 || scale&(scale-1) != 0 {
		t.Fatalf("-hitratio.scale %d: want a power of two", scale)
	}
	const batch = 32
	keys, warm, measure := 100_000*scale, 100_000*scale, 100_000*scale
	hitBuckets, memMB := uint64(1<<12*scale), 2*scale
	stream := zipfStream(keys, 0.99, warm+measure, 42)
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%012d", i) }
	value := bytes.Repeat([]byte{'v'}, 32)

	// OneRMA's cache: one server, one client, on an in-process engine.
	cl := newCluster(t, 1, kv.ServerConfig{Buckets: hitBuckets, SlabBytes: 1 << 20, MaxValue: 1024})
	srv := cl.servers[0]
	c := cl.dial(kv.ClientConfig{MaxInFlight: batch, MaxValue: 1024})
	ours := runHitRatio(t, stream, batch, warm, key, func(ks [][]byte, hit []bool) {
		for i, k := range ks {
			for {
				err := c.StartGet(k, nil, uint64(i))
				if err == nil {
					break
				}
				if err != kv.ErrBusy {
					t.Fatal(err)
				}
				c.WaitGets(func(tag uint64, _ []byte, err error) { hit[tag] = err == nil })
			}
		}
		for c.Outstanding() > 0 {
			c.WaitGets(func(tag uint64, _ []byte, err error) { hit[tag] = err == nil })
		}
	}, func(k []byte) {
		if err := srv.Set(k, value); err != nil {
			t.Fatal(err)
		}
	})
	c.Close() // sends the last hints
	st := srv.Stats()
	t.Logf("OneRMA cache: index %.0f MB + 1 MB slab: hit ratio %.4f; %d keys held, %d evicted, %d hints (%d for keys gone)",
		float64(hitBuckets*8*64)/(1<<20), ours, st.Items, st.EvictedIndex, st.Hints, st.HintsUnmatched)

	// memcached, its item memory as large as the index; and as large as
	// the index and the slab together.
	var theirs float64
	for _, mb := range []int{memMB, memMB + 1} {
		m := startMemcached(t, mc, mb)
		r := runHitRatio(t, stream, batch, warm, key, m.multiGet, func(k []byte) { m.set(k, value) })
		m.flush()
		t.Logf("memcached -m %d: hit ratio %.4f; %s", mb, r, m.stats("curr_items", "evictions"))
		if mb == memMB {
			theirs = r
		}
	}
	lru := exactLRU(stream, int(hitBuckets)*8, warm)
	t.Logf("an exact LRU of as many keys as the cache has slots (%d): hit ratio %.4f", hitBuckets*8, lru)
	if ours <= theirs {
		t.Errorf("hit ratio %.4f, memcached's %.4f at equal memory", ours, theirs)
	}
}

var hitScale = flag.Int("hitratio.scale", 1, "TestHitRatioVsMemcached: memory, keys and GETs × this (a power of two)")

// exactLRU is the hit ratio after warm keys of a cache of n keys that
// evicts the least recently used, fed the stream as the caches are.
func exactLRU(stream []int, n, warm int) float64 {
	at := map[int]*list.Element{}
	l := list.New()
	hits := 0
	for i, k := range stream {
		if e, ok := at[k]; ok {
			l.MoveToFront(e)
			if i >= warm {
				hits++
			}
			continue
		}
		at[k] = l.PushFront(k)
		if l.Len() > n {
			delete(at, l.Remove(l.Back()).(int))
		}
	}
	return float64(hits) / float64(len(stream)-warm)
}

// zipfStream draws n keys of 0..keys-1 with P(k) ∝ 1/(k+1)^theta
// (inverse transform over the exact distribution), scattered over the key
// space by a fixed permutation so that hot keys are not neighbours.
func zipfStream(keys int, theta float64, n int, seed uint64) []int {
	cdf := make([]float64, keys)
	sum := 0.0
	for k := range keys {
		sum += 1 / math.Pow(float64(k+1), theta)
		cdf[k] = sum
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	perm := rng.Perm(keys)
	out := make([]int, n)
	for i := range out {
		r, _ := slices.BinarySearch(cdf, rng.Float64()*sum)
		out[i] = perm[min(r, keys-1)]
	}
	return out
}

// runHitRatio feeds the stream in batches to get (which marks hits) and
// set (called for every miss), and returns the hit ratio after warm keys.
func runHitRatio(t *testing.T, stream []int, batch, warm int, key func(int) []byte,
	get func(keys [][]byte, hit []bool), set func(key []byte)) float64 {
	t.Helper()
	ks := make([][]byte, batch)
	hit := make([]bool, batch)
	hits, gets := 0, 0
	start := time.Now()
	for at := 0; at < len(stream); at += batch {
		n := min(batch, len(stream)-at)
		for i := range n {
			ks[i] = key(stream[at+i])
			hit[i] = false
		}
		get(ks[:n], hit[:n])
		for i := range n {
			if at+i >= warm {
				gets++
				if hit[i] {
					hits++
				}
			}
			if !hit[i] {
				set(ks[i])
			}
		}
	}
	t.Logf("%d GETs in %v", len(stream), time.Since(start).Round(time.Millisecond))
	return float64(hits) / float64(gets)
}

// memcached is a memcached process and a text-protocol connection to it.
type memcached struct {
	t   *testing.T
	c   net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	cmd *exec.Cmd
}

func startMemcached(t *testing.T, bin string, mb int) *memcached {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", strconv.Itoa(mb), "-t", "1"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	m := &memcached{t: t, cmd: exec.Command(bin, args...)}
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.cmd.Process.Kill(); m.cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m.c, err = net.Dial("tcp", ln.Addr().String()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcached does not answer: %v", err)
		}
	}
	t.Cleanup(func() { m.c.Close() })
	m.r, m.w = bufio.NewReader(m.c), bufio.NewWriter(m.c)
	return m
}

// multiGet asks for every key at once and marks the ones returned.
func (m *memcached) multiGet(keys [][]byte, hit []bool) {
	m.w.WriteString("get")
	for _, k := range keys {
		m.w.WriteByte(' ')
		m.w.Write(k)
	}
	m.w.WriteString("\r\n")
	m.flush()
	for {
		line := m.line()
		if line == "END" {
			return
		}
		var k string
		var flags, n int
		if _, err := fmt.Sscanf(line, "VALUE %s %d %d", &k, &flags, &n); err != nil {
			m.t.Fatalf("memcached: %q: %v", line, err)
		}
		if _, err := m.r.Discard(n + 2); err != nil {
			m.t.Fatal(err)
		}
		for i, key := range keys {
			if string(key) == k {
				hit[i] = true
			}
		}
	}
}

// set stores without waiting for a reply (noreply): the next request's
// reply comes after it.
func (m *memcached) set(key, value []byte) {
	fmt.Fprintf(m.w, "set %s 0 0 %d noreply\r\n", key, len(value))
	m.w.Write(value)
	m.w.WriteString("\r\n")
}

func (m *memcached) flush() {
	if err := m.w.Flush(); err != nil {
		m.t.Fatal(err)
	}
}

func (m *memcached) line() string {
	l, err := m.r.ReadString('\n')
	if err != nil {
		m.t.Fatal(err)
	}
	return string(bytes.TrimRight([]byte(l), "\r\n"))
}

// stats returns the named lines of memcached's "stats".
func (m *memcached) stats(names ...string) string {
	m.w.WriteString("stats\r\n")
	m.flush()
	var out []string
	for {
		l := m.line()
		if l == "END" {
			return fmt.Sprint(out)
		}
		var name, v string
		fmt.Sscanf(l, "STAT %s %s", &name, &v)
		if slices.Contains(names, name) {
			out = append(out, name+" "+v)
		}
	}
}
