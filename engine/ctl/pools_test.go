package ctl_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// Tenants of one engine in one test: a socket each (TenantBySocket), so
// one process is several tenants. "hog" fills a pool; "victim", holding
// nothing, must still connect, open a portal, take slots, register a
// region and read it; "late" comes after both.

// poolEnv is an engine of 16 control connections, 8 portals, 128 slots,
// 64 regions and 64 MiB of memory, whose tenants may each take all of
// any pool (quotas of 100 %) but are guaranteed 2 connections, a portal,
// 8 slots, 2 regions and 1 MiB, with room kept for one tenant to come.
func poolEnv(t *testing.T, mutate func(*ctl.Config)) *env {
	t.Helper()
	return setup(t, func(c *ctl.Config) {
		dir := filepath.Dir(c.Sockets[0].Path)
		c.MaxConns = 16
		c.ReserveTenants = 1
		c.OpenDeadline = time.Minute // the hog's idle connections stay
		c.Hugetlb = ctl.HugetlbOff   // ordinary pages: exact sizes
		c.Resources = &ctl.Resources{MemoryBytes: 64 << 20}
		all := ctl.Pct(100)
		c.Quota = ctl.Quota{Conns: all, Portals: all, Slots: all, Regions: all, MemoryBytes: all, HugepageBytes: all}
		c.Guarantee = ctl.Quota{Conns: ctl.Count(2), Portals: ctl.Count(1), Slots: ctl.Count(8), Regions: ctl.Count(2),
			MemoryBytes: ctl.Count(1 << 20), HugepageBytes: ctl.Count(0)}
		for _, name := range []string{"hog", "victim", "late"} {
			c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: filepath.Join(dir, name+".sock"), Mode: 0o600, Name: name,
				Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 128}})
		}
		if mutate != nil {
			mutate(c)
		}
	})
}

// sock is the path of the socket named name.
func (e *env) sockOf(name string) string {
	for _, sc := range e.cfg.Sockets {
		if sc.Name == name {
			return sc.Path
		}
	}
	panic(name)
}

// held is what tenant name holds now (zero: nothing).
func held(t *testing.T, e *env, name string) ctlmsg.TenantUsage {
	t.Helper()
	if ts := tenant(t, e, name); ts != nil {
		return ts.TenantUsage
	}
	return ctlmsg.TenantUsage{}
}

// wantRefusal checks that err is a quota refusal of pool naming tenant
// name and containing each of msgs.
func wantRefusal(t *testing.T, err error, pool, name string, msgs ...string) {
	t.Helper()
	if quotaErr(err) != pool || !strings.Contains(err.Error(), fmt.Sprintf("tenant %q", name)) {
		t.Fatalf("want a %s refusal of tenant %q, got %v (quota %q)", pool, name, err, quotaErr(err))
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("refusal %q\nwithout %q", err, m)
		}
	}
}

// victimServed: a tenant that holds nothing connects through sock, opens
// a portal, takes slots, registers two regions and reads one into the
// other, verified.
func victimServed(t *testing.T, sock string) {
	t.Helper()
	p, err := portal.Dial(sock, "victim")
	if err != nil {
		t.Fatalf("the victim's Dial: %v", err)
	}
	defer p.Close()
	if _, err := p.AllocSlots(8); err != nil {
		t.Fatalf("the victim's slots: %v", err)
	}
	src, err := p.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatalf("the victim's first region: %v", err)
	}
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatalf("the victim's second region: %v", err)
	}
	fill(src.Bytes(), 0x5a)
	if c := readWith(t, p, src, kd(src, p), sink, 128); c.Status != abi.StatusOK || !bytes.Equal(sink.Bytes()[128:192], src.Bytes()[:64]) {
		t.Fatalf("the victim's READ: %+v", c)
	}
}

// For each pool: the hog takes all it is let take, and is refused in the
// words of the rule (the guarantees the engine keeps free); the victim,
// holding nothing, is served all the same.
func TestPoolsVictimServed(t *testing.T) {
	t.Run("conns", func(t *testing.T) {
		e := poolEnv(t, nil)
		var (
			conns []*net.UnixConn
			err   error
		)
		for range 20 {
			c := rawDial(t, e.sockOf("hog"))
			if _, err = rawSend(t, c, []byte(`{"v":1,"op":"stats"}`), nil); err != nil {
				break
			}
			conns = append(conns, c)
		}
		// 16 less the 2 kept for a tenant to come.
		if len(conns) != 14 || held(t, e, "hog").Conns != 14 {
			t.Fatalf("the hog holds %d connections (%+v), then %v", len(conns), held(t, e, "hog"), err)
		}
		if !strings.Contains(err.Error(), "quota: connect: tenant \"hog\" holds 14 control connections; 1 more is beyond its conns guarantee of 2, and the engine keeps 2 free for the guarantees of other tenants (2 free) (socket hog)") {
			t.Fatalf("the hog's refusal: %v", err)
		}
		victimServed(t, e.sockOf("victim"))
		enginetest.Eventually(t, "the victim reclaimed", func() bool { return tenant(t, e, "victim") == nil })
		// A third tenant while the victim holds its place: refused, in
		// the words of the rule, until the victim goes.
		v, err := portal.Dial(e.sockOf("victim"), "stays")
		if err != nil {
			t.Fatal(err)
		}
		_, err = portal.Dial(e.sockOf("late"), "late")
		wantRefusal(t, err, ctlmsg.QuotaConns, "late",
			`connect: tenant "late" is new, and its conns guarantee of 2 does not fit: 1 free, of which the engine keeps 1 for the guarantees of the tenants it serves (socket late)`)
		v.Close()
		enginetest.Eventually(t, "the victim gone", func() bool { return tenant(t, e, "victim") == nil })
		victimServed(t, e.sockOf("late"))
	})
	t.Run("portals", func(t *testing.T) {
		e := poolEnv(t, nil)
		var err error
		for range 10 {
			if _, err = portal.Dial(e.sockOf("hog"), "hog"); err != nil {
				break
			}
		}
		if held(t, e, "hog").Portals != 7 {
			t.Fatalf("the hog holds %+v", held(t, e, "hog"))
		}
		wantRefusal(t, err, ctlmsg.QuotaPortals, "hog", "open: tenant \"hog\" holds 7 portals; 1 more is beyond its portals guarantee of 1, and the engine keeps 1 free")
		victimServed(t, e.sockOf("victim"))
	})
	t.Run("slots", func(t *testing.T) {
		e := poolEnv(t, nil)
		h, err := portal.Dial(e.sockOf("hog"), "hog")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		for range 20 {
			if _, err = h.AllocSlots(8); err != nil {
				break
			}
		}
		if held(t, e, "hog").Slots != 120 {
			t.Fatalf("the hog holds %+v", held(t, e, "hog"))
		}
		wantRefusal(t, err, ctlmsg.QuotaSlots, "hog", "alloc_slots: tenant \"hog\" holds 120 slots; 8 more is beyond its slots guarantee of 8, and the engine keeps 8 free")
		victimServed(t, e.sockOf("victim"))
	})
	t.Run("regions", func(t *testing.T) {
		e := poolEnv(t, nil)
		h, err := portal.Dial(e.sockOf("hog"), "hog")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var rs []*portal.Region
		for range 70 {
			var r *portal.Region
			if r, err = h.RegisterRegion(4096, abi.PermRemoteRead); err != nil {
				break
			}
			rs = append(rs, r)
		}
		if len(rs) != 62 || held(t, e, "hog").Regions != 62 {
			t.Fatalf("the hog holds %d regions (%+v)", len(rs), held(t, e, "hog"))
		}
		wantRefusal(t, err, ctlmsg.QuotaRegions, "hog", "create_region: tenant \"hog\" holds 62 regions; 1 more is beyond its regions guarantee of 2, and the engine keeps 2 free")
		victimServed(t, e.sockOf("victim"))
		enginetest.Eventually(t, "the victim reclaimed", func() bool { return tenant(t, e, "victim") == nil })
		// What it gives back it may take again at once: the engine reads
		// the pending refunds before it refuses.
		for i := range 10 {
			if err := h.DeregisterRegion(rs[i]); err != nil {
				t.Fatal(err)
			}
			if _, err := h.RegisterRegion(4096, abi.PermRemoteRead); err != nil {
				t.Fatalf("region %d again, just after its deregistration: %v", i, err)
			}
		}
	})
	t.Run("memory_bytes", func(t *testing.T) {
		e := poolEnv(t, nil)
		h, err := portal.Dial(e.sockOf("hog"), "hog")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		for range 50 {
			if _, err = h.RegisterRegion(3<<19, abi.PermRemoteRead); err != nil {
				break
			}
		}
		seg := (h.Layout().Size + 4095) / 4096 * 4096
		// 64 MiB less the 1 MiB kept for a tenant to come: 41 regions of 1.5 MiB.
		if got := held(t, e, "hog").MemoryBytes; got != 41*3<<19+seg {
			t.Fatalf("the hog holds %d bytes", got)
		}
		wantRefusal(t, err, ctlmsg.QuotaMemoryBytes, "hog", "1572864 bytes (1.5 MiB) more is beyond its memory_bytes guarantee of 1048576 bytes (1.0 MiB), and the engine keeps 1048576 bytes (1.0 MiB) free")
		victimServed(t, e.sockOf("victim"))
	})
	// Its quota stops a tenant before the engine is full: the refusal
	// names it.
	t.Run("quota", func(t *testing.T) {
		e := poolEnv(t, func(c *ctl.Config) { c.Sockets[1].Quota.Regions = ctl.Count(10) })
		h, err := portal.Dial(e.sockOf("hog"), "hog")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		for range 11 {
			if _, err = h.RegisterRegion(4096, abi.PermRemoteRead); err != nil {
				break
			}
		}
		wantRefusal(t, err, ctlmsg.QuotaRegions, "hog", "create_region: tenant \"hog\" holds 10 regions; 1 more would exceed its regions quota of 10 (socket hog)")
	})
}

// Huge pages: the hog's beyond its share come from ordinary pages; the
// victim's guarantee is on huge pages.
func TestPoolsVictimHugepages(t *testing.T) {
	if free := hugePagesFree(t); free < 8 {
		t.Skipf("%d free 2 MB huge pages, the test needs 8 (make setup reserves them)", free)
	}
	e := poolEnv(t, func(c *ctl.Config) {
		c.Hugetlb = ctl.HugetlbAuto
		c.Resources = &ctl.Resources{MemoryBytes: 64 << 20, HugepageBytes: 8 << 20}
		c.Guarantee.HugepageBytes = ctl.Count(4 << 20)
	})
	h, err := portal.Dial(e.sockOf("hog"), "hog")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var huge int
	for range 4 {
		r, err := h.RegisterRegion(2<<20, abi.PermRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if r.Hugetlb() {
			huge++
		}
	}
	// Its segment and one region: 8 MiB less the 4 kept for a tenant to come.
	if got := held(t, e, "hog").HugepageBytes; !h.Hugetlb() || huge != 1 || got != 4<<20 {
		t.Fatalf("the hog: segment on huge pages %v, %d regions, %d bytes of huge pages", h.Hugetlb(), huge, got)
	}
	v, err := portal.Dial(e.sockOf("victim"), "victim")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	r, err := v.RegisterRegion(2<<20, abi.PermRemoteRead)
	if err != nil || !v.Hugetlb() || !r.Hugetlb() {
		t.Fatalf("the victim: segment on huge pages %v, region %v (%v)", v.Hugetlb(), err == nil && r.Hugetlb(), err)
	}
	// No huge page is left for a third tenant's guarantee: it is served
	// all the same, on ordinary pages (the one pool that never refuses).
	late, err := portal.Dial(e.sockOf("late"), "late")
	if err != nil {
		t.Fatalf("a tenant arriving after the huge pages are gone: %v", err)
	}
	defer late.Close()
	if late.Hugetlb() {
		t.Error("the late tenant's segment on huge pages none was left of")
	}
	if ts := tenant(t, e, "late"); ts == nil || ts.Guarantee.HugepageBytes != 0 || ts.Guarantee.Regions != 2 {
		t.Errorf("the late tenant's guarantees: %+v", ts)
	}
}

// A connection that has not opened a portal within OpenDeadline is
// closed; one that sends only identity and stats requests, once idle that
// long; one with a portal, never.
func TestOpenDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	e := setup(t, func(c *ctl.Config) { c.OpenDeadline = deadline })
	me := fmt.Sprintf("main uid %d", unix.Getuid())
	p := dial(t, e, "stays")
	silent := rawDial(t, e.sock)
	opened := rawDial(t, e.sock) // open, never attach
	if _, fd, err := rawSendFD(t, opened, `{"v":1,"op":"open","name":"unattached"}`); err != nil {
		t.Fatal(err)
	} else {
		unix.Close(fd)
	}
	asks := rawDial(t, e.sock)
	// The asking connection outlives several deadlines while it asks.
	for range 10 {
		if _, err := rawSend(t, asks, []byte(`{"v":1,"op":"stats"}`), nil); err != nil {
			t.Fatalf("stats on a connection that keeps asking: %v", err)
		}
		if _, err := rawSend(t, asks, []byte(`{"v":1,"op":"identity"}`), nil); err != nil {
			t.Fatalf("identity on a connection that keeps asking: %v", err)
		}
		time.Sleep(deadline / 4)
	}
	for name, c := range map[string]*net.UnixConn{"silent": silent, "unattached": opened, "idle after asking": asks} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 64)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: read %d bytes, %v: want the engine's hang-up", name, n, err)
		}
	}
	enginetest.Eventually(t, "only the portal's connection left", func() bool { return e.srv.Conns() == 1 })
	if u := held(t, e, me); u.Conns != 1 || u.Portals != 1 {
		t.Fatalf("the tenant holds %+v: want the portal's connection and portal", u)
	}
	// The portal, idle all along, is served.
	if _, err := p.AllocSlots(1); err != nil {
		t.Fatalf("the idle portal: %v", err)
	}
}

// Huge page reservations are charged while they exist: a tenant that
// creates huge page regions and drops them unregistered, keeping their
// descriptors (half of them also mapped, not faulted in: reservations),
// holds no more huge pages than its quota (HugePages_Rsvd grows by at
// most that), its usage counts them, and once it lets go, the usage and
// HugePages_Rsvd fall back.
func TestHugepageReservationsCharged(t *testing.T) {
	if free := hugePagesFree(t); free < 16 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%d free 2 MB huge pages: CI must have the 16 this test needs (make setup)", free)
		}
		t.Skipf("%d free 2 MB huge pages, the test needs 16 (make setup reserves them)", free)
	}
	const quota = 8 << 20 // 4 huge pages
	e := setup(t, func(c *ctl.Config) {
		c.Quota.HugepageBytes = ctl.Count(quota)
		c.Guarantee.HugepageBytes = ctl.Count(0)
	})
	me := fmt.Sprintf("main uid %d", unix.Getuid())
	base := hugePagesRsvd(t)
	c := rawDial(t, e.sock)
	open, fd, err := rawSendFD(t, c, `{"v":1,"op":"open","name":"reserver"}`)
	if err != nil || fd < 0 || !open.Open.Hugetlb {
		t.Fatalf("open: the segment on huge pages %v, %v", err == nil && open.Open.Hugetlb, err)
	}
	seg, err := unix.Mmap(fd, 0, int(open.Open.MapSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rawSendFD(t, c, `{"v":1,"op":"attach"}`); err != nil {
		t.Fatal(err)
	}
	var (
		kept []int
		maps = [][]byte{seg}
	)
	letGo := func() {
		for _, m := range maps {
			unix.Munmap(m)
		}
		for _, fd := range kept {
			unix.Close(fd)
		}
		maps, kept = nil, nil
	}
	defer letGo()
	huge := 1 // the segment's
	for i := range 12 {
		// Each create_region drops the one before unregistered: the engine
		// lets go of it, the application does not.
		resp, fd, err := rawSendFD(t, c, `{"v":1,"op":"create_region","size":2097152}`)
		if err != nil || fd < 0 {
			t.Fatalf("create_region %d: %v", i, err)
		}
		kept = append(kept, fd)
		if i%2 == 1 {
			m, err := unix.Mmap(fd, 0, int(resp.Memory.MapSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			maps = append(maps, m)
		}
		if resp.Memory.Hugetlb {
			huge++
		}
		if u := held(t, e, me); u.HugepageBytes != uint64(huge)<<21 || u.Regions != i+1 {
			t.Fatalf("after %d regions kept, %d huge pages: the tenant holds %+v", i+1, huge, u)
		}
		// The reservations are the regions' huge pages (the segment's is
		// faulted in); another test process may hold some for a moment.
		enginetest.Eventually(t, "HugePages_Rsvd within the quota", func() bool {
			got := hugePagesRsvd(t) - base
			return got >= huge-1 && got <= quota>>21
		})
	}
	if huge != quota>>21 {
		t.Fatalf("%d huge pages given (with the segment's), the quota is %d", huge, quota>>21)
	}
	// The application lets go: everything is refunded, the reservations
	// are gone.
	c.Close()
	letGo()
	enginetest.Eventually(t, "the tenant refunded, its reservations released", func() bool {
		return held(t, e, me) == (ctlmsg.TenantUsage{}) && hugePagesRsvd(t) <= base
	})
}

func hugePagesRsvd(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "HugePages_Rsvd:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no HugePages_Rsvd in /proc/meminfo")
	return 0
}

// The memory objects the engine watches are bounded engine-wide: beyond
// MaxMemoryObjects, creation is refused, naming the bound; an object gone
// makes room at once.
func TestMemoryObjectsBounded(t *testing.T) {
	e := setup(t, func(c *ctl.Config) { c.MaxMemoryObjects = 3 })
	p := dial(t, e, "objects") // its segment: one
	r, err := p.RegisterRegion(4096, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RegisterRegion(4096, abi.PermAll); err != nil {
		t.Fatal(err)
	}
	_, err = p.RegisterRegion(4096, abi.PermAll)
	if !errors.Is(err, portal.ErrResource) || !strings.Contains(err.Error(), "create_region: the engine's tenants hold 3 memory objects, as many as it watches at once (MaxMemoryObjects") {
		t.Fatalf("a fourth object: %v", err)
	}
	if n, max := e.srv.MemoryObjects(); n != 3 || max != 3 {
		t.Fatalf("MemoryObjects = %d of %d", n, max)
	}
	if err := p.DeregisterRegion(r); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RegisterRegion(4096, abi.PermAll); err != nil {
		t.Fatalf("after one went: %v", err)
	}
}

// The portal library lets go of memory the engine dropped: a region of a
// portal its engine closed (the rings were corrupted) is unmapped by
// DeregisterRegion, which reports the closed portal, and the tenant is
// refunded at once, before it closes the portal.
func TestDeregisterOfClosedPortalUnmaps(t *testing.T) {
	e := setup(t, nil)
	me := fmt.Sprintf("main uid %d", unix.Getuid())
	p := dial(t, e, "closedbycore")
	r, err := p.RegisterRegion(64<<10, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	// Corrupt the command ring in the library's own mapping of the
	// segment (through /proc/self/mem): its producer index jumps past the
	// capacity.
	l := p.Layout()
	var idx [4]byte
	binary.LittleEndian.PutUint32(idx[:], l.CmdCap*3+5)
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if _, err := mem.WriteAt(idx[:], int64(mappingOf(t, "memfd:onerma-portal-closedbycore"))+int64(l.CmdOff)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the core to close the portal", func() bool { return e.stats(t).RingsCorrupt == 1 })
	before := held(t, e, me)
	err = p.DeregisterRegion(r)
	if !errors.Is(err, portal.ErrNoRegion) || !strings.Contains(err.Error(), "impossible ring indices") {
		t.Fatalf("DeregisterRegion of a closed portal's region: %v", err)
	}
	if r.Bytes() != nil {
		t.Fatal("the region is still mapped")
	}
	if u := held(t, e, me); u.Regions != before.Regions-1 || u.MemoryBytes != before.MemoryBytes-64<<10 {
		t.Fatalf("the tenant holds %+v, held %+v: the region not refunded", u, before)
	}
}

// mappingOf returns the address of this process's mapping of the memfd
// named name (/proc/self/maps).
func mappingOf(t *testing.T, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(f[5], name) {
			var lo, hi uint64
			if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil {
				t.Fatal(err)
			}
			return lo
		}
	}
	t.Fatalf("no mapping of %s", name)
	return 0
}
