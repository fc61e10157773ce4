package quant

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
)

// TestDequantizeTemporaries: dequantizing a QLoRA weight to bfloat16 on the embedded backend
// holds at most the float32 levels and the bfloat16 result beside the codes (6 bytes a weight, and
// the scales): the codes index the levels as bytes, with no int32 copy of them (which made it 8:
// the int32 indices and the float32 levels at once).
func TestDequantizeTemporaries(t *testing.T) {
	const rows, cols = 512, 1024
	l, err := NewLayout(QLoRA(), rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	g := graph.NewGraph(testkit.Embedded(), "dequantize")
	defer g.Finalize()
	var parts []*graph.Node
	for i, p := range l.Parts() {
		parts = append(parts, graph.Parameter(g, fmt.Sprint("part_", i), p.Shape))
	}
	m := analysis.Analyze(analysis.NewProgram(g, NewNodes(l, parts...).Dequantize(dtypes.BFloat16)))
	perWeight := float64(m.PeakTempBytes) / (rows * cols)
	t.Logf("temporaries %.2f bytes a weight, peak at %s", perWeight, m.PeakAt)
	if perWeight > 6.25 {
		t.Errorf("dequantizing holds %.2f bytes a weight at its peak, want at most 6.25 (float32 levels and the bfloat16 result)", perWeight)
	}
}
