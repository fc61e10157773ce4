package graph_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/internal/testkit"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

// xlaBackend is XLA with the plugin named by $ONEGPU_PJRT_PLUGIN, or nil.
var xlaBackend = testkit.XLA

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

// requireXLA returns XLA or skips the test.
var requireXLA = testkit.RequireXLA

// run builds fn on the embedded backend, executes it on inputs and returns every output as float64.
func run(t testing.TB, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return runOn(t, embedded(), fn, inputs...)
}

// runOn builds fn on a backend, runs it on inputs and returns the outputs as float64.
var runOn = testkit.Run

// flatFloat64 returns a tensor's values as float64.
var flatFloat64 = testkit.Floats

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

func toDType(dtype dtypes.DType) func(*graph.Node) *graph.Node {
	return func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) }
}
