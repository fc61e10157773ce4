package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// specialFloats are values a vector kernel must treat as the Go loop does: zeros of both signs,
// subnormals, the extremes, infinities and NaN.
var specialFloats = []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-40, 1.1754942e-38, math.MaxFloat32, -math.MaxFloat32,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1, -1, 0.5, 3e-8, 65504, 1 + 1.0/256, 1 + 3.0/512}

// vectorInputs are n values: random magnitudes over many decades, with special values sprinkled in.
func vectorInputs(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 2))
	xs := make([]float32, n)
	for i := range xs {
		if r.IntN(10) == 0 {
			xs[i] = specialFloats[r.IntN(len(specialFloats))]
			continue
		}
		xs[i] = float32(r.NormFloat64() * math.Pow(10, 8*r.Float64()-6))
	}
	return xs
}

// TestAdamVectorIsTheLoop: Adam's update on whole vectors (AVX2 where the machine has it) leaves
// parameters and moments bit for bit as the Go loop does, for every kind of gradient scaling
// (none, a power of two, a division; a clip), with and without weight decay, special values
// included (NaN compared as NaN), and a length that leaves a tail.
func TestAdamVectorIsTheLoop(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no vector kernel on this machine: apply is the Go loop")
	}
	const n = 1003
	for _, scaling := range []GradientScaling{{}, {Denominator: 64, LossScale: 1024}, {Denominator: 120, LossScale: 3, Clip: 0.3}, {Denominator: 1e-30}} {
		for _, decay := range []float32{0, 1e-4} {
			k := adamScalars{lr: 1e-3, b1: 0.9, b2: 0.999, omb1: 1 - float32(0.9), omb2: 1 - float32(0.999), debias1: 1.5, debias2: 30, eps: 1e-8, decay: decay}
			p, g, m, s := vectorInputs(n, 1), vectorInputs(n, 2), vectorInputs(n, 3), vectorInputs(n, 4)
			for i := range s {
				s[i] = float32(math.Abs(float64(s[i])))
			}
			wp, wm, ws := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), s...)
			k.loop(FlatStep{GradientScaling: scaling}.loop(), wp, g, wm, ws)
			k.apply(FlatStep{GradientScaling: scaling}, p, g, m, s)
			for name, pair := range map[string][2][]float32{"parameter": {p, wp}, "first moment": {m, wm}, "second moment": {s, ws}} {
				for i := range pair[0] {
					if got, want := pair[0][i], pair[1][i]; math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
						t.Fatalf("scaling %+v, decay %g: %s[%d] is %v vectorized, %v by the loop", scaling, decay, name, i, got, want)
					}
				}
			}
		}
	}
}

// TestBFloat16VectorIsTheLoop: the conversion to bfloat16 on whole vectors rounds every value as
// bfloat16ToNearest does: ties to even, NaN kept NaN, every exponent.
func TestBFloat16VectorIsTheLoop(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no vector kernel on this machine")
	}
	values := vectorInputs(4099, 5)
	for i := range 64 { // every rounding case of the low half: below, at and above the tie, odd and even
		values = append(values, math.Float32frombits(0x3f800000+uint32(i%2)<<16+[]uint32{0x7fff, 0x8000, 0x8001, 0}[i%4]))
	}
	out := make([]bfloat16.BFloat16, len(values))
	convertOut(out, 0, values)
	for i, x := range values {
		if want := bfloat16ToNearest(x); out[i] != want {
			t.Fatalf("%v (%#08x): %#04x vectorized, %#04x by the loop", x, math.Float32bits(x), uint16(out[i]), uint16(want))
		}
	}
}
