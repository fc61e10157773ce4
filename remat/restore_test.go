package remat_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/remat"
)

// TestBlocksOfRestoredContext: the blocks SetBlocks names, with their policy, survive a GoMLX
// checkpoint (JSON): a model built on the restored context rematerializes the same blocks with the
// same policy, where the restored parameter (an empty map) panicked in remat.Block.
func TestBlocksOfRestoredContext(t *testing.T) {
	ctx := context.New()
	remat.SetBlocks(ctx, remat.With(remat.DotsSaveable), "block")
	ctx.VariableWithValue("w", []float32{1, 2})
	restored := testkit.RoundTrip(t, ctx)
	raw, _ := restored.GetParam("remat_blocks")
	t.Logf("restored blocks parameter: %T %v", raw, raw)
	p, err := analysis.ContextProgram(embedded(), restored, "restored", []shapes.Shape{shapes.Make(dtypes.Float32, 4, 8)},
		func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			x := in[0]
			for _, kind := range []string{"block", "other"} {
				c := ctx.In(kind)
				w := c.VariableWithShape("w", shapes.Make(dtypes.Float32, 8, 8)).ValueGraph(x.Graph())
				x = remat.Block(c, kind, func(_ *context.Context, in []*graph.Node) []*graph.Node {
					return []*graph.Node{graph.Tanh(remat.NameDot(graph.Dot(in[0], w), "h"))}
				}, x)[0]
			}
			loss := graph.ReduceAllSum(x)
			var params []*graph.Node
			for v := range ctx.IterVariables() {
				if v.Trainable && v.InUseByGraph(x.Graph()) {
					params = append(params, v.ValueGraph(x.Graph()))
				}
			}
			return append([]*graph.Node{loss}, graph.Gradient(loss, params...)...)
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	report, err := remat.Residuals(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Blocks) != 1 || report.Blocks[0].Block != "/block" || report.Blocks[0].Policy != "dots_saveable" {
		t.Errorf("rematerialized blocks %+v; want only /block, with dots_saveable", report.Blocks)
	}
}
