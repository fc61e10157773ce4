package layers

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/vjp"
)

// CausalSelfAttention is the tutorial's attention block without its residual: one QKV projection
// (a DenseGeneral to [heads, 3·headDim], split into query, key and value), scaled dot-product
// attention with a causal mask (PlainAttention, or ChunkedAttention as SetAttention sets on the
// context), and an output projection back to x's width. With packed documents (docs.Segments)
// each query attends within its document only.
func CausalSelfAttention(ctx *context.Context, x *graph.Node, heads, headDim int, softmaxDType dtypes.DType, docs Documents) *graph.Node {
	if x.Rank() != 3 {
		panic(fmt.Sprintf("layers.CausalSelfAttention: x must be [batch, sequence, width], got %s", x.Shape()))
	}
	width := x.Shape().Dim(-1)
	qkv := DenseGeneral(ctx.In("qkv"), x, 1, heads, 3*headDim) // [b, t, h, 3d]
	// jnp.split's gradient: one concatenate of the three cotangents, not three padded sums.
	parts := vjp.SplitAxis(qkv, -1, 3)
	// The core is a section of the memory timeline (memory --timeline).
	end := analysis.Section(x.Graph(), "attention")
	docs.check("layers.CausalSelfAttention", x)
	values := Note(ctx, "attention", AttentionOf(ctx).SegmentCore(docs.Segments)(parts[0], parts[1], parts[2], softmaxDType)) // [b, q, h, d]
	end()
	return DenseGeneral(ctx.In("output_layer"), values, 2, width)
}

// PlainAttention is causal scaled dot-product attention on projected heads, the core both the
// GPT's and the Llama's attention call: q [batch, seq, heads, headDim], k and v [batch, seq,
// kvHeads, headDim] in the compute dtype, with kvHeads dividing heads (grouped-query attention:
// query head h reads key/value head h / (heads/kvHeads)). It returns [batch, seq, heads, headDim]
// in v's dtype.
//
// As in the tutorial's dot_product_attention, the query (scaled by 1/sqrt(headDim)) and the key are
// cast to softmaxDType before the scores are computed, the mask and softmax run in it, and the
// weights are cast back to the compute dtype for the weighted sum of values: float32 keeps the
// softmax stable under bfloat16 compute. The softmax is mixed.Softmax, whose gradient (like
// jax.nn.softmax's) needs only its output: graph.Softmax differentiated op by op also keeps its
// exponentials, one more float32 [batch, heads, seq, seq] tensor per layer, which put XLA's compiled
// tutorial step above JAX's (60.1 vs 57.3 GiB, bfloat16, no remat). Both products are tagged for
// remat policies ("attn_scores", "attn_values").
//
// Grouped heads are never copied per query head: q is viewed as [batch, seq, kvHeads, group,
// headDim] and contracted against k and v as they are, so neither the products nor their gradients
// (nor what a backward pass keeps) hold a key or value per query head.
func PlainAttention(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node {
	return PlainAttentionSegments(q, k, v, softmaxDType, nil)
}

// PlainAttentionSegments is PlainAttention of packed documents: a query attends only to the keys
// before it in its own segment, segments being integers [batch, seq] (Documents.Segments); nil
// segments are one segment a sequence (PlainAttention). The mask is [batch, seq, seq] instead of
// [seq, seq].
func PlainAttentionSegments(q, k, v *graph.Node, softmaxDType dtypes.DType, segments *graph.Node) *graph.Node {
	checkAttentionHeads("layers.PlainAttention", q, k, v)
	Documents{Segments: segments}.check("layers.PlainAttention", q)
	var rowMask *graph.Node
	if segments != nil {
		rowMask = graph.LogicalAnd(graph.InsertAxes(causalMask(q.Graph(), q.Shape().Dim(1)), 0), sameSegment(segments, segments))
	}
	return attend("layers.PlainAttention", q, k, v, softmaxDType, rowMask)
}

// attend is the math of PlainAttention for q [batch, queries, heads, headDim] and k, v [batch,
// keys, kvHeads, headDim] (checked by the caller): causal when rowMask is nil (as many keys as
// queries), otherwise query i of row b reads key j where rowMask [batch, queries, keys] is true.
// A query whose row of rowMask is all false gets the mean of the values (finite), as a
// softmax over equal scores gives.
func attend(fn string, q, k, v *graph.Node, softmaxDType dtypes.DType, rowMask *graph.Node) *graph.Node {
	if !softmaxDType.IsFloat() {
		panic(fmt.Sprintf("%s: softmax dtype %s is not a floating-point dtype", fn, softmaxDType))
	}
	g := q.Graph()
	batch, queries, heads, headDim := q.Shape().Dim(0), q.Shape().Dim(1), q.Shape().Dim(2), q.Shape().Dim(3)
	kvHeads := k.Shape().Dim(2)
	group := heads / kvHeads
	computeDType := v.DType()

	q = mixed.Cast(graph.MulScalar(q, 1/math.Sqrt(float64(headDim))), softmaxDType)
	k = mixed.Cast(k, softmaxDType)
	scoresEq, valuesEq := "bqhd,bkhd->bhqk", "bhqk,bkhd->bqhd" // [b, h, q, k]: the tutorial's layout
	var maskPrefix []int
	if group > 1 {
		q = graph.Reshape(q, batch, queries, kvHeads, group, headDim)
		// [b, n, q, g, k]: DotGeneral's own output order (batch axes, then q's free axes), no transpose.
		scoresEq, valuesEq = "bqngd,bknd->bnqgk", "bnqgk,bknd->bqngd"
		maskPrefix = []int{group}
	}
	scores := remat.NameBatchedDot(graph.Einsum(scoresEq, q, k), "attn_scores")
	var mask *graph.Node
	if rowMask == nil {
		mask = causalMask(g, queries, maskPrefix...)
	} else {
		// [b, 1, q, k], or [b, 1, q, 1, k] for grouped scores [b, n, q, g, k].
		mask = graph.InsertAxes(rowMask, 1)
		if group > 1 {
			mask = graph.InsertAxes(mask, 3)
		}
		mask = graph.BroadcastToDims(mask, scores.Shape().Dimensions...)
	}
	lowest := graph.Scalar(g, softmaxDType, lowestFinite(softmaxDType))
	scores = graph.Where(graph.BroadcastPrefix(mask, scores.Shape().Dimensions[:scores.Rank()-mask.Rank()]...), scores, lowest)
	weights := mixed.Cast(mixed.Softmax(scores, softmaxDType, -1), computeDType)
	values := remat.NameBatchedDot(graph.Einsum(valuesEq, weights, v), "attn_values")
	if group > 1 {
		values = graph.Reshape(values, batch, queries, heads, headDim)
	}
	return values
}

// causalMask is true where key position k <= query position q: [seq, seq], or [seq, group, seq]
// for grouped scores [b, n, q, g, k].
func causalMask(g *graph.Graph, seq int, group ...int) *graph.Node {
	if len(group) == 0 {
		return graph.GreaterOrEqual(graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 0), graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 1))
	}
	s := shapes.Make(dtypes.Int32, seq, group[0], seq)
	return graph.GreaterOrEqual(graph.Iota(g, s, 0), graph.Iota(g, s, 2))
}

// checkAttentionHeads panics unless q, k and v are projected heads an attention core accepts.
func checkAttentionHeads(fn string, q, k, v *graph.Node) {
	if q.Rank() != 4 || k.Rank() != 4 || !k.Shape().Equal(v.Shape()) {
		panic(fmt.Sprintf("%s: needs q [batch, seq, heads, headDim] and k, v [batch, seq, kvHeads, headDim], got %s, %s, %s",
			fn, q.Shape(), k.Shape(), v.Shape()))
	}
	qd, kd := q.Shape().Dimensions, k.Shape().Dimensions
	if qd[0] != kd[0] || qd[1] != kd[1] || qd[3] != kd[3] || kd[2] < 1 || qd[2]%kd[2] != 0 {
		panic(fmt.Sprintf("%s: q %v and k, v %v must share batch, sequence and head width, and the key/value heads (%d) must divide the query heads (%d)",
			fn, qd, kd, kd[2], qd[2]))
	}
	if !q.DType().IsFloat() || q.DType() != k.DType() || k.DType() != v.DType() {
		panic(fmt.Sprintf("%s: q, k and v must share one floating-point (compute) dtype, got %s, %s, %s", fn, q.DType(), k.DType(), v.DType()))
	}
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
