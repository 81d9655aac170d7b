// Package plotpng writes gonum plots stacked in one column into a PNG:
// the figures of make figures (lab/rmafigures) and make fig9 (rmakv).
package plotpng

import (
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Save writes plots, each w wide and hEach high, one above the other,
// their axes aligned, into the PNG file path.
func Save(path string, w, hEach vg.Length, plots ...*plot.Plot) error {
	img := vgimg.New(w, hEach*vg.Length(len(plots)))
	dc := draw.New(img)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	t := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 2 * vg.Millimeter}
	cs := plot.Align(rows, t, dc)
	for i, p := range plots {
		p.Draw(cs[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
