package mixed

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Cast converts a floating-point node to dtype and returns any other node (integers, booleans,
// nil) as it is, like jmp's casts. A node that already has dtype is returned itself, without
// adding a conversion: GoMLX's embedded backend crashes on a graph output that is an unchanged
// input, and a no-op conversion is exactly that.
//
// dtype must be a floating-point dtype; Cast panics otherwise.
func Cast(x *graph.Node, dtype dtypes.DType) *graph.Node {
	if !dtype.IsFloat() {
		panicf("mixed.Cast: target dtype %s is not a floating-point dtype", dtype)
	}
	if x == nil || !x.DType().IsFloat() || x.DType() == dtype {
		return x
	}
	return graph.ConvertDType(x, dtype)
}

// CastSlice returns a new slice with Cast(x, dtype) of each element; nil elements stay nil.
func CastSlice(xs []*graph.Node, dtype dtypes.DType) []*graph.Node {
	if xs == nil {
		return nil
	}
	out := make([]*graph.Node, len(xs))
	for i, x := range xs {
		out[i] = Cast(x, dtype)
	}
	return out
}

// CastMap returns a new map with Cast(x, dtype) of each value, under the same keys.
func CastMap[K comparable](m map[K]*graph.Node, dtype dtypes.DType) map[K]*graph.Node {
	if m == nil {
		return nil
	}
	out := make(map[K]*graph.Node, len(m))
	for k, x := range m {
		out[k] = Cast(x, dtype)
	}
	return out
}

// CastToParam casts a floating-point node to the policy's parameter dtype (see Cast).
func (p Policy) CastToParam(x *graph.Node) *graph.Node { return Cast(x, p.Param) }

// CastToCompute casts a floating-point node to the policy's compute dtype (see Cast). Cast each
// parameter to the compute dtype where it is used: its gradient then comes back in the parameter
// dtype.
func (p Policy) CastToCompute(x *graph.Node) *graph.Node { return Cast(x, p.Compute) }

// CastToOutput casts a floating-point node to the policy's output dtype (see Cast).
func (p Policy) CastToOutput(x *graph.Node) *graph.Node { return Cast(x, p.Output) }

// CastSliceToParam casts each floating-point node of xs to the parameter dtype (see CastSlice).
func (p Policy) CastSliceToParam(xs []*graph.Node) []*graph.Node { return CastSlice(xs, p.Param) }

// CastSliceToCompute casts each floating-point node of xs to the compute dtype (see CastSlice).
func (p Policy) CastSliceToCompute(xs []*graph.Node) []*graph.Node { return CastSlice(xs, p.Compute) }

// CastSliceToOutput casts each floating-point node of xs to the output dtype (see CastSlice).
func (p Policy) CastSliceToOutput(xs []*graph.Node) []*graph.Node { return CastSlice(xs, p.Output) }
