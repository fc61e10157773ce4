package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// GPT is the tutorial's decoder-only transformer: token and learned position embeddings, Layers
// pre-norm blocks (an MLP block, then an attention block, each added to the residual stream), a
// final LayerNorm and an output layer, with logits returned in the policy's output dtype.
type GPT struct {
	Config GPTConfig
	Policy mixed.Policy
	// Remat says which blocks are rematerialized in the backward pass, and RematPolicy what
	// they save (remat.NothingSaveable by default).
	Remat       remat.Spec
	RematPolicy remat.Policy
	// SoftmaxDType is the attention softmax's dtype; float32 (the tutorial's) when unset.
	SoftmaxDType dtypes.DType
}

// NewGPT returns the GPT of config with policy, no remat and a float32 softmax, or an error
// naming what cannot work.
func NewGPT(config GPTConfig, policy mixed.Policy) (GPT, error) {
	if err := config.Validate(); err != nil {
		return GPT{}, err
	}
	return GPT{Config: config, Policy: policy, SoftmaxDType: dtypes.Float32}, nil
}

// Logits maps tokens [batch, length] (integers, length <= SeqLen) to logits [batch, length, Vocab].
// It sets m.Policy on ctx's scope (mixed.SetPolicy) for its layers.
// Variables are created in ctx under the names the tutorial's Flax model gives them ("embed",
// "pos_emb", "block_0/mlp/input_layer/kernel", "block_0/attn/qkv/kernel", "post_norm",
// "output_layer", ...).
func (m GPT) Logits(ctx *context.Context, tokens *graph.Node) *graph.Node {
	c, p := m.Config, m.Policy
	if tokens.Rank() != 2 || !tokens.DType().IsInt() {
		panic(fmt.Sprintf("models.GPT: tokens must be integers [batch, length], got %s", tokens.Shape()))
	}
	length := tokens.Shape().Dim(1)
	if length > c.SeqLen {
		panic(fmt.Sprintf("models.GPT: sequences of %d tokens exceed the %d learned positions (GPTConfig.SeqLen)", length, c.SeqLen))
	}
	g := tokens.Graph()
	mixed.SetPolicy(ctx, p) // the layers read it from ctx's scope
	x := layers.Embed(ctx.In("embed"), tokens, c.Vocab, c.Hidden)
	positions := ctx.WithInitializer(initializers.RandomNormalFn(ctx, 0.02)).
		VariableWithShape("pos_emb", shapes.Make(p.Param, c.SeqLen, c.Hidden)).ValueGraph(g)
	positions = graph.SliceAxis(p.CastToCompute(positions), 0, graph.AxisRange(0, length))
	x = graph.Add(x, graph.InsertAxes(positions, 0))
	for layer := range c.Layers {
		x = m.block(ctx.In(fmt.Sprintf("block_%d", layer)), x)
	}
	x = layers.LayerNorm(ctx.In("post_norm"), x)
	return layers.Note(ctx, "logits", p.CastToOutput(layers.Dense(ctx.In("output_layer"), x, c.Vocab)))
}

// block is one transformer block as the tutorial writes it: x + MLP(x), then x + Attention(x),
// each branch rematerialized as m.Remat says (the residual additions stay outside).
func (m GPT) block(ctx *context.Context, x *graph.Node) *graph.Node {
	mlp := func(ctx *context.Context, x *graph.Node) *graph.Node {
		h := layers.LayerNorm(ctx.In("pre_norm"), x)
		h = layers.GELU(layers.Dense(ctx.In("input_layer"), h, m.Config.MLPFactor*m.Config.Hidden))
		h = layers.Dense(ctx.In("output_layer"), h, m.Config.Hidden)
		return layers.Note(ctx, "MLP branch", layers.Dropout(ctx, h, m.Config.Dropout))
	}
	attn := func(ctx *context.Context, x *graph.Node) *graph.Node {
		h := layers.LayerNorm(ctx.In("pre_norm"), x)
		h = layers.CausalSelfAttention(ctx, h, m.Config.Heads(), m.Config.HeadDim, m.softmaxDType())
		return layers.Note(ctx, "attention branch", layers.Dropout(ctx, h, m.Config.Dropout))
	}
	// Each branch's dropout bits are drawn when the branch runs (see layers.TieRandomStateTo).
	tie := func(ctx *context.Context, x *graph.Node) {
		if m.Config.Dropout > 0 && ctx.IsTraining(x.Graph()) {
			layers.TieRandomStateTo(ctx, x)
		}
	}
	whole := func(ctx *context.Context, x *graph.Node) *graph.Node {
		tie(ctx, x)
		x = graph.Add(x, m.checkpoint(m.Remat.MLP, ctx.In("mlp"), mlp, x))
		tie(ctx, x)
		return graph.Add(x, m.checkpoint(m.Remat.Attention, ctx.In("attn"), attn, x))
	}
	return m.checkpoint(m.Remat.Block, ctx, whole, x)
}

// checkpoint runs fn(ctx, x), rematerialized with m.RematPolicy when enabled.
func (m GPT) checkpoint(enabled bool, ctx *context.Context, fn func(*context.Context, *graph.Node) *graph.Node, x *graph.Node) *graph.Node {
	if !enabled {
		return fn(ctx, x)
	}
	out := remat.With(m.RematPolicy).CheckpointCtx(ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		return []*graph.Node{fn(ctx, in[0])}
	}, x)
	return out[0]
}

func (m GPT) softmaxDType() dtypes.DType {
	if m.SoftmaxDType == dtypes.InvalidDType {
		return dtypes.Float32
	}
	return m.SoftmaxDType
}

// Loss returns the summed cross-entropy of predicting labels [batch, length] from tokens and the
// number of labels counted (all of them, or those where mask is true), as float32 scalars, so that
// callers form exact means across micro-batches.
func (m GPT) Loss(ctx *context.Context, tokens, labels, mask *graph.Node) (sum, count *graph.Node) {
	return mixed.SoftmaxCrossEntropySum(m.Logits(ctx, tokens), labels, mask)
}
