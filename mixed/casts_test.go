package mixed_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
)

func TestCast(t *testing.T) {
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	g := graph.NewGraph(embedded(), "casts")
	x32 := graph.Parameter(g, "x32", shapes.Make(f32, 3))
	x16 := graph.Parameter(g, "x16", shapes.Make(bf16, 3))
	ids := graph.Parameter(g, "ids", shapes.Make(dtypes.Int32, 3))
	mask := graph.Parameter(g, "mask", shapes.Make(dtypes.Bool, 3))

	nodes := len(g.Nodes())
	for _, tc := range []struct {
		name string
		got  *graph.Node
		want *graph.Node // the same node, with no op added
	}{
		{"float32 to param float32", policy.CastToParam(x32), x32},
		{"bfloat16 to compute bfloat16", policy.CastToCompute(x16), x16},
		{"int32 to compute", policy.CastToCompute(ids), ids},
		{"bool to output", policy.CastToOutput(mask), mask},
		{"nil", mixed.Cast(nil, bf16), nil},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got a new node %v", tc.name, tc.got)
		}
	}
	if added := len(g.Nodes()) - nodes; added != 0 {
		t.Errorf("casts to the same dtype and of non-floats added %d ops", added)
	}

	if got := policy.CastToCompute(x32); got.DType() != bf16 || got.Type() != graph.NodeTypeConvertDType {
		t.Errorf("CastToCompute(float32) = %s %s, want a bfloat16 conversion", got.Type(), got.DType())
	}
	if got := policy.CastToOutput(x16); got.DType() != f32 {
		t.Errorf("CastToOutput(bfloat16) has dtype %s", got.DType())
	}

	slice := policy.CastSliceToCompute([]*graph.Node{x32, ids, nil, x16})
	for i, want := range []dtypes.DType{bf16, dtypes.Int32, dtypes.InvalidDType, bf16} {
		if i == 2 {
			if slice[i] != nil {
				t.Errorf("CastSlice: nil element became %v", slice[i])
			}
			continue
		}
		if slice[i].DType() != want {
			t.Errorf("CastSlice[%d] dtype %s, want %s", i, slice[i].DType(), want)
		}
	}
	if slice[3] != x16 {
		t.Errorf("CastSlice converted a node that already had the dtype")
	}
	if got := policy.CastSliceToParam([]*graph.Node{x16})[0].DType(); got != f32 {
		t.Errorf("CastSliceToParam dtype %s", got)
	}
	if got := policy.CastSliceToOutput([]*graph.Node{x16})[0].DType(); got != f32 {
		t.Errorf("CastSliceToOutput dtype %s", got)
	}

	m := mixed.CastMap(map[string]*graph.Node{"w": x32, "ids": ids}, bf16)
	if m["w"].DType() != bf16 || m["ids"] != ids || len(m) != 2 {
		t.Errorf("CastMap = %v", m)
	}

	testkit.MustPanic(t, "is not a floating-point dtype", func() { mixed.Cast(x32, dtypes.Int32) })
}

// TestCastValues runs the casts: float32 -> bfloat16 -> float32 keeps bfloat16's precision, and
// a float64 parameter comes back as float64.
func TestCastValues(t *testing.T) {
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f64}
	x := tensors.FromFlatDataAndDimensions([]float32{1, 1.5, -2.25, 3}, 4)
	out := run(t, func(in []*graph.Node) []*graph.Node {
		return []*graph.Node{policy.CastToOutput(policy.CastToCompute(in[0]))}
	}, x)
	for i, want := range []float64{1, 1.5, -2.25, 3} {
		if out[0][i] != want {
			t.Errorf("value %d: %g, want %g", i, out[0][i], want)
		}
	}
}
