package runner

import (
	"testing"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
)

// TestIterateAllocs: one loop iteration (rx burst -> Receive -> Poll ->
// Flush) allocates nothing, with and without frames.
func TestIterateAllocs(t *testing.T) {
	a, b, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.IV = aesni.NewVolatileIVSource(aesni.IVConfig{})
	core, err := engine.New(ecfg, a)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(core, a, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1e9)
	allocs := testing.AllocsPerRun(200, func() {
		for range 8 {
			if f := b.Buffer(); f != nil {
				clear(f[:60])
				b.Send(60)
			}
		}
		b.Flush()
		b.Recv()
		now += 1000
		r.iterate(now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per iteration, want 0", allocs)
	}
}
