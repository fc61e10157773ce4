package infer

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/train"
)

// Model is a language model Generate can run: its final hidden states for tokens and its output
// layer, separately, so that only the positions whose next token is wanted reach the output layer
// (models.Llama and models.GPT are Models). Without a KV cache (a Model that is not a
// CachedModel, or Options.NoCache) every token recomputes the whole sequence so far.
type Model interface {
	train.LanguageModel
	// Hidden maps tokens [batch, length] to the final hidden states [batch, length, hidden].
	Hidden(ctx *context.Context, tokens *graph.Node) *graph.Node
	// Head maps hidden states [..., hidden] to logits [..., vocab].
	Head(ctx *context.Context, hidden *graph.Node) *graph.Node
}

// CachedModel is a Model that generates with a KV cache (models.Llama, whose CachedHidden says
// what the methods mean): the prompt in one pass, then one token a step, each layer's keys and
// values kept in a layers.KVCache.
type CachedModel interface {
	Model
	// Blocks is the number of layers, each with one cache.
	Blocks() int
	// KVCacheShape is each layer's keys' (and values') cache shape for batch rows of length
	// positions in dtype.
	KVCacheShape(batch, length int, dtype dtypes.DType) shapes.Shape
	// CachedHidden is Hidden of a step's tokens at their positions, reading and writing caches.
	CachedHidden(ctx *context.Context, tokens, positions *graph.Node, caches []layers.KVCache) (*graph.Node, []layers.KVCache)
}

// positioned is a model that says how long a sequence it reads (models.Llama: its positions, or
// its sliding window); a Model that does not reads its TokenShape's sequence length (models.GPT's
// learned positions).
type positioned interface{ Positions() int }

// positionsOf is the longest sequence m reads: prompt and generated tokens together.
func positionsOf(m Model) int {
	if p, ok := m.(positioned); ok {
		return p.Positions()
	}
	seqLen, _ := m.TokenShape()
	return seqLen
}

// asModel returns m as a Model, or an error saying what it lacks.
func asModel(m train.Model) (Model, error) {
	lm, ok := m.(Model)
	if !ok {
		return nil, fmt.Errorf("%s is not a language model with Hidden and Head methods (an infer.Model, as models.Llama and models.GPT)", describe(m))
	}
	return lm, nil
}

// describe names a model: its String, or its Go type.
func describe(m any) string {
	if s, ok := m.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", m)
}
