package layers

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// CausalSelfAttention is the tutorial's attention block without its residual: one QKV projection
// (a DenseGeneral to [heads, 3·headDim], split into query, key and value), scaled dot-product
// attention with a causal mask, and an output projection back to x's width.
//
// As in the tutorial's dot_product_attention, the query (scaled by 1/sqrt(headDim)) and the key are
// cast to softmaxDType before the scores are computed, the mask and softmax run in it, and the
// weights are cast back to the compute dtype for the weighted sum of values. float32 keeps the
// softmax stable under bfloat16 compute. The softmax is mixed.Softmax, whose gradient (like
// jax.nn.softmax's) needs only its output: graph.Softmax differentiated op by op also keeps its
// exponentials, one more float32 [batch, heads, seq, seq] tensor per layer, which put XLA's compiled
// tutorial step above JAX's (60.1 vs 57.3 GiB, bfloat16, no remat).
func CausalSelfAttention(ctx *context.Context, x *graph.Node, heads, headDim int, softmaxDType dtypes.DType) *graph.Node {
	p := mixed.PolicyOf(ctx)
	if x.Rank() != 3 {
		panic(fmt.Sprintf("layers.CausalSelfAttention: x must be [batch, sequence, width], got %s", x.Shape()))
	}
	g := x.Graph()
	width, seq := x.Shape().Dim(-1), x.Shape().Dim(1)
	qkv := DenseGeneral(ctx.In("qkv"), x, 1, heads, 3*headDim) // [b, t, h, 3d]
	// jnp.split's gradient: one concatenate of the three cotangents, not three padded sums.
	parts := ograph.SplitAxis(qkv, -1, 3)
	q, k, v := parts[0], parts[1], parts[2]

	q = mixed.Cast(graph.MulScalar(q, 1/math.Sqrt(float64(headDim))), softmaxDType)
	k = mixed.Cast(k, softmaxDType)
	scores := remat.NameBatchedDot(graph.Einsum("bqhd,bkhd->bhqk", q, k), "attn_scores") // [b, h, q, k]
	causal := graph.GreaterOrEqual(graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 0), graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 1))
	lowest := graph.Scalar(g, softmaxDType, lowestFinite(softmaxDType))
	scores = graph.Where(graph.BroadcastPrefix(causal, scores.Shape().Dim(0), heads), scores, lowest)
	weights := p.CastToCompute(mixed.Softmax(scores, softmaxDType, -1))
	Note(ctx, "attention weights", weights)
	values := remat.NameBatchedDot(graph.Einsum("bhqk,bkhd->bqhd", weights, v), "attn_values") // [b, q, h, d]
	return DenseGeneral(ctx.In("output_layer"), values, 2, width)
}

// lowestFinite is the most negative finite value of a float dtype: the masked scores' value, as
// jnp.finfo(dtype).min is in the tutorial.
func lowestFinite(dtype dtypes.DType) float64 {
	switch dtype {
	case dtypes.Float64:
		return -math.MaxFloat64
	case dtypes.BFloat16:
		return -3.3895313892515355e38
	case dtypes.Float16:
		return -65504
	default:
		return -math.MaxFloat32
	}
}
