package accum

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// CheckSplit returns an error unless inputs of the given shapes split into microBatches equal
// micro-batches along axis 0: microBatches must be at least 1, every input needs axis 0 of the same
// size (the batch), and the batch must be a multiple of microBatches. The error names the numbers
// involved and, for a batch that does not divide, the nearest numbers of micro-batches that do.
// Call it on user input before building a graph; Gradients panics with the same message.
func CheckSplit(microBatches int, inputs ...shapes.Shape) error {
	if microBatches < 1 {
		return fmt.Errorf("%d micro-batches: the number of micro-batches must be at least 1", microBatches)
	}
	if len(inputs) == 0 {
		return fmt.Errorf("no inputs to split into %d micro-batches", microBatches)
	}
	batch := -1
	for i, s := range inputs {
		if s.Rank() == 0 {
			return fmt.Errorf("input #%d is a scalar (%s): every input needs a batch axis (axis 0) to split into micro-batches", i, s)
		}
		if batch < 0 {
			batch = s.Dim(0)
		} else if s.Dim(0) != batch {
			return fmt.Errorf("input #%d has %d examples on axis 0 but input #0 has %d: all inputs must share the batch axis", i, s.Dim(0), batch)
		}
	}
	if batch%microBatches != 0 {
		return fmt.Errorf("a batch of %d examples does not split into %d micro-batches: %s", batch, microBatches, suggestDivisors(batch, microBatches))
	}
	return nil
}

// suggestDivisors names the divisors of batch nearest to k.
func suggestDivisors(batch, k int) string {
	below, above := 1, 0
	for d := 1; d <= batch; d++ {
		if batch%d != 0 {
			continue
		}
		if d < k {
			below = d
		} else if above == 0 {
			above = d
		}
	}
	options := []string{fmt.Sprint(below)}
	if above > 0 {
		options = append(options, fmt.Sprint(above))
	}
	return fmt.Sprintf("use a divisor of %d (nearest: %s) or change the batch size", batch, strings.Join(options, " or "))
}

// microBatch returns the i-th of k equal slices of each input along axis 0. When after is not nil
// (an exact float32 zero from serializeAfter) it is added to every slice, so that nothing of this
// micro-batch can run before what after depends on.
func microBatch(inputs []*graph.Node, k, i int, after *graph.Node) []*graph.Node {
	if k == 1 {
		return inputs
	}
	out := make([]*graph.Node, len(inputs))
	for j, x := range inputs {
		n := x.Shape().Dim(0) / k
		s := graph.Slice(x, graph.AxisRange(i*n, (i+1)*n))
		if after != nil {
			s = dependOn(s, after)
		}
		out[j] = s
	}
	return out
}

// dependOn returns x unchanged in value but data-dependent on zero, an exact float32 zero.
func dependOn(x, zero *graph.Node) *graph.Node {
	switch {
	case x.DType() == dtypes.Bool:
		return graph.LogicalOr(x, graph.NotEqual(zero, graph.ScalarZero(zero.Graph(), zero.DType())))
	case x.DType().IsFloat() || x.DType().IsInt():
		return graph.Add(x, graph.ConvertDType(zero, x.DType()))
	default:
		panicf("accum: cannot split input of dtype %s into micro-batches", x.DType())
		return nil
	}
}

// serializeAfter returns an exact float32 zero that depends on one element of every node in
// nodes: adding it to the next micro-batch's inputs makes that micro-batch wait for all of them,
// so that its activations are not alive at the same time as the previous micro-batch's.
//
// GoMLX v0.26.0 has no optimization barrier. XLA does not fold a floating-point x*0 (it would be
// wrong for Inf and NaN), and Where(IsFinite(e), e, 0) makes the product exactly 0 (or -0) for any
// e. StopGradient keeps the next micro-batch's gradient from reaching back into this one's.
func serializeAfter(nodes []*graph.Node) *graph.Node {
	var e *graph.Node
	for _, x := range nodes {
		if !x.DType().IsFloat() {
			continue
		}
		element := x
		if x.Rank() > 0 {
			first := make([]graph.SliceAxisSpec, x.Rank())
			for axis := range first {
				first[axis] = graph.AxisElem(0)
			}
			element = graph.Reshape(graph.Slice(x, first...))
		}
		element = graph.ConvertDType(element, dtypes.Float32)
		if e == nil {
			e = element
		} else {
			e = graph.Add(e, element)
		}
	}
	if e == nil {
		panicf("accum: nothing to serialize micro-batches on (no floating-point gradients)")
	}
	g := e.Graph()
	zero := graph.ScalarZero(g, dtypes.Float32)
	e = graph.StopGradient(e)
	return graph.Mul(graph.Where(graph.IsFinite(e), e, zero), zero)
}
