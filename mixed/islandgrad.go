package mixed

import (
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/exact"
)

// Island gradients. Differentiating an island op by op would keep its float32 intermediates (the
// upcast input, exponentials, centered values: twice the bytes of a bfloat16 activation) alive
// from the forward pass until the backward pass, which undoes the memory saving of 16-bit compute
// on a backend that does not fuse (GoMLX's embedded backend). So the islands that keep
// activation-sized intermediates give their gradient in closed form, computed in float32 from
// what is kept anyway: the island's output (softmax, log-softmax, normalize) or its input in its
// own dtype (log-sum-exp, cross-entropy), plus per-row statistics.

// withGradient returns a node whose value is value's and whose gradient with respect to x is
// grad(out, v), where out is the returned node and v its cotangent; no gradient flows through
// value itself. grad must return a node of x's shape and dtype.
//
// GoMLX v0.26.0's only custom-gradient hook is IdentityWithCustomGradient, on a single node. The
// returned node is an identity over value + tie, where tie is an exact zero computed from an
// identity of x (the entry): differentiating reaches the returned node first (graph.Gradient
// visits nodes in decreasing creation order), which computes x's gradient, and then the entry,
// which delivers it to x. The ops of the tie's own gradient are never used, so no backend runs
// them.
func withGradient(x, value *graph.Node, grad func(out, v *graph.Node) *graph.Node) *graph.Node {
	var dx *graph.Node
	entry := graph.IdentityWithCustomGradient(x, func(_, _ *graph.Node) *graph.Node {
		if dx == nil {
			panicf("mixed: the gradient of an island was requested before its output's cotangent was known")
		}
		return dx
	})
	tie := exact.ZeroTiedTo(entry, value.DType())
	sum := graph.Add(graph.StopGradient(value), tie)
	return graph.IdentityWithCustomGradient(sum, func(out, v *graph.Node) *graph.Node {
		dx = graph.ConvertDType(grad(out, v), x.DType())
		return v
	})
}

// toWide converts x to float32 (float64 stays float64); non-float dtypes panic in widen.
func toWide(x *graph.Node, like *graph.Node) *graph.Node {
	return graph.ConvertDType(x, wide(like))
}

// softmaxGrad returns y·(v - Σ v·y) over axes (kept), in y's widened dtype.
func softmaxGrad(y, v *graph.Node, axes []int) *graph.Node {
	y, v = toWide(y, y), toWide(v, y)
	dot := graph.ReduceAndKeep(graph.Mul(v, y), graph.ReduceSum, axes...)
	return graph.Mul(y, graph.Sub(v, dot))
}

// logSoftmaxGrad returns v - exp(y)·Σ v over axes, with y = log-probabilities.
func logSoftmaxGrad(y, v *graph.Node, axes []int) *graph.Node {
	y, v = toWide(y, y), toWide(v, y)
	return graph.Sub(v, graph.Mul(graph.Exp(y), graph.ReduceAndKeep(v, graph.ReduceSum, axes...)))
}

// normalizeGrad returns r·(v - mean(v) - y·mean(v·y)) over axes, the gradient of
// y = (x - mean)·r with r = 1/sqrt(variance + ε), from the output y and r.
func normalizeGrad(y, r, v *graph.Node, axes []int) *graph.Node {
	y, v = toWide(y, r), toWide(v, r)
	meanV := graph.ReduceAndKeep(v, graph.ReduceMean, axes...)
	meanVY := graph.ReduceAndKeep(graph.Mul(v, y), graph.ReduceMean, axes...)
	return graph.Mul(r, graph.Sub(graph.Sub(v, meanV), graph.Mul(y, meanVY)))
}

// rmsNormalizeGrad returns r·(v - y·mean(v·y)) over axes, the gradient of y = x·r with
// r = 1/sqrt(mean(x²) + ε), from the output y and r.
func rmsNormalizeGrad(y, r, v *graph.Node, axes []int) *graph.Node {
	y, v = toWide(y, r), toWide(v, r)
	meanVY := graph.ReduceAndKeep(graph.Mul(v, y), graph.ReduceMean, axes...)
	return graph.Mul(r, graph.Sub(v, graph.Mul(y, meanVY)))
}

// expandAxes inserts the reduced axes (sorted, non-negative) back into a reduced node.
func expandAxes(x *graph.Node, axes []int) *graph.Node {
	for _, a := range axes {
		x = graph.InsertAxes(x, a)
	}
	return x
}

// normalizedAxes returns axes as sorted non-negative indices of a rank-r shape.
func normalizedAxes(axes []int, rank int) []int {
	out := make([]int, 0, len(axes))
	seen := make([]bool, rank)
	for _, a := range axes {
		if a < 0 {
			a += rank
		}
		if a < 0 || a >= rank {
			panicf("mixed: axis %d out of range for rank %d", a, rank)
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort: few axes
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
