package graph

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/graph/internal/gomlxcompat"
)

// GoMLX v0.26.0 keeps an op's static parameters (DotGeneral's axes, Slice's bounds, BroadcastInDim's
// axes) in unexported structs and exposes them only through Node.String(). Reading them with
// reflection (internal/gomlxcompat) is exact and does not depend on a print format; every reader below checks what it
// read against the node's shapes, and callers fall back to GoMLX's own rule when a read fails.

// intSliceParam reads the []int field named field of node's parameters (see gomlxcompat.IntSliceParam).
var intSliceParam = gomlxcompat.IntSliceParam

// dotGeneralAxes are the contracting and batch axes of a DotGeneral node.
type dotGeneralAxes struct {
	lhsContract, lhsBatch, rhsContract, rhsBatch []int
}

// readDotGeneralAxes reads node's axes and checks them against its operand and output shapes:
// output = batch dims, then lhs free dims, then rhs free dims.
func readDotGeneralAxes(node *graph.Node) (dotGeneralAxes, error) {
	var a dotGeneralAxes
	var err error
	for _, f := range []struct {
		dst  *[]int
		name string
	}{
		{&a.lhsContract, "lhsContractingAxes"}, {&a.lhsBatch, "lhsBatchAxes"},
		{&a.rhsContract, "rhsContractingAxes"}, {&a.rhsBatch, "rhsBatchAxes"},
	} {
		if *f.dst, err = intSliceParam(node, f.name); err != nil {
			return a, err
		}
	}
	lhs, rhs := node.Inputs()[0].Shape(), node.Inputs()[1].Shape()
	if len(a.lhsContract) != len(a.rhsContract) || len(a.lhsBatch) != len(a.rhsBatch) {
		return a, fmt.Errorf("DotGeneral axes %+v do not pair up", a)
	}
	var want []int
	for i, ax := range a.lhsBatch {
		if !validAxis(ax, lhs.Rank()) || !validAxis(a.rhsBatch[i], rhs.Rank()) || lhs.Dimensions[ax] != rhs.Dimensions[a.rhsBatch[i]] {
			return a, fmt.Errorf("DotGeneral batch axes %+v do not match shapes %s, %s", a, lhs, rhs)
		}
		want = append(want, lhs.Dimensions[ax])
	}
	for i, ax := range a.lhsContract {
		if !validAxis(ax, lhs.Rank()) || !validAxis(a.rhsContract[i], rhs.Rank()) || lhs.Dimensions[ax] != rhs.Dimensions[a.rhsContract[i]] {
			return a, fmt.Errorf("DotGeneral contracting axes %+v do not match shapes %s, %s", a, lhs, rhs)
		}
	}
	for _, ax := range freeAxes(lhs.Rank(), a.lhsContract, a.lhsBatch) {
		want = append(want, lhs.Dimensions[ax])
	}
	for _, ax := range freeAxes(rhs.Rank(), a.rhsContract, a.rhsBatch) {
		want = append(want, rhs.Dimensions[ax])
	}
	if !slices.Equal(want, node.Shape().Dimensions) {
		return a, fmt.Errorf("DotGeneral axes %+v give dimensions %v, but the node has %v", a, want, node.Shape().Dimensions)
	}
	return a, nil
}

// readBroadcastAxes reads the axes of the output that each input axis of a BroadcastInDim maps to.
func readBroadcastAxes(node *graph.Node) ([]int, error) {
	axes, err := intSliceParam(node, "broadcastAxes")
	if err != nil {
		return nil, err
	}
	x, out := node.Inputs()[0].Shape(), node.Shape()
	if len(axes) != x.Rank() {
		return nil, fmt.Errorf("BroadcastInDim has %d axes for an operand of rank %d", len(axes), x.Rank())
	}
	for i, ax := range axes {
		if !validAxis(ax, out.Rank()) || (x.Dimensions[i] != 1 && x.Dimensions[i] != out.Dimensions[ax]) {
			return nil, fmt.Errorf("BroadcastInDim axes %v do not map %s onto %s", axes, x, out)
		}
	}
	return axes, nil
}

// sliceBounds are the starts, limits and strides of a Slice node.
type sliceBounds struct{ starts, limits, strides []int }

func readSliceBounds(node *graph.Node) (sliceBounds, error) {
	var b sliceBounds
	var err error
	if b.starts, err = intSliceParam(node, "starts"); err != nil {
		return b, err
	}
	if b.limits, err = intSliceParam(node, "limits"); err != nil {
		return b, err
	}
	if b.strides, err = intSliceParam(node, "strides"); err != nil {
		return b, err
	}
	x, out := node.Inputs()[0].Shape(), node.Shape()
	if len(b.starts) != x.Rank() || len(b.limits) != x.Rank() || len(b.strides) != x.Rank() {
		return b, fmt.Errorf("Slice bounds %+v do not match rank %d", b, x.Rank())
	}
	for i := range b.starts {
		stride := max(b.strides[i], 1)
		n := (b.limits[i] - b.starts[i] + stride - 1) / stride
		if b.starts[i] < 0 || b.limits[i] > x.Dimensions[i] || n != out.Dimensions[i] {
			return b, fmt.Errorf("Slice bounds %+v do not map %s onto %s", b, x, out)
		}
	}
	return b, nil
}

// reduceAxes reads the axes of a ReduceSum/ReduceMax/... node (all axes when empty).
func reduceAxes(node *graph.Node) ([]int, error) {
	axes, err := intSliceParam(node, "axes")
	if err != nil {
		return nil, err
	}
	x := node.Inputs()[0]
	if len(axes) == 0 {
		for i := range x.Rank() {
			axes = append(axes, i)
		}
	}
	for _, ax := range axes {
		if !validAxis(ax, x.Rank()) {
			return nil, fmt.Errorf("reduce axes %v out of range for rank %d", axes, x.Rank())
		}
	}
	return axes, nil
}

func validAxis(axis, rank int) bool { return axis >= 0 && axis < rank }

// freeAxes returns the axes of a rank-r operand that are neither contracted nor batch, in order.
func freeAxes(rank int, contract, batch []int) []int {
	var free []int
	for ax := range rank {
		if !slices.Contains(contract, ax) && !slices.Contains(batch, ax) {
			free = append(free, ax)
		}
	}
	return free
}
