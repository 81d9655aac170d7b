package ctl_test

import (
	"testing"

	"github.com/onerma/onerma/engine"
)

// CoreStats reads one core: its counters and its portals alone, in one
// Exec on its goroutine; the cores' replies add up to Stats'.
func TestCoreStats(t *testing.T) {
	e := setup2(t, 2)
	a := dial(t, e, "a")
	b := dial(t, e, "b")
	if a.Core() != 0 || b.Core() != 1 {
		t.Fatalf("cores %d, %d: want 0, 1", a.Core(), b.Core())
	}
	if _, err := b.AllocSlots(3); err != nil {
		t.Fatal(err)
	}
	var ran [2]int
	var posted uint64
	for i := range 2 {
		st, err := e.srv.CoreStats(i, func(*engine.Core) { ran[i]++ })
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Portals) != 1 || st.Portals[0].Core != uint32(i) || len(st.Cores) != 0 || len(st.Tenants) != 0 {
			t.Fatalf("core %d: portals %+v, %d cores, %d tenants: want its one portal", i, st.Portals, len(st.Cores), len(st.Tenants))
		}
		if want := uint64(3 * i); st.SlotsInUse != want {
			t.Errorf("core %d: %d slots in use, want %d", i, st.SlotsInUse, want)
		}
		posted += st.Posted
	}
	if ran != [2]int{1, 1} {
		t.Errorf("also ran %v times per core, want once each", ran)
	}
	all, err := e.srv.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	if all.Posted != posted || all.SlotsInUse != 3 {
		t.Errorf("Stats: posted %d (cores: %d), slots %d, want the cores' sums", all.Posted, posted, all.SlotsInUse)
	}
}
