package engine

import (
	"fmt"
	"testing"
)

// The table of destinations remembers the latest answer of each and,
// when full, forgets the one that answered least recently.
func TestDestTableEviction(t *testing.T) {
	d := newDestTable(4)
	for ip := uint32(1); ip <= 4; ip++ {
		d.answered(ip, int64(ip)*10)
	}
	d.answered(1, 50) // 1 answers again: 2 is now the least recent
	d.answered(5, 60) // full: 2 makes room
	got := ""
	for ip := uint32(1); ip <= 5; ip++ {
		if at, ok := d.lastAnswer(ip); ok {
			got += fmt.Sprintf("%d@%d ", ip, at)
		}
	}
	if want := "1@50 3@30 4@40 5@60 "; got != want || d.evictions != 1 {
		t.Fatalf("table (-want +got)\n-%s\n+%s (evictions %d)", want, got, d.evictions)
	}
	// Many more destinations than entries, answering in turn: the table
	// always holds the latest four, and the index stays whole.
	for k := range 1000 {
		ip := uint32(100 + k%37)
		d.answered(ip, int64(100+k))
		for j := range 4 {
			if k-j < 0 {
				continue
			}
			if at, ok := d.lastAnswer(uint32(100 + (k-j)%37)); !ok || at != int64(100+k-j) {
				t.Fatalf("after %d answers: %d answered at %d, table says %d %v", k+1, 100+(k-j)%37, 100+k-j, at, ok)
			}
		}
		if d.n != 4 {
			t.Fatalf("%d entries", d.n)
		}
	}
	if _, ok := d.lastAnswer(1); ok {
		t.Fatal("destination 1 still known")
	}
}
