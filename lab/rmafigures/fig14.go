package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/onerma/onerma/internal/benchrow"
)

// Figure 14 (§7.3) is measured on real engines: rmabench's fig14 setup
// rotates a region's key while a client reads it back to back, under
// three designs, and appends rows (setups fig14-*) whose "unavail" rows
// carry the probes around one rotation (benchrow.Row.Timeline).
// rmafigures -fig14 FILE draws the newest run of them into fig14.png and
// writes, beside it (in -out), a Markdown page of the numbers next to
// the paper's claims.

// fig14Prefix begins the setups of Figure 14's rows.
const fig14Prefix = "fig14-"

// fig14Designs are the designs Figure 14 draws, in its order, and what
// the paper says of each.
var fig14Designs = []struct{ setup, label, paper string }{
	{"fig14-driver", "driver rekey, new K_d pre-distributed", "rotation via 1RMA's driver: unavailability ~27 µs, fast REMOTE_AUTHENTICATION_FAILUREs, clients switch to pre-distributed keys"},
	{"fig14-rekey-op", "REKEY op, new K_d pre-distributed", "the Rekey op: the same rotation in a handful of hardware cycles (< 1 µs), no trust in the driver"},
	{"fig14-keyx", "driver rekey, new K_d fetched over keyx", "RDMA: connections break and are re-established out of band: > 2 ms"},
}

// fig14Rows returns the rows of the newest run in the JSON lines at
// path that has fig14-* rows, and that run's id ("" and none when none
// has).
func fig14Rows(path string) ([]benchrow.Row, string, error) {
	return newestRows(path, fig14Prefix)
}

// fig14Find returns the row of setup and test in rows (nil if none).
func fig14Find(rows []benchrow.Row, setup, test string) *benchrow.Row {
	for i := range rows {
		if rows[i].Setup == setup && rows[i].Test == test {
			return &rows[i]
		}
	}
	return nil
}

// fig14Reads are a timeline's READs as the application sees them: a
// READ starts with a probe posted after an OK (or the first) and ends
// with the next OK, failures in between retried; its latency runs from
// its first probe's post to the OK's completion (both in µs, from the
// rotation's first failure). failed are the failed probes on their own.
func fig14Reads(tl []benchrow.Probe) (reads, failed plotter.XYs) {
	start := -1.0
	open := false
	for _, p := range tl {
		if !open {
			start, open = p.AtUs, true
		}
		if p.Status != "OK" {
			failed = append(failed, plotter.XY{X: p.AtUs, Y: max(p.LatUs, 0.1)})
			continue
		}
		reads = append(reads, plotter.XY{X: start, Y: max(p.AtUs+p.LatUs-start, 0.1)})
		open = false
	}
	return reads, failed
}

// writeFig14 draws fig14.png and writes its Markdown page into dir from
// the newest run of Figure 14's rows in path; it says so and does nothing
// when path has none.
func writeFig14(dir, path string) error {
	rows, run, err := fig14Rows(path)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Printf("rmafigures: no %s* rows in %s (make bench's fig14 setup writes them): fig14 left as it is\n", fig14Prefix, path)
		return nil
	}
	var plots []*plot.Plot
	for i, d := range fig14Designs {
		u := fig14Find(rows, d.setup, "unavail")
		if u == nil || len(u.Timeline) == 0 {
			continue
		}
		reads, failed := fig14Reads(u.Timeline)
		title := ""
		if len(plots) == 0 {
			title = "Fig. 14: a client's READs around a key rotation (64 B, one in flight; the rotation of median unavailability)\n"
		}
		p := newPlot(fmt.Sprintf("%s%s: unavailability %.1f µs (p50 of %d rotations)", title, d.label, u.P50us, u.Ops),
			"time from the post of the first READ that failed under the old key (µs)", "READ latency (µs, log)")
		ok, err := plotter.NewScatter(reads)
		if err != nil {
			return err
		}
		ok.Color, ok.Shape = palette[i%len(palette)], draw.CircleGlyph{}
		p.Add(ok)
		first := len(plots) == 0 // the legend once, above the first panel's data
		if first {
			p.Legend.Add("a READ, from its first post to its OK completion, retries included", ok)
		}
		if len(failed) > 0 {
			f, err := plotter.NewScatter(failed)
			if err != nil {
				return err
			}
			f.Color, f.Shape, f.Radius = palette[1], draw.CrossGlyph{}, vg.Points(4)
			p.Add(f)
			if first {
				p.Legend.Add("a READ that failed (REMOTE_AUTHENTICATION_FAILURE), at its post", f)
			}
		}
		p.Y.Scale = plot.LogScale{}
		p.Y.Min = 5
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, false
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		fmt.Printf("rmafigures: run %s of %s has no fig14 timelines: fig14 left as it is\n", run, path)
		return nil
	}
	if err := save(filepath.Join(dir, "fig14.png"), 9*vg.Inch, 2.8*vg.Inch, plots...); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "fig14.md"), fig14Markdown(rows, run, path), 0o644)
}

// fig14Markdown is Figure 14's Markdown page: the paper's claims, the
// measured numbers next to them, and every row.
func fig14Markdown(rows []benchrow.Row, run, path string) []byte {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	us := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	p("# Fig. 14: a client's unavailability during a key rotation, measured next to the paper\n\n")
	p("Written by `rmafigures -fig14 %s` from run %s of `make bench`'s fig14 setup (`bin/rmabench -only fig14`;\n", path, run)
	p("`lab/rmabench/fig14.go` defines every number). Two engines over memif, each spinning on a CPU it gives to any\n")
	p("other runnable thread when idle (poll mode yield); a client on\n")
	p("engine A reads 64 B of a region on engine B back to back, one READ in flight, while the region's key is\n")
	p("rotated every 50 ms. *Unavailability*: from the post of the first READ that failed under the old key to the\n")
	p("post of the first that then succeeded under the new one (its own round trip left out: a client that switched\n")
	p("at once shows the failed READ's round trip); *raw*: to that READ's completion. ![Fig. 14](fig14.png)\n\n")
	p("| design | paper (§7.3) | unavailability p50 / p99 / max (µs) | raw p50 / max (µs) | READ round trip p50 (µs) | the rotation's own latency p50 / p99 (µs) |\n|---|---|---|---|---|---|\n")
	for _, d := range fig14Designs {
		u, w, l := fig14Find(rows, d.setup, "unavail"), fig14Find(rows, d.setup, "unavail_raw"), fig14Find(rows, d.setup, "probe_lat")
		if u == nil {
			continue
		}
		own := "-"
		for _, test := range []string{"rekey_call", "rekey_op", "keyx_fetch"} {
			if r := fig14Find(rows, d.setup, test); r != nil {
				if own == "-" {
					own = ""
				} else {
					own += "; "
				}
				own += fmt.Sprintf("%s %.1f / %s", test, r.P50us, us(r.P99us))
			}
		}
		raw, rtt := "-", "-"
		if w != nil {
			raw = fmt.Sprintf("%.1f / %s", w.P50us, us(w.P999us))
		}
		if l != nil {
			rtt = fmt.Sprintf("%.1f", l.P50us)
		}
		p("| %s (%s; %d rotations, %d unseen) | %s | %.1f / %s / %s | %s | %s | %s |\n", d.label, d.setup, u.Ops, u.Errors, d.paper, u.P50us, us(u.P99us), us(u.P999us), raw, rtt, own)
	}
	p("\nThe paper's < 1 µs for the Rekey op is the time in which an op with neither key succeeds. The *neither* rows\n")
	p("bound it from the engine's own times: pairs of READs, one under each key, in flight throughout, and the window\n")
	p("between the last READ that left engine A and succeeded under the old key and the first under the new one; the\n")
	p("pairs leave in bursts a round trip apart, so the bound is mostly the gap between two bursts. A pair with neither\n")
	p("READ OK would be time with no key working.\n\n")
	p("| rows | window p50 / p99 / max (µs) | pairs with neither READ OK | rotations |\n|---|---|---|---|\n")
	for _, s := range []string{"fig14-driver-neither", "fig14-rekey-op-neither"} {
		if r := fig14Find(rows, s, "neither"); r != nil {
			p("| %s | %.2f / %s / %s | %d | %d |\n", s, r.P50us, us(r.P99us), us(r.P999us), r.Errors, r.Ops)
		}
	}
	p("\nThe driver path itself (portal.Rekey through rmad's control socket, back to back; engines in backoff,\n")
	p("GOMAXPROCS 4; the paper's driver rotation takes ~27 µs):\n\n| engine cores | p50 µs | p99 µs | max µs | calls |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.Setup == "fig14-rekey-call" {
			p("| %d | %.1f | %s | %s | %d |\n", r.Cores, r.P50us, us(r.P99us), us(r.P999us), r.Ops)
		}
	}
	p("\nThe paper's testbed is hardware 1RMA NICs; here one 2-vCPU machine runs both engines, the client, the owner and\n")
	p("the control plane, so every latency includes its scheduling.\n\n## Rows\n\n")
	p("| setup | test | cores | p50 µs | p99 µs | p99.9 (max) µs | ops | errors | note |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		p("| %s | %s | %d | %.2f | %s | %s | %d | %d | %s |\n", r.Setup, r.Test, r.Cores, r.P50us, us(r.P99us), us(r.P999us), r.Ops, r.Errors, r.Note)
	}
	return b.Bytes()
}
