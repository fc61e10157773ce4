package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Optimizer is an optimizer a run is described with: it applies gradients computed elsewhere
// (GradientsOptimizer, as GoMLX's Adam, SGD and RMSProp and onegpu's Adam8bit do, or a type of
// your own) and describes itself with its hyperparameters (String), the description checkpoints
// record: two optimizers with the same description update the same way. Its update counts itself
// in GoMLX's global step (optimizers.IncrementGlobalStepGraph), as GoMLX's optimizers do: the
// schedule and the trainer read it. Build one with Adam, AdamW or Adam8bit, wrap any GoMLX
// optimizer with Named, look one up by name (ByName), or write your own (examples/customoptimizer).
type Optimizer interface {
	GradientsOptimizer
	// String names the optimizer and its hyperparameters, e.g. "adam(b1=0.9, b2=0.999, eps=1e-08)".
	String() string
}

// named is Named's optimizer.
type named struct {
	GradientsOptimizer
	name string
}

func (n named) String() string { return n.name }

// Named gives a GoMLX optimizer (or any GradientsOptimizer) the description a run records, so
// that it can be a run's Optimizer:
//
//	optim.Named("sgd", optimizers.StochasticGradientDescent().WithDecay(false))
//
// Give the description every hyperparameter that changes the update: a checkpoint resumes only
// under an optimizer with the same description. It panics for a nil optimizer or an empty name.
func Named(name string, opt GradientsOptimizer) Optimizer {
	if opt == nil || name == "" {
		panicf("optim.Named(%q, %v): give a name and an optimizer", name, opt)
	}
	return named{GradientsOptimizer: opt, name: name}
}

// The Adam hyperparameters of optax.adam's defaults (the tutorial's): Adam and AdamW start from
// them.
const (
	AdamBeta1   = 0.9
	AdamBeta2   = 0.999
	AdamEpsilon = 1e-8
	// AdamWWeightDecay is optax.adamw's default weight decay.
	AdamWWeightDecay = 1e-4
)

// AdamConfig configures Adam or AdamW (GoMLX's Adam, with optax's defaults and a description).
// Create it with Adam or AdamW, change what you need, and finish with Done.
type AdamConfig struct {
	name                  string
	beta1, beta2, epsilon float64
	weightDecay           float64
	learningRate          float64
}

// Adam returns optax.adam's configuration: betas 0.9 and 0.999, epsilon 1e-8 outside the square
// root, no weight decay. The learning rate is the schedule's (the trainer sets GoMLX's
// learning-rate variable every step); LearningRate sets it for use outside a trainer.
func Adam() *AdamConfig {
	return &AdamConfig{name: "adam", beta1: AdamBeta1, beta2: AdamBeta2, epsilon: AdamEpsilon, learningRate: -1}
}

// AdamW returns optax.adamw's configuration: Adam with decoupled weight decay 1e-4 (AdamWWeightDecay):
// each update also subtracts learning rate × weight decay × the parameter, outside the moments
// (Loshchilov & Hutter 2019), as GoMLX's AdamConfig.WeightDecay and optax.adamw both do. Every
// trainable variable decays, as with optax.adamw without a mask.
func AdamW() *AdamConfig {
	c := Adam()
	c.name, c.weightDecay = "adamw", AdamWWeightDecay
	return c
}

// Betas sets the moving-average coefficients of the first and second moments.
func (c *AdamConfig) Betas(beta1, beta2 float64) *AdamConfig {
	c.beta1, c.beta2 = beta1, beta2
	return c
}

// Epsilon sets the constant added to the denominator, outside the square root (optax's eps).
func (c *AdamConfig) Epsilon(eps float64) *AdamConfig { c.epsilon = eps; return c }

// WeightDecay sets the decoupled weight decay (see AdamW); 0 turns it off.
func (c *AdamConfig) WeightDecay(decay float64) *AdamConfig { c.weightDecay = decay; return c }

// LearningRate sets the initial value of GoMLX's learning-rate variable, for use outside a
// trainer (whose schedule sets it every step). Negative (the default): the context's
// "learning_rate" parameter or GoMLX's 0.001.
func (c *AdamConfig) LearningRate(lr float64) *AdamConfig { c.learningRate = lr; return c }

// Validate returns an error naming a setting that cannot work.
func (c *AdamConfig) Validate() error {
	switch {
	case !(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1):
		return fmt.Errorf("%s: betas %g and %g must be in [0, 1)", c.name, c.beta1, c.beta2)
	case !(c.epsilon > 0) || math.IsInf(c.epsilon, 0):
		return fmt.Errorf("%s: epsilon %g must be positive and finite", c.name, c.epsilon)
	case !(c.weightDecay >= 0) || math.IsInf(c.weightDecay, 0):
		return fmt.Errorf("%s: weight decay %g must be finite and at least 0", c.name, c.weightDecay)
	}
	return nil
}

// String describes the configuration as Done's optimizer does.
func (c *AdamConfig) String() string {
	s := fmt.Sprintf("%s(b1=%g, b2=%g, eps=%g", c.name, c.beta1, c.beta2, c.epsilon)
	if c.weightDecay != 0 {
		s += fmt.Sprintf(", weight_decay=%g", c.weightDecay)
	}
	return s + ")"
}

// Done returns the optimizer: GoMLX's Adam with these settings. It panics (GoMLX's convention for
// configuration builders) with Validate's message when a setting cannot work.
func (c *AdamConfig) Done() Optimizer {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	adam := optimizers.Adam().Betas(c.beta1, c.beta2).Epsilon(c.epsilon).WeightDecay(c.weightDecay).LearningRate(c.learningRate).Done()
	return adamOptimizer{named: named{GradientsOptimizer: adam.(GradientsOptimizer), name: c.String()}, config: *c}
}

// OptaxOptimizer is an optimizer that has an optax equivalent: its name in optax ("adam",
// "adamw") and the hyperparameters optax takes, by optax's argument names. The export for the JAX
// reference (package train/export) writes them, so that the reference builds the same optimizer.
type OptaxOptimizer interface {
	Optax() (name string, hyperparameters map[string]float64)
}

// adamOptimizer is AdamConfig.Done's optimizer.
type adamOptimizer struct {
	named
	config AdamConfig
}

// Optax is optax.adam's or optax.adamw's name and arguments (b1, b2, eps, and weight_decay).
func (a adamOptimizer) Optax() (string, map[string]float64) {
	c := a.config
	params := map[string]float64{"b1": c.beta1, "b2": c.beta2, "eps": c.epsilon}
	if c.name == "adamw" || c.weightDecay != 0 {
		params["weight_decay"] = c.weightDecay
		return "adamw", params
	}
	return "adam", params
}

// String describes the optimizer, e.g. "adam8bit(b1=0.9, b2=0.999, eps=1e-08)", with the block
// size and the smallest quantized tensor when they are not the defaults.
func (o *Adam8bitOptimizer) String() string {
	c := o.config
	s := fmt.Sprintf("adam8bit(b1=%g, b2=%g, eps=%g", c.beta1, c.beta2, c.epsilon)
	if c.blockSize != DefaultBlockSize || c.minQuantizedSize != DefaultMinQuantizedSize {
		s += fmt.Sprintf(", block=%d, min_quantized=%d", c.blockSize, c.minQuantizedSize)
	}
	return s + ")"
}

var _ Optimizer = (*Adam8bitOptimizer)(nil)
