package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// InitializerRange is the standard deviation of the normal distribution Linear weights and
// Hugging Face-style embeddings start from: transformers' initializer_range default for Llama.
const InitializerRange = 0.02

// Linear is how a model's linear projection is made: PyTorch's nn.Linear as Hugging Face's models
// use it, y = x·Wᵀ (+ b) over x's last axis, with the weight W [features, in] under the name
// "weight" in the projection's scope (PyTorch's layout, so that published weights load without a
// transpose; normal with std InitializerRange) and, with Bias, the bias [features] under "bias"
// (zeros, as transformers initializes it). Variables are created in the param dtype of the policy
// on the scope (mixed.PolicyOf), the product runs in its compute dtype and is tagged as a matmul
// for remat policies.
//
// It is the one place onegpu's layers create a projection (the attention's q/k/v/o, the MLP's
// gate/up/down, a Llama's lm_head), so that what a projection can be is decided here: a bias, and
// under a LoRA set on the context (SetLoRA) a frozen weight, adapters on the targeted projections
// and their weights quantized (lora.go). The zero value is nn.Linear(bias=False), the Llama's.
type Linear struct {
	// Bias adds a learned bias [features] after the product: nn.Linear(bias=True), as Qwen2's
	// q_proj, k_proj and v_proj have.
	Bias bool
}

// Apply projects x [..., in] to [..., features] with the projection in scope ctx, creating its
// variables when they do not exist yet. The result is in the policy's compute dtype.
func (l Linear) Apply(ctx *context.Context, x *graph.Node, features int) *graph.Node {
	if x.Rank() < 1 || features < 1 {
		panic(fmt.Sprintf("layers.Linear: cannot project %s to %d features", x.Shape(), features))
	}
	if LoRAOf(ctx).Active() {
		return Note(ctx, "Linear", l.frozen(ctx, x, features))
	}
	p := l.Projection(ctx, x.Graph(), x.Shape().Dim(-1), features)
	y := LinearWith(ctx, x, p.Weight)
	if p.Bias != nil {
		y = graph.Add(y, broadcastFor(mixed.PolicyOf(ctx).CastToCompute(p.Bias), y, exact.NegativeZeroFrom(y)))
	}
	return Note(ctx, "Linear", y)
}

// Projection returns the variables of the projection from in to features in scope ctx, created
// as Apply creates them, as a Projection (Weight [features, in], ClassesFirst; Bias or nil): for a
// loss that applies the output layer itself, chunk by chunk (ChunkedCrossEntropySum).
func (l Linear) Projection(ctx *context.Context, g *graph.Graph, in, features int) Projection {
	param := mixed.PolicyOf(ctx).Param
	p := Projection{ClassesFirst: true, Frozen: LoRAOf(ctx).Active(),
		Weight: NormalVariable(ctx, "weight", shapes.Make(param, features, in), InitializerRange).ValueGraph(g)}
	if l.Bias {
		p.Bias = ctx.WithInitializer(initializers.Zero).VariableWithShape("bias", shapes.Make(param, features)).ValueGraph(g)
	}
	return p
}

// LinearWith is x·weightᵀ for a weight [features, in] the caller owns, e.g. the embedding table of
// a model with tied input and output embeddings, cast to the compute dtype of the policy on ctx's
// scope where it is used (so its gradient comes back in its own dtype). Linear.Apply computes its
// product with it.
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
