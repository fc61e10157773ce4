package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
)

// Model is what the trainer needs of a model: the shapes of a batch, and the loss of a part of a
// batch. The tutorial's GPT and MLP (models.GPT, models.Classifier) are two implementations; a
// model of your own is a third. The trainer applies the run's Settings to the context's root
// scope (Config.Settings: the policy, the remat blocks, attention and cross-entropy) before it
// calls Loss, so a model built from onegpu's layers and remat.Block follows them without reading
// the config.
//
// A model may also have these methods, which the trainer uses when present:
//
//	Validate() error                        // its config's errors, at Config.Validate
//	ValidateBatch(batch, microBatch int) error // sizes too large to count, at Config.Validate
//	RematKinds() []string                   // the kinds of remat.Block it marks, checked at Config.Validate
//	String() string                         // its sizes, recorded in checkpoints (default: its Go type)
//	CountUnit() string                      // what the loss averages over, for progress lines (default "examples", "tokens" for a LanguageModel)
//	TokenShape() (seqLen, vocab int)        // a language model: data of token sequences fit it
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

// LanguageModel is a Model of token sequences: its inputs are tokens and targets [batch, seqLen]
// (int32), ids in [0, vocab). Data of text or random tokens fits it (data.NewText,
// data.NewSyntheticTokens).
type LanguageModel interface {
	Model
	TokenShape() (seqLen, vocab int)
}

// MLPTiler is a model whose MLP can compute a chunk of the sequence at a time (its MLP branches
// are layers.TiledBranch): Config.MLP applies to it.
type MLPTiler interface {
	TilesMLP() bool
}

// describeModel is what a checkpoint records of a model: its String, or its Go type.
func describeModel(m Model) string {
	if s, ok := m.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", m)
}

// countUnitOf is what m's loss averages over, for progress lines: its CountUnit, else "tokens"
// for a LanguageModel and "examples" for any other.
func countUnitOf(m Model) string {
	if u, ok := m.(interface{ CountUnit() string }); ok {
		return u.CountUnit()
	}
	if _, ok := m.(LanguageModel); ok {
		return "tokens"
	}
	return "examples"
}
