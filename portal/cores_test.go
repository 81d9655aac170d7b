package portal_test

import (
	"bytes"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// On an engine of two cores, each portal is served by one core: the
// engine spreads them, an application may ask for one (Options.PinCore),
// and a portal on either core reads the regions of a portal on the other.
func TestPortalOnCore(t *testing.T) {
	e := enginetest.Start(t, enginetest.Opts{
		Cores:  2,
		Engine: func(c *engine.Config) { c.HairpinSelf = true }, // frames to itself through the steered loopback
		Ctl:    func(c *ctl.Config) { c.Sockets[0].Policy.Default = 16 },
	})
	owner := dial(t, e.Socket, "owner")
	pinned, err := portal.DialOptions(e.Socket, "pinned", portal.Options{PinCore: true, Core: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	other := dial(t, e.Socket, "other")
	if owner.Core() != 0 || pinned.Core() != 0 || other.Core() != 1 {
		t.Fatalf("cores: owner %d, pinned %d, other %d; want 0, 0, 1", owner.Core(), pinned.Core(), other.Core())
	}
	if _, err := portal.DialOptions(e.Socket, "x", portal.Options{PinCore: true, Core: 64}); err == nil {
		t.Fatal("core 64 accepted")
	}
	src, err := owner.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*5 + 3)
	}
	for _, p := range []*portal.Portal{pinned, other} {
		p.AllocSlots(1)
		sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		k := src.DeriveKey(engineIP, p.Identity().PID, abi.OpRead)
		if c := read(t, p, src, k, sink); c.Status != abi.StatusOK || !bytes.Equal(sink.Bytes()[:64], src.Bytes()[:64]) {
			t.Fatalf("portal on core %d: %+v", p.Core(), c)
		}
	}
}
