package figure

import (
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Stacked draws, for each label, the parts' values stacked in one bar (the first part at the
// bottom) and beside it one bar per reference series (values to compare the stack's total with;
// a reference value of 0 draws nothing), and returns the chart as PNG. Parts whose values are all
// 0 are left out of the legend.
func Stacked(c Chart, labels []string, parts []Bar, references ...Bar) ([]byte, error) {
	p := c.plot()
	columns := 1 + len(references)
	width := vg.Points(min(48, 240/float64(len(labels)*columns)+8))
	offset := func(column int) vg.Length { return width * vg.Length(float64(column)-float64(columns-1)/2) }
	var below *plotter.BarChart
	for i, part := range parts {
		chart, err := part.chart(labels, width)
		if err != nil {
			return nil, err
		}
		chart.Color, chart.LineStyle.Width, chart.Offset = colorOf(i), 0, offset(0)
		if below != nil {
			chart.StackOn(below)
		}
		below = chart
		p.Add(chart)
		if anyNonZero(part.Values) {
			p.Legend.Add(part.Name, chart)
		}
	}
	for i, ref := range references {
		chart, err := ref.chart(labels, width)
		if err != nil {
			return nil, err
		}
		chart.Color, chart.Offset = referenceColor, offset(1+i)
		chart.LineStyle.Width, chart.LineStyle.Color = vg.Points(1), colorOf(len(parts)+i)
		p.Add(chart)
		p.Legend.Add(ref.Name, chart)
	}
	p.NominalX(labels...)
	p.Y.Max *= 1.25 // room for the legend
	return c.png(p)
}

func anyNonZero(values []float64) bool {
	for _, v := range values {
		if v != 0 {
			return true
		}
	}
	return false
}
