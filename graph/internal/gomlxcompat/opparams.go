package gomlxcompat

import (
	"fmt"
	"reflect"

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
