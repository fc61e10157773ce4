package vjp_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/vjp"
)

// mlpGradients returns the loss and the parameter gradients of the tutorial MLP with float32
// parameters (float64 when compute is float64), matmuls in matmul and the rest in compute.
func mlpGradients(t *testing.T, compute, matmul dtypes.DType, stock bool) [][]float64 {
	params := tutorialmlp.InitialParams(1)
	x, labels := tutorialmlp.RandomBatch(2, tutorialmlp.Batch)
	args := append([]*tensors.Tensor{x, labels}, params...)
	return run(t, func(in []*graph.Node) []*graph.Node {
		if stock {
			vjp.UseStock(in[0].Graph())
		}
		ps := in[2:]
		if compute == dtypes.Float64 {
			for i := range ps {
				ps[i] = graph.ConvertDType(ps[i], dtypes.Float64)
			}
		}
		loss := tutorialmlp.Loss(tutorialmlp.LogProbs(tutorialmlp.ParamsFromSlice(ps), in[0], compute, matmul), in[1])
		return append([]*graph.Node{loss}, graph.Gradient(loss, in[2:]...)...)
	}, args...)
}

// TestMixedPrecisionMLPGradients: with float32 parameters and bfloat16 matmuls, every parameter
// gradient of the tutorial MLP (batch 512) is within 2% relative L2 of a float64 computation.
//
// Only the matmuls run in bfloat16 here: the embedded backend of GoMLX v0.26.0 rounds float32 to
// bfloat16 by truncation (toward zero) rather than to nearest, so with every op in bfloat16 the
// gradients are 2-4% off whatever the rules; TestAllBFloat16MLPGradients records that.
func TestMixedPrecisionMLPGradients(t *testing.T) {
	f32, bf16 := dtypes.Float32, dtypes.BFloat16
	want := mlpGradients(t, dtypes.Float64, dtypes.Float64, false)
	got := mlpGradients(t, f32, bf16, false)
	stock := mlpGradients(t, f32, bf16, true)
	t.Logf("loss: float64 %.6f, bfloat16 %.6f", want[0][0], got[0][0])
	for i, name := range tutorialmlp.ParamNames {
		err := testkit.RelL2(got[i+1], want[i+1])
		stockErr := testkit.RelL2(stock[i+1], want[i+1])
		t.Logf("%-14s relative L2 error: onegpu %.4f, GoMLX's rules %.4f", name, err, stockErr)
		if err > 0.02 {
			t.Errorf("%s: gradient relative L2 error %.4f > 2%%", name, err)
		}
	}
	if fb := vjp.Fallbacks(); len(fb) > 0 {
		t.Errorf("some gradients fell back to GoMLX's rules: %q", fb)
	}
}

// TestAllBFloat16MLPGradients runs the tutorial's policy (every op in bfloat16, float32 parameters)
// and checks that onegpu's rules stay within 5% while GoMLX's own rules are off by more than 30%.
func TestAllBFloat16MLPGradients(t *testing.T) {
	bf16 := dtypes.BFloat16
	want := mlpGradients(t, dtypes.Float64, dtypes.Float64, false)
	got := mlpGradients(t, bf16, bf16, false)
	stock := mlpGradients(t, bf16, bf16, true)
	for i, name := range tutorialmlp.ParamNames {
		err, stockErr := testkit.RelL2(got[i+1], want[i+1]), testkit.RelL2(stock[i+1], want[i+1])
		t.Logf("%-14s relative L2 error: onegpu %.4f, GoMLX's rules %.4f", name, err, stockErr)
		if err > 0.05 || stockErr < 0.3 {
			t.Errorf("%s: relative L2 error onegpu %.4f (want <= 5%%), GoMLX %.4f (expected > 30%%)", name, err, stockErr)
		}
	}
}
