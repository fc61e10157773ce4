package hostengine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/optim"
)

// shapes of the test model's variables, in two stages ("block_0" and "block_1"): factored and
// unfactored Adafactor moments, quantized and float32 8-bit Adam moments.
var testVars = []struct {
	scope, name string
	dims        []int
}{
	{"block_0/dense", "kernel", []int{256, 128}},
	{"block_0/dense", "bias", []int{128}},
	{"block_1/dense", "kernel", []int{128, 256}},
	{"block_1/norm", "gain", []int{256}},
}

// newTestContext returns a context holding the test variables with seeded values.
func newTestContext() *context.Context {
	r := rand.New(rand.NewPCG(3, 9))
	ctx := context.New()
	for _, tv := range testVars {
		n := 1
		for _, d := range tv.dims {
			n *= d
		}
		values := make([]float32, n)
		for i := range values {
			values[i] = float32(r.NormFloat64() * 0.1)
		}
		ctx.InAbsPath("/"+tv.scope).VariableWithValue(tv.name, tensors.FromFlatDataAndDimensions(values, tv.dims...))
	}
	return ctx
}

// testGradients are one step's gradients, one per test variable in context order, spanning
// several decades.
func testGradients(ctx *context.Context, step int) map[*context.Variable]*tensors.Tensor {
	r := rand.New(rand.NewPCG(uint64(step), 77))
	out := map[*context.Variable]*tensors.Tensor{}
	for v := range ctx.IterVariables() {
		values := make([]float32, v.Shape().Size())
		for i := range values {
			values[i] = float32(r.NormFloat64() * float64(1+i%7) * 1e-3)
		}
		out[v] = tensors.FromFlatDataAndDimensions(values, v.Shape().Dimensions...)
	}
	return out
}

var testOptimizers = map[string]func() optim.GradientsOptimizer{
	"adam":      func() optim.GradientsOptimizer { return optim.Adam().Done() },
	"adamw":     func() optim.GradientsOptimizer { return optim.AdamW().WeightDecay(0.1).Done() },
	"adam8bit":  func() optim.GradientsOptimizer { return optim.Adam8bit().BlockSize(256).MinQuantizedSize(1024).Done() },
	"adafactor": func() optim.GradientsOptimizer { return optim.Adafactor().Done() },
}

// TestStagesEqualOneProgram: the engine's updates of two stages, the later stage first as a
// backward pass produces them, equal bit for bit one program's update of every variable with the
// same optimizer and schedule (what the trainer runs on the device), step after step: parameters,
// optimizer state, global step and learning rate. The graph update equals the program on its own
// backend; the flat loops (Adam, AdamW, 8-bit Adam; their scalars on either backend) equal it on
// the embedded backend, whose arithmetic they repeat. The returned bfloat16 parameters are the
// masters rounded.
func TestStagesEqualOneProgram(t *testing.T) {
	schedule := optim.WarmupCosine(1e-4, 1e-2, 2, 10, 1e-3) // a different rate at every step
	const steps = 4
	for _, backend := range testkit.All() {
		for name, opt := range testOptimizers {
			for _, flat := range []bool{false, true} {
				if _, ok := opt().(optim.FlatOptimizer); flat && !ok {
					continue
				}
				path, reference := "graph", backend
				if flat {
					path, reference = "flat", testkit.Embedded()
				}
				t.Run(backend.Name()+"/"+name+"/"+path, func(t *testing.T) {
					stagesEqualOneProgram(t, backend, reference, opt, !flat, schedule, steps)
				})
			}
		}
	}
}

// stagesEqualOneProgram checks the engine on backend (its graph update, or its flat loop) against
// one program on reference.
func stagesEqualOneProgram(t *testing.T, backend, reference backends.Backend, opt func() optim.GradientsOptimizer, graphUpdate bool, schedule optim.Schedule, steps int) {
	want := newTestContext()
	oneProgram(t, reference, want, opt(), schedule, steps)

	got := newTestContext()
	engine, err := New(Config{Backend: backend, Ctx: got, Optimizer: opt(), Schedule: schedule, Compute: dtypes.BFloat16, GraphUpdate: graphUpdate})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	stages := stagesOf(t, engine, got)
	if stages[0].Flat() == graphUpdate {
		t.Fatalf("the stage's flat loop: %v, want %v", stages[0].Flat(), !graphUpdate)
	}
	var params []*tensors.Tensor
	for step := range steps {
		grads := testGradients(got, step)
		for i := len(stages) - 1; i >= 0; i-- {
			var gs []*tensors.Tensor
			for _, v := range stages[i].Variables() {
				gs = append(gs, grads[v])
			}
			if params, err = stages[i].Update(gs, Scaling{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := engine.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	wantVars, gotVars := testkit.Variables(t, want), testkit.Variables(t, got)
	if len(gotVars) != len(wantVars) {
		t.Fatalf("%d variables, want %d: %v", len(gotVars), len(wantVars), keys(gotVars))
	}
	for name, w := range wantVars {
		g, ok := gotVars[name]
		if !ok {
			t.Fatalf("no variable %s in the engine's context", name)
		}
		t.Run(name, func(t *testing.T) { assertSame(t, g, w) })
	}
	// stage 0 ran last: its parameters, rounded to bfloat16.
	for i, v := range stages[0].Variables() {
		w := testkit.Execute(t, reference, func(xs []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.ConvertDType(xs[0], dtypes.BFloat16)}
		}, wantVars[v.ScopeAndName()])
		testkit.AssertBitIdentical(t, params[i:i+1], w)
	}
}

// oneProgram runs steps updates of every variable of ctx in one program, as the trainer's device
// step applies them.
func oneProgram(t *testing.T, backend backends.Backend, ctx *context.Context, opt optim.GradientsOptimizer, schedule optim.Schedule, steps int) {
	t.Helper()
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		vars = append(vars, v)
	}
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, grads []*graph.Node) *graph.Node {
		g := grads[0].Graph()
		for _, v := range vars {
			v.ValueGraph(g)
		}
		optim.ApplySchedule(ctx, g, schedule)
		opt.UpdateGraphWithGradients(ctx, grads, dtypes.Float32)
		return graph.ScalarZero(g, dtypes.Float32)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for step := range steps {
		grads := testGradients(ctx, step)
		var args []any
		for _, v := range vars {
			args = append(args, grads[v])
		}
		if _, err := exec.Exec(args...); err != nil {
			t.Fatal(err)
		}
	}
}

// stagesOf makes one stage per "block_i" scope.
func stagesOf(t *testing.T, engine *Engine, ctx *context.Context) []*Stage {
	t.Helper()
	var stages []*Stage
	for _, block := range []string{"/block_0", "/block_1"} {
		var vars []*context.Variable
		for v := range ctx.IterVariables() {
			if strings.HasPrefix(v.Scope(), block) {
				vars = append(vars, v)
			}
		}
		s, err := engine.Stage(block[1:], vars)
		if err != nil {
			t.Fatal(err)
		}
		stages = append(stages, s)
	}
	return stages
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// assertSame fails unless got and want hold the same bits (floating point) or values.
func assertSame(t *testing.T, got, want *tensors.Tensor) {
	t.Helper()
	if got.DType().IsFloat() {
		testkit.AssertBitIdentical(t, []*tensors.Tensor{got}, []*tensors.Tensor{want})
		return
	}
	if g, w := fmt.Sprint(got.Value()), fmt.Sprint(want.Value()); g != w {
		t.Errorf("got %s, want %s", g, w)
	}
}
