package layers_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/plainllama"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// TestLinearMatchesFloat64: a projection with and without a bias equals the plain float64
// x·Wᵀ (+ b) with W [out, in], and its gradients (the bias's included) follow.
func TestLinearMatchesFloat64(t *testing.T) {
	const in, out = 12, 5
	for _, bias := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(11, 12))
		check := testkit.PlainCheck{
			Inputs:  []testkit.Input{testkit.NormalInput(rng, 3, 4, in)},
			Perturb: 0.2, // the bias starts at zero
			Build: func(ctx *context.Context, compute dtypes.DType, x []*graph.Node) *graph.Node {
				mixed.SetPolicy(ctx, float64Params(compute))
				return layers.Linear{Bias: bias}.Apply(ctx.In("proj"), x[0], out)
			},
			Plain: func(p map[string][]float64, x [][]float64) []float64 {
				return plainllama.AddBias(plainllama.Linear(x[0], p["/proj/weight"], in, out), p["/proj/bias"])
			},
		}
		for _, backend := range testkit.All() {
			t.Run(fmt.Sprintf("bias %v/%s", bias, backend.Name()), func(t *testing.T) { check.Run(t, backend) })
		}
	}
}

// TestLinearVariables: Apply creates "weight" [out, in] (and "bias" [out] with Bias) in the
// policy's param dtype and returns the compute dtype; Projection finds the same variables (under
// Reuse, a variable it asked for by another name or shape would be an error).
func TestLinearVariables(t *testing.T) {
	for _, bias := range []bool{false, true} {
		var y *graph.Node
		var p layers.Projection
		ctx := build(t, func(ctx *context.Context, x *graph.Node) {
			mixed.SetPolicy(ctx, bf16Compute)
			y = layers.Linear{Bias: bias}.Apply(ctx.In("proj"), x, 4)
			p = layers.Linear{Bias: bias}.Projection(ctx.Reuse().In("proj"), x.Graph(), 16, 4) // Reuse: no new variable
		})
		var names []string
		for v := range ctx.IterVariables() {
			names = append(names, fmt.Sprintf("%s %s", v.ScopeAndName(), v.Shape()))
		}
		slices.Sort(names)
		want := []string{"/proj/weight (Float32)[4 16]"}
		if bias {
			want = []string{"/proj/bias (Float32)[4]", "/proj/weight (Float32)[4 16]"}
		}
		if !slices.Equal(names, want) || y.DType() != dtypes.BFloat16 {
			t.Errorf("bias %v: variables %v and output %s; want %v and bfloat16", bias, names, y.DType(), want)
		}
		if !p.ClassesFirst || p.Weight.Shape().Dimensions[0] != 4 || (p.Bias != nil) != bias {
			t.Errorf("bias %v: projection %+v", bias, p)
		}
	}
}
