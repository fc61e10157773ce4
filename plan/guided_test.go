package plan

import (
	"fmt"
	"math"
	"math/bits"
	"testing"
)

// TestGuidedFitting: on memories that grow linearly, quadratically, as a square root, in steps,
// or stay flat, with lengths refused beyond a limit, guidedFitting answers what a scan of every
// length answers, with at most 2·log2(answer)+3 lengths measured (bisection's bound), at most
// log2(answer)+4 on the smooth ones, and on linear memory about log8(answer)+4.
func TestGuidedFitting(t *testing.T) {
	shapes := map[string]func(n int) float64{
		"linear":    func(n int) float64 { return 7e9 + 6e7*float64(n) },
		"quadratic": func(n int) float64 { return 1e9 + 1e6*float64(n) + 4e4*float64(n*n) },
		"sqrt":      func(n int) float64 { return 1e9 * math.Sqrt(float64(n)) },
		"steps":     func(n int) float64 { return 1e9 * float64(1+n/37) },
		"flat":      func(n int) float64 { return 5e9 },
	}
	const top = 1 << 17
	for name, memory := range shapes {
		for _, budget := range []int64{4e9, 8e9, 24 << 30, 1e11, 1e12} {
			for _, limit := range []int{top, 1000, 7} {
				fits := func(n int) bool { return n <= limit && int64(memory(n)) <= budget }
				want := 0
				for n := 1; n <= top && fits(n); n++ {
					want = n
				}
				measured := 0
				got, err := guidedFitting(top, budget, func(n int) (int64, bool, error) {
					if n < 1 || n > top {
						return 0, false, fmt.Errorf("measured %d, outside [1, %d]", n, top)
					}
					measured++
					return int64(memory(n)), n > limit, nil
				})
				if err != nil || got != want {
					t.Errorf("%s, budget %d, limit %d: %d, %v; want %d", name, budget, limit, got, err, want)
				}
				if bound := 2*bits.Len(uint(max(want, 1))) + 3; measured > bound {
					t.Errorf("%s, budget %d, limit %d: %d lengths measured for %d, want at most %d", name, budget, limit, measured, want, bound)
				}
				smooth := name == "linear" || name == "quadratic" || name == "sqrt"
				if smooth && limit == top && want > 0 && measured > bits.Len(uint(want))+4 {
					t.Errorf("%s, budget %d: %d lengths measured for %d, want at most %d", name, budget, measured, want, bits.Len(uint(want))+4)
				}
				// Linear memory: extrapolated exactly, growing at most 8x a guess, then the answer and one more.
				if name == "linear" && limit == top && want > 2 && want < top && float64(measured) > 4+math.Ceil(math.Log(float64(want))/math.Log(8)) {
					t.Errorf("linear, budget %d: %d lengths measured for %d", budget, measured, want)
				}
			}
		}
	}
}
