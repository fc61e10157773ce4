package figure

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// referenceColor fills the bars of published reference figures (Stacked), outlined in their
// series' color.
var referenceColor = color.RGBA{0xe8, 0xe8, 0xe8, 255}

// Grid draws a grid of categories as colored cells, row 0 at the top (a matrix as it is printed:
// an attention mask's queries down, keys across), and returns the chart as PNG. cells[r][c] is a
// category: 0 is blank, k ≥ 1 is drawn in the k-th series color and named names[k-1] in the
// legend (names may be shorter: the rest are unnamed). Without a size the chart is 6 inches wide
// and as high as the grid's proportions make it.
func Grid(c Chart, cells [][]int, names ...string) ([]byte, error) {
	if len(cells) == 0 {
		return nil, fmt.Errorf("figure: a grid of no rows")
	}
	for r, row := range cells {
		if len(row) != len(cells[0]) {
			return nil, fmt.Errorf("figure: grid row %d has %d cells, row 0 %d", r, len(row), len(cells[0]))
		}
	}
	rows, cols := len(cells), len(cells[0])
	p := c.plot()
	p.Add(grid(cells))
	// Row 0 is drawn at the top, where the axis is highest: the ticks count rows from the top.
	p.Y.Tick.Marker = plot.TickerFunc(func(_, _ float64) []plot.Tick {
		ticks := plot.DefaultTicks{}.Ticks(0, float64(rows))
		for i := range ticks {
			ticks[i].Value = float64(rows) - ticks[i].Value
		}
		return ticks
	})
	if c.Width == 0 && c.Height == 0 {
		c.Width, c.Height = 6*vg.Inch, 6*vg.Inch*vg.Length(rows)/vg.Length(cols)+vg.Inch
	}
	// Room above the grid for the legend (about 14 points a name, of the plot's height).
	if legend, height := 14*vg.Length(len(names)), c.Height-vg.Inch; len(names) > 0 && legend < height/2 {
		p.Y.Max = float64(rows) * float64(height/(height-legend))
	}
	for i, name := range names {
		p.Legend.Add(name, swatch(colorOf(i)))
	}
	return c.png(p)
}

// grid plots cells: each run of one category in a row is one filled rectangle, row r between
// rows-r-1 and rows-r on the vertical axis, column c between c and c+1.
type grid [][]int

func (g grid) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	rows := len(g)
	for r, row := range g {
		for start := 0; start < len(row); {
			end := start + 1
			for end < len(row) && row[end] == row[start] {
				end++
			}
			if k := row[start]; k > 0 {
				// Half a point of overlap with the next cells, so that no seam of the background shows.
				x0, x1 := trX(float64(start)), trX(float64(end))+vg.Points(0.5)
				y0, y1 := trY(float64(rows-r-1)), trY(float64(rows-r))+vg.Points(0.5)
				c.FillPolygon(colorOf(k-1), []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
			}
			start = end
		}
	}
}

// DataRange is the grid's extent: a unit a cell.
func (g grid) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, float64(len(g[0])), 0, float64(len(g))
}

// swatch is a legend entry: a square of one color.
type swatch color.RGBA

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(color.RGBA(s), []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}
