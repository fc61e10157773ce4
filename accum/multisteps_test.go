package accum_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
)

// halvingSchedule is a learning-rate schedule in the style of GoMLX's cosineschedule (which runs in
// the model function, before the optimizer): it counts its own steps under /optimizers and sets the
// learning rate from them.
func halvingSchedule(ctx *context.Context, g *graph.Graph, base float64) {
	step := optimizers.IncrementGlobalStepGraph(ctx.In(optimizers.Scope).In("halving_schedule"), g, dtypes.Float32)
	lr := graph.MulScalar(graph.Pow(graph.Scalar(g, dtypes.Float32, 0.5), step), base)
	optimizers.LearningRateVar(ctx, dtypes.Float32, base).SetValueGraph(lr)
}

// mlpUpdate is a step that computes the tutorial MLP's mean loss on its inputs (x, labels) and
// hands it to opt, after the halving schedule when schedule is set.
func mlpUpdate(opt optimizers.Interface, schedule bool) accum.StepFn {
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		g := in[0].Graph()
		if schedule {
			halvingSchedule(ctx, g, 1e-2)
		}
		p := tutorialmlp.ContextParams(ctx, g, 1)
		loss := tutorialmlp.Loss(tutorialmlp.LogProbs(p, in[0], dtypes.Float32, dtypes.Float32), in[1])
		opt.UpdateGraph(ctx, g, loss)
		return []*graph.Node{graph.Neg(graph.Neg(loss))}
	}
}

// part returns the i-th of n equal slices of t along axis 0, as a new host tensor.
func part(t *tensors.Tensor, i, n int) *tensors.Tensor {
	dims := t.Shape().Clone().Dimensions
	rows := dims[0] / n
	size := t.Shape().Size() / dims[0] * rows
	dims[0] = rows
	var out *tensors.Tensor
	t.ConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float32:
			out = tensors.FromFlatDataAndDimensions(append([]float32(nil), v[i*size:(i+1)*size]...), dims...)
		case []int32:
			out = tensors.FromFlatDataAndDimensions(append([]int32(nil), v[i*size:(i+1)*size]...), dims...)
		default:
			panic(fmt.Sprintf("part: unsupported %T", flat))
		}
	})
	return out
}

func newMultiSteps(t testing.TB, inner optimizers.Interface, every int) *accum.MultiSteps {
	t.Helper()
	ms, err := accum.NewMultiSteps(inner, every)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// compareVariables reports variables of want that got lacks or that differ by more than tol
// (relative L2; 0 means bit for bit).
func compareVariables(t *testing.T, what string, got, want map[string][]float64, tol float64, names ...string) {
	t.Helper()
	if len(names) == 0 {
		for name := range want {
			names = append(names, name)
		}
	}
	for _, name := range names {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: no variable %s", what, name)
			continue
		}
		if tol == 0 {
			if fmt.Sprint(g) != fmt.Sprint(want[name]) {
				t.Errorf("%s: %s changed", what, name)
			}
		} else if e := relL2(g, want[name]); e > tol {
			t.Errorf("%s: %s differs by %.2g (relative), want <= %g", what, name, e, tol)
		}
	}
}

// TestMultiStepsEqualsBigBatch: two windows of 4 calls on quarters of two batches leave the same
// parameters, optimizer state and global step as two steps on the whole batches, with SGD (within
// 1e-6) and Adam (within 1e-5).
func TestMultiStepsEqualsBigBatch(t *testing.T) {
	const batch, every = 128, 4
	for _, backend := range backendsUnderTest() {
		for _, tc := range []struct {
			name  string
			inner func() optimizers.Interface
			tol   float64
		}{
			{"SGD", func() optimizers.Interface {
				return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.5)
			}, 1e-6},
			{"Adam", func() optimizers.Interface { return optimizers.Adam().LearningRate(1e-2).Done() }, 1e-5},
		} {
			t.Run(backend.Name()+"/"+tc.name, func(t *testing.T) {
				xs, ys := make([]*tensors.Tensor, 2), make([]*tensors.Tensor, 2)
				for b := range xs {
					xs[b], ys[b] = tutorialmlp.RandomBatch(uint64(20+b), batch)
				}
				big := context.New()
				bigExec := execStep(t, backend, big, mlpUpdate(tc.inner(), false))
				small := context.New()
				ms := newMultiSteps(t, tc.inner(), every)
				smallExec := execStep(t, backend, small, mlpUpdate(ms, false))
				for b := range xs {
					call(t, bigExec, xs[b], ys[b])
					for i := range every {
						call(t, smallExec, part(xs[b], i, every), part(ys[b], i, every))
					}
				}
				want, got := variables(t, big), variables(t, small)
				compareVariables(t, "after 2 windows", got, want, tc.tol)
				worst, moved := 0.0, 0.0
				for i, name := range tutorialmlp.ParamNames {
					worst = max(worst, relL2(got["/"+name], want["/"+name]))
					moved = max(moved, relL2(flatFloat64(tutorialmlp.InitialParams(1)[i]), want["/"+name]))
				}
				t.Logf("parameters moved by up to %.3g (relative); windows vs big steps differ by up to %.2g", moved, worst)
				stats, err := ms.Stats(small)
				if err != nil {
					t.Fatal(err)
				}
				if stats.MicroStep != 0 || stats.Count != 0 {
					t.Errorf("after 2 windows: %+v, want micro_step 0 and count 0", stats)
				}
				for name, acc := range got {
					if strings.HasPrefix(name, accum.DefaultScope+"/"+accum.GradientsScope+"/") && relL2(acc, make([]float64, len(acc))) != 0 {
						t.Errorf("accumulator %s is not zero after a window", name)
					}
				}
			})
		}
	}
}

// TestMultiStepsCounters: within a window of 3 calls nothing the optimizer or the schedule owns
// changes (bit for bit); on the third call the parameters, Adam's step, the global step and the
// schedule's step advance once.
func TestMultiStepsCounters(t *testing.T) {
	const every = 3
	ctx := context.New()
	ms := newMultiSteps(t, optimizers.Adam().Done(), every)
	exec := execStep(t, embedded(), ctx, mlpUpdate(ms, true))
	x, labels := tutorialmlp.RandomBatch(5, 32)
	counters := []string{"/global_step", "/AdamOptimizer/global_step", "/optimizers/halving_schedule/global_step"}
	var windowStart map[string][]float64
	for n := 1; n <= 2*every; n++ {
		call(t, exec, x, labels)
		vars := variables(t, ctx)
		stats, err := ms.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(n % every); stats.MicroStep != want {
			t.Errorf("call %d: micro_step %d, want %d", n, stats.MicroStep, want)
		}
		for _, c := range counters {
			if want := float64(n / every); len(vars[c]) != 1 || vars[c][0] != want {
				t.Errorf("call %d: %s = %v, want %g", n, c, vars[c], want)
			}
		}
		if want := 1e-2 * math.Pow(0.5, float64(n/every)); len(vars["/optimizers/learning_rate"]) != 1 ||
			math.Abs(vars["/optimizers/learning_rate"][0]-want) > 1e-9 {
			t.Errorf("call %d: learning rate %v, want %g", n, vars["/optimizers/learning_rate"], want)
		}
		switch {
		case n == 1:
			windowStart = vars
		case n%every != 0:
			compareVariables(t, fmt.Sprintf("call %d, inside a window", n), vars, windowStart, 0, modelVariables()...)
		default:
			for _, name := range modelVariables() {
				if fmt.Sprint(vars[name]) == fmt.Sprint(windowStart[name]) && n == every {
					t.Errorf("call %d ends the window but %s did not change", n, name)
				}
			}
			windowStart = vars
		}
	}
}

// TestMultiStepsWeightedByCount: four calls of UpdateGraphWithMean on quarters of a batch whose
// mask counts different numbers of examples in each quarter make the same SGD step as the masked
// mean of the whole batch; UpdateGraph's equal weights do not.
func TestMultiStepsWeightedByCount(t *testing.T) {
	const batch, every = 128, 4
	x, labels := tutorialmlp.RandomBatch(6, batch)
	mask := tensors.FromFlatDataAndDimensions(maskWithUnequalCounts(batch), batch)
	sgd := func() optimizers.Interface {
		return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.5)
	}
	maskedStep := func(update func(ctx *context.Context, g *graph.Graph, loss accum.Mean)) accum.StepFn {
		return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			loss := accum.MaskedMean(perExampleLoss(ctx, in[0], in[1], dtypes.Float32), in[2])
			update(ctx, in[0].Graph(), loss)
			return []*graph.Node{loss.Value()}
		}
	}
	big := context.New()
	bigExec := execStep(t, embedded(), big, maskedStep(func(ctx *context.Context, g *graph.Graph, loss accum.Mean) {
		sgd().UpdateGraph(ctx, g, loss.Value())
	}))
	call(t, bigExec, x, labels, mask)
	want := variables(t, big)

	for _, weighted := range []bool{true, false} {
		ctx := context.New()
		ms := newMultiSteps(t, sgd(), every)
		exec := execStep(t, embedded(), ctx, maskedStep(func(ctx *context.Context, g *graph.Graph, loss accum.Mean) {
			if weighted {
				ms.UpdateGraphWithMean(ctx, g, loss)
			} else {
				ms.UpdateGraph(ctx, g, loss.Value())
			}
		}))
		for i := range every {
			call(t, exec, part(x, i, every), part(labels, i, every), part(mask, i, every))
		}
		got := variables(t, ctx)
		if weighted {
			compareVariables(t, "UpdateGraphWithMean", got, want, 1e-6, modelVariables()...)
			continue
		}
		worst := 0.0
		for _, name := range modelVariables() {
			worst = max(worst, relL2(got[name], want[name]))
		}
		t.Logf("UpdateGraph (each call weighs the same): parameters differ by up to %.2g", worst)
		if worst < 1e-4 {
			t.Errorf("equal weights match the masked full batch within %.2g: the mask does not test weighting", worst)
		}
	}
}

// TestMultiStepsInTrainer: GoMLX's train.Trainer drives a MultiSteps like any optimizer: after 6
// train steps with an update every 3, the global step is 2 and the weight has moved.
func TestMultiStepsInTrainer(t *testing.T) {
	ctx := context.New()
	ms := newMultiSteps(t, optimizers.Adam().LearningRate(0.1).Done(), 3)
	model := func(ctx *context.Context, _ any, inputs []*graph.Node) []*graph.Node {
		w := ctx.VariableWithValue("w", float32(1)).ValueGraph(inputs[0].Graph())
		return []*graph.Node{graph.Mul(inputs[0], w)}
	}
	trainer := train.NewTrainer(embedded(), ctx, model, losses.MeanSquaredError, ms, nil, nil)
	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3}, 3)
	y := tensors.FromFlatDataAndDimensions([]float32{2, 4, 6}, 3)
	for range 6 {
		if _, err := trainer.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
			t.Fatal(err)
		}
	}
	vars := variables(t, ctx)
	if step := optimizers.GetGlobalStep(ctx); step != 2 {
		t.Errorf("global step %d after 6 train steps with an update every 3, want 2", step)
	}
	if w := vars["/w"]; len(w) != 1 || w[0] <= 1 {
		t.Errorf("w = %v, want it to have moved up from 1", w)
	}
}
