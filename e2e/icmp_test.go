package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// ipIn runs ip(8) with args and fails the test on error.
func ipIn(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// sysctlIn sets a sysctl inside network namespace ns.
func sysctlIn(t *testing.T, ns, kv string) {
	t.Helper()
	ipIn(t, "netns", "exec", ns, "sysctl", "-qw", kv)
}

var pingReceived = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// ping runs ping(8) inside ns toward dst with extra options and returns
// how many of count echoes were answered.
func ping(t *testing.T, ns, dst string, count int, opts ...string) int {
	t.Helper()
	args := append([]string{"netns", "exec", ns, "ping", "-n", "-c", fmt.Sprint(count), "-W", "1"}, opts...)
	out, _ := exec.Command("ip", append(args, dst)...).CombinedOutput() // exit 1 when some are lost
	m := pingReceived.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("ping %s from %s: %s", dst, ns, out)
	}
	var got int
	fmt.Sscan(m[2], &got)
	t.Logf("ping %s %v from %s: %s of %s answered", dst, opts, ns, m[2], m[1])
	return got
}

// TestPingAFPacket: the kernel in the other namespace, with an address in
// the engine's subnet, pings the engine on its af_packet port (the
// engine's side of the veth has no address: only rmad answers), and gets
// every echo back, the largest a 1500-byte MTU carries included. The
// engine counts them, and rmactl shows the counters.
func TestPingAFPacket(t *testing.T) {
	needEngines(t)
	v, err := testbed.NewVethPair(fmt.Sprintf("ormp%d", os.Getpid()%1000))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("network namespaces unavailable:", err)
	}
	t.Cleanup(v.Close)
	ipIn(t, "-n", v.NSB, "addr", "add", "10.98.0.9/24", "dev", v.IfB)
	o := testbed.AFPacket(rmadBin, t.TempDir(), "e2e-ping", ipA.String(), v.NSA, v.IfA)
	o.Extra = relaxed
	a := start(t, o)
	if got := ping(t, v.NSB, ipA.String(), 3); got != 3 {
		t.Fatalf("%d of 3 echoes answered", got)
	}
	// 1472 data bytes: a 1500-byte datagram, DF set.
	if got := ping(t, v.NSB, ipA.String(), 2, "-s", "1472", "-M", "do", "-i", "0.2"); got != 2 {
		t.Fatalf("%d of 2 full-MTU echoes answered", got)
	}
	p := dial(t, a, "icmp")
	st := stats(t, p)
	if st.ICMPEchoReplies != 5 || st.ICMPRateLimited != 0 || st.RxICMPMalformed != 0 || st.ICMPEchoTooBig != 0 {
		t.Fatalf("echo counters: replies %d, rate-limited %d, malformed %d, too big %d", st.ICMPEchoReplies, st.ICMPRateLimited, st.RxICMPMalformed, st.ICMPEchoTooBig)
	}
	out, err := exec.Command(rmactlBin, "-socket", a.Socket, "stats").CombinedOutput()
	if err != nil || !regexp.MustCompile(`icmp_echo_replies +5\n`).Match(out) {
		t.Fatalf("rmactl stats: %v\n%s", err, out)
	}
}

// TestFragNeededFromRouter: two engines on af_packet ports reach each
// other through a Linux router namespace (kernel forwarding; proxy ARP
// stands in for a gateway, so the engines need no routes) whose link
// toward engine B has an MTU of 1280. The router answers each engine's
// ping. B's 4 KB READs from A cannot come back: the router refuses A's
// 1500-byte responses with ICMP "fragmentation needed", which A counts,
// records (destination B, MTU 1280) and rmad logs; A keeps its MTU, so
// those READs end TIMEOUT while small ones succeed.
func TestFragNeededFromRouter(t *testing.T) {
	needEngines(t)
	pre := fmt.Sprintf("ormf%d", os.Getpid()%1000)
	nsA, nsR, nsB := pre+"a", pre+"r", pre+"b"
	a0, r0, r1, b0 := pre+"a0", pre+"r0", pre+"r1", pre+"b0"
	clean := func() {
		for _, ns := range []string{nsA, nsR, nsB} {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	}
	clean()
	if err := exec.Command("ip", "netns", "add", nsA).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("network namespaces unavailable:", err)
	}
	t.Cleanup(clean) // after the engines stop (cleanups run last-in first-out)
	ipIn(t, "netns", "add", nsR)
	ipIn(t, "netns", "add", nsB)
	ipIn(t, "link", "add", a0, "netns", nsA, "type", "veth", "peer", "name", r0, "netns", nsR)
	ipIn(t, "link", "add", b0, "netns", nsB, "type", "veth", "peer", "name", r1, "netns", nsR)
	for _, l := range [][2]string{{nsA, a0}, {nsR, r0}, {nsR, r1}, {nsB, b0}} {
		sysctlIn(t, l[0], "net.ipv6.conf."+l[1]+".disable_ipv6=1")
		ipIn(t, "-n", l[0], "link", "set", l[1], "up")
	}
	ipIn(t, "-n", nsR, "link", "set", "lo", "up")
	ipIn(t, "-n", nsR, "link", "set", r1, "mtu", "1280")
	ipIn(t, "-n", nsR, "addr", "add", "10.98.0.254/32", "dev", r0)
	ipIn(t, "-n", nsR, "addr", "add", "10.98.0.253/32", "dev", r1)
	ipIn(t, "-n", nsR, "route", "add", ipA.String()+"/32", "dev", r0)
	ipIn(t, "-n", nsR, "route", "add", ipB.String()+"/32", "dev", r1)
	sysctlIn(t, nsR, "net.ipv4.ip_forward=1")
	for _, r := range []string{r0, r1} {
		sysctlIn(t, nsR, "net.ipv4.conf."+r+".proxy_arp=1")
		sysctlIn(t, nsR, "net.ipv4.neigh."+r+".proxy_delay=0") // answer at once, within the engines' resolve timeout
	}

	dir := t.TempDir()
	oa := testbed.AFPacket(rmadBin, dir, "e2e-fna", ipA.String(), nsA, a0)
	ob := testbed.AFPacket(rmadBin, dir, "e2e-fnb", ipB.String(), nsB, b0)
	oa.Extra = append([]string{"-resolve-timeout", "1s"}, relaxed...)
	ob.Extra = oa.Extra
	a, b := start(t, oa), start(t, ob)

	for _, ip := range []string{ipA.String(), ipB.String()} {
		if got := ping(t, nsR, ip, 3); got != 3 {
			t.Fatalf("the router pinged %s: %d of 3 answered", ip, got)
		}
	}

	pa, pb := dial(t, a, "owner"), dial(t, b, "reader")
	ra := ownerRegion(t, pa, 64<<10, abi.PermRemoteRead)
	kd := kdFor(ra, pb)
	slots, err := pb.AllocSlots(4)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := pb.RegisterRegion(16<<10, abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		t.Fatal(err)
	}
	read := func(size uint32) abi.Completion {
		t.Helper()
		if err := pb.Submit(&portal.Op{
			Type: portal.OpRead, Slot: slots[0], Cookie: uint64(size),
			Remote: ipA, RemoteRegion: ra.ID(), Key: kd,
			Local: sink, Length: size,
		}); err != nil {
			t.Fatal(err)
		}
		return waitOne(t, pb, 10*time.Second)
	}
	if c := read(64); c.Status != abi.StatusOK {
		t.Fatalf("64 B READ across the router: %+v", c)
	}
	for range 2 {
		if c := read(4096); c.Status != abi.StatusTimeout {
			t.Fatalf("4 KB READ whose responses exceed the path MTU: %+v, want TIMEOUT", c)
		}
	}
	sa := stats(t, pa)
	if sa.ICMPFragNeeded == 0 || sa.FragNeededDst != ipB.String() || sa.FragNeededMTU != 1280 || sa.RxICMPOther != 0 {
		t.Fatalf("A: icmp_frag_needed %d, frag_needed_dst %q, frag_needed_mtu %d, rx_icmp_other %d; want >0, %s, 1280, 0",
			sa.ICMPFragNeeded, sa.FragNeededDst, sa.FragNeededMTU, sa.RxICMPOther, ipB)
	}
	// rmad looks every second.
	want := fmt.Sprintf("icmp fragmentation needed: dst %s path_mtu 1280 engine_mtu 1500 (set engine.routes mtu for this destination)", ipB)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		log, err := os.ReadFile(a.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if i := strings.Index(string(log), want); i >= 0 {
			line := string(log[strings.LastIndexByte(string(log[:i]), '\n')+1:])
			t.Logf("A logged: %s", line[:strings.IndexByte(line, '\n')])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's log lacks %q:\n%s", want, a.Tail(20))
		}
	}
	if c := read(64); c.Status != abi.StatusOK {
		t.Fatalf("64 B READ after the ICMP: %+v", c)
	}
}
