// Command onerma-demo is what `make demo` runs: two rmad engines as separate
// processes on the two ends of a net_memif wire, with rmad's embedded
// default configuration (only addresses, sockets and the port differ), an
// owner application on engine B that registers a region and fills it, and
// a reader application on engine A that reads it at several sizes and
// offsets, checks every byte and prints every completion. Then it stops
// everything and checks that no process, socket or hugepage file is left.
// Its last line is "demo: ok" only when every read verified.
//
// The owner and reader are this same binary re-executed with -role, so the
// region's owner, its reader and both engines are four processes.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"time"

	"net/netip"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

const (
	ipA         = "10.77.0.1"
	ipB         = "10.77.0.2"
	regionBytes = 64 << 10
)

// pattern is the owner's region content: byte i of the region.
func pattern(i uint64) byte { return byte(i*131 + i>>8 + 17) }

func main() {
	role := flag.String("role", "orchestrate", "orchestrate | owner | reader (internal)")
	rmad := flag.String("rmad", "", "path to rmad (default: next to this binary)")
	ctl := flag.String("ctl", "", "engine control socket (owner, reader)")
	region := flag.String("region", "", "remote region id (reader)")
	flag.Parse()
	var err error
	switch *role {
	case "orchestrate":
		err = orchestrate(*rmad)
	case "owner":
		err = owner(*ctl)
	case "reader":
		err = reader(*ctl, *region)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		fmt.Println("demo: FAILED")
		os.Exit(1)
	}
	if *role == "orchestrate" {
		fmt.Println("demo: ok")
	}
}

func orchestrate(rmad string) (err error) {
	self, _ := os.Executable()
	if rmad == "" {
		rmad = filepath.Join(filepath.Dir(self), "rmad")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (DPDK, hugepages): run `make demo` as root")
	}
	dir, err := os.MkdirTemp("", "onerma-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	free, mounted := testbed.HugepagesFree()
	fmt.Printf("demo: hugepages free %d (hugetlbfs mounted: %v); engines use %q\n", free, mounted, strings.Join(testbed.EALArgs("demo"), " "))

	optA, optB := testbed.MemifPair(rmad, dir, "demo-a", "demo-b", ipA, ipB)
	a, err := testbed.Start(optA)
	if err != nil {
		return err
	}
	var b *testbed.Engine
	defer func() {
		for _, e := range []*testbed.Engine{b, a} {
			if e == nil {
				continue
			}
			if serr := e.Stop(10 * time.Second); serr != nil && err == nil {
				err = serr
			}
		}
		if err == nil {
			err = checkClean(dir)
		}
	}()
	if b, err = testbed.Start(optB); err != nil {
		return err
	}
	fmt.Printf("demo: engine A %s (memif server) pid %d, engine B %s (memif client) pid %d\n", ipA, a.Pid(), ipB, b.Pid())

	// The owner application on engine B.
	own := exec.Command(self, "-role", "owner", "-ctl", b.Socket)
	own.Stderr = os.Stderr
	ownIn, _ := own.StdinPipe()
	ownOut, _ := own.StdoutPipe()
	if err := own.Start(); err != nil {
		return err
	}
	defer func() { ownIn.Close(); own.Wait() }()
	line, err := bufio.NewReader(ownOut).ReadString('\n')
	if err != nil {
		return fmt.Errorf("owner: %v", err)
	}
	fmt.Print("demo: owner: ", line)
	var rid string
	if f := strings.Fields(line); len(f) >= 2 && f[0] == "region" {
		rid = f[1]
	} else {
		return fmt.Errorf("owner said %q", line)
	}

	// The reader application on engine A.
	rd := exec.Command(self, "-role", "reader", "-ctl", a.Socket, "-region", rid)
	rd.Stdout, rd.Stderr = os.Stdout, os.Stderr
	if err := rd.Run(); err != nil {
		return fmt.Errorf("reader: %v", err)
	}
	return nil
}

// checkClean verifies nothing of the demo is left behind.
func checkClean(dir string) error {
	var left []string
	if m, _ := filepath.Glob(filepath.Join(dir, "*.sock")); len(m) > 0 {
		left = append(left, m...)
	}
	left = append(left, testbed.HugepageFiles("demo")...)
	for _, n := range []string{"demo-a", "demo-b"} {
		if _, err := os.Stat(testbed.RuntimeDir(n)); err == nil {
			left = append(left, testbed.RuntimeDir(n))
		}
	}
	if out, _ := exec.Command("pgrep", "-f", "onerma-demo-[ab]").Output(); len(out) > 0 {
		left = append(left, "processes "+strings.Join(strings.Fields(string(out)), ","))
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, " "))
	}
	fmt.Println("demo: engines stopped; no processes, sockets, hugepage files or EAL runtime files left")
	return nil
}

func owner(ctl string) error {
	p, err := portal.Dial(ctl, "demo-owner")
	if err != nil {
		return err
	}
	defer p.Close()
	r, err := p.RegisterRegion(regionBytes, portal.PermRemoteRead|portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		return err
	}
	b := r.Bytes()
	for i := range b {
		b[i] = pattern(uint64(i))
	}
	id := p.Identity()
	fmt.Printf("region %#x of %d bytes registered on %s by pid %d (hugetlb %v)\n", uint32(r.ID()), len(b), id.Addr, id.PID, r.Hugetlb())
	// Serve until the orchestrator closes stdin.
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			return nil
		}
	}
}

func reader(ctl, rid string) error {
	v, err := strconv.ParseUint(rid, 0, 32)
	if err != nil {
		return fmt.Errorf("region %q: %v", rid, err)
	}
	remote := abi.RegionID(v)
	p, err := portal.Dial(ctl, "demo-reader")
	if err != nil {
		return err
	}
	defer p.Close()
	slots, err := p.AllocSlots(4)
	if err != nil {
		return err
	}
	sink, err := p.RegisterRegion(16<<10, portal.PermLocalWrite|portal.PermLocalRead)
	if err != nil {
		return err
	}
	peer := netip.MustParseAddr(ipB)
	cases := []struct {
		size         uint32
		remOff, lOff uint64
	}{
		{1, 0, 0}, {64, 64, 0}, {100, 4097, 3}, {1408, 12345, 77}, {1409, 999, 1000},
		{2048, 32768, 2048}, {3000, 7, 11}, {4095, 60001, 5}, {4096, regionBytes - 4096, 4096},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Printf("demo: reader pid %d on %s reads region %#x on %s\n", os.Getpid(), p.Identity().Addr, uint32(remote), peer)
	fmt.Printf("%-6s %8s %8s %8s  %-8s %14s %14s\n", "op", "size", "r_off", "l_off", "status", "issue_delay", "total_delay")
	cpl := make([]abi.Completion, 1)
	failed := 0
	for k, c := range cases {
		dst := sink.Bytes()[c.lOff : c.lOff+uint64(c.size)]
		clear(dst)
		if err := p.SubmitRead(slots[k%len(slots)], peer, remote, c.remOff, sink, c.lOff, c.size, uint64(k)); err != nil {
			return err
		}
		if _, err := p.Wait(ctx, cpl); err != nil {
			return err
		}
		got := cpl[0]
		verdict := "verified"
		if got.Status != abi.StatusOK || got.Cookie != uint64(k) {
			verdict = "FAILED"
		} else {
			for i, b := range dst {
				if b != pattern(c.remOff+uint64(i)) {
					verdict = fmt.Sprintf("MISMATCH at byte %d", i)
					break
				}
			}
		}
		if verdict != "verified" {
			failed++
		}
		fmt.Printf("%-6s %8d %8d %8d  %-8s %11.1f us %11.1f us  %s\n", got.Op, c.size, c.remOff, c.lOff, got.Status,
			float64(got.IssueDelayNs)/1e3, float64(got.TotalDelayNs)/1e3, verdict)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d reads failed", failed, len(cases))
	}
	fmt.Printf("demo: %d reads verified byte for byte\n", len(cases))
	return nil
}
