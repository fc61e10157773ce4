package mixed_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// halvingSchedule is a learning-rate schedule in the style of GoMLX's cosineschedule (which runs
// in the model function, before the optimizer): it counts its own steps under /optimizers and
// sets the learning rate variable from them.
func halvingSchedule(ctx *context.Context, g *graph.Graph, base float64) {
	step := optimizers.IncrementGlobalStepGraph(ctx.In(optimizers.Scope).In("halving_schedule"), g, dtypes.Float32)
	lr := graph.MulScalar(graph.Pow(graph.Scalar(g, dtypes.Float32, 0.5), graph.DivScalar(step, 10)), base)
	optimizers.LearningRateVar(ctx, dtypes.Float32, base).SetValueGraph(lr)
}

// mlpStep is a train step of the tutorial MLP under policy, with the halving schedule and opt.
// factor multiplies the loss (a huge factor overflows the gradients). With manual set, the step
// differentiates the scaled loss itself and calls ApplyScaledGradients, as accum/ does.
func mlpStep(policy mixed.Policy, opt optimizers.Interface, manual bool) func(ctx *context.Context, x, labels, factor *graph.Node) []*graph.Node {
	return func(ctx *context.Context, x, labels, factor *graph.Node) []*graph.Node {
		g := x.Graph()
		halvingSchedule(ctx, g, 1e-3)
		p := tutorialmlp.ContextParams(ctx, g, 1)
		logp := tutorialmlp.LogProbs(p, policy.CastToCompute(x), policy.Compute, policy.Compute)
		loss := graph.Mul(tutorialmlp.Loss(policy.CastToOutput(logp), labels), factor)
		if manual {
			o := opt.(*optim.Chain)
			grads := ctx.BuildTrainableVariablesGradientsGraph(o.ScaleLoss(ctx, loss))
			o.ApplyGradients(ctx, g, grads, nil, loss.DType())
		} else {
			opt.UpdateGraph(ctx, g, loss)
		}
		return []*graph.Node{graph.Neg(graph.Neg(loss))}
	}
}

// lossScaleState lists the variables that a skipped step does change.
var lossScaleState = map[string]bool{
	mixed.DefaultLossScaleScope + "/" + mixed.LossScaleVariable:      true,
	mixed.DefaultLossScaleScope + "/" + mixed.FiniteStepsVariable:    true,
	mixed.DefaultLossScaleScope + "/" + mixed.NonFiniteStepsVariable: true,
	optim.DefaultScope + "/" + optim.SkippedStepsVariable:            true,
}

// TestAtomicSkip injects +Inf and NaN into the gradients of the tutorial MLP (float32 parameters,
// bfloat16 compute, Adam, a learning-rate schedule, dynamic loss scale) after two normal steps, and
// checks that the non-finite step changes no variable of the model or the optimizer (parameters,
// Adam's moments and step, the global step, the schedule's step and the learning rate: bit for
// bit), while the scale halves and skipped_steps counts it. The next finite step changes them all.
func TestAtomicSkip(t *testing.T) {
	const batch = 32
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	for _, backend := range backendsUnderTest() {
		x, labels := tutorialmlp.RandomBatch(3, batch)
		withInf := func(v float32) *tensors.Tensor {
			bad, _ := x.Clone()
			bad.MutableFlatData(func(flat any) { flat.([]float32)[17] = v })
			return bad
		}
		for _, tc := range []struct {
			name   string
			x      *tensors.Tensor
			factor float32
			poison bool // set a parameter to NaN before the step
		}{
			{"+Inf input", withInf(float32(math.Inf(1))), 1, false},
			{"NaN input", withInf(float32(math.NaN())), 1, false},
			{"overflowing loss", x, 1e36, false},
			{"NaN parameter", x, 1, true},
		} {
			for _, manual := range []bool{false, true} {
				name := backend.Name() + "/" + tc.name + "/UpdateGraph"
				if manual {
					name = backend.Name() + "/" + tc.name + "/ApplyGradients"
				}
				t.Run(name, func(t *testing.T) {
					ctx := context.New()
					opt := withLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
					exec, err := context.NewExec(backend, ctx, mlpStep(policy, opt, manual))
					if err != nil {
						t.Fatal(err)
					}
					defer exec.Finalize()
					for range 2 {
						if _, err := exec.Exec(x, labels, float32(1)); err != nil {
							t.Fatal(err)
						}
					}
					if tc.poison {
						v := ctx.GetVariableByScopeAndName("/dense2", "bias")
						poisoned, _ := v.MustValue().Clone()
						poisoned.MutableFlatData(func(flat any) { flat.([]float32)[3] = float32(math.NaN()) })
						v.MustSetValue(poisoned)
					}
					before := snapshot(t, ctx)
					if _, err := exec.Exec(tc.x, labels, tc.factor); err != nil {
						t.Fatal(err)
					}
					after := snapshot(t, ctx)
					if len(after) != len(before) {
						t.Errorf("%d variables before, %d after", len(before), len(after))
					}
					var kept []string
					for name, b := range before {
						if lossScaleState[name] {
							continue
						}
						kept = append(kept, name)
						if !bytes.Equal(after[name], b) {
							t.Errorf("variable %s changed in a skipped step", name)
						}
					}
					for _, want := range []string{"/global_step", "/AdamOptimizer/global_step", "/optimizers/learning_rate",
						"/optimizers/halving_schedule/global_step", "/AdamOptimizer/dense1/kernel_1st_moment",
						"/AdamOptimizer/norm/scale_2nd_moment", "/dense2/bias"} {
						if _, ok := before[want]; !ok {
							t.Errorf("expected variable %s to exist; have %s", want, strings.Join(kept, " "))
						}
					}
					scale := scalarOf(t, ctx, mixed.DefaultLossScaleScope, mixed.LossScaleVariable)
					skipped := scalarOf(t, ctx, optim.DefaultScope, optim.SkippedStepsVariable)
					if scale != 1<<14 || skipped != 1 {
						t.Errorf("after the skipped step: loss scale %g (want 16384), skipped_steps %g (want 1)", scale, skipped)
					}

					if tc.poison {
						return // the NaN parameter stays: every later step is skipped too
					}
					if _, err := exec.Exec(x, labels, float32(1)); err != nil {
						t.Fatal(err)
					}
					final := snapshot(t, ctx)
					for _, name := range kept {
						if bytes.Equal(final[name], after[name]) {
							t.Errorf("variable %s did not change in the finite step after the skip", name)
						}
					}
				})
			}
		}
	}
}

// notWithGradients is an optimizer without UpdateGraphWithGradients.
type notWithGradients struct{}

func (notWithGradients) UpdateGraph(*context.Context, *graph.Graph, *graph.Node) {}
func (notWithGradients) Clear(*context.Context) error                            { return nil }

func TestWithLossScaleNeedsGradientsOptimizer(t *testing.T) {
	testkit.MustPanic(t, "UpdateGraphWithGradients", func() { withLossScale(notWithGradients{}, nil) })
}

// TestOptimizerClear: Clear removes Adam's variables, the loss scale's state and the skip counter.
func TestOptimizerClear(t *testing.T) {
	ctx := context.New()
	opt := withLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
	exec, err := context.NewExec(embedded(), ctx, tinyStep(opt))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	if _, err := exec.Exec(tinyInput(I), float32(1)); err != nil {
		t.Fatal(err)
	}
	if err := opt.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	for v := range ctx.IterVariables() {
		if strings.HasPrefix(v.Scope(), "/mixed") || strings.HasPrefix(v.Scope(), "/AdamOptimizer") {
			t.Errorf("variable %s left after Clear", v.ScopeAndName())
		}
	}
	if s, err := opt.Stats(ctx); err != nil || s.LossScale != 1<<15 || s.SkippedSteps != 0 {
		t.Errorf("Stats after Clear = %+v, %v; want the initial scale and no skips", s, err)
	}
}
