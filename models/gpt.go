package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// GPT is the tutorial's decoder-only transformer: token and learned position embeddings, Layers
// pre-norm blocks (an MLP block, then an attention block, each added to the residual stream), a
// final LayerNorm and an output layer, with logits returned in the policy's output dtype.
//
// It is a model the trainer trains (train.Model): its inputs are tokens and targets
// [batch, SeqLen] (int32), its loss the mean cross-entropy per token, its metric the share of
// tokens predicted right. Its layers follow the precision policy set on the context
// (mixed.SetPolicy; the trainer sets the run's), and each block's MLP, attention and the whole
// block are remat.Blocks of kinds "mlp", "attn" and "block", which remat.SetBlocks (the trainer:
// train.Config.Remat) selects for rematerialization.
type GPT struct {
	Config GPTConfig
	// Packed makes its batches documents packed into sequences (data.Packed): five inputs, not
	// two, attention within each document, the learned positions each token's within its
	// document, weighted targets (see documents.go).
	Packed bool
	// SoftmaxDType is the attention softmax's dtype; float32 (the tutorial's) when unset.
	SoftmaxDType dtypes.DType
}

// NewGPT returns the GPT of config with a float32 softmax, or an error naming what cannot work.
func NewGPT(config GPTConfig) (GPT, error) {
	if err := config.Validate(); err != nil {
		return GPT{}, err
	}
	return GPT{Config: config, SoftmaxDType: dtypes.Float32}, nil
}

// GPT's kinds of block (see remat.Block).
const (
	KindMLP       = "mlp"
	KindAttention = "attn"
	KindBlock     = "block"
)

// RematKinds are the kinds of block the GPT marks: "block" (a whole transformer block), "mlp" and
// "attn" (its two branches).
func (GPT) RematKinds() []string { return []string{KindBlock, KindMLP, KindAttention} }

// Logits maps tokens [batch, length] (integers, length <= SeqLen) to logits [batch, length, Vocab],
// under the policy set on ctx's scope or above (mixed.PolicyOf).
// Variables are created in ctx under the names the tutorial's Flax model gives them ("embed",
// "pos_emb", "block_0/mlp/input_layer/kernel", "block_0/attn/qkv/kernel", "post_norm",
// "output_layer", ...).
func (m GPT) Logits(ctx *context.Context, tokens *graph.Node) *graph.Node {
	return m.Head(ctx, m.Hidden(ctx, tokens))
}

// Hidden returns the final hidden states [batch, length, Hidden] for tokens (after the final
// LayerNorm, in the compute dtype): Logits without the output layer, for a loss that applies the
// output layer itself, a chunk of tokens at a time. It runs the embedding and the blocks as the
// stages of a streamed run do (gpt_stages.go).
func (m GPT) Hidden(ctx *context.Context, tokens *graph.Node) *graph.Node {
	x := m.embed(ctx, tokens, nil)
	for layer := range m.Config.Layers {
		x = m.block(ctx.In(m.BlockScope(layer)), x, layers.Documents{})
	}
	return m.postNorm(ctx, x)
}

// Head is the output layer ("output_layer", a Dense of Vocab features): the logits of hidden
// states, in the policy's output dtype.
func (m GPT) Head(ctx *context.Context, hidden *graph.Node) *graph.Node {
	p := mixed.PolicyOf(ctx)
	return layers.Note(ctx, "logits", p.CastToOutput(layers.Dense(ctx.In("output_layer"), hidden, m.Config.Vocab)))
}

// block is one transformer block as the tutorial writes it: x + MLP(x), then x + Attention(x),
// each branch a remat.Block (the residual additions stay outside), the whole one too. docs says
// where packed documents lie (the zero Documents: one a sequence).
func (m GPT) block(ctx *context.Context, x *graph.Node, docs layers.Documents) *graph.Node {
	mlp := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		h := layers.LayerNorm(ctx.In("pre_norm"), in[0])
		h = layers.GELU(layers.Dense(ctx.In("input_layer"), h, m.Config.MLPFactor*m.Config.Hidden))
		h = layers.Dense(ctx.In("output_layer"), h, m.Config.Hidden)
		return []*graph.Node{layers.Note(ctx, "MLP branch", layers.Dropout(ctx, h, m.Config.Dropout))}
	}
	attn := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		h := layers.LayerNorm(ctx.In("pre_norm"), in[0])
		h = layers.CausalSelfAttention(ctx, h, m.Config.Heads(), m.Config.HeadDim, m.softmaxDType(), docs)
		return []*graph.Node{layers.Note(ctx, "attention branch", layers.Dropout(ctx, h, m.Config.Dropout))}
	}
	// Each branch's dropout bits are drawn when the branch runs (see layers.TieRandomStateTo).
	tie := func(ctx *context.Context, x *graph.Node) {
		if m.Config.Dropout > 0 && ctx.IsTraining(x.Graph()) {
			layers.TieRandomStateTo(ctx, x)
		}
	}
	whole := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		x := in[0]
		tie(ctx, x)
		x = graph.Add(x, remat.Block(ctx.In("mlp"), KindMLP, mlp, x)[0])
		tie(ctx, x)
		return []*graph.Node{graph.Add(x, remat.Block(ctx.In("attn"), KindAttention, attn, x)[0])}
	}
	return remat.Block(ctx, KindBlock, whole, x)[0]
}

func (m GPT) softmaxDType() dtypes.DType {
	if m.SoftmaxDType == dtypes.InvalidDType {
		return dtypes.Float32
	}
	return m.SoftmaxDType
}

// InputShapes are the tokens and the targets of batch sequences, [batch, SeqLen] int32 each, and
// when Packed their segments, positions (int32) and loss weights (float32), [batch, SeqLen] each.
func (m GPT) InputShapes(batch int) []shapes.Shape {
	return tokenShapes(batch, m.Config.SeqLen, m.Packed)
}

// Loss is the summed cross-entropy of the targets batch[1] given the tokens batch[0] and the
// number of targets, with the number predicted right as the "accuracy" metric: sums and counts
// (accum.Mean), so that micro-batches combine into the batch's exact means. With a chunked
// layers.CrossEntropy set on ctx (layers.SetCrossEntropy; the trainer sets
// train.Config.CrossEntropy) the output layer, the loss and the accuracy run a chunk of tokens at
// a time (layers.ChunkedCrossEntropyAccuracy): no [tokens, Vocab] logits exist at once.
func (m GPT) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	x := m.EmbedStage(ctx, batch)
	for layer := range m.Blocks() {
		x = m.BlockStage(ctx.In(m.BlockScope(layer)), x, batch)
	}
	return m.HeadStage(ctx, x, batch)
}

// MetricNames is "accuracy".
func (GPT) MetricNames() []string { return []string{"accuracy"} }

// CountUnit says what the loss averages over: tokens.
func (GPT) CountUnit() string { return "tokens" }

// NumLayers is the number of transformer blocks: a step unrolls them once per micro-batch.
func (m GPT) NumLayers() int { return m.Config.Layers }

// TokenShape is the sequence length and the vocabulary: the GPT learns sequences of tokens.
func (m GPT) TokenShape() (seqLen, vocab int) { return m.Config.SeqLen, m.Config.Vocab }

// Validate returns the config's error, if any.
func (m GPT) Validate() error { return m.Config.Validate() }

// ValidateBatch refuses batches whose tensors onegpu cannot count (GPTConfig.ValidateBatch).
func (m GPT) ValidateBatch(batch, microBatch int) error {
	return m.Config.ValidateBatch(batch, microBatch)
}

// String names the GPT's sizes, and its preset when it is one: what a checkpoint records.
func (m GPT) String() string {
	g := m.Config
	name := "GPT"
	for _, preset := range PresetNames() {
		p := Presets[preset]
		if p.Hidden == g.Hidden && p.Layers == g.Layers && p.HeadDim == g.HeadDim && p.MLPFactor == g.MLPFactor && p.SeqLen == g.SeqLen {
			name += " " + preset
		}
	}
	s := fmt.Sprintf("%s (%d layers × %d, %d heads of %d, sequence %d, MLP ×%d, vocabulary %d, dropout %g", name, g.Layers, g.Hidden,
		g.Heads(), g.HeadDim, g.SeqLen, g.MLPFactor, g.Vocab, g.Dropout)
	if d := m.softmaxDType(); d != dtypes.Float32 {
		s += fmt.Sprintf(", softmax %s", d)
	}
	if m.Packed {
		s += ", packed documents"
	}
	return s + ")"
}
