// Package figure draws what the notebooks show: HTML tables and PNG charts (grouped bars, lines
// and dots) from plain numbers, so that a notebook cell computes and displays in a few lines and no
// cell carries HTML or plotting code. It returns bytes and strings; the notebook hands them to
// GoNB (gonbui.DisplayHTML, gonbui.DisplayPNG), so this package does not depend on GoNB.
//
//	png, err := figure.Lines(figure.Chart{Title: "loss", XLabel: "step", YLabel: "nats"},
//		figure.Series{Name: "adam", X: steps, Y: losses})
//	gonbui.DisplayPNG(png)
package figure
