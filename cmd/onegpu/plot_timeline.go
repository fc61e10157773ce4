package main

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/onegpu/onegpu/analysis"
)

// timelineBlock is a run of consecutive ops of one block of the step (analysis.Step.Block).
type timelineBlock struct {
	Block     string `json:"block"`
	FirstOp   int    `json:"first_op"`
	LastOp    int    `json:"last_op"`
	PeakBytes int64  `json:"peak_bytes"`
}

// timelineBlocks groups a timeline's ops into runs of the same block, with each run's peak.
func timelineBlocks(timeline []int64, steps []analysis.Step) []timelineBlock {
	var blocks []timelineBlock
	for i, s := range steps {
		if n := len(blocks); n == 0 || blocks[n-1].Block != s.Block {
			blocks = append(blocks, timelineBlock{Block: s.Block, FirstOp: i})
		}
		b := &blocks[len(blocks)-1]
		b.LastOp, b.PeakBytes = i, max(b.PeakBytes, timeline[i])
	}
	return blocks
}

// The timeline's colors: bands by phase (forward, the loss, backward, the optimizer's update),
// alternating shades for consecutive blocks; the line by what the op computes.
var (
	bandColors = map[string][2]color.RGBA{
		"forward":   {{0xe8, 0xee, 0xf7, 255}, {0xd3, 0xde, 0xee, 255}},
		"loss":      {{0xfb, 0xe6, 0xcf, 255}, {0xf6, 0xd2, 0xab, 255}},
		"backward":  {{0xf8, 0xe4, 0xe4, 255}, {0xef, 0xce, 0xce, 255}},
		"optimizer": {{0xe2, 0xf1, 0xe4, 255}, {0xcb, 0xe5, 0xcf, 255}},
	}
	lineColors = map[string]color.RGBA{
		"attention": {0xc4, 0x2e, 0x32, 255},
		"loss":      {0xdd, 0x74, 0x22, 255},
		"other":     {0x2f, 0x4f, 0x8f, 255},
	}
)

// phaseOf is the phase a block belongs to.
func phaseOf(block string) string {
	switch {
	case block == "optimizer":
		return "optimizer"
	case strings.HasPrefix(block, "loss"):
		return "loss"
	case strings.HasSuffix(block, "backward"):
		return "backward"
	}
	return "forward"
}

// kindOf is what an op's innermost section computes, for the line's color.
func kindOf(section string) string {
	switch {
	case strings.HasPrefix(section, "attention"):
		return "attention"
	case strings.HasPrefix(section, "loss"):
		return "loss"
	}
	return "other"
}

// plotTimeline writes live bytes over the step's schedule (Analyze's sequential order) to a PNG
// file, as PyTorch's memory visualizer draws a step: one background band per block (shaded by
// phase: forward, loss, backward, optimizer; the wide ones named), the line colored where the ops
// compute attention or the loss, and the peak marked. It returns the largest value it drew.
func plotTimeline(file, title string, timeline []int64, steps []analysis.Step) (int64, error) {
	if len(timeline) == 0 || len(timeline) != len(steps) {
		return 0, fmt.Errorf("plotting the timeline: %d values for %d ops", len(timeline), len(steps))
	}
	var peak int64
	peakAt := 0
	for i, b := range timeline {
		if b > peak {
			peak, peakAt = b, i
		}
	}
	unit, scale := "MiB", float64(1<<20)
	if peak >= 1<<30 {
		unit, scale = "GiB", float64(1<<30)
	}
	p := plot.New()
	p.Title.Text = wrapTitle(title, titleWidth)
	p.X.Label.Text = "op, in the order the step runs them (sequential schedule)"
	p.Y.Label.Text = "live memory (" + unit + ")"
	top := float64(peak) / scale * 1.12
	blocks := timelineBlocks(timeline, steps)
	shade := map[string]int{}
	var names plotter.XYLabels
	for _, b := range blocks {
		phase := phaseOf(b.Block)
		band, err := plotter.NewPolygon(plotter.XYs{{X: float64(b.FirstOp), Y: 0}, {X: float64(b.LastOp + 1), Y: 0},
			{X: float64(b.LastOp + 1), Y: top}, {X: float64(b.FirstOp), Y: top}})
		if err != nil {
			return 0, fmt.Errorf("plotting the timeline: %w", err)
		}
		band.Color, band.LineStyle.Width = bandColors[phase][shade[phase]%2], 0
		shade[phase]++
		p.Add(band)
		if float64(b.LastOp-b.FirstOp+1) > 0.035*float64(len(timeline)) {
			names.XYs = append(names.XYs, plotter.XY{X: float64(b.FirstOp), Y: top * 0.985})
			names.Labels = append(names.Labels, shortBlock(b.Block))
		}
	}
	// The line, one piece per run of ops of one kind (each piece starts where the last ended).
	legend := map[string]bool{}
	for start := 0; start < len(timeline); {
		kind := kindOf(steps[start].Section)
		end := start
		for end+1 < len(timeline) && kindOf(steps[end+1].Section) == kind {
			end++
		}
		from := max(start-1, 0)
		points := make(plotter.XYs, 0, end-from+1)
		for i := from; i <= end; i++ {
			points = append(points, plotter.XY{X: float64(i), Y: float64(timeline[i]) / scale})
		}
		line, err := plotter.NewLine(points)
		if err != nil {
			return 0, fmt.Errorf("plotting the timeline: %w", err)
		}
		line.Color, line.Width = lineColors[kind], vg.Points(1.2)
		p.Add(line)
		if !legend[kind] {
			legend[kind] = true
			p.Legend.Add(map[string]string{"attention": "attention", "loss": "the loss (logits)", "other": "other ops"}[kind], line)
		}
		start = end + 1
	}
	if len(names.XYs) > 0 {
		labels, err := plotter.NewLabels(names)
		if err != nil {
			return 0, fmt.Errorf("plotting the timeline: %w", err)
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].Rotation = -1.5708 // vertical, reading down from the top
			labels.TextStyle[i].Font.Size = vg.Points(7)
		}
		p.Add(labels)
	}
	mark, err := plotter.NewScatter(plotter.XYs{{X: float64(peakAt), Y: float64(peak) / scale}})
	if err != nil {
		return 0, fmt.Errorf("plotting the timeline: %w", err)
	}
	mark.GlyphStyle.Color, mark.GlyphStyle.Radius, mark.GlyphStyle.Shape = color.Black, vg.Points(3), draw.CircleGlyph{}
	p.Add(mark)
	p.Legend.Add(fmt.Sprintf("peak %s (%s)", analysis.FormatBytes(peak), steps[peakAt].Section), mark)
	p.Legend.Top, p.Legend.Left = true, false
	p.X.Min, p.X.Max = 0, float64(len(timeline))
	p.Y.Min, p.Y.Max = 0, top*1.12
	img := vgimg.New(12*vg.Inch, 5*vg.Inch)
	p.Draw(draw.New(img))
	return peak, writePNG(file, img)
}

// shortBlock is a block's name for a band's label: the last two parts of its scope
// ("layers/3 backward" for "model/layers/3 backward").
func shortBlock(block string) string {
	parts := strings.Split(block, "/")
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	return strings.Join(parts, "/")
}
