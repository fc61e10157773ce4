package models_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
)

// initialWeights builds model's forward pass in a fresh context with the given seed, initializes
// its variables on backend (without running the model) and returns them by scope and name.
func initialWeights(t *testing.T, backend backends.Backend, seed int64, input shapes.Shape,
	forward func(ctx *context.Context, x *graph.Node) *graph.Node) map[string]*tensors.Tensor {
	t.Helper()
	ctx := context.New()
	ctx.SetParam(layers.ParamSeed, seed)
	p, err := analysis.ContextProgram(backend, ctx, "initialize", []shapes.Shape{input}, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		return []*graph.Node{forward(ctx, in[0])}
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Graph.Finalize()
	if err := ctx.InitializeVariables(backend, nil); err != nil {
		t.Fatal(err)
	}
	return testkit.Variables(t, ctx)
}

// presetForwards are the tiny presets' forward passes (the GPT, the tutorial's MLP classifier and
// the Llama) under a policy, with their input shapes.
func presetForwards(t *testing.T, policy string) map[string]struct {
	input   shapes.Shape
	forward func(ctx *context.Context, x *graph.Node) *graph.Node
} {
	p, err := mixed.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	gpt, err := models.NewGPT(models.Presets["tiny"])
	if err != nil {
		t.Fatal(err)
	}
	llama, err := models.NewLlama(models.LlamaPresets["tiny"])
	if err != nil {
		t.Fatal(err)
	}
	mlp := models.Classifier{Config: models.TutorialClassifier}
	type entry = struct {
		input   shapes.Shape
		forward func(ctx *context.Context, x *graph.Node) *graph.Node
	}
	withPolicy := func(forward func(ctx *context.Context, x *graph.Node) *graph.Node) func(ctx *context.Context, x *graph.Node) *graph.Node {
		return func(ctx *context.Context, x *graph.Node) *graph.Node {
			mixed.SetPolicy(ctx, p)
			return forward(ctx, x)
		}
	}
	return map[string]entry{
		"gpt":   {shapes.Make(dtypes.Int32, 2, 16), withPolicy(gpt.Logits)},
		"llama": {shapes.Make(dtypes.Int32, 2, 16), withPolicy(llama.Logits)},
		"mlp":   {shapes.Make(p.Compute, 4, models.TutorialClassifier.Inputs), withPolicy(mlp.LogProbs)},
	}
}

// TestSameSeedSameWeightsOnEveryBackend: the tiny presets' initial weights (GPT, MLP, Llama; float32
// and bfloat16 parameters) are the same bits on the embedded backend and on XLA for the same seed,
// and change with the seed. (GoMLX's initializers draw from the backend's random-bit generator,
// which the two backends implement differently.)
func TestSameSeedSameWeightsOnEveryBackend(t *testing.T) {
	xla := testkit.RequireXLA(t)
	for _, policy := range []string{"params=float32,compute=bfloat16,output=float32", "bf16"} {
		for name, m := range presetForwards(t, policy) {
			t.Run(fmt.Sprintf("%s/%s", name, policy), func(t *testing.T) {
				want := initialWeights(t, testkit.Embedded(), 7, m.input, m.forward)
				got := initialWeights(t, xla, 7, m.input, m.forward)
				other := initialWeights(t, testkit.Embedded(), 8, m.input, m.forward)
				random := 0
				for key, w := range want {
					if !w.DType().IsFloat() {
						continue
					}
					testkit.AssertBitIdentical(t, []*tensors.Tensor{got[key]}, []*tensors.Tensor{w})
					if values := testkit.Floats(w); testkit.MaxAbs(values) > 0 && !allEqual(values) {
						random++
						if fmt.Sprint(testkit.Floats(other[key])) == fmt.Sprint(values) {
							t.Errorf("%s: seeds 7 and 8 give the same values", key)
						}
					}
				}
				if random < 2 {
					t.Errorf("only %d random variables in %s", random, name)
				}
			})
		}
	}
}

// allEqual reports whether every value is the first (a constant initializer: ones or zeros).
func allEqual(xs []float64) bool {
	for _, x := range xs {
		if x != xs[0] {
			return false
		}
	}
	return true
}

// TestInitialWeightsHaveTheirDistributions: in the GPT's tiny preset every random variable has mean
// 0 and the standard deviation of its initializer within sampling error (4 standard errors): the
// kernels LeCun normal (1/√fan-in), the token embedding 1/√hidden, the positions 0.02; in the
// Llama's, Hugging Face's 0.02 for every weight.
func TestInitialWeightsHaveTheirDistributions(t *testing.T) {
	forwards := presetForwards(t, "float32")
	gpt := models.Presets["tiny"]
	for name, wantStd := range map[string]func(key string, dims []int) float64{
		"gpt": func(key string, dims []int) float64 {
			switch key {
			case "/embed/embedding":
				return 1 / math.Sqrt(float64(gpt.Hidden))
			case "/pos_emb":
				return 0.02
			}
			fanIn := dims[0] // a kernel [in, features...]
			if strings.HasSuffix(key, "/attn/output_layer/kernel") {
				fanIn = dims[0] * dims[1] // [heads, head dim, hidden]: contracts the first two
			}
			return 1 / math.Sqrt(float64(fanIn))
		},
		"llama": func(string, []int) float64 { return layers.InitializerRange },
	} {
		m := forwards[name]
		for key, w := range initialWeights(t, testkit.Embedded(), 3, m.input, m.forward) {
			values := testkit.Floats(w)
			if allEqual(values) {
				continue
			}
			std := wantStd(key, w.Shape().Dimensions)
			var sum, sumSq float64
			for _, x := range values {
				sum += x
				sumSq += x * x
			}
			n := float64(len(values))
			mean, sd := sum/n, math.Sqrt(sumSq/n-(sum/n)*(sum/n))
			if math.Abs(mean) > 4*std/math.Sqrt(n) || math.Abs(sd-std) > 4*std/math.Sqrt(2*n) {
				t.Errorf("%s %s %v: mean %.3g, std %.4g; want 0 and %.4g", name, key, w.Shape(), mean, sd, std)
			}
		}
	}
}
