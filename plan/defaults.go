package plan

import (
	"fmt"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// MLPLearningRate is the tutorial's Part 1.1 learning rate for the MLP: Adam at a constant 1e-3.
const MLPLearningRate = 1e-3

// Defaults returns the tutorial's setup of a model: for "gpt" with a preset (models.PresetNames),
// bfloat16 compute over float32 parameters, remat of MLP and attention, the preset's batch,
// micro-batches and peak learning rate with the tutorial's warm-up/exponential-decay schedule; for
// "mlp", the classifier in float32 with one micro-batch and Adam at a constant MLPLearningRate. The
// loss scale is "none", the seed 42; Adam's other settings are train.AdamBeta1, AdamBeta2 and
// AdamEpsilon. Change what you need and call Validate.
func Defaults(model, preset string) (train.Config, error) {
	c := train.Config{Model: model, LossScale: "none", Schedule: train.TutorialSchedule, Seed: 42}
	switch model {
	case "gpt":
		gpt, err := models.Preset(preset)
		if err != nil {
			return c, err
		}
		c.GPT, c.Batch, c.MicroBatches = gpt, gpt.Batch, gpt.MicroBatch
		c.Schedule.Peak = gpt.LearningRate
		c.Policy = mixed.Policy{Param: mixed.Float32.Param, Compute: bfloat16, Output: mixed.Float32.Output}
		c.Remat = remat.Spec{MLP: true, Attention: true}
	case "mlp":
		c.Classifier, c.Batch, c.MicroBatches = models.TutorialClassifier, models.TutorialClassifier.Batch, 1
		c.Policy = mixed.Float32
		c.Schedule = train.Schedule{Init: MLPLearningRate, Peak: MLPLearningRate, TransitionSteps: 1, DecayRate: 1}
	default:
		return c, fmt.Errorf("unknown model %q: the models are gpt and mlp", model)
	}
	return c, nil
}
