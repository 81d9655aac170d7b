package ctl_test

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// portalTenant is the tenant index and weight the core holds for the
// portal p.
func portalTenant(t *testing.T, e *env, p *portal.Portal) (tenant, weight int) {
	t.Helper()
	found := false
	if err := e.drv.Exec(func(c *engine.Core) {
		if ps, ok := c.PortalStats(engine.PortalID(p.Layout().Portal)); ok {
			tenant, weight, found = ps.Tenant, ps.Weight, true
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("portal %d not on the core", p.Layout().Portal)
	}
	return tenant, weight
}

// Each tenant the engine serves has an index of its own in the cores
// (engine.PortalSpec.Tenant) and its socket's weight; the engine serves
// at most engine.Config.Tenants at once, a new tenant beyond them is
// refused naming the bound, and an index is used again once its tenant
// holds nothing.
func TestTenantIndices(t *testing.T) {
	e := setupCores(t, 1, func(c *engine.Config) { c.Tenants = 2 }, func(c *ctl.Config) {
		c.Sockets[0].Weight = 3
		for _, n := range []string{"pod", "job"} {
			c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + "." + n, Mode: 0o600, Name: n,
				Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 16}})
		}
	}, zerolog.Nop())
	main1 := dial(t, e, "main-1")
	main2 := dial(t, e, "main-2")
	pod, err := portal.Dial(e.sock+".pod", "pod")
	if err != nil {
		t.Fatal(err)
	}
	ti1, w1 := portalTenant(t, e, main1)
	ti2, w2 := portalTenant(t, e, main2)
	tp, wp := portalTenant(t, e, pod)
	if ti1 != ti2 || w1 != 3 || w2 != 3 {
		t.Errorf("one tenant's portals: tenant %d weight %d and tenant %d weight %d, want one index, weight 3", ti1, w1, ti2, w2)
	}
	if tp == ti1 || wp != 1 || tp < 0 || tp >= 2 {
		t.Errorf("the pod's portal: tenant %d weight %d, want an index of its own below 2 (main's: %d), weight 1", tp, wp, ti1)
	}
	_, err = portal.Dial(e.sock+".job", "job")
	if err == nil || !strings.Contains(err.Error(), `tenant "job" is new, and the engine serves its maximum of 2 tenants at once`) {
		t.Fatalf("a third tenant: %v", err)
	}
	pod.Close()
	enginetest.Eventually(t, "the pod's tenant gone", func() bool { return tenant(t, e, "pod") == nil })
	job, err := portal.Dial(e.sock+".job", "job")
	if err != nil {
		t.Fatalf("once the pod's tenant left: %v", err)
	}
	defer job.Close()
	if tj, _ := portalTenant(t, e, job); tj != tp {
		t.Errorf("the job's tenant index %d, want the pod's, free again (%d)", tj, tp)
	}
}
