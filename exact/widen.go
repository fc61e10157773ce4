package exact

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// The embedded backend sums 16-bit floats in 16 bits (a bfloat16 sum of 1024 ones is 256 there);
// onegpu sums, accumulates and processes them in a wider dtype.

// Is16Bit reports whether dtype is a 16-bit float (bfloat16 or float16), whose sums the embedded
// backend accumulates in 16 bits: a bfloat16 sum of 1024 ones is 256 there.
func Is16Bit(dtype dtypes.DType) bool {
	return dtype == dtypes.BFloat16 || dtype == dtypes.Float16
}

// WideDType is the dtype in which onegpu sums, accumulates and processes values of dtype: float64
// stays float64, anything else (16-bit floats, float32, integers) becomes float32.
func WideDType(dtype dtypes.DType) dtypes.DType {
	if dtype == dtypes.Float64 {
		return dtypes.Float64
	}
	return dtypes.Float32
}

// SumInFloat32 is graph.ReduceSum that accumulates 16-bit floats in float32 and returns the
// result in x's dtype. Other dtypes are summed as they are.
func SumInFloat32(x *graph.Node, axes ...int) *graph.Node {
	if !Is16Bit(x.DType()) {
		return graph.ReduceSum(x, axes...)
	}
	return graph.ConvertDType(graph.ReduceSum(graph.ConvertDType(x, dtypes.Float32), axes...), x.DType())
}
