package faultport_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/faultport"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// TestRekeyRaceDelayedPull: the rekey race with real delay injection. A
// real engine core sends every frame to itself out of a loopback port
// wrapped in a Port that holds each frame it transmits for delayNs, so
// each hop of a remote REKEY takes that long: its request ①, the pull ②,
// the key ③ and the answer. While the pull is held, the region's owner
// rekeys it through the control socket (its revoking Rekey). The REKEY's
// key arrives after that, under a key the region no longer has: it is not
// installed, the REKEY ends REMOTE_REGION, reads with the owner's new key
// succeed and reads with the REKEY holder's key fail authentication.
func TestRekeyRaceDelayedPull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an engine")
	}
	const delayNs = int64(100 * time.Millisecond)
	fcfg := faultport.DefaultConfig()
	fcfg.Direction = faultport.DirTx
	fcfg.Delay, fcfg.DelayNs, fcfg.Seed = 1, delayNs, 3
	ip := netip.MustParseAddr("10.8.0.2")
	var fp *faultport.Port
	e := enginetest.Start(t, enginetest.Opts{
		Engine: func(c *engine.Config) {
			c.LocalIP = ip
			c.HairpinSelf = true
			c.Timeout = time.Second // well beyond the three held hops between ② and the answer
		},
		Port: func(lb *memport.Port) runner.Port {
			var err error
			if fp, err = faultport.New(lb, fcfg, nil); err != nil {
				t.Fatal(err)
			}
			return fp
		},
	})
	stats := func() (engine.Stats, faultport.Stats) {
		var cs engine.Stats
		var fs faultport.Stats
		if err := e.Runner.Exec(func(c *engine.Core) { cs, fs = c.Stats(), fp.Stats() }); err != nil {
			t.Fatal(err)
		}
		return cs, fs
	}

	owner, err := portal.Dial(e.Socket, "owner")
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	region, err := owner.RegisterRegion(4096, portal.PermRemoteRead|portal.PermRemoteRekey)
	if err != nil {
		t.Fatal(err)
	}
	for i := range region.Bytes() {
		region.Bytes()[i] = byte(i * 7)
	}

	// The REKEY holder: given K_d for REKEY under the region's first key.
	holder, err := portal.Dial(e.Socket, "rekeyer")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	hid := holder.Identity()
	slots, err := holder.AllocSlots(2)
	if err != nil {
		t.Fatal(err)
	}
	local, err := holder.RegisterRegion(4096, portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	heldKr := portal.Key{0x48, 0x4c, 0x44, 0x72, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	copy(local.Bytes(), heldKr[:])
	if err := holder.Submit(&portal.Op{Type: portal.OpRekey, Slot: slots[0], Cookie: 1, Remote: ip,
		RemoteRegion: region.ID(), Key: region.DeriveKey(hid.Addr, hid.PID, portal.OpRekey),
		Local: local, Length: portal.KeySize}); err != nil {
		t.Fatal(err)
	}

	// ① arrives after one delay; the engine pulls: ② is held now.
	enginetest.Eventually(t, "the REKEY's pull", func() bool { cs, _ := stats(); return cs.PullsIssued == 1 })
	if cs, fs := stats(); cs.PullsInUse != 1 || cs.RemoteRekeys != 0 || fs.Tx.Delayed == 0 {
		t.Fatalf("before the owner's Rekey: pulls in use %d, remote rekeys %d, frames delayed %d", cs.PullsInUse, cs.RemoteRekeys, fs.Tx.Delayed)
	}
	ownerKr := portal.Key{0x4f, 0x57, 0x4e, 0x72, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if err := owner.Rekey(region, ownerKr); err != nil {
		t.Fatal(err)
	}
	if cs, _ := stats(); cs.PullsInUse != 1 {
		t.Fatalf("the REKEY's key arrived before its owner's Rekey returned (pulls in use %d): hops of %v are too short here", cs.PullsInUse, time.Duration(delayNs))
	}

	// ② reaches the holder's engine, ③ is sent and held, then arrives.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]portal.Completion, 1)
	if n, err := holder.Wait(ctx, out); err != nil || n != 1 || out[0].Cookie != 1 || out[0].Status != portal.StatusRemoteRegion {
		t.Fatalf("REKEY whose key arrived after its owner's Rekey: %d %+v %v", n, out[0], err)
	}
	cs, fs := stats()
	if cs.RekeysSuperseded != 1 || cs.RemoteRekeys != 0 || cs.Rekeys != 1 || cs.PullsInUse != 0 || fs.Tx.Delayed < 4 {
		t.Fatalf("superseded %d, remote rekeys %d, rekeys %d, pulls in use %d, frames delayed %d",
			cs.RekeysSuperseded, cs.RemoteRekeys, cs.Rekeys, cs.PullsInUse, fs.Tx.Delayed)
	}

	// The region's key is the owner's: its K_d reads, the holder's does not.
	sink, err := holder.RegisterRegion(4096, portal.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	read := func(kr portal.Key) portal.Status {
		t.Helper()
		if err := holder.Submit(&portal.Op{Type: portal.OpRead, Slot: slots[1], Cookie: 2, Remote: ip,
			RemoteRegion: region.ID(), Key: aesni.DeriveKey(kr, hid.Addr.As4(), hid.PID, uint8(portal.OpRead)),
			Local: sink, Length: 4096}); err != nil {
			t.Fatal(err)
		}
		if n, err := holder.Wait(ctx, out); err != nil || n != 1 {
			t.Fatalf("read: %d %v", n, err)
		}
		return out[0].Status
	}
	if st := read(ownerKr); st != portal.StatusOK || sink.Bytes()[9] != 9*7 {
		t.Fatalf("read with the owner's key: %v", st)
	}
	if st := read(heldKr); st != portal.StatusRemoteAuthFailure {
		t.Fatalf("read with the REKEY holder's key: %v, want REMOTE_AUTHENTICATION_FAILURE", st)
	}
}
