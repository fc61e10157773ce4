package plan

import (
	"fmt"
	"io"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// StreamedTechniques are plan --largest's streamed rows: the weights streamed from host memory
// (--offload params) with Adam, and with 8-bit Adam.
var StreamedTechniques = []StateOptions{
	{"streamed weights (--offload params) + Adam", "adam", "params"},
	{"streamed weights (--offload params) + 8-bit Adam", "adam8bit", "params"},
}

// Scaled is a family of models of growing size: the model of scale n (n >= 1), larger with n.
type Scaled struct {
	// Model returns the model of scale n.
	Model func(n int) (train.Model, error)
	// Max is the largest n the family builds.
	Max int
	// WithLayers, when set, returns a model of the family with another number of layers, the
	// rest the same: LargestOf then estimates a deep model from a one- and a two-layer one (the
	// sequential estimate is affine in layers). Nil: every size is built in full.
	WithLayers func(m train.Model, layers int) train.Model
	// Name says what the family is, for people.
	Name string
}

// ScaledGPTs is ScaledGPT as a Scaled family.
func ScaledGPTs() Scaled {
	return Scaled{Model: func(n int) (train.Model, error) { return models.GPT{Config: ScaledGPT(n)}, nil }, Max: MaxScale(),
		WithLayers: func(m train.Model, layers int) train.Model {
			g := m.(models.GPT)
			g.Config.Layers = layers
			return g
		},
		Name: "GPT of the tutorial's shape (head dim 128, MLP ×4, sequence 512, batch 64)"}
}

// LargestStreamed searches family for the largest model whose streamed step (EstimateStreamed)
// fits budget bytes of device memory and hostBudget bytes of host memory, with opts' optimizer,
// at base's batch and sequence, bfloat16 compute and the leanest remat and micro-batches
// (leanestVariants: of those that fit both budgets, the fewest device bytes): doubling n, then bisecting, as LargestThatFits. Its
// row's Memory is the device's bytes, HostMemory the host's; Step the step's time and bound at
// so's rates.
func LargestStreamed(backend backends.Backend, base train.Config, family Scaled, budget, hostBudget int64, opts StateOptions,
	so StreamOptions, progress io.Writer) (Largest, error) {
	row := Largest{Options: opts}
	var err error
	if base.Optimizer, err = optim.ByName(opts.Optimizer, optim.Settings{}); err != nil {
		return row, err
	}
	fits := func(n int) (bool, error) {
		row.Evaluations++
		m, err := family.Model(n)
		if err != nil {
			return false, err
		}
		var best Streamed
		var bestVariant Variant
		found := false
		for _, v := range leanestVariants {
			config := base
			config.Model = m
			if config, err = v.Apply(config); err != nil {
				continue // micro-batches that do not divide the batch
			}
			s, err := EstimateStreamed(backend, config, so)
			if err != nil {
				return false, fmt.Errorf("%s: %w", m, err)
			}
			// The variant that fits both budgets with the fewest device bytes, else the fewest
			// device bytes (a variant whose inputs overflow to the host may fit the device only).
			fitsBoth := s.DeviceBytes <= budget && s.HostBytes <= hostBudget
			bestFits := found && best.DeviceBytes <= budget && best.HostBytes <= hostBudget
			if !found || fitsBoth && !bestFits || fitsBoth == bestFits && s.DeviceBytes < best.DeviceBytes {
				best, bestVariant, found = s, v, true
			}
		}
		if !found {
			return false, fmt.Errorf("%s: no micro-batch count of %v divides the batch of %d", m, leanestVariants, base.Batch)
		}
		ok := best.DeviceBytes <= budget && best.HostBytes <= hostBudget
		if progress != nil {
			fmt.Fprintf(progress, "  %-50s %-40s %12d trained params: device %10s, host %10s %s\n", opts.Name, fmt.Sprint(m), best.Params,
				analysis.FormatBytes(best.DeviceBytes), analysis.FormatBytes(best.HostBytes), map[bool]string{true: "fits", false: "too large"}[ok])
		}
		if ok {
			row.Params, row.Memory, row.HostMemory, row.Variant, row.Fits = best.Params, best.DeviceBytes, best.HostBytes, bestVariant, true
			row.Model, row.Step = fmt.Sprint(m), &best.StepTime
			// The model's parameters (a LoRA run trains its adapters only: best.Params).
			switch m := m.(type) {
			case models.GPT:
				row.Layers, row.Hidden, row.Params = m.Config.Layers, m.Config.Hidden, m.Config.Params()
			case models.Llama:
				row.Layers, row.Hidden, row.Params = m.Config.Layers, m.Config.Hidden, m.Config.Params()
			}
		}
		return ok, nil
	}
	n, err := largestFitting(family.Max, fits)
	if err == nil && n == family.Max {
		err = fmt.Errorf("unbounded: a device budget of %s and a host budget of %s fit even the largest model of the family onegpu builds (%s), so they do not limit the model",
			analysis.FormatBytes(budget), analysis.FormatBytes(hostBudget), row.Model)
	}
	return row, err
}
