// Command rmafigures runs the 1RMA paper's congestion experiments (§7.4
// Fig. 15, §7.5 Fig. 16) in the simulator (engine/sim: real engine cores
// on a virtual clock and fabric) and writes PNG plots and RESULTS.md, the
// numbers of the runs next to the paper's, into a directory (-out:
// figures/RESULTS.md by default). With -kv it draws instead Figure 8
// (§7.1), which make bench's kv setup measures on real engines, from
// that benchmark's JSON lines (fig8.go); with -fig14, Figure 14 (§7.3),
// which its fig14 setup measures (fig14.go).
//
//	rmafigures [-out figures] [-jobs N]
//	rmafigures [-out figures] [-kv bench/out.jsonl] [-fig14 bench/out.jsonl]
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/engine/sim"
	"github.com/onerma/onerma/internal/cli"
)

// The sweeps at full size.
var (
	jitterWindows = []int{48 << 10, 64 << 10, 96 << 10}
	jittersNs     = []int64{0, 500, 1000, 1500, 2000, 3000, 4000, 5000, 7500, 10_000, 15_000, 20_000}
	nackThresh    = []int{1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 128, 256}
)

const (
	sweepNs = 2_000_000 // each point of a sweep: 2 ms of virtual time
	warmNs  = 100_000   // warm-up: the first 100 µs are not counted
)

// ccVariant is one controller setting of the Fig. 15 experiments.
type ccVariant struct {
	name string
	p    cc.Params
}

func variants() []ccVariant {
	return []ccVariant{{"CwndInit 1", sim.PaperCC(1)}, {"CwndInit 16 (one BDP, cc's default)", sim.PaperCC(16)}}
}

// results holds every run.
type results struct {
	ramp, join, comb []*sim.FlowResult   // per variant
	jitter           [][]*sim.FlowResult // [window][jitter]
	nack             []*sim.FlowResult   // per threshold
}

// options are rmafigures' flags.
type options struct {
	out, kv, fig14 string
	jobs           int
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := cli.New("rmafigures", "rmafigures [-out figures] [-jobs N]", "rmafigures [-out figures] [-kv bench/out.jsonl] [-fig14 bench/out.jsonl]")
	fs.Notes("The first form runs the paper's congestion experiments (Fig. 15, 16) in the simulator;\nthe second draws Figure 8 from make bench's kv rows and Figure 14 from its fig14 rows.")
	fs.Example("rmafigures -out figures", "rmafigures -out figures -kv bench/out.jsonl")
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "figures", "directory for the PNGs and RESULTS.md")
	fs.IntVar(&o.jobs, "jobs", runtime.GOMAXPROCS(0), "experiments run at once (each is one goroutine)")
	fs.StringVar(&o.kv, "kv", "", "instead of the simulator's figures, draw Figure 8 (fig8.png, fig8.md) from the newest run of kv-fig8 rows in this make bench output")
	fs.StringVar(&o.fig14, "fig14", "", "instead of the simulator's figures, draw Figure 14 (fig14.png, fig14.md) from the newest run of fig14-* rows in this make bench output")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.PrintUsage()
		return nil, fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if o.jobs < 1 {
		return nil, fmt.Errorf("-jobs %d: want at least 1", o.jobs)
	}
	if o.out == "" {
		return nil, errors.New("-out \"\": want a directory")
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if err != nil {
		cli.Exit("rmafigures", err)
	}
	log.SetFlags(0)
	log.SetPrefix("rmafigures: ")
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		log.Fatal(err)
	}
	if o.kv != "" || o.fig14 != "" {
		if o.kv != "" {
			if err := writeFig8(o.out, o.kv); err != nil {
				log.Fatal(err)
			}
		}
		if o.fig14 != "" {
			if err := writeFig14(o.out, o.fig14); err != nil {
				log.Fatal(err)
			}
		}
		return
	}
	start := time.Now()
	r, err := runAll(o.jobs)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("experiments done in %v", time.Since(start).Round(time.Millisecond))
	if err := writeFigures(o.out, r); err != nil {
		log.Fatal(err)
	}
	if err := writeResults(filepath.Join(o.out, "RESULTS.md"), r); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", o.out)
}

// runAll runs every experiment on a pool of jobs workers.
func runAll(jobs int) (*results, error) {
	vs := variants()
	r := &results{
		ramp: make([]*sim.FlowResult, len(vs)), join: make([]*sim.FlowResult, len(vs)), comb: make([]*sim.FlowResult, len(vs)),
		jitter: make([][]*sim.FlowResult, len(jitterWindows)), nack: make([]*sim.FlowResult, len(nackThresh)),
	}
	type task struct {
		x   sim.FlowExperiment
		dst **sim.FlowResult
	}
	var tasks []task
	// The long ones first.
	for i, v := range vs {
		p := v.p
		p.Combined = true
		tasks = append(tasks, task{sim.Fig15Join(p, sim.Fig15JoinAtNs, sim.Fig15CombinedNs), &r.comb[i]})
	}
	for i, v := range vs {
		tasks = append(tasks, task{sim.Fig15Join(v.p, sim.Fig15JoinAtNs, sim.Fig15JoinNs), &r.join[i]},
			task{sim.Fig15Ramp(v.p, sim.Fig15RampNs), &r.ramp[i]})
	}
	for i, w := range jitterWindows {
		r.jitter[i] = make([]*sim.FlowResult, len(jittersNs))
		for k, j := range jittersNs {
			tasks = append(tasks, task{sim.Fig16Jitter(w, j, sweepNs), &r.jitter[i][k]})
		}
	}
	for i, th := range nackThresh {
		tasks = append(tasks, task{sim.Fig16Nack(th, sweepNs), &r.nack[i]})
	}
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	for range max(jobs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next == len(tasks) || first != nil {
					mu.Unlock()
					return
				}
				t := tasks[next]
				next++
				mu.Unlock()
				res, err := sim.RunFlows(t.x)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("%s: %w", t.x.Name, err)
				}
				*t.dst = res
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return r, first
}

// statusCount is a flow result's completions of one status.
func statusCount(r *sim.FlowResult, st abi.Status) uint64 {
	by := r.Statuses()
	return by[st]
}
