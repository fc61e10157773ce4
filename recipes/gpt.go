package recipes

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

func init() {
	Register("gpt", Family{Summary: "the tutorial's transformer", Presets: models.PresetNames(), Run: gptRun, WithDropout: gptDropout, WithSeq: gptSeq,
		WithLayers: gptLayers})
}

// gptRuns are the runs the GPT presets train with by default: the tutorial's batch of 64 in 4
// micro-batches at a peak of 4e-4 for its model; batches of 16 in 4 and larger rates for the
// presets sized for a CPU, so that a short run shows learning. A preset not listed gets
// languageRun's.
var gptRuns = map[string]struct {
	batch, microBatches int
	peak                float64
}{"tutorial": {64, 4, 4e-4}, "small": {16, 4, 1e-3}, "tiny": {16, 4, 3e-3}}

func gptRun(preset string) (train.Config, error) {
	c, err := models.Preset(preset)
	if err != nil {
		return train.Config{}, err
	}
	run := LanguageRun(models.GPT{Config: c, SoftmaxDType: dtypes.Float32})
	if r, ok := gptRuns[preset]; ok {
		run.Batch, run.MicroBatches, run.Schedule = r.batch, r.microBatches, TutorialSchedule(r.peak)
	}
	return run, nil
}

func gptDropout(m train.Model, rate float64) train.Model {
	g := m.(models.GPT)
	g.Config.Dropout = rate
	return g
}

// gptSeq is the GPT of m with SeqLen seq: its learned positions grow with it.
func gptSeq(m train.Model, seq int) (train.Model, error) {
	g := m.(models.GPT)
	g.Config.SeqLen = seq
	if err := g.Config.Validate(); err != nil {
		return m, err
	}
	return g, nil
}

// gptLayers is the GPT of m with layers blocks.
func gptLayers(m train.Model, layers int) (train.Model, error) {
	g := m.(models.GPT)
	g.Config.Layers = layers
	if err := g.Config.Validate(); err != nil {
		return m, err
	}
	return g, nil
}
