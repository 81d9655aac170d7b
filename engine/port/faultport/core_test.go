package faultport_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/faultport"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/internal/readall"
	"github.com/onerma/onerma/portal"
)

// TestCoreReadsThroughLoss runs a real engine core (engine/runner, served
// by engine/ctl, used through portal) over a loopback memport wrapped in a
// Port that drops 5 % of received frames: the core sends its frames to
// itself out of the port (HairpinSelf), so every request and response
// crosses the wrapper. A 4 MB read, as 1024 READs of 4 KB each re-posted
// until OK, arrives intact; ops time out on the way.
func TestCoreReadsThroughLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an engine")
	}
	fcfg := faultport.DefaultConfig()
	fcfg.Drop, fcfg.Seed = 0.05, 1
	failed, st, _ := readThrough(t, fcfg, engine.CryptoGo)
	rate := float64(st.Rx.Dropped) / float64(st.Rx.Frames)
	if failed == 0 || rate < 0.04 || rate > 0.06 || st.Tx.Frames == 0 || st.Tx.Passed != st.Tx.Frames {
		t.Errorf("%d ops failed; fault counters %+v (rx drop rate %.3f)", failed, st, rate)
	}
	t.Logf("%d ops re-posted; rx %d frames, %d dropped", failed, st.Rx.Frames, st.Rx.Dropped)
}

// TestCoreReadsThroughTxFaultsIPsecMB: the same 4 MB read with the seals
// batched on ipsec-mb and the faults on the tx side, where the wrapper
// drops, duplicates, delays and reorders frames the core handed to Send:
// each must be sealed before it is copied or its buffer reused (the
// TxHook), so every frame that arrives authenticates.
func TestCoreReadsThroughTxFaultsIPsecMB(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an engine")
	}
	fcfg := faultport.DefaultConfig()
	fcfg.Direction = faultport.DirTx
	fcfg.Drop, fcfg.Duplicate, fcfg.Reorder, fcfg.Delay, fcfg.Seed = 0.03, 0.05, 0.05, 0.05, 2
	fcfg.DelayNs, fcfg.JitterNs = 20_000, 20_000
	failed, st, cs := readThrough(t, fcfg, engine.CryptoIPsecMB)
	if st.Tx.Dropped == 0 || st.Tx.Duplicated == 0 || st.Tx.Delayed == 0 || st.Tx.Reordered == 0 {
		t.Errorf("tx faults not injected: %+v", st.Tx)
	}
	if cs.RxAuthFailed != 0 || cs.ReqAuthFailed != 0 {
		t.Errorf("frames that failed authentication: %d answers, %d requests", cs.RxAuthFailed, cs.ReqAuthFailed)
	}
	t.Logf("%d ops re-posted; tx %+v", failed, st.Tx)
}

// readThrough reads 4 MB through a Port with fcfg's faults on an engine
// core with seal backend crypto, and returns the ops re-posted, the fault
// counters and the core's counters.
func readThrough(t *testing.T, fcfg faultport.Config, crypto string) (int, faultport.Stats, engine.Stats) {
	ip := netip.MustParseAddr("10.8.0.1")
	var fp *faultport.Port
	e := enginetest.Start(t, enginetest.Opts{
		Engine: func(c *engine.Config) {
			c.LocalIP = ip
			c.HairpinSelf = true
			c.Slots, c.Regions = 128, 8
			c.Crypto = crypto
		},
		Port: func(lb *memport.Port) runner.Port {
			var err error
			if fp, err = faultport.New(lb, fcfg, nil); err != nil {
				t.Fatal(err)
			}
			return fp
		},
	})

	owner, err := portal.Dial(e.Socket, "owner")
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	const size = 4 << 20
	src, err := owner.RegisterRegion(size, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*131 + i>>12)
	}
	cli, err := portal.Dial(e.Socket, "reader")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	slots, err := cli.AllocSlots(64)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := cli.RegisterRegion(size, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	kd := src.DeriveKey(cli.Identity().Addr, cli.Identity().PID, abi.OpRead)
	failed, err := readall.Chunked(cli, slots, ip, src.ID(), kd, sink, size, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), src.Bytes()) {
		t.Fatal("4 MB read through 5 % loss: data differs")
	}
	var st faultport.Stats
	var cs engine.Stats
	if err := e.Runner.Exec(func(c *engine.Core) { st, cs = fp.Stats(), c.Stats() }); err != nil {
		t.Fatal(err)
	}
	return failed, st, cs
}
