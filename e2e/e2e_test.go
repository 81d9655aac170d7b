package e2e

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

var (
	ipA = netip.MustParseAddr("10.98.0.1")
	ipB = netip.MustParseAddr("10.98.0.2")
)

// Verified reads of 1 B to 4 KB at odd offsets, both directions, between
// two engine processes over memif.
func TestMemifReads(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	pa, pb := dial(t, a, "app-a"), dial(t, b, "app-b")
	const size = 256 << 10
	ra := ownerRegion(t, pa, size, abi.PermRemoteRead)
	rb := ownerRegion(t, pb, size, abi.PermRemoteRead)
	verifiedReads(t, pa, ipB, rb)
	verifiedReads(t, pb, ipA, ra)
}

// The same over af_packet ports on a veth pair between two network
// namespaces: frames cross two kernels' network stacks.
func TestAFPacketVethReads(t *testing.T) {
	a, b := vethEngines(t, "ormt", "e2e-pa", "e2e-pb")
	pa, pb := dial(t, a, "app-a"), dial(t, b, "app-b")
	const size = 64 << 10
	rb := ownerRegion(t, pb, size, abi.PermRemoteRead)
	verifiedReads(t, pa, ipB, rb)
	ra := ownerRegion(t, pa, size, abi.PermRemoteRead)
	verifiedReads(t, pb, ipA, ra)
}

// A dead remote engine: ops to it end in TIMEOUT, within TIMEOUT, and give
// their window back.
func TestTimeoutWhenRemoteKilled(t *testing.T) {
	a, b := memifPair(t, []string{"-timeout", "20ms"}, nil)
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
	slots, _ := pa.AllocSlots(4)
	sink, _ := pa.RegisterRegion(16<<10, abi.PermLocalWrite)
	kd := kdFor(rb, pa)
	if err := pa.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 1,
		Remote: ipB, RemoteRegion: rb.ID(), Key: kd,
		Local: sink, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pa, 5*time.Second); c.Status != abi.StatusOK {
		t.Fatalf("before the kill: %+v", c)
	}
	b.Kill()
	for k, s := range slots {
		if err := pa.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(k),
			Remote: ipB, RemoteRegion: rb.ID(), Key: kd,
			Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
	}
	pa.Flush()
	for _, c := range waitN(t, pa, len(slots), 5*time.Second) {
		if c.Status != abi.StatusTimeout {
			t.Fatalf("after the kill: %+v", c)
		}
		if d := time.Duration(c.TotalDelayNs); d < 20*time.Millisecond || d > 2*time.Second {
			t.Fatalf("TIMEOUT after %v, configured 20ms", d)
		}
	}
	st, err := pa.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.WindowInUse != 0 || st.OpsInFlight != 0 {
		t.Fatalf("window %d, in flight %d after timeouts", st.WindowInUse, st.OpsInFlight)
	}
}

// A 4 KB window held by one op whose server is frozen: the ops queued
// behind it cannot enter service and end in DISPATCH_TIMEOUT; the op in
// service ends in TIMEOUT.
func TestDispatchTimeoutWhenWindowExhausted(t *testing.T) {
	a, b := memifPair(t, []string{"-window-bytes", "4096", "-dispatch-timeout", "5ms", "-timeout", "200ms"}, nil)
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
	slots, _ := pa.AllocSlots(8)
	sink, _ := pa.RegisterRegion(32<<10, abi.PermLocalWrite)
	kd := kdFor(rb, pa)
	if err := pa.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 99,
		Remote: ipB, RemoteRegion: rb.ID(), Key: kd,
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pa, 5*time.Second); c.Status != abi.StatusOK {
		t.Fatalf("warm-up: %+v", c)
	}
	if err := b.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer b.Thaw()
	for k, s := range slots {
		if err := pa.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(k),
			Remote: ipB, RemoteRegion: rb.ID(), Key: kd,
			Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
	}
	pa.Flush()
	got := map[abi.Status]int{}
	for _, c := range waitN(t, pa, len(slots), 5*time.Second) {
		got[c.Status]++
		if c.Status == abi.StatusDispatchTimeout && (c.IssueDelayNs != 0 || time.Duration(c.TotalDelayNs) < 5*time.Millisecond) {
			t.Fatalf("DISPATCH_TIMEOUT with delays %+v", c)
		}
	}
	if got[abi.StatusTimeout] != 1 || got[abi.StatusDispatchTimeout] != len(slots)-1 {
		t.Fatalf("statuses %v, want 1 TIMEOUT and %d DISPATCH_TIMEOUT", got, len(slots)-1)
	}
}

// A serving engine whose inbound queue is over its NACK threshold answers
// NACK at once; everything else is served, and nothing is lost.
func TestNackWhenServerQueueOverThreshold(t *testing.T) {
	a, b := memifPair(t, []string{"-slot-cap", "128"}, []string{"-nack-threshold", "2", "-serve-budget", "1"})
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	rb := ownerRegion(t, pb, 1<<20, abi.PermRemoteRead)
	slots, err := pa.AllocSlots(64)
	if err != nil {
		t.Fatal(err)
	}
	sink, _ := pa.RegisterRegion(64*4096, abi.PermLocalWrite)
	kd := kdFor(rb, pa)
	nacks := 0
	for round := 0; round < 20 && nacks == 0; round++ {
		for k, s := range slots {
			if err := pa.Post(&portal.Op{
				Type: portal.OpRead, Slot: s, Cookie: uint64(k),
				Remote: ipB, RemoteRegion: rb.ID(), RemoteOffset: uint64(k) * 4096, Key: kd,
				Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
			}); err != nil {
				t.Fatal(err)
			}
		}
		pa.Flush()
		for _, c := range waitN(t, pa, len(slots), 10*time.Second) {
			switch c.Status {
			case abi.StatusNack:
				nacks++
			case abi.StatusOK:
				k := int(c.Cookie)
				if sink.Bytes()[k*4096+100] != pattern(uint64(k*4096+100)) {
					t.Fatalf("read %d data wrong", k)
				}
			default:
				t.Fatalf("unexpected %+v", c)
			}
		}
	}
	if nacks == 0 {
		t.Fatal("no NACK with a 64-op burst against a threshold of 2")
	}
	st, _ := pb.Stats()
	if st.ReqNacked == 0 {
		t.Fatalf("server counted no NACKs: %+v", st)
	}
	t.Logf("%d NACKs", nacks)
}

// An application naming another application's region, or memory outside
// its own, is refused with a precise status and touches nothing.
func TestForeignRegionAndBoundsRefused(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	victim, attacker, owner := dial(t, a, "victim"), dial(t, a, "attacker"), dial(t, b, "owner")
	vr := ownerRegion(t, victim, 8192, abi.PermAll)
	rb := ownerRegion(t, owner, 8192, abi.PermRemoteRead)
	slots, _ := attacker.AllocSlots(2)
	own, _ := attacker.RegisterRegion(4096, abi.PermLocalWrite)
	before := append([]byte(nil), vr.Bytes()...)
	// A command naming the victim's region as the sink (forged directly:
	// the portal library would refuse a region it does not own).
	cmd := abi.Command{Op: abi.OpRead, Slot: slots[0], Cookie: 7, RemoteAddr: 0x0a580002, RemoteRegion: rb.ID(),
		LocalRegion: vr.ID(), Length: 4096}
	if err := attacker.PostCommand(&cmd); err != nil {
		t.Fatal(err)
	}
	attacker.Flush()
	if c := waitOne(t, attacker, 5*time.Second); c.Status != abi.StatusLocalRegion || c.Cookie != 7 {
		t.Fatalf("foreign sink: %+v", c)
	}
	// The victim's slot.
	vslots, _ := victim.AllocSlots(1)
	cmd = abi.Command{Op: abi.OpRead, Slot: vslots[0], Cookie: 8, RemoteAddr: 0x0a580002, RemoteRegion: rb.ID(), LocalRegion: own.ID(), Length: 64}
	attacker.PostCommand(&cmd)
	attacker.Flush()
	if c := waitOne(t, attacker, 5*time.Second); c.Status != abi.StatusBadSlot {
		t.Fatalf("foreign slot: %+v", c)
	}
	// Out of bounds, locally and remotely.
	cmd = abi.Command{Op: abi.OpRead, Slot: slots[1], Cookie: 9, RemoteAddr: 0x0a580002, RemoteRegion: rb.ID(), LocalRegion: own.ID(), LocalOffset: 4000, Length: 200}
	attacker.PostCommand(&cmd)
	attacker.Flush()
	if c := waitOne(t, attacker, 5*time.Second); c.Status != abi.StatusLocalBounds {
		t.Fatalf("local bounds: %+v", c)
	}
	// The owner authorised the attacker to read rb: bounds are still checked.
	if err := attacker.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[1], Cookie: 10,
		Remote: ipB, RemoteRegion: rb.ID(), RemoteOffset: 8000, Key: kdFor(rb, attacker),
		Local: own, Length: 1000,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, attacker, 5*time.Second); c.Status != abi.StatusRemoteBounds {
		t.Fatalf("remote bounds: %+v", c)
	}
	// A region id the server does not have: it holds no K_r to
	// authenticate the request, and does not say whether the id exists.
	if err := attacker.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[1], Cookie: 11,
		Remote: ipB, RemoteRegion: abi.MakeRegionID(200, 1), Key: kdFor(rb, attacker),
		Local: own, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, attacker, 5*time.Second); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("unknown remote region: %+v", c)
	}
	if string(before) != string(vr.Bytes()) {
		t.Fatal("the victim's region changed")
	}
}

// An application that dies (SIGKILL) with ops in flight: the engine
// reclaims its slots, window and regions.
func TestCrashedAppReclaimed(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	pb := dial(t, b, "owner")
	rb := ownerRegion(t, pb, 1<<20, abi.PermRemoteRead)
	watcher := dial(t, a, "watcher")
	base, err := watcher.Stats()
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(os.Environ(), "ONERMA_E2E_CHILD=1", "ONERMA_CTL="+a.Socket, "ONERMA_PEER="+ipB.String(),
		"ONERMA_REGION="+strconv.FormatUint(uint64(rb.ID()), 10))
	child.Stderr = os.Stderr
	out, _ := child.StdoutPipe()
	in, _ := child.StdinPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	// The child asks the owner (this process) for its K_d, naming the
	// identity its engine stamps on its requests.
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	var (
		cAddr string
		cPID  uint32
	)
	if _, serr := fmt.Sscanf(line, "identity %s %d", &cAddr, &cPID); err != nil || serr != nil || cPID == 0 || cPID == watcher.Identity().PID {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child identity: %q %v (this process's: %d)", line, err, watcher.Identity().PID)
	}
	ckd := rb.DeriveKey(netip.MustParseAddr(cAddr), cPID, abi.OpRead)
	fmt.Fprintf(in, "%x\n", ckd[:])
	line, err = br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child: %q", line)
	}
	childRegion, _ := strconv.ParseUint(f[1], 10, 32)
	childKr, err := parseKey(f[2])
	if err != nil {
		child.Process.Kill()
		child.Wait()
		t.Fatal(err)
	}
	// The child holds its slots and its reads succeed (watcher does none).
	ok := abi.StatusOK.String()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mid, err := watcher.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if mid.SlotsInUse >= base.SlotsInUse+16 && mid.Completed[ok] > base.Completed[ok] {
			break
		}
		if time.Now().After(deadline) {
			child.Process.Kill()
			child.Wait()
			t.Fatalf("child holds no slots or none of its reads succeeded: %+v", mid)
		}
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := watcher.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.SlotsInUse == base.SlotsInUse && st.OpsInFlight == 0 && st.WindowInUse == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reclaimed: base %+v now %+v", base, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The child's region is gone for remote readers too: the engine keeps
	// only its tombstone, so a key derived from the child's own K_r is
	// told REMOTE_REGION, and any other key cannot be authenticated.
	slots, _ := pb.AllocSlots(1)
	sink, _ := pb.RegisterRegion(4096, abi.PermLocalWrite)
	id := pb.Identity()
	kd := aesni.DeriveKey(childKr, id.Addr.As4(), id.PID, uint8(abi.OpRead))
	if err := pb.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 1,
		Remote: ipA, RemoteRegion: abi.RegionID(childRegion), Key: kd,
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pb, 5*time.Second); c.Status != abi.StatusRemoteRegion {
		t.Fatalf("read of a dead app's region with its key: %+v", c)
	}
	other := aesni.DeriveKey(aesni.Key{7}, id.Addr.As4(), id.PID, uint8(abi.OpRead))
	if err := pb.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 2,
		Remote: ipA, RemoteRegion: abi.RegionID(childRegion), Key: other,
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pb, 5*time.Second); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("read of a dead app's region with another key: %+v", c)
	}
	if sink.Bytes()[0] != 0 {
		t.Fatal("the refused read wrote the sink")
	}
}

func parseKey(s string) (aesni.Key, error) {
	var k aesni.Key
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("bad key %q: %v", s, err)
	}
	copy(k[:], b)
	return k, nil
}

// childApp is the crashing application of TestCrashedAppReclaimed: it
// reports its identity, reads its K_d from stdin (from the region's owner),
// and keeps 16 reads in flight until it is killed. It registers a region
// of its own and prints its id and key (a test's shortcut: real
// applications never reveal K_r).
func childApp() int {
	p, err := portal.Dial(os.Getenv("ONERMA_CTL"), "doomed")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	id := p.Identity()
	fmt.Printf("identity %s %d\n", id.Addr, id.PID)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kd, err := parseKey(line)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	v, _ := strconv.ParseUint(os.Getenv("ONERMA_REGION"), 10, 32)
	peer := netip.MustParseAddr(os.Getenv("ONERMA_PEER"))
	slots, err := p.AllocSlots(16)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := p.RegisterRegion(16*4096, abi.PermAll)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for k, s := range slots {
		p.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(k),
			Remote: peer, RemoteRegion: abi.RegionID(v), RemoteOffset: uint64(k) * 4096, Key: kd,
			Local: r, LocalOffset: uint64(k) * 4096, Length: 4096,
		})
	}
	p.Flush()
	kr := r.Key()
	fmt.Printf("ready %d %x\n", uint32(r.ID()), kr[:])
	cpl := make([]abi.Completion, 16)
	for {
		n, err := p.Poll(cpl)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, c := range cpl[:n] {
			k := int(c.Cookie)
			p.Post(&portal.Op{
				Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
				Remote: peer, RemoteRegion: abi.RegionID(v), RemoteOffset: uint64(k) * 4096, Key: kd,
				Local: r, LocalOffset: uint64(k) * 4096, Length: 4096,
			})
		}
		p.Flush()
	}
}

// An application that waits sleeps on the engine's completion doorbell
// (an eventfd) and is woken by it, instead of spinning.
func TestDoorbellWakesWaitingApp(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	pa, pb := dial(t, a, "sleeper"), dial(t, b, "owner")
	if !pa.Doorbell() {
		t.Fatal("portal has no doorbell")
	}
	rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
	slots, _ := pa.AllocSlots(1)
	sink, _ := pa.RegisterRegion(4096, abi.PermLocalWrite)
	for k := 0; k < 20; k++ {
		// The server freezes briefly, so the reply comes after Wait's
		// spin phase and it must sleep.
		if err := b.Freeze(); err != nil {
			t.Fatal(err)
		}
		if err := pa.Submit(&portal.Op{
			Type: portal.OpRead, Slot: slots[0], Cookie: uint64(k),
			Remote: ipB, RemoteRegion: rb.ID(), RemoteOffset: uint64(k) * 64, Key: kdFor(rb, pa),
			Local: sink, Length: 64,
		}); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(2*time.Millisecond, func() { b.Thaw() })
		c := waitOne(t, pa, 5*time.Second)
		if c.Status != abi.StatusOK || sink.Bytes()[10] != pattern(uint64(k)*64+10) {
			t.Fatalf("read %d: %+v", k, c)
		}
	}
	st, err := pa.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Doorbells == 0 {
		t.Fatalf("no doorbell rung in 20 sleeping waits: %+v", st)
	}
	t.Logf("%d doorbells for 20 reads", st.Doorbells)
}

// rmactl reads a running engine's counters and the identity it stamps.
func TestRmactl(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
	slots, _ := pa.AllocSlots(1)
	sink, _ := pa.RegisterRegion(4096, abi.PermLocalWrite)
	if err := pa.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 1,
		Remote: ipB, RemoteRegion: rb.ID(), Key: kdFor(rb, pa),
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pa, 5*time.Second); c.Status != abi.StatusOK {
		t.Fatalf("%+v", c)
	}
	out, err := exec.Command(rmactlBin, "-socket", a.Socket, "stats").CombinedOutput()
	if err != nil {
		t.Fatalf("rmactl stats: %v\n%s", err, out)
	}
	for _, want := range []string{"posted ", "slots_in_use ", "completed.OK ", "rx_auth_failed ", "req_auth_failed ", "rekeys ", "iv_errors ",
		"completed_by_op.READ.OK ", "arp_unsolicited ", "neighbor_refreshes ", "no_route ", "port.name                net_memif0", "port.driver.tx_frames ", "port.dev.rx_packets ", "loop.iterations ", "delay_samples ",
		"cmd_depth", "reader "} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("rmactl stats lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(rmactlBin, "-socket", a.Socket, "identity").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "address "+ipA.String()) {
		t.Fatalf("rmactl identity: %v\n%s", err, out)
	}
	// rmactl is a process of its own: an identity of its own, never this
	// process's, in the line "pid N".
	var n uint32
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "pid "); ok {
			fmt.Sscan(v, &n)
		}
	}
	if n == 0 || n == pa.Identity().PID {
		t.Fatalf("rmactl identity: pid %d (this process: %d)\n%s", n, pa.Identity().PID, out)
	}
}

// Verified reads between two engines on net_tap ports joined by a Linux
// bridge: frames cross the kernel's tap driver and bridge.
func TestTapBridgeReads(t *testing.T) {
	needEngines(t)
	dir := t.TempDir()
	tag := fmt.Sprintf("%d", os.Getpid()%1000)
	oa := testbed.Tap(rmadBin, dir, "e2e-ta", ipA.String(), "ormta"+tag, "02:88:00:00:00:01")
	ob := testbed.Tap(rmadBin, dir, "e2e-tb", ipB.String(), "ormtb"+tag, "02:88:00:00:00:02")
	oa.Extra = append(oa.Extra, relaxed...)
	ob.Extra = append(ob.Extra, relaxed...)
	a, b := start(t, oa), start(t, ob)
	br, err := testbed.NewBridge("ormbr"+tag, "ormta"+tag, "ormtb"+tag)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("cannot create a bridge:", err)
	}
	defer br.Close()
	pa, pb := dial(t, a, "app-a"), dial(t, b, "app-b")
	const size = 64 << 10
	rb := ownerRegion(t, pb, size, abi.PermRemoteRead)
	verifiedReads(t, pa, ipB, rb)
}
