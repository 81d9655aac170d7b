package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// pgoRun profiles rmad for profile-guided optimisation (rmabench -pgo,
// run by scripts/pgo.sh with an rmad built -pgo=off): the loopback engine
// exactly as the loopback rows start it (benchLoopback: busy on CPU 1,
// frames to itself through the net_ring port, rmaperf on CPU 0), once per
// MTU, under the workloads make bench measures: READ and WRITE, 64 B and
// 4 KB, bandwidth (O=64) and, at MTU 1500, latency; at MTU 9000 also a
// 4 MB executor READ; then rmad -selftest on one core (the selftest
// rows' READs and WRITEs of 64 B and 4 KB). rmad writes a CPU profile of each run (-cpuprofile);
// go tool pprof merges them into out.
func pgoRun(rmad, rmaperf, dir, out string, dur time.Duration) error {
	var profiles []string
	for _, mtu := range []string{"1500", "9000"} {
		specs := []spec{{"read_bw", 64, 64}, {"read_bw", 4096, 64}, {"write_bw", 64, 64}, {"write_bw", 4096, 64}}
		if mtu == "1500" {
			specs = append(specs, spec{"read_lat", 64, 1}, spec{"write_lat", 64, 1})
		} else {
			specs = append(specs, spec{"read_bw", 4 << 20, 2})
		}
		prof := filepath.Join(dir, "rmad-"+mtu+".pprof")
		e, err := testbed.Start(benchLoopback(rmad, dir, "pgo-lo", "10.99.0.1", mtu, "-cpuprofile", prof))
		if err != nil {
			return err
		}
		for _, s := range specs {
			r, err := rmaperfRun(rmaperf, "0", s, dur, "pgo", nil, "-socket", e.Socket, "-self")
			if err != nil {
				e.Stop(10 * time.Second)
				return err
			}
			fmt.Printf("pgo: MTU %s %-9s %7d B O=%-2d %10.0f ops/s %8.1f MB/s\n", mtu, s.test, s.size, s.depth, r.OpsPerSec, r.MBPerSec)
		}
		if err := e.Stop(10 * time.Second); err != nil { // rmad writes its profile as it exits
			return err
		}
		profiles = append(profiles, prof)
	}
	// The engine's own op generator (rmad -selftest, one core): the
	// selftest rows' workloads, whose ops take no portal ring.
	for _, s := range selftestSpecs2 {
		prof := filepath.Join(dir, fmt.Sprintf("rmad-selftest-%s-%d.pprof", s.test, s.size))
		r, _, err := selftestOnce(selftestEngine(rmad, dir, "1", false, "-20"), s, dur, "pgo", nil, "-cpuprofile", prof)
		if err != nil {
			return err
		}
		fmt.Printf("pgo: selftest %-9s %7d B O=%-2d %10.0f ops/s %8.1f MB/s\n", s.test, s.size, s.depth, r.OpsPerSec, r.MBPerSec)
		profiles = append(profiles, prof)
	}
	cmd := exec.Command("go", append([]string{"tool", "pprof", "-proto"}, profiles...)...)
	cmd.Stderr = os.Stderr
	merged, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -proto: %w", err)
	}
	if err := os.WriteFile(out, merged, 0o644); err != nil {
		return err
	}
	fmt.Printf("pgo: wrote %s (%d bytes) from %d runs\n", out, len(merged), len(profiles))
	return nil
}
