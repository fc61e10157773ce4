package gomlxcompat

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// IntSliceParam reads the []int static parameter field of a node: DotGeneral's
// "lhsContractingAxes", "lhsBatchAxes", "rhsContractingAxes", "rhsBatchAxes"; Slice's "starts",
// "limits", "strides"; BroadcastInDim's "broadcastAxes"; a reduction's "axes".
//
// Assumption (GoMLX v0.26.0): graph.Node keeps its op's parameters in the unexported field
// "inputs", an interface holding a pointer to a generated nodeInputsXxx struct whose fields are
// named after the op's arguments. Callers check what they read against the node's shapes.
func IntSliceParam(node *graph.Node, field string) ([]int, error) {
	v := reflect.ValueOf(node).Elem().FieldByName("inputs")
	if !v.IsValid() {
		return nil, fmt.Errorf("graph.Node has no field \"inputs\" (GoMLX version changed?)")
	}
	if v.IsNil() {
		return nil, fmt.Errorf("node %s: no inputs struct to read %q from", node.Type(), field)
	}
	v = v.Elem() // interface -> *nodeInputsXxx
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, fmt.Errorf("node %s: inputs is %s, not a pointer to a struct (GoMLX version changed?)", node.Type(), v.Kind())
	}
	f := v.Elem().FieldByName(field)
	if !f.IsValid() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Int {
		return nil, fmt.Errorf("node %s has no []int field %q (GoMLX version changed?)", node.Type(), field)
	}
	out := make([]int, f.Len())
	for i := range out {
		out[i] = int(f.Index(i).Int())
	}
	return out, nil
}

// GoMLX v0.26.0 keeps an op's static parameters (DotGeneral's axes, Slice's bounds, BroadcastInDim's
// axes) in unexported structs and exposes them only through Node.String(). Reading them with
// reflection (IntSliceParam) is exact and does not depend on a print format; every reader below checks what it
// read against the node's shapes, and callers fall back to GoMLX's own rule when a read fails.

// DotGeneralAxes are the contracting and batch axes of a DotGeneral node.
type DotGeneralAxes struct {
	LHSContract, LHSBatch, RHSContract, RHSBatch []int
}

// ReadDotGeneralAxes reads node's axes and checks them against its operand and output shapes:
// output = batch dims, then lhs free dims, then rhs free dims.
func ReadDotGeneralAxes(node *graph.Node) (DotGeneralAxes, error) {
	var a DotGeneralAxes
	var err error
	for _, f := range []struct {
		dst  *[]int
		name string
	}{
		{&a.LHSContract, "lhsContractingAxes"}, {&a.LHSBatch, "lhsBatchAxes"},
		{&a.RHSContract, "rhsContractingAxes"}, {&a.RHSBatch, "rhsBatchAxes"},
	} {
		if *f.dst, err = IntSliceParam(node, f.name); err != nil {
			return a, err
		}
	}
	lhs, rhs := node.Inputs()[0].Shape(), node.Inputs()[1].Shape()
	if len(a.LHSContract) != len(a.RHSContract) || len(a.LHSBatch) != len(a.RHSBatch) {
		return a, fmt.Errorf("DotGeneral axes %+v do not pair up", a)
	}
	var want []int
	for i, ax := range a.LHSBatch {
		if !validAxis(ax, lhs.Rank()) || !validAxis(a.RHSBatch[i], rhs.Rank()) || lhs.Dimensions[ax] != rhs.Dimensions[a.RHSBatch[i]] {
			return a, fmt.Errorf("DotGeneral batch axes %+v do not match shapes %s, %s", a, lhs, rhs)
		}
		want = append(want, lhs.Dimensions[ax])
	}
	for i, ax := range a.LHSContract {
		if !validAxis(ax, lhs.Rank()) || !validAxis(a.RHSContract[i], rhs.Rank()) || lhs.Dimensions[ax] != rhs.Dimensions[a.RHSContract[i]] {
			return a, fmt.Errorf("DotGeneral contracting axes %+v do not match shapes %s, %s", a, lhs, rhs)
		}
	}
	for _, ax := range FreeAxes(lhs.Rank(), a.LHSContract, a.LHSBatch) {
		want = append(want, lhs.Dimensions[ax])
	}
	for _, ax := range FreeAxes(rhs.Rank(), a.RHSContract, a.RHSBatch) {
		want = append(want, rhs.Dimensions[ax])
	}
	if !slices.Equal(want, node.Shape().Dimensions) {
		return a, fmt.Errorf("DotGeneral axes %+v give dimensions %v, but the node has %v", a, want, node.Shape().Dimensions)
	}
	return a, nil
}

// ReadBroadcastAxes reads the axes of the output that each input axis of a BroadcastInDim maps to.
func ReadBroadcastAxes(node *graph.Node) ([]int, error) {
	axes, err := IntSliceParam(node, "broadcastAxes")
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

// SliceBounds are the starts, limits and strides of a Slice node.
type SliceBounds struct{ Starts, Limits, Strides []int }

// ReadSliceBounds reads a Slice node's bounds and checks them against its shapes.
func ReadSliceBounds(node *graph.Node) (SliceBounds, error) {
	var b SliceBounds
	var err error
	if b.Starts, err = IntSliceParam(node, "starts"); err != nil {
		return b, err
	}
	if b.Limits, err = IntSliceParam(node, "limits"); err != nil {
		return b, err
	}
	if b.Strides, err = IntSliceParam(node, "strides"); err != nil {
		return b, err
	}
	x, out := node.Inputs()[0].Shape(), node.Shape()
	if len(b.Starts) != x.Rank() || len(b.Limits) != x.Rank() || len(b.Strides) != x.Rank() {
		return b, fmt.Errorf("Slice bounds %+v do not match rank %d", b, x.Rank())
	}
	for i := range b.Starts {
		stride := max(b.Strides[i], 1)
		n := (b.Limits[i] - b.Starts[i] + stride - 1) / stride
		if b.Starts[i] < 0 || b.Limits[i] > x.Dimensions[i] || n != out.Dimensions[i] {
			return b, fmt.Errorf("Slice bounds %+v do not map %s onto %s", b, x, out)
		}
	}
	return b, nil
}

// ReduceAxes reads the axes of a ReduceSum/ReduceMax/... node (all axes when empty).
func ReduceAxes(node *graph.Node) ([]int, error) {
	axes, err := IntSliceParam(node, "axes")
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

// FreeAxes returns the axes of a rank-r operand that are neither contracted nor batch, in order.
func FreeAxes(rank int, contract, batch []int) []int {
	var free []int
	for ax := range rank {
		if !slices.Contains(contract, ax) && !slices.Contains(batch, ax) {
			free = append(free, ax)
		}
	}
	return free
}
