package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// tenantQuota is the memory quota of TestTenantQuotaUnprivileged's
// engine: small enough for CI, large enough to span huge and ordinary
// pages.
const tenantQuota = 256 << 20

// tenantRegion is the size of the regions the unprivileged tenant
// registers: two huge pages.
const tenantRegion = 4 << 20

// tenantPhase is how long one round of reads lasts.
const tenantPhase = 250 * time.Millisecond

// tenantChild is the unprivileged application of
// TestTenantQuotaUnprivileged (it runs as uid 65534). It registers regions
// of tenantRegion bytes until the engine refuses, and reports
//
//	registered N HUGE QUOTA MESSAGE
//
// (regions, of which on huge pages, the refusal's quota and message); then,
// for each line the parent sends, it reads its own first region through
// the engine for tenantPhase and checks every byte, while a goroutine
// makes a syscall in a loop: a cheap one for "control", an attempt to
// punch a hole in one of its regions for "punch". It answers "done READS
// EPERM OTHER" (hole punches refused with EPERM, and otherwise), and
// exits when stdin closes.
func tenantChild() int {
	fail := func(err error) int { fmt.Println("error", err); return 1 }
	// It sleeps on the doorbell for its completions: one busy thread (the
	// syscall loop below) is enough on two shared CPUs.
	p, err := portal.DialOptions(os.Getenv("ONERMA_E2E_TENANT"), "hog", portal.Options{WaitSpins: -1})
	if err != nil {
		return fail(err)
	}
	slots, err := p.AllocSlots(1)
	if err != nil {
		return fail(err)
	}
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		return fail(err)
	}
	var regions []*portal.Region
	huge := 0
	for {
		r, err := p.RegisterRegion(tenantRegion, abi.PermAll)
		if err != nil {
			var pe *portal.Error
			if !errors.As(err, &pe) {
				return fail(err)
			}
			fmt.Printf("registered %d %d %s %s\n", len(regions), huge, pe.Quota, strings.ReplaceAll(pe.Msg, "\n", " "))
			break
		}
		if r.Hugetlb() {
			huge++
		}
		b := r.Bytes()
		for i := 0; i < len(b); i += 4096 {
			b[i] = pattern(uint64(i))
		}
		regions = append(regions, r)
	}
	if len(regions) == 0 {
		return fail(errors.New("no region registered"))
	}
	src := regions[0]
	id := p.Identity()
	kd := src.DeriveKey(id.Addr, id.PID, abi.OpRead)
	readFor := func(d time.Duration) (int, error) {
		n := 0
		cpl := make([]abi.Completion, 1)
		for end := time.Now().Add(d); time.Now().Before(end); n++ {
			off := uint64(n%(tenantRegion/4096)) * 4096
			if err := p.Submit(&portal.Op{
				Type: portal.OpRead, Slot: slots[0], Cookie: uint64(n),
				Remote: id.Addr, RemoteRegion: src.ID(), RemoteOffset: off, Key: kd,
				Local: sink, Length: 4096,
			}); err != nil {
				return n, err
			}
			if _, err := p.Wait(context.Background(), cpl); err != nil {
				return n, err
			}
			if cpl[0].Status != abi.StatusOK || sink.Bytes()[0] != pattern(off) {
				return n, fmt.Errorf("read at %d: %v, byte %d", off, cpl[0].Status, sink.Bytes()[0])
			}
		}
		return n, nil
	}
	// Each phase: a second of reads beside a goroutine making syscalls in
	// a loop; only what the syscall is differs.
	phase := func(punch bool) (reads, eperm, other int, err error) {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !punch {
					unix.Getppid()
					continue
				}
				b := regions[i%len(regions)].Bytes()
				off := (i / len(regions) % (tenantRegion / (2 << 20))) * (2 << 20)
				if err := unix.Madvise(b[off:off+2<<20], unix.MADV_REMOVE); err == unix.EPERM {
					eperm++
				} else {
					other++
				}
			}
		}()
		reads, err = readFor(tenantPhase)
		close(stop)
		<-done
		return reads, eperm, other, err
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		n, eperm, other, err := phase(sc.Text() == "punch")
		if err != nil {
			return fail(err)
		}
		fmt.Printf("done %d %d %d\n", n, eperm, other)
	}
	return 0
}

// hasCap reports whether this process has capability c (CapEff).
func hasCap(t *testing.T, c int) bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps&(1<<c) != 0
		}
	}
	return false
}

// procStatusKB reads a "Key: N kB" line of /proc/pid/status.
func procStatusKB(t *testing.T, pid int, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			f := strings.Fields(v)
			n, _ := strconv.ParseUint(f[0], 10, 64)
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// TestTenantQuotaUnprivileged: an unprivileged application (uid 65534)
// registering regions until refused gets at most its tenant's memory
// quota, and at most its share of the huge pages (beyond it, ordinary
// pages); the refusal names the quota; rmad's resident memory grows by no
// more than the quota; another tenant still gets huge pages afterwards.
// The application cannot punch holes in its regions (EPERM), and trying
// does not stall the engine's loop (loop.stalls, compared with a second of
// the same reads without it). rmad has lowered its oom_score_adj.
func TestTenantQuotaUnprivileged(t *testing.T) {
	needEngines(t)
	freeHuge, _ := testbed.HugepagesFree()
	// The unprivileged application must reach the socket and run the test
	// binary: both in a directory it may enter.
	dir, err := os.MkdirTemp("", "onerma-e2e-tenant-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	bin := filepath.Join(dir, "e2e.test")
	if b, err := os.ReadFile(self); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	cfg := filepath.Join(dir, "rmad.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"ctl": {"quota": {"memory_bytes": %d}}}`, tenantQuota)), 0o644)
	o := testbed.Loopback(rmadBin, dir, "e2e-tq", "10.98.5.1")
	o.Extra = append(append([]string(nil), relaxed...), "-config", cfg)
	e := start(t, o)

	// Lowering oom_score_adj takes CAP_SYS_RESOURCE, which some
	// containers (this test's, maybe) do not give even to root: then rmad
	// says so in its log.
	adj, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", e.Pid()))
	switch {
	case strings.TrimSpace(string(adj)) == "-999":
	case !hasCap(t, unix.CAP_SYS_RESOURCE) && strings.Contains(e.Tail(200), "oom_score_adj not set (lowering it needs CAP_SYS_RESOURCE)"):
		t.Logf("no CAP_SYS_RESOURCE here: rmad's oom_score_adj stays %s, as its log says", strings.TrimSpace(string(adj)))
	default:
		t.Errorf("rmad's oom_score_adj is %q, want -999", adj)
	}
	root := dial(t, e, "root")
	base, err := root.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var rootQuota ctlmsg.TenantUsage
	for _, ts := range base.Tenants {
		if ts.Name == "main uid 0" {
			rootQuota = ts.Quota
		}
	}
	if rootQuota.MemoryBytes != tenantQuota {
		t.Fatalf("tenants %+v: want a memory quota of %d", base.Tenants, tenantQuota)
	}
	rss0 := procStatusKB(t, e.Pid(), "VmRSS")

	child := exec.Command(bin, "-test.run=^$")
	child.Env = append(os.Environ(), "ONERMA_E2E_TENANT="+e.Socket)
	child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
	child.Stderr = os.Stderr
	in, _ := child.StdinPipe()
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); child.Process.Kill(); child.Wait() }()
	br := bufio.NewReader(out)
	line := func(prefix string) []string {
		t.Helper()
		l, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(l, prefix+" ") {
			t.Fatalf("the unprivileged application: %q %v, want %q", l, err, prefix)
		}
		return strings.SplitN(strings.TrimSpace(l), " ", 5)
	}
	f := line("registered")
	n, _ := strconv.Atoi(f[1])
	huge, _ := strconv.Atoi(f[2])
	t.Logf("uid 65534 registered %d regions of %d MiB (%d on huge pages), then: %s", n, tenantRegion>>20, huge, f[4])
	if f[3] != ctlmsg.QuotaMemoryBytes || !strings.Contains(f[4], `tenant "main uid 65534" holds`) || !strings.Contains(f[4], "memory_bytes quota of 268435456 bytes") {
		t.Fatalf("refusal %q (quota %q)", f[4], f[3])
	}
	if got := uint64(n) * tenantRegion; got > tenantQuota || got < tenantQuota-3*tenantRegion {
		t.Fatalf("%d bytes of regions under a quota of %d", got, tenantQuota)
	}
	mid, err := root.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var hog *ctlmsg.TenantStats
	for i := range mid.Tenants {
		if mid.Tenants[i].Name == "main uid 65534" {
			hog = &mid.Tenants[i]
		}
	}
	if hog == nil || hog.MemoryBytes > tenantQuota || hog.HugepageBytes > hog.Quota.HugepageBytes || hog.UID == nil || *hog.UID != 65534 {
		t.Fatalf("the unprivileged tenant %+v", hog)
	}
	if grew := procStatusKB(t, e.Pid(), "VmRSS") - rss0; grew > tenantQuota+16<<20 {
		t.Fatalf("rmad's resident memory grew by %d MiB, beyond the quota of %d MiB", grew>>20, tenantQuota>>20)
	}

	// Punching holes, against the same reads alone.
	loop := func() ctlmsg.LoopStats {
		st, err := root.Stats()
		if err != nil || st.Loop == nil {
			t.Fatalf("stats: %+v %v", st, err)
		}
		return *st.Loop
	}
	// Rounds of each, interleaved: the engine's share of two CPUs shared
	// with the test and the application's two busy threads drifts.
	var (
		reads, eperm, other [2]int
		stalls              [2]uint64
		stalled             [2]time.Duration
		perRound            [2][]time.Duration
	)
	for round := range 8 {
		k, what := round%2, [2]string{"control", "punch"}[round%2]
		before := loop()
		fmt.Fprintln(in, what)
		f := line("done")
		after := loop()
		r, _ := strconv.Atoi(f[1])
		ep, _ := strconv.Atoi(f[2])
		ot, _ := strconv.Atoi(f[3])
		reads[k] += r
		eperm[k] += ep
		other[k] += ot
		stalls[k] += after.Stalls - before.Stalls
		stalled[k] += time.Duration(after.StalledNs - before.StalledNs)
		perRound[k] = append(perRound[k], time.Duration(after.StalledNs-before.StalledNs))
	}
	t.Logf("4 × %v of verified 4 KB reads beside a syscall loop: %d beside getppid (loop stalls %d, %v), %d beside %d hole punches refused (loop stalls %d, %v)",
		tenantPhase, reads[0], stalls[0], stalled[0], reads[1], eperm[1], stalls[1], stalled[1])
	if eperm[1] == 0 || other[1] != 0 {
		t.Fatalf("hole punching: %d refused with EPERM, %d otherwise", eperm[1], other[1])
	}
	// What is checked is that punching costs the loop no more than any
	// syscall loop does (a punched page would cost a fault per page the
	// loop touches in every round, and a huge page the pool no longer has
	// a SIGBUS): the rounds' medians, so that one stall the rest of a
	// shared host causes in one round does not decide it.
	if mp, mc := medianDuration(perRound[1]), medianDuration(perRound[0]); mp > 2*mc+50*time.Millisecond {
		t.Fatalf("punching: %d reads, loop stalled %v (median round %v, rounds %v); the same syscall loop without punching: %d reads, %v (median round %v, rounds %v)",
			reads[1], stalled[1], mp, perRound[1], reads[0], stalled[0], mc, perRound[0])
	}

	// Another tenant still gets huge pages.
	if freeHuge < 64 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%d free huge pages: CI must have enough for this test (64)", freeHuge)
		}
		t.Logf("%d free huge pages at start: huge page shares not checked", freeHuge)
	} else {
		if huge == 0 || uint64(huge)*tenantRegion > hog.Quota.HugepageBytes {
			t.Fatalf("%d regions of the unprivileged tenant on huge pages, its quota %d bytes", huge, hog.Quota.HugepageBytes)
		}
		r, err := root.RegisterRegion(2<<20, abi.PermAll)
		if err != nil || !r.Hugetlb() {
			t.Fatalf("another tenant after the unprivileged one: hugetlb %v, %v", err == nil && r.Hugetlb(), err)
		}
	}

	// Gone with its process: everything reclaimed.
	in.Close()
	child.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := root.Stats()
		if err != nil {
			t.Fatal(err)
		}
		gone := true
		for _, ts := range st.Tenants {
			gone = gone && ts.Name != "main uid 65534"
		}
		if gone && procStatusKB(t, e.Pid(), "VmRSS") < rss0+32<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unprivileged tenant not reclaimed: %+v, rss %d MiB (had %d)", st.Tenants, procStatusKB(t, e.Pid(), "VmRSS")>>20, rss0>>20)
		}
	}
}

// medianDuration is the median of d (d is sorted in place).
func medianDuration(d []time.Duration) time.Duration {
	slices.Sort(d)
	n := len(d)
	if n%2 == 1 {
		return d[n/2]
	}
	return (d[n/2-1] + d[n/2]) / 2
}
