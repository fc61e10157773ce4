package exact_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/testkit"
)

// TestProductSumRoundsOnce: a·x + b·y of float32 operands comes out, on every backend, as the
// exact sum rounded once to float64 (math.FMA of the exact products is that), for values spanning
// many binades and both signs, with scalar and tensor coefficients.
func TestProductSumRoundsOnce(t *testing.T) {
	const n = 4096
	r := rand.New(rand.NewPCG(1, 9))
	values := func() []float32 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(r.NormFloat64() * math.Pow(10, 6*r.Float64()-3))
		}
		return xs
	}
	a, x, b, y := values(), values(), values(), values()
	for _, backend := range testkit.All() {
		outs := testkit.Run(t, backend, func(in []*graph.Node) []*graph.Node {
			scalarA := graph.Scalar(in[0].Graph(), in[0].DType(), 0.9)
			scalarB := graph.OneMinus(scalarA)
			return []*graph.Node{exact.ProductSum(in[0], in[1], in[2], in[3]), exact.ProductSum(scalarA, in[1], scalarB, in[3])}
		}, tensors.FromValue(a), tensors.FromValue(x), tensors.FromValue(b), tensors.FromValue(y))
		for i := range n {
			want := math.FMA(float64(a[i]), float64(x[i]), float64(b[i])*float64(y[i]))
			if got := outs[0][i]; math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("%s: %g·%g + %g·%g = %.17g, want %.17g (the exact sum rounded once)", backend.Name(), a[i], x[i], b[i], y[i], got, want)
			}
			b32 := 1 - float32(0.9)
			want = math.FMA(float64(float32(0.9)), float64(x[i]), float64(b32)*float64(y[i]))
			if got := outs[1][i]; math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("%s: 0.9·%g + 0.1·%g = %.17g, want %.17g", backend.Name(), x[i], y[i], got, want)
			}
		}
	}
}

// TestPowIntMatchesPow: base^n by squaring is within 1e-14 relative of math.Pow for exponents up
// to 2^40 (0 once it underflows, 1 for n <= 0), and the same bits on every backend.
func TestPowIntMatchesPow(t *testing.T) {
	bases := []float64{0, 0.5, float64(float32(0.9)), float64(float32(0.999)), 0.99999, 1}
	exponents := []int64{-3, 0, 1, 2, 3, 7, 10, 100, 1000, 12345, 1 << 20, 1<<20 + 1, 1 << 40}
	var first [][]float64
	for _, backend := range testkit.All() {
		var results [][]float64
		for _, base := range bases {
			out := testkit.Run(t, backend, func(in []*graph.Node) []*graph.Node {
				return []*graph.Node{exact.PowInt(base, in[0])}
			}, tensors.FromValue(exponents))[0]
			for i, e := range exponents {
				want := math.Pow(base, float64(max(e, 0)))
				if got := out[i]; !(got == want || math.Abs(got-want) <= 1e-14*want) {
					t.Errorf("%s: PowInt(%v, %d) = %.17g, math.Pow gives %.17g", backend.Name(), base, e, got, want)
				}
			}
			results = append(results, out)
		}
		if first == nil {
			first = results
			continue
		}
		for j := range results {
			for i := range results[j] {
				if math.Float64bits(results[j][i]) != math.Float64bits(first[j][i]) {
					t.Errorf("PowInt(%v, %d): %.17g on %s, %.17g on the embedded backend", bases[j], exponents[i], results[j][i], backend.Name(), first[j][i])
				}
			}
		}
	}
}

// TestRoundHalfUp: nearest integers, ties toward +∞, on every backend (graph.Round's ties differ
// between them).
func TestRoundHalfUp(t *testing.T) {
	in := []float64{0, 0.49999999999999994, 0.5, 1.5, 2.5, 126.5, 3.7, -0.5, -1.5, -2.4, 1e15 + 0.5}
	want := []float64{0, 0, 1, 2, 3, 127, 4, 0, -1, -2, 1e15 + 1}
	for _, backend := range testkit.All() {
		got := testkit.Run(t, backend, func(x []*graph.Node) []*graph.Node {
			return []*graph.Node{exact.RoundHalfUp(x[0])}
		}, tensors.FromValue(in))[0]
		for i := range in {
			if got[i] != want[i] {
				t.Errorf("%s: RoundHalfUp(%v) = %v, want %v", backend.Name(), in[i], got[i], want[i])
			}
		}
	}
}
