package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/onerma/onerma/internal/kvfail"
	"github.com/onerma/onerma/internal/plotpng"
)

var (
	red    = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	blue   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	orange = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	black  = color.RGBA{0, 0, 0, 0xff}
)

// serverColors: replicas R1, R2 (the one that fails) and R3.
var serverColors = []color.Color{blue, red, color.RGBA{0x2c, 0xa0, 0x2c, 0xff}}

// plotFig9 draws one case: every GET's latency around the failure,
// coloured by the replica that answered it (GETs that failed over
// ringed), then p50 and p99 per 1 ms window over the whole run.
func plotFig9(path string, fc fig9Case, r *kvfail.Result) error {
	s, f := r.Analyze(time.Millisecond, fig9Burst), r.Analyze(fig9Fine, fig9Burst)
	zoomTo := 15.0
	if fc.c == kvfail.CaseEngine {
		zoomTo = float64(fig9Timeout/time.Millisecond) + 10
	}
	by := make([]plotter.XYs, kvfail.Servers)
	var moved plotter.XYs
	lo, hi := 1e9, 0.0
	for _, x := range r.Samples {
		t, lat := float64(x.DoneNs)/1e6, max(float64(x.LatNs)/1e3, 1)
		if t < -3 || t > zoomTo || x.Server < 0 || int(x.Server) >= len(by) {
			continue
		}
		lo, hi = min(lo, lat), max(hi, lat)
		by[x.Server] = append(by[x.Server], plotter.XY{X: t, Y: lat})
		if x.Moved > 0 {
			moved = append(moved, plotter.XY{X: t, Y: lat})
		}
	}
	zoom := newFig9Plot(fmt.Sprintf("Fig. 9%s %s\nfailed GETs: %d; first failover %s after the failure; settled %s after it (1 ms windows), %s after the first failover (100 µs windows)",
		fc.file[4:], fc.what, s.Failed, durText(s.FirstFailoverNs), durText(s.SettleNs), durText(f.SettleFromFirstNs)), "time from the failure (ms)")
	for i, pts := range by {
		name := fmt.Sprintf("GET answered by R%d", i+1)
		if i == r.Victim {
			name += " (fails at 0)"
		}
		if err := scatter(zoom, name, pts, serverColors[i], 1.3, draw.CircleGlyph{}); err != nil {
			return err
		}
	}
	if err := scatter(zoom, "GET that failed over to it", moved, black, 3, draw.RingGlyph{}); err != nil {
		return err
	}
	if err := vline(zoom, "failure", 0, lo, hi); err != nil {
		return err
	}
	if fc.c == kvfail.CaseEngine && !fc.hedge {
		t := float64(fig9Timeout) / 1e3
		if err := hline(zoom, fmt.Sprintf("TIMEOUT (%v): READs to the dead engine fail here", fig9Timeout), t, -3, zoomTo); err != nil {
			return err
		}
	}
	zoom.X.Min, zoom.X.Max = -3, zoomTo

	var p50, p99 plotter.XYs
	for _, w := range r.Windows(time.Millisecond) {
		if w.N == 0 {
			continue
		}
		t := float64(w.StartNs)/1e6 + 0.5
		p50 = append(p50, plotter.XY{X: t, Y: max(float64(w.P50)/1e3, 1)})
		p99 = append(p99, plotter.XY{X: t, Y: max(float64(w.P99)/1e3, 1)})
	}
	whole := newFig9Plot(fmt.Sprintf("GET latency per 1 ms window (R = 3; before the failure p50 %s, p99 %s; after settling p50 %s, p99 %s)",
		durText(s.BaseP50), durText(s.BaseP99), durText(s.AfterP50), durText(s.AfterP99)), "time from the failure (ms)")
	if err := line(whole, "p50", p50, blue); err != nil {
		return err
	}
	if err := line(whole, "p99", p99, orange); err != nil {
		return err
	}
	if err := vline(whole, "failure", 0, 1, 1e5); err != nil {
		return err
	}
	return plotpng.Save(path, 26*vg.Centimeter, 11*vg.Centimeter, zoom, whole)
}

func newFig9Plot(title, x string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = "latency (µs, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Millimeter
	return p
}

func scatter(p *plot.Plot, name string, pts plotter.XYs, c color.Color, r float64, shape draw.GlyphDrawer) error {
	if len(pts) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.GlyphStyle.Color = c
	s.GlyphStyle.Radius = vg.Points(r)
	s.GlyphStyle.Shape = shape
	p.Add(s)
	p.Legend.Add(name, s)
	return nil
}

func line(p *plot.Plot, name string, pts plotter.XYs, c color.Color) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// vline and hline are dashed reference lines.
func vline(p *plot.Plot, name string, x, y0, y1 float64) error {
	return dashed(p, name, plotter.XYs{{X: x, Y: max(y0, 1)}, {X: x, Y: max(y1, 2)}}, black, 1, 4, 3)
}

func hline(p *plot.Plot, name string, y, x0, x1 float64) error {
	return dashed(p, name, plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}}, red, 0.8, 2, 2)
}

func dashed(p *plot.Plot, name string, pts plotter.XYs, c color.Color, width, on, off float64) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(width)
	l.Dashes = []vg.Length{vg.Points(on), vg.Points(off)}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
