package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// ClassifierConfig is the tutorial's MLP classifier (Part 1.1): its sizes and dropout rate.
type ClassifierConfig struct {
	Inputs, Hidden, Classes int
	Dropout                 float64
}

// Validate returns an error naming the first field that cannot work, and why.
func (c ClassifierConfig) Validate() error {
	switch {
	case c.Inputs < 1 || c.Hidden < 1:
		return fmt.Errorf("classifier config: Inputs = %d and Hidden = %d must be at least 1", c.Inputs, c.Hidden)
	case c.Classes < 2:
		return fmt.Errorf("classifier config: Classes = %d must be at least 2", c.Classes)
	case !(c.Dropout >= 0 && c.Dropout < 1): // NaN too
		return fmt.Errorf("classifier config: Dropout = %g must be in [0, 1)", c.Dropout)
	case float64(c.Inputs)*float64(c.Hidden)+float64(c.Hidden)*float64(c.Classes) > analysis.MaxTensorElements:
		return fmt.Errorf("classifier config: %d inputs, %d hidden and %d classes make more parameters than onegpu counts (2^46)", c.Inputs, c.Hidden, c.Classes)
	}
	return nil
}

// TutorialClassifier is the tutorial's MLP classifier: 128 inputs, 256 hidden, 100 classes,
// dropout 0.1 (the tutorial trains it on batches of 512: recipes.Defaults).
var TutorialClassifier = ClassifierConfig{Inputs: 128, Hidden: 256, Classes: 100, Dropout: 0.1}

// Classifier is the tutorial's MLP: Dense(Hidden) -> LayerNorm -> SiLU -> Dropout ->
// Dense(Classes) -> log-softmax in float32, under the precision policy set on the context
// (mixed.SetPolicy; the trainer sets the run's).
//
// It is a model the trainer trains (train.Model): its inputs are features [batch, Inputs]
// (float32) and labels [batch] (int32), its loss the mean cross-entropy, its metric the accuracy.
type Classifier struct {
	Config ClassifierConfig
}

// LogProbs maps x [batch, Inputs] to float32 log-probabilities [batch, Classes] (the policy's
// output dtype when that is wider), under the policy set on ctx's scope or above. Variables are
// created in ctx as Flax names them ("Dense_0", "LayerNorm_0", "Dense_1").
func (m Classifier) LogProbs(ctx *context.Context, x *graph.Node) *graph.Node {
	h := layers.Dense(ctx.In("Dense_0"), x, m.Config.Hidden)
	h = layers.SiLU(layers.LayerNorm(ctx.In("LayerNorm_0"), h))
	h = layers.Dropout(ctx, h, m.Config.Dropout)
	logits := layers.Dense(ctx.In("Dense_1"), h, m.Config.Classes)
	out := mixed.PolicyOf(ctx).Output
	if out != dtypes.Float64 {
		out = dtypes.Float32
	}
	return mixed.LogSoftmax(logits, out, -1)
}

// InputShapes are the features [batch, Inputs] (float32) and the labels [batch] (int32).
func (m Classifier) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, m.Config.Inputs), shapes.Make(dtypes.Int32, batch)}
}

// Loss is the summed cross-entropy of the labels batch[1] given the features batch[0] and the
// number of labels, with the number predicted right as the "accuracy" metric.
func (m Classifier) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	return classification(m.LogProbs(ctx, batch[0]), batch[1], nil)
}

// MetricNames is "accuracy".
func (Classifier) MetricNames() []string { return []string{"accuracy"} }

// RematKinds is none: the classifier marks no block for rematerialization.
func (Classifier) RematKinds() []string { return nil }

// CountUnit says what the loss averages over: examples.
func (Classifier) CountUnit() string { return "examples" }

// Validate returns the config's error, if any.
func (m Classifier) Validate() error { return m.Config.Validate() }

// ValidateBatch refuses a batch with more values than onegpu counts (analysis.MaxTensorElements).
func (m Classifier) ValidateBatch(batch, _ int) error {
	c := m.Config
	if width := max(c.Inputs, c.Hidden, c.Classes); float64(batch)*float64(width) > analysis.MaxTensorElements {
		return fmt.Errorf("a batch of %d examples of width %d is more values than onegpu counts (2^46): choose a smaller batch", batch, width)
	}
	return nil
}

// String names the classifier's sizes: what a checkpoint records.
func (m Classifier) String() string {
	c := m.Config
	return fmt.Sprintf("MLP (%d -> %d -> %d, dropout %g)", c.Inputs, c.Hidden, c.Classes, c.Dropout)
}
