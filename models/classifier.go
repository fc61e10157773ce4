package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// ClassifierConfig is the tutorial's MLP classifier (Part 1.1).
type ClassifierConfig struct {
	Inputs, Hidden, Classes int
	Dropout                 float64
	Batch                   int
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
	case float64(c.Inputs)*float64(c.Hidden)+float64(c.Hidden)*float64(c.Classes) > MaxTensorElements:
		return fmt.Errorf("classifier config: %d inputs, %d hidden and %d classes make more parameters than onegpu counts (2^46)", c.Inputs, c.Hidden, c.Classes)
	}
	return nil
}

// TutorialClassifier is the tutorial's MLP classifier: 128 inputs, 256 hidden, 100 classes,
// dropout 0.1, batch 512.
var TutorialClassifier = ClassifierConfig{Inputs: 128, Hidden: 256, Classes: 100, Dropout: 0.1, Batch: 512}

// Classifier is the tutorial's MLP: Dense(Hidden) -> LayerNorm -> SiLU -> Dropout ->
// Dense(Classes) -> log-softmax in float32, under a precision policy.
type Classifier struct {
	Config ClassifierConfig
	Policy mixed.Policy
}

// LogProbs maps x [batch, Inputs] to float32 log-probabilities [batch, Classes] (the policy's
// output dtype when that is wider). Variables are created in ctx as Flax names them
// ("Dense_0", "LayerNorm_0", "Dense_1"); m.Policy is set on ctx's scope for the layers.
func (m Classifier) LogProbs(ctx *context.Context, x *graph.Node) *graph.Node {
	p := m.Policy
	mixed.SetPolicy(ctx, p) // the layers read it from ctx's scope
	h := layers.Dense(ctx.In("Dense_0"), x, m.Config.Hidden)
	h = layers.SiLU(layers.LayerNorm(ctx.In("LayerNorm_0"), h))
	h = layers.Dropout(ctx, h, m.Config.Dropout)
	logits := layers.Dense(ctx.In("Dense_1"), h, m.Config.Classes)
	out := p.Output
	if out != dtypes.Float64 {
		out = dtypes.Float32
	}
	return mixed.LogSoftmax(logits, out, -1)
}

// Loss returns the summed cross-entropy of the integer labels [batch] and the number of examples,
// as float32 scalars (see mixed.SoftmaxCrossEntropySum).
func (m Classifier) Loss(ctx *context.Context, x, labels *graph.Node) (sum, count *graph.Node) {
	logProbs := m.LogProbs(ctx, x)
	picked := graph.ReduceSum(graph.Mul(logProbs, graph.OneHot(labels, m.Config.Classes, logProbs.DType())), -1)
	return graph.Neg(graph.ReduceAllSum(picked)), graph.Scalar(x.Graph(), logProbs.DType(), float64(labels.Shape().Size()))
}
