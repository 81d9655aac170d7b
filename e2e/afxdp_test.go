package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// The kernel's own addresses on the two ends of the veth pair of
// TestAFXDPVeth, next to the engines' (ipA, ipB) in the same subnet.
const (
	kernelA = "10.98.0.101"
	kernelB = "10.98.0.102"
)

// An engine on an AF_XDP port shares its interface with the kernel. Engine
// A runs on net_af_xdp on one end of a veth pair whose kernel has an
// address of its own (kernelA); engine B on af_packet on the other end.
// Verified READs and WRITEs both ways; the kernel answers ping to its
// address while the engine runs, and neither the engine nor its XDP
// program's socket sees those frames; a ping to the engine's address is
// the engine's. Then engine A is killed, leaving its XDP program attached,
// and an engine started on the same interface removes it and serves again.
func TestAFXDPVeth(t *testing.T) {
	needEngines(t)
	if _, err := exec.LookPath("ping"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("ping (iputils-ping) not found:", err)
	}
	v, err := testbed.NewVethPair(fmt.Sprintf("orx%d", os.Getpid()%1000))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("network namespaces unavailable:", err)
	}
	t.Cleanup(v.Close)
	for _, a := range [][3]string{{v.NSA, v.IfA, kernelA + "/24"}, {v.NSB, v.IfB, kernelB + "/24"}} {
		if err := testbed.AddAddr(a[0], a[1], a[2]); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	oa := testbed.AFXDP(rmadBin, dir, "e2e-xa", ipA.String(), v.NSA, v.IfA)
	ob := testbed.AFPacket(rmadBin, dir, "e2e-xb", ipB.String(), v.NSB, v.IfB)
	oa.Extra, ob.Extra = relaxed, relaxed
	a, b := start(t, oa), start(t, ob)
	pa, pb := dial(t, a, "app-a"), dial(t, b, "app-b")

	st := portStats(t, pa)
	if x := st.Port.XDP; x == nil || x.ProgID == 0 || x.Mode != "native" || x.Sockets != 1 || x.ZeroCopy || x.Iface != v.IfA {
		t.Fatalf("engine A's port: %+v, want rmad's program running natively on %s and one copy-mode socket (veth has no zero-copy)", x, v.IfA)
	}

	const size = 64 << 10
	perm := abi.PermRemoteRead | abi.PermRemoteWrite
	ra, rb := ownerRegion(t, pa, size, perm), ownerRegion(t, pb, size, perm)
	verifiedReads(t, pa, ipB, rb)
	verifiedReads(t, pb, ipA, ra)
	verifiedWrites(t, pa, ipB, pb, rb)
	verifiedWrites(t, pb, ipA, pa, ra)

	// The kernel keeps the rest: it answers ping to its address.
	before := portStats(t, pa)
	const pings = 20
	if out, err := exec.Command("ip", "netns", "exec", v.NSB, "ping", "-n", "-q", "-c", fmt.Sprint(pings), "-i", "0.05", "-W", "2", kernelA).CombinedOutput(); err != nil {
		t.Fatalf("ping %s (A's kernel) from B's namespace while engine A runs: %v\n%s", kernelA, err, out)
	}
	after := portStats(t, pa)
	bx, ax := before.Port.XDP, after.Port.XDP
	if d := ax.Steer.ToKernel - bx.Steer.ToKernel; d < pings {
		t.Errorf("the XDP program passed %d frames to the kernel during %d pings, want >= %d", d, pings, pings)
	}
	if after.RxFrames != before.RxFrames || after.Port.Driver.RxFrames != before.Port.Driver.RxFrames || ax.Steer.ToEngine != bx.Steer.ToEngine {
		t.Errorf("engine A received frames during the pings to its kernel: core rx %d -> %d, port rx %d -> %d, steered %d -> %d",
			before.RxFrames, after.RxFrames, before.Port.Driver.RxFrames, after.Port.Driver.RxFrames, bx.Steer.ToEngine, ax.Steer.ToEngine)
	}
	// Nothing for the engine went astray; every buffer the engine gave
	// the kernel lay in the socket's memory (net_af_xdp's umem).
	if s := ax.Socket; ax.Steer.NoSocket != 0 || s.RxInvalidDescs != 0 || s.TxInvalidDescs != 0 || s.RxDropped != 0 {
		t.Errorf("engine A's XDP: %d frames for it on a queue without a socket; socket counters %+v, want no drops or invalid descriptors", ax.Steer.NoSocket, s)
	}

	// ICMP to the engine's address is the engine's, not the kernel's
	// (whether the engine answers is its business: no exit status).
	exec.Command("ip", "netns", "exec", v.NSB, "ping", "-n", "-q", "-c", "3", "-i", "0.05", "-W", "1", ipA.String()).Run()
	final := portStats(t, pa)
	if d := final.Port.XDP.Steer.ToEngine - ax.Steer.ToEngine; d < 3 || final.RxFrames-after.RxFrames < 3 {
		t.Errorf("ping to the engine's address: %d frames steered to it, core rx +%d; want >= 3 each", d, final.RxFrames-after.RxFrames)
	}

	// Killed, engine A leaves its program attached; the next engine on
	// the interface (same address, same IV state) removes it.
	a.Kill()
	if out, err := exec.Command("ip", "-n", v.NSA, "link", "show", v.IfA).CombinedOutput(); err != nil || !strings.Contains(string(out), "onerma_steer") {
		t.Fatalf("after SIGKILL, %s: %v\n%s (expected the killed engine's program still attached)", v.IfA, err, out)
	}
	oa2 := testbed.AFXDP(rmadBin, dir, "e2e-xa2", ipA.String(), v.NSA, v.IfA)
	oa2.IVState, oa2.Extra = oa.IVStatePath(), relaxed
	a2 := start(t, oa2)
	if !strings.Contains(a2.Tail(200), "removed the steering program") {
		t.Errorf("the restarted engine did not say it removed the stale program:\n%s", a2.Tail(30))
	}
	pa2 := dial(t, a2, "app-a2")
	ra2, rb2 := ownerRegion(t, pa2, size, perm), ownerRegion(t, pb, size, perm)
	verifiedReads(t, pa2, ipB, rb2)
	verifiedReads(t, pb, ipA, ra2)
	if out, err := exec.Command("ip", "netns", "exec", v.NSB, "ping", "-n", "-q", "-c", "3", "-i", "0.05", "-W", "2", kernelA).CombinedOutput(); err != nil {
		t.Fatalf("ping %s after the restart: %v\n%s", kernelA, err, out)
	}
}

// portStats reads p's engine's counters, which must include an AF_XDP
// port's.
func portStats(t *testing.T, p *portal.Portal) *ctlmsg.Stats {
	t.Helper()
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Port == nil || st.Port.XDP == nil {
		t.Fatalf("stats without the AF_XDP port's counters: %+v", st.Port)
	}
	return st
}
