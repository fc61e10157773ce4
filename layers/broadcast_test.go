package layers_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// plainDense is Dense written directly (x·kernel + bias, same variables), the reference the
// layer's tied bias must equal bit for bit.
func plainDense(ctx *context.Context, x *graph.Node, features int) *graph.Node {
	p := mixed.PolicyOf(ctx)
	g := x.Graph()
	kernel := ctx.VariableWithShape("kernel", shapes.Make(p.Param, x.Shape().Dim(-1), features)).ValueGraph(g)
	bias := ctx.VariableWithShape("bias", shapes.Make(p.Param, features)).ValueGraph(g)
	y := graph.DotGeneral(p.CastToCompute(x), []int{x.Rank() - 1}, nil, p.CastToCompute(kernel), []int{0}, nil)
	b := p.CastToCompute(bias)
	for b.Rank() < y.Rank() {
		b = graph.InsertAxes(b, 0)
	}
	return graph.Add(y, b)
}

// TestTiedBiasChangesNoValue: Dense and LayerNorm tie their bias and gain to their input (an exact
// -0.0 from its first value) and give the same bits as the plain formula, whatever that first
// value is (+0, -0, infinities, NaN), in float32 and bfloat16, on every backend.
func TestTiedBiasChangesNoValue(t *testing.T) {
	for _, backend := range testkit.All() {
		for _, policy := range []mixed.Policy{mixed.Float32, bf16Compute} {
			for _, first := range []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3} {
				values := make([]float32, 4*8)
				for i := range values {
					values[i] = float32(i%7) - 3.5
				}
				values[0] = first
				x := tensors.FromFlatDataAndDimensions(values, 4, 8)
				ctx := context.New()
				exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x *graph.Node) []*graph.Node {
					mixed.SetPolicy(ctx, policy)
					// A bias that is not zero, so that adding it is visible; Dense reuses it.
					ctx.In("dense").WithInitializer(func(g *graph.Graph, s shapes.Shape) *graph.Node {
						return graph.AddScalar(graph.Iota(g, s, 0), -2.25)
					}).VariableWithShape("bias", shapes.Make(dtypes.Float32, 5))
					tied := layers.Dense(ctx.In("dense").Checked(false), x, 5)
					plain := plainDense(ctx.In("dense").Reuse(), x, 5)
					return []*graph.Node{graph.ConvertDType(tied, dtypes.Float32), graph.ConvertDType(plain, dtypes.Float32)}
				})
				if err != nil {
					t.Fatal(err)
				}
				outs, err := exec.Exec(x)
				exec.Finalize()
				if err != nil {
					t.Fatal(err)
				}
				tied, plain := testkit.Floats(outs[0]), testkit.Floats(outs[1])
				for i := range tied {
					if math.Float64bits(tied[i]) != math.Float64bits(plain[i]) && !(math.IsNaN(tied[i]) && math.IsNaN(plain[i])) {
						t.Errorf("%s, %s, first value %g: output %d is %g, the plain formula gives %g", backend.Name(), policy, first, i, tied[i], plain[i])
						break
					}
				}
			}
		}
	}
}
