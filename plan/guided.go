package plan

import "math"

// Searching a length by its memory: the step's estimated memory grows with the sequence, smoothly
// (linearly for chunked attention and loss, quadratically with plain attention's scores), so the
// lengths already estimated say where the budget is met. guidedFitting uses them: it extrapolates
// from the fitting lengths until one does not fit, then interpolates between the two with the ITP
// method, which needs at most one more estimate than bisection and far fewer on smooth memory.

// guidedFitting returns the largest n in [1, top] whose memory is at most budget, given that
// memory grows with n. measure returns n's memory, or refused for an n that cannot be built (it
// does not fit, and gives no memory). It returns 0 when 1 does not fit, and stops at the first
// error. Until a length does not fit, each guess extrapolates the line through the last two
// fitting ones to the budget (at most 8 times the last; doubling when they have the same memory);
// then each guess is ITP's between the longest fitting and the shortest not fitting length
// (bisection when that one was refused).
func guidedFitting(top int, budget int64, measure func(n int) (bytes int64, refused bool, err error)) (int, error) {
	type point struct {
		n     int
		bytes int64
		known bool // bytes is a measured memory (not refused)
	}
	probe := func(n int) (point, bool, error) {
		b, refused, err := measure(n)
		return point{n, b, !refused}, !refused && b <= budget, err
	}
	low, ok, err := probe(1)
	if err != nil || !ok {
		return 0, err
	}
	var prev, high point // prev: the fitting length before low (n 0: none); high: n 0 until one does not fit
	for high.n == 0 {
		if low.n >= top {
			return low.n, nil
		}
		guess := 2 * low.n
		if prev.n > 0 && low.bytes > prev.bytes {
			perStep := float64(low.bytes-prev.bytes) / float64(low.n-prev.n)
			guess = low.n + int(float64(budget-low.bytes)/perStep)
		}
		guess = min(max(guess, low.n+1), 8*low.n, top)
		p, ok, err := probe(guess)
		if err != nil {
			return low.n, err
		}
		if ok {
			prev, low = low, p
		} else {
			high = p
		}
	}
	// The ITP method (Oliveira and Takahashi 2021): false position, truncated towards the middle
	// and projected into a range that shrinks as bisection's would, so that it needs at most one
	// more guess than bisection, and converges like the secant on smooth memory. Without high's
	// memory (refused), it bisects.
	width0 := float64(high.n - low.n)
	most := math.Ceil(math.Log2(width0)) + 1 // bisection's guesses, and one
	for j := 0.0; high.n-low.n > 1; j++ {
		a, b := float64(low.n), float64(high.n)
		half := (a + b) / 2
		guess := half
		if high.known {
			below, above := float64(budget-low.bytes), float64(high.bytes-budget)
			falsi := a + below/(below+above)*(b-a)
			sigma := math.Copysign(1, half-falsi)
			delta := 0.2 / width0 * (b - a) * (b - a)
			truncated := half
			if delta <= math.Abs(half-falsi) {
				truncated = falsi + sigma*delta
			}
			guess = truncated
			if r := math.Exp2(most-j)/2 - (b-a)/2; math.Abs(truncated-half) > r {
				guess = half - sigma*r
			}
		}
		p, ok, err := probe(min(max(int(math.Floor(guess)), low.n+1), high.n-1))
		if err != nil {
			return low.n, err
		}
		if ok {
			low = p
		} else {
			high = p
		}
	}
	return low.n, nil
}
