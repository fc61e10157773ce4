package recipes

import (
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// Each Llama-class family of package models (models.LlamaFamily: "llama", "qwen2") is a --model
// with its presets.
func init() {
	for _, key := range models.LlamaFamilyNames() {
		f, _ := models.LlamaFamilyOf(key)
		Register(key, Family{Summary: f.Summary, Presets: f.PresetNames(), WithSeq: llamaSeq, WithLayers: llamaLayers,
			Run: func(preset string) (train.Config, error) { return llamaRun(f, preset) }})
	}
}

// llamaRuns are the runs the Llama presets train with by default, on top of LanguageRun: the tiny
// preset the tiny GPT's (16 sequences in 4 micro-batches, peak 3e-3, remat of MLP and attention);
// the published shapes one sequence of 2048 tokens per micro-batch, 4 per batch, remat of whole
// layers (what fits a 24 GiB card with Llama-3.2-1B's 128,256-token logits) at a peak of 3e-4. A
// preset not listed (another family's) trains with publishedRun.
var llamaRuns = map[string]llamaDefaults{
	"tiny":           {16, 4, 3e-3, []string{models.KindMLP, models.KindAttention}},
	"tinyllama-1.1b": {4, 4, 3e-4, []string{models.KindBlock}},
	"llama-3.2-1b":   {4, 4, 3e-4, []string{models.KindBlock}},
	"llama-3.1-8b":   {4, 4, 3e-4, []string{models.KindBlock}},
	"llama-3.1-70b":  {4, 4, 3e-4, []string{models.KindBlock}},
	"llama-3.3-70b":  {4, 4, 3e-4, []string{models.KindBlock}},
}

// llamaDefaults are a Llama preset's run sizes.
type llamaDefaults struct {
	batch, microBatches int
	peak                float64
	remat               []string
}

// publishedRun is the default run of a published Llama-class shape: Llama-3.2-1B's.
var publishedRun = llamaRuns["llama-3.2-1b"]

// llamaRun is the default run of family f's preset.
func llamaRun(f models.LlamaFamily, preset string) (train.Config, error) {
	c, err := f.Preset(preset)
	if err != nil {
		return train.Config{}, err
	}
	r, ok := llamaRuns[preset]
	if !ok {
		r = publishedRun
	}
	return llamaRunOf(c, r)
}

// LlamaRun is the default run of the Llama of config c (read from a Hugging Face config.json, for
// instance): that of the preset of its shape (models.LlamaConfig.SameModel) when one is, else the
// published presets' (4 sequences in 4 micro-batches, remat of whole layers, peak 3e-4), at c's
// sequence length.
func LlamaRun(c models.LlamaConfig) (train.Config, error) {
	r := publishedRun
	for _, name := range models.LlamaPresetNames() {
		if models.LlamaPresets[name].SameModel(c) {
			r = llamaRuns[name]
		}
	}
	return llamaRunOf(c, r)
}

func llamaRunOf(c models.LlamaConfig, r llamaDefaults) (train.Config, error) {
	m, err := models.NewLlama(c)
	if err != nil {
		return train.Config{}, err
	}
	run := LanguageRun(m)
	run.Batch, run.MicroBatches, run.Schedule = r.batch, r.microBatches, TutorialSchedule(r.peak)
	run.Remat = train.Remat{Kinds: r.remat}
	return run, nil
}

func llamaSeq(m train.Model, seq int) (train.Model, error) {
	l, err := m.(models.Llama).WithSeq(seq)
	if err != nil {
		return m, err
	}
	return l, nil
}

// llamaLayers is the Llama of m with layers decoder layers.
func llamaLayers(m train.Model, layers int) (train.Model, error) {
	l := m.(models.Llama)
	l.Config.Layers = layers
	if err := l.Config.Validate(); err != nil {
		return m, err
	}
	return l, nil
}
