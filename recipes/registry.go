package recipes

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/onegpu/onegpu/train"
)

// Family is a kind of model `onegpu --model` names: its presets, and the run each preset trains
// with by default. Register adds one; Defaults builds a preset's run.
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
	// WithLayers returns the model with another number of layers, the rest the same (memory
	// --layers: a depth-reduced model, whose figures grow affinely with depth); nil for a model
	// without layers to count.
	WithLayers func(m train.Model, layers int) (train.Model, error)
}

var (
	familiesMu sync.Mutex
	families   = map[string]Family{}
)

// Register makes name stand for a family of models in Defaults and on the CLI's --model, and
// registers the Go type of its model (that of its first preset's run) with train.RegisterModel,
// so that train.Load rebuilds the family's checkpoints: one registration serves both. It panics
// when the name is taken or empty, or the family has no Run: models are registered once, at init.
func Register(name string, f Family) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if name == "" || f.Run == nil || families[name].Run != nil {
		panic(fmt.Sprintf("recipes.Register(%q): the name is empty or taken, or the family has no Run", name))
	}
	families[name] = f
	preset := ""
	if len(f.Presets) > 0 {
		preset = f.Presets[0]
	}
	if run, err := f.Run(preset); err == nil && run.Model != nil {
		train.RegisterModel(run.Model)
	}
}

// Lookup returns the family registered as name, or an error listing the families.
func Lookup(name string) (Family, error) {
	familiesMu.Lock()
	f, ok := families[name]
	familiesMu.Unlock()
	if !ok {
		return Family{}, fmt.Errorf("unknown model %q: the models are %s", name, strings.Join(Names(), ", "))
	}
	return f, nil
}

// Names lists the registered families, sorted.
func Names() []string {
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
// MLPLearningRate; for a Llama-class family (models.LlamaFamily), LlamaRun's. The optimizer is the
// tutorial's Adam (Config.Optimizer nil), without loss scale, seed 42. Change what you need and
// call Validate.
func Defaults(model, preset string) (train.Config, error) {
	f, err := Lookup(model)
	if err != nil {
		return train.Config{}, err
	}
	return f.Run(preset)
}
