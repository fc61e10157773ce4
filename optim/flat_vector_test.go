package optim

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
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

// TestVectorLayouts: the vector kernels read their constants at the offsets flat_amd64.s names.
func TestVectorLayouts(t *testing.T) {
	var a adamVector
	var v adam8bitVector
	for name, pair := range map[string][2]uintptr{
		"adam divisors": {unsafe.Offsetof(a.divisors), 36}, "adam clip": {unsafe.Offsetof(a.clip), 44},
		"adam kinds": {unsafe.Offsetof(a.kinds), 48}, "adam clips": {unsafe.Offsetof(a.clips), 56}, "adam decay": {unsafe.Offsetof(a.decay), 60},
		"eps": {unsafe.Offsetof(v.eps), 224}, "mScale": {unsafe.Offsetof(v.mScale), 256}, "divisor1": {unsafe.Offsetof(v.divisor1), 320},
		"mInverse": {unsafe.Offsetof(v.mInverse), 416}, "inv127": {unsafe.Offsetof(v.inv127), 480}, "half": {unsafe.Offsetof(v.half), 544},
		"levels127": {unsafe.Offsetof(v.levels127), 608}, "absMask": {unsafe.Offsetof(v.absMask), 672}, "kinds": {unsafe.Offsetof(v.kinds), 704},
		"clips": {unsafe.Offsetof(v.clips), 712}, "mMax": {unsafe.Offsetof(v.mMax), 716}, "sMax": {unsafe.Offsetof(v.sMax), 720},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s at offset %d, the kernels read it at %d", name, pair[0], pair[1])
		}
	}
}

// TestAdam8bitVectorIsTheLoop: 8-bit Adam's block update on whole vectors leaves parameters,
// codes and scales bit for bit as the Go loop does, over 3 steps of 5 blocks (every kind of
// gradient scaling, finite moments over many decades, a zero block, a padded last block); and the codes of special
// moments (zeros, subnormals, extremes, infinities, NaN) on given scales are the loop's. (A
// non-finite moment's block scale is not: Go's max keeps a NaN, the vector maximum drops it; the
// graph codes neither as it does, and a loss scale skips such steps.)
func TestAdam8bitVectorIsTheLoop(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no vector kernel on this machine: applyBlock is the Go loop")
	}
	const bs, blocks = 256, 5
	k := adam8bitScalars{lr: 1e-3, b1: float64(float32(0.9)), b2: float64(float32(0.999)), omb1: float64(1 - float32(0.9)),
		omb2: float64(1 - float32(0.999)), debias1: 1.7, debias2: 45, eps: float64(float32(1e-7))}
	finite := func(xs []float32) []float32 { // whose squares are finite: NaN's maxima differ (Go's max keeps it, VMAXPS not)
		for i, x := range xs {
			if !(math.Abs(float64(x)) < 1e18) {
				xs[i] = 0.25
			}
		}
		return xs
	}
	for _, scaling := range []GradientScaling{{}, {Denominator: 64, LossScale: 1024}, {Denominator: 120, LossScale: 3, Clip: 0.3}} {
		const n = bs*blocks - 37 // the last block padded
		p, want := finite(vectorInputs(n, 7)), []float32(nil)
		want = append(want, p...)
		states := [2]quantizedMoments{}
		for i := range states {
			states[i] = quantizedMoments{mCodes: make([]int8, bs*blocks), mScales: make([]float32, blocks), sCodes: make([]uint8, bs*blocks), sScales: make([]float32, blocks)}
		}
		for step := range 3 {
			g := finite(vectorInputs(n, uint64(10+step)))
			for i := range g[:bs] {
				g[i] = 0 // a block whose moments stay zero
			}
			scratch := make([]float32, 2*bs)
			for b := range blocks {
				k.applyBlock(FlatStep{GradientScaling: scaling}.loop(), states[0], b, bs, p, g, scratch)
			}
			// The loop: a block size that is not a multiple of 8 never vectorizes; run the halves.
			for b := range blocks {
				q, lo, hi := states[1], b*bs, min(b*bs+bs, n)
				mMax, sMax := k.moments(FlatStep{GradientScaling: scaling}.loop(), q.mScales[b], q.sScales[b], q.mCodes[lo:lo+bs], q.sCodes[lo:lo+bs],
					want[lo:hi], g[lo:hi], scratch[:bs], scratch[bs:])
				q.mScales[b], q.sScales[b] = mMax, sMax
				codes(mMax, sMax, scratch[:bs], scratch[bs:], q.mCodes[lo:lo+bs], q.sCodes[lo:lo+bs])
			}
			for i := range states[0].mCodes {
				if i < n && math.Float32bits(p[i]) != math.Float32bits(want[i]) || states[0].mCodes[i] != states[1].mCodes[i] || states[0].sCodes[i] != states[1].sCodes[i] {
					t.Fatalf("scaling %+v, step %d, element %d: codes %d %d vectorized, %d %d by the loop (parameters %v)", scaling, step, i,
						states[0].mCodes[i], states[0].sCodes[i], states[1].mCodes[i], states[1].sCodes[i], [2]float32{p[min(i, n-1)], want[min(i, n-1)]})
				}
			}
			for b := range blocks {
				if states[0].mScales[b] != states[1].mScales[b] || states[0].sScales[b] != states[1].sScales[b] {
					t.Fatalf("step %d, block %d: scales %v %v vectorized, %v %v by the loop", step, b, states[0].mScales[b], states[0].sScales[b], states[1].mScales[b], states[1].sScales[b])
				}
			}
		}
	}
	// Codes of special moments on fixed scales, including a zero and a subnormal scale.
	for _, scale := range []float32{1, 3e-5, 0, 1e-40} {
		ms, ss := vectorInputs(1024, 21), vectorInputs(1024, 22)
		for i := range ss {
			ss[i] = float32(math.Abs(float64(ss[i])))
		}
		var v adam8bitVector
		v = adam8bitScalars{}.vector(FlatStep{}.loop(), 0, 0)
		v.scales(scale, scale)
		got := [2][]byte{make([]byte, len(ms)), make([]byte, len(ms))}
		mCodes, sCodes := make([]int8, len(ms)), make([]uint8, len(ms))
		adam8bitCodesAVX2(&ms[0], &ss[0], &mCodes[0], &sCodes[0], len(ms), &v)
		wantM, wantS := make([]int8, len(ms)), make([]uint8, len(ms))
		codes(scale, scale, ms, ss, wantM, wantS)
		for i := range ms {
			got[0][i], got[1][i] = byte(mCodes[i]), sCodes[i]
			if mCodes[i] != wantM[i] || sCodes[i] != wantS[i] {
				t.Fatalf("scale %v: moments %v (%#08x), %v: codes %d %d vectorized, %d %d by the loop", scale, ms[i], math.Float32bits(ms[i]), ss[i], mCodes[i], sCodes[i], wantM[i], wantS[i])
			}
		}
	}
}

// TestPartialsVector: Partials' squares (vectorized where the machine has AVX2) are the float64
// sum of the divided gradients' squares within float32 rounding, and a NaN or an infinity anywhere
// (in the vectors or the tail) makes the step not finite.
func TestPartialsVector(t *testing.T) {
	scaling := GradientScaling{Denominator: 120, LossScale: 1024, Clip: 0.5}
	g := vectorInputs(1<<15+13, 9)
	for i, x := range g {
		if !(math.Abs(float64(x)) < 1e18) {
			g[i] = -3
		}
	}
	var want float64
	for _, x := range g {
		y := float64(float32(float32(x/120) / 1024))
		want += y * y
	}
	finite, squares, err := scaling.Partials([]*tensors.Tensor{tensors.FromValue(g)})
	if err != nil {
		t.Fatal(err)
	}
	if !finite || math.Abs(float64(squares[0])-want) > 1e-6*want {
		t.Errorf("finite %v, squares %v, want true and %v", finite, squares[0], want)
	}
	for _, at := range []int{5, 1<<15 + 11} {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
			h := append([]float32(nil), g...)
			h[at] = bad
			if finite, _, _ := scaling.Partials([]*tensors.Tensor{tensors.FromValue(h)}); finite {
				t.Errorf("%v at %d: finite", bad, at)
			}
		}
	}
}
