package remat_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/internal/heapmeter"
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
		ratio := float64(m.Breakdown[analysis.Activations]) / float64(none.Breakdown[analysis.Activations])
		t.Logf("%-8s activations at the peak %6.1f MiB vs %6.1f MiB without (%.3fx); peak %6.1f vs %6.1f MiB; FLOPs %.2fx",
			spec, mib(m.Breakdown[analysis.Activations]), mib(none.Breakdown[analysis.Activations]), ratio,
			mib(m.PeakBytes), mib(none.PeakBytes), float64(m.FLOPs)/float64(none.FLOPs))
		if ratio > 0.35 {
			t.Errorf("%s: activations %.3fx of no checkpoint, want <= 0.35x", spec, ratio)
		}
	}
}

// TestActivationMemoryMeasured: the embedded backend allocates, with and without checkpoints, the
// buffers the simulation behind the estimate says (counted exactly, heapmeter.Allocated; within
// 1%), and checkpointing MLP and attention shrinks those allocations too. The sampled heap peak
// beside the estimate is BenchmarkRematVsNone's heap-MiB: it reads high on a loaded machine.
func TestActivationMemoryMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gradient steps of a 12-block model twice each")
	}
	measure := func(spec string) {
		a := analyze(t, stack12, spec, remat.NothingSaveable)
		s, _ := blocks.ParseSpec(spec)
		exec, err := context.NewExec(embedded(), context.New(), blocks.GradientStep(stack12, s, remat.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		x := blocks.RandomInput(stack12, 1)
		if _, err := exec.Exec(x); err != nil { // compiles and initializes the variables
			t.Fatal(err)
		}
		allocated, err := heapmeter.Allocated(func() error { _, err := exec.Exec(x); return err })
		if err != nil {
			t.Fatal(err)
		}
		ratio := float64(allocated) / float64(a.Memory.AllocatedBytes)
		t.Logf("%-8s allocated %6.1f MiB, simulated %6.1f MiB (%.4f, %d bytes more per op); estimated peak above the inputs %6.1f MiB",
			spec, mib(allocated), mib(a.Memory.AllocatedBytes), ratio, (allocated-a.Memory.AllocatedBytes)/int64(a.Memory.ExecutedNodes),
			mib(a.Memory.PeakTempBytes))
		if math.Abs(ratio-1) > 0.02 {
			t.Errorf("%s: allocated/simulated = %.4f, want within 2%%", spec, ratio)
		}
	}
	measure("none")
	measure("mlp,attn")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
