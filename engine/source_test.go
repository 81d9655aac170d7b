package engine

import (
	"bytes"
	"errors"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// testSource posts its command post times at its next Poll and keeps the
// completions.
type testSource struct {
	port *SourcePort
	cmd  abi.Command
	post int
	got  []abi.Completion
}

func (s *testSource) Poll(now int64) int {
	n := s.post
	for ; s.post > 0; s.post-- {
		s.port.Post(now, &s.cmd)
	}
	return n
}

func (s *testSource) Completed(now int64, cpl abi.Completion) { s.got = append(s.got, cpl) }

// TestSourceAttach: an attached op source posts from Poll and gets its
// completions; it holds slots and regions as a portal does, one source
// per core, the control plane sees no portal at its entry, and Detach
// gives everything back.
func TestSourceAttach(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	c := newCore(t, cfg, newTestTx(64))
	src := &testSource{}
	port, err := c.AttachSource(src, 2)
	if err != nil {
		t.Fatal(err)
	}
	src.port = port
	if _, err := c.AttachSource(&testSource{}, 1); !errors.Is(err, ErrSourceAttached) {
		t.Fatalf("a second source: %v", err)
	}
	if err := c.ClosePortal(port.id); !errors.Is(err, ErrNoPortal) {
		t.Fatalf("ClosePortal of the source's entry: %v", err)
	}
	slots, err := port.AllocSlots(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := port.AllocSlots(1); !errors.Is(err, ErrSlotCap) {
		t.Fatalf("a slot past the cap: %v", err)
	}
	target, sink := make([]byte, 4096), make([]byte, 4096)
	pattern(target, 0x2c)
	kr := aesni.Key{9, 8, 7}
	trid, err := port.RegisterRegion(target, abi.PermRemoteRead, kr)
	if err != nil {
		t.Fatal(err)
	}
	lrid, err := port.RegisterRegion(sink, abi.PermLocalWrite, kr)
	if err != nil {
		t.Fatal(err)
	}
	src.cmd = abi.Command{Op: abi.OpRead, Slot: slots[1], Cookie: 7, RemoteAddr: ipOf("10.0.0.1"), RemoteRegion: trid,
		LocalRegion: lrid, RemoteOffset: 64, Length: 256,
		Key: aesni.DeriveKey(kr, cfg.LocalIP.As4(), SelfTestPID, uint8(abi.OpRead))}
	src.post = 1
	for now := int64(1000); len(src.got) == 0 && now < 1e6; now += 1000 {
		c.Poll(now)
	}
	if len(src.got) != 1 || src.got[0].Status != abi.StatusOK || src.got[0].Cookie != 7 || !bytes.Equal(sink[:256], target[64:320]) {
		t.Fatalf("completions %+v", src.got)
	}
	if s := c.Stats(); s.Posted != 1 || s.CompletedByOp[abi.OpRead][abi.StatusOK] != 1 || s.SlotsInUse != 2 {
		t.Fatalf("stats: posted %d, completed %d, %d slots", s.Posted, s.CompletedByOp[abi.OpRead][abi.StatusOK], s.SlotsInUse)
	}
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}

	id := port.id
	port.Detach()
	if err := c.Audit(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.SlotsInUse != 0 || s.OpsInFlight != 0 || c.regions.use[0].n != 0 || c.portals.p[id].used || c.src != nil {
		t.Fatalf("after Detach: %d slots, %d ops, %d regions, entry used %v", s.SlotsInUse, s.OpsInFlight, c.regions.use[0].n, c.portals.p[id].used)
	}
	if n := c.Poll(1e6); n != 0 {
		t.Fatalf("Poll after Detach did %d", n)
	}
	if p, err := c.AttachSource(&testSource{}, 1); err != nil {
		t.Fatalf("attaching again: %v", err)
	} else {
		p.Detach()
	}
}
