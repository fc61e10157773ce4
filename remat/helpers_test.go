package remat_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/backendtest"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = backendtest.Embedded

// execute builds fn on the embedded backend and returns its outputs.
func execute(t testing.TB, fn func(inputs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) []*tensors.Tensor {
	t.Helper()
	exec, err := graph.NewExec(embedded(), fn)
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
	return outs
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

// bits returns a tensor's values as float64 bits (float32 and bfloat16 widen exactly), so that
// comparisons are bit for bit, NaN and the sign of zero included.
func bits(t *tensors.Tensor) []uint64 {
	var out []uint64
	t.ConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float64:
			for _, x := range v {
				out = append(out, math.Float64bits(x))
			}
		case []float32:
			for _, x := range v {
				out = append(out, math.Float64bits(float64(x)))
			}
		default: // bfloat16 values have a Float32 method
			rv := reflect.ValueOf(flat)
			for i := range rv.Len() {
				x := rv.Index(i).Interface().(interface{ Float32() float32 }).Float32()
				out = append(out, math.Float64bits(float64(x)))
			}
		}
	})
	return out
}

// assertBitIdentical fails unless every output of got equals want bit for bit.
func assertBitIdentical(t *testing.T, got, want []*tensors.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Shape().Equal(want[i].Shape()) {
			t.Errorf("output #%d: shape %s, want %s", i, got[i].Shape(), want[i].Shape())
			continue
		}
		g, w := bits(got[i]), bits(want[i])
		diff := 0
		first := -1
		for k := range w {
			if g[k] != w[k] {
				diff++
				if first < 0 {
					first = k
				}
			}
		}
		if diff > 0 {
			t.Errorf("output #%d %s: %d of %d values differ; first at %d: %g vs %g", i, want[i].Shape(), diff, len(w), first,
				math.Float64frombits(g[first]), math.Float64frombits(w[first]))
		}
	}
}
