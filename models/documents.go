package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/layers"
)

// A language model with Packed set (Llama.Packed, GPT.Packed) trains on documents packed into its
// sequences (data.Packed): its batch is five tensors [batch, SeqLen] instead of two,
//
//	tokens, targets  int32    as for plain sequences
//	segments         int32    the document of each position (0 for padding): attention stays
//	                          within a document
//	positions        int32    each token's position within its document: positions restart
//	                          at each document
//	weights          float32  each target's loss weight: prompts and padding carry none
//
// and its loss is the weighted sum of the targets' cross-entropies over the sum of the weights,
// exact across micro-batches (accum.Mean): what each document's loss computed on its own adds up
// to.

// tokenShapes are the shapes of a batch of batch sequences of seqLen tokens: two tensors, five
// when packed.
func tokenShapes(batch, seqLen int, packed bool) []shapes.Shape {
	tokens := shapes.Make(dtypes.Int32, batch, seqLen)
	if !packed {
		return []shapes.Shape{tokens, tokens}
	}
	return []shapes.Shape{tokens, tokens, tokens, tokens, shapes.Make(dtypes.Float32, batch, seqLen)}
}

// checkTokenBatch panics unless batch has the number of tensors a (packed) model takes.
func checkTokenBatch(model string, batch []*graph.Node, packed bool) {
	switch {
	case packed && len(batch) != 5:
		panic(fmt.Sprintf("models.%s: a packed model's batch must be [tokens, targets, segments, positions, weights], got %d inputs", model, len(batch)))
	case !packed && len(batch) != 2:
		panic(fmt.Sprintf("models.%s: the batch must be [tokens, targets] (or five inputs with Packed), got %d inputs", model, len(batch)))
	}
}

// documentsOf is where a batch's documents lie: its segments and positions when packed, the zero
// Documents (one a sequence) otherwise.
func documentsOf(batch []*graph.Node, packed bool) layers.Documents {
	if !packed {
		return layers.Documents{}
	}
	return layers.Documents{Segments: batch[2], Positions: batch[3]}
}

// lossWeights is a batch's loss weights when packed, nil (every target counts 1) otherwise.
func lossWeights(batch []*graph.Node, packed bool) *graph.Node {
	if !packed {
		return nil
	}
	return batch[4]
}
