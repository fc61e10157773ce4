package analysis

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/exact"
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

// scratchBuffer is one scratch buffer of a matmul on the embedded backend.
type scratchBuffer struct {
	dtype    dtypes.DType
	elements int
	// kept marks a buffer simplego never returns to its pool (the small path's transposed
	// operand copies): the garbage collector frees it.
	kept bool
}

func (b scratchBuffer) bytes() int64 { return int64(b.elements) * int64(b.dtype.Size()) }

// matmulScratchBytes returns the bytes of scratch space the embedded backend allocates while
// running a Dot or DotGeneral node (see matmulScratch).
func matmulScratchBytes(n *graph.Node) int64 {
	var sum int64
	for _, b := range matmulScratch(n) {
		sum += b.bytes()
	}
	return sum
}

// matmulScratch returns the scratch buffers the embedded backend allocates, in this order, while
// running a Dot or DotGeneral node: blocked copies of both operands and of the output for large
// products; for small ones, transposed copies of operands whose axes are not already
// [batch, free, contracting], and a float32 accumulator for 16-bit products.
func matmulScratch(n *graph.Node) []scratchBuffer {
	var axes gomlxcompat.DotGeneralAxes
	switch n.Type() {
	case graph.NodeTypeDotGeneral:
		var err error
		if axes, err = gomlxcompat.ReadDotGeneralAxes(n); err != nil {
			return nil
		}
	case graph.NodeTypeDot: // simplego builds Dot as a DotGeneral contracting lhs's last axis with rhs's first
		axes = gomlxcompat.DotGeneralAxes{LHSContract: []int{n.Inputs()[0].Rank() - 1}, RHSContract: []int{0}}
	default:
		return nil
	}
	lhs, rhs := n.Inputs()[0].Shape(), n.Inputs()[1].Shape()
	batch, lhsFree, contract := matmulSizes(lhs.Dimensions, axes.LHSContract, axes.LHSBatch)
	_, rhsFree, _ := matmulSizes(rhs.Dimensions, axes.RHSContract, axes.RHSBatch)
	dtype := n.DType()
	accumulator := dtype
	if exact.Is16Bit(dtype) {
		accumulator = dtypes.Float32
	}
	if lhsFree*rhsFree > matmulLargeThreshold {
		return []scratchBuffer{
			{dtype: dtype, elements: blockedElements(batch, lhsFree, contract)},
			{dtype: dtype, elements: blockedElements(batch, rhsFree, contract)},
			{dtype: accumulator, elements: blockedElements(batch, lhsFree, rhsFree)},
		}
	}
	var scratch []scratchBuffer
	if !inMatmulOrder(lhs.Rank(), axes.LHSContract, axes.LHSBatch) {
		scratch = append(scratch, scratchBuffer{dtype: dtype, elements: lhs.Size(), kept: true})
	}
	if !inMatmulOrder(rhs.Rank(), axes.RHSContract, axes.RHSBatch) {
		scratch = append(scratch, scratchBuffer{dtype: dtype, elements: rhs.Size(), kept: true})
	}
	if exact.Is16Bit(dtype) {
		scratch = append(scratch, scratchBuffer{dtype: dtypes.Float32, elements: batch * lhsFree * rhsFree})
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

// blockedElements is the size of simplego's blocked layout [batch, ⌈rows/32⌉, ⌈cols/32⌉, 32, 32].
func blockedElements(batch, rows, cols int) int {
	blocks := ((rows + matmulBlockDim - 1) / matmulBlockDim) * ((cols + matmulBlockDim - 1) / matmulBlockDim)
	return batch * blocks * matmulBlockDim * matmulBlockDim
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
