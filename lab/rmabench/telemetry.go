package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// nTelemetryPairs is how many interleaved rounds telemetryRun runs.
const nTelemetryPairs = 5

// telemetrySpec is the workload with the most completions per second, so
// the most hook calls: 64 B read_bw at depth 64.
var telemetrySpec = spec{"read_bw", 64, 64}

// telemetryRun measures what watching an engine with rmatop costs: on the
// loopback engine, nTelemetryPairs rounds of telemetrySpec without rmatop
// (setup telemetry-off) and with rmatop attached (telemetry-on), seconds
// apart, every other round in the other order. The engine hands rmatop's
// uprobe a batch of 1024 samples, so it traps once per 1024 completions.
// The with-rmatop row's note says how many completions rmatop
// saw. (Without rmatop the hook is an empty call; what that costs against
// no hook at all is the engine benchmarks' business: bench/RESULTS.md.)
func telemetryRun(rmad, rmaperf, rmatop, dir string, dur time.Duration, emit emitFunc) error {
	d := max(time.Second, dur/nTelemetryPairs)
	e, err := testbed.Start(benchLoopback(rmad, dir, "bench-tel", "10.99.0.1", "1500"))
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	off := func() (Row, error) {
		return rmaperfRun(rmaperf, "0", telemetrySpec, d, "telemetry-off", nil, "-socket", e.Socket, "-self")
	}
	on := func() (Row, error) {
		// Pinned to the application's CPU, reporting totals since it attached.
		top, err := testbed.StartRmatop("taskset", "-c", "0", rmatop, "-pid", strconv.Itoa(e.Pid()), "-json", "-cumulative", "-interval", "1s")
		if err != nil {
			return Row{}, err
		}
		seen := make(chan uint64, 1)
		go func() { // the completions rmatop last reported
			var last struct {
				Samples uint64 `json:"samples"`
			}
			for line := range top.Lines {
				json.Unmarshal([]byte(line), &last)
			}
			seen <- last.Samples
		}()
		r, err := rmaperfRun(rmaperf, "0", telemetrySpec, d, "telemetry-on", nil, "-socket", e.Socket, "-self")
		top.Interrupt()
		samples := <-seen
		if werr := top.Wait(); err == nil && werr != nil {
			err = fmt.Errorf("rmatop: %w", werr)
		}
		r.Note = addNote(r.Note, fmt.Sprintf("rmatop attached: saw %d completions", samples))
		return r, err
	}
	if err := interleaved(nTelemetryPairs, emit, off, on); err != nil {
		return err
	}
	return e.Stop(10 * time.Second)
}

// printTelemetry prints the median over rounds of telemetry-on / -off.
func printTelemetry(rows []Row) {
	var offs, ons []float64
	for _, r := range rows {
		switch r.Setup {
		case "telemetry-off":
			offs = append(offs, r.OpsPerSec)
		case "telemetry-on":
			ons = append(ons, r.OpsPerSec)
		}
	}
	n := min(len(offs), len(ons))
	if n == 0 {
		return
	}
	v := make([]float64, n)
	for i := range n {
		v[i] = ons[i] / offs[i]
	}
	fmt.Printf("loopback %s %d B O=%d with rmatop attached / without, %d interleaved rounds: median %.2f (ratios %s)\n",
		telemetrySpec.test, telemetrySpec.size, telemetrySpec.depth, n, median(v), ratioList(v))
}
