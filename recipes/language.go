package recipes

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// TutorialSchedule is the tutorial's learning rate with peak peak: from 0 to peak over 10 updates,
// then ×0.99 per update (optim.WarmupExponentialDecay).
func TutorialSchedule(peak float64) optim.WarmupExponentialDecaySchedule {
	return optim.WarmupExponentialDecay(0, peak, 10, 1, 0.99)
}

// LanguageRun is the default run of a transformer language model m (the tutorial's techniques):
// bfloat16 compute over float32 parameters, remat of MLP and attention, a batch of 16 sequences
// in 4 micro-batches, TutorialSchedule with a peak of 1e-3, the tutorial's Adam, seed 42. A new
// family of language models starts its Run from it.
func LanguageRun(m train.Model) train.Config {
	return train.Config{Model: m, Batch: 16, MicroBatches: 4, Schedule: TutorialSchedule(1e-3), Seed: 42,
		Policy: mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32},
		Remat:  train.Remat{Kinds: []string{models.KindMLP, models.KindAttention}}}
}
