package layers_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/plainllama"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// float64Params is the policy of a PlainCheck run: float64 parameters and output, compute in
// compute.
func float64Params(compute dtypes.DType) mixed.Policy {
	return mixed.Policy{Param: dtypes.Float64, Compute: compute, Output: dtypes.Float64}
}

// TestRMSNormMatchesFloat64: RMSNorm's output equals the plain float64 formula, its gradients
// central differences of it, and its float32 gradients (input and weight) the float64 ones.
func TestRMSNormMatchesFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 3))
	check := testkit.PlainCheck{
		Inputs:  []testkit.Input{testkit.NormalInput(rng, 3, 5, 16)},
		Perturb: 0.3,
		Build: func(ctx *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
			mixed.SetPolicy(ctx, float64Params(compute))
			return layers.RMSNorm(ctx.In("norm"), in[0], 1e-5)
		},
		Plain: func(params map[string][]float64, in [][]float64) []float64 {
			return plainllama.RMSNorm(in[0], params["/norm/weight"], 1e-5)
		},
	}
	for _, backend := range testkit.All() {
		t.Run(backend.Name(), func(t *testing.T) { check.Run(t, backend) })
	}
}
