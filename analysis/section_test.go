package analysis_test

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/analysis"
)

// TestSectionsLabelTheTimeline: nodes created inside nested sections carry the outermost and the
// innermost label; nodes in none are named by their role (forward before the loss, backward
// after); a section changes nothing in the graph; the timeline's largest value is the peak.
func TestSectionsLabelTheTimeline(t *testing.T) {
	build := func(marked bool) (*graph.Graph, *analysis.Memory) {
		g := graph.NewGraph(embedded(), "sections")
		section := func(label string) func() {
			if !marked {
				return func() {}
			}
			return analysis.Section(g, label)
		}
		x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 64, 64))
		h := graph.Tanh(x) // forward
		end := section("block_0")
		h = graph.Exp(h)
		inner := section("attention")
		scores := graph.DotGeneral(h, []int{1}, nil, h, []int{1}, nil)
		inner()
		h = graph.Add(h, scores)
		end()
		loss := graph.ReduceAllSum(h)
		grad := graph.Gradient(loss, x)[0] // backward: in no section
		p := analysis.NewProgram(g, loss, grad)
		p.Loss = loss
		return g, analysis.Analyze(p)
	}
	_, plain := build(false)
	g, m := build(true)
	defer g.Finalize()
	if len(plain.Timeline) != len(m.Timeline) || plain.PeakBytes != m.PeakBytes {
		t.Errorf("sections changed the program: %d ops, peak %d; unmarked %d ops, peak %d", len(m.Timeline), m.PeakBytes, len(plain.Timeline), plain.PeakBytes)
	}
	if len(m.Steps) != len(m.Timeline) || slices.Max(m.Timeline) != m.PeakBytes {
		t.Fatalf("%d steps for %d timeline values; the timeline's largest value %d, the peak %d", len(m.Steps), len(m.Timeline), slices.Max(m.Timeline), m.PeakBytes)
	}
	byType := map[graph.NodeType]analysis.Step{}
	for _, s := range m.Steps {
		if _, seen := byType[g.Nodes()[s.Node].Type()]; !seen {
			byType[g.Nodes()[s.Node].Type()] = s
		}
	}
	for typ, want := range map[graph.NodeType]analysis.Step{
		graph.NodeTypeTanh:       {Block: "forward", Section: "forward"},
		graph.NodeTypeExp:        {Block: "block_0", Section: "block_0"},
		graph.NodeTypeDotGeneral: {Block: "block_0", Section: "attention"},
		graph.NodeTypeAdd:        {Block: "block_0", Section: "block_0"},
		graph.NodeTypeReduceSum:  {Block: "forward", Section: "forward"},
	} {
		got := byType[typ]
		if got.Block != want.Block || got.Section != want.Section {
			t.Errorf("first %s: block %q, section %q; want %q, %q", typ, got.Block, got.Section, want.Block, want.Section)
		}
	}
	last := m.Steps[len(m.Steps)-1] // the gradient's last op
	if last.Block != "backward" {
		t.Errorf("the gradient's last op is in %q, want backward", last.Block)
	}
}
