package main

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// variant is one point of the tutorial's experiment grid: a precision, a remat choice and a number
// of micro-batches, applied to a base config.
type variant struct {
	Compute      string `json:"compute"` // "float32" or "bfloat16"
	Remat        string `json:"remat"`
	MicroBatches int    `json:"microbatches"`
}

func (v variant) String() string {
	return fmt.Sprintf("%-8s remat %-8s k=%d", v.Compute, v.Remat, v.MicroBatches)
}

// apply returns base with the variant's techniques.
func (v variant) apply(base train.Config) (train.Config, error) {
	c := base
	var err error
	if c.Policy, err = mixed.ParsePolicy("params=float32,compute=" + v.Compute + ",output=float32"); err != nil {
		return c, err
	}
	if c.Remat, err = remat.ParseSpec(v.Remat); err != nil {
		return c, err
	}
	c.MicroBatches, c.GPT.MicroBatch = v.MicroBatches, v.MicroBatches
	return c, c.Validate()
}

// tutorialGrid is the tutorial's experiment grid: float32 and bfloat16; no remat, remat of MLP and
// attention, remat of whole blocks; 1 and 4 micro-batches. The first variant is the baseline the
// ratios are taken against.
func tutorialGrid() []variant {
	var grid []variant
	for _, compute := range []string{"float32", "bfloat16"} {
		for _, r := range []string{"none", "mlp,attn", "block"} {
			for _, k := range []int{1, 4} {
				grid = append(grid, variant{compute, r, k})
			}
		}
	}
	return grid
}

// estimate is what onegpu knows about a train step without running it.
type estimate struct {
	PeakBytes       int64                  `json:"estimated_peak_bytes"`
	ArgumentBytes   int64                  `json:"argument_bytes"`
	ActivationBytes int64                  `json:"estimated_activation_bytes"`
	FLOPs           int64                  `json:"flops"`
	XLA             *ograph.CompiledMemory `json:"xla_compiled,omitempty"`
}

// estimateStep builds config's train step on backend and analyzes it; on an XLA backend it also
// compiles it for XLA's memory statistics.
func estimateStep(backend backends.Backend, config train.Config, compile bool) (estimate, error) {
	trainer, err := train.New(backend, config)
	if err != nil {
		return estimate{}, err
	}
	p, err := trainer.Program()
	if err != nil {
		return estimate{}, err
	}
	defer p.Graph.Finalize()
	m := ograph.Analyze(p)
	e := estimate{PeakBytes: m.PeakBytes, ArgumentBytes: m.ArgumentBytes, ActivationBytes: m.Breakdown[ograph.Activations], FLOPs: m.FLOPs}
	if compile {
		compiled, err := ograph.CompileProgram(p)
		if err != nil {
			return e, err
		}
		e.XLA = &compiled
	}
	return e, nil
}
