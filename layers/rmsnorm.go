package layers

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/mixed"
)

// RMSNorm is Llama's root-mean-square normalization over x's last axis, as Hugging Face's
// LlamaRMSNorm computes it: x / sqrt(mean(x²) + epsilon) in float32 (float64 for float64 compute),
// cast back to the compute dtype, times a weight [width] ("weight", ones) in the compute dtype.
// The mean of squares never runs in bfloat16 (it would saturate), and the backward pass keeps no
// float32 copy of x (mixed.RMSNormalize).
//
// Like LayerNorm's gain, the weight is tied to its input by an exact -0.0 (see broadcastFor), so
// that XLA cannot merge its broadcasts across the unrolled micro-batches of a step.
func RMSNorm(ctx *context.Context, x *graph.Node, epsilon float64) *graph.Node {
	p := mixed.PolicyOf(ctx)
	if x.Rank() < 1 || !(epsilon >= 0) || math.IsInf(epsilon, 0) {
		panic(fmt.Sprintf("layers.RMSNorm: needs an input with a feature axis and a finite epsilon >= 0, got %s and %g", x.Shape(), epsilon))
	}
	weight := ctx.WithInitializer(initializers.One).
		VariableWithShape("weight", shapes.Make(p.Param, x.Shape().Dim(-1))).ValueGraph(x.Graph())
	y := mixed.RMSNormalize(p.CastToCompute(x), epsilon, -1)
	return Note(ctx, "RMSNorm", graph.Mul(y, broadcastFor(p.CastToCompute(weight), y, exact.NegativeZeroFrom(y))))
}
