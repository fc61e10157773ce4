package accum_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/mixed"
)

// The loss scales of the mixed package are accum loss scales.
var (
	_ accum.LossScale = mixed.NoOpLossScale{}
	_ accum.LossScale = mixed.StaticLossScale(1024)
	_ accum.LossScale = mixed.NewDynamicLossScale()
	_ accum.LossScale = mixed.LossScale(nil)

	_ accum.ScaledGradientsApplier = (*mixed.Optimizer)(nil)
)

// withInf returns a copy of x with one value set to +Inf.
func withInf(x *tensors.Tensor) *tensors.Tensor {
	bad, _ := x.Clone()
	bad.MutableFlatData(func(flat any) { flat.([]float32)[17] = float32(math.Inf(1)) })
	return bad
}

// withoutState drops MultiSteps' and the loss scale's own variables, which change on every call.
func withoutState(vars map[string][]float64) map[string][]float64 {
	out := map[string][]float64{}
	for name, v := range vars {
		if !strings.HasPrefix(name, accum.DefaultScope+"/") && !strings.HasPrefix(name, mixed.DefaultLossScaleScope+"/") {
			out[name] = v
		}
	}
	return out
}

// TestMultiStepsNonFiniteWindow: with mixed's dynamic loss scale, a window whose second call has an
// infinite input changes nothing the model, Adam or the schedule own (bit for bit), halves the scale
// once at the end of the window (not before), counts one skipped window and empties the
// accumulators; the windows before and after it are applied, and a finite window moves the model as
// the same window without a loss scale does.
func TestMultiStepsNonFiniteWindow(t *testing.T) {
	const every = 4
	x, labels := tutorialmlp.RandomBatch(8, 32)
	ls := mixed.NewDynamicLossScale()
	ctx := context.New()
	ms := newMultiSteps(t, optimizers.Adam().LearningRate(1e-2).Done(), every).WithLossScale(ls)
	exec := execStep(t, embedded(), ctx, mlpUpdate(ms, true))
	unscaled := context.New()
	unscaledExec := execStep(t, embedded(), unscaled, mlpUpdate(newMultiSteps(t, optimizers.Adam().LearningRate(1e-2).Done(), every), true))

	scale := func() float64 {
		s, err := ls.Current(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for range every {
		call(t, exec, x, labels)
		call(t, unscaledExec, x, labels)
	}
	applied := variables(t, ctx)
	compareVariables(t, "a finite window with and without loss scale", withoutState(applied), withoutState(variables(t, unscaled)), 1e-6)
	if applied["/global_step"][0] != 1 || scale() != 1<<15 {
		t.Fatalf("after the first window: global_step %v, scale %g; want 1 and 32768", applied["/global_step"], scale())
	}

	for i := range every {
		in := x
		if i == 1 {
			in = withInf(x)
		}
		call(t, exec, in, labels)
		if i < every-1 && scale() != 1<<15 {
			t.Errorf("call %d of the spoiled window: the scale changed to %g before the window ended", i+1, scale())
		}
	}
	skipped := variables(t, ctx)
	compareVariables(t, "after the spoiled window", withoutState(skipped), withoutState(applied), 0)
	if scale() != 1<<14 {
		t.Errorf("after the spoiled window the scale is %g, want 16384", scale())
	}
	stats, err := ms.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats != (accum.MultiStepsStats{MicroStep: 0, Count: 0, SkippedWindows: 1}) {
		t.Errorf("after the spoiled window: %+v, want one skipped window and an empty one started", stats)
	}
	for name, v := range skipped {
		if strings.HasPrefix(name, accum.DefaultScope+"/"+accum.GradientsScope+"/") && relL2(v, make([]float64, len(v))) != 0 {
			t.Errorf("accumulator %s is not zero after the spoiled window", name)
		}
	}

	for range every {
		call(t, exec, x, labels)
	}
	after := variables(t, ctx)
	if after["/global_step"][0] != 2 {
		t.Errorf("after a finite window following the spoiled one, global_step is %v, want 2", after["/global_step"])
	}
	for _, name := range modelVariables() {
		if fmt.Sprint(after[name]) == fmt.Sprint(applied[name]) {
			t.Errorf("%s did not change in the window after the spoiled one", name)
		}
	}
}

// TestScaledTrainStep: with mixed's loss-scaled Adam, 4 micro-batches follow 1 micro-batch step for
// step; a step with an infinite input changes no parameter, halves the scale and counts a skip.
func TestScaledTrainStep(t *testing.T) {
	const batch, steps = 128, 3
	params := map[int]map[string][]float64{}
	for _, k := range []int{1, 4} {
		ctx := context.New()
		opt := mixed.WithLossScale(optimizers.Adam().LearningRate(1e-2).Done(), mixed.NewDynamicLossScale())
		step, err := accum.ScaledTrainStep(opt, opt.LossScale(), k, mlpMeanLoss)
		if err != nil {
			t.Fatal(err)
		}
		exec := execStep(t, embedded(), ctx, step)
		for s := range steps {
			x, labels := tutorialmlp.RandomBatch(uint64(30+s), batch)
			call(t, exec, x, labels)
		}
		params[k] = variables(t, ctx)
		x, labels := tutorialmlp.RandomBatch(40, batch)
		call(t, exec, withInf(x), labels)
		compareVariables(t, "after a non-finite step", withoutState(variables(t, ctx)), withoutState(params[k]), 0, modelVariables()...)
		stats, err := opt.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if stats.SkippedSteps != 1 || stats.LossScale != 1<<14 {
			t.Errorf("k=%d after a non-finite step: %+v, want 1 skipped step and scale 16384", k, stats)
		}
	}
	compareVariables(t, "4 vs 1 micro-batches", params[4], params[1], 1e-5, modelVariables()...)
}

// TestTrainStepWithMultiSteps: 2 calls of 2 micro-batches each (TrainStep with a MultiSteps) make
// the same SGD step as the whole batch at once, without and with a static loss scale.
func TestTrainStepWithMultiSteps(t *testing.T) {
	const batch = 128
	x, labels := tutorialmlp.RandomBatch(9, batch)
	sgd := func() optimizers.Interface {
		return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.5)
	}
	big := context.New()
	bigStep, err := accum.TrainStep(sgd(), 1, mlpMeanLoss)
	if err != nil {
		t.Fatal(err)
	}
	call(t, execStep(t, embedded(), big, bigStep), x, labels)
	want := variables(t, big)

	for _, ls := range []accum.LossScale{nil, mixed.StaticLossScale(1024)} {
		ctx := context.New()
		ms := newMultiSteps(t, sgd(), 2).WithLossScale(ls)
		step, err := accum.TrainStep(ms, 2, mlpMeanLoss)
		if err != nil {
			t.Fatal(err)
		}
		exec := execStep(t, embedded(), ctx, step)
		for i := range 2 {
			call(t, exec, part(x, i, 2), part(labels, i, 2))
		}
		compareVariables(t, fmt.Sprintf("loss scale %v", ls), variables(t, ctx), want, 1e-6, modelVariables()...)
	}
}

// TestConstructorErrors: what NewMultiSteps, TrainStep and ScaledTrainStep refuse, and why.
func TestConstructorErrors(t *testing.T) {
	adam := optimizers.Adam().Done()
	scaled := mixed.WithLossScale(optimizers.Adam().Done(), nil)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no steps", second(accum.NewMultiSteps(adam, 0)), "at least 1"},
		{"wrapped loss scale", second(accum.NewMultiSteps(scaled, 4)), "MultiSteps.WithLossScale"},
		{"no micro-batches", second(accum.TrainStep(adam, 0, mlpMeanLoss)), "at least 1"},
		{"loss-scaled optimizer", second(accum.TrainStep(scaled, 2, mlpMeanLoss)), "ScaledTrainStep"},
		{"no loss function", second(accum.TrainStep(adam, 2, nil)), "no loss function"},
		{"no loss scale", second(accum.ScaledTrainStep(scaled, nil, 2, mlpMeanLoss)), "loss scale"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one that says %q", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestApplyResultChecksScaling: a MultiSteps refuses gradients scaled differently from its own
// setting, while the graph is built.
func TestApplyResultChecksScaling(t *testing.T) {
	inputs := []shapes.Shape{shapes.Make(dtypes.Float32, 64, tutorialmlp.Inputs), shapes.Make(dtypes.Int32, 64)}
	sgd := optimizers.StochasticGradientDescent()
	for _, tc := range []struct {
		name   string
		ms     *accum.MultiSteps
		scaled bool
		want   string
	}{
		{"scaled gradients, no loss scale", newMultiSteps(t, sgd, 2), true, "use Gradients"},
		{"unscaled gradients, loss scale", newMultiSteps(t, sgd, 2).WithLossScale(mixed.StaticLossScale(8)), false, "use ScaledGradients"},
	} {
		_, err := ograph.ContextProgram(embedded(), context.New(), "step", inputs, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			var r *accum.Result
			if tc.scaled {
				r = accum.ScaledGradients(ctx, 2, in, mlpMeanLoss, mixed.StaticLossScale(8))
			} else {
				r = accum.Gradients(ctx, 2, in, mlpMeanLoss)
			}
			tc.ms.ApplyResult(ctx, in[0].Graph(), r)
			return r.Outputs()
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one that says %q", tc.name, err, tc.want)
		}
	}
}

// TestMultiStepsClear: Clear drops a partly accumulated window, the accumulators and Adam's state.
func TestMultiStepsClear(t *testing.T) {
	ctx := context.New()
	ms := newMultiSteps(t, optimizers.Adam().Done(), 4)
	exec := execStep(t, embedded(), ctx, mlpUpdate(ms, false))
	x, labels := tutorialmlp.RandomBatch(3, 16)
	call(t, exec, x, labels)
	if err := ms.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	for name := range variables(t, ctx) {
		if strings.HasPrefix(name, accum.DefaultScope+"/") || strings.HasPrefix(name, "/"+optimizers.AdamDefaultScope+"/") {
			t.Errorf("%s survived Clear", name)
		}
	}
	if stats, err := ms.Stats(ctx); err != nil || stats != (accum.MultiStepsStats{}) {
		t.Errorf("after Clear: %+v, %v; want zero counters", stats, err)
	}
}
