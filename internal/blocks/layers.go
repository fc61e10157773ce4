package blocks

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"

	"github.com/onegpu/onegpu/remat"
)

// layerNormEpsilon is added to the variance, as Flax's LayerNorm does by default.
const layerNormEpsilon = 1e-6

// Dense returns x·W (+ b) over x's last axis, with a float32 kernel W (and bias b) in ctx, cast to
// x's dtype. The product is tagged with remat.NameDot(name).
func Dense(ctx *context.Context, x *graph.Node, outputs int, bias bool, name string) *graph.Node {
	g := x.Graph()
	inputs := x.Shape().Dim(-1)
	kernel := ctx.WithInitializer(initializers.RandomNormalFn(ctx, 1/math.Sqrt(float64(inputs)))).
		VariableWithShape("kernel", shapes.Make(dtypes.Float32, inputs, outputs)).ValueGraph(g)
	y := graph.DotGeneral(x, []int{x.Rank() - 1}, nil, graph.ConvertDType(kernel, x.DType()), []int{0}, nil)
	y = remat.NameDot(y, name)
	if bias {
		b := ctx.WithInitializer(initializers.RandomNormalFn(ctx, 0.02)).
			VariableWithShape("bias", shapes.Make(dtypes.Float32, outputs)).ValueGraph(g)
		y = graph.Add(y, graph.ExpandLeftToRank(graph.ConvertDType(b, x.DType()), y.Rank()))
	}
	return y
}

// LayerNorm normalizes x over its last axis with statistics in float32, then scales and shifts it
// by float32 variables; the result has x's dtype.
func LayerNorm(ctx *context.Context, x *graph.Node) *graph.Node {
	g := x.Graph()
	width := x.Shape().Dim(-1)
	x32 := graph.ConvertDType(x, dtypes.Float32)
	mean := graph.ReduceAndKeep(x32, graph.ReduceMean, -1)
	centered := graph.Sub(x32, mean)
	variance := graph.ReduceAndKeep(graph.Square(centered), graph.ReduceMean, -1)
	normalized := graph.Mul(centered, graph.Rsqrt(graph.AddScalar(variance, layerNormEpsilon)))
	normal := initializers.RandomNormalFn(ctx, 0.02)
	scale := ctx.WithInitializer(func(g *graph.Graph, s shapes.Shape) *graph.Node { return graph.OnePlus(normal(g, s)) }).
		VariableWithShape("scale", shapes.Make(dtypes.Float32, width)).ValueGraph(g)
	offset := ctx.WithInitializer(normal).VariableWithShape("offset", shapes.Make(dtypes.Float32, width)).ValueGraph(g)
	y := graph.Add(graph.Mul(normalized, graph.ExpandLeftToRank(scale, x.Rank())), graph.ExpandLeftToRank(offset, x.Rank()))
	return graph.ConvertDType(y, x.DType())
}

// MLP is the block's MLP sublayer with its residual connection: x + Dense(GELU(Dense(LayerNorm(x),
// 4·width)), width), with dropout on the sublayer's output when dropout > 0 and ctx is training.
func MLP(ctx *context.Context, x *graph.Node, dropout float64) *graph.Node {
	width := x.Shape().Dim(-1)
	h := LayerNorm(ctx.In("norm"), x)
	h = activations.Gelu(Dense(ctx.In("fc1"), h, 4*width, true, "mlp_in"))
	h = Dense(ctx.In("fc2"), h, width, true, "mlp_out")
	return graph.Add(x, layers.DropoutStatic(ctx, h, dropout))
}

// Attention is the block's causal multi-head self-attention sublayer with its residual connection:
// x + Dense(softmax(q·kᵀ/√d + causal mask)·v), q, k and v being projections of LayerNorm(x). x is
// [batch, sequence, width]; width must be a multiple of heads. The softmax runs in float32.
func Attention(ctx *context.Context, x *graph.Node, heads int, dropout float64) *graph.Node {
	g := x.Graph()
	batch, seq, width := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2)
	head := width / heads
	h := LayerNorm(ctx.In("norm"), x)
	split := func(name string) *graph.Node {
		return graph.Reshape(Dense(ctx.In(name), h, width, false, "attn_"+name), batch, seq, heads, head)
	}
	q, k, v := split("q"), split("k"), split("v")
	scores := remat.NameBatchedDot(graph.Einsum("bqhd,bkhd->bhqk", q, k), "attn_scores")
	scores = graph.MulScalar(scores, 1/math.Sqrt(float64(head)))
	causal := graph.GreaterOrEqual(graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 0), graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 1))
	scores = graph.Where(graph.BroadcastPrefix(causal, batch, heads), scores, graph.Scalar(g, scores.DType(), -1e9))
	probs := graph.ConvertDType(graph.Softmax(graph.ConvertDType(scores, dtypes.Float32), -1), x.DType())
	values := remat.NameBatchedDot(graph.Einsum("bhqk,bkhd->bqhd", probs, v), "attn_values")
	out := Dense(ctx.In("out"), graph.Reshape(values, batch, seq, width), width, true, "attn_out")
	return graph.Add(x, layers.DropoutStatic(ctx, out, dropout))
}
