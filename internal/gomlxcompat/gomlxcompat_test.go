package gomlxcompat_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// embedded is GoMLX's embedded backend, created directly: this package sits below onegpu's platform and analysis
// and its tests check GoMLX itself, so they use no onegpu backend.
var embedded = sync.OnceValue(func() backends.Backend {
	b, err := simplego.New("ops_sequential")
	if err != nil {
		panic(err)
	}
	return b
})

// TestCompiledMemoryNotXLA: a graph another backend compiled is told apart from an XLA one.
func TestCompiledMemoryNotXLA(t *testing.T) {
	g := graph.NewGraph(embedded(), "stats")
	defer g.Finalize()
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 64))
	g.Compile(graph.MulScalar(x, 2))
	if _, err := gomlxcompat.CompiledMemory(g); !errors.Is(err, gomlxcompat.ErrNotXLA) {
		t.Errorf("embedded graph: got %v, want ErrNotXLA", err)
	}
}

// TestIntSliceParam reads back the static parameters the gradient rules and the memory analysis need.
func TestIntSliceParam(t *testing.T) {
	g := graph.NewGraph(embedded(), "params")
	defer g.Finalize()
	lhs := graph.Parameter(g, "lhs", shapes.Make(dtypes.Float32, 2, 3, 4))
	rhs := graph.Parameter(g, "rhs", shapes.Make(dtypes.Float32, 2, 4, 5))
	dot := graph.DotGeneral(lhs, []int{2}, []int{0}, rhs, []int{1}, []int{0})
	slice := graph.Slice(lhs, graph.AxisRange(), graph.AxisRange(1, 3), graph.AxisRange(0, 4).Stride(2))
	bcast := graph.ExpandAndBroadcast(graph.Parameter(g, "v", shapes.Make(dtypes.Float32, 4)), []int{3, 4}, []int{0})
	sum := graph.ReduceSum(lhs, 1)
	for _, c := range []struct {
		node  *graph.Node
		field string
		want  []int
	}{
		{dot, "lhsContractingAxes", []int{2}}, {dot, "lhsBatchAxes", []int{0}},
		{dot, "rhsContractingAxes", []int{1}}, {dot, "rhsBatchAxes", []int{0}},
		{slice, "starts", []int{0, 1, 0}}, {slice, "limits", []int{2, 3, 4}}, {slice, "strides", []int{1, 1, 2}},
		{bcast, "broadcastAxes", []int{1}},
		{sum, "axes", []int{1}},
	} {
		got, err := gomlxcompat.IntSliceParam(c.node, c.field)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s.%s = %v, %v; want %v", c.node.Type(), c.field, got, err, c.want)
		}
	}
	if _, err := gomlxcompat.IntSliceParam(dot, "noSuchField"); err == nil {
		t.Error("a missing field was read without an error")
	}
}

// TestMatmulBlockDim checks the block side the memory analysis (package analysis) assumes for simplego.
func TestMatmulBlockDim(t *testing.T) {
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16} {
		if got := gomlxcompat.MatmulBlockDim(dt); got != 32 {
			t.Errorf("simplego's matmul block side for %s is %d, the memory analysis assumes 32", dt, got)
		}
	}
}

// unwrapping is a backend that wraps another, as platform's dtype guard does.
type unwrapping struct{ backends.Backend }

func (w unwrapping) Unwrap() backends.Backend { return w.Backend }

// TestIsSimpleGo: the embedded backend is simplego, wrapped or not; a wrapper of nothing is not.
func TestIsSimpleGo(t *testing.T) {
	if !gomlxcompat.IsSimpleGo(embedded()) || !gomlxcompat.IsSimpleGo(unwrapping{unwrapping{embedded()}}) {
		t.Error("the embedded backend, wrapped or not, is not recognized as simplego")
	}
	if gomlxcompat.IsSimpleGo(unwrapping{nil}) || gomlxcompat.IsSimpleGo(nil) {
		t.Error("a wrapper of no backend is taken for simplego")
	}
}
