package kv_test

import (
	"testing"

	"github.com/onerma/onerma/kv"
)

// BenchmarkGet: GETs of a 32-byte value inline in its slot, on one
// in-process engine (client and server on the same core: the READs loop
// back inside it), synchronously and with 16 outstanding.
func BenchmarkGet(b *testing.B) {
	cl := newCluster(b, 1, kv.ServerConfig{})
	c := cl.dial(kv.ClientConfig{MaxInFlight: 16})
	key := []byte("0123456789abcdef")
	if err := c.Set(key, make([]byte, 32)); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	b.Run("sync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Get(key, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("async16", func(b *testing.B) {
		b.ReportAllocs()
		fn := func(_ uint64, _ []byte, err error) {
			if err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			for c.StartGet(key, buf, 0) == kv.ErrBusy {
				c.WaitGets(fn)
			}
		}
		for c.Outstanding() > 0 {
			c.WaitGets(fn)
		}
	})
}
