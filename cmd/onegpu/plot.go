package main

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/onegpu/onegpu/train"
)

// plotLoss writes the loss per step of a run to a PNG file.
func plotLoss(file, title string, h *train.History) error {
	return plotLosses(file, title, []string{""}, []*train.History{h})
}

// plotLosses writes the losses per step of several runs, one line each with its name in the
// legend, to a PNG file; a run's evaluation loss (History.Eval), when it has one, is a line of
// points next to its own, "eval" in the legend.
func plotLosses(file, title string, names []string, histories []*train.History) error {
	p := plot.New()
	p.Title.Text = wrapTitle(title, titleWidth)
	p.X.Label.Text = "step"
	p.Y.Label.Text = "training loss"
	for _, h := range histories {
		if len(h.Eval) > 0 {
			p.Y.Label.Text = "loss"
		}
	}
	p.Add(plotter.NewGrid())
	for i, h := range histories {
		points := make(plotter.XYs, len(h.Steps))
		for j, s := range h.Steps {
			points[j].X, points[j].Y = float64(s.Step), s.Loss
		}
		line, err := plotter.NewLine(points)
		if err != nil {
			return fmt.Errorf("plotting the loss: %w", err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		p.Add(line)
		if names[i] != "" {
			p.Legend.Add(names[i], line)
		}
		if len(h.Eval) > 0 {
			evals := make(plotter.XYs, len(h.Eval))
			for j, e := range h.Eval {
				evals[j].X, evals[j].Y = float64(e.Step), e.Loss
			}
			eval, points, err := plotter.NewLinePoints(evals)
			if err != nil {
				return fmt.Errorf("plotting the evaluation loss: %w", err)
			}
			eval.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
			eval.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(eval, points)
			p.Legend.Add(strings.TrimSpace(names[i]+" eval"), eval, points)
			if names[i] == "" {
				p.Legend.Add("training", line)
			}
		}
	}
	p.Legend.Top = true
	img := vgimg.New(8*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(img))
	return writePNG(file, img)
}

// writePNG writes img to file as PNG, whatever the file's extension (plot.Save would choose the
// format by the extension and fail, after the work, on one it does not know).
func writePNG(file string, img *vgimg.Canvas) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return f.Close()
}

// plotBench writes two bar charts, one above the other: the estimated peak memory and the step
// time of each configuration of the grid.
func plotBench(file, heading string, rows []benchRow) error {
	labels := make([]string, len(rows))
	memory := make(plotter.Values, len(rows))
	times := make(plotter.Values, len(rows))
	for i, r := range rows {
		labels[i] = fmt.Sprintf("%s\n%s k%d", shortDType(r.Compute), r.Remat, r.MicroBatches)
		memory[i] = float64(r.PeakBytes) / (1 << 20)
		times[i] = r.StepSeconds
	}
	chart := func(title, unit string, values plotter.Values) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = unit
		bars, err := plotter.NewBarChart(values, vg.Points(18))
		if err != nil {
			return nil, err
		}
		p.Add(bars, plotter.NewGrid())
		p.NominalX(labels...)
		return p, nil
	}
	top, err := chart(heading+": estimated peak memory", "MiB", memory)
	if err != nil {
		return fmt.Errorf("plotting memory: %w", err)
	}
	bottom, err := chart("step time", "seconds", times)
	if err != nil {
		return fmt.Errorf("plotting time: %w", err)
	}
	const width, height = 11 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(width, height)
	canvas := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadY: vg.Points(12)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	for i, row := range plot.Align(plots, tiles, canvas) {
		plots[i][0].Draw(row[0])
	}
	return writePNG(file, img)
}

func shortDType(name string) string {
	if name == "bfloat16" {
		return "bf16"
	}
	return "f32"
}

// titleWidth is the most characters a line of a plot's title holds (a 12-inch-wide plot's title
// font): longer titles (a Llama's description) are wrapped.
const titleWidth = 110

// wrapTitle breaks s into lines of at most width characters at its ", " separators (a part longer
// than width keeps a line of its own).
func wrapTitle(s string, width int) string {
	var lines []string
	line := ""
	for _, part := range strings.SplitAfter(s, ", ") {
		if line != "" && utf8.RuneCountInString(strings.TrimSpace(line+part)) > width {
			lines = append(lines, strings.TrimSpace(line))
			line = ""
		}
		line += part
	}
	return strings.Join(append(lines, strings.TrimSpace(line)), "\n")
}
