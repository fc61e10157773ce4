package models

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/mixed"
)

// classification returns the summed cross-entropy of labels under logits and the number of
// correct predictions, both over the labels' count; with weights (the labels' shape, float), the
// weighted sums over the sum of the weights.
func classification(logits, labels, weights *graph.Node) (accum.Mean, []accum.Mean) {
	sum, count := mixed.SoftmaxCrossEntropySum(logits, labels, weights)
	// ArgMax of float32 logits: XLA's builder (go-xla v0.1.4) refuses ArgMax of bfloat16 (its
	// reduction's initial values come out uint16), so a policy with bfloat16 outputs could not
	// build its step on XLA. Widening is exact: the largest logit stays the largest.
	hits := graph.Equal(graph.ArgMax(graph.ConvertDType(logits, dtypes.Float32), -1, labels.DType()), labels)
	correct := graph.ConvertDType(hits, dtypes.Float32)
	if weights != nil {
		correct = graph.Mul(correct, graph.ConvertDType(weights, dtypes.Float32))
	}
	correct = graph.ReduceAllSum(correct)
	return accum.Mean{Sum: sum, Count: count}, []accum.Mean{{Sum: correct, Count: count}}
}
