package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// nPyLoopback is how many interleaved rounds pyLoopbackRun runs.
const nPyLoopback = 3

// pyLoopbackSpecs are the tests of the python-loopback setup: 64 B
// read_bw at the loopback setup's depth (the Python package's batch API:
// post while slots are free, then wait), and 64 B read_lat (one
// Portal.read call: post, wait, the bytes back as a Python object).
var pyLoopbackSpecs = []spec{{"read_bw", 64, 64}, {"read_lat", 64, 1}}

// pyLoopbackWait is how onerma-perf waits beside the Python package:
// with onerma_wait, spinning libonerma's default polls and then sleeping
// on the completion doorbell, as Portal.wait and Portal.read do.
var pyLoopbackWait = []string{"-event"}

// pyLoopbackRun measures the Python package (python3 -m onerma.perf,
// rows of system onerma-python) beside libonerma's onerma-perf (onerma-c)
// on the loopback engine (benchLoopback, MTU 1500): in nPyLoopback
// interleaved rounds, each run max(1 s, dur/nPyLoopback) long, each of
// pyLoopbackSpecs, both clients pinned to the CPU the engine does not poll
// on and waiting the same way. Rows for information: the package has no
// target; printPyLoopback prints the medians side by side.
func pyLoopbackRun(rmad, onermaPerf, python, pyPath, dir string, dur time.Duration, emit emitFunc) error {
	if _, err := os.Stat(onermaPerf); err != nil {
		return fmt.Errorf("%w (make build builds onerma-perf into bin/)", err)
	}
	pyPath, err := filepath.Abs(pyPath)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(pyPath, "onerma", "__init__.py")); err != nil {
		return fmt.Errorf("the Python package: %w (-python-path names the clone's python/)", err)
	}
	d := max(time.Second, dur/nPyLoopback)
	e, err := testbed.Start(benchLoopback(rmad, dir, "bench-py", "10.99.0.2", "1500"))
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	var runs []func() (Row, error)
	for _, s := range pyLoopbackSpecs {
		runs = append(runs,
			func() (Row, error) {
				return pythonRun(python, pyPath, "0", s, d, "python-loopback", "-socket", e.Socket, "-self")
			},
			func() (Row, error) {
				return rmaperfRun(onermaPerf, "0", s, d, "python-loopback", nil, append([]string{"-socket", e.Socket, "-self"}, pyLoopbackWait...)...)
			})
	}
	if err := interleaved(nPyLoopback, emit, runs...); err != nil {
		return err
	}
	return e.Stop(10 * time.Second)
}

// pythonRun runs python3 -m onerma.perf (the package from pyPath) pinned
// to cpu, and returns its row.
func pythonRun(python, pyPath, cpu string, s spec, dur time.Duration, setup string, args ...string) (Row, error) {
	a := []string{"-c", cpu, python, "-m", "onerma.perf", s.test}
	a = append(a, args...)
	a = append(a, "-s", strconv.Itoa(s.size), "-O", strconv.Itoa(s.depth), "-D", dur.String(), "-json", "-setup", setup)
	cmd := exec.Command("taskset", a...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyPath, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return Row{}, fmt.Errorf("%s: %v", cmd, err)
	}
	return rmaperfRow(cmd, out, setup)
}

// pySummary is one test's medians over the python-loopback rounds: each
// client's ops/s, p50 and CPU ns per op.
type pySummary struct {
	rounds                   int
	opsPy, opsC, p50Py, p50C float64
	cpuPy, cpuC              float64
}

func summarizePyLoopback(rows []Row, s spec) (pySummary, bool) {
	var opsPy, opsC, p50Py, p50C, cpuPy, cpuC []float64
	for _, r := range rows {
		if r.Setup != "python-loopback" || r.Test != s.test || r.Size != s.size || r.Outstanding != s.depth {
			continue
		}
		cpu := 0.0
		if r.CPUNsPerOp != nil {
			cpu = *r.CPUNsPerOp
		}
		switch r.System {
		case "onerma-python":
			opsPy, p50Py, cpuPy = append(opsPy, r.OpsPerSec), append(p50Py, r.P50us), append(cpuPy, cpu)
		case "onerma-c":
			opsC, p50C, cpuC = append(opsC, r.OpsPerSec), append(p50C, r.P50us), append(cpuC, cpu)
		}
	}
	if len(opsPy) == 0 || len(opsC) == 0 {
		return pySummary{}, false
	}
	return pySummary{rounds: min(len(opsPy), len(opsC)), opsPy: median(opsPy), opsC: median(opsC),
		p50Py: median(p50Py), p50C: median(p50C), cpuPy: median(cpuPy), cpuC: median(cpuC)}, true
}

// printPyLoopback prints, per test, the Python package's medians beside
// onerma-perf's: ops/s and CPU ns per op for read_bw, the p50 of one call
// for read_lat.
func printPyLoopback(rows []Row) {
	for _, sp := range pyLoopbackSpecs {
		s, ok := summarizePyLoopback(rows, sp)
		if !ok {
			continue
		}
		if sp.depth > 1 {
			fmt.Printf("python-loopback %s %d B O=%d, %d interleaved rounds, medians: Python (batch API) %s ops/s, %.0f CPU ns per op; C (onerma-perf) %s ops/s, %.0f CPU ns per op\n",
				sp.test, sp.size, sp.depth, s.rounds, fmtRate(s.opsPy), s.cpuPy, fmtRate(s.opsC), s.cpuC)
			continue
		}
		fmt.Printf("python-loopback %s %d B, %d interleaved rounds, medians: one Portal.read call p50 %.2f us (%s calls/s); C (onerma-perf) p50 %.2f us\n",
			sp.test, sp.size, s.rounds, s.p50Py, fmtRate(s.opsPy), s.p50C)
	}
}
