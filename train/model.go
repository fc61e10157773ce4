package train

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
)

// Model is what the trainer needs of a model: the shapes of a batch, and the loss of a part of a
// batch. The tutorial's GPT and MLP are two implementations (GPT, Classifier); a model of your own
// is a third. The trainer sets Config.Policy on the context's root scope (mixed.SetPolicy) and
// Config.RematBlocks (remat.SetBlocks) before it calls Loss, so a model built from onegpu's
// layers and remat.Block follows them without reading the config.
type Model interface {
	// InputShapes returns the shapes of one batch of `batch` examples, in the order Loss receives
	// them; axis 0 of each is the batch axis, along which micro-batches are cut.
	InputShapes(batch int) []shapes.Shape
	// Loss returns the loss of a micro-batch and its metrics (named by MetricNames), each as a sum
	// and a count (accum.Mean), so that micro-batches combine into the batch's exact mean.
	Loss(ctx *context.Context, batch []*graph.Node) (loss accum.Mean, metrics []accum.Mean)
	// MetricNames names the metrics Loss returns, in order (e.g. "accuracy").
	MetricNames() []string
}

// GPT is the tutorial's GPT as a Model: its inputs are tokens and targets [batch, SeqLen] (int32),
// its loss the mean cross-entropy per token, its metric the share of tokens predicted right.
type GPT struct{ models.GPT }

// InputShapes are the tokens and the targets.
func (m GPT) InputShapes(batch int) []shapes.Shape {
	tokens := shapes.Make(dtypes.Int32, batch, m.Config.SeqLen)
	return []shapes.Shape{tokens, tokens}
}

// Loss is the cross-entropy of the targets, with the accuracy as its metric.
func (m GPT) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	return classification(m.Logits(ctx, batch[0]), batch[1])
}

// MetricNames is "accuracy".
func (GPT) MetricNames() []string { return []string{"accuracy"} }

// CountUnit says what the loss averages over: tokens.
func (GPT) CountUnit() string { return "tokens" }

// Classifier is the tutorial's MLP classifier as a Model: its inputs are features [batch, Inputs]
// (float32) and labels [batch] (int32), its loss the mean cross-entropy, its metric the accuracy.
type Classifier struct{ models.Classifier }

// InputShapes are the features and the labels.
func (m Classifier) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, m.Config.Inputs), shapes.Make(dtypes.Int32, batch)}
}

// Loss is the cross-entropy of the labels, with the accuracy as its metric.
func (m Classifier) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	return classification(m.LogProbs(ctx, batch[0]), batch[1])
}

// MetricNames is "accuracy".
func (Classifier) MetricNames() []string { return []string{"accuracy"} }

// classification returns the summed cross-entropy of labels under logits and the number of
// correct predictions, both over the labels' count.
func classification(logits, labels *graph.Node) (accum.Mean, []accum.Mean) {
	sum, count := mixed.SoftmaxCrossEntropySum(logits, labels, nil)
	// ArgMax of float32 logits: XLA's builder (go-xla v0.1.4) refuses ArgMax of bfloat16 (its
	// reduction's initial values come out uint16), so a policy with bfloat16 outputs could not
	// build its step on XLA. Widening is exact: the largest logit stays the largest.
	hits := graph.Equal(graph.ArgMax(graph.ConvertDType(logits, dtypes.Float32), -1, labels.DType()), labels)
	correct := graph.ReduceAllSum(graph.ConvertDType(hits, dtypes.Float32))
	return accum.Mean{Sum: sum, Count: count}, []accum.Mean{{Sum: correct, Count: count}}
}
