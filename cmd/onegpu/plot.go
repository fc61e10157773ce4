package main

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/onegpu/onegpu/train"
)

// plotLoss writes the loss per step of a run to a PNG file.
func plotLoss(file, title string, h *train.History) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "training loss"
	points := make(plotter.XYs, len(h.Steps))
	for i, s := range h.Steps {
		points[i].X, points[i].Y = float64(s.Step), s.Loss
	}
	line, err := plotter.NewLine(points)
	if err != nil {
		return fmt.Errorf("plotting the loss: %w", err)
	}
	p.Add(line, plotter.NewGrid())
	if err := p.Save(8*vg.Inch, 4*vg.Inch, file); err != nil {
		return fmt.Errorf("writing the loss curve to %s: %w", file, err)
	}
	return nil
}
