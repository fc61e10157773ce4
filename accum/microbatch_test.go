package accum_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
)

// fullBatchGradients returns the masked mean loss, the masked accuracy and the gradients of the
// tutorial MLP on the whole batch, computed the plain way: one loss, one Gradient call.
func fullBatchGradients(t *testing.T, backend backends.Backend, x, labels, mask *tensors.Tensor) (loss, acc float64, grads [][]float64) {
	ctx := context.New()
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x, labels, mask *graph.Node) []*graph.Node {
		losses := perExampleLoss(ctx, x, labels, dtypes.Float32)
		count := graph.ReduceAllSum(mask)
		loss := graph.Div(graph.ReduceAllSum(graph.Mul(losses, mask)), count)
		acc := graph.Div(graph.ReduceAllSum(graph.Mul(accuracy(ctx, x, labels), mask)), count)
		return append([]*graph.Node{loss, acc}, ctx.BuildTrainableVariablesGradientsGraph(loss)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	outs, err := exec.Exec(x, labels, mask)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs[2:] {
		grads = append(grads, flatFloat64(o))
	}
	return flatFloat64(outs[0])[0], flatFloat64(outs[1])[0], grads
}

// accumulatedGradients runs accum.Gradients with k micro-batches and returns the loss, the first
// metric, the count and the gradients.
func accumulatedGradients(t *testing.T, backend backends.Backend, k int, lossFn accum.LossFn, x, labels, mask *tensors.Tensor) (loss, metric, count float64, grads [][]float64) {
	ctx := context.New()
	exec := execStep(t, backend, ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		r := accum.Gradients(ctx, k, inputs, lossFn)
		for i, grad := range r.Gradients {
			if grad.DType() != dtypes.Float32 {
				t.Errorf("gradient #%d (%s) is %s, want float32", i, r.Variables[i].ScopeAndName(), grad.DType())
			}
		}
		metric := r.Loss
		if len(r.Metrics) > 0 {
			metric = r.Metrics[0]
		}
		return append([]*graph.Node{r.Loss, metric, r.Count}, r.Gradients...)
	})
	outs := call(t, exec, x, labels, mask)
	return outs[0][0], outs[1][0], outs[2][0], outs[3:]
}

// TestGradientsMatchFullBatch: for 1, 2, 4 and 8 micro-batches, the accumulated loss, metric and
// gradients equal those of the whole batch within 1e-6 (relative, float32), with every example
// counting and with a mask that gives the micro-batches different numbers of examples; averaging
// the micro-batches' means instead (the 2024 gradient-accumulation bug) is off by far more.
func TestGradientsMatchFullBatch(t *testing.T) {
	for _, backend := range backendsUnderTest() {
		t.Run(backend.Name(), func(t *testing.T) { testGradientsMatchFullBatch(t, backend) })
	}
}

func testGradientsMatchFullBatch(t *testing.T, backend backends.Backend) {
	const batch = 64
	ones := make([]float32, batch)
	for i := range ones {
		ones[i] = 1
	}
	for _, tc := range []struct {
		name string
		mask []float32
	}{
		{"all examples", ones},
		{"unequal counts", maskWithUnequalCounts(batch)},
	} {
		// Fresh tensors for every executable: a tensor used on one backend cannot move to another.
		inputs := func() (x, labels, mask *tensors.Tensor) {
			x, labels = tutorialmlp.RandomBatch(1, batch)
			return x, labels, tensors.FromFlatDataAndDimensions(tc.mask, batch)
		}
		x, labels, mask := inputs()
		wantLoss, wantAcc, wantGrads := fullBatchGradients(t, backend, x, labels, mask)
		wantCount := 0.0
		for _, m := range tc.mask {
			wantCount += float64(m)
		}
		for _, k := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/k=%d", tc.name, k), func(t *testing.T) {
				x, labels, mask := inputs()
				loss, acc, count, grads := accumulatedGradients(t, backend, k, maskedMLPLoss(dtypes.Float32), x, labels, mask)
				if e := math.Abs(loss-wantLoss) / wantLoss; e > 1e-6 {
					t.Errorf("loss %.8g, full batch %.8g (relative error %.2g)", loss, wantLoss, e)
				}
				if acc != wantAcc || count != wantCount {
					t.Errorf("accuracy %g over %g examples, full batch %g over %g", acc, count, wantAcc, wantCount)
				}
				worst := 0.0
				for i := range wantGrads {
					e := testkit.RelL2(grads[i], wantGrads[i])
					worst = max(worst, e)
					if e > 1e-6 {
						t.Errorf("gradient of %s: relative error %.2g", tutorialmlp.ParamNames[i], e)
					}
				}
				t.Logf("loss %.7f (full batch %.7f), largest gradient relative error %.2g", loss, wantLoss, worst)
			})
		}
	}

	// The naive way: each micro-batch's mean counts the same (MeanLoss of a masked mean).
	x, labels := tutorialmlp.RandomBatch(1, batch)
	mask := tensors.FromFlatDataAndDimensions(maskWithUnequalCounts(batch), batch)
	_, _, wantGrads := fullBatchGradients(t, backend, x, labels, mask)
	naive := accum.MeanLoss(func(ctx *context.Context, b []*graph.Node) *graph.Node {
		return accum.MaskedMean(perExampleLoss(ctx, b[0], b[1], dtypes.Float32), b[2]).Value()
	})
	x, labels = tutorialmlp.RandomBatch(1, batch)
	mask = tensors.FromFlatDataAndDimensions(maskWithUnequalCounts(batch), batch)
	_, _, _, grads := accumulatedGradients(t, backend, 4, naive, x, labels, mask)
	worst := 0.0
	for i := range wantGrads {
		worst = max(worst, testkit.RelL2(grads[i], wantGrads[i]))
	}
	t.Logf("mean of the 4 micro-batches' means: gradient relative error up to %.3f", worst)
	if worst < 0.01 {
		t.Errorf("the mean of micro-batch means is within %.2g of the full-batch gradients: the mask does not test weighting", worst)
	}
}

// TestGradientsBFloat16Compute: with bfloat16 compute, the gradients, loss and count come back in
// float32 and the 8-micro-batch gradients are close to the float32 full-batch ones.
func TestGradientsBFloat16Compute(t *testing.T) {
	const batch = 64
	x, labels := tutorialmlp.RandomBatch(2, batch)
	mask := tensors.FromFlatDataAndDimensions(maskWithUnequalCounts(batch), batch)
	_, _, wantGrads := fullBatchGradients(t, embedded(), x, labels, mask)
	ctx := context.New()
	exec := execStep(t, embedded(), ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		r := accum.Gradients(ctx, 8, inputs, maskedMLPLoss(dtypes.BFloat16))
		for _, n := range append([]*graph.Node{r.Loss, r.Count}, r.Gradients...) {
			if n.DType() != dtypes.Float32 {
				t.Errorf("%s is %s, want float32", n, n.DType())
			}
		}
		return r.Gradients
	})
	grads := call(t, exec, x, labels, mask)
	for i := range wantGrads {
		e := testkit.RelL2(grads[i], wantGrads[i])
		t.Logf("%-14s relative error vs float32: %.4f", tutorialmlp.ParamNames[i], e)
		if e > 0.05 {
			t.Errorf("gradient of %s: relative error %.3f vs float32, want < 0.05", tutorialmlp.ParamNames[i], e)
		}
	}
}

// mlpMeanLoss is the tutorial's mean cross-entropy as a LossFn.
var mlpMeanLoss = accum.MeanLoss(func(ctx *context.Context, b []*graph.Node) *graph.Node {
	p := tutorialmlp.ContextParams(ctx, b[0].Graph(), 1)
	return tutorialmlp.Loss(tutorialmlp.LogProbs(p, b[0], dtypes.Float32, dtypes.Float32), b[1])
})

// TestTrainStepAdam: the tutorial MLP (batch 512) trained for 5 Adam steps with 1 and with 4
// micro-batches goes through the same losses (within 1e-4) and ends with the same parameters.
func TestTrainStepAdam(t *testing.T) {
	const steps = 5
	losses := map[int][]float64{}
	params := map[int]map[string][]float64{}
	for _, k := range []int{1, 4} {
		ctx := context.New()
		step, err := adamStep(optimizers.Adam().LearningRate(1e-2).Done(), k, mlpMeanLoss)
		if err != nil {
			t.Fatal(err)
		}
		exec := execStep(t, embedded(), ctx, step)
		for s := range steps {
			x, labels := tutorialmlp.RandomBatch(uint64(10+s), tutorialmlp.Batch)
			losses[k] = append(losses[k], call(t, exec, x, labels)[0][0])
		}
		params[k] = variables(t, ctx)
		if got := params[k]["/global_step"]; len(got) != 1 || got[0] != steps {
			t.Errorf("k=%d: global_step %v after %d steps", k, got, steps)
		}
	}
	t.Logf("losses, 1 micro-batch:  %.6f", losses[1])
	t.Logf("losses, 4 micro-batches: %.6f", losses[4])
	for s := range steps {
		if d := math.Abs(losses[4][s] - losses[1][s]); d > 1e-4 {
			t.Errorf("step %d: loss %.6f with 4 micro-batches, %.6f with 1 (difference %.2g)", s+1, losses[4][s], losses[1][s], d)
		}
	}
	if losses[1][steps-1] >= losses[1][0] {
		t.Errorf("the loss did not fall: %.4f", losses[1])
	}
	for _, name := range modelVariables() {
		if e := testkit.RelL2(params[4][name], params[1][name]); e > 1e-4 {
			t.Errorf("%s after %d steps: relative difference %.2g between 4 and 1 micro-batches", name, steps, e)
		}
	}
}

// TestCheckSplit lists what CheckSplit accepts and the errors it names.
func TestCheckSplit(t *testing.T) {
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	for _, tc := range []struct {
		k      int
		inputs []shapes.Shape
		want   []string // substrings of the error; none: no error
	}{
		{4, []shapes.Shape{f32(512, 128), shapes.Make(dtypes.Int32, 512)}, nil},
		{1, []shapes.Shape{f32(7)}, nil},
		{512, []shapes.Shape{f32(512, 3)}, nil},
		{3, []shapes.Shape{f32(512, 128)}, []string{"batch of 512", "into 3 micro-batches", "nearest: 2 or 4"}},
		{1000, []shapes.Shape{f32(512)}, []string{"batch of 512", "1000 micro-batches", "nearest: 512)"}},
		{0, []shapes.Shape{f32(512)}, []string{"0 micro-batches", "at least 1"}},
		{2, []shapes.Shape{f32(512), f32(256)}, []string{"input #1 has 256", "input #0 has 512"}},
		{2, []shapes.Shape{f32(512), f32()}, []string{"input #1 is a scalar"}},
		{2, nil, []string{"no inputs"}},
	} {
		err := accum.CheckSplit(tc.k, tc.inputs...)
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("CheckSplit(%d, %v): unexpected error %v", tc.k, tc.inputs, err)
		case tc.want != nil && err == nil:
			t.Errorf("CheckSplit(%d, %v): no error, want one with %q", tc.k, tc.inputs, tc.want)
		case err != nil:
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckSplit(%d, %v) = %q, want it to say %q", tc.k, tc.inputs, err, w)
				}
			}
		}
	}
}

// TestGradientsPanics: building a step whose batch does not split, or whose loss function uses new
// variables after the first micro-batch, fails with a message that says so.
func TestGradientsPanics(t *testing.T) {
	inputs := []shapes.Shape{shapes.Make(dtypes.Float32, 64, tutorialmlp.Inputs), shapes.Make(dtypes.Int32, 64)}
	growing := accum.MeanLoss(func(ctx *context.Context, b []*graph.Node) *graph.Node {
		loss := graph.ReduceAllMean(b[0])
		if b[0].Shape().Dim(0) == 16 && ctx.IsReuse() { // every micro-batch after the first
			w := ctx.Checked(false).VariableWithValue(fmt.Sprintf("w%d", b[0].Id()), float32(1)).ValueGraph(b[0].Graph())
			return graph.Mul(loss, w)
		}
		w := ctx.VariableWithValue("w", float32(1)).ValueGraph(b[0].Graph())
		return graph.Mul(loss, w)
	})
	for _, tc := range []struct {
		name   string
		k      int
		lossFn accum.LossFn
		want   []string
	}{
		{"batch does not split", 3, mlpMeanLoss, []string{"accum.Gradients", "batch of 64", "3 micro-batches"}},
		{"new variables", 4, growing, []string{"every micro-batch must use the same variables"}},
		{"no trainable variables", 2, accum.MeanLoss(func(_ *context.Context, b []*graph.Node) *graph.Node {
			return graph.ReduceAllMean(b[0])
		}), []string{"no trainable variables"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := analysis.ContextProgram(embedded(), context.New(), "step", inputs, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
				return accum.Gradients(ctx, tc.k, in, tc.lossFn).Outputs()
			})
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestMaskedMean checks sums and counts with no mask, boolean and weight masks, a mask over the
// leading axis only, and NaN in masked-out positions.
func TestMaskedMean(t *testing.T) {
	nan := float32(math.NaN())
	values := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4, 5, 6, nan, nan}, 4, 2)
	for _, tc := range []struct {
		name            string
		mask            *tensors.Tensor
		sum, count, val float64
	}{
		{"boolean", tensors.FromFlatDataAndDimensions([]bool{true, false, true, true, true, false, false, false}, 4, 2), 13, 4, 3.25},
		{"weights", tensors.FromFlatDataAndDimensions([]float32{1, 0, 2, 0, 0, 0, 0, 0}, 4, 2), 7, 3, 7.0 / 3},
		{"leading axis", tensors.FromFlatDataAndDimensions([]bool{false, true, true, false}, 4), 18, 4, 4.5},
		{"nothing counts", tensors.FromFlatDataAndDimensions([]bool{false, false, false, false}, 4), 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec, err := graph.NewExec(embedded(), func(v, m *graph.Node) []*graph.Node {
				mean := accum.MaskedMean(graph.ConvertDType(v, dtypes.BFloat16), m)
				return []*graph.Node{mean.Sum, mean.Count, mean.Value()}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer exec.Finalize()
			outs, err := exec.Exec(values, tc.mask)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range outs {
				if o.DType() != dtypes.Float32 {
					t.Errorf("output %s, want float32", o.Shape())
				}
			}
			got := []float64{flatFloat64(outs[0])[0], flatFloat64(outs[1])[0], flatFloat64(outs[2])[0]}
			if want := []float64{tc.sum, tc.count, tc.val}; math.Abs(got[0]-want[0]) > 1e-6 || got[1] != want[1] || math.Abs(got[2]-want[2]) > 1e-6 {
				t.Errorf("sum, count, mean = %v, want %v", got, want)
			}
		})
	}
	t.Run("no mask", func(t *testing.T) {
		exec, err := graph.NewExec(embedded(), func(v *graph.Node) []*graph.Node {
			mean := accum.MaskedMean(graph.Slice(v, graph.AxisRange(0, 3)), nil)
			return []*graph.Node{mean.Sum, mean.Count}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		outs, err := exec.Exec(values)
		if err != nil {
			t.Fatal(err)
		}
		if sum, count := flatFloat64(outs[0])[0], flatFloat64(outs[1])[0]; sum != 21 || count != 6 {
			t.Errorf("sum %g over %g values, want 21 over 6", sum, count)
		}
	})
}
