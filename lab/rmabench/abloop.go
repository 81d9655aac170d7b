package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/testbed"
)

// The ab setup's loop rows (setup "ab-loop", also run alone with -only
// ab-loop): what one iteration of the poll loop costs at 16 ops in
// flight, the key/value cache's concurrency (kv.go), in the old build and
// in the new one, in interleaved rounds.
//
// Each run starts the loopback engine of one build as the cache's engine
// runs (benchLoopback in poll mode yield on CPU 1: onermakv.go), runs
// that build's rmaperf read_bw 512 B at O = 16 on CPU 0 and, once it is
// under way, samples CPU 1 with perf (perf record -C 1) between two reads
// of the engine's counters (that build's rmactl stats: loop.iterations,
// posted). perf's samples of the engine's process are sorted by symbol
// into what an iteration spends:
//
//   - clock: reading the clock (the vDSO's clock_gettime and the Go
//     runtime's nanotime around it, or the time-stamp counter);
//   - crossings: the Go runtime's side of the calls into C (cgocall,
//     entersyscall and exitsyscall, and cgo's checks of pointer
//     arguments), not the C functions' own work;
//   - yields: the kernel, and the system calls' Go stubs (the loop's
//     sched_yield when an iteration found nothing to do);
//   - other: everything else (the engine's work, the crypto, the port).
//
// Each share of the samples times the time between the two counter reads,
// over the iterations between them, is ns per iteration (Row.LoopNs).
// The per-iteration overhead of the target is clock + crossings
// (the clock reads and the cgo crossings; the third item it names, polls
// of empty command rings, the summary doorbell took out of the loop:
// loop.ring_looks_idle counts any left); the yields are shown beside it.

// abLoopSpec is the loop rows' test: 512 B READs at 16 in flight, the
// op of the cache's 32 B GETs (one READ of the key's 512-byte bucket).
var abLoopSpec = spec{"read_bw", 512, 16}

const abLoopSetup = "ab-loop"

// abLoopGoal is the loop rows' target: the new build's per-iteration
// overhead at most half the old build's.
const abLoopGoal = 0.5

// The categories of Row.LoopNs, and their sum, ns per iteration.
const (
	loopClock     = "clock"
	loopCrossings = "crossings"
	loopYields    = "yields"
	loopOther     = "other"
	loopIteration = "iteration"
)

var (
	loopClockSym     = regexp.MustCompile(`clock_gettime|^runtime\.nanotime|^runtime\.walltime|^time\.(now|Now|Since)$|runner\.Monotonic$|/internal/tsc\.|^\[vdso\]`)
	loopCrossingsSym = regexp.MustCompile(`^runtime\.(cgocall|asmcgocall|entersyscall|exitsyscall|reentersyscall|cgoCheck|cgoIsGoPointer|inHeapOrStack|casgstatus|save$|cgoUse)|^_cgo_`)
	loopYieldsSym    = regexp.MustCompile(`^syscall\.(Syscall|RawSyscall)|^internal/runtime/syscall|^runtime\.osyield|sched_yield`)
	perfLine         = regexp.MustCompile(`^\s*([0-9.]+)%\s+\[(.)\]\s+(.*\S)\s*$`)
)

// loopCategory sorts one symbol of perf's report ([k]: the kernel's).
func loopCategory(kernel bool, sym string) string {
	switch {
	case kernel, loopYieldsSym.MatchString(sym):
		return loopYields
	case loopClockSym.MatchString(sym):
		return loopClock
	case loopCrossingsSym.MatchString(sym):
		return loopCrossings
	}
	return loopOther
}

// loopShares sorts the lines of perf report --sort sym into the
// categories, as shares of all the samples the report lists.
func loopShares(report []byte) (map[string]float64, error) {
	sh := map[string]float64{}
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(report))
	for sc.Scan() {
		m := perfLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		p, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil, err
		}
		sh[loopCategory(m[2] == "k", m[3])] += p
		total += p
	}
	if total <= 0 {
		return nil, errors.New("perf report listed no samples")
	}
	for k := range sh {
		sh[k] /= total
	}
	return sh, nil
}

// abLoopBins returns the rmactl beside each build's rmad.
func abLoopBins(oldDir, rmad string) (oldCtl, newCtl string, err error) {
	oldCtl, newCtl = filepath.Join(oldDir, "rmactl"), filepath.Join(filepath.Dir(rmad), "rmactl")
	if err := statAll("ab-loop", "each build's rmactl reads its engine's loop counters", oldCtl, newCtl); err != nil {
		return "", "", err
	}
	if _, err := exec.LookPath("perf"); err != nil {
		return "", "", fmt.Errorf("ab-loop: %w (make setup-bench installs linux-perf)", err)
	}
	return oldCtl, newCtl, nil
}

// abLoopRun measures the loop rows in rounds interleaved rounds of the old
// build (system onerma-old) and the new (onerma), each run max(4 s,
// dur/rounds) long.
func abLoopRun(oldDir, rmad, rmaperf, dir, crypto string, rounds int, dur time.Duration, emit emitFunc) error {
	oldRmad, oldRmaperf, err := abBins(oldDir)
	if err != nil {
		return err
	}
	oldCtl, newCtl, err := abLoopBins(oldDir, rmad)
	if err != nil {
		return err
	}
	d := max(4*time.Second, dur/time.Duration(rounds))
	run := func(system, name, rmad, rmaperf, rmactl string) func() (Row, error) {
		return func() (Row, error) {
			r, err := abLoopOnce(rmad, rmaperf, rmactl, dir, name, crypto, d)
			if err != nil {
				return Row{}, fmt.Errorf("ab-loop %s: %w", system, err)
			}
			r.System = system
			return r, nil
		}
	}
	return interleaved(rounds, emit,
		run(abOldSystem, "bench-abl-old", oldRmad, oldRmaperf, oldCtl),
		run(abNewSystem, "bench-abl", rmad, rmaperf, newCtl))
}

// abLoopOnce is one run of the loop rows (see above) on the build of
// rmad, rmaperf and rmactl: its row is rmaperf's, with LoopNs and the
// counters of the sampled window.
func abLoopOnce(rmad, rmaperf, rmactl, dir, name, crypto string, d time.Duration) (Row, error) {
	o := benchLoopback(rmad, dir, name, "10.99.0.1", "1500", cryptoArgs(crypto)...)
	o.Mode = "yield"
	e, err := testbed.Start(o)
	if err != nil {
		return Row{}, err
	}
	defer e.Stop(10 * time.Second)
	type result struct {
		r   Row
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := rmaperfRun(rmaperf, "0", abLoopSpec, d, abLoopSetup, nil, "-socket", e.Socket, "-self")
		done <- result{r, err}
	}()
	// Sample the middle of rmaperf's run: a quarter of it in, for half.
	time.Sleep(d / 4)
	data := filepath.Join(dir, name+".perf.data")
	before, err := engineStats(rmactl, e.Socket)
	t0 := time.Now()
	if err == nil {
		err = perfRecordCPU(data, 1, d/2)
	}
	var after *ctlmsg.Stats
	if err == nil {
		after, err = engineStats(rmactl, e.Socket)
	}
	window := time.Since(t0)
	res := <-done
	if err != nil {
		return Row{}, err
	}
	if res.err != nil {
		return Row{}, res.err
	}
	if before.Loop == nil || after.Loop == nil {
		return Row{}, errors.New("rmactl stats has no loop counters")
	}
	iters := after.Loop.Iterations - before.Loop.Iterations
	ops := after.Posted - before.Posted
	if iters == 0 || ops == 0 {
		return Row{}, fmt.Errorf("the engine iterated %d times and took %d ops while sampled", iters, ops)
	}
	rep, err := exec.Command("perf", "report", "-i", data, "--stdio", "-q", "--no-children", "--sort", "sym",
		"-g", "none", "--percent-limit", "0", "--pid", strconv.Itoa(e.Pid())).Output()
	if err != nil {
		return Row{}, fmt.Errorf("perf report: %w", err)
	}
	os.Remove(data)
	sh, err := loopShares(rep)
	if err != nil {
		return Row{}, err
	}
	perIter := float64(window.Nanoseconds()) / float64(iters)
	r := res.r
	r.LoopNs = map[string]float64{loopIteration: perIter}
	for _, k := range []string{loopClock, loopCrossings, loopYields, loopOther} {
		r.LoopNs[k] = sh[k] * perIter
	}
	idle := after.Loop.RingLooksIdle - before.Loop.RingLooksIdle
	r.Note = addNote(r.Note, fmt.Sprintf("engine %s, poll mode yield; sampled %.2f s: %d iterations, %d ops (%.2f per iteration), %d yields, %d idle ring looks",
		rmad, window.Seconds(), iters, ops, float64(ops)/float64(iters), after.Loop.Yields-before.Loop.Yields, idle))
	return r, nil
}

// perfRecordCPU samples every process on cpu for d into data.
func perfRecordCPU(data string, cpu int, d time.Duration) error {
	cmd := exec.Command("perf", "record", "-q", "-F", "2999", "-C", strconv.Itoa(cpu), "-o", data,
		"--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("perf record: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// loopOverhead is a loop row's per-iteration overhead: clock and
// crossings; false for a row without LoopNs.
func loopOverhead(r *Row) (float64, bool) {
	if r.LoopNs == nil {
		return 0, false
	}
	return r.LoopNs[loopClock] + r.LoopNs[loopCrossings], true
}

// abLoopRound is one round of the loop rows: the old build's row and the
// new build's.
type abLoopRound struct{ old, new *Row }

// abLoopRounds pairs the loop rows of one run into rounds: the k-th row
// of the old build with the k-th of the new (interleaved emits one of
// each per round).
func abLoopRounds(rows []Row) []abLoopRound {
	var olds, news []*Row
	for i := range rows {
		r := &rows[i]
		if r.Setup != abLoopSetup || r.LoopNs == nil {
			continue
		}
		switch r.System {
		case abOldSystem:
			olds = append(olds, r)
		case abNewSystem:
			news = append(news, r)
		}
	}
	out := make([]abLoopRound, min(len(olds), len(news)))
	for i := range out {
		out[i] = abLoopRound{olds[i], news[i]}
	}
	return out
}

// abLoopSummary is the median over a run's rounds of the new build's
// per-iteration overhead over the old's, with and without the yields.
type abLoopSummary struct {
	ratio, withYields float64
	ratios            []float64
	oldNs, newNs      float64 // medians, clock and crossings
}

func summarizeABLoop(rows []Row) (abLoopSummary, bool) {
	var s abLoopSummary
	var with, oldNs, newNs []float64
	for _, rd := range abLoopRounds(rows) {
		o, _ := loopOverhead(rd.old)
		n, _ := loopOverhead(rd.new)
		if o <= 0 {
			continue
		}
		s.ratios = append(s.ratios, n/o)
		with = append(with, (n+rd.new.LoopNs[loopYields])/(o+rd.old.LoopNs[loopYields]))
		oldNs, newNs = append(oldNs, o), append(newNs, n)
	}
	if len(s.ratios) == 0 {
		return s, false
	}
	s.ratio, s.withYields = median(s.ratios), median(with)
	s.oldNs, s.newNs = median(oldNs), median(newNs)
	return s, true
}

// printABLoop prints each round's ns per iteration by category, old and
// new, and the median ratio of the overheads.
func printABLoop(rows []Row) {
	rds := abLoopRounds(rows)
	if len(rds) == 0 {
		return
	}
	fmt.Printf("%-34s %9s %9s %9s %9s %9s\n", "ab-loop read_bw 512 B O=16, ns/iter", loopClock, loopCrossings, loopYields, loopOther, loopIteration)
	for k, rd := range rds {
		for _, r := range []*Row{rd.old, rd.new} {
			l := r.LoopNs
			fmt.Printf("%-34s %9.1f %9.1f %9.1f %9.1f %9.1f\n", fmt.Sprintf("  round %d %s", k+1, r.System), l[loopClock], l[loopCrossings], l[loopYields], l[loopOther], l[loopIteration])
		}
	}
	if s, ok := summarizeABLoop(rows); ok {
		fmt.Printf("ab-loop per-iteration overhead (clock + crossings) new/old, %d interleaved rounds: median %.2f (ratios %s; %.1f / %.1f ns) (target <= %.2f); with the yields %.2f\n",
			len(s.ratios), s.ratio, ratioList(s.ratios), s.newNs, s.oldNs, abLoopGoal, s.withYields)
	}
}

// abLoopMetric is the headline's loop metric.
func abLoopMetric(rows []Row) (measure, bool) {
	s, ok := summarizeABLoop(rows)
	if !ok {
		return measure{}, false
	}
	return measure{fmt.Sprintf("%.2f (%d rounds; %.1f / %.1f ns per iteration; with the yields %.2f)", s.ratio, len(s.ratios), s.newNs, s.oldNs, s.withYields),
		fmt.Sprintf("≤ %.2f", abLoopGoal), judge(s.ratio <= abLoopGoal)}, true
}
