package plan

import (
	"fmt"
	"io"

	"github.com/gomlx/gomlx/backends"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// ScaledGPT is the tutorial's GPT (head dim 128, MLP ×4, sequence 512, batch 64) with hidden
// size 128·n and the tutorial's depth-to-width ratio, 12 layers per 1024 of hidden size: n = 8 is
// the tutorial's model.
func ScaledGPT(n int) models.GPTConfig {
	c := models.Presets["tutorial"]
	c.Hidden = 128 * n
	c.Layers = max(1, (12*n+4)/8)
	return c
}

// StateOptions are the optimizer and offload settings of one side of the largest-model comparison.
type StateOptions struct {
	Name      string `json:"name"`
	Optimizer string `json:"optimizer"`
	Offload   string `json:"offload"`
}

var (
	// TutorialTechniques is the tutorial's answer: Adam on the device.
	TutorialTechniques = StateOptions{"the tutorial's techniques (bf16, remat, micro-batches)", train.OptimizerAdam, train.OffloadNone}
	// StateTechniques adds 8-bit Adam and the optimizer's offload to the host.
	StateTechniques = StateOptions{"+ 8-bit Adam + optimizer offload", train.OptimizerAdam8bit, train.OffloadOptimizer}
)

// Largest is the largest scaled GPT that fits with one set of options.
type Largest struct {
	Options StateOptions `json:"options"`
	Layers  int          `json:"layers"`
	Hidden  int          `json:"hidden"`
	Params  int64        `json:"params"`
	Memory  int64        `json:"memory_bytes"`
	Variant Variant      `json:"variant"`
	Fits    bool         `json:"fits"` // false when not even the smallest model fits
}

// leanestVariants are the tutorial's most memory-saving settings: bfloat16 compute with remat of
// whole blocks, with and without micro-batches (accumulation adds a float32 gradient buffer but
// cuts activations).
var leanestVariants = []Variant{{"bfloat16", "block", 4}, {"bfloat16", "block", 1}}

// smallestFootprint returns the least memory of the leanest variants for model c with opts.
func smallestFootprint(backend backends.Backend, base train.Config, c models.GPTConfig, opts StateOptions, compile bool) (int64, Variant, error) {
	base.Model, base.GPT, base.Batch = "gpt", c, c.Batch
	base.Optimizer, base.Offload = opts.Optimizer, opts.Offload
	best, bestVariant := int64(-1), Variant{}
	for _, v := range leanestVariants {
		config, err := v.Apply(base)
		if err != nil {
			return 0, v, err
		}
		e, err := EstimateStep(backend, config, compile)
		if err != nil {
			return 0, v, err
		}
		if m := e.Memory(); best < 0 || m < best {
			best, bestVariant = m, v
		}
	}
	return best, bestVariant, nil
}

// LargestThatFits searches ScaledGPT for the largest n whose step fits budget with opts: doubling
// n, then bisecting. Memory grows with n, so the search is exact for the family. progress, when
// not nil, gets one line per model tried.
func LargestThatFits(backend backends.Backend, base train.Config, budget int64, opts StateOptions, compile bool, progress io.Writer) (Largest, error) {
	row := Largest{Options: opts}
	fits := func(n int) (bool, error) {
		c := ScaledGPT(n)
		m, v, err := smallestFootprint(backend, base, c, opts, compile)
		if err != nil {
			return false, fmt.Errorf("GPT %d layers × %d: %w", c.Layers, c.Hidden, err)
		}
		ok := m <= budget
		if progress != nil {
			fmt.Fprintf(progress, "  %-55s %2d layers × %5d (%d params): %10s %s\n", opts.Name, c.Layers, c.Hidden,
				c.Params(), ograph.FormatBytes(m), map[bool]string{true: "fits", false: "too large"}[ok])
		}
		if ok {
			row.Layers, row.Hidden, row.Params, row.Memory, row.Variant, row.Fits = c.Layers, c.Hidden, c.Params(), m, v, true
		}
		return ok, nil
	}
	if ok, err := fits(1); err != nil || !ok {
		return row, err
	}
	low, high := 1, 2 // fits(low); high is yet unknown
	for {
		ok, err := fits(high)
		if err != nil {
			return row, err
		}
		if !ok {
			break
		}
		low, high = high, 2*high
		if high > 1024 {
			return row, fmt.Errorf("the budget fits a GPT of hidden size %d: too large to search", 128*low)
		}
	}
	for high-low > 1 {
		mid := (low + high) / 2
		ok, err := fits(mid)
		if err != nil {
			return row, err
		}
		if ok {
			low = mid
		} else {
			high = mid
		}
	}
	return row, nil // fitting probes only grow, so the row is low's
}

// StateLadder is what SearchState tries, in order, until a configuration fits: Adam on the device
// (the tutorial's), 8-bit Adam, 8-bit Adam with the optimizer offloaded to the host. Each rung
// costs some time the FLOP-based estimate does not see (the quantization, then the transfers and
// the host's update), so the first rung that fits is the answer.
var StateLadder = []StateOptions{
	TutorialTechniques,
	{"+ 8-bit Adam", train.OptimizerAdam8bit, train.OffloadNone},
	StateTechniques,
}

// SearchState is Search over the rungs of StateLadder: it returns the candidates of the first
// rung on which one fits, and that rung; when none fits anywhere, the last rung's (the
// smallest).
func SearchState(backend backends.Backend, base train.Config, budget int64, rate Throughput, compile bool) ([]Candidate, StateOptions, error) {
	for i, opts := range StateLadder {
		c := base
		c.Optimizer, c.Offload = opts.Optimizer, opts.Offload
		rows, err := Search(backend, c, budget, rate, compile)
		if err != nil {
			return nil, opts, err
		}
		if Fastest(rows) >= 0 || i == len(StateLadder)-1 {
			return rows, opts, nil
		}
	}
	panic("unreachable: the ladder is not empty")
}
