package layers_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

const (
	attnBatch, attnSeq, attnHeads, attnHeadDim = 2, 16, 2, 8
	attnWidth                                  = attnHeads * attnHeadDim
)

// attentionLoss is Σ attention(x)·r with the given compute dtype (float64 parameters and output,
// so the float32 and float64 runs share the same variables), and its gradients with respect to x
// and every variable, in ctx's variable order.
func attentionLoss(ctx *context.Context, compute dtypes.DType, x, r *graph.Node) []*graph.Node {
	mixed.SetPolicy(ctx, mixed.Policy{Param: dtypes.Float64, Compute: compute, Output: dtypes.Float64})
	out := layers.CausalSelfAttention(ctx, graph.ConvertDType(x, compute), attnHeads, attnHeadDim, compute, layers.Documents{})
	loss := graph.ReduceAllSum(graph.Mul(graph.ConvertDType(out, dtypes.Float64), r))
	wrt := []*graph.Node{x}
	for v := range ctx.IterVariables() {
		wrt = append(wrt, v.ValueGraph(x.Graph()))
	}
	return append([]*graph.Node{loss}, graph.Gradient(loss, wrt...)...)
}

func randomTensor(rng *rand.Rand, dims ...int) *tensors.Tensor {
	values := make([]float64, shapes.Make(dtypes.Float64, dims...).Size())
	for i := range values {
		values[i] = rng.NormFloat64()
	}
	return tensors.FromFlatDataAndDimensions(values, dims...)
}

// TestAttentionGradientsMatchFloat64: the attention's gradients in float32 (its softmax's gradient
// computed from the softmax output alone, as jax.nn.softmax's) agree with the same attention
// computed in float64, for the input and every parameter.
func TestAttentionGradientsMatchFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, r := randomTensor(rng, attnBatch, attnSeq, attnWidth), randomTensor(rng, attnBatch, attnSeq, attnWidth)
	ctx := context.New()
	run := func(compute dtypes.DType) [][]float64 {
		exec, err := context.NewExec(testkit.Embedded(), ctx, func(ctx *context.Context, x, r *graph.Node) []*graph.Node {
			return attentionLoss(ctx, compute, x, r)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		outs, err := exec.Exec(x, r)
		if err != nil {
			t.Fatal(err)
		}
		values := make([][]float64, len(outs))
		for i, out := range outs {
			values[i] = testkit.Floats(out)
		}
		return values
	}
	want := run(dtypes.Float64) // creates and initializes the variables both runs share
	ctx = ctx.Reuse()
	got := run(dtypes.Float32)
	names := []string{"loss", "x"}
	for v := range ctx.IterVariables() {
		names = append(names, v.ScopeAndName())
	}
	for i := range want {
		scale := slices.MaxFunc(want[i], func(a, b float64) int { return int(math.Copysign(1, math.Abs(a)-math.Abs(b))) })
		worst := 0.0
		for j := range want[i] {
			worst = max(worst, math.Abs(got[i][j]-want[i][j])/math.Abs(scale))
		}
		if worst > 1e-5 {
			t.Errorf("%s: float32 differs from float64 by %.2g of its largest value, want <= 1e-5", names[i], worst)
		}
	}
}

// TestAttentionBackwardKeepsOnlySoftmaxOutput: the attention's backward pass needs one float32
// tensor of the scores' shape from the forward pass, the softmax output, as JAX's does (onegpu's
// own estimate of the step's peak, on the embedded backend's execution order).
// GoMLX's graph.Softmax differentiated by autodiff also keeps its exponentials, one more
// [batch, heads, q, k] tensor per layer (at the tutorial's scale 512 MiB per layer).
func TestAttentionBackwardKeepsOnlySoftmaxOutput(t *testing.T) {
	ctx := context.New()
	in := []shapes.Shape{shapes.Make(dtypes.Float64, attnBatch, attnSeq, attnWidth), shapes.Make(dtypes.Float64, attnBatch, attnSeq, attnWidth)}
	p, err := analysis.ContextProgram(testkit.Embedded(), ctx, "attention", in, func(ctx *context.Context, xs []*graph.Node) []*graph.Node {
		return attentionLoss(ctx, dtypes.Float32, xs[0], xs[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	m := analysis.Analyze(p)
	scores := []int{attnBatch, attnHeads, attnSeq, attnSeq}
	var live []string
	for _, tensor := range m.AtPeak {
		if slices.Equal(tensor.Node.Shape().Dimensions, scores) {
			live = append(live, tensor.Label())
		}
	}
	// The softmax output and the cotangent being computed from it; graph.Softmax's autodiff
	// also keeps the exponentials (Exp, Div, DotGeneral).
	if len(live) > 2 {
		t.Errorf("%d tensors of the scores' shape %v live at the step's peak (%v), want at most 2", len(live), scores, live)
	}
}
