package accum_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/heapmeter"
)

// Sizes of the deep MLP the memory test and benchmark train: its activations (depth × batch ×
// width) dwarf its input batch and its weights, as a transformer's do, and a step allocates tens
// of MiB, enough for the heap measurement to be reliable.
const (
	deepBatch   = 16384
	deepInputs  = 16
	deepWidth   = 128
	deepDepth   = 6
	deepOutputs = 8
)

// deepMLPLoss is the squared error of a tanh MLP (deepDepth layers of deepWidth, then a linear
// layer to deepOutputs) against targets, averaged over the examples; the inputs are x [batch,
// deepInputs] and targets [batch, deepOutputs].
var deepMLPLoss = accum.MaskedLoss(func(ctx *context.Context, b []*graph.Node) (*graph.Node, *graph.Node) {
	dense := func(i int, h *graph.Node, width int) *graph.Node {
		c := ctx.In(fmt.Sprintf("layer_%d", i)).WithInitializer(initializers.RandomNormalFn(ctx, 1/math.Sqrt(float64(h.Shape().Dim(1)))))
		w := c.VariableWithShape("kernel", shapes.Make(dtypes.Float32, h.Shape().Dim(1), width)).ValueGraph(h.Graph())
		bias := c.VariableWithShape("bias", shapes.Make(dtypes.Float32, width)).ValueGraph(h.Graph())
		return graph.Add(graph.Dot(h, w), graph.InsertAxes(bias, 0))
	}
	h := b[0]
	for i := range deepDepth {
		h = graph.Tanh(dense(i, h, deepWidth))
	}
	return graph.ReduceSum(graph.Square(graph.Sub(dense(deepDepth, h, deepOutputs), b[1])), -1), nil
})

// deepBatchTensors returns a random batch for deepMLPLoss.
func deepBatchTensors(seed uint64) []*tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, 3))
	normal := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	return []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions(normal(deepBatch*deepInputs), deepBatch, deepInputs),
		tensors.FromFlatDataAndDimensions(normal(deepBatch*deepOutputs), deepBatch, deepOutputs),
	}
}

// deepStep is an Adam train step of the deep MLP with k micro-batches.
func deepStep(t testing.TB, k int) accum.StepFn {
	step, err := adamStep(optimizers.Adam().Done(), k, deepMLPLoss)
	if err != nil {
		t.Fatal(err)
	}
	return step
}

// estimate analyzes the deep MLP's step with k micro-batches.
func estimate(t testing.TB, backend backends.Backend, k int, batch []*tensors.Tensor) *analysis.Memory {
	inputs := make([]shapes.Shape, len(batch))
	for i, b := range batch {
		inputs[i] = b.Shape()
	}
	p, err := analysis.ContextProgram(backend, context.New(), fmt.Sprintf("deep_mlp_k%d", k), inputs, deepStep(t, k))
	if err != nil {
		t.Fatal(err)
	}
	return analysis.Analyze(p)
}

// allocated executes the step once to compile it and initialize the variables, then counts what
// it allocates when it runs again (heapmeter.Allocated: exact, whatever the machine's load).
func allocated(t testing.TB, backend backends.Backend, k int, batch []*tensors.Tensor) int64 {
	ctx := context.New()
	exec := execStep(t, backend, ctx, deepStep(t, k))
	call(t, exec, batch...)
	args := make([]any, len(batch))
	for i, b := range batch {
		args[i] = b
	}
	n, err := heapmeter.Allocated(func() error { _, err := exec.Exec(args...); return err })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMicroBatchesSaveActivations: with 4 micro-batches the activations alive at the estimated peak
// of the deep MLP's Adam step are at most 0.3 of those with 1 (the whole batch, which the step
// holds either way, included); the embedded backend allocates what the simulation behind the
// estimates says (counted exactly, within 1%) and shows the saving (k=4 allocates at most 0.35 of
// k=1). The sampled heap peaks are BenchmarkMicroBatches's: they read high on a loaded machine.
func TestMicroBatchesSaveActivations(t *testing.T) {
	batch := deepBatchTensors(1)
	m1, m4 := estimate(t, embedded(), 1, batch), estimate(t, embedded(), 4, batch)
	for k, m := range map[int]*analysis.Memory{1: m1, 4: m4} {
		t.Logf("k=%d: estimated peak %.1f MiB (step allocates %.1f MiB), activations %.1f MiB, at %s %s",
			k, mib(m.PeakBytes), mib(m.PeakTempBytes), mib(m.Breakdown[analysis.Activations]), m.PeakAt.Type(), m.PeakAt.Shape())
		for _, x := range m.AtPeak[:3] {
			t.Logf("    %s %s %.2f %s", x.Label(), x.Node.Shape(), mib(x.Bytes), x.Kind)
		}
	}
	ratio := float64(m4.Breakdown[analysis.Activations]) / float64(m1.Breakdown[analysis.Activations])
	t.Logf("activations at the peak, 4 vs 1 micro-batches: %.3f", ratio)
	if ratio > 0.3 {
		t.Errorf("activations at the peak with 4 micro-batches are %.3f of those with 1, want <= 0.3", ratio)
	}
	if testing.Short() {
		t.Skip("counting the allocations executes the two steps twice each")
	}
	a1, a4 := allocated(t, embedded(), 1, batch), allocated(t, embedded(), 4, batch)
	for _, c := range []struct {
		k, ops               int
		simulated, allocated int64
	}{{1, m1.ExecutedNodes, m1.AllocatedBytes, a1}, {4, m4.ExecutedNodes, m4.AllocatedBytes, a4}} {
		ratio := float64(c.allocated) / float64(c.simulated)
		t.Logf("k=%d: the step allocates %.1f MiB, simulated %.1f MiB (ratio %.4f, %d bytes more per op)", c.k, mib(c.allocated),
			mib(c.simulated), ratio, (c.allocated-c.simulated)/int64(c.ops))
		if math.Abs(ratio-1) > 0.01 {
			t.Errorf("k=%d: allocated/simulated = %.4f, want within 1%%", c.k, ratio)
		}
	}

}
