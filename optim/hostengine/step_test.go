package hostengine

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// chainGradients are step's gradients of a loss scaled by scale, summed over denominator rows, by
// variable; at step nanStep one value is NaN.
func chainGradients(ctx *context.Context, step int, scale, denominator float32, nanStep int) map[*context.Variable]*tensors.Tensor {
	grads := testGradients(ctx, step)
	for v, g := range grads {
		values := tensors.MustCopyFlatData[float32](g)
		for i := range values {
			values[i] *= scale * denominator * 4 // some gradients above the clip's norm
		}
		if step == nanStep && strings.HasSuffix(v.ScopeAndName(), "gain") {
			values[3] = float32(math.NaN())
		}
		grads[v] = tensors.FromFlatDataAndDimensions(values, v.Shape().Dimensions...)
	}
	return grads
}

// chainOneProgram runs steps of chain (its step-wide part and optimizer on every variable in one
// program: Chain.ApplyGradients) on the gradients chainGradients makes, divided by denominator.
func chainOneProgram(t *testing.T, ctx *context.Context, chain *optim.Chain, schedule optim.Schedule, steps, nanStep int, denominator float32) {
	t.Helper()
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		vars = append(vars, v)
	}
	exec, err := context.NewExec(testkit.Embedded(), ctx, func(ctx *context.Context, sums []*graph.Node) *graph.Node {
		g := sums[0].Graph()
		for _, v := range vars {
			v.ValueGraph(g)
		}
		optim.ApplySchedule(ctx, g, schedule)
		grads := make([]*graph.Node, len(sums))
		for i, x := range sums {
			grads[i] = graph.DivScalar(x, denominator) // a power of two: the engine's division
		}
		chain.ApplyGradients(ctx, g, grads, nil, dtypes.Float32)
		return optim.Finite(ctx, g)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for step := range steps {
		grads := chainGradients(ctx, step, 1024, denominator, nanStep)
		var args []any
		for _, v := range vars {
			args = append(args, grads[v])
		}
		if _, err := exec.Exec(args...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStepIsTheChain: an engine step through a chain (a dynamic loss scale starting at 2^10, and
// optionally a global-norm clip that is active), over two stages, on gradients that are sums
// over 8 rows, leaves every variable as the chain in one program does: bit for bit without the
// clip (flat loops, graph updates, and graph updates on the device that holds the gradients,
// which computes their partial results there: OnDevice), within 1e-5 relative with it: the engine
// sums the norm's squares in float64 (on the device in float32, by gradient), the graph in
// float32, which moves the clip factor by a few 1e-6. A step with a NaN gradient is skipped by both: nothing changes but the loss
// scale (halved) and the skipped-steps counter.
func TestStepIsTheChain(t *testing.T) {
	schedule := optim.WarmupCosine(1e-4, 1e-2, 2, 10, 1e-3)
	const steps, nanStep, denominator = 4, 2, 8
	for _, clip := range []float64{0, 0.05} {
		for name, opt := range testOptimizers {
			for _, mode := range []string{"flat", "graph", "device"} {
				graphUpdate, device := mode != "flat", mode == "device"
				newChain := func() *optim.Chain {
					links := []optim.Transform{optim.LossScale(mixed.NewDynamicLossScale().Initial(1024))}
					if clip > 0 {
						links = append(links, optim.ClipByGlobalNorm(clip))
					}
					chain, err := optim.NewChain(append(links, optim.Apply(opt()))...)
					if err != nil {
						t.Fatal(err)
					}
					return chain
				}
				want := newTestContext()
				chainOneProgram(t, want, newChain(), schedule, steps, nanStep, denominator)

				got := newTestContext()
				engine, err := New(Config{Backend: testkit.Embedded(), Ctx: got, Chain: newChain(), Schedule: schedule, NoParams: true, GraphUpdate: graphUpdate, OnDevice: device})
				if err != nil {
					t.Fatal(err)
				}
				stages := stagesOf(t, engine, got)
				skipped := 0
				for step := range steps {
					grads := chainGradients(got, step, 1024, denominator, nanStep)
					if device {
						grads = onDevice(t, testkit.Embedded(), grads)
					}
					st, err := engine.Begin(denominator)
					if err != nil {
						t.Fatal(err)
					}
					for _, s := range stages {
						if err := st.Check(s, stageGradients(s, grads)); err != nil {
							t.Fatal(err)
						}
					}
					apply, err := st.Decide()
					if err != nil {
						t.Fatal(err)
					}
					if apply == (step == nanStep) {
						t.Fatalf("step %d applies: %v", step, apply)
					}
					if !apply {
						skipped++
						if _, err := st.Update(stages[0], stageGradients(stages[0], grads)); err == nil {
							t.Error("a skipped step updated a stage")
						}
					}
					for i := len(stages) - 1; apply && i >= 0; i-- {
						if _, err := st.Update(stages[i], stageGradients(stages[i], grads)); err != nil {
							t.Fatal(err)
						}
					}
					if err := st.Finish(); err != nil {
						t.Fatal(err)
					}
				}
				engine.Close()
				wantVars, gotVars := testkit.Variables(t, want), testkit.Variables(t, got)
				for v, w := range wantVars {
					g, ok := gotVars[v]
					if !ok {
						t.Fatalf("%s clip %g: no variable %s in the engine's context", name, clip, v)
					}
					if clip == 0 || w.Shape().IsScalar() {
						assertSame(t, g, w)
						continue
					}
					if !w.DType().IsFloat() {
						continue // 8-bit codes: a moment near a rounding boundary may take the next code
					}
					if d := testkit.RelL2(testkit.Floats(g), testkit.Floats(w)); d > 1e-5 {
						t.Errorf("%s clip %g (%s): %s differs by %.2g (relative L2) from the chain's", name, clip, mode, v, d)
					}
				}
				if s := gotVars["/optim/skipped_steps"]; s == nil || s.Value().(int64) != int64(skipped) {
					t.Errorf("%s: skipped steps %v, want %d", name, s, skipped)
				}
			}
		}
	}
}

// stageGradients are s's gradients in its variables' order.
func stageGradients(s *Stage, grads map[*context.Variable]*tensors.Tensor) []*tensors.Tensor {
	var out []*tensors.Tensor
	for _, v := range s.Variables() {
		out = append(out, grads[v])
	}
	return out
}
