package testkit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// PlainCheck checks a graph function with variables (a layer, a model) against an independent
// plain float64 implementation of the same math: its float64 output equals the plain one, its
// float64 gradients equal central finite differences of the plain loss, and its gradients computed
// in float32 equal the float64 ones. The loss is Σ output·w with fixed pseudo-random weights w of
// the output's shape (Weights), so every output value gets its own cotangent.
type PlainCheck struct {
	// Inputs are the function's inputs: float64 ones (differentiated) or integer ones (tokens),
	// given as flat values and dimensions.
	Inputs []Input
	// Build builds the function in compute dtype compute (float64 or float32, with float64
	// parameters): a model sets its policy and softmax dtype from it. Its output may have any dtype.
	Build func(ctx *context.Context, compute dtypes.DType, inputs []*graph.Node) *graph.Node
	// Plain computes the same output in float64 from the variables' values (by ScopeAndName) and the
	// inputs' values.
	Plain func(params map[string][]float64, inputs [][]float64) []float64
	// Perturb is the standard deviation of normal noise added to every variable after its
	// initialization, so that weights initialized to ones or zeros take part (0: none).
	Perturb float64
	// Float32 is the largest relative L2 error allowed for float32 gradients (default 1e-5).
	Float32 float64
}

// Input is one input of a PlainCheck: float64 values or int32 values (tokens), and dimensions.
type Input struct {
	Floats []float64
	Ints   []int32
	Dims   []int
}

func (in Input) tensor() *tensors.Tensor {
	if in.Ints != nil {
		return tensors.FromFlatDataAndDimensions(in.Ints, in.Dims...)
	}
	return tensors.FromFlatDataAndDimensions(in.Floats, in.Dims...)
}

func (in Input) values() []float64 {
	if in.Ints == nil {
		return in.Floats
	}
	out := make([]float64, len(in.Ints))
	for i, v := range in.Ints {
		out[i] = float64(v)
	}
	return out
}

// NormalInput returns an Input of normal values (std 1) with the given dimensions.
func NormalInput(rng *rand.Rand, dims ...int) Input {
	n := 1
	for _, d := range dims {
		n *= d
	}
	values := make([]float64, n)
	for i := range values {
		values[i] = rng.NormFloat64()
	}
	return Input{Floats: values, Dims: dims}
}

// Weights returns the n fixed pseudo-random weights in [-1, 1) of a PlainCheck's loss.
func Weights(n int) []float64 {
	rng := rand.New(rand.NewPCG(11, uint64(n)))
	w := make([]float64, n)
	for i := range w {
		w[i] = 2*rng.Float64() - 1
	}
	return w
}

// differentiated is one run of a PlainCheck's function: output, and gradients by name ("input #i"
// for float inputs, ScopeAndName for variables).
type differentiated struct {
	output []float64
	grads  map[string][]float64
	order  []string
}

func (c PlainCheck) run(t *testing.T, backend backends.Backend, ctx *context.Context, compute dtypes.DType) differentiated {
	t.Helper()
	var names []string
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		out := graph.ConvertDType(c.Build(ctx, compute, inputs), dtypes.Float64)
		w := graph.Const(out.Graph(), tensors.FromFlatDataAndDimensions(Weights(out.Shape().Size()), out.Shape().Dimensions...))
		loss := graph.ReduceAllSum(graph.Mul(out, w))
		names = names[:0]
		var wrt []*graph.Node
		for i, x := range inputs {
			if x.DType().IsFloat() {
				names, wrt = append(names, fmt.Sprintf("input #%d", i)), append(wrt, x)
			}
		}
		for v := range ctx.IterVariables() {
			if v.Trainable {
				names, wrt = append(names, v.ScopeAndName()), append(wrt, v.ValueGraph(out.Graph()))
			}
		}
		return append([]*graph.Node{graph.Reshape(out, out.Shape().Size())}, graph.Gradient(loss, wrt...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	args := make([]any, len(c.Inputs))
	for i, in := range c.Inputs {
		args[i] = in.tensor()
	}
	outs, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	d := differentiated{output: Floats(outs[0]), grads: map[string][]float64{}, order: names}
	for i, name := range names {
		d.grads[name] = Floats(outs[i+1])
	}
	return d
}

// Run runs the check on backend, reporting failures on t.
func (c PlainCheck) Run(t *testing.T, backend backends.Backend) {
	t.Helper()
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(7); err != nil {
		t.Fatal(err)
	}
	c.run(t, backend, ctx, dtypes.Float64) // creates and initializes the variables
	ctx = ctx.Reuse()
	rng := rand.New(rand.NewPCG(5, 6))
	params := map[string][]float64{}
	for v := range ctx.IterVariables() {
		if !v.Trainable {
			continue // the random state
		}
		values := Floats(v.MustValue())
		for i := range values {
			values[i] += c.Perturb * rng.NormFloat64()
		}
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(values, v.Shape().Dimensions...)); err != nil {
			t.Fatal(err)
		}
		params[v.ScopeAndName()] = values
	}
	inputs := make([][]float64, len(c.Inputs))
	for i, in := range c.Inputs {
		inputs[i] = in.values()
	}
	want64 := c.run(t, backend, ctx, dtypes.Float64)
	got32 := c.run(t, backend, ctx, dtypes.Float32)

	plain := c.Plain(params, inputs)
	if err := RelL2(want64.output, plain); !(err <= 1e-12) {
		t.Errorf("float64 output differs from the plain float64 implementation by %.3g (relative L2), want <= 1e-12", err)
	}

	// Float64 gradients against central differences of the plain loss along a random direction.
	loss := func(step float64, dir map[string][]float64) float64 {
		shifted := map[string][]float64{}
		for name, values := range params {
			shifted[name] = axpy(step, dir[name], values)
		}
		in := make([][]float64, len(inputs))
		for i, values := range inputs {
			in[i] = values
			if d, ok := dir[fmt.Sprintf("input #%d", i)]; ok {
				in[i] = axpy(step, d, values)
			}
		}
		out := c.Plain(shifted, in)
		w := Weights(len(out))
		sum := 0.0
		for i := range out {
			sum += out[i] * w[i]
		}
		return sum
	}
	// A random direction of unit length over the inputs and all parameters.
	dir, norm := map[string][]float64{}, 0.0
	for _, name := range want64.order {
		dir[name] = make([]float64, len(want64.grads[name]))
		for i := range dir[name] {
			dir[name][i] = rng.NormFloat64()
			norm += dir[name][i] * dir[name][i]
		}
	}
	predicted := 0.0
	for _, name := range want64.order {
		for i, g := range want64.grads[name] {
			dir[name][i] /= math.Sqrt(norm)
			predicted += g * dir[name][i]
		}
	}
	// Central differences with Richardson's extrapolation: error O(h⁴), so that h can be large
	// enough for the loss's rounding not to matter.
	central := func(h float64) float64 { return (loss(h, dir) - loss(-h, dir)) / (2 * h) }
	const h = 1e-3
	measured := (4*central(h/2) - central(h)) / 3
	if err := math.Abs(measured-predicted) / math.Max(math.Abs(measured), 1e-300); !(err <= 1e-7) {
		t.Errorf("float64 gradients: directional derivative %.12g, central differences of the plain implementation %.12g (relative error %.3g, want <= 1e-7)",
			predicted, measured, err)
	}

	tolerance := c.Float32
	if tolerance == 0 {
		tolerance = 1e-5
	}
	worst, worstName := 0.0, ""
	for _, name := range want64.order {
		err := RelL2(got32.grads[name], want64.grads[name])
		if !(err <= tolerance) {
			t.Errorf("gradient of %s: float32 differs from float64 by %.3g (relative L2), want <= %.3g", name, err, tolerance)
		}
		if !(err <= worst) {
			worst, worstName = err, name
		}
	}
	t.Logf("float64 output vs plain: %.2g; float64 gradients vs central differences: %.2g; float32 vs float64: output %.2g, worst gradient %.2g (%s) of %d",
		RelL2(want64.output, plain), math.Abs(measured-predicted)/math.Abs(measured), RelL2(got32.output, want64.output), worst, worstName, len(want64.order))
	if err := RelL2(got32.output, want64.output); !(err <= tolerance) {
		t.Errorf("output: float32 differs from float64 by %.3g (relative L2), want <= %.3g", err, tolerance)
	}
}

// axpy returns a·x + y.
func axpy(a float64, x, y []float64) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		out[i] = a*x[i] + y[i]
	}
	return out
}
