package mixed_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/vjp"
)

// TestBiasGradientBatch4096: a Dense layer with float32 parameters and bfloat16 compute (the
// policy's casts), at batch 4096: the bias gradient (a sum over the batch of the broadcast) is
// within 1% relative of float64, and so is the kernel gradient. With GoMLX's own gradient rules the
// bias gradient is summed in bfloat16 and is far off, which is why package vjp replaces them.
func TestBiasGradientBatch4096(t *testing.T) {
	const batch, in, out = 4096, 16, 8
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	xT, xs := bf16Tensor(normal(5, 0, 1), batch, in)
	cotT, cots := bf16Tensor(normal(6, 0.5, 1), batch, out) // dLoss/dy, mostly positive: the sums grow
	kernel := make([]float32, in*out)
	bias := make([]float32, out)
	gen := normal(7, 0, 0.3)
	for i := range kernel {
		kernel[i] = float32(gen())
	}
	for i := range bias {
		bias[i] = float32(gen())
	}

	// float64: loss = Σ y·cot with y = x·W + b, so dL/db = Σ_batch cot and dL/dW = xᵀ·cot.
	wantBias := make([]float64, out)
	wantKernel := make([]float64, in*out)
	for b := range batch {
		for o := range out {
			c := cots[b*out+o]
			wantBias[o] += c
			for i := range in {
				wantKernel[i*out+o] += xs[b*in+i] * c
			}
		}
	}

	for _, stock := range []bool{false, true} {
		got := run(t, func(nodes []*graph.Node) []*graph.Node {
			if stock {
				vjp.UseStock(nodes[0].Graph())
			}
			x, cot, w, b := nodes[0], nodes[1], nodes[2], nodes[3]
			y := graph.Add(graph.Dot(policy.CastToCompute(x), policy.CastToCompute(w)),
				graph.InsertAxes(policy.CastToCompute(b), 0))
			loss := mixed.Sum(graph.Mul(y, cot), policy.Output)
			return graph.Gradient(loss, w, b)
		}, xT, cotT, tensors.FromFlatDataAndDimensions(kernel, in, out), tensors.FromFlatDataAndDimensions(bias, out))
		biasErr, kernelErr := testkit.RelL2(got[1], wantBias), testkit.RelL2(got[0], wantKernel)
		t.Logf("stock rules=%v: bias gradient relative error %.2g (e.g. %.1f vs %.1f), kernel %.2g",
			stock, biasErr, got[1][0], wantBias[0], kernelErr)
		switch {
		case !stock && !(biasErr <= 0.01 && kernelErr <= 0.01):
			t.Errorf("onegpu's rules: relative errors bias %.3g, kernel %.3g; want <= 1%%", biasErr, kernelErr)
		case stock && !(biasErr > 0.1 || math.IsNaN(biasErr)):
			t.Errorf("GoMLX's rules: bias gradient relative error %.3g; expected the bfloat16 sum to be far off", biasErr)
		}
	}
}
