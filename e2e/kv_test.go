package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/kvfail"
)

// The cache's failover across real engines (the paper's Figure 9): a
// client engine and three server engines on a bridge, every key on all
// three `rmakv server` processes, GETs outstanding all along. One bed, three
// failures in turn: server 0's regions rekeyed (its READs fail
// REMOTE_AUTHENTICATION_FAILURE until the client has the new K_d, then
// it serves again); server 1's process SIGKILLed (its engine reclaims the
// regions: READs fail REMOTE_REGION within a round trip, the engine
// keeping the regions' tombstones); server 2's engine SIGKILLed
// (READs to it end at TIMEOUT, 200 ms here). Not one GET may fail: each
// moves to another replica.
func TestKVFailover(t *testing.T) {
	needEngines(t)
	if _, err := os.Stat(rmakvBin); err != nil {
		t.Fatalf("rmakv binary: %v", err)
	}
	bed, err := kvfail.Start(kvfail.Config{
		Rmad: rmadBin, Rmakv: rmakvBin, Dir: t.TempDir(),
		Prefix: fmt.Sprintf("kvf%d", os.Getpid()%10000), Base: netip.MustParseAddr("10.89.0.1"),
		// TIMEOUT short enough to see within a test, long enough for CI;
		// a READ that merely times out moves to another replica too.
		EngineArgs: []string{"-dispatch-timeout", "100ms", "-timeout", "200ms"},
		Logf:       t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()

	check := func(r *kvfail.Result, statuses ...abi.Status) kvfail.Summary {
		t.Helper()
		s := r.Analyze(time.Millisecond, time.Minute) // every failover counts
		var n uint64
		for _, st := range statuses {
			n += r.Stats.Failovers[st]
		}
		t.Logf("%s: %d GETs before, %d after; failed %d; p50 %v p99 %v before; first failover %v after the failure, last %v; slowest after %v; settled %v (1 ms windows' p99 within 2 × %v), then p50 %v p99 %v",
			r.Case, s.GetsBefore, s.GetsAfter, s.Failed, time.Duration(s.BaseP50), time.Duration(s.BaseP99),
			time.Duration(s.FirstFailoverNs), time.Duration(s.LastFailoverNs), time.Duration(s.MaxAfterNs),
			time.Duration(s.SettleNs), time.Duration(s.WindowP99), time.Duration(s.AfterP50), time.Duration(s.AfterP99))
		for st, k := range r.Stats.Failovers {
			if k > 0 {
				t.Logf("  failovers on %v: %d", abi.Status(st), k)
			}
		}
		if s.Failed != 0 {
			t.Errorf("%s: %d GETs failed", r.Case, s.Failed)
		}
		if n == 0 || s.FirstFailoverNs < 0 {
			t.Errorf("%s: no GET failed over on %v", r.Case, statuses)
		}
		if s.GetsAfter < 20 { // the GETs went on (few on a loaded host)
			t.Errorf("%s: only %d GETs after the failure", r.Case, s.GetsAfter)
		}
		return s
	}

	r, err := bed.Measure(kvfail.CaseRekey, 0, 200*time.Millisecond, 800*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check(r, abi.StatusRemoteAuthFailure)
	if r0 := r.Stats.Replicas[0]; r0.Refreshes == 0 || !r0.Up {
		t.Errorf("the rekeyed replica was not taken back: %+v", r0)
	}
	served := r.Stats.Replicas[0].Served

	r, err = bed.Measure(kvfail.CaseProcess, 1, 200*time.Millisecond, 800*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := check(r, abi.StatusRemoteRegion)
	if n := r.Stats.Failovers[abi.StatusRemoteAuthFailure]; n != 0 {
		t.Errorf("process: %d READs of the reclaimed regions failed authentication, want REMOTE_REGION", n)
	}
	// One round trip after the engine noticed the process gone, well
	// before TIMEOUT (200 ms); the bound leaves room for a loaded CI host.
	if s.FirstFailoverNs > int64(100*time.Millisecond) {
		t.Errorf("process: first failover %v after the kill", time.Duration(s.FirstFailoverNs))
	}
	if r.Stats.Replicas[0].Served == served {
		t.Error("the rekeyed replica served no GET afterwards")
	}

	r, err = bed.Measure(kvfail.CaseEngine, 2, 200*time.Millisecond, 1200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check(r, abi.StatusTimeout, abi.StatusUnreachable)
	if r.Stats.Replicas[1].Up || r.Stats.Replicas[2].Up || r.Stats.Replicas[0].Served == 0 {
		t.Errorf("after two failures, replicas: %+v", r.Stats.Replicas)
	}
}
