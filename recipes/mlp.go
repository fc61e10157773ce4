package recipes

import (
	"fmt"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

func init() {
	Register("mlp", Family{Summary: "the tutorial's classifier", Run: mlpRun, WithDropout: mlpDropout})
}

// MLPLearningRate is the tutorial's Part 1.1 learning rate for the MLP: Adam at a constant 1e-3.
const MLPLearningRate = 1e-3

func mlpRun(preset string) (train.Config, error) {
	if preset != "" {
		return train.Config{}, fmt.Errorf("preset %q: the MLP has one size, the tutorial's (no presets)", preset)
	}
	return train.Config{Model: models.Classifier{Config: models.TutorialClassifier}, Batch: 512, MicroBatches: 1,
		Policy: mixed.Float32, Schedule: optim.Constant(MLPLearningRate), Seed: 42}, nil
}

func mlpDropout(m train.Model, rate float64) train.Model {
	k := m.(models.Classifier)
	k.Config.Dropout = rate
	return k
}
