package remat_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

// execute builds fn on the embedded backend and returns its outputs.
func execute(t testing.TB, fn func(inputs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) []*tensors.Tensor {
	t.Helper()
	return testkit.Execute(t, embedded(), fn, inputs...)
}

// randomTensor returns a float32 tensor with N(0, scale²) values.
func randomTensor(rng *rand.Rand, scale float64, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return tensors.FromFlatDataAndDimensions(v, dims...)
}
