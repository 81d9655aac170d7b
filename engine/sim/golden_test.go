package sim

import (
	"bufio"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
)

var flagUpdateGolden = flag.Bool("sim.update-golden", false, "rewrite testdata/golden.txt from this build")

// goldenSeeds is the fixed set of seeds every scenario runs in TestGolden.
const goldenSeeds = 48

// goldenFile pins the engine's behaviour: for a fixed set of seeds of every
// scenario and every paper experiment, the run's digest (every event,
// frame and completion), its step count and a hash of every core's
// counters. A change of the engine that is meant to change no behaviour
// (a restructure, a speed-up) must leave every line as it is; one that
// changes behaviour on purpose regenerates the file and says why:
//
//	go test ./engine/sim -run TestGolden -sim.update-golden
const goldenFile = "testdata/golden.txt"

// goldenRuns lists the runs of the golden file by name, in file order.
func goldenRuns() []struct {
	name string
	run  func() (*Result, error)
} {
	var out []struct {
		name string
		run  func() (*Result, error)
	}
	add := func(name string, run func() (*Result, error)) {
		out = append(out, struct {
			name string
			run  func() (*Result, error)
		}{name, run})
	}
	for _, sc := range Scenarios {
		for seed := uint64(1); seed <= goldenSeeds; seed++ {
			add(fmt.Sprintf("%s/%d", sc.Name, seed), func() (*Result, error) { return Run(sc.Make(seed)) })
		}
	}
	flows := []FlowExperiment{
		Fig15Ramp(PaperCC(1), Fig15RampNs/4),
		Fig15Ramp(PaperCC(16), Fig15RampNs/4),
		Fig15Join(PaperCC(16), Fig15JoinAtNs/4, Fig15JoinNs/6),
		Fig16Jitter(64<<10, 2000, 200_000),
		Fig16Nack(8, 200_000),
	}
	for i, x := range flows {
		add(fmt.Sprintf("flow%d-%s", i, x.Name), func() (*Result, error) {
			r, err := RunFlows(x)
			if err != nil {
				return nil, err
			}
			return r.Sim, nil
		})
	}
	return out
}

// goldenLine is one run's line of the golden file. Its stats hash covers
// every core's counters by name, those that are zero left out: a counter
// added to engine.Stats changes no line where it stays zero, so only
// runs whose behaviour it shows change.
func goldenLine(name string, r *Result) string {
	h := fnv.New64a()
	for _, st := range r.Cores {
		v := reflect.ValueOf(st)
		for i := range v.NumField() {
			if f := v.Field(i); !f.IsZero() {
				fmt.Fprintf(h, "%s:%v ", v.Type().Field(i).Name, f.Interface())
			}
		}
		fmt.Fprint(h, "|")
	}
	fmt.Fprintf(h, "%v|%d|%d", r.ByStatus, r.Posted, r.EndNs)
	return fmt.Sprintf("%s digest=%016x steps=%d ok=%d stats=%016x", name, r.Digest, r.Steps, r.ByStatus[abi.StatusOK], h.Sum64())
}

// TestGolden: the engine behaves, event for event, as when the golden
// file was written.
func TestGolden(t *testing.T) {
	runs := goldenRuns()
	got := make([]string, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, 4)
	done := make(chan int)
	for i, g := range runs {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := g.run()
			if err == nil {
				got[i] = goldenLine(g.name, r)
			}
			errs[i] = err
			done <- i
		}()
	}
	for range runs {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", runs[i].name, err)
		}
	}
	if *flagUpdateGolden {
		body := "# engine/sim TestGolden: go test ./engine/sim -run TestGolden -sim.update-golden\n" + strings.Join(got, "\n") + "\n"
		if err := os.WriteFile(goldenFile, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	if len(want) != len(got) {
		t.Fatalf("%s has %d runs, this build %d: regenerate it only for a change meant to change behaviour", goldenFile, len(want), len(got))
	}
	bad := 0
	for i := range got {
		if got[i] != want[i] {
			bad++
			if bad <= 10 {
				t.Errorf("behaviour changed:\n got %s\nwant %s", got[i], want[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d runs differ from %s", bad, len(got), goldenFile)
	}
}
