package remat_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/remat"
)

// stack12 is the memory tests' model: 12 blocks, sized so that a step allocates tens of MiB with
// and without checkpoints (the heap sampler's granularity) and runs in about a second.
var stack12 = blocks.Config{Batch: 4, Seq: 128, Width: 128, Heads: 4, Blocks: 12, Compute: dtypes.Float32}

// TestActivationMemory: on 12 MLP+attention blocks, checkpointing both sublayers (or whole
// blocks) leaves at most 0.35x of the activation bytes at the estimated peak of a gradient step.
func TestActivationMemory(t *testing.T) {
	none := analyze(t, stack12, "none", remat.NothingSaveable).Memory
	for _, spec := range []string{"mlp,attn", "block"} {
		m := analyze(t, stack12, spec, remat.NothingSaveable).Memory
		ratio := float64(m.Breakdown[ograph.Activations]) / float64(none.Breakdown[ograph.Activations])
		t.Logf("%-8s activations at the peak %6.1f MiB vs %6.1f MiB without (%.3fx); peak %6.1f vs %6.1f MiB; FLOPs %.2fx",
			spec, mib(m.Breakdown[ograph.Activations]), mib(none.Breakdown[ograph.Activations]), ratio,
			mib(m.PeakBytes), mib(none.PeakBytes), float64(m.FLOPs)/float64(none.FLOPs))
		if ratio > 0.35 {
			t.Errorf("%s: activations %.3fx of no checkpoint, want <= 0.35x", spec, ratio)
		}
	}
}

// TestActivationMemoryMeasured: the heap peak measured while the embedded backend (sequential
// mode) runs the steps agrees with the estimate within 15%, and the activation part of the
// measurement (the measured peak less the estimate's non-activation bytes) shrinks as estimated.
func TestActivationMemoryMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and measures two gradient steps of a 12-block model (about 30 s)")
	}
	type result struct{ estimated, measured, activations int64 }
	measure := func(spec string) result {
		a := analyze(t, stack12, spec, remat.NothingSaveable)
		s, _ := remat.ParseSpec(spec)
		exec, err := context.NewExec(embedded(), context.New(), blocks.GradientStep(stack12, s, remat.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		x := blocks.RandomInput(stack12, 1)
		if _, err := exec.Exec(x); err != nil { // compiles and initializes the variables
			t.Fatal(err)
		}
		// Freed buffers count on the heap until a collection catches up, which only ever adds:
		// the least of several runs is the faithful one.
		measured := int64(math.MaxInt64)
		for range 3 {
			h, err := ograph.MeasureHeapPeak(func() error { _, err := exec.Exec(x); return err })
			if err != nil {
				t.Fatal(err)
			}
			measured = min(measured, h.AboveBaseline())
		}
		r := result{a.Memory.PeakTempBytes, measured, a.Memory.Breakdown[ograph.Activations]}
		agreement := float64(r.measured) / float64(r.estimated)
		t.Logf("%-8s peak above the inputs: estimated %6.1f MiB, measured %6.1f MiB (%.3f)", spec, mib(r.estimated), mib(r.measured), agreement)
		if math.Abs(agreement-1) > 0.15 {
			t.Errorf("%s: measured/estimated = %.3f, want within 15%%", spec, agreement)
		}
		return r
	}
	none, both := measure("none"), measure("mlp,attn")
	// The measurement does not split by kind: take the estimate's other bytes (gradients,
	// parameters read, scratch) as they are and attribute the rest to activations.
	activations := func(r result) float64 { return float64(r.measured - (r.estimated - r.activations)) }
	ratio := activations(both) / activations(none)
	t.Logf("measured activations: %.1f MiB vs %.1f MiB without checkpoints (%.3fx; estimated %.3fx)",
		activations(both)/(1<<20), activations(none)/(1<<20), ratio, float64(both.activations)/float64(none.activations))
	if ratio > 0.35 {
		t.Errorf("measured activations %.3fx of no checkpoint, want <= 0.35x", ratio)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
