package plan

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// Family is a kind of model `onegpu --model` names: its presets, and the run each preset trains
// with by default. Register adds one; Defaults builds a preset's run. Adding a model to the CLI is
// its file in package models and one Register call.
type Family struct {
	// Summary says what the model is, for --help.
	Summary string
	// Presets lists the sizes --preset names; none for a model of one size.
	Presets []string
	// Run returns the model of a preset ("" for a model without presets) and the run it trains
	// with by default: everything Defaults returns.
	Run func(preset string) (train.Config, error)
	// WithDropout returns the model with another dropout rate (--dropout); nil for a model without
	// dropout.
	WithDropout func(m train.Model, rate float64) train.Model
	// WithSeq returns the language model trained on sequences of seq tokens (--seq, plan
	// --longest), or an error naming a length the model cannot take; nil for a model that is not
	// a language model (no sequence to set, no attention or token loss to chunk).
	WithSeq func(m train.Model, seq int) (train.Model, error)
}

var (
	familiesMu sync.Mutex
	families   = map[string]Family{
		"gpt": {Summary: "the tutorial's transformer", Presets: models.PresetNames(), Run: gptRun, WithDropout: gptDropout, WithSeq: gptSeq},
		"mlp": {Summary: "the tutorial's classifier", Run: mlpRun, WithDropout: mlpDropout},
	}
)

// Register makes name stand for a family of models in Defaults and on the CLI's --model. It panics
// when the name is taken or empty, or the family has no Run: models are registered once, at init.
func Register(name string, f Family) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if name == "" || f.Run == nil || families[name].Run != nil {
		panic(fmt.Sprintf("plan.Register(%q): the name is empty or taken, or the family has no Run", name))
	}
	families[name] = f
}

// Model returns the family registered as name, or an error listing the families.
func Model(name string) (Family, error) {
	familiesMu.Lock()
	f, ok := families[name]
	familiesMu.Unlock()
	if !ok {
		return Family{}, fmt.Errorf("unknown model %q: the models are %s", name, strings.Join(ModelNames(), ", "))
	}
	return f, nil
}

// ModelNames lists the registered families, sorted.
func ModelNames() []string {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Defaults returns the default run of a model's preset ("" for a model without presets), as the
// CLI and the notebooks start from: for "gpt" with a preset (models.PresetNames), bfloat16 compute
// over float32 parameters, remat of MLP and attention, the preset's batch, micro-batches and peak
// learning rate with the tutorial's warm-up/exponential-decay schedule (TutorialSchedule); for
// "mlp", the classifier in float32, a batch of 512 in one micro-batch and Adam at a constant
// MLPLearningRate. The optimizer is the tutorial's Adam (Config.Optimizer nil), without loss scale,
// seed 42. Change what you need and call Validate.
func Defaults(model, preset string) (train.Config, error) {
	f, err := Model(model)
	if err != nil {
		return train.Config{}, err
	}
	return f.Run(preset)
}

// MLPLearningRate is the tutorial's Part 1.1 learning rate for the MLP: Adam at a constant 1e-3.
const MLPLearningRate = 1e-3

// TutorialSchedule is the tutorial's learning rate with peak peak: from 0 to peak over 10 updates,
// then ×0.99 per update (optim.WarmupExponentialDecay).
func TutorialSchedule(peak float64) optim.WarmupExponentialDecaySchedule {
	return optim.WarmupExponentialDecay(0, peak, 10, 1, 0.99)
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

// LanguageRun is the default run of a transformer language model m (the tutorial's techniques):
// bfloat16 compute over float32 parameters, remat of MLP and attention, a batch of 16 sequences
// in 4 micro-batches, TutorialSchedule with a peak of 1e-3, the tutorial's Adam, seed 42. A new
// family of language models starts its Run from it.
func LanguageRun(m train.Model) train.Config {
	return train.Config{Model: m, Batch: 16, MicroBatches: 4, Schedule: TutorialSchedule(1e-3), Seed: 42,
		Policy: mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32},
		Remat:  train.Remat{Kinds: []string{models.KindMLP, models.KindAttention}}}
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
