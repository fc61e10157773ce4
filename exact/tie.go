package exact

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Ties are exact zeros computed from a value: adding one changes no bit of what it is added to,
// but puts the value on that node's path. GoMLX v0.26.0 has no optimization barrier and one
// custom-gradient hook, so onegpu orders and connects work with them:
//
//   - ZeroTiedTo puts an entry node on a gradient's path (SplitAxis, mixed's float32 islands).
//     XLA folds it away: it orders nothing.
//   - NegativeZeroFrom is a data dependency XLA cannot fold: the sum depends on x, so XLA can
//     neither merge it with the same sum made from another value (common-subexpression
//     elimination) nor compute it before x. layers ties biases, LayerNorm gains and the random
//     state to a layer's input with it, and remat and accum build their orderings the same way.
//
// A missing tie changes no value and no embedded-backend figure, only what XLA compiles: the
// census tests (models' tie tests) compile each model and block kind on XLA and count the
// recomputed ops.

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
