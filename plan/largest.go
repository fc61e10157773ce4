package plan

import (
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// ScaledGPT is the tutorial's GPT (head dim 128, MLP ×4, sequence 512; trained on batches of 64)
// with hidden size 128·n and the tutorial's depth-to-width ratio, 12 layers per 1024 of hidden
// size: n = 8 is the tutorial's model.
func ScaledGPT(n int) models.GPTConfig {
	c := models.Presets["tutorial"]
	c.Hidden = 128 * n
	c.Layers = max(1, (12*n+4)/8)
	return c
}

// StateOptions are the optimizer and offload settings of one side of the largest-model comparison,
// by the names the CLI gives them (--optimizer, --offload).
type StateOptions struct {
	Name      string `json:"name"`
	Optimizer string `json:"optimizer"`
	Offload   string `json:"offload"`
}

// Apply returns c with the options' optimizer (optim.ByName) and offload (train.ParseOffload).
func (o StateOptions) Apply(c train.Config) (train.Config, error) {
	var err error
	if c.Optimizer, err = optim.ByName(o.Optimizer, optim.Settings{}); err != nil {
		return c, err
	}
	c.Offload, err = train.ParseOffload(o.Offload)
	return c, err
}

var (
	// TutorialTechniques is the tutorial's answer: Adam on the device.
	TutorialTechniques = StateOptions{"the tutorial's techniques (bf16, remat, micro-batches)", "adam", "none"}
	// StateTechniques adds 8-bit Adam and the optimizer's offload to the host.
	StateTechniques = StateOptions{"+ 8-bit Adam + optimizer offload", "adam8bit", "optimizer"}
)

// Largest is the largest scaled GPT that fits with one set of options.
type Largest struct {
	Options StateOptions `json:"options"`
	Layers  int          `json:"layers"`
	Hidden  int          `json:"hidden"`
	Params  int64        `json:"params"`
	Memory  int64        `json:"memory_bytes"`
	// HostMemory is a streamed row's host bytes (LargestStreamed); Model the model's description
	// and Step the streamed step's time and what bounds it.
	HostMemory int64     `json:"host_memory_bytes,omitempty"`
	Model      string    `json:"model,omitempty"`
	Step       *StepTime `json:"step,omitempty"`
	Variant    Variant   `json:"variant"`
	Fits       bool      `json:"fits"` // false when not even the smallest model fits
	// Evaluations is how many model sizes the search estimated: about twice the base-2
	// logarithm of the answer's scale, whatever the budget.
	Evaluations int `json:"models_estimated"`
}

// MaxScale returns the largest n of ScaledGPT whose config onegpu builds (models.GPTConfig's
// Validate: no tensor, and no parameter count, past analysis.MaxTensorElements): 620, a GPT of 930
// layers × hidden 79,360 and 70 trillion parameters. LargestThatFits sizes no model beyond it.
func MaxScale() int {
	// Validate refuses from some n on, and every larger one: the first n it refuses, less one.
	return sort.Search(1<<20, func(n int) bool { return n > 0 && ScaledGPT(n).Validate() != nil }) - 1
}

// leanestVariants are the tutorial's most memory-saving settings: bfloat16 compute with remat of
// whole blocks, with and without micro-batches (accumulation adds a float32 gradient buffer but
// cuts activations).
var leanestVariants = []Variant{{"bfloat16", "block", 4}, {"bfloat16", "block", 1}}

// footprint returns the least memory of the leanest variants for the model m with opts, and that
// variant; past int64 it returns beyond (larger than any budget).
//
// Without compile it is the sequential estimate, which is affine in the number of layers: every
// block is the same, so m(L) = m(1) + (L-1)·(m(2) - m(1)) exactly (TestLargestEstimateIsAffine),
// and two builds of one and two layers (family.WithLayers) give the estimate of any depth at the
// cost of a small model. With compile it is XLA's compiled total of the whole model, which holds no
// such rule: each size is compiled in full.
func footprint(backend backends.Backend, base train.Config, family Scaled, m train.Model, opts StateOptions, compile bool) (bytes int64, beyond bool, v Variant, err error) {
	if base, err = opts.Apply(base); err != nil {
		return 0, false, Variant{}, err
	}
	layers := 0
	if l, ok := m.(interface{ NumLayers() int }); ok && family.WithLayers != nil {
		layers = l.NumLayers()
	}
	estimate := func(v Variant, sized train.Model) (int64, error) {
		config := base
		config.Model = sized
		config, err := v.Apply(config)
		if err != nil {
			return 0, err
		}
		e, err := EstimateStep(backend, config, compile)
		return e.Memory(), err
	}
	found := false
	for _, variant := range leanestVariants {
		var m0 int64
		over := false
		if compile || layers <= 2 {
			if m0, err = estimate(variant, m); err != nil {
				return 0, false, variant, err
			}
		} else {
			one, err := estimate(variant, family.WithLayers(m, 1))
			if err != nil {
				return 0, false, variant, err
			}
			two, err := estimate(variant, family.WithLayers(m, 2))
			if err != nil {
				return 0, false, variant, err
			}
			perLayer, more := two-one, int64(layers-1)
			if over = perLayer > 0 && more > (math.MaxInt64-one)/perLayer; !over {
				m0 = one + more*perLayer
			}
		}
		if !found || beyond && !over || !over && m0 < bytes {
			bytes, beyond, v, found = m0, over, variant, true
		}
	}
	return bytes, beyond, v, nil
}

// LargestThatFits searches ScaledGPT for the largest n (up to MaxScale) whose step fits budget
// with opts, at the tutorial's batch of 64: LargestOf the family ScaledGPTs.
func LargestThatFits(backend backends.Backend, base train.Config, budget int64, opts StateOptions, compile bool, progress io.Writer) (Largest, error) {
	tutorial, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		return Largest{}, err
	}
	base.Batch = tutorial.Batch
	return LargestOf(backend, base, ScaledGPTs(), budget, opts, compile, progress)
}

// LargestOf searches family for the largest n (up to family.Max) whose step fits budget with
// opts, at base's batch and sequence: doubling n, then bisecting, so that it estimates about
// 2·log2(n) sizes (Largest's Evaluations), each at the cost of a one- and a two-layer model
// without compile (when the family has WithLayers). Memory grows with n, so the search is exact
// for the family. A budget that fits even the family's largest model is an error that says so
// (the budget does not bound the model). progress, when not nil, gets one line per model tried.
func LargestOf(backend backends.Backend, base train.Config, family Scaled, budget int64, opts StateOptions, compile bool, progress io.Writer) (Largest, error) {
	row := Largest{Options: opts}
	fits := func(n int) (bool, error) {
		m, err := family.Model(n)
		if err != nil {
			return false, err
		}
		layers, hidden, params := scaledShape(m)
		row.Evaluations++
		bytes, beyond, v, err := footprint(backend, base, family, m, opts, compile)
		if err != nil {
			return false, fmt.Errorf("%s: %w", m, err)
		}
		ok := !beyond && bytes <= budget
		if progress != nil {
			memory := analysis.FormatBytes(bytes)
			if beyond {
				memory = "> 8 EiB"
			}
			fmt.Fprintf(progress, "  %-55s %5d layers × %7d (%d params): %10s %s\n", opts.Name, layers, hidden,
				params, memory, map[bool]string{true: "fits", false: "too large"}[ok])
		}
		if ok {
			row.Layers, row.Hidden, row.Params, row.Memory, row.Variant, row.Fits = layers, hidden, params, bytes, v, true
			row.Model = fmt.Sprint(m)
		}
		return ok, nil
	}
	n, err := largestFitting(family.Max, fits)
	if err == nil && n == family.Max {
		m, _ := family.Model(family.Max)
		err = fmt.Errorf("unbounded: a budget of %s fits even the largest model of the family onegpu builds (%s; "+
			"a model's tensors and parameter count stay under 2^46), so it does not limit the model", analysis.FormatBytes(budget), m)
	}
	return row, err // fitting probes only grow, so the row is the largest fitting one's
}

// scaledShape is the layers, width and parameters of a model of a scaled family.
func scaledShape(m train.Model) (layers, hidden int, params int64) {
	switch m := m.(type) {
	case models.GPT:
		return m.Config.Layers, m.Config.Hidden, m.Config.Params()
	case models.Llama:
		return m.Config.Layers, m.Config.Hidden, m.Config.Params()
	}
	return 0, 0, 0
}

// largestFitting returns the largest n in [1, top] for which fits holds, given that it holds for
// every n below one for which it holds (memory grows with n): doubling from 1, then bisecting, so
// that fits is called about 2·log2(n) times. It returns 0 when fits(1) fails, and stops at the
// first error.
func largestFitting(top int, fits func(n int) (bool, error)) (int, error) {
	if ok, err := fits(1); err != nil || !ok {
		return 0, err
	}
	low, high := 1, 0 // fits(low); high, when not 0, is the least n known not to fit
	for high == 0 {
		if low >= top {
			return low, nil
		}
		n := min(2*low, top)
		ok, err := fits(n)
		if err != nil {
			return low, err
		}
		if ok {
			low = n
		} else {
			high = n
		}
	}
	for high-low > 1 {
		mid := (low + high) / 2
		ok, err := fits(mid)
		if err != nil {
			return low, err
		}
		if ok {
			low = mid
		} else {
			high = mid
		}
	}
	return low, nil
}

// StateLadder is what SearchState tries, in order, until a configuration fits: Adam on the device
// (the tutorial's), 8-bit Adam, 8-bit Adam with the optimizer offloaded to the host. Each rung
// costs some time the FLOP-based estimate does not see (the quantization, then the transfers and
// the host's update), so the first rung that fits is the answer.
var StateLadder = []StateOptions{
	TutorialTechniques,
	{"+ 8-bit Adam", "adam8bit", "none"},
	StateTechniques,
}

// SearchState is Search over the rungs of StateLadder (SearchLadder with base's attention and
// cross-entropy): it returns the candidates of the first rung on which one fits, and that rung;
// when none fits anywhere, the last rung's (the smallest).
func SearchState(backend backends.Backend, base train.Config, budget int64, rate Throughput, compile bool) ([]Candidate, StateOptions, error) {
	rows, opts, _, err := SearchLadder(backend, base, budget, rate, compile, StateLadder, []Chunking{ChunkingOf(base)})
	return rows, opts, err
}
