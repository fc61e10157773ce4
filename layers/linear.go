package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// InitializerRange is the standard deviation of the normal distribution Linear weights and
// Hugging Face-style embeddings start from: transformers' initializer_range default for Llama.
const InitializerRange = 0.02

// Linear is PyTorch's nn.Linear without a bias, as Hugging Face's Llama uses it: y = x·Wᵀ over
// x's last axis, with the weight W [features, in] in scope ctx under the name "weight" (PyTorch's
// layout, so that published weights load without a transpose), normal with std InitializerRange.
// The product runs in the policy's compute dtype and is tagged as a matmul for remat policies.
func Linear(ctx *context.Context, x *graph.Node, features int) *graph.Node {
	if x.Rank() < 1 || features < 1 {
		panic(fmt.Sprintf("layers.Linear: cannot project %s to %d features", x.Shape(), features))
	}
	return Note(ctx, "Linear", LinearWith(ctx, x, LinearWeight(ctx, x.Graph(), x.Shape().Dim(-1), features)))
}

// LinearWeight returns Linear's weight [features, in] in scope ctx, creating it as Linear does
// (in the policy's param dtype, normal with std InitializerRange): for a loss that applies the
// layer itself, chunk by chunk (ChunkedCrossEntropySum).
func LinearWeight(ctx *context.Context, g *graph.Graph, in, features int) *graph.Node {
	return NormalVariable(ctx, "weight", shapes.Make(mixed.PolicyOf(ctx).Param, features, in), InitializerRange).ValueGraph(g)
}

// LinearWith is Linear with a weight [features, in] the caller owns, e.g. the embedding table of a
// model with tied input and output embeddings: x·weightᵀ, weight cast to the compute dtype of the
// policy on ctx's scope where it is used (so its gradient comes back in its own dtype).
func LinearWith(ctx *context.Context, x, weight *graph.Node) *graph.Node {
	p := mixed.PolicyOf(ctx)
	if weight.Rank() != 2 || x.Rank() < 1 || weight.Shape().Dim(1) != x.Shape().Dim(-1) {
		panic(fmt.Sprintf("layers.LinearWith: weight %s is not [features, in] for input %s (in = its last axis)", weight.Shape(), x.Shape()))
	}
	y := graph.DotGeneral(p.CastToCompute(x), []int{x.Rank() - 1}, nil, p.CastToCompute(weight), []int{1}, nil)
	return remat.NameDot(y, "")
}

// Lookup returns the rows of table [vocab, features] that integer tokens select, shaped
// [tokens' dims..., features], in the compute dtype of the policy on ctx's scope. The lookup runs
// in the table's own (param) dtype, so that its gradient is accumulated there.
func Lookup(ctx *context.Context, table, tokens *graph.Node) *graph.Node {
	p := mixed.PolicyOf(ctx)
	if table.Rank() != 2 || !tokens.DType().IsInt() {
		panic(fmt.Sprintf("layers.Lookup: needs a table [vocab, features] and integer tokens, got %s and %s", table.Shape(), tokens.Shape()))
	}
	return p.CastToCompute(graph.Gather(table, graph.InsertAxes(tokens, -1)))
}
