package vjp_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/vjp"
)

// TestSplitAxis: SplitAxis gives the parts SliceAxis gives, and x's gradient (one concatenate of
// the parts' cotangents) is bit-identical to the sum of SliceAxis's zero-padded gradients, in
// float32 and bfloat16, on every backend; a part the loss does not use gets zeros.
func TestSplitAxis(t *testing.T) {
	for name, backend := range backendsUnderTest(t) {
		x := randomTensor(rand.New(rand.NewPCG(1, 2)), 2, 3, 4, 12) // a tensor lives on one backend
		for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			for _, used := range [][]bool{{true, true, true}, {true, false, true}} {
				step := func(split func(x *graph.Node) []*graph.Node) func(xs []*graph.Node) []*graph.Node {
					return func(xs []*graph.Node) []*graph.Node {
						x := graph.ConvertDType(xs[0], dtype)
						parts := split(x)
						var loss *graph.Node
						for i, p := range parts {
							if !used[i] {
								continue
							}
							term := weightedSum(graph.ConvertDType(graph.MulScalar(p, float64(i+1)), dtypes.Float32))
							if loss == nil {
								loss = term
							} else {
								loss = graph.Add(loss, term)
							}
						}
						return append(parts, graph.Gradient(loss, x)[0])
					}
				}
				got := testkit.Run(t, backend, step(func(x *graph.Node) []*graph.Node { return vjp.SplitAxis(x, -1, 3) }), x)
				want := testkit.Run(t, backend, step(func(x *graph.Node) []*graph.Node {
					return []*graph.Node{graph.SliceAxis(x, -1, graph.AxisRange(0, 4)),
						graph.SliceAxis(x, -1, graph.AxisRange(4, 8)), graph.SliceAxis(x, -1, graph.AxisRange(8, 12))}
				}), x)
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("%s, %s, parts used %v: output %d (3 = the gradient) differs from SliceAxis's", name, dtype, used, i)
					}
				}
				if !used[1] && testkit.MaxAbs(got[3]) == 0 {
					t.Errorf("%s, %s: the gradient is all zeros", name, dtype)
				}
			}
		}
	}
}

func TestSplitAxisErrors(t *testing.T) {
	x := randomTensor(rand.New(rand.NewPCG(1, 2)), 2, 12)
	for _, tc := range []struct{ axis, n int }{{1, 5}, {2, 3}, {-3, 2}, {0, 0}} {
		testkit.MustPanic(t, "cannot split axis", func() {
			run(t, func(xs []*graph.Node) []*graph.Node { return vjp.SplitAxis(xs[0], tc.axis, tc.n) }, x)
		})
	}
}
