package figure

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Table returns rows under header as an HTML table; cells are escaped.
func Table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("<table><tr>")
	for _, h := range header {
		fmt.Fprintf(&b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for _, r := range rows {
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(c))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>")
	return b.String()
}

// Chart is a chart's frame: its title, axis labels and size (8×4 inches when zero).
type Chart struct {
	Title, XLabel, YLabel string
	Width, Height         vg.Length
	// YFromZero starts the vertical axis at 0.
	YFromZero bool
}

// Bar is one series of a bar chart: a value per label.
type Bar struct {
	Name   string
	Values []float64
}

// Series is a line (or dots) through points X[i], Y[i].
type Series struct {
	Name   string
	X, Y   []float64
	Dots   bool // dots instead of a line
	Dashed bool
}

// palette is the colors series take in order.
var palette = []color.RGBA{
	{0x4c, 0x72, 0xb0, 255}, {0xdd, 0x84, 0x52, 255}, {0x55, 0xa8, 0x68, 255},
	{0xc4, 0x4e, 0x52, 255}, {0x81, 0x72, 0xb3, 255}, {0x93, 0x78, 0x60, 255},
	{0xda, 0x8b, 0xc3, 255}, {0x8c, 0x8c, 0x8c, 255}, {0xcc, 0xb9, 0x74, 255}, {0x64, 0xb5, 0xcd, 255},
}

func colorOf(i int) color.RGBA { return palette[i%len(palette)] }

// Bars draws one group of bars per label, a bar per series, and returns the chart as PNG.
func Bars(c Chart, labels []string, bars ...Bar) ([]byte, error) {
	p := c.plot()
	width := vg.Points(min(40, 200/float64(len(labels)*len(bars))+6))
	for i, b := range bars {
		chart, err := b.chart(labels, width)
		if err != nil {
			return nil, err
		}
		chart.Color = colorOf(i)
		chart.LineStyle.Width = 0
		chart.Offset = width * vg.Length(float64(i)-float64(len(bars)-1)/2)
		p.Add(chart)
		if b.Name != "" {
			p.Legend.Add(b.Name, chart)
		}
	}
	p.NominalX(labels...)
	p.Y.Max *= 1.15 // room for the legend
	return c.png(p)
}

// chart is b's bars of width, one per label.
func (b Bar) chart(labels []string, width vg.Length) (*plotter.BarChart, error) {
	if len(b.Values) != len(labels) {
		return nil, fmt.Errorf("figure: bars %q have %d values for %d labels", b.Name, len(b.Values), len(labels))
	}
	chart, err := plotter.NewBarChart(plotter.Values(b.Values), width)
	if err != nil {
		return nil, fmt.Errorf("figure: bars %q: %w", b.Name, err)
	}
	return chart, nil
}

// Lines draws each series as a line (or as dots) and returns the chart as PNG.
func Lines(c Chart, series ...Series) ([]byte, error) {
	p := c.plot()
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("figure: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		points := make(plotter.XYs, len(s.X))
		for j := range s.X {
			points[j].X, points[j].Y = s.X[j], s.Y[j]
		}
		if s.Dots {
			dots, err := plotter.NewScatter(points)
			if err != nil {
				return nil, fmt.Errorf("figure: series %q: %w", s.Name, err)
			}
			dots.GlyphStyle.Color, dots.GlyphStyle.Radius = colorOf(i), vg.Points(3)
			p.Add(dots)
			p.Legend.Add(s.Name, dots)
			continue
		}
		line, err := plotter.NewLine(points)
		if err != nil {
			return nil, fmt.Errorf("figure: series %q: %w", s.Name, err)
		}
		line.Color, line.Width = colorOf(i), vg.Points(1.5)
		if s.Dashed {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(s.Name, line)
	}
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.15 // room for the legend
	return c.png(p)
}

func (c Chart) plot() *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.Title, c.XLabel, c.YLabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

func (c Chart) png(p *plot.Plot) ([]byte, error) {
	if c.YFromZero {
		p.Y.Min = 0
	}
	width, height := c.Width, c.Height
	if width == 0 {
		width = 8 * vg.Inch
	}
	if height == 0 {
		height = 4 * vg.Inch
	}
	writer, err := p.WriterTo(width, height, "png")
	if err != nil {
		return nil, fmt.Errorf("figure: %w", err)
	}
	var buf bytes.Buffer
	if _, err := writer.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("figure: %w", err)
	}
	return buf.Bytes(), nil
}
