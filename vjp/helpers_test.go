package vjp_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
)

// The tests' backends and helpers, from testkit.
var (
	embedded          = testkit.Embedded
	backendsUnderTest = testkit.ByName
	runOn             = testkit.Run
	flatFloat64       = testkit.Floats
	randomTensor      = testkit.NormalTensor
)

// run builds fn on the embedded backend, executes it on inputs and returns every output as float64.
func run(t testing.TB, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return runOn(t, embedded(), fn, inputs...)
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
