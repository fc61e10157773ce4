package plan

import (
	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/train"
)

// Part is one share of a step's estimated peak memory, named as a user thinks of it.
type Part struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// The parts PeakParts splits a peak into, in display order.
const (
	PartWeights         = "weights"
	PartFrozenWeights   = "frozen weights"
	PartGradients       = "gradients"
	PartOptimizerState  = "optimizer state"
	PartActivations     = "activations"
	PartAttentionScores = "attention scores"
	PartLogits          = "logits"
	PartOther           = "other"
)

// PartNames lists the parts in display order.
func PartNames() []string {
	return []string{PartWeights, PartFrozenWeights, PartGradients, PartOptimizerState, PartActivations, PartAttentionScores, PartLogits, PartOther}
}

// PeakParts builds config's train step on backend (nothing runs), analyzes it and splits the
// buffers alive at its peak into parts: the kinds of analysis.Memory (weights are its trainable
// parameters, casts included; frozen weights a LoRA run's frozen base, its quantized codes and
// dequantized copies included), with two terms of a language model's activations apart — attention scores,
// the activations with two axes of the sequence's length (plain attention's scores, softmax
// probabilities and their gradients, [.., seq, .., seq]), and logits, the activations whose last
// axis is the vocabulary (the output layer's logits and their gradient, whole or a chunk of
// tokens at a time). Chunked attention's blocks of scores are smaller than the sequence on both
// axes and count as activations. The parts sum to the estimate's PeakBytes.
func PeakParts(backend backends.Backend, config train.Config) ([]Part, *analysis.Memory, error) {
	trainer, err := train.New(backend, config)
	if err != nil {
		return nil, nil, err
	}
	p, err := trainer.Program()
	if err != nil {
		return nil, nil, err
	}
	defer p.Graph.Finalize()
	m := analysis.Analyze(p)
	seq, vocab := 0, 0
	if lm, ok := config.Model.(train.LanguageModel); ok {
		seq, vocab = lm.TokenShape()
	}
	bytes := map[string]int64{}
	for _, t := range m.Live {
		bytes[partOf(t, seq, vocab)] += t.Bytes
	}
	parts := make([]Part, 0, len(PartNames()))
	for _, name := range PartNames() {
		parts = append(parts, Part{Name: name, Bytes: bytes[name]})
	}
	return parts, m, nil
}

// partOf names the part buffer t belongs to; seq and vocab are 0 for a model that is not a
// language model.
func partOf(t analysis.Tensor, seq, vocab int) string {
	switch t.Kind {
	case analysis.Parameters:
		return PartWeights
	case analysis.FrozenWeights:
		return PartFrozenWeights
	case analysis.Gradients:
		return PartGradients
	case analysis.OptimizerState:
		return PartOptimizerState
	case analysis.Other:
		return PartOther
	}
	if t.Scratch || seq == 0 {
		return PartActivations
	}
	dims := t.Node.Shape().Dimensions
	if len(dims) > 0 && dims[len(dims)-1] == vocab {
		return PartLogits
	}
	if len(dims) >= 4 && dims[len(dims)-1] == seq {
		for _, d := range dims[:len(dims)-1] {
			if d == seq {
				return PartAttentionScores
			}
		}
	}
	return PartActivations
}
