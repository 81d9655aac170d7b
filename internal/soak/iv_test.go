package soak

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/portal"
)

// needBin returns the directory of the rmad and rmactl binaries (make
// test's ONERMA_BIN). Outside CI a run without them, or not as root,
// skips; in CI it fails.
func needBin(t *testing.T) string {
	t.Helper()
	bin, why := os.Getenv("ONERMA_BIN"), ""
	switch {
	case os.Geteuid() != 0:
		why = "engines, network namespaces and AF_PACKET need root"
	case bin == "":
		why = "no ONERMA_BIN (make test sets it to the built binaries)"
	}
	if why == "" {
		if _, err := os.Stat(filepath.Join(bin, "rmad")); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("required test cannot run in CI: %s", why)
		}
		t.Skip(why)
	}
	return bin
}

// forgetIV removes engine i's IV state file: its next incarnation starts
// its counters afresh and repeats nonces.
func (b *bed) forgetIV(i int) error {
	return os.Remove(b.opts[i].IVStatePath())
}

// forgetIdentities removes engine i's identity state (rmad's default
// beside its IV state), as rmad's refusal to start on an identity state
// without its IV state says to once the keys are rotated.
func (b *bed) forgetIdentities(i int) error {
	ids := b.opts[i].IVStatePath() + ".ids"
	if err := os.Remove(ids); err != nil {
		return err
	}
	if err := os.Remove(ids + ".mark"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// The capture on the router sees the frames of two engines of the routed
// testbed; engine 2 is SIGKILLed twice. Restarted on its IV state file,
// it resumes above every counter it used; restarted without it (the file
// removed), it starts again at 1, and the nonce check reports both the
// repeated nonces and the counters that went back.
func TestNoncesAcrossSIGKILL(t *testing.T) {
	bin := needBin(t)
	b, err := newBed(fmt.Sprintf("sk%d", os.Getpid()%100000), bin, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	nonces := newNonceSet([]netip.Addr{b.Hosts[0].Addr, b.Hosts[1].Addr})
	c, err := openCapture(b.Router, []string{b.Subnets[0].Bridge, b.Subnets[1].Bridge}, nonces)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	for i := range 2 {
		if err := b.start(i); err != nil {
			t.Fatal(err)
		}
	}
	reader, err := portal.Dial(b.socket(0), "reader")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	slots, err := reader.AllocSlots(1)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := reader.RegisterRegion(blockBytes, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// reads has the reader READ 4 KB from a region of an owner on
	// engine 2 until 100 have completed OK: about 400 frames each way.
	reads := func() {
		t.Helper()
		owner, err := portal.Dial(b.socket(1), "owner")
		if err != nil {
			t.Fatal(err)
		}
		defer owner.Close()
		r, err := owner.RegisterRegion(blockBytes, abi.PermRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		id := reader.Identity()
		kd := r.DeriveKey(id.Addr, id.PID, abi.OpRead)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var cpl [1]abi.Completion
		for ok := 0; ok < 100; {
			if err := reader.Submit(&portal.Op{
				Type: portal.OpRead, Slot: slots[0], Cookie: 1,
				Remote: b.Hosts[1].Addr, RemoteRegion: r.ID(), Key: kd,
				Local: sink, Length: blockBytes,
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := reader.Wait(ctx, cpl[:]); err != nil {
				t.Fatal(err)
			}
			if cpl[0].Status == abi.StatusOK {
				ok++
			}
		}
	}
	restart := func(forget bool) {
		t.Helper()
		nonces.Died(b.Hosts[1].Addr, b.kill(1).UnixNano())
		if forget {
			if err := b.forgetIV(1); err != nil {
				t.Fatal(err)
			}
			// Its identity state left, rmad refuses to count IVs from 1
			// again; without it too, it starts afresh, and the keys its
			// peers hold (not rotated here) see their nonces repeat.
			if err := b.start(1); err == nil || !strings.Contains(err.Error(), "IV state lost") {
				t.Fatalf("started without its IV state beside its identity state: %v", err)
			}
			if err := b.forgetIdentities(1); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.start(1); err != nil {
			t.Fatal(err)
		}
	}
	reads()
	restart(false)
	reads()
	restart(true)
	reads()
	reader.Close()
	if err := b.stop(); err != nil {
		t.Error(err)
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c.Drops > 0 || c.NotRMA > 0 {
		t.Fatalf("capture: %d frames lost, %d not OneRMA", c.Drops, c.NotRMA)
	}
	e1, e2 := addr32(b.Hosts[0].Addr), addr32(b.Hosts[1].Addr)
	if n := len(nonces.senders[e2].incs); n != 3 {
		t.Fatalf("engine 2: frames of %d incarnations, want 3: %+v, deaths %v", n, nonces.senders[e2].incs, *nonces.senders[e2].deaths.Load())
	}
	for _, a := range []uint32{e1, e2} {
		for k, in := range nonces.senders[a].incs {
			if in.Frames < 200 {
				t.Errorf("%s incarnation %d: %d frames captured, want at least 200", addrOf(a), k+1, in.Frames)
			}
		}
	}
	if in := nonces.senders[e2].incs; in[1].Min <= in[0].Max {
		t.Errorf("engine 2 restarted on its IV state used counter %d, at or below %d of before", in[1].Min, in[0].Max)
	}
	if nonces.repeats == 0 {
		t.Error("no nonce repeated after engine 2 restarted without its IV state")
	}
	problems := nonces.check()
	went := false
	for _, p := range problems {
		if !strings.Contains(p, b.Hosts[1].Addr.String()) {
			t.Errorf("a problem not about engine 2: %s", p)
		}
		went = went || strings.Contains(p, "incarnation 3 used counter")
	}
	if !went {
		t.Errorf("the check did not report engine 2's third incarnation going back: %q", problems)
	}
	t.Logf("%d frames, %d distinct nonces, %d repeated; %d problems, the first %q", c.Captured, nonces.distinct, nonces.repeats, len(problems), problems[0])
}
