package graph

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// SplitAxis splits x into n equal parts along axis, like jnp.split, with jax.lax.split's gradient:
// the parts' cotangents concatenated, in x's dtype.
//
// Three SliceAxis calls give the same values, but their gradient is three zero-padded copies of
// x's shape summed by autodiff: two extra adds of x's size per split (in bfloat16 each add
// rounds, and XLA's CPU backend runs it in float32 and may keep the float32 sum), where JAX's
// program has one concatenate. The attention's QKV split is the case that matters: its gradient
// is the size of the QKV projection. The values of the gradient are the same either way (adding
// zeros is exact).
//
// A part no loss depends on gets a zero gradient. Built on GoMLX v0.26.0's one custom-gradient
// hook (see withGradient in mixed for the pattern): an entry identity of x whose gradient is the
// concatenation, created before the parts, so that graph.Gradient (decreasing creation order)
// has every part's cotangent when it reaches the entry.
func SplitAxis(x *graph.Node, axis, n int) []*graph.Node {
	adjusted := axis
	if adjusted < 0 {
		adjusted += x.Rank()
	}
	if adjusted < 0 || adjusted >= x.Rank() || n < 1 || x.Shape().Dimensions[adjusted]%n != 0 {
		panic(fmt.Sprintf("ograph.SplitAxis: cannot split axis %d of %s into %d equal parts", axis, x.Shape(), n))
	}
	size := x.Shape().Dimensions[adjusted] / n
	cotangents := make([]*graph.Node, n)
	entry := graph.IdentityWithCustomGradient(x, func(_, _ *graph.Node) *graph.Node {
		parts := make([]*graph.Node, n)
		for i, v := range cotangents {
			if v == nil { // a part the loss does not depend on
				v = zerosLikeAxis(x, adjusted, size)
			}
			parts[i] = graph.ConvertDType(v, x.DType())
		}
		clear(cotangents) // a later graph.Gradient of the same graph collects its own
		return graph.Concatenate(parts, adjusted)
	})
	tie := ZeroTiedTo(entry, x.DType())
	value := graph.StopGradient(x)
	outs := make([]*graph.Node, n)
	for i := range n {
		part := graph.Add(graph.SliceAxis(value, adjusted, graph.AxisRange(i*size, (i+1)*size)), tie)
		outs[i] = graph.IdentityWithCustomGradient(part, func(_, v *graph.Node) *graph.Node {
			cotangents[i] = v
			return v
		})
	}
	return outs
}

// ZeroTiedTo returns an exact zero scalar of dtype computed from x's first element: it puts x on
// the gradient path of whatever it is added to without changing a value, which is how a custom
// gradient built on IdentityWithCustomGradient reaches an entry node. XLA folds it away (a select
// on a constant false).
func ZeroTiedTo(x *graph.Node, dtype dtypes.DType) *graph.Node {
	g := x.Graph()
	return graph.Where(graph.Const(g, false), graph.ConvertDType(firstValue(x), dtype), graph.ScalarZero(g, dtype))
}

// NegativeZeroFrom returns an exact -0.0 (float32) computed from x's first value that XLA cannot
// fold to a constant: (first != first, as 0 or 1)·(-0.0), -0.0 whatever the value, NaN included.
// Adding it to a float changes no bit (v + -0.0 == v, +0.0 and -0.0 included) and converted to an
// integer it is 0, but the sum depends on x: XLA can neither merge it with the same sum made from
// another value (common-subexpression elimination) nor compute it before x. No gradient flows to x.
func NegativeZeroFrom(x *graph.Node) *graph.Node {
	first := firstValue(graph.StopGradient(x))
	isNaN := graph.ConvertDType(graph.NotEqual(first, first), dtypes.Float32)
	return graph.Mul(isNaN, graph.Scalar(x.Graph(), dtypes.Float32, math.Copysign(0, -1)))
}

// firstValue returns x's first element as a scalar.
func firstValue(x *graph.Node) *graph.Node {
	if x.IsScalar() {
		return x
	}
	specs := make([]graph.SliceAxisSpec, x.Rank())
	for i := range specs {
		specs[i] = graph.AxisElem(0)
	}
	return graph.Reshape(graph.Slice(x, specs...))
}
