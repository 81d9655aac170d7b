package ctl_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/portal"
)

// The server closes an application's connection only after the core let
// go of its portal: the moment the application sees the hang-up, its
// slots and regions are already back, so nothing more is written into its
// rings or regions (the portal then reports its ops in flight failed).
func TestServerCloseReclaimsBeforeHangUp(t *testing.T) {
	e := setup(t, nil)
	p := dial(t, e, "held")
	if _, err := p.AllocSlots(7); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RegisterRegion(4096, abi.PermAll); err != nil {
		t.Fatal(err)
	}
	if got := e.stats(t).SlotsInUse; got != 7 {
		t.Fatalf("SlotsInUse = %d, want 7", got)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.srv.Close() }()
	deadline := time.Now().Add(5 * time.Second)
	for p.Gone() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the portal never saw its connection close")
		}
		time.Sleep(50 * time.Microsecond)
	}
	if got := e.stats(t).SlotsInUse; got != 0 {
		t.Fatalf("SlotsInUse = %d when the application saw the hang-up, want 0", got)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := p.Gone(); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("Gone() = %v", err)
	}
}
