package accum_test

import (
	"fmt"
	"sort"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

// backendsUnderTest returns the embedded backend and, when a PJRT plugin is configured, XLA.
var backendsUnderTest = testkit.All

// perExampleLoss is the tutorial MLP's cross-entropy per example, in compute dtype (float32
// log-probabilities), with the MLP's variables created in ctx.
func perExampleLoss(ctx *context.Context, x, labels *graph.Node, compute dtypes.DType) *graph.Node {
	p := tutorialmlp.ContextParams(ctx, x.Graph(), 1)
	logp := tutorialmlp.LogProbs(p, graph.ConvertDType(x, compute), compute, compute)
	oneHot := graph.OneHot(labels, tutorialmlp.Classes, logp.DType())
	return graph.Neg(graph.ReduceSum(graph.Mul(logp, oneHot), -1))
}

// accuracy is the fraction of examples whose arg-max is the label, as per-example 0/1 values.
func accuracy(ctx *context.Context, x, labels *graph.Node) *graph.Node {
	p := tutorialmlp.ContextParams(ctx, x.Graph(), 1)
	logp := tutorialmlp.LogProbs(p, x, dtypes.Float32, dtypes.Float32)
	predicted := graph.ConvertDType(graph.ArgMax(logp, -1), labels.DType())
	return graph.ConvertDType(graph.Equal(predicted, labels), dtypes.Float32)
}

// maskedMLPLoss is the tutorial MLP's masked mean cross-entropy, with the masked accuracy as a
// metric; inputs are x, labels and a float32 mask.
func maskedMLPLoss(compute dtypes.DType) accum.LossFn {
	return func(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
		x, labels, mask := batch[0], batch[1], batch[2]
		loss := accum.MaskedMean(perExampleLoss(ctx, x, labels, compute), mask)
		return loss, []accum.Mean{accum.MaskedMean(accuracy(ctx, x, labels), mask)}
	}
}

// execStep compiles step for ctx on backend.
func execStep(t testing.TB, backend backends.Backend, ctx *context.Context, step accum.StepFn) *context.Exec {
	t.Helper()
	exec, err := context.NewExec(backend, ctx, step)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exec.Finalize)
	return exec
}

// call executes exec on inputs and returns its outputs as float64 slices.
func call(t testing.TB, exec *context.Exec, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return testkit.FloatsOf(testkit.Call(t, exec, inputs...))
}

// flatFloat64 returns a tensor's values as float64.
var flatFloat64 = testkit.Floats

// variables returns the values of ctx's variables as float64 slices, by scope and name.
func variables(t testing.TB, ctx *context.Context) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for v := range ctx.IterVariables() {
		value, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		out[v.ScopeAndName()] = flatFloat64(value)
	}
	return out
}

// modelVariables lists the tutorial MLP's variables by scope and name.
func modelVariables() []string {
	names := make([]string, len(tutorialmlp.ParamNames))
	for i, n := range tutorialmlp.ParamNames {
		names[i] = "/" + n
	}
	sort.Strings(names)
	return names
}

// maskWithUnequalCounts returns a float32 mask of batch rows in which the i-th block of batch/8
// rows keeps about (i+1)/8 of its rows: every split into 2, 4 or 8 micro-batches has micro-batches
// with different numbers of rows that count.
func maskWithUnequalCounts(batch int) []float32 {
	block := batch / 8
	m := make([]float32, batch)
	for r := range m {
		if r%block < (r/block+1)*block/8 {
			m[r] = 1
		}
	}
	return m
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// adamStep is a train step that applies the batch's gradients over k micro-batches with opt (which
// must apply gradients, as GoMLX's Adam does); it returns the loss and the metrics.
func adamStep(opt optimizers.Interface, k int, lossFn accum.LossFn) (accum.StepFn, error) {
	withGrads, ok := opt.(gomlxtrain.OptimizeWithGradients)
	if !ok {
		return nil, fmt.Errorf("optimizer %T cannot apply gradients", opt)
	}
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		r := accum.Gradients(ctx, k, inputs, lossFn)
		withGrads.UpdateGraphWithGradients(ctx, r.Gradients, r.Loss.DType())
		return r.Outputs()
	}, nil
}
