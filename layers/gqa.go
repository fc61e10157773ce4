package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
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
	batch, seq, width := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2)
	qkv := Linear{Bias: a.QKVBias}
	heads := func(scope string, n int) *graph.Node {
		return graph.Reshape(qkv.Apply(ctx.In(scope), x, n*a.HeadDim), batch, seq, n, a.HeadDim)
	}
	docs.check("layers.GroupedQueryAttention", x)
	if a.Core != nil && docs.Packed() {
		panic("layers.GroupedQueryAttention: GroupedQuery.Core is a core of its own, which cannot keep packed documents apart; " +
			"leave Core nil (the context's Attention) for packed documents")
	}
	q := a.Rotary.ApplyAt(heads("q_proj", a.Heads), docs.Positions)
	k := a.Rotary.ApplyAt(heads("k_proj", a.KVHeads), docs.Positions)
	v := heads("v_proj", a.KVHeads)
	softmaxDType, core := a.SoftmaxDType, a.Core
	if softmaxDType == dtypes.InvalidDType {
		softmaxDType = dtypes.Float32
	}
	if core == nil {
		core = AttentionOf(ctx).SegmentCore(docs.Segments)
	}
	end := ograph.Section(x.Graph(), "attention")                 // for the memory timeline
	values := Note(ctx, "attention", core(q, k, v, softmaxDType)) // [b, s, heads, headDim]
	end()
	return Linear{}.Apply(ctx.In("o_proj"), graph.Reshape(values, batch, seq, a.Heads*a.HeadDim), width)
}
