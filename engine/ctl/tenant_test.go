package ctl_test

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// quotaErr returns the portal error's quota name (or "").
func quotaErr(err error) string {
	var pe *portal.Error
	if errors.As(err, &pe) && errors.Is(err, portal.ErrQuota) {
		return pe.Quota
	}
	return ""
}

// tenant returns the stats of the tenant named name (nil: none).
func tenant(t *testing.T, e *env, name string) *ctlmsg.TenantStats {
	t.Helper()
	for _, ts := range e.srv.Tenants() {
		if ts.Name == name {
			return &ts
		}
	}
	return nil
}

// TestHelperIdentity is the other process of TestIdentityPerProcess: it
// opens a portal, prints its identity and waits for stdin to close.
func TestHelperIdentity(t *testing.T) {
	sock := os.Getenv("ONERMA_CTL_IDENT_SOCKET")
	if sock == "" {
		t.Skip("helper process for TestIdentityPerProcess")
	}
	p, err := portal.Dial(sock, "child")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Printf("identity %d\n", p.Identity().PID)
	bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// childIdentity starts TestHelperIdentity against sock and returns the
// identity it reports; the child lives until the test ends.
func childIdentity(t *testing.T, sock string) uint32 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperIdentity$")
	cmd.Env = append(os.Environ(), "ONERMA_CTL_IDENT_SOCKET="+sock)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var id uint32
	if _, serr := fmt.Sscanf(line, "identity %d", &id); err != nil || serr != nil {
		t.Fatalf("child: %q %v", line, err)
	}
	return id
}

// An identity per process: every portal of a process shares it (so a
// process needs one K_d per region and op), whatever socket it comes
// through; another process has another, which is never handed out again;
// a K_d derived for one process's identity does not authenticate
// another's reads.
func TestIdentityPerProcess(t *testing.T) {
	e := setup(t, func(c *ctl.Config) {
		c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + ".pod", Mode: 0o600, Name: "pod",
			Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 16}})
	})
	a, b := dial(t, e, "a"), dial(t, e, "b")
	pod, err := portal.Dial(e.cfg.Sockets[1].Path, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	me := a.Identity().PID
	if me < ctl.FirstIdentity || b.Identity().PID != me || pod.Identity().PID != me {
		t.Fatalf("identities of one process: %d, %d, %d", me, b.Identity().PID, pod.Identity().PID)
	}
	// A connection that opens no portal (rmactl identity) is told the same.
	c := rawDial(t, e.sock)
	if resp, _, err := rawSendFD(t, c, `{"v":1,"op":"identity"}`); err != nil || resp.Identity.PID != me {
		t.Fatalf("identity op: %+v %v", resp.Identity, err)
	}

	child := childIdentity(t, e.sock)
	if child == me || child < ctl.FirstIdentity {
		t.Fatalf("child identity %d, ours %d", child, me)
	}
	if later := childIdentity(t, e.sock); later <= child {
		t.Fatalf("a later process got %d, not above %d: identities are handed out once", later, child)
	}

	// The owner derives K_d for the child; this process cannot use it.
	src, err := b.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fill(src.Bytes(), 3)
	sink, err := a.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	a.AllocSlots(2)
	if c := readWith(t, a, src, src.DeriveKey(engineIP, child, abi.OpRead), sink, 0); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("read with another process's K_d: %+v", c)
	}
	if c := readWith(t, a, src, src.DeriveKey(engineIP, me, abi.OpRead), sink, 64); c.Status != abi.StatusOK {
		t.Fatalf("read with our own K_d: %+v", c)
	}
}

// A tenant registering until refused gets at most its memory quota, and
// the refusal names it; what it gives back it can use again; another
// tenant is not affected; everything is refunded when it goes.
func TestQuotaMemory(t *testing.T) {
	const quota = 4 << 20
	e := setup(t, func(c *ctl.Config) {
		c.Hugetlb = ctl.HugetlbOff // ordinary pages: exact sizes
		c.Quota.MemoryBytes = ctl.Count(quota)
		c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + ".pod", Mode: 0o600, Name: "pod",
			Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 16}})
	})
	me := fmt.Sprintf("main uid %d", os.Getuid())
	p := dial(t, e, "hog")
	seg := p.Layout().Size
	var regions []*portal.Region
	var err error
	for {
		var r *portal.Region
		if r, err = p.RegisterRegion(1<<20, abi.PermAll); err != nil {
			break
		}
		regions = append(regions, r)
	}
	if len(regions) != 3 || quotaErr(err) != ctlmsg.QuotaMemoryBytes {
		t.Fatalf("%d regions of 1 MiB, then %v (quota %q)", len(regions), err, quotaErr(err))
	}
	held := 3<<20 + (seg+4095)/4096*4096
	want := fmt.Sprintf(`portal: engine: create_region: tenant %q holds %d bytes (3.0 MiB); 1048576 bytes (1.0 MiB) more would exceed its memory_bytes quota of 4194304 bytes (4.0 MiB) (socket main)`, me, held)
	if err.Error() != want {
		t.Fatalf("refusal:\n got %v\nwant %s", err, want)
	}
	if ts := tenant(t, e, me); ts == nil || ts.MemoryBytes != held || ts.Quota.MemoryBytes != quota || ts.Portals != 1 || ts.Conns != 1 {
		t.Fatalf("tenant stats %+v", ts)
	}
	// Another tenant (the same process through another socket) is not
	// charged for it.
	other, err := portal.Dial(e.cfg.Sockets[1].Path, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.RegisterRegion(3<<20, abi.PermAll); err != nil {
		t.Fatalf("the other tenant: %v", err)
	}
	// Given back, usable again.
	if err := p.DeregisterRegion(regions[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RegisterRegion(1<<20, abi.PermAll); err != nil {
		t.Fatalf("after a deregistration: %v", err)
	}
	p.Close()
	enginetest.Eventually(t, "the tenant refunded", func() bool { return tenant(t, e, me) == nil })
}

// Portals and slots are counted over all of a tenant's portals, beside
// each portal's own slot cap.
func TestQuotaPortalsAndSlots(t *testing.T) {
	e := setup(t, func(c *ctl.Config) { c.Quota.Portals, c.Quota.Slots = ctl.Count(2), ctl.Count(20) })
	me := fmt.Sprintf("main uid %d", os.Getuid())
	p1, p2 := dial(t, e, "one"), dial(t, e, "two")
	_, err := portal.Dial(e.sock, "three")
	if quotaErr(err) != ctlmsg.QuotaPortals || !strings.Contains(err.Error(), fmt.Sprintf(`open: tenant %q holds 2 portals; 1 more would exceed its portals quota of 2 (socket main)`, me)) {
		t.Fatalf("third portal: %v", err)
	}
	if _, err := p1.AllocSlots(16); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.AllocSlots(4); err != nil {
		t.Fatal(err)
	}
	_, err = p2.AllocSlots(1)
	if quotaErr(err) != ctlmsg.QuotaSlots || !strings.Contains(err.Error(), "holds 20 slots; 1 more would exceed its slots quota of 20") {
		t.Fatalf("slot 21: %v", err)
	}
	if got := e.stats(t).SlotsInUse; got != 20 {
		t.Fatalf("SlotsInUse %d, want 20 (the refused request took none)", got)
	}
	p1.Close()
	enginetest.Eventually(t, "p1 refunded", func() bool { ts := tenant(t, e, me); return ts != nil && ts.Portals == 1 && ts.Slots == 4 })
	p3 := dial(t, e, "three")
	if _, err := p3.AllocSlots(16); err != nil {
		t.Fatalf("after p1 went: %v", err)
	}
}

// Beyond its hugepage_bytes quota a tenant's memory comes from ordinary
// pages; another tenant still gets huge pages.
func TestQuotaHugepages(t *testing.T) {
	if free := hugePagesFree(t); free < 8 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%d free 2 MB huge pages: CI must have the 8 this test needs (make setup)", free)
		}
		t.Skipf("%d free 2 MB huge pages, the test needs 8 (make setup reserves them)", free)
	}
	e := setup(t, func(c *ctl.Config) {
		c.Quota.HugepageBytes = ctl.Count(4 << 20)
		c.Sockets = append(c.Sockets, ctl.SocketConfig{Path: c.Sockets[0].Path + ".pod", Mode: 0o600, Name: "pod",
			Tenant: ctl.TenantBySocket, Policy: ctl.AppPolicy{Default: 16}})
	})
	p := dial(t, e, "hog")
	if !p.Hugetlb() {
		t.Fatal("the segment did not get a huge page")
	}
	r1, err := p.RegisterRegion(2<<20, abi.PermAll)
	if err != nil || !r1.Hugetlb() {
		t.Fatalf("first region: hugetlb %v, %v", err == nil && r1.Hugetlb(), err)
	}
	r2, err := p.RegisterRegion(2<<20, abi.PermAll)
	if err != nil || r2.Hugetlb() {
		t.Fatalf("beyond the hugepage quota: hugetlb %v, %v (want ordinary pages)", err == nil && r2.Hugetlb(), err)
	}
	ts := tenant(t, e, fmt.Sprintf("main uid %d", os.Getuid()))
	if ts == nil || ts.HugepageBytes != 4<<20 || ts.MemoryBytes != 6<<20 {
		t.Fatalf("tenant stats %+v", ts)
	}
	other, err := portal.Dial(e.cfg.Sockets[1].Path, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if r, err := other.RegisterRegion(2<<20, abi.PermAll); err != nil || !r.Hugetlb() {
		t.Fatalf("the other tenant: hugetlb %v, %v", err == nil && r.Hugetlb(), err)
	}
}

func hugePagesFree(t *testing.T) int {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "HugePages_Free:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

// An application cannot punch a hole in a region it registered (the
// engine's loop would take a fault per page, or SIGBUS on a huge page the
// pool no longer has): every attempt fails EPERM while the engine serves
// reads of the region, which stay intact.
func TestPunchHoleRefused(t *testing.T) {
	e := setup(t, nil)
	c := rawDial(t, e.sock)
	rawOpen(t, c, "puncher")
	resp, fd, err := rawSendFD(t, c, `{"v":1,"op":"create_region","size":1048576}`)
	if err != nil {
		t.Fatal(err)
	}
	keep, _ := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	defer unix.Close(keep)
	mem := rawMap(t, fd, resp.Memory.MapSize)
	fill(mem, 9)
	reg, err := rawRegister(t, c, resp.Memory.Memory, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), mem...)

	reader := dial(t, e, "reader")
	reader.AllocSlots(1)
	sink, _ := reader.RegisterRegion(4096, abi.PermLocalWrite)
	var kr aesni.Key
	hex.Decode(kr[:], []byte(keyHex)) // the key rawRegister registers under
	id := reader.Identity()
	kd := aesni.DeriveKey(kr, id.Addr.As4(), id.PID, uint8(abi.OpRead))
	stop := make(chan struct{})
	punched := make(chan error, 1)
	go func() {
		var bad error
		for i := 0; ; i++ {
			select {
			case <-stop:
				punched <- bad
				return
			default:
			}
			off := int64(i%256) * 4096
			if err := unix.Fallocate(keep, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, 4096); err != unix.EPERM {
				bad = fmt.Errorf("fallocate PUNCH_HOLE at %d: %v, want EPERM", off, err)
			}
			if err := unix.Madvise(mem[off:off+4096], unix.MADV_REMOVE); err != unix.EPERM {
				bad = fmt.Errorf("MADV_REMOVE at %d: %v, want EPERM", off, err)
			}
		}
	}()
	s, _ := reader.Slot()
	for i := range 500 {
		off := uint64(i%256) * 4096
		if err := reader.Submit(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(i),
			Remote: engineIP, RemoteRegion: abi.RegionID(reg.Region), RemoteOffset: off, Key: kd,
			Local: sink, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
		if cpl := waitOne(t, reader); cpl.Status != abi.StatusOK || string(sink.Bytes()) != string(want[off:off+4096]) {
			t.Fatalf("read %d at %d while punching: %+v", i, off, cpl)
		}
	}
	close(stop)
	if err := <-punched; err != nil {
		t.Fatal(err)
	}
}

// By default no tenant gets more than a quarter of the host's memory
// (less the engine's own) or half of the huge pages the engine found
// free once it had its own.
func TestQuotaDefaultsFromHost(t *testing.T) {
	e := setup(t, nil)
	res, q := e.srv.Resources(), e.srv.Quota(0)
	var memTotalKB uint64
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			fmt.Sscan(v, &memTotalKB)
		}
	}
	if res.MemoryBytes >= memTotalKB<<10 || res.MemoryBytes < memTotalKB<<10/2 {
		t.Fatalf("memory left to tenants %d of %d", res.MemoryBytes, memTotalKB<<10)
	}
	if q.MemoryBytes != ctl.Pct(25).Of(res.MemoryBytes) || q.HugepageBytes != ctl.Pct(50).Of(res.HugepageBytes) {
		t.Fatalf("default quota %+v of %+v", q, res)
	}
	if res.HugepageBytes > uint64(hugePagesFree(t)+16)<<21 {
		t.Fatalf("%d bytes of huge pages for tenants, %d free now", res.HugepageBytes, hugePagesFree(t))
	}
}
