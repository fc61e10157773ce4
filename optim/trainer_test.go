package optim_test

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// TestTrainerMetricsAfterSkip: in GoMLX's own train.Trainer, a chain with a LossScale skips a step
// whose batch holds a NaN (the weights stay bit for bit), and the Trainer's moving-average losses,
// which read the loss after the optimizer, stay finite on that step and after it instead of
// turning NaN for the rest of the run.
func TestTrainerMetricsAfterSkip(t *testing.T) {
	chain, err := optim.NewChain(optim.LossScale(mixed.NewDynamicLossScale()), optim.Apply(optimizers.Adam().LearningRate(0.01).Done()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	model := func(ctx *context.Context, _ any, in []*graph.Node) []*graph.Node {
		w := ctx.VariableWithValue("w", []float32{0.5, -0.25, 1}).ValueGraph(in[0].Graph())
		return []*graph.Node{graph.ReduceSum(graph.Mul(in[0], graph.InsertAxes(w, 0)), -1)}
	}
	trainer := gomlxtrain.NewTrainer(testkit.Embedded(), ctx, model, losses.MeanSquaredError, chain, nil, nil)
	xs, ys := batches(true)
	weights := func() []float64 { return testkit.Floats(ctx.GetVariableByScopeAndName("/", "w").MustValue()) }
	var before []float64
	for call := range 4 {
		if call == 2 {
			before = weights()
		}
		x := tensors.FromFlatDataAndDimensions(toFloat32(xs[call]), 4, 3)
		y := tensors.FromFlatDataAndDimensions(toFloat32(ys[call]), 4)
		metrics, err := trainer.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y})
		if err != nil {
			t.Fatal(err)
		}
		if call == 2 && !slices.Equal(weights(), before) {
			t.Errorf("the NaN batch changed the weights: %v -> %v", before, weights())
		}
		for i, m := range trainer.TrainMetrics()[1:] { // [0] is the batch's own loss: NaN on the NaN batch
			if v := testkit.Floats(metrics[i+1])[0]; math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("call %d: metric %q = %g, want finite", call, m.Name(), v)
			}
		}
	}
	stats, err := chain.Stats(ctx)
	if err != nil || stats.SkippedSteps != 1 {
		t.Errorf("Stats = %+v, %v; want 1 skipped step", stats, err)
	}
}

// TestFiniteFlag: Finite reports the step's check to the rest of the step's graph, so a user's own
// state can ignore a skipped step.
func TestFiniteFlag(t *testing.T) {
	chain, err := optim.NewChain(optim.LossScale(nil), optim.Apply(optimizers.StochasticGradientDescent().Done()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	exec, err := context.NewExec(testkit.Embedded(), ctx, func(ctx *context.Context, x, y *graph.Node) *graph.Node {
		r := chain.Step(ctx, []*graph.Node{x, y}, squaredError)
		return optim.Finite(ctx, r.Loss.Graph())
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	xs, ys := batches(true)
	for call, want := range []bool{true, true, false, true} {
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(toFloat32(xs[call]), 4, 3), tensors.FromFlatDataAndDimensions(toFloat32(ys[call]), 4))
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].Value().(bool); got != want {
			t.Errorf("call %d: Finite = %v, want %v", call, got, want)
		}
	}
}

// TestMultiStepsCountersAndClear: MultiSteps' counters advance per call and reset per window;
// Clear removes the chain's state (optimizer, loss scale, accumulators).
func TestMultiStepsCountersAndClear(t *testing.T) {
	chain, err := optim.NewChain(optim.MultiSteps(3), optim.LossScale(mixed.NewDynamicLossScale()), optim.Apply(optimizers.Adam().Done()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	exec, err := context.NewExec(testkit.Embedded(), ctx, chain.StepFn(squaredError))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	xs, ys := batches(false)
	for call := range 4 {
		if _, err := exec.Exec(tensors.FromFlatDataAndDimensions(toFloat32(xs[call]), 4, 3), tensors.FromFlatDataAndDimensions(toFloat32(ys[call]), 4)); err != nil {
			t.Fatal(err)
		}
		s, err := optim.ReadMultiSteps(ctx)
		if err != nil || s.MicroStep != int64((call+1)%3) || s.Count != float64(4*((call+1)%3)) {
			t.Errorf("call %d: %+v, %v; want micro-step %d", call, s, err, (call+1)%3)
		}
		if step := optimizers.GetGlobalStep(ctx); step != int64((call+1)/3) {
			t.Errorf("call %d: global step %d", call, step)
		}
	}
	if err := chain.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	for v := range ctx.IterVariables() {
		if v.Name() != "w" && v.Name() != optimizers.GlobalStepVariableName && v.Name() != optimizers.ParamLearningRate { // GoMLX keeps these
			t.Errorf("variable %s left after Clear", v.ScopeAndName())
		}
	}
}
