package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
)

// The chunked attention and cross-entropy compute their value block by block and give their
// gradient in closed form, recomputing each block in the backward pass. Two helpers make that
// work on GoMLX v0.26.0, which has one single-input custom-gradient hook and no optimization
// barrier.

// withGradients returns a node whose value is value's and whose gradients with respect to inputs
// are grad(out, v), where out is the returned node and v its cotangent; no gradient flows through
// value itself (compute it from StopGradient'ed inputs). grad returns one node per input, of that
// input's shape (any float dtype: it is converted), or nil for a zero gradient.
//
// It is mixed's island pattern for several inputs: an entry identity per input, tied to the
// value by an exact zero (exact.ZeroTiedTo), and an identity on the output whose gradient rule
// runs first (graph.Gradient visits nodes in decreasing creation order), computes every input's
// gradient and leaves them for the entries to deliver.
func withGradients(label string, inputs []*graph.Node, value *graph.Node, grad func(out, v *graph.Node) []*graph.Node) *graph.Node {
	var grads []*graph.Node
	var tie *graph.Node
	for i, x := range inputs {
		entry := graph.IdentityWithCustomGradient(x, func(_, _ *graph.Node) *graph.Node {
			if grads == nil {
				panic("layers: a blocked gradient was requested before its output's cotangent was known")
			}
			if grads[i] == nil {
				return graph.ZerosLike(x)
			}
			return graph.ConvertDType(grads[i], x.DType())
		})
		tie = addOrSet(tie, exact.ZeroTiedTo(entry, value.DType()))
	}
	sum := graph.Add(graph.StopGradient(value), tie)
	return graph.IdentityWithCustomGradient(sum, func(out, v *graph.Node) *graph.Node {
		defer analysis.Section(v.Graph(), label+" backward")()
		grads = grad(out, v)
		if len(grads) != len(inputs) {
			panic(fmt.Sprintf("layers: a blocked gradient returned %d gradients for %d inputs", len(grads), len(inputs)))
		}
		return v
	})
}

// after returns x, unchanged in value, with a data dependency on every node in deps (nil ones are
// skipped): x + zeroAfter(deps...). XLA can neither compute x before the dependencies exist nor
// merge x with the same value made from other dependencies (common-subexpression elimination).
// That is how the blocks are chained: a block's inputs are tied to the previous block's results,
// so XLA's scheduler runs the blocks one after the other and frees each block's temporaries before
// the next starts, and a backward pass's recomputation, tied to the cotangent, is neither merged
// back into the forward pass nor scheduled before it.
func after(x *graph.Node, deps ...*graph.Node) *graph.Node {
	return plus(x, zeroAfter(deps...))
}

// zeroAfter returns an exact float32 -0.0 computed from every node in deps (nil ones are
// skipped), or nil when there are none: the sum of their exact.NegativeZeroFrom, which XLA cannot
// fold to a constant.
func zeroAfter(deps ...*graph.Node) *graph.Node {
	var zero *graph.Node
	for _, d := range deps {
		if d != nil {
			zero = addOrSet(zero, exact.NegativeZeroFrom(d)) // -0.0 + -0.0 is -0.0
		}
	}
	return zero
}

// plus returns x + zero (an exact -0.0 from zeroAfter) in x's dtype, or x when zero is nil.
func plus(x, zero *graph.Node) *graph.Node {
	if zero == nil {
		return x
	}
	return graph.Add(x, graph.ConvertDType(zero, x.DType()))
}

// addOrSet returns acc + x, or x when acc is nil.
func addOrSet(acc, x *graph.Node) *graph.Node {
	if acc == nil {
		return x
	}
	return graph.Add(acc, x)
}

// statsDType is the dtype of the running statistics and accumulators: float64 for float64,
// float32 for everything else.
func statsDType(dtype dtypes.DType) dtypes.DType {
	if dtype == dtypes.Float64 {
		return dtypes.Float64
	}
	return dtypes.Float32
}

// span is a half-open range [start, end) of positions.
type span struct{ start, end int }

func (s span) len() int { return s.end - s.start }

// spans cuts [0, n) into consecutive spans of size (the last one shorter when size does not
// divide n).
func spans(n, size int) []span {
	var out []span
	for start := 0; start < n; start += size {
		out = append(out, span{start, min(start+size, n)})
	}
	return out
}

// sliceAxis returns x's positions s along axis.
func sliceAxis(x *graph.Node, axis int, s span) *graph.Node {
	if s.start == 0 && s.end == x.Shape().Dim(axis) {
		return x
	}
	return graph.SliceAxis(x, axis, graph.AxisRange(s.start, s.end))
}

// concatenate joins parts along axis (a single part is returned as is).
func concatenate(parts []*graph.Node, axis int) *graph.Node {
	if len(parts) == 1 {
		return parts[0]
	}
	return graph.Concatenate(parts, axis)
}
