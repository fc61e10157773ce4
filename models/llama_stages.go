package models

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
)

// The Llama as stages (train.Staged): the token embeddings, Layers decoder layers under the
// scopes "model/layers/0", "model/layers/1", ... (Hugging Face's names), and the head (the final
// RMSNorm, the output layer — the embedding table when the embeddings are tied, whose gradients
// from both stages add up — the loss and the accuracy). Loss and Hidden run the same functions,
// so a streamed run (train.OffloadParams) computes the whole step's math.

// EmbedStage maps a micro-batch's tokens (batch[0], [batch, length]) to the first layer's input
// [batch, length, Hidden]: the token embeddings.
func (m Llama) EmbedStage(ctx *context.Context, batch []*graph.Node) *graph.Node {
	checkTokenBatch("Llama", batch, m.Packed)
	return m.embed(ctx, batch[0])
}

// Blocks is the number of decoder layers (Layers).
func (m Llama) Blocks() int { return m.Config.Layers }

// BlockScope is layer i's scope, "model/layers/i", as Hugging Face names its tensors.
func (Llama) BlockScope(i int) string { return "model/layers/" + strconv.Itoa(i) }

// BlockStage is one decoder layer, ctx at its scope (see BlockScope), reading the micro-batch's
// segments and positions when Packed.
func (m Llama) BlockStage(ctx *context.Context, x *graph.Node, batch []*graph.Node) *graph.Node {
	return m.layer(ctx, x, documentsOf(batch, m.Packed))
}

// HeadStage is the final RMSNorm of the last layer's output x and the loss of the targets
// batch[1] (weighted by batch[4] when Packed): Loss's sums and counts (plain or chunked, as
// layers.CrossEntropyOf(ctx) says).
func (m Llama) HeadStage(ctx *context.Context, x *graph.Node, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	hidden := m.finalNorm(ctx, x)
	defer analysis.Section(hidden.Graph(), "loss")() // for the memory timeline
	chunk, weights := layers.CrossEntropyOf(ctx).Chunk, lossWeights(batch, m.Packed)
	if chunk == 0 {
		return classification(m.Head(ctx, hidden), batch[1], weights)
	}
	sum, count, correct := layers.ChunkedCrossEntropyAccuracy(hidden, m.head(ctx, hidden.Graph()), batch[1], weights, chunk)
	return accum.Mean{Sum: sum, Count: count}, []accum.Mean{{Sum: correct, Count: count}}
}

// embed is the token embeddings of tokens, in the compute dtype.
func (m Llama) embed(ctx *context.Context, tokens *graph.Node) *graph.Node {
	c := m.Config
	if tokens.Rank() != 2 || !tokens.DType().IsInt() {
		panic(fmt.Sprintf("models.Llama: tokens must be integers [batch, length], got %s", tokens.Shape()))
	}
	if length := tokens.Shape().Dim(1); length > c.MaxPositions {
		panic(fmt.Sprintf("models.Llama: sequences of %d tokens exceed the model's %d positions (LlamaConfig.MaxPositions)", length, c.MaxPositions))
	}
	model := ctx.In("model")
	return layers.Note(model.In("embed_tokens"), "Embed", layers.Lookup(model, m.embeddings(ctx, tokens.Graph()), tokens))
}

// finalNorm is the final RMSNorm ("model/norm").
func (m Llama) finalNorm(ctx *context.Context, x *graph.Node) *graph.Node {
	return layers.RMSNorm(ctx.In("model").In("norm"), x, m.Config.NormEpsilon)
}

// inPath is ctx in the scope path, its elements separated by "/" (a BlockScope).
func inPath(ctx *context.Context, path string) *context.Context {
	for _, element := range strings.Split(path, context.ScopeSeparator) {
		ctx = ctx.In(element)
	}
	return ctx
}
