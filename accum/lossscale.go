package accum

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// LossScale is what accumulation needs of a loss scale: the scale, its inverse, and the update of
// its state once per applied step. The loss scales of onegpu's mixed package (NoOpLossScale,
// StaticLossScale, *DynamicLossScale, and any mixed.LossScale) satisfy it; this package does not
// import mixed so that the two can be used separately.
//
// Within one graph the methods must be called in this order: Scale and Unscale read the current
// scale, Adjust sets the next one. Gradients and MultiSteps call Adjust at most once per applied
// update, so the scale stays the same for all the micro-batches of a window.
type LossScale interface {
	// Scale returns loss times the current scale, in float32 (float64 for a float64 loss).
	Scale(ctx *context.Context, loss *graph.Node) *graph.Node
	// Unscale returns each gradient divided by the current scale, in float32 (float64 stays
	// float64).
	Unscale(ctx *context.Context, grads []*graph.Node) []*graph.Node
	// Adjust updates the scale for the next step given finite, a boolean scalar node that says
	// whether this step's unscaled gradients are all finite.
	Adjust(ctx *context.Context, finite *graph.Node)
}

// allFinite returns a boolean scalar that is true when every value of every floating-point node is
// finite. It needs at least one node.
func allFinite(nodes []*graph.Node) *graph.Node {
	var all *graph.Node
	for _, x := range nodes {
		if x == nil || !x.DType().IsFloat() {
			continue
		}
		finite := graph.IsFinite(x)
		if !finite.IsScalar() {
			finite = graph.LogicalAll(finite)
		}
		if all == nil {
			all = finite
		} else {
			all = graph.LogicalAnd(all, finite)
		}
	}
	if all == nil {
		panicf("accum: no floating-point gradients to check")
	}
	return all
}
