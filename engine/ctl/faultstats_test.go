package ctl_test

import (
	"testing"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/portal"
)

// TestFaultStats: the stats reply carries the counters of the fault
// wrapper when Config.FaultStats is set, fresh on every request, and no
// "fault" key without it.
func TestFaultStats(t *testing.T) {
	calls := uint64(0)
	e := setup(t, func(c *ctl.Config) {
		c.FaultStats = func(int) *ctlmsg.FaultStats {
			calls++ // on the core's goroutine: Exec serialises the calls
			return &ctlmsg.FaultStats{Rx: ctlmsg.FaultDirStats{Frames: 100 * calls, Dropped: calls}, Held: 3}
		}
	})
	p, err := portal.Dial(e.sock, "stats")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for want := uint64(1); want <= 2; want++ {
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if f := st.Fault; f == nil || f.Rx.Dropped != want || f.Rx.Frames != 100*want || f.Held != 3 || f.Tx != (ctlmsg.FaultDirStats{}) {
			t.Fatalf("request %d: fault counters %+v", want, f)
		}
		if st.Completed == nil {
			t.Fatal("core counters missing")
		}
	}

	plain := setup(t, nil)
	q, err := portal.Dial(plain.sock, "stats")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Fault != nil {
		t.Fatalf("fault counters without a wrapper: %+v", st.Fault)
	}
}
