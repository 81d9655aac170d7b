package dpdk

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

func TestJoinChunks(t *testing.T) {
	mem := make([]byte, 10<<10)
	at := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	// Two runs of adjacent chunks with a gap of 100 bytes between them,
	// given out of order.
	chunks := [][]byte{mem[4096:6000], mem[0:1000], mem[6100:8000], mem[1000:4096], mem[8000:]}
	rand.Shuffle(len(chunks), func(i, j int) { chunks[i], chunks[j] = chunks[j], chunks[i] })
	got := joinChunks(chunks)
	want := [][]byte{mem[:6000], mem[6100:]}
	if len(got) != len(want) {
		t.Fatalf("joinChunks gave %d ranges, want %d", len(got), len(want))
	}
	for i := range want {
		if at(got[i]) != at(want[i]) || len(got[i]) != len(want[i]) {
			t.Errorf("range %d: %#x+%d, want %#x+%d", i, at(got[i]), len(got[i]), at(want[i]), len(want[i]))
		}
	}
	if got := joinChunks(nil); len(got) != 0 {
		t.Errorf("joinChunks(nil) = %d ranges", len(got))
	}
}
