package vjp

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/exact"
)

// SplitAxis splits x into n equal parts along axis, like jnp.split, with jax.lax.split's gradient:
// the parts' cotangents concatenated, in x's dtype.
//
// Three SliceAxis calls give the same values, but their gradient is three zero-padded copies of
// x's shape summed by autodiff: two extra adds of x's size per split (in bfloat16 each add
// rounds, and XLA's CPU backend runs it in float32 and may keep the float32 sum), where JAX's
// program has one concatenate. The attention's QKV split is the case that matters: its gradient
// is the size of the QKV projection. The values of the gradient are the same either way (adding
// zeros is exact).
//
// A part no loss depends on gets a zero gradient. Built on GoMLX v0.26.0's one custom-gradient
// hook (see withGradient in mixed for the pattern): an entry identity of x whose gradient is the
// concatenation, created before the parts, so that graph.Gradient (decreasing creation order)
// has every part's cotangent when it reaches the entry.
func SplitAxis(x *graph.Node, axis, n int) []*graph.Node {
	adjusted := axis
	if adjusted < 0 {
		adjusted += x.Rank()
	}
	if adjusted < 0 || adjusted >= x.Rank() || n < 1 || x.Shape().Dimensions[adjusted]%n != 0 {
		panic(fmt.Sprintf("SplitAxis: cannot split axis %d of %s into %d equal parts", axis, x.Shape(), n))
	}
	size := x.Shape().Dimensions[adjusted] / n
	cotangents := make([]*graph.Node, n)
	entry := graph.IdentityWithCustomGradient(x, func(_, _ *graph.Node) *graph.Node {
		parts := make([]*graph.Node, n)
		for i, v := range cotangents {
			if v == nil { // a part the loss does not depend on
				v = zerosLikeAxis(x, adjusted, size)
			}
			parts[i] = graph.ConvertDType(v, x.DType())
		}
		clear(cotangents) // a later graph.Gradient of the same graph collects its own
		return graph.Concatenate(parts, adjusted)
	})
	tie := exact.ZeroTiedTo(entry, x.DType())
	value := graph.StopGradient(x)
	outs := make([]*graph.Node, n)
	for i := range n {
		part := graph.Add(graph.SliceAxis(value, adjusted, graph.AxisRange(i*size, (i+1)*size)), tie)
		outs[i] = graph.IdentityWithCustomGradient(part, func(_, v *graph.Node) *graph.Node {
			cotangents[i] = v
			return v
		})
	}
	return outs
}
