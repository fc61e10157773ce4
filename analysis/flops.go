package analysis

import (
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// nodeFLOPs estimates the floating-point operations of one node: exact for matmuls (two per
// multiply-add), one per output element for elementwise arithmetic, one per input element for
// reductions, and none for data movement (reshape, transpose, broadcast, slice, concatenate,
// conversion, gather). matmul is the part done by Dot and DotGeneral.
func nodeFLOPs(n *graph.Node) (flops, matmul int64) {
	if n.NumOutputs() != 1 || !n.DType().IsFloat() && !IsReduction(n.Type()) {
		return 0, 0
	}
	out := int64(n.Shape().Size())
	switch n.Type() {
	case graph.NodeTypeDotGeneral:
		contract := int64(1)
		if axes, err := gomlxcompat.IntSliceParam(n, "lhsContractingAxes"); err == nil {
			for _, ax := range axes {
				contract *= int64(n.Inputs()[0].Shape().Dimensions[ax])
			}
		}
		return 2 * out * contract, 2 * out * contract
	case graph.NodeTypeDot:
		lhs := n.Inputs()[0].Shape()
		contract := int64(lhs.Dimensions[lhs.Rank()-1])
		return 2 * out * contract, 2 * out * contract
	case graph.NodeTypeReduceSum, graph.NodeTypeReduceMax, graph.NodeTypeReduceMin, graph.NodeTypeReduceProduct:
		return int64(n.Inputs()[0].Shape().Size()), 0
	case graph.NodeTypeReshape, graph.NodeTypeTranspose, graph.NodeTypeBroadcastInDim, graph.NodeTypeSlice,
		graph.NodeTypeConcatenate, graph.NodeTypeConvertDType, graph.NodeTypeGather, graph.NodeTypeIdentity,
		graph.NodeTypeIota, graph.NodeTypeSplitNode, graph.NodeTypeBitcast:
		return 0, 0
	}
	return out, 0
}
