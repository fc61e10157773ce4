package graph_test

import (
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	ograph "github.com/onegpu/onegpu/graph"
)

// embedded is the embedded backend in onegpu's default (sequential) mode, shared by the tests.
var embedded = sync.OnceValue(func() backends.Backend {
	b, err := ograph.NewBackend("go")
	if err != nil {
		panic(err)
	}
	return b
})

// xlaBackend is XLA with the PJRT plugin named by $ONEGPU_PJRT_PLUGIN, or nil when none is
// configured (CI installs one; see .ci/run).
var xlaBackend = sync.OnceValue(func() backends.Backend {
	path := os.Getenv(ograph.EnvPlugin)
	if path == "" {
		return nil
	}
	b, err := ograph.NewBackend("xla:" + path)
	if err != nil {
		panic(err)
	}
	return b
})

// backendsUnderTest returns the embedded backend and, when a plugin is configured, XLA's.
func backendsUnderTest(t testing.TB) map[string]backends.Backend {
	bs := map[string]backends.Backend{"go": embedded()}
	if b := xlaBackend(); b != nil {
		bs["xla"] = b
	} else {
		t.Logf("no PJRT plugin configured ($%s): XLA is not tested", ograph.EnvPlugin)
	}
	return bs
}

// requireXLA returns the XLA backend or skips the test.
func requireXLA(t testing.TB) backends.Backend {
	b := xlaBackend()
	if b == nil {
		t.Skipf("needs an XLA PJRT plugin: set $%s=/abs/path/pjrt_c_api_cpu_plugin.so (pip install lammps-jax-pjrt-cpu)", ograph.EnvPlugin)
	}
	return b
}

// run builds fn on the embedded backend, executes it on inputs and returns every output as float64.
func run(t testing.TB, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return runOn(t, embedded(), fn, inputs...)
}

// runOn is run on the given backend.
func runOn(t testing.TB, backend backends.Backend, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	exec, err := graph.NewExec(backend, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		args[i] = in
	}
	outs, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	values := make([][]float64, len(outs))
	for i, out := range outs {
		values[i] = flatFloat64(out)
	}
	return values
}

// flatFloat64 returns a float tensor's values as float64.
func flatFloat64(t *tensors.Tensor) []float64 {
	var out []float64
	t.ConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float64:
			out = append(out, v...)
		case []float32:
			for _, x := range v {
				out = append(out, float64(x))
			}
		default: // bfloat16 and float16 values have a Float32 method.
			rv := reflect.ValueOf(flat)
			for i := range rv.Len() {
				out = append(out, float64(rv.Index(i).Interface().(interface{ Float32() float32 }).Float32()))
			}
		}
	})
	return out
}

// randomTensor returns a float64 tensor with N(0, 1) values.
func randomTensor(rng *rand.Rand, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return tensors.FromFlatDataAndDimensions(v, dims...)
}

// weightedSum reduces y to a scalar with fixed pseudo-random weights, so that every element of y
// influences the gradient with a different factor.
func weightedSum(y *graph.Node) *graph.Node {
	rng := rand.New(rand.NewPCG(99, uint64(y.Shape().Size())))
	w := make([]float64, y.Shape().Size())
	for i := range w {
		w[i] = rng.Float64()*2 - 1
	}
	weights := graph.ConvertDType(graph.Const(y.Graph(), tensors.FromFlatDataAndDimensions(w, y.Shape().Dimensions...)), y.DType())
	return graph.ReduceAllSum(graph.Mul(y, weights))
}

// relL2 returns ||got - want|| / ||want||.
func relL2(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// maxAbs returns the largest |x|.
func maxAbs(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, math.Abs(x))
	}
	return m
}

func toDType(dtype dtypes.DType) func(*graph.Node) *graph.Node {
	return func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) }
}
