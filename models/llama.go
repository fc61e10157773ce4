package models

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// Llama is a Llama-class decoder as Hugging Face's LlamaForCausalLM computes it: token embeddings,
// Layers pre-norm blocks (RMSNorm, grouped-query attention with rotary embeddings, added to the
// residual stream; RMSNorm, SwiGLU MLP, added), a final RMSNorm and an output layer (the embedding
// table when the embeddings are tied), with logits returned in the policy's output dtype.
//
// Its variables are named as Hugging Face names its tensors, "." becoming a scope: HF's
// "model.layers.0.self_attn.q_proj.weight" is the variable "weight" in scope
// "/model/layers/0/self_attn/q_proj", with the same [out, in] layout.
//
// Its blocks are remat.Block kinds: "attn" (RMSNorm and attention), "mlp" (RMSNorm and SwiGLU) and
// "block" (a whole layer), rematerialized when remat.SetBlocks names them on the context.
//
// Like every model the trainer trains (train.Model, train.LanguageModel; see llama_train.go), it
// holds its shape only: its layers follow the precision policy (mixed.SetPolicy), the attention
// core (layers.SetAttention) and the loss (layers.SetCrossEntropy) set on the context, which the
// trainer sets from the run description.
type Llama struct {
	Config LlamaConfig
	// Packed makes its batches documents packed into sequences (data.Packed): five inputs, not
	// two, attention within each document, rotary positions restarting at each, weighted targets
	// (see documents.go).
	Packed bool
	// SoftmaxDType is the attention softmax's dtype; float32 when unset.
	SoftmaxDType dtypes.DType
}

// NewLlama returns the Llama of config with a float32 softmax, or an error naming what cannot
// work.
func NewLlama(config LlamaConfig) (Llama, error) {
	if err := config.Validate(); err != nil {
		return Llama{}, err
	}
	return Llama{Config: config, SoftmaxDType: dtypes.Float32}, nil
}

// Logits maps tokens [batch, length] (integers, length <= MaxPositions) to logits [batch, length,
// Vocab] in the output dtype of the policy on ctx's scope or above (mixed.PolicyOf).
func (m Llama) Logits(ctx *context.Context, tokens *graph.Node) *graph.Node {
	return m.Head(ctx, m.Hidden(ctx, tokens))
}

// Hidden returns the final hidden states [batch, length, Hidden] for tokens (after the final
// RMSNorm, in the compute dtype): Logits without the output layer, for a loss that applies Head
// itself (one chunk of tokens at a time, for instance). It runs the embedding and the layers as
// the stages of a streamed run do (llama_stages.go).
func (m Llama) Hidden(ctx *context.Context, tokens *graph.Node) *graph.Node {
	x := m.embed(ctx, tokens)
	for i := range m.Config.Layers {
		x = m.layer(inPath(ctx, m.BlockScope(i)), x, layers.Documents{})
	}
	return m.finalNorm(ctx, x)
}

// Head maps hidden states [..., Hidden] (Hidden's output) to logits [..., Vocab] in the policy's
// output dtype: "lm_head", or the embedding table when the embeddings are tied.
func (m Llama) Head(ctx *context.Context, hidden *graph.Node) *graph.Node {
	var logits *graph.Node
	if m.Config.TiedEmbeddings {
		logits = layers.LinearWith(ctx, hidden, m.embeddings(ctx, hidden.Graph()))
	} else {
		logits = layers.Linear{}.Apply(ctx.In("lm_head"), hidden, m.Config.Vocab)
	}
	return layers.Note(ctx, "logits", mixed.PolicyOf(ctx).CastToOutput(logits))
}

// embeddings returns the token embedding table [Vocab, Hidden] ("model/embed_tokens/weight",
// normal with std layers.InitializerRange, as transformers initializes it). With tied embeddings
// the output layer reads the table the input layer created.
func (m Llama) embeddings(ctx *context.Context, g *graph.Graph) *graph.Node {
	scope := ctx.In("model").In("embed_tokens")
	if v := scope.GetVariableByScopeAndName(scope.Scope(), "weight"); v != nil {
		return v.ValueGraph(g)
	}
	return layers.NormalVariable(scope, "weight", shapes.Make(mixed.PolicyOf(ctx).Param, m.Config.Vocab, m.Config.Hidden), layers.InitializerRange).ValueGraph(g)
}

// layer is one decoder layer: x + attention(RMSNorm(x)), then + SwiGLU(RMSNorm(·)), as the
// remat.Block kinds "attn" and "mlp" inside the kind "block"; the residual additions stay outside
// the branches. docs says where packed documents lie (the zero Documents: one a sequence).
func (m Llama) layer(ctx *context.Context, x *graph.Node, docs layers.Documents) *graph.Node {
	attention := m.attention()
	return m.decoderLayer(ctx, x, func(ctx *context.Context, h *graph.Node) *graph.Node {
		return layers.GroupedQueryAttention(ctx, h, attention, docs)
	})
}

// attention is the config's grouped-query attention with the model's softmax dtype (the core is
// the context's: layers.AttentionOf).
func (m Llama) attention() layers.GroupedQuery {
	attention := m.Config.Attention()
	attention.SoftmaxDType = m.SoftmaxDType
	return attention
}

// decoderLayer is layer with its attention given: attend maps the normed input h to the
// attention's output, ctx at "self_attn" (the plain or packed attention of layer, the cached one
// of CachedHidden).
func (m Llama) decoderLayer(ctx *context.Context, x *graph.Node, attend func(ctx *context.Context, h *graph.Node) *graph.Node) *graph.Node {
	c := m.Config
	attn := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		h := layers.RMSNorm(ctx.In("input_layernorm"), in[0], c.NormEpsilon)
		return []*graph.Node{layers.Note(ctx, "attention branch", attend(ctx.In("self_attn"), h))}
	}
	mlp := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		h := layers.RMSNorm(ctx.In("post_attention_layernorm"), in[0], c.NormEpsilon)
		return []*graph.Node{layers.Note(ctx, "MLP branch", layers.SwiGLU(ctx.In("mlp"), h, c.Intermediate))}
	}
	whole := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		x := graph.Add(in[0], remat.Block(ctx, "attn", attn, in[0])[0])
		return []*graph.Node{graph.Add(x, remat.Block(ctx, "mlp", layers.TiledBranch(mlp), x)[0])}
	}
	return remat.Block(ctx, "block", whole, x)[0]
}

// CrossEntropy returns the summed cross-entropy of predicting labels [batch, length] from tokens
// and the number of labels counted (all of them, or those where mask is true), as float32 scalars,
// so that callers form exact means across micro-batches (Loss is this without a mask, with the
// accuracy). With a chunked layers.CrossEntropy set on ctx (layers.SetCrossEntropy) the output
// layer and the loss run a chunk of tokens at a time (layers.ChunkedCrossEntropySum): no [tokens,
// Vocab] logits exist at once.
func (m Llama) CrossEntropy(ctx *context.Context, tokens, labels, mask *graph.Node) (sum, count *graph.Node) {
	hidden := m.Hidden(ctx, tokens)
	defer analysis.Section(hidden.Graph(), "loss")() // for the memory timeline
	if chunk := layers.CrossEntropyOf(ctx).Chunk; chunk > 0 {
		return layers.ChunkedCrossEntropySum(hidden, m.head(ctx, hidden.Graph()), labels, mask, chunk)
	}
	return mixed.SoftmaxCrossEntropySum(m.Head(ctx, hidden), labels, mask)
}

// head is the output layer as a layers.Projection (weight [Vocab, Hidden]): the embedding table
// when the embeddings are tied, "lm_head" otherwise.
func (m Llama) head(ctx *context.Context, g *graph.Graph) layers.Projection {
	if m.Config.TiedEmbeddings {
		return layers.Projection{Weight: m.embeddings(ctx, g), ClassesFirst: true, Frozen: layers.LoRAOf(ctx).Active()}
	}
	return layers.Linear{}.Projection(ctx.In("lm_head"), g, m.Config.Hidden, m.Config.Vocab)
}
