package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
)

// The Llama is a model the trainer trains (train.Model and train.LanguageModel): its inputs are
// tokens and targets [batch, SeqLen] (int32), its loss the mean next-token cross-entropy, its
// metric the share of targets predicted right, as the GPT's.

// RematKinds are the kinds of block the Llama marks: "block" (a whole decoder layer), "attn"
// (RMSNorm and attention) and "mlp" (RMSNorm and SwiGLU).
func (Llama) RematKinds() []string { return []string{KindBlock, KindMLP, KindAttention} }

// TilesMLP says the Llama's MLP branch (RMSNorm and SwiGLU, position-wise) computes a chunk of
// the sequence at a time when the run asks (train.Config.MLP, layers.TiledBranch).
func (Llama) TilesMLP() bool { return true }

// InputShapes are the tokens and the targets of batch sequences, [batch, SeqLen] int32 each, and
// when Packed their segments, positions (int32) and loss weights (float32), [batch, SeqLen] each.
func (m Llama) InputShapes(batch int) []shapes.Shape {
	return tokenShapes(batch, m.Config.SeqLen, m.Packed)
}

// Loss is the summed cross-entropy of the targets batch[1] given the tokens batch[0] and the
// number of targets, with the number predicted right as the "accuracy" metric: sums and counts
// (accum.Mean), so that micro-batches combine into the batch's exact means. With a chunked
// layers.CrossEntropy set on ctx (layers.SetCrossEntropy; the trainer sets
// train.Config.CrossEntropy) the output layer, the loss and the accuracy run a chunk of tokens at
// a time (layers.ChunkedCrossEntropyAccuracy).
func (m Llama) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	x := m.EmbedStage(ctx, batch)
	for i := range m.Blocks() {
		x = m.BlockStage(inPath(ctx, m.BlockScope(i)), x, batch)
	}
	return m.HeadStage(ctx, x, batch)
}

// MetricNames is "accuracy".
func (Llama) MetricNames() []string { return []string{"accuracy"} }

// CountUnit says what the loss averages over: tokens.
func (Llama) CountUnit() string { return "tokens" }

// NumLayers is the number of decoder layers: a step unrolls them once per micro-batch.
func (m Llama) NumLayers() int { return m.Config.Layers }

// TokenShape is the training sequence length and the vocabulary.
func (m Llama) TokenShape() (seqLen, vocab int) { return m.Config.SeqLen, m.Config.Vocab }

// Validate returns the config's error, if any.
func (m Llama) Validate() error { return m.Config.Validate() }

// WithSeq returns the Llama trained on sequences of seq tokens (at most MaxPositions), or the
// config's error.
func (m Llama) WithSeq(seq int) (Llama, error) {
	m.Config.SeqLen = seq
	return m, m.Config.Validate()
}

// ValidateBatch returns an error when a batch of batch sequences, split into micro-batches of
// microBatch sequences, holds a tensor with more values than onegpu counts (analysis.MaxTensorElements).
func (m Llama) ValidateBatch(batch, microBatch int) error {
	c, micro := m.Config, float64(microBatch)
	return checkSizes("Llama config", []tensorSize{
		{"a batch of tokens (batch × SeqLen)", float64(batch) * float64(c.SeqLen)},
		{"a micro-batch's logits (micro-batch × SeqLen × Vocab)", micro * float64(c.SeqLen) * float64(c.Vocab)},
		{"a micro-batch's MLP activations (micro-batch × SeqLen × Intermediate)", micro * float64(c.SeqLen) * float64(c.Intermediate)},
		{"a micro-batch's attention scores (micro-batch × Heads × SeqLen²)", micro * float64(c.Heads) * float64(c.SeqLen) * float64(c.SeqLen)},
	})
}

// String names the Llama's sizes, and its family and preset when it is one (LlamaFamily): what a
// checkpoint records.
func (m Llama) String() string {
	c := m.Config
	s := fmt.Sprintf("%s (%d layers × %d, %d heads of %d with %d key/value heads, MLP %d, sequence %d, vocabulary %d, rope θ %g",
		llamaName(c), c.Layers, c.Hidden, c.Heads, c.HeadDim, c.KVHeads, c.Intermediate, c.SeqLen, c.Vocab, c.RopeTheta)
	if c.RopeScaling != nil {
		r := c.RopeScaling
		s += fmt.Sprintf(" scaled ×%g (low %g, high %g, original %d)", r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPositions)
	}
	s += fmt.Sprintf(", norm ε %g", c.NormEpsilon)
	if c.TiedEmbeddings {
		s += ", tied embeddings"
	}
	if m.Packed {
		s += ", packed documents"
	}
	if c.QKVBias {
		s += ", q/k/v biases"
	}
	if d := m.SoftmaxDType; d != dtypes.InvalidDType && d != dtypes.Float32 {
		s += fmt.Sprintf(", softmax %s", d)
	}
	return s + ")"
}

// SameModel reports whether c and o describe the same model, whatever the sequence length each
// trains at and their descriptions.
func (c LlamaConfig) SameModel(o LlamaConfig) bool {
	c.SeqLen = o.SeqLen
	return sameLlamaShape(c, o)
}

// sameLlamaShape reports whether two configs describe the same model (Description aside).
func sameLlamaShape(a, b LlamaConfig) bool {
	a.Description, b.Description = "", ""
	if a.RopeScaling != nil && b.RopeScaling != nil && *a.RopeScaling == *b.RopeScaling {
		a.RopeScaling, b.RopeScaling = nil, nil
	}
	return a == b
}
