package mixed_test

import (
	"bytes"
	"encoding/gob"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

func TestAllFinite(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, tc := range []struct {
		name   string
		values [][]float64 // one gradient per slice; a nil slice is a nil gradient
		want   bool
	}{
		{"no gradients", nil, true},
		{"only nil", [][]float64{nil}, true},
		{"finite", [][]float64{{1, -2, 3e38}, {0}}, true},
		{"+Inf", [][]float64{{1, 2}, {3, inf}}, false},
		{"-Inf", [][]float64{{-inf, 2}}, false},
		{"NaN", [][]float64{{1, nan}, nil}, false},
		{"scalar NaN", [][]float64{{nan}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inputs []*tensors.Tensor
			for _, v := range tc.values {
				if v != nil {
					inputs = append(inputs, tensors.FromFlatDataAndDimensions(v, len(v)))
				}
			}
			inputs = append(inputs, tensors.FromFlatDataAndDimensions([]int32{1, 2}, 2)) // ignored: not float
			out := run(t, func(in []*graph.Node) []*graph.Node {
				var grads []*graph.Node
				next := 0
				for _, v := range tc.values {
					if v == nil {
						grads = append(grads, nil)
						continue
					}
					x := in[next]
					if len(v) == 1 {
						x = graph.Reshape(x) // a scalar gradient
					}
					grads = append(grads, graph.ConvertDType(x, bf16)) // 16-bit keeps ±Inf and NaN
					next++
				}
				grads = append(grads, in[len(in)-1])
				return []*graph.Node{mixed.AllFinite(in[0].Graph(), grads...)}
			}, inputs...)
			if got := out[0][0] == 1; got != tc.want {
				t.Errorf("AllFinite = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStaticAndNoOpScales: Scale and Unscale convert to float32 and multiply/divide by the scale.
func TestStaticAndNoOpScales(t *testing.T) {
	in, _ := bf16Tensor(func() float64 { return 0.75 }, 2)
	for _, tc := range []struct {
		ls    mixed.LossScale
		scale float64
	}{{mixed.NoOpLossScale{}, 1}, {mixed.StaticLossScale(1024), 1024}, {mixed.StaticLossScale(3), 3}} {
		out := run(t, func(xs []*graph.Node) []*graph.Node {
			x := xs[0]
			scaled := tc.ls.Scale(nil, x)
			unscaled := tc.ls.Unscale(nil, []*graph.Node{x, nil})
			if scaled.DType() != f32 || unscaled[0].DType() != f32 || unscaled[1] != nil {
				t.Errorf("%T: dtypes %s, %s; want float32 (and nil kept)", tc.ls, scaled.DType(), unscaled[0].DType())
			}
			tc.ls.Adjust(nil, graph.Const(x.Graph(), false))
			return []*graph.Node{scaled, unscaled[0], tc.ls.Value(nil, x.Graph())}
		}, in)
		if out[0][0] != 0.75*tc.scale || out[1][0] != float64(float32(0.75/tc.scale)) || out[2][0] != tc.scale {
			t.Errorf("%T: scale %v, unscale %v, value %v", tc.ls, out[0], out[1], out[2])
		}
	}
}

// tinyStep is a train step of a 3-weight model with float32 parameters and bfloat16 compute:
// loss = factor · Σ w·x. Feeding ±Inf or NaN in x makes the gradients non-finite. It returns the
// metrics loss_scale and skipped_steps.
func tinyStep(opt *optim.Chain) func(ctx *context.Context, x, factor *graph.Node) []*graph.Node {
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	return func(ctx *context.Context, x, factor *graph.Node) []*graph.Node {
		g := x.Graph()
		w := ctx.In("tiny").Checked(false).VariableWithValue("w", []float32{0.5, -1, 2}).ValueGraph(g)
		y := graph.Mul(policy.CastToCompute(w), policy.CastToCompute(x))
		loss := graph.Mul(mixed.Sum(y, policy.Output), factor)
		opt.UpdateGraph(ctx, g, loss)
		m := opt.LossScaleMetrics(ctx, g)
		return []*graph.Node{m[optim.MetricLossScale], m[optim.MetricSkippedSteps]}
	}
}

// Step kinds of the loss-scale tests.
const (
	F = iota // finite
	I        // +Inf in the input
	N        // NaN in the input
)

func tinyInput(kind int) *tensors.Tensor {
	switch kind {
	case I:
		return tensors.FromFlatDataAndDimensions([]float32{1, float32(math.Inf(1)), 2}, 3)
	case N:
		return tensors.FromFlatDataAndDimensions([]float32{1, float32(math.NaN()), 2}, 3)
	}
	return tensors.FromFlatDataAndDimensions([]float32{1, 0.5, -1}, 3)
}

// TestDynamicLossScaleTransitions runs the tiny model through context.Exec step by step and
// checks the scale and its counters after each step against the documented semantics of jmp's
// DynamicLossScale (growth by factor on the period-th consecutive finite step, back-off by factor
// on a non-finite step, down to the minimum) plus a maximum and DeepSpeed-style consecutive
// hysteresis. The expected values are written out by hand.
func TestDynamicLossScaleTransitions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ls        *mixed.DynamicLossScale
		steps     []int
		scales    []float64 // after each step
		finite    []int64   // finite_steps after each step
		nonFinite []int64   // nonfinite_steps after each step (nil: not checked)
	}{
		{"growth every period, clamped at max", mixed.NewDynamicLossScale().Initial(4).Period(3).Max(16),
			[]int{F, F, F, F, F, F, F, F, F},
			[]float64{4, 4, 8, 8, 8, 16, 16, 16, 16},
			[]int64{1, 2, 0, 1, 2, 0, 1, 2, 0}, nil},
		{"back-off down to min", mixed.NewDynamicLossScale().Initial(8).Min(2),
			[]int{I, N, I, F},
			[]float64{4, 2, 2, 2},
			[]int64{0, 0, 0, 1}, []int64{1, 2, 3, 0}},
		{"a non-finite step restarts the period", mixed.NewDynamicLossScale().Initial(4).Period(3),
			[]int{F, F, N, F, F, F},
			[]float64{4, 4, 2, 2, 2, 4},
			[]int64{1, 2, 0, 1, 2, 0}, nil},
		{"hysteresis 2", mixed.NewDynamicLossScale().Initial(64).Hysteresis(2).Period(100),
			[]int{I, N, I, F, N, F, N, I},
			[]float64{64, 32, 16, 16, 16, 16, 16, 8},
			[]int64{0, 0, 0, 1, 0, 1, 0, 0}, []int64{1, 2, 3, 0, 1, 0, 1, 2}},
		{"jmp defaults: 2^15, halve on overflow", mixed.NewDynamicLossScale(),
			[]int{F, I, F},
			[]float64{32768, 16384, 16384},
			[]int64{1, 0, 1}, nil},
		{"factor 4", mixed.NewDynamicLossScale().Initial(16).Factor(4).Period(1),
			[]int{F, I, I},
			[]float64{64, 16, 4},
			[]int64{0, 0, 0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			ctx.In("tiny").VariableWithValue("w", []float32{0.5, -1, 2}) // so that step 0 has a "before"
			opt := withLossScale(optimizers.StochasticGradientDescent().WithDecay(false).Done(), tc.ls)
			exec, err := context.NewExec(embedded(), ctx, tinyStep(opt))
			if err != nil {
				t.Fatal(err)
			}
			defer exec.Finalize()
			skipped := 0
			for i, kind := range tc.steps {
				before := snapshot(t, ctx)
				outs, err := exec.Exec(tinyInput(kind), float32(1))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if kind != F {
					skipped++
				}
				scale := scalarOf(t, ctx, mixed.DefaultLossScaleScope, mixed.LossScaleVariable)
				fin := scalarOf(t, ctx, mixed.DefaultLossScaleScope, mixed.FiniteStepsVariable)
				non := scalarOf(t, ctx, mixed.DefaultLossScaleScope, mixed.NonFiniteStepsVariable)
				skip := scalarOf(t, ctx, optim.DefaultScope, optim.SkippedStepsVariable)
				if scale != tc.scales[i] || fin != float64(tc.finite[i]) || skip != float64(skipped) ||
					(tc.nonFinite != nil && non != float64(tc.nonFinite[i])) {
					t.Errorf("step %d (%s): scale %g finite_steps %g nonfinite_steps %g skipped %g; "+
						"want %g, %d, %v, %d", i, kindName(kind), scale, fin, non, skip, tc.scales[i], tc.finite[i],
						tc.nonFinite, skipped)
				}
				if m := flatFloat64(outs[0])[0]; m != scale {
					t.Errorf("step %d: metric loss_scale %g != variable %g", i, m, scale)
				}
				if m := flatFloat64(outs[1])[0]; m != float64(skipped) {
					t.Errorf("step %d: metric skipped_steps %g, want %d", i, m, skipped)
				}
				changed := !bytes.Equal(before["/tiny/w"], snapshot(t, ctx)["/tiny/w"])
				if changed != (kind == F) {
					t.Errorf("step %d (%s): weights changed = %v", i, kindName(kind), changed)
				}
			}
			stats, err := opt.Stats(ctx)
			if err != nil || stats.LossScale != tc.scales[len(tc.scales)-1] || stats.SkippedSteps != int64(skipped) {
				t.Errorf("Stats = %+v, %v", stats, err)
			}
		})
	}
}

func kindName(kind int) string { return []string{"finite", "+Inf", "NaN"}[kind] }

// TestDynamicLossScaleResume: the loss scale's state lives in context variables, so saving every
// variable after 4 steps (as a checkpoint does, with gob) and loading them into a fresh context
// with a fresh optimizer continues exactly like an uninterrupted run: all variables bit-equal.
func TestDynamicLossScaleResume(t *testing.T) {
	steps := []int{F, N, F, F, F, I, F, F, F}
	newOpt := func() *optim.Chain {
		return withLossScale(optimizers.Adam().LearningRate(0.01).Done(),
			mixed.NewDynamicLossScale().Initial(8).Period(2).Hysteresis(1))
	}
	train := func(ctx *context.Context, kinds []int) {
		exec, err := context.NewExec(embedded(), ctx, tinyStep(newOpt()))
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		for i, k := range kinds {
			if _, err := exec.Exec(tinyInput(k), float32(1)); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
	}

	whole := context.New()
	train(whole, steps)

	first := context.New()
	train(first, steps[:4])
	var saved bytes.Buffer
	enc := gob.NewEncoder(&saved)
	type header struct {
		Scope, Name string
		Trainable   bool
	}
	count := 0
	for range first.IterVariables() {
		count++
	}
	if err := enc.Encode(count); err != nil {
		t.Fatal(err)
	}
	for v := range first.IterVariables() {
		if err := enc.Encode(header{v.Scope(), v.Name(), v.Trainable}); err != nil {
			t.Fatal(err)
		}
		if err := v.MustValue().GobSerialize(enc); err != nil {
			t.Fatal(err)
		}
	}
	resumed := context.New()
	dec := gob.NewDecoder(&saved)
	if err := dec.Decode(&count); err != nil {
		t.Fatal(err)
	}
	for range count {
		var h header
		if err := dec.Decode(&h); err != nil {
			t.Fatal(err)
		}
		value, err := tensors.GobDeserialize(dec)
		if err != nil {
			t.Fatal(err)
		}
		resumed.InAbsPath(h.Scope).VariableWithValue(h.Name, value).SetTrainable(h.Trainable)
	}
	train(resumed, steps[4:])

	want, got := snapshot(t, whole), snapshot(t, resumed)
	if len(got) != len(want) {
		t.Errorf("resumed run has %d variables, uninterrupted %d", len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("variable %s differs after resuming", name)
		}
	}
	// 8 -F- 8 -N- 4 -F- 4 -F- 8 | -F- 8 -I- 4 -F- 4 -F- 8 -F- 8, with a skip at N and I.
	if s := scalarOf(t, resumed, mixed.DefaultLossScaleScope, mixed.LossScaleVariable); s != 8 {
		t.Errorf("final loss scale %g, want 8", s)
	}
	if s := scalarOf(t, resumed, optim.DefaultScope, optim.SkippedStepsVariable); s != 2 {
		t.Errorf("skipped steps %g, want 2", s)
	}
}
