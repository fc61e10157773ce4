package testkit

import (
	"math"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// RelL2 returns ||got - want|| / ||want||, the relative L2 error of got; the absolute L2 distance
// when want is all zeros, and +Inf when the lengths differ (so that `!(err <= tolerance)` fails).
func RelL2(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
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

// MaxAbs returns the largest |x|.
func MaxAbs(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, math.Abs(x))
	}
	return m
}

// Bits returns a tensor's floating-point values widened exactly to float64 bits (float32,
// bfloat16 and float16 widen without rounding), so that comparisons are bit for bit, NaN and the
// sign of zero included.
func Bits(t *tensors.Tensor) []uint64 {
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
		default: // bfloat16 and float16 values have a Float32 method
			rv := reflect.ValueOf(flat)
			for i := range rv.Len() {
				x, ok := rv.Index(i).Interface().(interface{ Float32() float32 })
				if !ok {
					panic("testkit.Bits: " + rv.Type().String() + " is not a floating-point slice")
				}
				out = append(out, math.Float64bits(float64(x.Float32())))
			}
		}
	})
	return out
}

// AssertBitIdentical fails t unless every tensor of got equals want's bit for bit (see Bits).
func AssertBitIdentical(t testing.TB, got, want []*tensors.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Shape().Equal(want[i].Shape()) {
			t.Errorf("output #%d: shape %s, want %s", i, got[i].Shape(), want[i].Shape())
			continue
		}
		g, w := Bits(got[i]), Bits(want[i])
		diff, first := 0, -1
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
