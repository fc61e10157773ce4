package layers

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// The layers below follow Flax's defaults (the tutorial's framework): kernels are LeCun-normal
// (std 1/sqrt(fan-in), untruncated), biases zero, LayerNorm ε = 1e-6. Random initial values come
// from NormalVariable: the same on every backend for the same seed. Parameters are created in the param dtype
// of the policy set on ctx's scope (mixed.SetPolicy; float32 by default) and cast to its compute
// dtype where used, so their gradients come back in the param dtype. Parameter names follow
// Flax's, which makes weights exchangeable with the JAX reference.

const layerNormEpsilon = 1e-6

// Dense is a fully connected layer over x's last axis: x·kernel + bias, with kernel
// [in, features] and bias [features] in scope ctx. The product runs in the policy's compute dtype
// and is tagged as a matmul for remat policies.
func Dense(ctx *context.Context, x *graph.Node, features int) *graph.Node {
	return DenseGeneral(ctx, x, 1, features)
}

// DenseGeneral contracts the last inAxes axes of x with a kernel [those dims..., features...]
// and adds a bias [features...]: Flax's DenseGeneral with axis = the last inAxes axes.
func DenseGeneral(ctx *context.Context, x *graph.Node, inAxes int, features ...int) *graph.Node {
	p := mixed.PolicyOf(ctx)
	if inAxes < 1 || inAxes > x.Rank() {
		panic(fmt.Sprintf("layers.DenseGeneral: cannot contract the last %d axes of %s", inAxes, x.Shape()))
	}
	kernel, bias := denseVariables(ctx, x.Graph(), x.Shape().Dimensions[x.Rank()-inAxes:], features)
	contract := make([]int, inAxes)
	kernelAxes := make([]int, inAxes)
	for i := range inAxes {
		contract[i] = x.Rank() - inAxes + i
		kernelAxes[i] = i
	}
	y := graph.DotGeneral(p.CastToCompute(x), contract, nil, p.CastToCompute(kernel), kernelAxes, nil)
	y = remat.NameDot(y, "")
	return Note(ctx, "Dense", graph.Add(y, broadcastFor(p.CastToCompute(bias), y, exact.NegativeZeroFrom(y))))
}

// denseVariables returns DenseGeneral's kernel [inDims..., features...] (LeCun normal, in the
// policy's param dtype) and bias [features...] (zeros) in scope ctx, creating them if needed.
func denseVariables(ctx *context.Context, g *graph.Graph, inDims, features []int) (kernel, bias *graph.Node) {
	p := mixed.PolicyOf(ctx)
	fanIn := 1
	for _, d := range inDims {
		fanIn *= d
	}
	kernelShape := shapes.Make(p.Param, append(append([]int{}, inDims...), features...)...)
	kernel = NormalVariable(ctx, "kernel", kernelShape, 1/math.Sqrt(float64(fanIn))).ValueGraph(g) // LeCun normal
	bias = ctx.WithInitializer(initializers.Zero).VariableWithShape("bias", shapes.Make(p.Param, features...)).ValueGraph(g)
	return kernel, bias
}

// DenseProjection is Dense(ctx, x, features) for x of width in as a Projection (kernel [in,
// features] and bias, created as Dense creates them): for a loss that applies the output layer
// itself, chunk by chunk (ChunkedCrossEntropySum).
func DenseProjection(ctx *context.Context, g *graph.Graph, in, features int) Projection {
	kernel, bias := denseVariables(ctx, g, []int{in}, []int{features})
	return Projection{Weight: kernel, Bias: bias}
}

// LayerNorm normalizes x over its last axis with statistics in float32, then applies a gain
// ("scale", ones) and an offset ("bias", zeros) in the compute dtype.
func LayerNorm(ctx *context.Context, x *graph.Node) *graph.Node {
	p := mixed.PolicyOf(ctx)
	g := x.Graph()
	width := x.Shape().Dim(-1)
	scale := ctx.WithInitializer(initializers.One).VariableWithShape("scale", shapes.Make(p.Param, width)).ValueGraph(g)
	bias := ctx.WithInitializer(initializers.Zero).VariableWithShape("bias", shapes.Make(p.Param, width)).ValueGraph(g)
	y := mixed.Normalize(p.CastToCompute(x), layerNormEpsilon, -1)
	tie := exact.NegativeZeroFrom(y)
	y = graph.Mul(y, broadcastFor(p.CastToCompute(scale), y, tie))
	return Note(ctx, "LayerNorm", graph.Add(y, broadcastFor(p.CastToCompute(bias), y, tie)))
}

// Embed looks up integer tokens in a table [vocab, features] ("embedding", normal with std
// 1/sqrt(features)) and returns the rows in the compute dtype. The lookup runs in the param dtype
// so that the table's gradient is accumulated there.
func Embed(ctx *context.Context, tokens *graph.Node, vocab, features int) *graph.Node {
	p := mixed.PolicyOf(ctx)
	g := tokens.Graph()
	table := NormalVariable(ctx, "embedding", shapes.Make(p.Param, vocab, features), 1/math.Sqrt(float64(features))).ValueGraph(g)
	return Note(ctx, "Embed", Lookup(ctx, table, tokens))
}

// Dropout zeroes each value of x with probability rate while training (ctx.IsTraining) and
// scales the rest by 1/(1-rate); it is the identity otherwise or when rate is 0. The mask comes
// from the context's random state, so a rematerialized block draws the same mask. A model that
// builds its step from blocks ties the state to each block's input (TieRandomStateTo) so that XLA
// draws a block's bits when the block runs.
func Dropout(ctx *context.Context, x *graph.Node, rate float64) *graph.Node {
	if rate <= 0 || !ctx.IsTraining(x.Graph()) {
		return x
	}
	if rate >= 1 {
		panic(fmt.Sprintf("layers.Dropout: rate %g must be below 1", rate))
	}
	keep := graph.GreaterOrEqual(ctx.RandomUniform(x.Graph(), shapes.Make(dtypes.Float32, x.Shape().Dimensions...)),
		graph.Scalar(x.Graph(), dtypes.Float32, rate))
	scaled := graph.MulScalar(x, 1/(1-rate))
	return graph.Where(keep, scaled, graph.ZerosLike(scaled))
}

// TieRandomStateTo adds an exact 0 computed from x to the context's random state (when it has one
// in this graph), so that the random numbers drawn next (dropout masks) depend on x. Without it
// the state's chain depends on nothing else, and XLA's scheduler draws the dropout bits of every
// layer and micro-batch early and keeps them until use: 1.7 GiB of u32 buffers in the tutorial's
// step on XLA's CPU backend. The state's value is unchanged, so the masks are too. Call it with a
// block's input before the block (models.GPT does, for each branch). Tied inside Dropout to the
// branch's own values instead, the state made remat recompute the MLP branch a second time in the
// backward pass (9% more matmul FLOPs for the tutorial's step with remat mlp).
func TieRandomStateTo(ctx *context.Context, x *graph.Node) {
	v := ctx.GetVariableByScopeAndName(context.RootScope, context.RNGStateVariableName)
	if v == nil || !v.HasValue() {
		return // RandomUniform creates the state; the next dropout is tied
	}
	state := v.ValueGraph(x.Graph())
	zero := graph.ConvertDType(exact.NegativeZeroFrom(x), state.DType()) // -0.0 converts to exactly 0
	v.SetValueGraph(graph.Add(state, zero))
}

// GELU is the tanh approximation Flax's nn.gelu uses by default:
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func GELU(x *graph.Node) *graph.Node {
	cube := graph.Mul(graph.Mul(x, x), x)
	inner := graph.MulScalar(graph.Add(x, graph.MulScalar(cube, 0.044715)), math.Sqrt(2/math.Pi))
	return graph.Mul(graph.MulScalar(x, 0.5), graph.OnePlus(graph.Tanh(inner)))
}

// SiLU is x·sigmoid(x).
func SiLU(x *graph.Node) *graph.Node { return graph.Mul(x, graph.Logistic(x)) }

// broadcastFor returns v (a bias or a gain) ready to broadcast against x: with x's rank, plus
// tie, an exact -0.0 computed from x (exact.NegativeZeroFrom), which changes no value. The tie
// keeps XLA from merging the identical broadcasts of v in every micro-batch of an unrolled step
// (common-subexpression elimination) into one activation-sized buffer that lives from the first
// micro-batch to the last: on XLA's CPU backend, which materializes a bias broadcast for its
// matmul kernels, the tutorial's step (bf16, remat mlp,attn, 4 micro-batches, dropout 0) compiled
// to 8.1 GiB with them and 4.0 GiB without.
func broadcastFor(v, x, tie *graph.Node) *graph.Node {
	return expandLeft(graph.Add(v, graph.ConvertDType(tie, v.DType())), x.Rank())
}

// expandLeft adds leading axes of size 1 to x until it has the given rank, so that a bias or a
// gain broadcasts over the batch axes.
func expandLeft(x *graph.Node, rank int) *graph.Node {
	for x.Rank() < rank {
		x = graph.InsertAxes(x, 0)
	}
	return x
}
