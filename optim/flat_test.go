package optim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/testkit"
)

// flatShapes are the harness's variables: a kernel above 8-bit Adam's quantization threshold
// whose size is not a multiple of the block size (the last block padded), and a bias below it
// (float32 moments).
var flatShapes = map[string][]int{"kernel": {37, 300}, "bias": {300}}

// flatContext is a context with the harness's variables under "dense", from fixed values.
func flatContext() *context.Context {
	ctx := context.New()
	r := rand.New(rand.NewPCG(11, 3))
	for _, name := range []string{"bias", "kernel"} {
		dims := flatShapes[name]
		values := make([]float32, shapes.Make(dtypes.Float32, dims...).Size())
		for i := range values {
			values[i] = float32(r.NormFloat64() * 0.1)
		}
		ctx.In("dense").VariableWithValue(name, tensors.FromFlatDataAndDimensions(values, dims...))
	}
	return ctx
}

// flatGradients are steps gradients per variable (in context order: bias, kernel), spanning four
// decades, with the scaling of step s undone so that the optimizer sees comparable values.
func flatGradients(steps int, scaling func(s int) FlatStep) [][]*tensors.Tensor {
	r := rand.New(rand.NewPCG(5, 8))
	out := make([][]*tensors.Tensor, steps)
	for s := range out {
		k := scaling(s)
		undo := float64(orOne(k.Denominator)) * float64(orOne(k.LossScale))
		for _, name := range []string{"bias", "kernel"} {
			dims := flatShapes[name]
			g := make([]float32, shapes.Make(dtypes.Float32, dims...).Size())
			for i := range g {
				g[i] = float32(undo * r.NormFloat64() * math.Pow(10, -4*r.Float64()))
			}
			out[s] = append(out[s], tensors.FromFlatDataAndDimensions(g, dims...))
		}
	}
	return out
}

// flatScaling is the harness's scaling of step s: a sum over 3 micro-batches of 40 rows, a loss
// scale of 2^10, and a clip factor below 1 on odd steps.
func flatScaling(s int) FlatStep {
	k := FlatStep{GradientScaling: GradientScaling{Denominator: 120, LossScale: 1024}}
	if s%2 == 1 {
		k.Clip = 0.75
	}
	return k
}

// exactScaling is flatScaling with a denominator of 128: XLA multiplies by the reciprocal of a
// scalar it divides by, which is the same division only for powers of two.
func exactScaling(s int) FlatStep {
	k := flatScaling(s)
	k.Denominator = 128
	return k
}

// graphSteps runs opt's graph update on backend, one step per gradient set, the gradients divided
// and multiplied as FlatStep.Gradient says, and returns every variable's values after the last.
func graphSteps(t *testing.T, backend backends.Backend, opt GradientsOptimizer, grads [][]*tensors.Tensor, scaling func(int) FlatStep) map[string]*tensors.Tensor {
	t.Helper()
	ctx := flatContext()
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, in []*graph.Node) *graph.Node {
		g := in[0].Graph()
		for v := range ctx.IterVariables() {
			v.ValueGraph(g) // in use, in context order
		}
		scaled := make([]*graph.Node, len(in)-3)
		for i, x := range in[3:] {
			x = graph.Div(graph.Div(x, in[0]), in[1]) // as hostengine's update divides
			scaled[i] = graph.Mul(x, in[2])
		}
		opt.UpdateGraphWithGradients(ctx, scaled, dtypes.Float32)
		return graph.ScalarZero(g, dtypes.Float32)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for s, step := range grads {
		k := scaling(s)
		args := []any{orOne(k.Denominator), orOne(k.LossScale), orOne(k.Clip)}
		for _, g := range step {
			local, err := g.LocalClone() // a tensor is bound to one backend
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, local)
		}
		if _, err := exec.Exec(args...); err != nil {
			t.Fatal(err)
		}
	}
	return testkit.Variables(t, ctx)
}

// flatSteps runs opt's flat update, after building its graph update once to create the state,
// and returns every variable's values after the last step and the last step's bfloat16 outputs.
func flatSteps(t *testing.T, opt FlatOptimizer, grads [][]*tensors.Tensor, scaling func(int) FlatStep) (map[string]*tensors.Tensor, []*tensors.Tensor) {
	t.Helper()
	backend := testkit.Embedded()
	ctx := flatContext()
	var vars []*context.Variable
	var inputs []shapes.Shape
	for v := range ctx.IterVariables() {
		vars = append(vars, v)
		inputs = append(inputs, v.Shape())
	}
	p, err := analysis.ContextProgram(backend, ctx, "state", inputs, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		for _, v := range vars {
			v.ValueGraph(in[0].Graph())
		}
		opt.UpdateGraphWithGradients(ctx, in, dtypes.Float32)
		return []*graph.Node{graph.ScalarZero(in[0].Graph(), dtypes.Float32)}
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Graph.Finalize()
	if err := ctx.InitializeVariables(backend, nil); err != nil {
		t.Fatal(err)
	}
	flat := opt.Flat(ctx)
	scalars, err := context.NewExec(backend, ctx, func(ctx *context.Context, g *graph.Graph) []*graph.Node { return flat.Scalars(ctx, g) })
	if err != nil {
		t.Fatal(err)
	}
	defer scalars.Finalize()
	var out []*tensors.Tensor
	for s, step := range grads {
		values, err := scalars.Exec()
		if err != nil {
			t.Fatal(err)
		}
		k := scaling(s)
		for _, v := range values {
			k.Scalars = append(k.Scalars, testkit.Floats(v)[0])
		}
		out = out[:0]
		for _, v := range vars {
			out = append(out, tensors.FromShape(shapes.Make(dtypes.BFloat16, v.Shape().Dimensions...)))
		}
		if err := flat.Update(k, vars, step, out); err != nil {
			t.Fatal(err)
		}
	}
	return testkit.Variables(t, ctx), out
}

// flatOptimizers are the optimizers with a flat update, by name.
func flatOptimizers() map[string]func() FlatOptimizer {
	return map[string]func() FlatOptimizer{
		"adam":     func() FlatOptimizer { return Adam().LearningRate(1e-2).Done().(FlatOptimizer) },
		"adamw":    func() FlatOptimizer { return AdamW().WeightDecay(0.1).LearningRate(1e-2).Done().(FlatOptimizer) },
		"adam8bit": func() FlatOptimizer { return Adam8bit().LearningRate(1e-2).Done() },
	}
}

// TestFlatUpdateIsTheGraphUpdate: 6 steps of each flat update (gradients divided by a sum's
// denominator and a loss scale, clipped on odd steps; a denominator of 128 on XLA, which
// multiplies by a divisor's reciprocal) leave every variable (parameters, moments,
// 8-bit codes and scales, counters) bit for bit as the graph update leaves them on the embedded
// backend, and on XLA for 8-bit Adam (its update rounds the same everywhere); Adam's and AdamW's
// parameters are within 1e-6 (relative L2) of XLA's, which fuses their multiply-adds. The bfloat16
// outputs are the parameters rounded to nearest even.
func TestFlatUpdateIsTheGraphUpdate(t *testing.T) {
	for name, opt := range flatOptimizers() {
		var out []*tensors.Tensor
		var got map[string]*tensors.Tensor
		for _, backend := range testkit.All() {
			scaling := flatScaling
			if backend != testkit.Embedded() {
				scaling = exactScaling
			}
			grads := flatGradients(6, scaling)
			got, out = flatSteps(t, opt(), grads, scaling)
			want := graphSteps(t, backend, opt(), grads, scaling)
			exact := backend == testkit.Embedded() || name == "adam8bit"
			checked := 0
			for v, w := range want {
				g, ok := got[v]
				if !ok {
					t.Fatalf("%s: the flat update has no variable %s", name, v)
				}
				if !w.DType().IsFloat() {
					if !w.Equal(g) {
						t.Fatalf("%s on %s: %s is %v flat, %v by the graph", name, backend.Name(), v, g, w)
					}
					checked++
					continue
				}
				checked++
				if !exact {
					if strings.HasPrefix(v, "/dense/") {
						if d := testkit.RelL2(testkit.Floats(g), testkit.Floats(w)); d > 1e-6 {
							t.Errorf("%s on %s: %s differs by %.2g (relative L2) from the graph's, want at most 1e-6", name, backend.Name(), v, d)
						}
					}
					continue
				}
				wb, gb := testkit.Bits(w), testkit.Bits(g)
				for i := range wb {
					if wb[i] != gb[i] {
						t.Fatalf("%s on %s: %s[%d] is %v flat, %v by the graph", name, backend.Name(), v, i, testkit.Floats(g)[i], testkit.Floats(w)[i])
					}
				}
			}
			if checked < 5 {
				t.Errorf("%s on %s: %d variables compared", name, backend.Name(), checked)
			}
		}
		for i, name := range []string{"/dense/bias", "/dense/kernel"} {
			p := testkit.Floats(got[name])
			out[i].MustConstFlatData(func(flat any) {
				for j, b := range flat.([]bfloat16.BFloat16) {
					if want := nearestBFloat16(p[j]); b != want {
						t.Fatalf("%s's bfloat16 output [%d] is %v, want %v (of %v)", name, j, b, want, p[j])
					}
				}
			})
		}
	}
}

// nearestBFloat16 rounds x to the nearest bfloat16 by comparing the two candidates in float64.
func nearestBFloat16(x float64) bfloat16.BFloat16 {
	down := bfloat16.BFloat16(math.Float32bits(float32(x)) >> 16)
	up := down + 1
	dd, du := math.Abs(x-float64(down.Float32())), math.Abs(float64(up.Float32())-x)
	if du < dd || (du == dd && down&1 == 1) {
		return up
	}
	return down
}

// TestFlatAdamIsFloat64Adam: the flat Adam and AdamW (and 8-bit Adam's float32 moments) after 6
// steps are within float32 rounding (1e-6 of the learning rate per step, plus an ulp) of optax's
// adam and adamw computed in float64 on the same scaled gradients.
func TestFlatAdamIsFloat64Adam(t *testing.T) {
	const steps, lr = 6, 1e-2
	grads := flatGradients(steps, flatScaling)
	initial := testkit.Variables(t, flatContext())
	for name, opt := range flatOptimizers() {
		got, _ := flatSteps(t, opt(), grads, flatScaling)
		b1, b2, eps, wd := AdamBeta1, AdamBeta2, AdamEpsilon, 0.0
		perStep := 2e-6 // Adam rounds each operation to float32
		switch name {
		case "adamw":
			wd = 0.1
		case "adam8bit":
			eps, perStep = float64(float32(1e-7)), 1e-6 // moments and step in float64
		}
		for i, v := range []string{"/dense/bias", "/dense/kernel"} {
			if name == "adam8bit" && v == "/dense/kernel" {
				continue // quantized moments: TestQuantizedTracksAdam
			}
			p := testkit.Floats(initial[v])
			m, s := make([]float64, len(p)), make([]float64, len(p))
			for step := range steps {
				k := flatScaling(step)
				g := testkit.Floats(grads[step][i])
				t1 := float64(step + 1)
				for j := range p {
					gj := g[j] / float64(k.Denominator) / float64(k.LossScale) * float64(orOne(k.Clip))
					m[j] = b1*m[j] + (1-b1)*gj
					s[j] = b2*s[j] + (1-b2)*gj*gj
					p[j] -= lr * (m[j]/(1-math.Pow(b1, t1))/(math.Sqrt(s[j]/(1-math.Pow(b2, t1)))+eps) + wd*p[j])
				}
			}
			worst := 0.0
			for j, x := range testkit.Floats(got[v]) {
				ulp := float64(math.Nextafter32(float32(math.Abs(p[j])), float32(math.Inf(1)))) - math.Abs(float64(float32(p[j])))
				worst = max(worst, (math.Abs(x-p[j])-steps*ulp)/(steps*lr))
				if tol := steps * (ulp + perStep*lr); math.Abs(x-p[j]) > tol {
					t.Fatalf("%s: %s[%d] = %.9g flat, %.9g in float64 (more than %.2g apart)", name, v, j, x, p[j], tol)
				}
			}
			t.Logf("%s: %s within %.2g of the learning rate per step (beyond an ulp)", name, v, worst)
		}
	}
}

// TestPowIntValue: powInt computes exact.PowInt's values (the debiasing of 8-bit Adam) bit for
// bit, for counts up to past the underflow of 0.9^(2^k).
func TestPowIntValue(t *testing.T) {
	counts := []int64{0, 1, 2, 3, 7, 100, 1234, 1 << 20, 1<<40 + 5}
	want := testkit.Run(t, testkit.Embedded(), func(in []*graph.Node) []*graph.Node {
		return []*graph.Node{exact.PowInt(float64(float32(0.9)), in[0]), exact.PowInt(float64(float32(0.999)), in[0])}
	}, tensors.FromValue(counts))
	for j, base := range []float64{float64(float32(0.9)), float64(float32(0.999))} {
		for i, n := range counts {
			if got, w := powInt(base, n), want[j][i]; math.Float64bits(got) != math.Float64bits(w) {
				t.Errorf("powInt(%v, %d) = %v, PowInt %v", base, n, got, w)
			}
		}
	}
}

// TestFlatRefusesBadBuffers: a gradient of another size or dtype, and a float64 variable, are
// errors that name the variable.
func TestFlatRefusesBadBuffers(t *testing.T) {
	ctx := flatContext()
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		vars = append(vars, v)
	}
	flat := Adam().Done().(FlatOptimizer).Flat(ctx)
	short := tensors.FromShape(shapes.Make(dtypes.Float32, 3))
	err := flat.Update(FlatStep{Scalars: []float64{1e-3, 1}}, vars, []*tensors.Tensor{short, short}, make([]*tensors.Tensor, 2))
	if err == nil || !strings.Contains(err.Error(), "/dense/bias") || !strings.Contains(err.Error(), "float32 tensor of 300") {
		t.Errorf("a short gradient: %v", err)
	}
}
