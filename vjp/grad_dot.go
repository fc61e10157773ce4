package vjp

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// dotGeneralGrad returns both operands' gradients of a DotGeneral as DotGenerals of the cotangent
// with the other operand: two matmuls, accumulated by the backend (float32 for bfloat16 inputs),
// instead of GoMLX v0.26.0's broadcast-multiply-and-sum.
func dotGeneralGrad(node, v *graph.Node) ([]*graph.Node, error) {
	axes, err := gomlxcompat.ReadDotGeneralAxes(node)
	if err != nil {
		return nil, err
	}
	lhs, rhs := node.Inputs()[0], node.Inputs()[1]
	nb := len(axes.LHSBatch)
	nLhsFree := len(gomlxcompat.FreeAxes(lhs.Rank(), axes.LHSContract, axes.LHSBatch))
	nRhsFree := len(gomlxcompat.FreeAxes(rhs.Rank(), axes.RHSContract, axes.RHSBatch))
	// v's axes: [batch..., lhs free..., rhs free...].
	vBatch := axisRange(0, nb)
	vLhsFree := axisRange(nb, nLhsFree)
	vRhsFree := axisRange(nb+nLhsFree, nRhsFree)
	return []*graph.Node{
		operandGrad(v, vBatch, vRhsFree, lhs, axes.LHSContract, axes.LHSBatch, rhs, axes.RHSContract, axes.RHSBatch),
		operandGrad(v, vBatch, vLhsFree, rhs, axes.RHSContract, axes.RHSBatch, lhs, axes.LHSContract, axes.LHSBatch),
	}, nil
}

// operandGrad is the gradient of one DotGeneral operand ("this"): v contracted with the other
// operand over the other's free axes (vOtherFree are those axes in v), batched over the batch axes.
// The product's axes are [batch..., this free..., other's contracting axes in increasing order],
// which a transpose puts back in this operand's layout.
func operandGrad(v *graph.Node, vBatch, vOtherFree []int,
	this *graph.Node, thisContract, thisBatch []int,
	other *graph.Node, otherContract, otherBatch []int) *graph.Node {
	otherFree := gomlxcompat.FreeAxes(other.Rank(), otherContract, otherBatch)
	product := graph.DotGeneral(v, vOtherFree, vBatch, other, otherFree, otherBatch)
	thisFree := gomlxcompat.FreeAxes(this.Rank(), thisContract, thisBatch)
	sortedOtherContract := slices.Sorted(slices.Values(otherContract))
	nb, nFree := len(thisBatch), len(thisFree)
	perm := make([]int, this.Rank())
	for k, ax := range thisBatch {
		perm[ax] = k
	}
	for k, ax := range thisFree {
		perm[ax] = nb + k
	}
	for i, ax := range thisContract {
		perm[ax] = nb + nFree + slices.Index(sortedOtherContract, otherContract[i])
	}
	if slices.Equal(perm, axisRange(0, len(perm))) {
		return product
	}
	return graph.TransposeAllAxes(product, perm...)
}

// dotGrad handles GoMLX's Dot node (matrix-matrix, matrix-vector, vector-vector) with DotGenerals.
func dotGrad(node, v *graph.Node) ([]*graph.Node, error) {
	a, b := node.Inputs()[0], node.Inputs()[1]
	switch {
	case a.Rank() == 2 && b.Rank() == 2: // [i,j]·[j,k] -> [i,k]
		return []*graph.Node{
			graph.DotGeneral(v, []int{1}, nil, b, []int{1}, nil), // [i,k]·[j,k] -> [i,j]
			graph.DotGeneral(a, []int{0}, nil, v, []int{0}, nil), // [i,j]·[i,k] -> [j,k]
		}, nil
	case a.Rank() == 2 && b.Rank() == 1: // [i,j]·[j] -> [i]
		return []*graph.Node{
			graph.DotGeneral(graph.InsertAxes(v, -1), []int{1}, nil, graph.InsertAxes(b, 0), []int{0}, nil), // outer product [i,j]
			graph.DotGeneral(a, []int{0}, nil, v, []int{0}, nil),                                            // [j]
		}, nil
	case a.Rank() == 1 && b.Rank() == 1: // [j]·[j] -> scalar
		return []*graph.Node{graph.Mul(v, b), graph.Mul(v, a)}, nil
	}
	return nil, fmt.Errorf("Dot of ranks %d and %d", a.Rank(), b.Rank())
}

// axisRange returns [start, start+1, ..., start+n-1].
func axisRange(start, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = start + i
	}
	return s
}
