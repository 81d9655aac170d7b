package e2e

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// testpmdName names testpmd's EAL files (prefix onerma-<name>).
const testpmdName = "e2e-testpmd"

// testpmd is a dpdk-testpmd process forwarding between two memif ports.
type testpmd struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
	done  chan error
}

// startTestpmd runs DPDK's reference forwarder with two memif server
// ports (sockets sockA, sockB) in io forwarding, paired: every frame
// received on one port is sent out of the other, untouched, as a switch
// port pair would. Its forwarding lcore busy-polls CPU 1.
func startTestpmd(t *testing.T, sockA, sockB string) *testpmd {
	t.Helper()
	bin, err := exec.LookPath("dpdk-testpmd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("dpdk-testpmd (package dpdk-dev): %v", err)
		}
		t.Skipf("dpdk-testpmd (package dpdk-dev): %v", err)
	}
	tp := &testpmd{done: make(chan error, 1)}
	tp.cmd = exec.Command(bin, "-l", "0,1", "--no-pci", "--no-telemetry", "--file-prefix=onerma-"+testpmdName, "--huge-unlink", "-m", "64",
		"--vdev=net_memif0,role=server,id=0,socket="+sockA+",socket-abstract=no",
		"--vdev=net_memif1,role=server,id=0,socket="+sockB+",socket-abstract=no",
		"--", "--forward-mode=io", "--port-topology=paired", "--total-num-mbufs=8192", "--nb-cores=1")
	tp.cmd.Stdout, tp.cmd.Stderr = &tp.out, &tp.out
	if tp.stdin, err = tp.cmd.StdinPipe(); err != nil { // without -i it runs until a line or EOF on stdin
		t.Fatal(err)
	}
	if err := tp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { tp.done <- tp.cmd.Wait() }()
	t.Cleanup(func() {
		if tp.cmd.ProcessState == nil {
			tp.cmd.Process.Kill()
			<-tp.done
		}
		os.RemoveAll(testbed.RuntimeDir(testpmdName)) // EAL's runtime files
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, ea := os.Stat(sockA)
		_, eb := os.Stat(sockB)
		if ea == nil && eb == nil {
			return tp
		}
		select {
		case err := <-tp.done:
			t.Fatalf("dpdk-testpmd exited: %v\n%s", err, tp.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("dpdk-testpmd created no memif sockets in 20 s")
		}
	}
}

// stop ends testpmd (a line on its stdin) and waits for it to exit.
// (Its forward statistics read 0 over memif: testpmd derives them from
// rte_eth_stats, which memif does not count in DPDK 22.11.)
func (tp *testpmd) stop(t *testing.T) {
	t.Helper()
	io.WriteString(tp.stdin, "\n")
	tp.stdin.Close()
	select {
	case err := <-tp.done:
		if err != nil {
			t.Fatalf("dpdk-testpmd: %v\n%s", err, tp.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("dpdk-testpmd did not exit\n%s", tp.out.String())
	}
}

// TestTestpmdSwitch: two engines whose only link is DPDK's reference
// application, dpdk-testpmd, forwarding between two memif ports. Our
// frames (ARP, requests, chunked responses, WRITE's four hops) cross a
// third-party DPDK data path unmodified: verified reads and writes in both
// directions. Once testpmd has exited, a READ fails with TIMEOUT: the
// engines had no other path.
func TestTestpmdSwitch(t *testing.T) {
	needEngines(t)
	dir := t.TempDir()
	sockA, sockB := filepath.Join(dir, "tp-a.memif"), filepath.Join(dir, "tp-b.memif")
	tp := startTestpmd(t, sockA, sockB)
	client := func(name, ip, sock string) *testbed.Engine {
		return start(t, testbed.Options{Rmad: rmadBin, Dir: dir, Name: name, IP: ip, PortName: "net_memif0", CPU: -1,
			Vdev: "net_memif0,role=client,id=0,socket=" + sock + ",socket-abstract=no",
			// ARP crosses testpmd too: a host busy with other tests may
			// deschedule it longer than the default resolve_timeout.
			Extra: append([]string{"-resolve-timeout", "1s"}, relaxed...)})
	}
	a := client("e2e-tpa", ipA.String(), sockA)
	b := client("e2e-tpb", ipB.String(), sockB)
	pa, pb := dial(t, a, "app-a"), dial(t, b, "app-b")
	const size = 64 << 10
	perm := abi.PermRemoteRead | abi.PermRemoteWrite
	ra, rb := ownerRegion(t, pa, size, perm), ownerRegion(t, pb, size, perm)
	verifiedReads(t, pa, ipB, rb)
	verifiedReads(t, pb, ipA, ra)
	verifiedWrites(t, pa, ipB, pb, rb)
	verifiedWrites(t, pb, ipA, pa, ra)
	if sa, sb := stats(t, pa), stats(t, pb); sa.ARPReplies+sb.ARPReplies == 0 {
		t.Errorf("no ARP answered across testpmd: %d, %d", sa.ARPReplies, sb.ARPReplies)
	}

	tp.stop(t)
	slot, ok := pa.Slot()
	if !ok {
		t.Fatal("no free slot")
	}
	sink, err := pa.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := pa.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slot, Cookie: 99,
		Remote: ipB, RemoteRegion: rb.ID(), Key: kdFor(rb, pa),
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pa, 10*time.Second); c.Status != abi.StatusTimeout || c.Cookie != 99 {
		t.Fatalf("a READ with testpmd gone: %+v, want TIMEOUT", c)
	}
}
