package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/layers"
)

// The Llama generates with a KV cache (infer.CachedModel): a prompt's tokens in one pass, then one
// token a step, each layer's keys and values kept in a layers.KVCache of a fixed length, so that
// every token is projected once and a step's program serves every step.

// Positions is the longest sequence the Llama reads: MaxPositions, or SlidingWindow when shorter
// (the model attends to every earlier position, which is a sliding window's attention only
// within the window).
func (m Llama) Positions() int {
	if w := m.Config.SlidingWindow; w > 0 && w < m.Config.MaxPositions {
		return w
	}
	return m.Config.MaxPositions
}

// KVCacheShape is the shape of each layer's cached keys, and of its values, for batch rows of
// length positions in dtype (the compute dtype): [batch, length, KVHeads, HeadDim]. There are
// Blocks() layers.
func (m Llama) KVCacheShape(batch, length int, dtype dtypes.DType) shapes.Shape {
	return shapes.Make(dtype, batch, length, m.Config.KVHeads, m.Config.HeadDim)
}

// CachedHidden is Hidden for generation with a KV cache: the final hidden states [batch, steps,
// Hidden] of a step's tokens [batch, steps] at positions [batch, steps] (integers: each row's
// distinct, every earlier position of the row already in the caches; -1 is padding, which reads
// and writes no entry), given caches, one a layer (KVCacheShape in the compute dtype), and the
// caches with the step's keys and values written. It is Hidden of each row's whole sequence so
// far at the step's positions, within rounding: the prompt in one step (positions 0, 1, ...),
// then one token a step.
func (m Llama) CachedHidden(ctx *context.Context, tokens, positions *graph.Node, caches []layers.KVCache) (*graph.Node, []layers.KVCache) {
	if len(caches) != m.Config.Layers {
		panic(fmt.Sprintf("models.Llama.CachedHidden: %d caches for %d layers", len(caches), m.Config.Layers))
	}
	attention := m.attention()
	x := m.embed(ctx, tokens)
	updated := make([]layers.KVCache, len(caches))
	for i := range m.Config.Layers {
		x = m.decoderLayer(inPath(ctx, m.BlockScope(i)), x, func(ctx *context.Context, h *graph.Node) *graph.Node {
			var out *graph.Node
			out, updated[i] = layers.GroupedQueryAttentionCached(ctx, h, attention, positions, caches[i])
			return out
		})
	}
	return m.finalNorm(ctx, x), updated
}
