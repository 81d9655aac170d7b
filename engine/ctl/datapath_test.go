package ctl_test

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// readN posts n 64-byte READs of p's own region through the engine and
// waits for them, all OK.
func readN(t *testing.T, p *portal.Portal, n int) {
	t.Helper()
	if _, err := p.AllocSlots(n); err != nil {
		t.Fatal(err)
	}
	r, err := p.RegisterRegion(4096, abi.PermLocalWrite|abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		s, _ := p.Slot()
		if err := p.Submit(&portal.Op{Type: portal.OpRead, Slot: s, Cookie: uint64(i), Remote: engineIP,
			RemoteRegion: r.ID(), Key: kd(r, p), Local: r, Length: 64}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if c := waitOne(t, p); c.Status != abi.StatusOK {
			t.Fatalf("completion %+v", c)
		}
	}
}

// datapathOf is the tenant's data-path row (Server.Tenants), or nil.
func datapathOf(t *testing.T, e *env, name string) *ctlmsg.TenantDatapath {
	t.Helper()
	ts := tenant(t, e, name)
	if ts == nil {
		t.Fatalf("no tenant %q", name)
	}
	return ts.Datapath
}

// Each tenant's row carries its data-path counters, summed over the
// cores: ops posted, its share of the window by weight; a tenant that
// takes an index another left starts from nothing, whatever core its
// portal lands on.
func TestTenantDatapathRows(t *testing.T) {
	e := setupCores(t, 2, func(c *engine.Config) { c.Tenants = 2 }, func(c *ctl.Config) {
		c.Sockets[0].Weight = 3
		for _, n := range []string{"pod", "job"} {
			c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + "." + n, Mode: 0o600, Name: n,
				Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 16}})
		}
	}, zerolog.Nop())
	main := dial(t, e, "main")
	pod, err := portal.Dial(e.sock+".pod", "pod")
	if err != nil {
		t.Fatal(err)
	}
	readN(t, main, 3)
	readN(t, pod, 2)
	var w uint64
	e.drv.Exec(func(c *engine.Core) { w = uint64(c.Config().WindowBytes) })
	mainName := tenantName(t, e, main)
	dm, dp := datapathOf(t, e, mainName), datapathOf(t, e, "pod")
	if dm == nil || dp == nil {
		t.Fatalf("datapath rows: %+v %+v", dm, dp)
	}
	// Each portal is on one core: a tenant's share is summed over the
	// cores it has portals on.
	if dm.Posted != 3 || dp.Posted != 2 || dm.Queued != 0 || dm.WindowHeld != 0 {
		t.Errorf("main %+v, pod %+v", *dm, *dp)
	}
	if (dm.WindowShare != w*3/4 && dm.WindowShare != w) || (dp.WindowShare != w/4 && dp.WindowShare != w) {
		t.Errorf("shares: main %d pod %d of a window of %d a core (weights 3 and 1)", dm.WindowShare, dp.WindowShare, w)
	}
	st, err := e.srv.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range st.Tenants {
		if ts.Datapath == nil || (ts.Name == "pod" && ts.Datapath.Posted != 2) {
			t.Errorf("stats reply's row %s: %+v", ts.Name, ts.Datapath)
		}
	}
	pod.Close()
	enginetest.Eventually(t, "the pod's tenant gone", func() bool { return tenant(t, e, "pod") == nil })
	for range 2 { // on either core, the job inherits none of the pod's counters
		job, err := portal.Dial(e.sock+".job", "job")
		if err != nil {
			t.Fatal(err)
		}
		if dj := datapathOf(t, e, "job"); dj == nil || dj.Posted != 0 {
			t.Fatalf("the job, on the pod's index: %+v", dj)
		}
		readN(t, job, 1)
		if dj := datapathOf(t, e, "job"); dj.Posted != 1 {
			t.Fatalf("the job after one op: %+v", dj)
		}
		job.Close()
		enginetest.Eventually(t, "the job's tenant gone", func() bool { return tenant(t, e, "job") == nil })
	}
}

// tenantName is the name of p's tenant.
func tenantName(t *testing.T, e *env, p *portal.Portal) string {
	t.Helper()
	return p.Identity().Tenant
}
