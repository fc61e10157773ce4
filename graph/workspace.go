package graph

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// The embedded backend's matmul (simplego v0.26.0, dotgeneral*.go) allocates scratch buffers that
// live only while the op runs. They are a large part of a small model's peak, so Analyze adds them
// at the op that needs them. The sizes are simplego's (internal/gomlxcompat checks them): 32 for
// float32, float64 and bfloat16.
var (
	matmulBlockDim       = gomlxcompat.MatmulBlockDim(dtypes.Float32)
	matmulLargeThreshold = gomlxcompat.MatmulLargeFactor * matmulBlockDim * matmulBlockDim // lhs free size × rhs free size above which blocking is used
)

// matmulScratchBytes returns the bytes of scratch space the embedded backend allocates while
// running a Dot or DotGeneral node: blocked copies of both operands and of the output for large
// products; for small ones, transposed copies of operands whose axes are not already
// [batch, free, contracting], and a float32 accumulator for 16-bit products.
func matmulScratchBytes(n *graph.Node) int64 {
	var axes dotGeneralAxes
	switch n.Type() {
	case graph.NodeTypeDotGeneral:
		var err error
		if axes, err = readDotGeneralAxes(n); err != nil {
			return 0
		}
	case graph.NodeTypeDot: // simplego builds Dot as a DotGeneral contracting lhs's last axis with rhs's first
		axes = dotGeneralAxes{lhsContract: []int{n.Inputs()[0].Rank() - 1}, rhsContract: []int{0}}
	default:
		return 0
	}
	lhs, rhs := n.Inputs()[0].Shape(), n.Inputs()[1].Shape()
	batch, lhsFree, contract := matmulSizes(lhs.Dimensions, axes.lhsContract, axes.lhsBatch)
	_, rhsFree, _ := matmulSizes(rhs.Dimensions, axes.rhsContract, axes.rhsBatch)
	dtype := n.DType()
	accumulator := dtype
	if Is16Bit(dtype) {
		accumulator = dtypes.Float32
	}
	if lhsFree*rhsFree > matmulLargeThreshold {
		return blockedBytes(dtype, batch, lhsFree, contract) + blockedBytes(dtype, batch, rhsFree, contract) +
			blockedBytes(accumulator, batch, lhsFree, rhsFree)
	}
	var scratch int64
	if !inMatmulOrder(lhs.Rank(), axes.lhsContract, axes.lhsBatch) {
		scratch += int64(lhs.Memory())
	}
	if !inMatmulOrder(rhs.Rank(), axes.rhsContract, axes.rhsBatch) {
		scratch += int64(rhs.Memory())
	}
	if Is16Bit(dtype) {
		scratch += int64(batch*lhsFree*rhsFree) * int64(dtypes.Float32.Size())
	}
	return scratch
}

// matmulSizes returns the products of an operand's batch, free and contracting dimensions.
func matmulSizes(dims, contract, batch []int) (batchSize, freeSize, contractSize int) {
	batchSize, freeSize, contractSize = 1, 1, 1
	for ax, d := range dims {
		switch {
		case slices.Contains(batch, ax):
			batchSize *= d
		case slices.Contains(contract, ax):
			contractSize *= d
		default:
			freeSize *= d
		}
	}
	return
}

// blockedBytes is the size of simplego's blocked layout [batch, ⌈rows/32⌉, ⌈cols/32⌉, 32, 32].
func blockedBytes(dtype dtypes.DType, batch, rows, cols int) int64 {
	blocks := ((rows + matmulBlockDim - 1) / matmulBlockDim) * ((cols + matmulBlockDim - 1) / matmulBlockDim)
	return int64(batch*blocks*matmulBlockDim*matmulBlockDim) * int64(dtype.Size())
}

// inMatmulOrder reports whether an operand's axes already come as batch axes (in order), then free
// axes, then contracting axes (in order), so that simplego can use it without a transposed copy.
func inMatmulOrder(rank int, contract, batch []int) bool {
	const (
		batchAxis = iota
		freeAxis
		contractAxis
	)
	kind := make([]int, rank)
	for i := range kind {
		kind[i] = freeAxis
	}
	for i, ax := range contract {
		kind[ax] = contractAxis
		if i > 0 && ax < contract[i-1] {
			return false
		}
	}
	for i, ax := range batch {
		kind[ax] = batchAxis
		if i > 0 && ax < batch[i-1] {
			return false
		}
	}
	for i := 1; i < rank; i++ {
		if kind[i] < kind[i-1] {
			return false
		}
	}
	return true
}
