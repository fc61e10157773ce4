package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// GroupedQuery describes grouped-query self-attention as Llama-class models have it: Heads query
// heads share KVHeads key/value heads (KVHeads divides Heads; KVHeads == Heads is multi-head
// attention, 1 is multi-query), each HeadDim wide, with rotary position embeddings on queries and
// keys and a causal mask.
type GroupedQuery struct {
	Heads, KVHeads, HeadDim int
	Rotary                  Rotary
	// SoftmaxDType is the dtype of the scores, mask and softmax; float32 when unset.
	SoftmaxDType dtypes.DType
	// Core computes attention from the projected, rotated heads (see PlainAttention for the
	// contract); when nil, the core of the Attention set on the context (SetAttention; plain when
	// none is set).
	Core func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node
	// QKVBias gives the query, key and value projections a bias each (Qwen2's attention); the
	// output projection has none either way.
	QKVBias bool
}

// Validate returns an error naming the setting that cannot work.
func (a GroupedQuery) Validate() error {
	if a.Heads < 1 || a.KVHeads < 1 || a.HeadDim < 1 {
		return fmt.Errorf("grouped-query attention: heads = %d, kv heads = %d and head width = %d must each be at least 1", a.Heads, a.KVHeads, a.HeadDim)
	}
	if a.Heads%a.KVHeads != 0 {
		return fmt.Errorf("grouped-query attention: kv heads = %d does not divide heads = %d", a.KVHeads, a.Heads)
	}
	return a.Rotary.Validate(a.HeadDim)
}

// GroupedQueryAttention is Hugging Face's LlamaAttention without its cache (Qwen2Attention with
// a.QKVBias): Linear projections in scopes "q_proj" ([Heads·HeadDim, width]), "k_proj" and
// "v_proj" ([KVHeads·HeadDim, width]), with biases when a.QKVBias, rotary embeddings on queries
// and keys, a.Core (the context's Attention by default) and "o_proj" ([width, Heads·HeadDim],
// no bias) back to x's width. x is [batch,
// sequence, width] in any dtype; the work runs in the compute dtype of the policy on ctx's scope.
// Keys and values are projected once per key/value head and never copied per query head.
//
// docs says where packed documents lie (the zero Documents: one a sequence): the rotary
// embeddings turn by docs.Positions and the core keeps each query within its docs.Segments, as
// transformers computes each document on its own (position_ids restarting, a block-diagonal
// causal mask). A Core of a's own cannot take segments: it panics with packed documents.
func GroupedQueryAttention(ctx *context.Context, x *graph.Node, a GroupedQuery, docs Documents) *graph.Node {
	if err := a.Validate(); err != nil {
		panic("layers.GroupedQueryAttention: " + err.Error())
	}
	if x.Rank() != 3 {
		panic(fmt.Sprintf("layers.GroupedQueryAttention: x must be [batch, sequence, width], got %s", x.Shape()))
	}
	docs.check("layers.GroupedQueryAttention", x)
	if a.Core != nil && docs.Packed() {
		panic("layers.GroupedQueryAttention: GroupedQuery.Core is a core of its own, which cannot keep packed documents apart; " +
			"leave Core nil (the context's Attention) for packed documents")
	}
	q, k, v := a.project(ctx, x, docs.Positions)
	core := a.Core
	if core == nil {
		core = AttentionOf(ctx).SegmentCore(docs.Segments)
	}
	end := analysis.Section(x.Graph(), "attention")                   // for the memory timeline
	values := Note(ctx, "attention", core(q, k, v, a.softmaxDType())) // [b, s, heads, headDim]
	end()
	return a.output(ctx, values, x.Shape().Dim(2))
}

// GroupedQueryAttentionCached is GroupedQueryAttention for generation with a KV cache: x [batch,
// steps, width] are a step's tokens at positions [batch, steps] (integers; each row's distinct,
// every earlier position of the row in the cache already), their keys and values are written into
// cache at those positions (KVCache.Write) and each query reads the cache up to its own position
// (CachedAttention). The result is GroupedQueryAttention's over the whole sequence so far, for
// the step's tokens, each token's key and value projected once; the second result is the cache
// with the step's entries. a.Core and the context's Attention are not used.
func GroupedQueryAttentionCached(ctx *context.Context, x *graph.Node, a GroupedQuery, positions *graph.Node, cache KVCache) (*graph.Node, KVCache) {
	if err := a.Validate(); err != nil {
		panic("layers.GroupedQueryAttentionCached: " + err.Error())
	}
	if x.Rank() != 3 {
		panic(fmt.Sprintf("layers.GroupedQueryAttentionCached: x must be [batch, steps, width], got %s", x.Shape()))
	}
	if positions == nil {
		panic("layers.GroupedQueryAttentionCached: needs the step's positions [batch, steps]")
	}
	Documents{Positions: positions}.check("layers.GroupedQueryAttentionCached", x)
	q, k, v := a.project(ctx, x, positions)
	cache = cache.Write(k, v, positions)
	values := Note(ctx, "attention", CachedAttention(q, cache.Keys, cache.Values, positions, a.softmaxDType()))
	return a.output(ctx, values, x.Shape().Dim(2)), cache
}

// softmaxDType is a.SoftmaxDType, float32 when unset.
func (a GroupedQuery) softmaxDType() dtypes.DType {
	if a.SoftmaxDType == dtypes.InvalidDType {
		return dtypes.Float32
	}
	return a.SoftmaxDType
}

// project returns the query, key and value heads of x [batch, seq, width]: q [batch, seq, Heads,
// HeadDim] and k, v [batch, seq, KVHeads, HeadDim], queries and keys rotated at positions (nil:
// 0, 1, ...).
func (a GroupedQuery) project(ctx *context.Context, x, positions *graph.Node) (q, k, v *graph.Node) {
	batch, seq := x.Shape().Dim(0), x.Shape().Dim(1)
	qkv := Linear{Bias: a.QKVBias}
	heads := func(scope string, n int) *graph.Node {
		return graph.Reshape(qkv.Apply(ctx.In(scope), x, n*a.HeadDim), batch, seq, n, a.HeadDim)
	}
	q = a.Rotary.ApplyAt(heads("q_proj", a.Heads), positions)
	k = a.Rotary.ApplyAt(heads("k_proj", a.KVHeads), positions)
	return q, k, heads("v_proj", a.KVHeads)
}

// output is "o_proj": the attention values [batch, seq, Heads, HeadDim] back to width.
func (a GroupedQuery) output(ctx *context.Context, values *graph.Node, width int) *graph.Node {
	batch, seq := values.Shape().Dim(0), values.Shape().Dim(1)
	return Linear{}.Apply(ctx.In("o_proj"), graph.Reshape(values, batch, seq, a.Heads*a.HeadDim), width)
}
