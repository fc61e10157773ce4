package vjp

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// sumToShapeOf sums the gradient x of a broadcast back to input's shape: over the axes where input
// has dimension 1 (GoMLX's implicit broadcasting) or everything when input is a scalar. The sum is
// accumulated in float32 for 16-bit values.
func sumToShapeOf(x, input *graph.Node) *graph.Node {
	if x.Shape().Equal(input.Shape()) {
		return x
	}
	if input.IsScalar() {
		return graph.ReshapeWithShape(exact.SumInFloat32(x), input.Shape())
	}
	var axes []int
	for i, d := range input.Shape().Dimensions {
		if d == 1 && x.Shape().Dimensions[i] != 1 {
			axes = append(axes, i)
		}
	}
	if len(axes) > 0 {
		x = exact.SumInFloat32(x, axes...)
	}
	return graph.ReshapeWithShape(x, input.Shape())
}

func addGrad(node, v *graph.Node) ([]*graph.Node, error) {
	a, b := node.Inputs()[0], node.Inputs()[1]
	return []*graph.Node{sumToShapeOf(v, a), sumToShapeOf(v, b)}, nil
}

func subGrad(node, v *graph.Node) ([]*graph.Node, error) {
	a, b := node.Inputs()[0], node.Inputs()[1]
	return []*graph.Node{sumToShapeOf(v, a), graph.Neg(sumToShapeOf(v, b))}, nil
}

// mulGrad multiplies the cotangent by the other operand with implicit broadcasting. GoMLX's rule
// first broadcasts that operand to full size; when it is a constant or a weight (GELU's 0.5, a
// LayerNorm gain, 1/sqrt(d)), a parallel executor computes that broadcast at the start of the step
// and keeps it alive until the backward pass.
func mulGrad(node, v *graph.Node) ([]*graph.Node, error) {
	a, b := node.Inputs()[0], node.Inputs()[1]
	return []*graph.Node{productSummedTo(v, b, a), productSummedTo(v, a, b)}, nil
}

// productSummedTo returns v*other summed to input's shape. When that sums 16-bit values over
// broadcast axes (a LayerNorm gain's gradient), the products are formed in float32 too: rounding
// each product to 16 bits before a long sum costs about 1% on a batch of 4096.
func productSummedTo(v, other, input *graph.Node) *graph.Node {
	if !exact.Is16Bit(v.DType()) || input.Shape().Equal(v.Shape()) {
		return sumToShapeOf(graph.Mul(v, other), input)
	}
	wide := graph.Mul(graph.ConvertDType(v, dtypes.Float32), graph.ConvertDType(other, dtypes.Float32))
	return graph.ConvertDType(sumToShapeOf(wide, graph.ConvertDType(input, dtypes.Float32)), v.DType())
}

// divGrad is mulGrad's counterpart: d(a/b)/da = 1/b and d(a/b)/db = -(a/b)/b, written with the
// output so that neither operand is broadcast and every term depends on the cotangent.
func divGrad(node, v *graph.Node) ([]*graph.Node, error) {
	a, b := node.Inputs()[0], node.Inputs()[1]
	return []*graph.Node{
		sumToShapeOf(graph.Div(v, b), a),
		sumToShapeOf(graph.Neg(graph.Div(graph.Mul(v, node), b)), b),
	}, nil
}

// broadcastInDimGrad sums the cotangent over the output axes the operand was broadcast along
// (axes not mapped from the operand, and mapped axes that grew from dimension 1).
func broadcastInDimGrad(node, v *graph.Node) ([]*graph.Node, error) {
	mapped, err := gomlxcompat.ReadBroadcastAxes(node)
	if err != nil {
		return nil, err
	}
	if !slices.IsSorted(mapped) {
		return nil, fmt.Errorf("BroadcastInDim axes %v also transpose the operand", mapped)
	}
	x := node.Inputs()[0]
	kept := make([]bool, node.Rank())
	for i, ax := range mapped {
		kept[ax] = x.Shape().Dimensions[i] == node.Shape().Dimensions[ax]
	}
	var axes []int
	for ax, k := range kept {
		if !k {
			axes = append(axes, ax)
		}
	}
	grad := v
	if len(axes) > 0 {
		grad = exact.SumInFloat32(v, axes...)
	}
	return []*graph.Node{graph.ReshapeWithShape(grad, x.Shape())}, nil
}
