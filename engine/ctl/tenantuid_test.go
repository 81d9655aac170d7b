package ctl_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/portal"
)

// who is a set of credentials a test connects with.
type who struct {
	uid, gid uint32
	groups   []uint32
}

// dialAs dials sock as w (connectAs); the portal closes when the test
// ends.
func dialAs(t *testing.T, sock string, w who, name string) *portal.Portal {
	t.Helper()
	p, err := connectAs(t, sock, w, name)
	if err != nil {
		t.Fatalf("dial %s as uid %d: %v", name, w.uid, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// connectAs dials sock as w: the connecting thread alone takes w's uid,
// gid and groups (the kernel records the connecting thread's credentials
// for SO_PEERCRED and SO_PEERGROUPS) and ends with the dial, so the rest
// of the test keeps root's. Needs root.
func connectAs(t *testing.T, sock string, w who, name string) (*portal.Portal, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("tests of tenants by uid connect as other uids: CI runs them as root")
		}
		t.Skip("connecting as other uids needs root")
	}
	type result struct {
		p   *portal.Portal
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and its
		// credentials with it.
		runtime.LockOSThread()
		groups := append([]uint32{0}, w.groups...)[1:] // never nil: &groups[0] below
		var gp uintptr
		if len(groups) > 0 {
			gp = uintptr(unsafe.Pointer(&groups[0]))
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), gp, 0); e != 0 {
			done <- result{err: fmt.Errorf("setgroups: %w", e)}
			return
		}
		runtime.KeepAlive(groups)
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(w.gid), uintptr(w.gid), uintptr(w.gid)); e != 0 {
			done <- result{err: fmt.Errorf("setresgid: %w", e)}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(w.uid), uintptr(w.uid), uintptr(w.uid)); e != 0 {
			done <- result{err: fmt.Errorf("setresuid: %w", e)}
			return
		}
		p, err := portal.Dial(sock, name)
		done <- result{p, err}
	}()
	r := <-done
	return r.p, r.err
}

// openDirs lets every uid reach the test's sockets (t.TempDir is 0700).
func openDirs(t *testing.T, sock string) {
	t.Helper()
	for d := filepath.Dir(sock); d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// uidFiles writes a passwd and a subuid file for the tests of tenants by
// uid: alice (1000) has subordinate uids 100000-165535, bob (1001)
// 165536-231071 (named by uid).
func uidFiles(t *testing.T, c *ctl.Config) {
	t.Helper()
	dir := t.TempDir()
	c.PasswdFile, c.SubuidFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "subuid")
	os.WriteFile(c.PasswdFile, []byte("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n"), 0o644)
	os.WriteFile(c.SubuidFile, []byte("alice:100000:65536\n1001:165536:65536\n"), 0o644)
}

// TestTenantsByUIDFold: a user's subordinate uids count as the user (one
// tenant, its quota shared); uids named nowhere share the socket's one
// "other" tenant, capped like any tenant; the operator's map wins over
// the files; the identity reply and the portal stats keep the connecting
// uid.
func TestTenantsByUIDFold(t *testing.T) {
	e := setup(t, func(c *ctl.Config) {
		uidFiles(t, c)
		c.UIDMap = []ctl.UIDMapEntry{{UIDs: "100100-100199", TenantUID: 1001}}
		c.Quota.Portals = ctl.Count(2)
	})
	openDirs(t, e.sock)
	alice := dialAs(t, e.sock, who{uid: 1000, gid: 1000}, "alice")
	ctr := dialAs(t, e.sock, who{uid: 100005, gid: 100005}, "alice-ctr")
	for _, p := range []*portal.Portal{alice, ctr} {
		if id := p.Identity(); id.Tenant != "main uid 1000" {
			t.Errorf("uid %d: tenant %q, want \"main uid 1000\"", id.UID, id.Tenant)
		}
	}
	if id := ctr.Identity(); id.UID != 100005 {
		t.Errorf("the identity reply names uid %d, want the connecting uid 100005", id.UID)
	}
	// Alice's quota of 2 portals is shared with her containers.
	dial(t, e, "root") // root: its own tenant
	if _, err := dialAsErr(t, e.sock, who{uid: 165000, gid: 1}, "alice-ctr2"); quotaErr(err) != ctlmsg.QuotaPortals ||
		!strings.Contains(err.Error(), `tenant "main uid 1000" holds 2 portals; 1 more would exceed its portals quota of 2`) {
		t.Fatalf("a third portal of alice's: %v", err)
	}
	// The map sends 100100-100199 to bob, though alice's range holds them.
	if p := dialAs(t, e.sock, who{uid: 100150, gid: 1}, "mapped"); p.Identity().Tenant != "main uid 1001" {
		t.Errorf("mapped uid 100150: tenant %q, want \"main uid 1001\"", p.Identity().Tenant)
	}
	// Nowhere named: one tenant for all of them, capped as one.
	o1 := dialAs(t, e.sock, who{uid: 4000, gid: 4000}, "o1")
	o2 := dialAs(t, e.sock, who{uid: 4001, gid: 4001}, "o2")
	for _, p := range []*portal.Portal{o1, o2} {
		if id := p.Identity(); id.Tenant != "main other uids" {
			t.Errorf("uid %d: tenant %q, want \"main other uids\"", id.UID, id.Tenant)
		}
	}
	if _, err := dialAsErr(t, e.sock, who{uid: 4002, gid: 4002}, "o3"); quotaErr(err) != ctlmsg.QuotaPortals ||
		!strings.Contains(err.Error(), `tenant "main other uids" holds 2 portals; 1 more would exceed its portals quota of 2`) {
		t.Fatalf("a third portal of the other uids: %v", err)
	}
	ts := map[string]ctlmsg.TenantStats{}
	for _, x := range e.srv.Tenants() {
		ts[x.Name] = x
	}
	if a := ts["main uid 1000"]; a.Portals != 2 || a.UID == nil || *a.UID != 1000 {
		t.Errorf("alice's tenant %+v", a)
	}
	if o := ts["main other uids"]; o.Portals != 2 || o.UID != nil {
		t.Errorf("the other tenant %+v", o)
	}
	if len(ts) != 4 {
		t.Errorf("tenants %v: want root, alice, bob and other", ts)
	}
	st, err := e.srv.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Portals {
		if p.Name == "alice-ctr" && (p.UID != 100005 || p.Tenant != "main uid 1000") {
			t.Errorf("portal stats %+v: want the connecting uid 100005 of tenant \"main uid 1000\"", p)
		}
	}
}

// dialAsErr is connectAs for a dial expected to fail.
func dialAsErr(t *testing.T, sock string, w who, name string) (*portal.Portal, error) {
	t.Helper()
	p, err := connectAs(t, sock, w, name)
	if p != nil {
		p.Close()
	}
	return p, err
}

// podSocket adds a socket that is one tenant, "pod".
func podSocket(c *ctl.Config) {
	c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + ".pod", Mode: 0o666, Name: "pod",
		Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 16}})
}

// names lists the portals' names (sorted: the cores list their own) and
// the tenants' names of a stats reply.
func names(st *ctlmsg.Stats) (portals, tenants []string) {
	for _, p := range st.Portals {
		portals = append(portals, p.Name)
	}
	slices.Sort(portals)
	for _, t := range st.Tenants {
		tenants = append(tenants, t.Name)
	}
	return portals, tenants
}

// TestStatsTenantSeesOwn: a tenant's stats reply lists its own portals
// and tenant row and nothing of another tenant's (names, uids,
// identities, usage); the engine-wide counters are there. An operator
// (uid 0, or in the operator group, on a socket that splits tenants by
// uid) sees every tenant's; root through a pod's socket is that pod.
func TestStatsTenantSeesOwn(t *testing.T) {
	const opsGID = 4242
	e := setup(t, func(c *ctl.Config) {
		uidFiles(t, c)
		podSocket(c)
		g := uint32(opsGID)
		c.OperatorGID = &g
	})
	openDirs(t, e.sock)
	root := dial(t, e, "rootapp")
	child := childIdentity(t, e.sock) // root's tenant, another process
	alice := dialAs(t, e.sock, who{uid: 1000, gid: 1000}, "alice-app")
	if _, err := alice.RegisterRegion(4096, abi.PermAll); err != nil {
		t.Fatal(err)
	}
	bob := dialAs(t, e.sock, who{uid: 1001, gid: 1001, groups: []uint32{opsGID + 1}}, "bob-app")
	if _, err := bob.RegisterRegion(8192, abi.PermAll); err != nil {
		t.Fatal(err)
	}
	ops := dialAs(t, e.sock, who{uid: 1002, gid: 1002, groups: []uint32{7, opsGID}}, "ops-app")
	pod, err := portal.Dial(e.cfg.Sockets[1].Path, "pod-app")
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()

	all := []string{"rootapp", "child", "alice-app", "bob-app", "ops-app", "pod-app"}
	everyone := []string{"main other uids", "main uid 0", "main uid 1000", "main uid 1001", "pod"} // uid 1002 is in no file
	for _, tc := range []struct {
		who      string
		p        *portal.Portal
		portals  []string
		tenants  []string
		operator bool
	}{
		{"alice", alice, []string{"alice-app"}, []string{"main uid 1000"}, false},
		{"bob (not in the operator group)", bob, []string{"bob-app"}, []string{"main uid 1001"}, false},
		{"root through the pod's socket", pod, []string{"pod-app"}, []string{"pod"}, false},
		{"root", root, all, everyone, true},
		{"a member of the operator group", ops, all, everyone, true},
	} {
		t.Run(tc.who, func(t *testing.T) {
			st, err := tc.p.Stats()
			if err != nil {
				t.Fatal(err)
			}
			ps, ts := names(st)
			if want := slices.Sorted(slices.Values(tc.portals)); !slices.Equal(ps, want) {
				t.Errorf("portals %q, want %q", ps, want)
			}
			if !slices.Equal(ts, tc.tenants) {
				t.Errorf("tenants %q, want %q", ts, tc.tenants)
			}
			if st.TenantOnly == tc.operator {
				t.Errorf("tenant_only %v for an operator %v", st.TenantOnly, tc.operator)
			}
			if st.Completed == nil || st.SlotsInUse != 0 || st.Loop != nil && st.Loop.Iterations == 0 {
				t.Errorf("engine-wide counters missing: %+v", st)
			}
			if tc.operator {
				return
			}
			// Nothing of another tenant, anywhere in the reply.
			b, _ := json.Marshal(st)
			mine := tc.p.Identity()
			for _, p := range st.Portals {
				if p.UID != mine.UID || p.Tenant != mine.Tenant {
					t.Errorf("portal %+v of another uid or tenant", p)
				}
			}
			for _, other := range all {
				if other != tc.portals[0] && strings.Contains(string(b), `"`+other+`"`) {
					t.Errorf("the reply names %q: %s", other, b)
				}
			}
			for _, tn := range everyone {
				if tn != tc.tenants[0] && strings.Contains(string(b), `"`+tn+`"`) {
					t.Errorf("the reply names tenant %q: %s", tn, b)
				}
			}
			if strings.Contains(string(b), fmt.Sprintf(`"pid":%d`, child)) {
				t.Errorf("the reply names the identity %d of another tenant's process: %s", child, b)
			}
		})
	}
}

// TestStatsRate: a tenant gets StatsBurst stats replies at once, over
// all its connections; the next is refused, naming stats, the tenant and
// the rate. Another tenant is not affected.
func TestStatsRate(t *testing.T) {
	e := setup(t, func(c *ctl.Config) {
		c.StatsRate, c.StatsBurst = 0.001, 3
		podSocket(c)
	})
	c := rawDial(t, e.sock)
	for i := range 3 {
		if resp, _, err := rawSendFD(t, c, `{"v":1,"op":"stats"}`); err != nil || resp.Stats == nil {
			t.Fatalf("request %d of a burst of 3: %v", i+1, err)
		}
	}
	want := fmt.Sprintf(`limit: stats: tenant "main uid %d" asks for stats faster than 0.001 a second (burst 3); try again in `, os.Getuid())
	resp, _, err := rawSendFD(t, c, `{"v":1,"op":"stats"}`)
	if err == nil || resp.Code != ctlmsg.CodeLimit || !strings.HasPrefix(err.Error(), want) || resp.Stats != nil {
		t.Fatalf("4th request: %v (code %q), want %q...", err, resp.Code, want)
	}
	// Another connection of the same tenant: the same bucket.
	if _, _, err := rawSendFD(t, rawDial(t, e.sock), `{"v":1,"op":"stats"}`); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("the tenant's second connection: %v", err)
	}
	// Another tenant: its own.
	if _, _, err := rawSendFD(t, rawDial(t, e.cfg.Sockets[1].Path), `{"v":1,"op":"stats"}`); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	// The connection still serves everything else.
	if _, _, err := rawSendFD(t, c, `{"v":1,"op":"identity"}`); err != nil {
		t.Fatal(err)
	}
}

// TestStatsShowsOwnChanges: a stats reply shows every control operation
// its asker's tenant completed before asking (an operator's, every
// tenant's), however young the snapshot another connection was given:
// a portal attached, slots taken, regions registered and deregistered.
func TestStatsShowsOwnChanges(t *testing.T) {
	e := setup(t, podSocket)
	for _, sock := range []string{e.sock, e.cfg.Sockets[1].Path} {
		t.Run(filepath.Base(sock), func(t *testing.T) {
			// Another connection of the same tenant keeps a snapshot
			// young: each step asks it first.
			other := rawDial(t, sock)
			ask := func() {
				t.Helper()
				if _, _, err := rawSendFD(t, other, `{"v":1,"op":"stats"}`); err != nil {
					t.Fatal(err)
				}
			}
			// mine is p's row of p's own stats reply.
			mine := func(p *portal.Portal) ctlmsg.PortalStats {
				t.Helper()
				st, err := p.Stats()
				if err != nil {
					t.Fatal(err)
				}
				for _, ps := range st.Portals {
					if ps.PID == p.Identity().PID && ps.Name == p.Identity().Name {
						return ps
					}
				}
				t.Fatalf("the reply lists %d portals, not the asker's own", len(st.Portals))
				return ctlmsg.PortalStats{}
			}
			ask()
			p, err := portal.Dial(sock, "changes")
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			mine(p)
			var rs []*portal.Region
			for i := 1; i <= 3; i++ {
				ask()
				if _, err := p.AllocSlots(2); err != nil {
					t.Fatal(err)
				}
				if ps := mine(p); ps.Slots != 2*i {
					t.Fatalf("after taking %d slots the reply says %d", 2*i, ps.Slots)
				}
				ask()
				r, err := p.RegisterRegion(4096, abi.PermAll)
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
				if ps := mine(p); ps.Regions != i {
					t.Fatalf("after registering %d regions the reply says %d", i, ps.Regions)
				}
			}
			ask()
			if err := p.DeregisterRegion(rs[0]); err != nil {
				t.Fatal(err)
			}
			if ps := mine(p); ps.Regions != 2 {
				t.Fatalf("after a deregistration the reply says %d regions, want 2", ps.Regions)
			}
		})
	}
}
