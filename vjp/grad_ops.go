package vjp

import (
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// sliceGrad scatters the cotangent back into zeros of the operand's shape by concatenating zero
// blocks around it, one axis at a time. Strided axes interleave the cotangent with zeros first.
// GoMLX's rule uses Pad, which the embedded backend does not implement.
func sliceGrad(node, v *graph.Node) ([]*graph.Node, error) {
	bounds, err := gomlxcompat.ReadSliceBounds(node)
	if err != nil {
		return nil, err
	}
	x := node.Inputs()[0]
	grad := v
	for axis := range x.Rank() {
		grad = expandAxis(grad, axis, x.Shape().Dimensions[axis], bounds.Starts[axis], max(bounds.Strides[axis], 1))
	}
	return []*graph.Node{grad}, nil
}

// expandAxis places the n values of g along axis at positions start, start+stride, ... of a
// zero-filled axis of length dim.
func expandAxis(g *graph.Node, axis, dim, start, stride int) *graph.Node {
	n := g.Shape().Dimensions[axis]
	if stride > 1 && n > 1 {
		// [.., n, ..] -> [.., n, stride, ..] with zeros after each value -> [.., n*stride, ..],
		// then drop the zeros that run past the end of the axis.
		withGaps := graph.Concatenate([]*graph.Node{
			graph.InsertAxes(g, axis+1),
			zerosLikeAxis(graph.InsertAxes(g, axis+1), axis+1, stride-1),
		}, axis+1)
		dims := g.Shape().Clone().Dimensions
		dims[axis] = n * stride
		g = graph.Reshape(withGaps, dims...)
		if start+n*stride > dim {
			g = graph.SliceAxis(g, axis, graph.AxisRange(0, dim-start))
		}
		n = g.Shape().Dimensions[axis]
	}
	parts := []*graph.Node{}
	if start > 0 {
		parts = append(parts, zerosLikeAxis(g, axis, start))
	}
	parts = append(parts, g)
	if end := dim - start - n; end > 0 {
		parts = append(parts, zerosLikeAxis(g, axis, end))
	}
	if len(parts) == 1 {
		return g
	}
	return graph.Concatenate(parts, axis)
}

// zerosLikeAxis returns zeros shaped like x except for length size along axis.
func zerosLikeAxis(x *graph.Node, axis, size int) *graph.Node {
	shape := x.Shape().Clone()
	shape.Dimensions[axis] = size
	return graph.Zeros(x.Graph(), shape)
}

// rsqrtGrad: d(x^-1/2)/dx = -1/2 x^-3/2 = -1/2 rsqrt(x)^3.
func rsqrtGrad(node, v *graph.Node) ([]*graph.Node, error) {
	cube := graph.Mul(node, graph.Mul(node, node))
	return []*graph.Node{graph.MulScalar(graph.Mul(v, cube), -0.5)}, nil
}

// expm1Grad: d(e^x - 1)/dx = e^x = expm1(x) + 1.
func expm1Grad(node, v *graph.Node) ([]*graph.Node, error) {
	return []*graph.Node{graph.Mul(v, graph.AddScalar(node, 1))}, nil
}

func identityGrad(_, v *graph.Node) ([]*graph.Node, error) {
	return []*graph.Node{v}, nil
}

// clampGrad passes the cotangent to x where min <= x <= max, and to the bound that was hit
// elsewhere (the operands are min, x, max).
func clampGrad(node, v *graph.Node) ([]*graph.Node, error) {
	lo, x, hi := node.Inputs()[0], node.Inputs()[1], node.Inputs()[2]
	zero := graph.ZerosLike(v)
	below := graph.LessThan(x, lo)
	above := graph.GreaterThan(x, hi)
	inside := graph.LogicalNot(graph.LogicalOr(below, above))
	return []*graph.Node{
		sumToShapeOf(graph.Where(below, v, zero), lo),
		graph.Where(inside, v, zero),
		sumToShapeOf(graph.Where(above, v, zero), hi),
	}, nil
}

// zeroGrad is the gradient of a piecewise-constant op (Sign, Round, Floor, Ceil): zero almost
// everywhere, which GoMLX spells as no gradient.
func zeroGrad(node, _ *graph.Node) ([]*graph.Node, error) {
	return make([]*graph.Node, len(node.Inputs())), nil
}
