package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// isoWindow is the isolation engine's solicitation window (-iso-window; 0:
// rmad's default). The paper sizes the window to the bandwidth-delay
// product: what it admits is what a newly granted op may have to queue
// behind. 32 KB is a few tens of µs of what one loopback core moves (the
// loopback setup's 4 KB read_bw row); rmad's default of 256 KB (sized for
// networks with tens of µs of RTT) puts eight times as much low-class data
// ahead of a high-class op.
var isoWindow int

// isoEngineArgs are more rmad flags for the isolation engine
// (-iso-engine-args).
var isoEngineArgs []string

// isoLoadArgs are more rmaperf flags for the isolation setup's low-class
// load (-iso-load-args): a run with them is an experiment, as one with
// isoEngineArgs (loadArgsMark).
var isoLoadArgs []string

// loadArgsMark begins, in a row's note, the load's flags beyond the
// setup's (-iso-load-args).
const loadArgsMark = "; load rmaperf "

// The isolation setup (paper Fig. 12): the application names the two
// rmaperf processes present to the engine, and the engine's slot policy
// (an rmad config overlaid on its embedded default): the main control
// socket grants the low class only, and a control socket of its own, the
// latency application's (a tenant that cannot be forged: policies never
// match on the name an application picks), the high class.
const (
	isoLatName  = "rmaperf-lat"
	isoLoadName = "rmaperf-load"
	isoLatSock  = "iso-lat.sock" // in the bench's directory
	isoPolicy   = `{"ctl": {"slot_policy": {"default": 256, "default_class": "low", "rules": []},
  "sockets": [{"path": "%s", "mode": "0600", "name": "lat",
    "slot_policy": {"default": 64, "default_class": "high", "rules": []}}]}}
`
)

// isolationRun starts one loopback engine (as the loopback setup: busy on
// CPU 1, frames to itself through the port) with isoPolicy and measures
// the high-class application's 64 B read_lat alone (isolation-idle), then
// while a low-class application keeps 64 4 KB READs in flight
// (isolation-loaded), the same with the latency application asking for
// the low class (isolation-loaded-lowclass: what the class buys), and, if
// the engine serves WRITE, under 64 4 KB WRITEs (isolation-loaded-write).
// Both applications run on CPU 0: the load sleeps on its completion
// doorbell, the latency application busy-polls and yields the CPU after
// every empty poll, so the load is woken and keeps the engine loaded while
// a latency op is in flight (a latency application that does not yield
// holds CPU 0 for a whole time slice, during which the load cannot post
// and the engine drains: it would measure a mostly idle engine). Each
// loaded run's load row is emitted too, with the setup of its run.
func isolationRun(rmad, rmaperf, dir string, dur time.Duration, emit emitFunc) error {
	cfgPath := filepath.Join(dir, "isolation.json")
	latSock := filepath.Join(dir, isoLatSock)
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, isoPolicy, latSock), 0o644); err != nil {
		return err
	}
	var extra []string
	if isoWindow > 0 {
		extra = append(extra, "-window-bytes", strconv.Itoa(isoWindow))
	}
	extra = append(extra, isoEngineArgs...)
	o := benchLoopback(rmad, dir, "bench-iso", "10.99.2.1", "1500", append(extra, "-config", cfgPath)...)
	policy := "high class from the slot_policy of the engine's control socket " + isoLatSock
	if isoWindow > 0 {
		policy += fmt.Sprintf("; engine window %d B", isoWindow)
	}
	if len(isoEngineArgs) > 0 {
		policy += nnArgsMark + strings.Join(isoEngineArgs, " ")
	}
	if len(isoLoadArgs) > 0 {
		policy += loadArgsMark + strings.Join(isoLoadArgs, " ")
	}
	e, err := testbed.Start(o)
	if err != nil {
		return err
	}
	// The policy must refuse the high class to an application it does not
	// name: otherwise the rows would not show what they claim.
	probe, closeAfter, err := rmaperfCmd(rmaperf, "0", spec{"read_lat", 64, 1}, 10*time.Millisecond, "probe", nil,
		"-socket", e.Socket, "-self", "-name", isoLoadName, "-class", "high", "-warmup", "0s")
	if err != nil {
		e.Stop(10 * time.Second)
		return err
	}
	out, perr := probe.CombinedOutput()
	closeAfter()
	if perr == nil {
		e.Stop(10 * time.Second)
		return fmt.Errorf("isolation: the engine granted the high class to %s, through a socket whose policy grants only the low class", isoLoadName)
	}
	fmt.Printf("isolation: class policy in force: %s asking for high was refused: %s\n", isoLoadName, strings.TrimSpace(string(out)))
	defer e.Stop(10 * time.Second)

	latSpec := spec{"read_lat", 64, 1}
	latArgs := []string{"-socket", latSock, "-self", "-name", isoLatName, "-class", "high", "-yield"}
	loadArgs := append([]string{"-socket", e.Socket, "-self", "-name", isoLoadName, "-class", "low", "-event", "-spins=-1"}, isoLoadArgs...)
	r, err := rmaperfRun(rmaperf, "0", latSpec, dur, "isolation-idle", nil, latArgs...)
	if err != nil {
		return err
	}
	r.Note = addNote(r.Note, "high-class app "+isoLatName+" alone (busy-polls and yields CPU 0); "+policy)
	emit(r)

	loads := []struct {
		setup, class string
		load         spec
	}{{"isolation-loaded", "high", spec{"read_bw", 4096, 64}},
		{"isolation-loaded-lowclass", "low", spec{"read_bw", 4096, 64}},
		{"isolation-loaded-write", "high", spec{"write_bw", 4096, 64}}}
	for _, l := range loads {
		if l.load.test == "write_bw" {
			// Until the engine serves WRITE every one completes at once
			// with an error: no load at all.
			w, err := rmaperfRun(rmaperf, "0", spec{"write_lat", 4096, 1}, 200*time.Millisecond, "probe", nil,
				"-socket", e.Socket, "-self", "-name", isoLoadName, "-warmup", "0s")
			if err != nil {
				return err
			}
			if w.Ops == 0 {
				fmt.Printf("isolation: %s skipped: the engine does not serve WRITE (%d ok, %d failed; %s)\n", l.setup, w.Ops, w.Errors, w.Note)
				continue
			}
		}
		la := append(append([]string{}, latArgs...), "-class", l.class) // the last -class wins
		if l.class == "low" {
			la[1] = e.Socket // the low class through the main socket, as the load
		}
		lr, r, err := isolationLoaded(rmaperf, dur, l.setup, l.load, loadArgs, latSpec, la)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("low-class app %s keeping %d %d B %s in flight", isoLoadName, l.load.depth, l.load.size, strings.ToUpper(strings.TrimSuffix(l.load.test, "_bw"))+"s")
		r.Note = addNote(r.Note, l.class+"-class app "+isoLatName+" while "+what+"; "+policy)
		lr.Note = addNote(lr.Note, "the load of this run: "+what+" (its window covers the high-class measurement)")
		emit(r)
		emit(lr)
	}
	return nil
}

// isolationLoaded starts the load, lets it reach its measurement window,
// measures the latency application, and waits for the load.
func isolationLoaded(rmaperf string, dur time.Duration, setup string, load spec, loadArgs []string, lat spec, latArgs []string) (loadRow, latRow Row, err error) {
	const lead = time.Second // the load's start-up and 0.5 s warm-up
	// The latency run's start-up, warm-up and measurement, with margin.
	loadDur := lead + dur + 1500*time.Millisecond
	cmd, closeAfter, err := rmaperfCmd(rmaperf, "0", load, loadDur, setup, nil, loadArgs...)
	if err != nil {
		return Row{}, Row{}, err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	err = cmd.Start()
	closeAfter()
	if err != nil {
		return Row{}, Row{}, err
	}
	time.Sleep(lead)
	latRow, latErr := rmaperfRun(rmaperf, "0", lat, dur, setup, nil, latArgs...)
	if err := cmd.Wait(); err != nil {
		return Row{}, Row{}, fmt.Errorf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	if latErr != nil {
		return Row{}, Row{}, latErr
	}
	loadRow, err = rmaperfRow(cmd, out.Bytes(), setup)
	return loadRow, latRow, err
}
