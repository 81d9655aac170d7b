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
	grey   = color.RGBA{0x80, 0x80, 0x80, 0xff}
	red    = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	blue   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	orange = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	black  = color.RGBA{0, 0, 0, 0xff}
)

// plotFig9 draws one case: every GET's latency around the failure, then
// p50 and p99 per 1 ms window over the whole run.
func plotFig9(path string, fc fig9Case, r *kvfail.Result) error {
	s := r.Analyze(time.Millisecond)
	zoomTo := 15.0
	if fc.c == kvfail.CaseEngine {
		zoomTo = float64(fig9Timeout/time.Millisecond) + 10
	}
	var normal, over plotter.XYs
	prev := uint64(0)
	if len(r.Samples) > 0 {
		prev = r.Samples[0].Failovers
	}
	lo, hi := 1e9, 0.0
	for _, x := range r.Samples {
		t, lat := float64(x.DoneNs)/1e6, max(float64(x.LatNs)/1e3, 1)
		moved := x.Failovers > prev
		prev = x.Failovers
		if t < -3 || t > zoomTo {
			continue
		}
		lo, hi = min(lo, lat), max(hi, lat)
		if moved {
			over = append(over, plotter.XY{X: t, Y: lat})
		} else {
			normal = append(normal, plotter.XY{X: t, Y: lat})
		}
	}
	zoom := newFig9Plot(fmt.Sprintf("Fig. 9%s — failed GETs: %d; first failover %s after the failure; settled %s",
		fc.file[4:], s.Failed, durText(s.FirstFailoverNs), durText(s.SettleNs)), "time from the failure (ms)")
	if err := scatter(zoom, "GET", normal, grey, 1.2); err != nil {
		return err
	}
	if err := scatter(zoom, "GET that failed over", over, red, 2.5); err != nil {
		return err
	}
	if err := vline(zoom, fc.what, 0, lo, hi); err != nil {
		return err
	}
	if fc.c == kvfail.CaseEngine {
		t := float64(fig9Timeout) / 1e3
		if err := hline(zoom, fmt.Sprintf("TIMEOUT (%v): GETs in flight to the dead engine end here", fig9Timeout), t, -3, zoomTo); err != nil {
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
	whole := newFig9Plot(fmt.Sprintf("GET latency per 1 ms window (%d GETs outstanding, R = 3; baseline p50 %s, p99 %s)",
		8, durText(s.BaseP50), durText(s.BaseP99)), "time from the failure (ms)")
	if err := line(whole, "p50", p50, blue); err != nil {
		return err
	}
	if err := line(whole, "p99", p99, orange); err != nil {
		return err
	}
	if err := vline(whole, "failure", 0, 1, 1e5); err != nil {
		return err
	}
	return plotpng.Save(path, 26*vg.Centimeter, 10*vg.Centimeter, zoom, whole)
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
	return p
}

func scatter(p *plot.Plot, name string, pts plotter.XYs, c color.Color, r float64) error {
	if len(pts) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.GlyphStyle.Color = c
	s.GlyphStyle.Radius = vg.Points(r)
	s.GlyphStyle.Shape = draw.CircleGlyph{}
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
