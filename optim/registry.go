package optim

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Settings are the optimizer hyperparameters a command line gives with a name (ByName): zero
// means the optimizer's default. An optimizer that has no use for a setting given refuses it.
type Settings struct {
	// WeightDecay is AdamW's decoupled weight decay (0: AdamWWeightDecay).
	WeightDecay float64
}

// A Builder makes the optimizer a name stands for, from the settings given with it.
type Builder func(Settings) (Optimizer, error)

// builders are the optimizers `--optimizer` names: an optimizer is one entry.
var builders = map[string]Builder{
	// optax.adam's defaults, the tutorial's.
	"adam": plain(func() Optimizer { return Adam().Done() }),
	// optax.adamw's: decoupled weight decay, Settings.WeightDecay or 1e-4.
	"adamw": adamW,
	// Block-wise 8-bit moments with Adam's hyperparameters.
	"adam8bit": plain(func() Optimizer { return Adam8bit().Betas(AdamBeta1, AdamBeta2).Epsilon(AdamEpsilon).Done() }),
	// Factored second moments, optax.adafactor's defaults.
	"adafactor": plain(func() Optimizer { return Named("adafactor", Adafactor().Done()) }),
}

var buildersMu sync.Mutex

// plain is the Builder of an optimizer that takes no setting by name.
func plain(build func() Optimizer) Builder {
	return func(s Settings) (Optimizer, error) {
		o := build()
		if s.WeightDecay != 0 {
			return nil, fmt.Errorf("optimizer %s has no weight decay: use adamw, or leave out the weight decay", o)
		}
		return o, nil
	}
}

func adamW(s Settings) (Optimizer, error) {
	c := AdamW()
	if s.WeightDecay != 0 {
		c.WeightDecay(s.WeightDecay)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c.Done(), nil
}

// Register makes name (lower case, as a command line spells it) stand for the optimizer build
// makes, for ByName and `onegpu --optimizer`. It panics when the name is taken or empty: names
// are registered once, at init.
func Register(name string, build Builder) {
	buildersMu.Lock()
	defer buildersMu.Unlock()
	if name == "" || build == nil || builders[name] != nil {
		panicf("optim.Register(%q): the name is empty or taken, or the builder nil", name)
	}
	builders[name] = build
}

// ByName returns the optimizer registered as name ("adam", "adamw", "adam8bit", ...) built with
// settings, or an error that lists the names.
func ByName(name string, settings Settings) (Optimizer, error) {
	buildersMu.Lock()
	build, ok := builders[name]
	buildersMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown optimizer %q: use %s", name, strings.Join(Names(), ", "))
	}
	return build(settings)
}

// Names lists the registered optimizers, sorted.
func Names() []string {
	buildersMu.Lock()
	defer buildersMu.Unlock()
	names := make([]string, 0, len(builders))
	for n := range builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
