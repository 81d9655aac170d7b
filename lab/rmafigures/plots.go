package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/sim"
	"github.com/onerma/onerma/internal/plotpng"
)

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff},
}

// rateSeries is flow i's goodput (Gbit/s) over windows of win ns centred
// on t, every step ns from from to to; x in unit ns.
func rateSeries(r *sim.FlowResult, i int, from, to, win, step int64, unit float64) plotter.XYs {
	var pts plotter.XYs
	for t := from; t+win/2 <= to; t += step {
		lo := max(t-win/2, 0)
		pts = append(pts, plotter.XY{X: float64(t) / unit, Y: r.GoodputBps(i, lo, lo+win) / 1e9})
	}
	return pts
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, name string, pts plotter.XYs, c int, dashed bool) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = palette[c%len(palette)]
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

func addLinePoints(p *plot.Plot, name string, pts plotter.XYs, c int) error {
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	l.Color = palette[c%len(palette)]
	l.Width = vg.Points(1.2)
	s.Color = l.Color
	s.Shape = draw.CircleGlyph{}
	if c >= len(palette) { // the palette's second round: dashed, square points
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		s.Shape = draw.BoxGlyph{}
	}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// hline is a horizontal reference line across [x0, x1].
func hline(p *plot.Plot, name string, y, x0, x1 float64) error {
	return addLine(p, name, plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}}, 4, true)
}

// save writes plots stacked in one column into a PNG.
func save(path string, w, hEach vg.Length, plots ...*plot.Plot) error {
	return plotpng.Save(path, w, hEach, plots...)
}

func writeFigures(dir string, r *results) error {
	vs := variants()
	capGbps := sim.PayloadCapacityBps(sim.PaperLinkBps, sim.PaperMTU, abi.MaxOpBytes) / 1e9
	const us = 1000.0

	// Fig. 15a: goodput and CWND from an idle start.
	var ps []*plot.Plot
	good := newPlot("Fig. 15a: one flow from idle (goodput over 2-RTT windows)", "time (µs)", "goodput (Gbit/s)")
	cwnd := newPlot("Fig. 15a: CWND (ops) = min(local, remote)", "time (µs)", "CWND (ops)")
	for i, v := range vs {
		rr := r.ramp[i]
		if err := addLine(good, v.name, rateSeries(rr, 0, 0, sim.Fig15RampNs, 10_000, 1000, us), i, false); err != nil {
			return err
		}
		var pts plotter.XYs
		for _, s := range rr.Samples {
			pts = append(pts, plotter.XY{X: float64(s.T) / us, Y: s.Cwnd})
		}
		if err := addLine(cwnd, v.name, pts, i, false); err != nil {
			return err
		}
	}
	if err := hline(good, fmt.Sprintf("link payload capacity %.1f", capGbps), capGbps, 0, sim.Fig15RampNs/us); err != nil {
		return err
	}
	good.Y.Min, good.Y.Max = 0, 105
	ps = append(ps, good, cwnd)
	if err := save(filepath.Join(dir, "fig15a.png"), 8*vg.Inch, 3.2*vg.Inch, ps...); err != nil {
		return err
	}

	// Fig. 15b and 15c: two flows, the second joining; 15d: issue_delay.
	type joinFig struct {
		file, title string
		res         []*sim.FlowResult
		to, win     int64
		step        int64
		unit        float64
		xl          string
	}
	for _, jf := range []joinFig{
		{"fig15b.png", "Fig. 15b: a second flow joins at 400 µs (local and remote congestion separated)", r.join, 1_000_000, 10_000, 1000, us, "time (µs)"},
		{"fig15c.png", "Fig. 15c: the same, congestion not separated (one window per server, total_delay)", r.comb, sim.Fig15CombinedNs, 50_000, 10_000, 1e6, "time (ms)"},
	} {
		ps = ps[:0]
		for i, v := range vs {
			rr := jf.res[i]
			winLabel := fmt.Sprintf("%d-µs windows", jf.win/1000)
			p := newPlot(fmt.Sprintf("%s\n%s (goodput over %s)", jf.title, v.name, winLabel), jf.xl, "goodput (Gbit/s)")
			for f := range rr.Flows {
				if err := addLine(p, rr.Flows[f].Spec.Name, rateSeries(rr, f, 300_000, jf.to, jf.win, jf.step, jf.unit), f, false); err != nil {
					return err
				}
			}
			fair := capGbps / 2
			if err := hline(p, fmt.Sprintf("fair share %.1f", fair), fair, 300_000/jf.unit, float64(jf.to)/jf.unit); err != nil {
				return err
			}
			p.Y.Min, p.Y.Max = 0, 105
			ps = append(ps, p)
		}
		if err := save(filepath.Join(dir, jf.file), 8*vg.Inch, 3.4*vg.Inch, ps...); err != nil {
			return err
		}
	}
	ps = ps[:0]
	for i, v := range vs {
		rr := r.join[i]
		p := newPlot("Fig. 15d: issue_delay of each completion, for Fig. 15b\n"+v.name, "time (µs)", "issue_delay (µs)")
		p.Legend.Top = true
		for f := range rr.Flows {
			var pts plotter.XYs
			for _, s := range rr.Samples {
				if s.Flow == f && s.T >= 350_000 && s.T <= 700_000 {
					pts = append(pts, plotter.XY{X: float64(s.T) / us, Y: float64(s.IssueNs) / us})
				}
			}
			if err := addLine(p, rr.Flows[f].Spec.Name, pts, f, false); err != nil {
				return err
			}
		}
		ps = append(ps, p)
	}
	if err := save(filepath.Join(dir, "fig15d.png"), 8*vg.Inch, 3.2*vg.Inch, ps...); err != nil {
		return err
	}

	// Fig. 16a: goodput vs jitter; 16b: shedding rates for 64 KB.
	ga := newPlot("Fig. 16a: goodput vs jitter, CC off, 100 Gbit/s offered", "jitter per frame, uniform [0, J) (µs)", "goodput (Gbit/s)")
	ga.Legend.Top = true
	gb := newPlot("Fig. 16b: ops shed, 64 KB window", "jitter per frame, uniform [0, J) (µs)", "fraction of ops posted")
	gb.Legend.Top, gb.Legend.Left = true, true
	for i, w := range jitterWindows {
		var pts plotter.XYs
		for k, j := range jittersNs {
			st := sim.AnalyzeShed(r.jitter[i][k], warmNs)
			pts = append(pts, plotter.XY{X: float64(j) / us, Y: st.GoodputBps / 1e9})
		}
		label := map[int]string{48 << 10: "48 KB (< BDP)", 64 << 10: "64 KB (= BDP)", 96 << 10: "96 KB (> BDP)"}[w]
		if err := addLinePoints(ga, label, pts, i); err != nil {
			return err
		}
		if w == 64<<10 {
			var dt, to plotter.XYs
			for k, j := range jittersNs {
				st := sim.AnalyzeShed(r.jitter[i][k], warmNs)
				dt = append(dt, plotter.XY{X: float64(j) / us, Y: st.DTRate})
				to = append(to, plotter.XY{X: float64(j) / us, Y: st.TimeoutRate})
			}
			if err := addLinePoints(gb, "DISPATCH_TIMEOUT", dt, 0); err != nil {
				return err
			}
			if err := addLinePoints(gb, "TIMEOUT", to, 1); err != nil {
				return err
			}
		}
	}
	ga.Y.Min, ga.Y.Max = 0, 105
	if err := save(filepath.Join(dir, "fig16a.png"), 7*vg.Inch, 4*vg.Inch, ga); err != nil {
		return err
	}
	if err := save(filepath.Join(dir, "fig16b.png"), 7*vg.Inch, 4*vg.Inch, gb); err != nil {
		return err
	}

	// Fig. 16d: goodput (and median chunk latency) vs NACK threshold.
	gd := newPlot("Fig. 16d: two clients each demand 100 Gbit/s of one server (CC off)", "NACK threshold (requests queued; log scale)", "goodput (Gbit/s)")
	gd.Legend.Left = true
	ld := newPlot("median time from a chunk's first post to its OK (retries included)", "NACK threshold (requests queued; log scale)", "latency (µs)")
	ld.Legend.Top, ld.Legend.Left = true, true
	var gp, lp plotter.XYs
	for i, th := range nackThresh {
		st := sim.AnalyzeShed(r.nack[i], warmNs)
		gp = append(gp, plotter.XY{X: float64(th), Y: st.GoodputBps / 1e9})
		if st.ChunkLatP50Ns > 0 && st.GoodputBps > 0 {
			lp = append(lp, plotter.XY{X: float64(th), Y: float64(st.ChunkLatP50Ns) / us})
		}
	}
	if err := addLinePoints(gd, "goodput, both clients", gp, 0); err != nil {
		return err
	}
	sv := sim.Fig16dServeCapacityBps() / 1e9
	if err := hline(gd, fmt.Sprintf("server's serve rate alone %.1f", sv), sv, 1, float64(nackThresh[len(nackThresh)-1])); err != nil {
		return err
	}
	if len(lp) > 0 {
		if err := addLinePoints(ld, "median chunk latency (where goodput is kept)", lp, 1); err != nil {
			return err
		}
	}
	for _, p := range []*plot.Plot{gd, ld} {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	gd.Y.Min, gd.Y.Max = 0, 105
	return save(filepath.Join(dir, "fig16d.png"), 7*vg.Inch, 3.4*vg.Inch, gd, ld)
}
