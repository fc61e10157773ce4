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

// TestSwiGLUMatchesFloat64: the SwiGLU MLP (weights [out, in], no biases) equals the plain float64
// down(silu(gate(x))·up(x)), and its gradients follow.
func TestSwiGLUMatchesFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	const width, intermediate = 16, 40
	check := testkit.PlainCheck{
		Inputs:  []testkit.Input{testkit.NormalInput(rng, 2, 7, width)},
		Perturb: 0.2,
		Build: func(ctx *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
			mixed.SetPolicy(ctx, float64Params(compute))
			return layers.SwiGLU(ctx.In("mlp"), in[0], intermediate)
		},
		Plain: func(p map[string][]float64, in [][]float64) []float64 {
			return plainllama.SwiGLU(in[0], p["/mlp/gate_proj/weight"], p["/mlp/up_proj/weight"], p["/mlp/down_proj/weight"], width, intermediate)
		},
	}
	for _, backend := range testkit.All() {
		t.Run(backend.Name(), func(t *testing.T) { check.Run(t, backend) })
	}
}
