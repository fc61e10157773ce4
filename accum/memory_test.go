package accum_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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
	ograph "github.com/onegpu/onegpu/graph"
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
func estimate(t testing.TB, backend backends.Backend, k int, batch []*tensors.Tensor) *ograph.Memory {
	inputs := make([]shapes.Shape, len(batch))
	for i, b := range batch {
		inputs[i] = b.Shape()
	}
	p, err := ograph.ContextProgram(backend, context.New(), fmt.Sprintf("deep_mlp_k%d", k), inputs, deepStep(t, k))
	if err != nil {
		t.Fatal(err)
	}
	return ograph.Analyze(p)
}

// measure executes the step once to compile it and initialize the variables, then measures the
// heap while it runs again (see lowestHeapPeak).
func measure(t testing.TB, backend backends.Backend, k int, batch []*tensors.Tensor) int64 {
	ctx := context.New()
	exec := execStep(t, backend, ctx, deepStep(t, k))
	call(t, exec, batch...)
	args := make([]any, len(batch))
	for i, b := range batch {
		args[i] = b
	}
	lowest, readings := lowestHeapPeak(t, func() error { _, err := exec.Exec(args...); return err })
	t.Logf("k=%d: heap peaks above the baseline: %s MiB", k, readings)
	return lowest
}

// lowestHeapPeak measures the heap peak above the baseline while run runs (graph.MeasureHeapPeak),
// three times, and returns the lowest and all readings. Sampling errs upwards (buffers freed just
// before the peak may not be collected yet), so the lowest of a few runs is the best reading.
func lowestHeapPeak(t testing.TB, run func() error) (int64, string) {
	lowest := int64(math.MaxInt64)
	var readings []string
	for range 3 {
		h, err := ograph.MeasureHeapPeak(run)
		if err != nil {
			t.Fatal(err)
		}
		lowest = min(lowest, h.AboveBaseline())
		readings = append(readings, fmt.Sprintf("%.1f", mib(h.AboveBaseline())))
	}
	return lowest, strings.Join(readings, ", ")
}

// TestMicroBatchesSaveActivations: with 4 micro-batches the activations alive at the estimated peak
// of the deep MLP's Adam step are at most 0.3 of those with 1 (the whole batch, which the step
// holds either way, included), and the measured heap peaks agree with the estimates (within 15% or
// 4 MiB) and show the saving (k=4 at most 0.35 of k=1).
func TestMicroBatchesSaveActivations(t *testing.T) {
	batch := deepBatchTensors(1)
	m1, m4 := estimate(t, embedded(), 1, batch), estimate(t, embedded(), 4, batch)
	for k, m := range map[int]*ograph.Memory{1: m1, 4: m4} {
		t.Logf("k=%d: estimated peak %.1f MiB (step allocates %.1f MiB), activations %.1f MiB, at %s %s",
			k, mib(m.PeakBytes), mib(m.PeakTempBytes), mib(m.Breakdown[ograph.Activations]), m.PeakAt.Type(), m.PeakAt.Shape())
		for _, x := range m.AtPeak[:3] {
			t.Logf("    %s %s %.2f %s", x.Label(), x.Node.Shape(), mib(x.Bytes), x.Kind)
		}
	}
	ratio := float64(m4.Breakdown[ograph.Activations]) / float64(m1.Breakdown[ograph.Activations])
	t.Logf("activations at the peak, 4 vs 1 micro-batches: %.3f", ratio)
	if ratio > 0.3 {
		t.Errorf("activations at the peak with 4 micro-batches are %.3f of those with 1, want <= 0.3", ratio)
	}
	if testing.Short() {
		t.Skip("the heap measurement executes the two steps 4 times each")
	}
	h1, h4 := measure(t, embedded(), 1, batch), measure(t, embedded(), 4, batch)
	for _, c := range []struct {
		k                   int
		estimated, measured int64
	}{{1, m1.PeakTempBytes, h1}, {4, m4.PeakTempBytes, h4}} {
		t.Logf("k=%d: step allocates %.1f MiB estimated, %.1f MiB measured (GOGC=%d; ratio %.3f)",
			c.k, mib(c.estimated), mib(c.measured), ograph.MeasureGCPercent, float64(c.measured)/float64(c.estimated))
		// The sampler reads 0-4 MiB high whatever the step's size (more on a loaded machine: the
		// collector falls behind), so the tolerance is 15% or 4 MiB, whichever is larger.
		if tol := max(0.15*float64(c.estimated), 4<<20); math.Abs(float64(c.measured-c.estimated)) > tol {
			t.Errorf("k=%d: measured %.1f MiB, estimated %.1f MiB: more than %.1f MiB apart", c.k, mib(c.measured), mib(c.estimated), tol/(1<<20))
		}
	}
	estimated, measured := float64(m4.PeakTempBytes)/float64(m1.PeakTempBytes), float64(h4)/float64(h1)
	t.Logf("heap peak above the inputs, 4 vs 1 micro-batches: estimated %.3f, measured %.3f", estimated, measured)
	if measured > 0.35 {
		t.Errorf("the measured heap peak with 4 micro-batches is %.3f of that with 1 (estimated %.3f), want <= 0.35", measured, estimated)
	}
}
