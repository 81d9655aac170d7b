package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/onerma/onerma/internal/benchrow"
)

// Figure 8 (§7.1) is measured on real engines, not in the simulator:
// rmabench's kv setup sweeps each key/value cache's GET latency against
// the load offered to it, open loop, and appends the rows (setup
// kv-fig8) to its JSON lines. rmafigures -kv FILE draws the newest run
// of them into fig8.png and writes fig8.md (in -out: figures/fig8.png and
// figures/fig8.md by default), the numbers next to the paper's claims.

// fig8Setup is the setup of Figure 8's rows ("-memif" may follow).
const fig8Setup = "kv-fig8"

// fig8Rows returns the rows of the newest run in the JSON lines at path
// that has kv-fig8 rows, in the order they were written, and that run's
// id ("" and no rows when none has).
func fig8Rows(path string) ([]benchrow.Row, string, error) {
	return newestRows(path, fig8Setup)
}

// newestRows returns the rows whose setup begins with prefix of the
// newest run in the JSON lines at path that has any, in the order they
// were written, and that run's id ("" and no rows when none has).
func newestRows(path, prefix string) ([]benchrow.Row, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var all []benchrow.Row
	newest := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for n := 1; sc.Scan(); n++ {
		var r benchrow.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, "", fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if strings.HasPrefix(r.Setup, prefix) {
			all = append(all, r)
			newest = max(newest, r.Run) // run ids are UTC times, yyyymmddThhmmssZ
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	var rows []benchrow.Row
	for _, r := range all {
		if r.Run == newest {
			rows = append(rows, r)
		}
	}
	return rows, newest, nil
}

// fig8Curve is one system's sweep.
type fig8Curve struct {
	name string
	rows []benchrow.Row
}

func fig8Curves(rows []benchrow.Row) []fig8Curve {
	var cs []fig8Curve
	for _, r := range rows {
		name := r.System + strings.TrimPrefix(r.Setup, fig8Setup)
		if r.Size != 32 { // the 1 KB sweep of the cache's two GET paths
			name += fmt.Sprintf(" %d B", r.Size)
		}
		i := 0
		for i < len(cs) && cs[i].name != name {
			i++
		}
		if i == len(cs) {
			cs = append(cs, fig8Curve{name: name})
		}
		cs[i].rows = append(cs[i].rows, r)
	}
	return cs
}

func fig8Saturated(r *benchrow.Row) bool { return strings.Contains(r.Note, "saturated") }

func optUs(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

// writeFig8 draws fig8.png and writes fig8.md (figures/fig8.md) into dir from the newest
// run of Figure 8's rows in path; it says so and does nothing when path
// has none.
func writeFig8(dir, path string) error {
	rows, run, err := fig8Rows(path)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Printf("rmafigures: no %s rows in %s (make bench's kv setup writes them): fig8 left as it is\n", fig8Setup, path)
		return nil
	}
	curves := fig8Curves(rows)
	p50 := newPlot("Fig. 8: GET latency against offered load, one server (32 B values unless named, YCSB-C, open loop)", "offered load (thousand GETs/s; a curve ends at its first saturated load)", "p50 latency (µs, log scale)")
	p99 := newPlot("", "offered load (thousand GETs/s; a curve ends at its first saturated load)", "p99 latency (µs, log scale)")
	for i, c := range curves {
		var a, b plotter.XYs
		for _, r := range c.rows {
			x := r.OfferedOpsPerSec / 1e3
			a = append(a, plotter.XY{X: x, Y: max(r.P50us, 0.1)})
			b = append(b, plotter.XY{X: x, Y: max(optUs(r.P99us), 0.1)})
		}
		label := fmt.Sprintf("%s (%d in flight)", c.name, c.rows[0].Outstanding)
		if err := addLinePoints(p50, label, a, i); err != nil {
			return err
		}
		if err := addLinePoints(p99, label, b, i); err != nil {
			return err
		}
	}
	for _, p := range []*plot.Plot{p50, p99} {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		p.X.Min = 0
	}
	if err := save(filepath.Join(dir, "fig8.png"), 8*vg.Inch, 3.6*vg.Inch, p50, p99); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "fig8.md"), fig8Markdown(curves, run, path), 0o644)
}

// fig8Markdown is figures/fig8.md: the paper's claims, each curve's headline
// numbers, and every point.
func fig8Markdown(curves []fig8Curve, run, path string) []byte {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Fig. 8: key/value cache GET latency against offered load, measured next to the paper\n\n")
	p("Written by `rmafigures -kv %s` from run %s of `make bench`'s kv setup (`bin/rmabench -only kv`;\n", path, run)
	p("`lab/rmabench/fig8.go`). Every system serves 32 B values of the same keys on this machine, on loopback\n")
	p("(and OneRMA's cache 1 KB values too, its GETs by two READs and by one LOOKUP: the curves named 1024 B);\n")
	p("one load generator (`internal/kvload`) offers YCSB-C GETs (scrambled Zipfian, θ 0.99) at Poisson arrival\n")
	p("times, each GET's latency counted from its arrival (no coordinated omission), at fractions of the throughput\n")
	p("the system reached closed loop in the same run, up to its first saturated point (arrivals left unsent, or\n")
	p("under 95 %% of the offered load served). ![Fig. 8](fig8.png)\n\n")
	p("| claim | paper (§7.1) | measured |\n|---|---|---|\n")
	p("| what a server sustains | \"ramps to the maximum practical throughput of each underlying RMA implementation\" (servers' NICs are the bottleneck) |")
	for _, c := range curves {
		p(" %s: %s;", c.name, fig8Peak(c))
	}
	p(" |\n")
	p("| latency at low load | 1RMA's command issue by MMIO saves PCIe round trips at zero load |")
	for _, c := range curves {
		r := c.rows[0]
		p(" %s: p50 %.1f µs, p99 %.1f µs at %.0f GETs/s;", c.name, r.P50us, optUs(r.P99us), r.OfferedOpsPerSec)
	}
	p(" |\n")
	p("| tail with load | 1RMA's tail even improves with load (warmer client CPUs); two-sided Pony's software bottlenecks |")
	for _, c := range curves {
		p(" %s: %s;", c.name, fig8Tail(c))
	}
	p(" |\n\n")
	p("The paper's servers are ten hardware-1RMA nodes with clients outnumbering them; here one 2-vCPU machine\n")
	p("runs the server, its engine where there is one, and the clients, so a system's saturation is this machine's.\n\n")
	for _, c := range curves {
		p("## %s\n\n| offered GETs/s | served GETs/s | p50 µs | p99 µs | p99.9 µs | serving CPU s per M GETs | note |\n|---|---|---|---|---|---|---|\n", c.name)
		for _, r := range c.rows {
			p("| %.0f | %.0f | %.1f | %.1f | %.1f | %.2f | %s |\n", r.OfferedOpsPerSec, r.OpsPerSec, r.P50us, optUs(r.P99us), optUs(r.P999us), optUs(r.CPUSecPerMOps), r.Note)
		}
		p("\n")
	}
	return b.Bytes()
}

// fig8Peak is the highest load c served unsaturated and where it
// saturated.
func fig8Peak(c fig8Curve) string {
	best, sat := -1, -1
	for i := range c.rows {
		if fig8Saturated(&c.rows[i]) {
			if sat < 0 {
				sat = i
			}
		} else if sat < 0 {
			best = i
		}
	}
	s := "saturated at its lowest load"
	if best >= 0 {
		s = fmt.Sprintf("%.0f GETs/s served unsaturated", c.rows[best].OfferedOpsPerSec)
	}
	if sat >= 0 {
		s += fmt.Sprintf(", saturated at %.0f offered (%.0f served)", c.rows[sat].OfferedOpsPerSec, c.rows[sat].OpsPerSec)
	} else {
		s += ", never saturated in the sweep"
	}
	return s
}

// fig8Tail compares c's p99 at its lowest load with its lowest p99 and
// its p99 at its highest unsaturated load.
func fig8Tail(c fig8Curve) string {
	first := optUs(c.rows[0].P99us)
	low, last := first, first
	for i := range c.rows {
		if fig8Saturated(&c.rows[i]) {
			break
		}
		v := optUs(c.rows[i].P99us)
		low, last = min(low, v), v
	}
	return fmt.Sprintf("p99 %.1f µs at the lowest load, %.1f µs at its best, %.1f µs at the highest unsaturated load", first, low, last)
}
