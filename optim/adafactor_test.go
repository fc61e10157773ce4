package optim

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
)

// referenceCase has every kind of tensor: factored matrices with the largest axis first and last
// (a 3-D one like the attention's [hidden, heads, 3·head]), a small matrix, a vector and a scalar
// whose rms is under the minimum parameter scale. Gradient scales jump, so clipping comes into play.
func referenceCase() adafactorCase {
	return newCase([]string{"matrix", "cube", "small", "vector", "scalar"},
		[][]int{{130, 128}, {3, 128, 130}, {8, 12}, {20}, {}},
		[]float64{1, 1.0 / 8, 4, 0.5, 16}, []float64{1e-2, 3e-2, 2e-2, 2e-2, 1e-2})
}

// TestAdafactorMatchesFloat64Reference runs five updates of every kind of tensor, with optax's
// defaults and with every option changed, and checks the parameters and the state after each
// update against the float64 reference: float64 parameters to 1e-12, float32 ones to float32's
// rounding.
func TestAdafactorMatchesFloat64Reference(t *testing.T) {
	c := referenceCase()
	for _, backend := range backendsUnderTest() {
		for _, variant := range []struct {
			name     string
			settings refSettings
		}{{"defaults", optaxDefaults}, {"options", optionsVariant}} {
			for _, dtype := range []dtypes.DType{dtypes.Float64, dtypes.Float32} {
				// rel: of each value; ofChange: of the rms of the parameters' change so far.
				// stateRel: of each state value and of the state's rms (a momentum can cancel to 0).
				rel, ofChange, stateRel := 1e-12, 1e-10, 1e-12
				if dtype == dtypes.Float32 {
					rel, ofChange, stateRel = 1e-6, 1e-4, 1e-5
				}
				refs := make([]*refTensor, len(c.names))
				for k := range refs {
					refs[k] = newRefTensor(c.dims[k], c.p0[k], variant.settings)
					if dtype == dtypes.Float32 {
						for i, x := range refs[k].p {
							refs[k].p[i] = float64(float32(x))
						}
					}
				}
				clipped, factored := 0, 0
				adafactorRun(t, backend, variant.settings.config().Done(), c, dtype, func(step int, ctx *context.Context) {
					lr := float64(float32(c.lrs[step])) // the learning-rate variable is float32
					for k, name := range c.names {
						r := refs[k]
						if r.step(c.grads[step][k], step+1, lr, variant.settings, func(x float64) float64 { return x }) {
							clipped++
						}
						what := fmt.Sprintf("%s %s %s step %d %s", backend.Name(), variant.name, dtype, step+1, name)
						got, _ := values(t, ctx, "/model", name)
						change := make([]float64, len(got))
						for i := range change {
							change[i] = r.p[i] - c.p0[k][i]
						}
						within(t, what, got, r.p, rel, ofChange*rootMeanSquare(change))
						stateScope := "/" + AdafactorScope + "/model"
						state := map[string][]float64{"v": r.v}
						if r.factored {
							state = map[string][]float64{"v_row": r.vRow, "v_col": r.vCol}
							factored++
						}
						if variant.settings.momentum > 0 {
							state["momentum"] = r.m
						}
						for which, want := range state {
							got, stateDType := values(t, ctx, stateScope, name+"_"+which)
							if stateDType != dtype {
								t.Fatalf("%s: state %s is %s, want %s", what, which, stateDType, dtype)
							}
							within(t, what+" "+which, got, want, stateRel, stateRel*rootMeanSquare(want))
						}
					}
				})
				if variant.name == "defaults" && (clipped == 0 || factored != 2*len(c.grads)) {
					t.Fatalf("%s: %d clipped updates and %d factored (want some clipped, and 2 factored tensors each step): the case does not test what it should", variant.name, clipped, factored)
				}
			}
		}
	}
}

// TestAdafactorBFloat16Params: with bfloat16 parameters the state stays float32, and each update
// is the reference's, rounded to bfloat16, from the parameters the previous update left (within
// one bfloat16 step: the embedded backend truncates where XLA rounds).
func TestAdafactorBFloat16Params(t *testing.T) {
	c := referenceCase()
	for _, backend := range backendsUnderTest() {
		var refs []*refTensor
		adafactorRun(t, backend, Adafactor().Done(), c, dtypes.BFloat16, func(step int, ctx *context.Context) {
			if refs == nil {
				for k := range c.names {
					refs = append(refs, newRefTensor(c.dims[k], c.p0[k], optaxDefaults))
					for i, x := range refs[k].p { // the variables' initial values
						refs[k].p[i] = float64(bfloat16.FromFloat64(x).Float32())
					}
				}
			}
			for k, name := range c.names {
				r := refs[k]
				got, dtype := values(t, ctx, "/model", name)
				if dtype != dtypes.BFloat16 {
					t.Fatalf("%s became %s", name, dtype)
				}
				r.step(c.grads[step][k], step+1, float64(float32(c.lrs[step])), optaxDefaults,
					func(x float64) float64 { return float64(bfloat16.FromFloat64(x).Float32()) })
				// One bfloat16 step, or float32's rounding where p - u cancels.
				within(t, backend.Name()+" "+name, got, r.p, 1.0/128, 1e-6*rootMeanSquare(r.p))
				copy(r.p, got) // the next update starts from the parameters the graph has
				for which, want := range map[string][]float64{"v": r.v, "v_row": r.vRow, "v_col": r.vCol} {
					if want == nil {
						continue
					}
					state, dtype := values(t, ctx, "/"+AdafactorScope+"/model", name+"_"+which)
					if dtype != dtypes.Float32 {
						t.Fatalf("%s's %s is %s, want float32 under bfloat16 parameters", name, which, dtype)
					}
					within(t, backend.Name()+" "+name+" "+which, state, want, 1e-5, 1e-5*rootMeanSquare(want))
				}
			}
		})
		if refs == nil {
			t.Fatal("no step ran")
		}
	}
}

// TestAdafactorMatchesOptaxFixture checks against the committed fixture.
func TestAdafactorMatchesOptaxFixture(t *testing.T) {
	checkOptaxFixture(t, filepath.Join("testdata", "adafactor_optax"))
}

// TestAdafactorMatchesOptaxNow runs the fixture's script with the repository's Python (the venv
// .ci/run creates, or $ONEGPU_PYTHON) and checks against what optax computes now.
func TestAdafactorMatchesOptaxNow(t *testing.T) {
	python := os.Getenv("ONEGPU_PYTHON")
	if python == "" {
		python, _ = filepath.Abs(filepath.Join("..", ".venv", "bin", "python"))
	}
	if _, err := os.Stat(python); err != nil {
		t.Skip("no ../.venv/bin/python (.ci/run creates it) and no $ONEGPU_PYTHON: optax is not run")
	}
	if testing.Short() {
		t.Skip("starts JAX (about 10 s)")
	}
	dir := t.TempDir()
	out, err := exec.Command(python, filepath.Join("..", "reference", "jax", "adafactor_fixture.py"), "--out", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("the fixture script failed: %v\n%s", err, out)
	}
	checkOptaxFixture(t, dir)
}

// TestAdafactorFactoredAxes: the axes follow optax's rule (NumPy's argsort of the shape; the
// expected values are what NumPy 2.5 gives).
func TestAdafactorFactoredAxes(t *testing.T) {
	opt := Adafactor().Done()
	for _, tc := range []struct {
		dims []int
		a, b int
		ok   bool
	}{
		{[]int{128, 128}, 0, 1, true}, {[]int{256, 128}, 1, 0, true}, {[]int{128, 256}, 0, 1, true},
		{[]int{3, 128, 128}, 1, 2, true}, {[]int{128, 3, 128}, 0, 2, true}, {[]int{200, 200, 100, 200}, 1, 3, true},
		{[]int{127, 4096}, 0, 0, false}, {[]int{4096}, 0, 0, false}, {nil, 0, 0, false}, {[]int{4, 64, 256}, 0, 0, false},
	} {
		a, b, ok := opt.FactoredAxes(tc.dims)
		if a != tc.a || b != tc.b || ok != tc.ok {
			t.Errorf("FactoredAxes(%v) = %d, %d, %v; want %d, %d, %v", tc.dims, a, b, ok, tc.a, tc.b, tc.ok)
		}
	}
	if _, _, ok := Adafactor().Factored(false).Done().FactoredAxes([]int{512, 512}); ok {
		t.Error("Factored(false) still factors")
	}
}

func TestAdafactorString(t *testing.T) {
	for _, tc := range []struct {
		opt  *AdafactorOptimizer
		want string
	}{
		{Adafactor().Done(), "adafactor"},
		{Adafactor().LearningRate(0.1).Done(), "adafactor"}, // the learning rate is the schedule's
		{optionsVariant.config().Done(), "adafactor(min_dim_size_to_factor=8, decay_rate=0.6, multiply_by_parameter_scale=0, " +
			"clipping_threshold=0, momentum=0.9, weight_decay_rate=0.001)"},
	} {
		if got := tc.opt.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestAdafactorConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		config *AdafactorConfig
		want   string
	}{
		{Adafactor().DecayRate(-1), "decay rate -1"},
		{Adafactor().DecayRate(math.NaN()), "decay rate NaN"},
		{Adafactor().DecayOffset(-2), "decay offset -2"},
		{Adafactor().MinDimSizeToFactor(0), "minimum dimension to factor 0"},
		{Adafactor().Epsilon(0), "epsilon 0"},
		{Adafactor().ClippingThreshold(-1), "clipping threshold -1"},
		{Adafactor().Momentum(1), "momentum 1"},
		{Adafactor().WeightDecayRate(math.Inf(1)), "weight decay rate +Inf"},
	} {
		err := tc.config.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
		}
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(error).Error(), tc.want) {
					t.Errorf("Done() panicked with %v, want %q", r, tc.want)
				}
			}()
			tc.config.Done()
		}()
	}
	if err := Adafactor().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestAdafactorTrains: the regression of the Adam8bit tests trains with Adafactor (the loss falls
// tenfold in 60 steps), and in a chain with a loss scale a step whose gradients are not finite
// leaves the weights and Adafactor's state exactly as they were.
func TestAdafactorTrains(t *testing.T) {
	losses, ctx := trainRegression(t, testkit.Embedded(), Adafactor().LearningRate(0.1).Done(), 60)
	t.Logf("loss %.5f -> %.5f", losses[0], losses[len(losses)-1])
	if !(losses[len(losses)-1] < losses[0]/10) {
		t.Fatalf("Adafactor did not train the regression: loss %.5f -> %.5f", losses[0], losses[len(losses)-1])
	}
	if ctx.GetVariableByScopeAndName("/"+AdafactorScope+"/dense", "kernel_v") == nil {
		t.Fatal("no second moment for the kernel under " + AdafactorScope)
	}
	// The weights, their second moments, the learning rate and two update counters.
	checkSkipKeepsState(t, Adafactor().LearningRate(0.1).Done(), 7)
}

// TestAdafactorStateOfSmallGPT: for the small GPT preset, the variables Adafactor creates hold at
// most 0.05x the bytes of Adam's moments.
func TestAdafactorStateOfSmallGPT(t *testing.T) {
	config := models.Presets["small"]
	gpt, err := models.NewGPT(config) // float32: no policy is set on the context
	if err != nil {
		t.Fatal(err)
	}
	state := func(opt GradientsOptimizer, scope string) int {
		ctx := context.New()
		g := graph.NewGraph(testkit.Embedded(), "state")
		defer g.Finalize()
		_ = gpt.Logits(ctx, graph.Parameter(g, "tokens", shapes.Make(dtypes.Int32, 1, config.SeqLen)))
		var grads []*graph.Node
		for v := range ctx.IterVariables() {
			if v.Trainable && v.InUseByGraph(g) {
				grads = append(grads, graph.ZerosLike(v.ValueGraph(g)))
			}
		}
		opt.UpdateGraphWithGradients(ctx, grads, dtypes.Float32)
		return stateBytes(ctx, "/"+scope)
	}
	adam := state(optimizers.Adam().Done().(GradientsOptimizer), optimizers.AdamDefaultScope)
	ada := state(Adafactor().Done(), AdafactorScope)
	if want := 8*config.Params() + 8; int64(adam) != want {
		t.Fatalf("Adam's state is %d bytes, want two float32 moments of %d parameters and a step: %d", adam, config.Params(), want)
	}
	ratio := float64(ada) / float64(adam)
	t.Logf("small GPT (%d parameters): Adafactor's state %d bytes, Adam's %d: %.4fx", config.Params(), ada, adam, ratio)
	if ratio > 0.05 {
		t.Errorf("Adafactor's state is %.4fx Adam's (%d vs %d bytes), want at most 0.05x", ratio, ada, adam)
	}
}
