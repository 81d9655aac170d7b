package kv_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"encoding/binary"

	"github.com/onerma/onerma/kv"
)

// A GET is one LOOKUP when the server's index takes them: an inline
// value comes in the bucket a miss brings, a record up to about 4 KB with
// its slot; a larger record goes on with READs. With NoLookup on either
// side every GET is READs, and the values are the same.
func TestGetsAreLookups(t *testing.T) {
	for _, tc := range []struct {
		name           string
		server, client bool // NoLookup
	}{{"lookup", false, false}, {"server without", true, false}, {"client without", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCluster(t, 1, kv.ServerConfig{Buckets: 64, SlabBytes: 8 << 20, NoLookup: tc.server})
			c := cl.dial(kv.ClientConfig{NoLookup: tc.client})
			sizes := []int{30, 300, 3000, 5000}
			for i, n := range sizes {
				key := fmt.Appendf(nil, "k%d", i)
				if err := c.Set(key, versioned(key, 1, n)); err != nil {
					t.Fatal(err)
				}
			}
			const rounds = 20
			for range rounds {
				for i, n := range sizes {
					key := fmt.Appendf(nil, "k%d", i)
					v, err := c.Get(key, nil)
					if err != nil {
						t.Fatalf("%s: %v", key, err)
					}
					if err := checkVersioned(key, v, n); err != nil {
						t.Fatalf("%s: %v", key, err)
					}
				}
				if _, err := c.Get([]byte("absent"), nil); err != kv.ErrNotFound {
					t.Fatalf("absent: %v", err)
				}
			}
			st := c.Stats()
			if tc.server || tc.client {
				if st.Lookups != 0 {
					t.Fatalf("%d lookups", st.Lookups)
				}
				return
			}
			// Every GET one LOOKUP; the 5000-byte value's go on with READs.
			if gets := uint64(rounds * (len(sizes) + 1)); st.Lookups != gets || st.LookupReads != rounds {
				t.Fatalf("%d GETs: %d lookups, %d went on with READs (want %d)", gets, st.Lookups, st.LookupReads, rounds)
			}
		})
	}
}

// SETs racing GETs of one key, values of 1 KB (one LOOKUP each): a GET
// never returns a value older than the last SET that completed before it
// started, nor a torn one, round after round.
func TestSetThenGetNeverOld(t *testing.T) {
	cl := newCluster(t, 1, kv.ServerConfig{Buckets: 16, SlabBytes: 8 << 20})
	srv := cl.servers[0]
	key := []byte("hot")
	if err := srv.Set(key, versioned(key, 0, 1000)); err != nil {
		t.Fatal(err)
	}
	d := 2 * time.Second
	if testing.Short() {
		d = 300 * time.Millisecond
	}
	var done atomic.Uint64 // the last version whose SET returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopSets := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopSets() // also when a check fails: the server closes after
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ver := uint64(1); ; ver++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := srv.Set(key, versioned(key, ver, 1000)); err != nil {
				t.Errorf("set: %v", err)
				return
			}
			done.Store(ver)
		}
	}()
	c := cl.dial(kv.ClientConfig{})
	buf := make([]byte, 0, 2048)
	gets, gaveUp := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); gets++ {
		before := done.Load()
		v, err := c.Get(key, buf[:0])
		if errors.Is(err, kv.ErrUnavailable) {
			// Every read of its retry bound found the record being
			// rewritten (one key SET back to back): the GET gives up,
			// returning nothing, which breaks no promise.
			gaveUp++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := checkVersioned(key, v, 1000); err != nil {
			t.Fatal(err)
		}
		if ver := binary.LittleEndian.Uint64(v); ver < before {
			t.Fatalf("GET %d returned version %d, after version %d was SET", gets, ver, before)
		}
	}
	stopSets()
	st := c.Stats()
	t.Logf("%d GETs against %d SETs: %d lookups, %d read again, %d gave up", gets, done.Load(), st.Lookups, st.Retries, gaveUp)
	if st.Lookups == 0 || gaveUp > gets/2 {
		t.Fatalf("%d of %d GETs gave up, %d lookups: the test checked too few", gaveUp, gets, st.Lookups)
	}
}

// GETs at the bounds of one LOOKUP: the largest record it brings back
// with its slot is one op; a byte more, and the LOOKUP goes on with the
// record's READ; the values are the same either way.
func TestLookupRecordBounds(t *testing.T) {
	cl := newCluster(t, 1, kv.ServerConfig{Buckets: 64, SlabBytes: 8 << 20})
	c := cl.dial(kv.ClientConfig{})
	key := []byte("bound")
	max := kv.MaxLookupValue(key)
	for _, tc := range []struct {
		n     int
		reads uint64 // GETs that went on with READs
	}{{kv.MaxInline - len(key), 0}, {kv.MaxInline - len(key) + 1, 0}, {max - 1, 0}, {max, 0}, {max + 1, 1}, {8000, 1}} {
		if err := c.Set(key, versioned(key, uint64(tc.n), tc.n)); err != nil {
			t.Fatal(err)
		}
		before := c.Stats()
		v, err := c.Get(key, nil)
		if err != nil {
			t.Fatalf("%d B: %v", tc.n, err)
		}
		if err := checkVersioned(key, v, tc.n); err != nil {
			t.Fatalf("%d B: %v", tc.n, err)
		}
		st := c.Stats()
		if st.Lookups-before.Lookups != 1 || st.LookupReads-before.LookupReads != tc.reads || st.Retries != before.Retries {
			t.Fatalf("%d B: %d LOOKUPs, %d went on with READs (want %d), %d retries", tc.n,
				st.Lookups-before.Lookups, st.LookupReads-before.LookupReads, tc.reads, st.Retries-before.Retries)
		}
	}
}

// A record a LOOKUP brings back whose sum fails (torn: the server was
// writing it) is looked up again, never returned: with the one server,
// the GET ends ErrUnavailable once its retries are spent. Whole again,
// the record comes back in one LOOKUP.
func TestLookupTornRecordRetried(t *testing.T) {
	cl := newCluster(t, 1, kv.ServerConfig{Buckets: 64, SlabBytes: 8 << 20})
	c := cl.dial(kv.ClientConfig{})
	key := []byte("torn")
	if err := c.Set(key, versioned(key, 7, 1000)); err != nil {
		t.Fatal(err)
	}
	rec := kv.RecordOf(cl.servers[0], key)
	if rec == nil {
		t.Fatal("no record")
	}
	before := c.Stats()
	rec[100] ^= 0x40
	v, err := c.Get(key, nil)
	rec[100] ^= 0x40
	st := c.Stats()
	if !errors.Is(err, kv.ErrUnavailable) || v != nil {
		t.Fatalf("GET of a torn record: %d bytes, %v; want %v", len(v), err, kv.ErrUnavailable)
	}
	// Each pass over the replica (the one server, tried again as the next)
	// reads it again 32 times before it gives up.
	retries, spent := st.Retries-before.Retries, st.RetriesExhausted-before.RetriesExhausted
	if spent == 0 || retries != 32*spent || st.Corrupt != before.Corrupt || st.LookupReads != before.LookupReads {
		t.Fatalf("%d retries, %d passes spent, %d corrupt, %d went on with READs", retries, spent,
			st.Corrupt-before.Corrupt, st.LookupReads-before.LookupReads)
	}
	before = c.Stats()
	v, err = c.Get(key, nil)
	if err != nil || checkVersioned(key, v, 1000) != nil {
		t.Fatalf("whole again: %d bytes, %v", len(v), err)
	}
	if st := c.Stats(); st.Lookups-before.Lookups != 1 || st.LookupReads != before.LookupReads {
		t.Fatalf("whole again: %d LOOKUPs, %d went on with READs", st.Lookups-before.Lookups, st.LookupReads-before.LookupReads)
	}
}

// A client whose MaxValue keeps every value of a key in its slot reads
// the bucket (a LOOKUP would only bring it back); with a longer key, or a
// larger MaxValue, it looks up.
func TestInlineOnlyKeysReadTheBucket(t *testing.T) {
	cl := newCluster(t, 1, kv.ServerConfig{Buckets: 64, SlabBytes: 8 << 20})
	short, long := []byte("k16-0123456789ab"), []byte("a key of thirty-three bytes, long")
	for _, key := range [][]byte{short, long} {
		if err := cl.servers[0].Set(key, versioned(key, 1, 32)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		maxValue int
		key      []byte
		lookups  uint64
	}{{32, short, 0}, {33, short, 1}, {32, long, 1}, {0, short, 1}} {
		c := cl.dial(kv.ClientConfig{MaxValue: tc.maxValue})
		v, err := c.Get(tc.key, nil)
		if err != nil || checkVersioned(tc.key, v, 32) != nil {
			t.Fatalf("MaxValue %d, key of %d: %d bytes, %v", tc.maxValue, len(tc.key), len(v), err)
		}
		if st := c.Stats(); st.Lookups != tc.lookups || st.Hits != 1 {
			t.Fatalf("MaxValue %d, key of %d: %d LOOKUPs, %d hits; want %d LOOKUPs", tc.maxValue, len(tc.key), st.Lookups, st.Hits, tc.lookups)
		}
	}
}
