package optim

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
)

// What adafactor_test.go checks Adafactor with: a float64 reference, the fixture's inputs, a
// harness that runs updates on given gradients, and the reading of optax's fixture.

// The float64 reference: optax.adafactor's update equations written out plainly, one element at a
// time, for tensors of any rank.

// refSettings are optax.adafactor's arguments.
type refSettings struct {
	minDimSizeToFactor int
	decayRate, epsilon float64
	clippingThreshold  float64 // 0: None
	parameterScale     bool
	momentum           float64 // 0: None
	weightDecayRate    float64
}

// optaxDefaults are optax.adafactor's defaults.
var optaxDefaults = refSettings{minDimSizeToFactor: 128, decayRate: 0.8, epsilon: 1e-30, clippingThreshold: 1, parameterScale: true}

// optionsVariant turns every option away from its default (as the fixture's "options" variant).
var optionsVariant = refSettings{minDimSizeToFactor: 8, decayRate: 0.6, epsilon: 1e-30, momentum: 0.9, weightDecayRate: 1e-3}

func (s refSettings) config() *AdafactorConfig {
	return Adafactor().MinDimSizeToFactor(s.minDimSizeToFactor).DecayRate(s.decayRate).Epsilon(s.epsilon).
		ClippingThreshold(s.clippingThreshold).MultiplyByParameterScale(s.parameterScale).Momentum(s.momentum).
		WeightDecayRate(s.weightDecayRate)
}

// refTensor is one parameter and its state in the reference.
type refTensor struct {
	dims                []int
	p, vRow, vCol, v, m []float64
	a, b                int // factored axes: second largest, largest
	factored            bool
}

func newRefTensor(dims []int, p []float64, s refSettings) *refTensor {
	r := &refTensor{dims: dims, p: append([]float64(nil), p...), m: make([]float64, len(p))}
	if len(dims) >= 2 {
		// The two largest axes, the earlier first among equal dimensions (NumPy's argsort).
		largest, second := -1, -1
		for i := len(dims) - 1; i >= 0; i-- {
			switch {
			case largest < 0 || dims[i] > dims[largest]:
				largest, second = i, largest
			case second < 0 || dims[i] > dims[second]:
				second = i
			}
		}
		r.a, r.b = second, largest
		r.factored = dims[second] >= s.minDimSizeToFactor
	}
	if r.factored {
		r.vRow = make([]float64, len(p)/dims[r.b])
		r.vCol = make([]float64, len(p)/dims[r.a])
	} else {
		r.v = make([]float64, len(p))
	}
	return r
}

// dropAxis maps a row-major index of a tensor of dims to its index once axis is removed.
func dropAxis(idx int, dims []int, axis int) int {
	inner := 1
	for _, d := range dims[axis+1:] {
		inner *= d
	}
	return idx/(inner*dims[axis])*inner + idx%inner
}

// meanOver averages x (of dims) over axis.
func meanOver(x []float64, dims []int, axis int) []float64 {
	out := make([]float64, len(x)/dims[axis])
	for i, value := range x {
		out[dropAxis(i, dims, axis)] += value / float64(dims[axis])
	}
	return out
}

func rootMeanSquare(x []float64) float64 {
	var s float64
	for _, value := range x {
		s += value * value
	}
	return math.Sqrt(s / float64(len(x)))
}

// step applies update n (1-based) with gradient grad and learning rate lr; round rounds the new
// parameters to their dtype. It reports whether the update was clipped.
func (r *refTensor) step(grad []float64, n int, lr float64, s refSettings, round func(float64) float64) (clipped bool) {
	rho := 1 - math.Pow(float64(n), -s.decayRate)
	squares := make([]float64, len(grad))
	for i, g := range grad {
		squares[i] = g*g + s.epsilon
	}
	u := make([]float64, len(grad))
	if r.factored {
		rowMeans, colMeans := meanOver(squares, r.dims, r.b), meanOver(squares, r.dims, r.a)
		for i := range r.vRow {
			r.vRow[i] = rho*r.vRow[i] + (1-rho)*rowMeans[i]
		}
		for i := range r.vCol {
			r.vCol[i] = rho*r.vCol[i] + (1-rho)*colMeans[i]
		}
		rowDims := append(append([]int(nil), r.dims[:r.b]...), r.dims[r.b+1:]...)
		aInRows := r.a
		if r.a > r.b {
			aInRows--
		}
		rowColMean := meanOver(r.vRow, rowDims, aInRows)
		for i, g := range grad {
			row, col := dropAxis(i, r.dims, r.b), dropAxis(i, r.dims, r.a)
			rowFactor := 1 / math.Sqrt(r.vRow[row]/rowColMean[dropAxis(row, rowDims, aInRows)])
			u[i] = g * rowFactor / math.Sqrt(r.vCol[col])
		}
	} else {
		for i, g := range grad {
			r.v[i] = rho*r.v[i] + (1-rho)*squares[i]
			u[i] = g / math.Sqrt(r.v[i])
		}
	}
	scale := lr
	if denominator := rootMeanSquare(u) / s.clippingThreshold; s.clippingThreshold > 0 && denominator > 1 {
		scale /= denominator
		clipped = true
	}
	if s.parameterScale {
		scale *= math.Max(rootMeanSquare(r.p), AdafactorMinParameterScale)
	}
	for i := range u {
		u[i] *= scale
		if s.momentum > 0 {
			r.m[i] = s.momentum*r.m[i] + (1-s.momentum)*u[i]
			u[i] = r.m[i]
		}
		u[i] += s.weightDecayRate * r.p[i]
		r.p[i] = round(r.p[i] - u[i])
	}
	return clipped
}

// The inputs: the exact integer generator reference/jax/adafactor_fixture.py documents.

// draw returns the generator's n values from seed.
func draw(seed uint64, n int) []float64 {
	out := make([]float64, n)
	state := seed
	for i := range out {
		state = state*6364136223846793005 + 1442695040888963407
		out[i] = float64(int64((state>>33)%2001)-1000) / 1024
	}
	return out
}

func size(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// adafactorCase is a set of tensors, their gradients at every step and the learning rates.
type adafactorCase struct {
	names []string
	dims  [][]int
	p0    [][]float64
	grads [][][]float64 // [step][tensor]
	lrs   []float64
}

// newCase draws the fixture's inputs for tensors (in order) over steps scaled by stepScales.
func newCase(names []string, dims [][]int, stepScales, lrs []float64) adafactorCase {
	c := adafactorCase{names: names, dims: dims, lrs: lrs, grads: make([][][]float64, len(stepScales))}
	for k, d := range dims {
		n := size(d)
		p := draw(uint64(100*k), n)
		scale := 0.25
		if len(d) == 0 {
			scale = math.Pow(2, -14) // rms below the minimum parameter scale
		}
		for i := range p {
			p[i] *= scale
		}
		c.p0 = append(c.p0, p)
		for s, stepScale := range stepScales {
			g := draw(uint64(100*k+s+1), n)
			for i := range g {
				g[i] *= stepScale
				if len(d) > 0 { // rows of different scales: 2^(i mod 5 - 2) along axis 0
					g[i] *= math.Pow(2, float64((i/(n/d[0]))%5-2))
				}
			}
			c.grads[s] = append(c.grads[s], g)
		}
	}
	return c
}

// newTensor makes a tensor of dtype holding values.
func newTensor(dtype dtypes.DType, values []float64, dims []int) *tensors.Tensor {
	switch dtype {
	case dtypes.Float64:
		return tensors.FromFlatDataAndDimensions(append([]float64(nil), values...), dims...)
	case dtypes.BFloat16:
		b := make([]bfloat16.BFloat16, len(values))
		for i, x := range values {
			b[i] = bfloat16.FromFloat64(x)
		}
		return tensors.FromFlatDataAndDimensions(b, dims...)
	}
	f := make([]float32, len(values))
	for i, x := range values {
		f[i] = float32(x)
	}
	return tensors.FromFlatDataAndDimensions(f, dims...)
}

// adafactorRun trains c's tensors, created as dtype variables under /model, with opt on backend;
// after each step it calls check with the step (0-based) and the context.
func adafactorRun(t *testing.T, backend backends.Backend, opt *AdafactorOptimizer, c adafactorCase, dtype dtypes.DType,
	check func(step int, ctx *context.Context)) {
	t.Helper()
	ctx := context.New()
	for k, name := range c.names {
		ctx.In("model").VariableWithValue(name, newTensor(dtype, c.p0[k], c.dims[k]))
	}
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		optimizers.LearningRateVar(ctx, dtypes.Float32, 0).SetValueGraph(inputs[0]) // as a schedule does
		var grads []*graph.Node
		for v := range ctx.IterVariables() {
			if v.Trainable {
				_ = v.ValueGraph(inputs[0].Graph())
				for k, name := range c.names {
					if v.Name() == name {
						grads = append(grads, inputs[1+k])
					}
				}
			}
		}
		opt.UpdateGraphWithGradients(ctx, grads, dtypes.Float32)
		return []*graph.Node{graph.OnesLike(inputs[0])}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for s, grads := range c.grads {
		args := []any{float32(c.lrs[s])}
		for k, g := range grads {
			args = append(args, newTensor(dtypes.Float32, g, c.dims[k]))
		}
		if _, err := exec.Exec(args...); err != nil {
			t.Fatal(err)
		}
		check(s, ctx)
	}
}

// values reads a variable of the run's context as float64, or fails.
func values(t *testing.T, ctx *context.Context, scope, name string) ([]float64, dtypes.DType) {
	t.Helper()
	v := ctx.GetVariableByScopeAndName(scope, name)
	if v == nil {
		t.Fatalf("no variable %s/%s", scope, name)
	}
	return testkit.Floats(v.MustValue()), v.Shape().DType
}

// within fails unless got and want agree element-wise within rel·|want| + abs.
func within(t *testing.T, what string, got, want []float64, rel, abs float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); !(d <= rel*math.Abs(want[i])+abs) {
			t.Fatalf("%s[%d] = %.9g, want %.9g (difference %.3g)", what, i, got[i], want[i], d)
		}
	}
}

// The optax fixture: reference/jax/adafactor_fixture.py's results on the same inputs.

type optaxFixture struct {
	Optax      string              `json:"optax"`
	Tensors    [][]json.RawMessage `json:"tensors"`
	StepScales []float64           `json:"step_scales"`
	Rates      []float64           `json:"learning_rates"`
	Variants   []struct {
		Name     string         `json:"name"`
		Settings map[string]any `json:"settings"` // optax.adafactor's arguments other than its defaults
		File     string         `json:"file"`
		Outputs  []struct {
			Tensor, What string
			Shape        []int
			Offset       int
		} `json:"outputs"`
	} `json:"variants"`
}

// checkOptaxSettings checks that opt's Optax (what the JAX reference builds optax.adafactor with)
// gives the arguments the fixture gave optax, and optax.adafactor's defaults for the others.
func checkOptaxSettings(t *testing.T, opt *AdafactorOptimizer, given map[string]any) {
	t.Helper()
	want := map[string]float64{"min_dim_size_to_factor": 128, "decay_rate": 0.8, "decay_offset": 0, "multiply_by_parameter_scale": 1,
		"clipping_threshold": 1, "momentum": 0, "weight_decay_rate": 0, "eps": 1e-30, "factored": 1}
	for name, value := range given {
		switch v := value.(type) {
		case nil:
			want[name] = 0
		case bool:
			want[name] = map[bool]float64{false: 0, true: 1}[v]
		case float64:
			want[name] = v
		default:
			t.Fatalf("fixture setting %s=%v of type %T", name, value, value)
		}
	}
	name, got := opt.Optax()
	if name != "adafactor" || len(got) != len(want) {
		t.Fatalf("Optax() = %q, %v; want adafactor, %v", name, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Optax()[%q] = %g, the fixture gave optax %g (%v)", k, got[k], v, given)
		}
	}
}

// checkOptaxFixture runs onegpu's Adafactor on the fixture's inputs for each of its variants and
// compares the parameters and state after the last step with optax's.
func checkOptaxFixture(t *testing.T, dir string) {
	text, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f optaxFixture
	if err := json.Unmarshal(text, &f); err != nil {
		t.Fatal(err)
	}
	var names []string
	var dims [][]int
	for _, tensor := range f.Tensors {
		var name string
		var d []int
		if len(tensor) != 2 || json.Unmarshal(tensor[0], &name) != nil || json.Unmarshal(tensor[1], &d) != nil {
			t.Fatalf("manifest: bad tensor %s", tensor)
		}
		names, dims = append(names, name), append(dims, d)
	}
	c := newCase(names, dims, f.StepScales, f.Rates)
	settings := map[string]refSettings{"defaults": optaxDefaults, "options": optionsVariant}
	for _, backend := range backendsUnderTest() {
		for _, variant := range f.Variants {
			s, ok := settings[variant.Name]
			if !ok {
				t.Fatalf("the fixture has a variant %q this test does not know", variant.Name)
			}
			checkOptaxSettings(t, s.config().Done(), variant.Settings)
			raw, err := os.ReadFile(filepath.Join(dir, variant.File))
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			adafactorRun(t, backend, s.config().Done(), c, dtypes.Float32, func(step int, ctx *context.Context) {
				if step != len(c.grads)-1 {
					return
				}
				for _, out := range variant.Outputs {
					n := size(out.Shape)
					want := make([]float64, n)
					for i := range want {
						want[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(out.Offset+i):])))
					}
					what := backend.Name() + " " + variant.Name + " " + out.Tensor + " " + out.What
					if out.What == "param" {
						got, _ := values(t, ctx, "/model", out.Tensor)
						// Compare the change over the steps, to a small share of its size.
						k := 0
						for k < len(names) && names[k] != out.Tensor {
							k++
						}
						change := make([]float64, n)
						for i := range change {
							change[i] = want[i] - float64(float32(c.p0[k][i]))
						}
						within(t, what, got, want, 1e-6, 1e-4*rootMeanSquare(change))
					} else {
						got, _ := values(t, ctx, "/"+AdafactorScope+"/model", out.Tensor+"_"+out.What)
						within(t, what, got, want, 1e-5, 1e-5*rootMeanSquare(want))
					}
					checked++
				}
			})
			if checked < 8 {
				t.Fatalf("%s: only %d outputs checked", variant.Name, checked)
			}
		}
	}
	t.Logf("onegpu's Adafactor agrees with optax %s on %d variants", f.Optax, len(f.Variants))
}
