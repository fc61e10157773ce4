package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// The GPT as stages (train.Staged): the token and position embeddings, Layers blocks under the
// scopes "block_0", "block_1", ..., and the head (the final LayerNorm, the output layer, the loss
// and the accuracy). Loss and Hidden run the same functions, so a streamed run
// (train.OffloadParams) computes the whole step's math.

// EmbedStage maps a micro-batch's tokens (batch[0], [batch, length]) to the first block's input
// [batch, length, Hidden] in the compute dtype: the token embedding plus the learned positions
// (each token's within its document when Packed).
func (m GPT) EmbedStage(ctx *context.Context, batch []*graph.Node) *graph.Node {
	checkTokenBatch("GPT", batch, m.Packed)
	return m.embed(ctx, batch[0], documentsOf(batch, m.Packed).Positions)
}

// Blocks is the number of transformer blocks (Layers).
func (m GPT) Blocks() int { return m.Config.Layers }

// BlockScope is block i's scope, "block_i", as the tutorial's Flax model names it.
func (GPT) BlockScope(i int) string { return fmt.Sprintf("block_%d", i) }

// BlockStage is one transformer block, ctx at its scope (see BlockScope), reading the
// micro-batch's segments when Packed.
func (m GPT) BlockStage(ctx *context.Context, x *graph.Node, batch []*graph.Node) *graph.Node {
	return m.block(ctx, x, documentsOf(batch, m.Packed))
}

// HeadStage is the final LayerNorm of the last block's output x and the loss of the targets
// batch[1] (weighted by batch[4] when Packed): Loss's sums and counts (plain or chunked, as
// layers.CrossEntropyOf(ctx) says).
func (m GPT) HeadStage(ctx *context.Context, x *graph.Node, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	hidden := m.postNorm(ctx, x)
	defer analysis.Section(hidden.Graph(), "loss")() // for the memory timeline
	chunk, weights := layers.CrossEntropyOf(ctx).Chunk, lossWeights(batch, m.Packed)
	if chunk == 0 {
		return classification(m.Head(ctx, hidden), batch[1], weights)
	}
	head := layers.DenseProjection(ctx.In("output_layer"), hidden.Graph(), m.Config.Hidden, m.Config.Vocab)
	sum, count, correct := layers.ChunkedCrossEntropyAccuracy(hidden, head, batch[1], weights, chunk)
	return accum.Mean{Sum: sum, Count: count}, []accum.Mean{{Sum: correct, Count: count}}
}

// embed is the token embedding of tokens plus the learned positions (at, [batch, length], or 0,
// 1, ... when nil), in the compute dtype.
func (m GPT) embed(ctx *context.Context, tokens, at *graph.Node) *graph.Node {
	c, p := m.Config, mixed.PolicyOf(ctx)
	if tokens.Rank() != 2 || !tokens.DType().IsInt() {
		panic(fmt.Sprintf("models.GPT: tokens must be integers [batch, length], got %s", tokens.Shape()))
	}
	length := tokens.Shape().Dim(1)
	if length > c.SeqLen {
		panic(fmt.Sprintf("models.GPT: sequences of %d tokens exceed the %d learned positions (GPTConfig.SeqLen)", length, c.SeqLen))
	}
	g := tokens.Graph()
	x := layers.Embed(ctx.In("embed"), tokens, c.Vocab, c.Hidden)
	positions := layers.NormalVariable(ctx, "pos_emb", shapes.Make(p.Param, c.SeqLen, c.Hidden), 0.02).ValueGraph(g)
	if at != nil {
		return graph.Add(x, layers.Lookup(ctx, positions, at))
	}
	positions = graph.SliceAxis(p.CastToCompute(positions), 0, graph.AxisRange(0, length))
	return graph.Add(x, graph.InsertAxes(positions, 0))
}

// postNorm is the final LayerNorm ("post_norm").
func (m GPT) postNorm(ctx *context.Context, x *graph.Node) *graph.Node {
	return layers.LayerNorm(ctx.In("post_norm"), x)
}
