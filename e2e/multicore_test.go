package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/rawnet"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
	"github.com/onerma/onerma/wire"
)

// Engines of two polling cores each (rmad -cores 2: a queue pair each)
// over the port types here, none of which can put a frame on the queue of
// the core it names: memif's queue i receives what the peer sent on its
// queue i; net_tap and af_packet queues get what the kernel hashed to
// them. (An AF_XDP port of two queues cannot be made here: DPDK 22.11's
// net_af_xdp takes an interface's queue count from its combined ethtool
// channels, which veth and tun do not report, and refuses queue_count 2;
// engine/port/dpdkport/xdp's TestSteerByRxQueue checks that the steering
// program sends each frame to the socket of its rx queue.) A portal pinned to each core of each engine READs and WRITEs,
// verified, the regions of both portals of the other engine: answers reach
// the core that sent the request, WRITE data the core serving it, because
// the core that receives a frame hands it over (dpdkport.Queues). rmactl
// stats shows each core's hand-over counters, exercised and balanced.

// twoCores are the flags of an engine of two unpinned polling cores (CI
// has two CPUs, shared with everything else).
var twoCores = append([]string{"-cores", "2"}, relaxed...)

func TestMulticoreMemif(t *testing.T) {
	a, b := memifPair(t, []string{"-cores", "2"}, []string{"-cores", "2"})
	exerciseCores(t, a, b)
}

func TestMulticoreTap(t *testing.T) {
	needEngines(t)
	tag := fmt.Sprint(os.Getpid() % 1000)
	ifA, ifB := "ormca"+tag, "ormcb"+tag
	dir := t.TempDir()
	oa := testbed.Tap(rmadBin, dir, "e2e-mta", ipA.String(), ifA, "02:88:00:00:00:01")
	ob := testbed.Tap(rmadBin, dir, "e2e-mtb", ipB.String(), ifB, "02:88:00:00:00:02")
	oa.Extra, ob.Extra = append(oa.Extra, twoCores...), append(ob.Extra, twoCores...)
	a, b := start(t, oa), start(t, ob)
	for _, i := range []string{ifA, ifB} { // no IPv6 chatter to the engines
		exec.Command("sysctl", "-qw", "net.ipv6.conf."+i+".disable_ipv6=1").Run()
	}
	br, err := testbed.NewBridge("ormcbr"+tag, ifA, ifB)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("cannot bridge the tap interfaces:", err)
	}
	t.Cleanup(br.Close)
	// The host answers no ARP arriving through the bridge (a host may own
	// the engines' addresses on another interface: podman's bridge
	// does 10.98.0.1).
	exec.Command("sysctl", "-qw", "net.ipv4.conf."+br.Name+".arp_ignore=8").Run()
	exerciseCores(t, a, b)
}

func TestMulticoreAFPacket(t *testing.T) {
	needEngines(t)
	v, err := testbed.NewVethPair(fmt.Sprintf("ormp%d", os.Getpid()%1000))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("network namespaces unavailable:", err)
	}
	t.Cleanup(v.Close) // after the engines stop (cleanups run last-in first-out)
	dir := t.TempDir()
	oa := testbed.AFPacketQueues(rmadBin, dir, "e2e-mpa", ipA.String(), v.NSA, v.IfA, 2)
	ob := testbed.AFPacketQueues(rmadBin, dir, "e2e-mpb", ipB.String(), v.NSB, v.IfB, 2)
	oa.Extra, ob.Extra = twoCores, twoCores
	exerciseCores(t, start(t, oa), start(t, ob))
}

// exerciseCores runs verified READs and WRITEs from a portal pinned to
// each core of a to regions of portals on each core of b, and back, and
// checks each engine's hand-over counters as rmactl reports them.
func exerciseCores(t *testing.T, a, b *testbed.Engine) {
	t.Helper()
	type side struct {
		portals [2]*portal.Portal
		regions [2]*portal.Region
	}
	mk := func(e *testbed.Engine, name string) *side {
		s := &side{}
		for i := range 2 {
			p, err := portal.DialOptions(e.Socket, fmt.Sprintf("%s%d", name, i), portal.Options{PinCore: true, Core: i})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			if p.Core() != i {
				t.Fatalf("portal pinned to core %d is on core %d", i, p.Core())
			}
			s.portals[i] = p
			s.regions[i] = ownerRegion(t, p, 64<<10, abi.PermRemoteRead|abi.PermRemoteWrite)
		}
		return s
	}
	sa, sb := mk(a, "a"), mk(b, "b")
	dirs := []struct {
		from, to *side
		peer     netip.Addr
	}{{sa, sb, ipB}, {sb, sa, ipA}}
	// Every READ first: they check the regions' pattern, which WRITEs
	// replace.
	for _, d := range dirs {
		for _, p := range d.from.portals {
			for _, r := range d.to.regions {
				verifiedReads(t, p, d.peer, r)
			}
		}
	}
	for _, d := range dirs {
		for _, p := range d.from.portals {
			for j, r := range d.to.regions {
				verifiedWrites(t, p, d.peer, d.to.portals[j], r)
			}
		}
	}
	for _, e := range []*testbed.Engine{a, b} {
		st := rmactlStats(t, e)
		if len(st.Cores) != 2 {
			t.Fatalf("%s: stats of %d cores, want 2", e.Opt.Name, len(st.Cores))
		}
		var out, in, full uint64
		for _, c := range st.Cores {
			d := c.Port.Driver
			t.Logf("%s core %d: port rx %d, handed out %d, in %d, full %d; loop stalls %d", e.Opt.Name, c.Core, d.RxFrames, d.HandedOut, d.HandedIn, d.HandOverFull, c.Loop.Stalls)
			out, in, full = out+d.HandedOut, in+d.HandedIn, full+d.HandOverFull
		}
		if s := st.Port.Driver; s.HandedOut != out || s.HandedIn != in {
			t.Errorf("%s: sum handed out %d, in %d; cores' %d, %d", e.Opt.Name, s.HandedOut, s.HandedIn, out, in)
		}
		// ARP accounts for a few (each core's requests and replies, to
		// every core): the READs' and WRITEs' frames for many more.
		if out < 32 || out != in+full {
			t.Errorf("%s: %d frames handed out, %d in, %d lost: want 32 or more, every one accounted for", e.Opt.Name, out, in, full)
		}
		text, err := exec.Command(rmactlBin, "-socket", e.Socket, "stats").CombinedOutput()
		if err != nil {
			t.Fatalf("rmactl stats: %v\n%s", err, text)
		}
		if !regexp.MustCompile(`(?m)^counter +sum +core0 +core1$`).Match(text) ||
			!regexp.MustCompile(`(?m)^port\.driver\.handed_out +\d+ +\d+ +\d+$`).Match(text) {
			t.Errorf("%s: rmactl stats shows no column per core:\n%s", e.Opt.Name, text)
		}
	}
}

// rmactlStats is e's stats reply as rmactl stats -json prints it.
func rmactlStats(t *testing.T, e *testbed.Engine) *ctlmsg.Stats {
	t.Helper()
	out, err := exec.Command(rmactlBin, "-socket", e.Socket, "stats", "-json").Output()
	if err != nil {
		t.Fatalf("rmactl stats -json: %v\n%s", err, out)
	}
	var st ctlmsg.Stats
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("rmactl stats -json: %v\n%s", err, out)
	}
	if st.Port == nil {
		t.Fatalf("%s: stats without the port's counters", e.Opt.Name)
	}
	return &st
}

// An engine's IVs stay unique when it restarts with another list of CPUs:
// engine A (af_packet) runs on CPUs 0 and 1, then, with the same IV state
// file, on CPU 1 alone. Every frame it sends is captured on the other end
// of its veth, and no IV (its address and counter, tagged with the
// sending core's lane) is seen twice; the first run used two lanes.
func TestMulticoreIVsAcrossRestart(t *testing.T) {
	needEngines(t)
	v, err := testbed.NewVethPair(fmt.Sprintf("ormi%d", os.Getpid()%1000))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("network namespaces unavailable:", err)
	}
	t.Cleanup(v.Close)
	cap, err := rawnet.OpenNS(v.NSB, v.IfB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cap.Close() })
	dir := t.TempDir()
	ob := testbed.AFPacket(rmadBin, dir, "e2e-ivb", ipB.String(), v.NSB, v.IfB)
	ob.Extra = relaxed
	b := start(t, ob)
	pb := dial(t, b, "b")
	rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)

	seen := map[[12]byte]int{}
	for run, cpus := range []string{"0,1", "1"} {
		cores := strings.Count(cpus, ",") + 1
		oa := testbed.AFPacketQueues(rmadBin, dir, "e2e-iva", ipA.String(), v.NSA, v.IfA, cores)
		oa.Extra = append([]string{"-cpu", cpus}, relaxed...) // same Name and Dir: the same IV state
		cap.Drain()
		done := make(chan []rawnet.Frame)
		stop := make(chan struct{})
		go func() { // A's frames as they arrive, while A runs
			var all []rawnet.Frame
			for {
				fs, _ := cap.Capture(50*time.Millisecond, 0, func(f *rawnet.Frame) bool {
					return !f.Out && len(f.Data) >= wire.IVOffset+12 && wire.EtherType(f.Data) == wire.EtherTypeIPv4 &&
						bytes.Equal(f.Data[wire.EthLen+12:wire.EthLen+16], ipA.AsSlice()) && f.Data[wire.EthLen+9] == 17
				})
				all = append(all, fs...)
				select {
				case <-stop:
					done <- all
					return
				default:
				}
			}
		}()
		a := start(t, oa)
		pa := dial(t, a, fmt.Sprintf("a%d", run))
		ra := ownerRegion(t, pa, 64<<10, abi.PermRemoteRead)
		verifiedReads(t, pa, ipB, rb) // A's requests
		verifiedReads(t, pb, ipA, ra) // A's data
		pa.Close()
		if err := a.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		close(stop)
		frames := <-done
		if _, drops, err := cap.Stats(); err != nil || drops != 0 {
			t.Fatalf("capture: %d frames dropped (%v): the check would miss IVs", drops, err)
		}
		lanes := map[uint64]int{}
		for _, f := range frames {
			var iv [12]byte
			copy(iv[:], f.Data[wire.IVOffset:])
			if r, ok := seen[iv]; ok {
				t.Fatalf("run %d (cpus %s) sent IV % x, sent already in run %d", run, cpus, iv, r)
			}
			seen[iv] = run
			lanes[binary.BigEndian.Uint64(iv[4:])>>58]++
		}
		t.Logf("run %d, cpus %s: %d frames, IVs by lane tag %v", run, cpus, len(frames), lanes)
		if len(frames) < 50 || len(lanes) != cores {
			t.Fatalf("run %d: %d frames captured over %d lanes, want dozens over %d", run, len(frames), len(lanes), cores)
		}
	}
}
