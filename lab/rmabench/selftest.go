package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
)

// The selftest setups measure the engine with its own op generator
// (rmad -selftest): no application, no portal ring, every op checked.
//
//	selftest        one engine on the net_ring loopback, frames to itself
//	                out of the port and back, so every polling core is
//	                initiator and target of its own ops; one core (CPU 1)
//	                and two (CPUs 0 and 1)
//	selftest-memif  two engines over memif, one core each: the initiator
//	                runs -selftest, the other serves a region an rmaperf
//	                server owns (K_d over keyx): the rate of each role
//
// Each row is one rmad run; its cores field is the number of polling
// cores of the measuring engine. The runs of both setups but the rounds
// (selftestScaling) run with -profile: each one's stage table follows its
// row as rows of setup selftest-stages (selftest-memif-stages), one per
// line of the table (stageRows; docs/benchmarking.md explains it).

// selftestSpecs are the rows of selftest-memif and of the loopback at
// one core (reads, then writes), selftestSpecs2 the loopback's
// bandwidth rows again at two cores.
var (
	selftestSpecs = []spec{{"read_bw", 64, 64}, {"read_bw", 4096, 64}, {"read_lat", 64, 1}, {"read_lat", 4096, 1},
		{"write_bw", 64, 64}, {"write_bw", 4096, 64}}
	selftestSpecs2 = []spec{{"read_bw", 64, 64}, {"read_bw", 4096, 64}, {"write_bw", 64, 64}, {"write_bw", 4096, 64}}
	// selftestSpec16: the loopback at one core again with 16 in flight,
	// where the stage table shows the per-iteration overhead of a
	// lighter load (issue 32's target for it).
	selftestSpec16 = spec{"read_bw", 64, 16}
)

// selftestNote says how the cores share the host.
const (
	selftestNote1 = "busy on CPU 1 (nice -20)"
	selftestNote2 = "busy on CPUs 0 and 1 (nice 0: the host's other threads need them)"
	selftestNoteM = "initiator busy on CPU 0, serving engine busy on CPU 1 (nice 0)"
)

// selftestTimeout is the engines' TIMEOUT in the selftest setups. A
// polling thread that loses its CPU for a few ms (other load on a shared
// host: the runner counts these stalls) lets the serving side's timers
// run on while its ops wait unread, and at the default of a busy engine
// (2 ms) a stall fails every WRITE in flight: the rows are to measure the
// rate, and every op is checked whatever the TIMEOUT.
const selftestTimeout = "50ms"

// selftestRounds is how many interleaved rounds compare one core with
// two in 64 B read_bw.
const selftestRounds = 3

// selftestEngine is the loopback engine of cpus (a -cpu list), at an
// address where each core serves its own requests unless handOver, where
// one core's requests are served by another; nice is the polling
// threads' nice value.
func selftestEngine(rmad, dir, cpus string, handOver bool, nice string) testbed.Options {
	cores := strings.Count(cpus, ",") + 1
	ip := ownLanes(netip.MustParseAddr("10.99.2.1"), cores)
	if handOver {
		ip = otherLanes(netip.MustParseAddr("10.99.2.1"), cores)
	}
	o := testbed.Loopback(rmad, dir, "bench-st", ip.String())
	o.Busy, o.CPU = true, 1
	o.Extra = []string{"-log-level", "warn", "-hairpin-self=true", "-cpu", cpus, "-timeout", selftestTimeout, "-poll-nice", nice}
	return o
}

// selftestScaling measures 64 B read_bw in selftestRounds interleaved
// rounds of three runs, every polling thread at nice 0: one core (CPU
// 1); two cores (CPUs 0 and 1), each serving its own requests; and two
// cores in the hand-over mode (setup "selftest-handover"): only the core
// whose requests the other serves posts, so one stream of ops crosses the
// hand-over ring both ways, the worst case of one portal on a two-core
// engine. A round's runs are seconds apart; printSelfTestRatios prints
// the median of the rounds' ratios.
func selftestScaling(rmad, dir string, dur time.Duration, emit emitFunc) error {
	s := spec{"read_bw", 64, 64}
	run := func(setup, cpus string, handOver bool, note string) func() (Row, error) {
		return func() (Row, error) {
			var args []string
			if handOver {
				args = []string{"-selftest-handover"}
			}
			r, _, err := selftestOnce(selftestEngine(rmad, dir, cpus, handOver, "0"), s, dur, setup, nil, args...)
			r.Note = addNote(r.Note, note)
			return r, err
		}
	}
	return interleaved(selftestRounds, emit,
		run("selftest-rounds", "1", false, "round; busy on CPU 1 (nice 0)"),
		run("selftest-rounds", "0,1", false, "round; "+selftestNote2),
		run("selftest-handover", "0,1", true, "round; 1 of 2 cores posting, every answer handed over; busy on CPUs 0 and 1 (nice 0)"))
}

// selftestRun measures the loopback rows.
func selftestRun(rmad, dir string, dur time.Duration, emit emitFunc) error {
	if err := selftestScaling(rmad, dir, dur, emit); err != nil {
		return err
	}
	for _, c := range []struct {
		cpus  string
		specs []spec
		note  string
	}{{"1", append(slices.Clone(selftestSpecs), selftestSpec16), selftestNote1}, {"0,1", selftestSpecs2, selftestNote2}} {
		// At an address where the engine serves each core's requests on
		// that core: both roles of every op on one core, nothing handed
		// over.
		nice := "-20"
		if strings.Contains(c.cpus, ",") {
			nice = "0"
		}
		o := selftestEngine(rmad, dir, c.cpus, false, nice)
		for _, s := range c.specs {
			r, st, err := selftestOnce(o, s, dur, "selftest", nil, "-profile")
			if err != nil {
				return err
			}
			r.Note = addNote(r.Note, c.note)
			emit(r)
			for _, sr := range stageRows(r, st) {
				emit(sr)
			}
		}
	}
	return nil
}

// selftestMemifRun measures the two-engine rows: an rmaperf server owns
// the serving engine's region; the initiator's rmad fetches its K_d and
// runs -selftest against it.
func selftestMemifRun(rmad, rmaperf, dir string, dur time.Duration, emit emitFunc) error {
	ob, oa := testbed.MemifPair(rmad, dir, "bench-smb", "bench-sma", "10.99.4.2", "10.99.4.1") // the server side starts first
	ob.Busy, ob.CPU = true, 1
	ob.Extra = []string{"-log-level", "warn", "-poll-nice", "0", "-timeout", selftestTimeout}
	oa.Busy, oa.CPU = true, 0
	// The first ops wait for the peer's ARP reply; the serving engine,
	// busy on a shared CPU, may answer later than the default 50 ms.
	oa.Extra = append(slices.Clone(ob.Extra), "-resolve-timeout", "1s")
	b, err := testbed.Start(ob)
	if err != nil {
		return err
	}
	defer b.Stop(10 * time.Second)
	srv, err := startPerfServer(rmaperf, b.Socket)
	if err != nil {
		return err
	}
	defer srv.stop()
	for _, s := range selftestSpecs { // WRITEs write the region's second half only: READs still find the pattern
		r, st, err := selftestOnce(oa, s, dur, "selftest-memif", srv,
			"-selftest-peer", srv.kx, "-selftest-region", srv.region, "-profile")
		if err != nil {
			return err
		}
		r.Note = addNote(r.Note, selftestNoteM)
		emit(r)
		for _, sr := range stageRows(r, st) {
			emit(sr)
		}
	}
	return nil
}

// selftestOnce runs rmad -selftest (o's engine, then args) for s and dur
// and returns its row and, with -profile among args, its stage table;
// srv, if set, hands it the client's credentials over an inherited pipe.
func selftestOnce(o testbed.Options, s spec, dur time.Duration, setup string, srv *perfServer, args ...string) (Row, *stage.Report, error) {
	a := append(o.Args(), "-selftest", s.test, "-s", strconv.Itoa(s.size), "-O", strconv.Itoa(s.depth),
		"-D", dur.String(), "-json")
	a = append(a, args...)
	cmd := exec.Command(o.Rmad, a...)
	logPath := filepath.Join(o.Dir, o.Name+"-"+s.test+"-"+strconv.Itoa(s.size)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return Row{}, nil, err
	}
	defer logf.Close()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, logf
	if srv != nil {
		fd, closeAfter, err := keyx.Attach(cmd, srv.cliCreds)
		if err != nil {
			return Row{}, nil, err
		}
		defer closeAfter()
		cmd.Args = append(cmd.Args, "-creds-fd", strconv.Itoa(fd))
	}
	err = cmd.Run()
	r, st, jerr := parseSelfTest(out.Bytes())
	if jerr != nil {
		tail, _ := os.ReadFile(logPath)
		return Row{}, nil, fmt.Errorf("%s: %v (%v): output %q\n%s", strings.Join(cmd.Args, " "), err, jerr, out.Bytes(), lastLines(string(tail), 20))
	}
	r.Setup, r.Command = setup, strings.Join(cmd.Args, " ")
	if err != nil { // a row whose ops failed: kept, its note says which
		r.Note = addNote(r.Note, "rmad -selftest: "+err.Error())
	}
	return r, st, nil
}

// parseSelfTest reads rmad -selftest -json's line: the row and, with
// -profile, its stage table ("stages").
func parseSelfTest(out []byte) (Row, *stage.Report, error) {
	var v struct {
		Row
		Stages *stage.Report `json:"stages"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return Row{}, nil, err
	}
	return v.Row, v.Stages, nil
}

// stageRows are the rows of run's stage table st (none without one):
// setup run's with "-stages" appended, the run's test, size, depth, cores
// and rate, and per line its stage, cycles and ns per op and budget (to
// a tenth); the note has its share and sections per op, and the total's
// (the last line, with the run's command) says where its budget comes
// from.
func stageRows(run Row, st *stage.Report) []Row {
	if st == nil || len(st.Rows) == 0 {
		return nil
	}
	tenth := func(v float64) *float64 { return benchrow.F(math.Round(10*v) / 10) }
	var out []Row
	for _, x := range st.Rows {
		r := Row{System: run.System, Setup: run.Setup + "-stages", Test: run.Test, Size: run.Size, Outstanding: run.Outstanding,
			Cores: run.Cores, OpsPerSec: run.OpsPerSec, MBPerSec: run.MBPerSec, Ops: st.Ops, Seconds: run.Seconds,
			Stage: x.Stage, CyclesPerOp: tenth(x.Cycles), CPUNsPerOp: tenth(x.Ns)}
		if x.BudgetNs != nil {
			r.BudgetNs = tenth(*x.BudgetNs)
		}
		r.Note = fmt.Sprintf("share %.1f %%", 100*x.Share)
		if x.Sections > 0 {
			r.Note += fmt.Sprintf("; %.3f sections per op", x.Sections)
		}
		if o, ok := x.Over(); ok {
			r.Note += fmt.Sprintf("; %+.1f ns per op against its budget", o)
		}
		if x.Stage == stage.RowTotal { // the run's command once, on its last line
			r.Command = run.Command
			r.Note += fmt.Sprintf("; %.2f frames received per op; counter at %.3f GHz", st.FramesPerOp, st.Hz/1e9)
			if b := st.Budget; b.TargetNs > 0 {
				r.Note += fmt.Sprintf("; budget from %s, measured crypto seal %.1f ns, open %.1f ns per op", b.Target, b.SealNs, b.OpenNs)
			}
		}
		out = append(out, r)
	}
	return out
}

// stageSummary is one run's stage table as its rows give it: the total,
// and the budgeted row furthest over its budget (nil: none budgeted).
type stageSummary struct {
	total, worst *Row
}

func (s stageSummary) over() float64 { return *s.worst.CPUNsPerOp - *s.worst.BudgetNs }

// stageSummaries returns, for each run whose stage rows are in rows (of
// setup, test, size and depth), its summary, in the order measured.
func stageSummaries(rows []Row, setup, test string, size, depth, cores int) []stageSummary {
	var out []stageSummary
	var cur stageSummary
	for i := range rows {
		r := &rows[i]
		if r.Setup != setup || r.Test != test || r.Size != size || r.Outstanding != depth || r.Cores != cores || r.Stage == "" || r.CPUNsPerOp == nil {
			continue
		}
		switch {
		case r.Stage == stage.RowTotal: // the last line of a table
			cur.total = r
			out = append(out, cur)
			cur = stageSummary{}
		case r.BudgetNs != nil && (cur.worst == nil || *r.CPUNsPerOp-*r.BudgetNs > *cur.worst.CPUNsPerOp-*cur.worst.BudgetNs):
			cur.worst = r
		}
	}
	return out
}

// printStageSummaries prints, for each run with a stage table, its total
// against its budget and the stage most over its budget.
func printStageSummaries(rows []Row) {
	for i := range rows {
		t := &rows[i]
		if t.Stage != stage.RowTotal {
			continue
		}
		ss := stageSummaries(rows[:i+1], t.Setup, t.Test, t.Size, t.Outstanding, t.Cores)
		s := ss[len(ss)-1]
		fmt.Printf("%s %-9s %5d B O=%-3d C=%d: %.1f ns per op", t.Setup, t.Test, t.Size, t.Outstanding, t.Cores, *t.CPUNsPerOp)
		if t.BudgetNs != nil {
			fmt.Printf(" (budget %.1f)", *t.BudgetNs)
		}
		if s.worst != nil {
			fmt.Printf("; most over its budget: %s, %.1f ns per op (%+.1f)", s.worst.Stage, *s.worst.CPUNsPerOp, s.over())
		}
		fmt.Println()
	}
}

// ownLanes is the first address from a on at which an engine of cores
// cores serves each core's requests on that core (engine.RequestCore).
func ownLanes(a netip.Addr, cores int) netip.Addr {
	for ; ; a = a.Next() {
		own := true
		for i := range cores {
			own = own && engine.RequestCore(a, i, cores) == i
		}
		if own {
			return a
		}
	}
}

// otherLanes is the first address from a on at which an engine of cores
// cores serves core 0's requests on another core.
func otherLanes(a netip.Addr, cores int) netip.Addr {
	for ; engine.RequestCore(a, 0, cores) == 0; a = a.Next() {
	}
	return a
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// selftestRoundRatios returns, per round of selftestScaling, the
// two-core 64 B read_bw over the one-core, and the hand-over mode's over
// the one-core.
func selftestRoundRatios(rows []Row) (two, handed []float64) {
	var round []Row // the rows of selftestScaling, three per round
	for _, r := range rows {
		if r.Setup == "selftest-rounds" || r.Setup == "selftest-handover" {
			round = append(round, r)
		}
	}
	for k := 0; k+3 <= len(round); k += 3 {
		var one, two1, h float64
		for _, r := range round[k : k+3] {
			switch {
			case r.Setup == "selftest-handover":
				h = r.OpsPerSec
			case r.Cores == 1:
				one = r.OpsPerSec
			default:
				two1 = r.OpsPerSec
			}
		}
		if one > 0 {
			two, handed = append(two, two1/one), append(handed, h/one)
		}
	}
	return two, handed
}

// printSelfTestRatios prints the two-core loopback rows against the
// one-core rows of the same test and size, and the rounds' ratios.
func printSelfTestRatios(rows []Row) {
	two, handed := selftestRoundRatios(rows)
	if len(two) > 0 && len(handed) > 0 {
		fmt.Printf("selftest read_bw 64 B, %d rounds: 2 cores / 1 core = %.2f (%s); one stream handed over on 2 cores / 1 core = %.2f (%s)\n",
			len(two), median(two), ratioList(two), median(handed), ratioList(handed))
	}
	for _, r2 := range rows {
		if r2.Setup != "selftest" || r2.Cores != 2 {
			continue
		}
		for _, r1 := range rows {
			if r1.Setup == "selftest" && r1.Cores == 1 && r1.Test == r2.Test && r1.Size == r2.Size && r1.OpsPerSec > 0 {
				fmt.Printf("selftest %-9s %5d B: 2 cores / 1 core = %.0f / %.0f ops/s = %.2f\n", r2.Test, r2.Size, r2.OpsPerSec, r1.OpsPerSec, r2.OpsPerSec/r1.OpsPerSec)
			}
		}
	}
}
