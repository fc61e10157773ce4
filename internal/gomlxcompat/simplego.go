package gomlxcompat

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// MatmulBlockDim is the side of the square blocks simplego's large matmul copies its operands
// into, for dtype.
//
// Assumption (GoMLX v0.26.0, backends/simplego/dotgeneral*.go): the block side is
// 1 << DotGeneralTargetBlockLog2Dim[dtype], and products whose lhs free size times rhs free size
// exceed MatmulLargeFactor blocks use the blocked path (below, the small path that transposes
// operands not in [batch, free, contracting] order).
func MatmulBlockDim(dtype dtypes.DType) int {
	return 1 << simplego.DotGeneralTargetBlockLog2Dim[dtype]
}

// MatmulLargeFactor is the number of blocks (of MatmulBlockDim² elements) above which simplego
// uses its blocked matmul (dotgeneral.go: crossesSize > 16*blockSize).
const MatmulLargeFactor = 16

// IsSimpleGo reports whether b is simplego, the embedded backend, whose matmul allocates the
// scratch buffers MatmulBlockDim and MatmulLargeFactor describe (XLA allocates none of them). A
// backend that wraps another (an Unwrap method returning it, as platform's dtype guard has) is
// looked through.
func IsSimpleGo(b backends.Backend) bool {
	for b != nil {
		if _, ok := b.(*simplego.Backend); ok {
			return true
		}
		w, ok := b.(interface{ Unwrap() backends.Backend })
		if !ok {
			return false
		}
		b = w.Unwrap()
	}
	return false
}
