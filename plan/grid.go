package plan

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

var bfloat16 = dtypes.BFloat16

// Variant is one point of a grid: a compute dtype (parameters stay float32), the kinds of block a
// transformer rematerializes (remat.ParseKinds: "none", "mlp", "attn", "mlp,attn", "block") and a
// number of micro-batches.
type Variant struct {
	Compute      string `json:"compute"` // "float32" or "bfloat16"
	Remat        string `json:"remat"`
	MicroBatches int    `json:"microbatches"`
}

func (v Variant) String() string {
	return fmt.Sprintf("%-8s remat %-8s k=%d", v.Compute, v.Remat, v.MicroBatches)
}

// Apply returns base with the variant's techniques, validated: an error when its micro-batches do
// not divide the batch.
func (v Variant) Apply(base train.Config) (train.Config, error) {
	c := base
	var err error
	if c.Policy, err = mixed.ParsePolicy("params=float32,compute=" + v.Compute + ",output=float32"); err != nil {
		return c, err
	}
	if c.Remat.Kinds, err = remat.ParseKinds(v.Remat); err != nil {
		return c, err
	}
	c.MicroBatches = v.MicroBatches
	return c, c.Validate()
}

// TutorialGrid is the tutorial's experiment grid: float32 and bfloat16; no remat, remat of MLP and
// attention, remat of whole blocks; 1 and 4 micro-batches. The first variant is the baseline
// ratios are taken against.
func TutorialGrid() []Variant {
	var grid []Variant
	for _, compute := range []string{"float32", "bfloat16"} {
		for _, r := range []string{"none", "mlp,attn", "block"} {
			for _, k := range []int{1, 4} {
				grid = append(grid, Variant{compute, r, k})
			}
		}
	}
	return grid
}

// SearchGrid is what Search tries: every precision, remat choice and micro-batch count (powers of
// two up to 16 that divide the batch).
func SearchGrid(batch int) []Variant {
	var grid []Variant
	for _, compute := range []string{"float32", "bfloat16"} {
		for _, r := range []string{"none", "mlp", "attn", "mlp,attn", "block"} {
			for k := 1; k <= 16 && k <= batch; k *= 2 {
				if batch%k == 0 {
					grid = append(grid, Variant{compute, r, k})
				}
			}
		}
	}
	return grid
}

// Estimate is what onegpu knows about a train step without running it.
type Estimate struct {
	PeakBytes       int64                    `json:"estimated_peak_bytes"`
	ArgumentBytes   int64                    `json:"argument_bytes"`
	ActivationBytes int64                    `json:"estimated_activation_bytes"`
	FLOPs           int64                    `json:"flops"`
	XLA             *analysis.CompiledMemory `json:"xla_compiled,omitempty"`
	// CompileSeconds is how long XLA took to compile the step (with compile only; wall clock).
	CompileSeconds float64 `json:"compile_seconds,omitempty"`
	// Breakdown splits PeakBytes by kind (graph.Memory.Breakdown), indexed by graph.Kind.
	Breakdown map[analysis.Kind]int64 `json:"-"`
}

// Memory is the estimate's memory figure: XLA's compiled total when available, else the
// sequential-execution estimate.
func (e Estimate) Memory() int64 {
	if e.XLA != nil {
		return e.XLA.TotalBytes()
	}
	return e.PeakBytes
}

// EstimateStep builds config's train step on backend and analyzes it (analysis.Analyze); with compile
// (an XLA backend) it also compiles it for XLA's memory statistics. Nothing runs.
func EstimateStep(backend backends.Backend, config train.Config, compile bool) (Estimate, error) {
	trainer, err := train.New(backend, config)
	if err != nil {
		return Estimate{}, err
	}
	p, err := trainer.Program()
	if err != nil {
		return Estimate{}, err
	}
	defer p.Graph.Finalize()
	m := analysis.Analyze(p)
	e := Estimate{PeakBytes: m.PeakBytes, ArgumentBytes: m.ArgumentBytes, ActivationBytes: m.Breakdown[analysis.Activations], FLOPs: m.FLOPs,
		Breakdown: map[analysis.Kind]int64{}}
	for _, k := range analysis.Kinds() {
		e.Breakdown[k] = m.Breakdown[k]
	}
	if compile {
		start := time.Now()
		compiled, err := analysis.CompileProgram(p)
		if err != nil {
			return e, err
		}
		e.CompileSeconds = time.Since(start).Seconds()
		e.XLA = &compiled
	}
	return e, nil
}
