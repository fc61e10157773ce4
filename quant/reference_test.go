package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A float64 transcription of the QLoRA algorithm (Dettmers et al. 2023, section 3 and appendix;
// bitsandbytes' create_normal_map, create_dynamic_map, quantize_4bit with compress_statistics),
// written from the definitions rather than from the code under test: the levels from normal
// quantiles, codes by the smallest distance, scales by maxima and means, all in float64.

// refNF4Levels are NF4's levels by their definition: the quantiles of N(0, 1) at 8 points evenly
// spaced from 0.9677083 to 1/2 (the last dropped) for the positive side, at 7 for the negative,
// an exact zero, normalized by the largest.
func refNF4Levels() []float64 {
	const offset = 0.9677083
	ppf := func(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }
	var v []float64
	for i := range 8 {
		v = append(v, ppf(offset+(0.5-offset)*float64(i)/8))
	}
	for i := range 7 {
		v = append(v, -ppf(offset+(0.5-offset)*float64(i)/7))
	}
	v = append(v, 0)
	slices.Sort(v)
	top := v[len(v)-1]
	for i := range v {
		v[i] /= top
	}
	return v
}

// refDynamicMap is bitsandbytes' signed dynamic map by its definition: for exponents 10⁻⁶..10⁰,
// 2^i fractions (the midpoints of 2^i+1 points evenly spaced in [0.1, 1]), both signs, 0 and 1.
func refDynamicMap() []float64 {
	var v []float64
	for i := range 7 {
		n := 1 << i
		for j := range n {
			lo, hi := 0.1+0.9*float64(j)/float64(n), 0.1+0.9*float64(j+1)/float64(n)
			m := math.Pow(10, float64(i-6)) * (lo + hi) / 2
			v = append(v, m, -m)
		}
	}
	v = append(v, 0, 1)
	slices.Sort(v)
	return v
}

// refCode is a block code in float64: per block, scale = the largest magnitude of its elements
// (a partial last block on its own), code = the level nearest x/scale (the first on a tie).
// ambiguous marks elements whose two nearest levels are within tol of equally near: there float32
// arithmetic may pick either, so a code may differ from the reference only there.
type refCode struct {
	codes     []int
	scales    []float64
	ambiguous []bool
}

func refQuantize(x []float64, blockSize int, levels []float64, tol float64) refCode {
	r := refCode{codes: make([]int, len(x)), ambiguous: make([]bool, len(x))}
	for first := 0; first < len(x); first += blockSize {
		block := x[first:min(first+blockSize, len(x))]
		var s float64
		for _, v := range block {
			s = math.Max(s, math.Abs(v))
		}
		r.scales = append(r.scales, s)
		for j, v := range block {
			scaled := 0.0
			if s > 0 {
				scaled = v / s
			}
			best, second := math.Inf(1), math.Inf(1)
			for k, l := range levels {
				d := math.Abs(scaled - l)
				if d < best {
					best, second, r.codes[first+j] = d, best, k
				} else if d < second {
					second = d
				}
			}
			r.ambiguous[first+j] = second-best < tol
		}
	}
	return r
}

func (r refCode) dequantize(levels, scales []float64, blockSize int) []float64 {
	out := make([]float64, len(r.codes))
	for i, c := range r.codes {
		out[i] = levels[c] * scales[i/blockSize]
	}
	return out
}

// refDoubleQuant codes scales as QLoRA's double quantization: minus their mean, in blocks of
// blockSize with the dynamic map; it returns the code and the decoded scales.
func refDoubleQuant(scales []float64, blockSize int) (refCode, float64, []float64) {
	var mean float64
	for _, s := range scales {
		mean += s
	}
	mean /= float64(len(scales))
	centered := make([]float64, len(scales))
	for i, s := range scales {
		centered[i] = s - mean
	}
	dyn := refDynamicMap()
	r := refQuantize(centered, blockSize, dyn, 1e-5)
	decoded := r.dequantize(dyn, r.scales, blockSize)
	for i := range decoded {
		decoded[i] += mean
	}
	return r, mean, decoded
}

func float64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func levels64(c code) []float64 { return float64s(c.levels) }

// normalValues returns n float32 values of a normal distribution with the given std.
func normalValues(seed uint64, n int, std float64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 36))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
	return x
}

// unpackCodes returns one code an element (NF4's nibbles split, high first), padding included.
func unpackCodes(t *Tensor) []int {
	var out []int
	for _, b := range t.Codes {
		if t.Format == NF4 {
			out = append(out, int(b>>4), int(b&15))
		} else {
			out = append(out, int(b))
		}
	}
	return out
}

func TestNF4LevelsAreNormalQuantiles(t *testing.T) {
	ref := refNF4Levels()
	for i, l := range NF4Levels {
		// bitsandbytes spaced the probabilities in float32: its levels are within 1e-6 of the
		// float64 quantiles.
		if math.Abs(float64(l)-ref[i]) > 1e-6 {
			t.Errorf("NF4 level %d = %.9g, the normal quantile gives %.9g", i, l, ref[i])
		}
	}
	if NF4Levels[7] != 0 || NF4Levels[0] != -1 || NF4Levels[15] != 1 {
		t.Errorf("NF4 needs an exact zero at code 7 and ±1 at the ends: %v", NF4Levels)
	}
}

func TestDynamicMapFollowsItsDefinition(t *testing.T) {
	ref, got := refDynamicMap(), DynamicMap()
	if len(ref) != 256 || got[127] != 0 || got[255] != 1 {
		t.Fatalf("dynamic map: %d levels by definition, zero at %g, top %g", len(ref), got[127], got[255])
	}
	for i, v := range got {
		if math.Abs(float64(v)-ref[i]) > 3e-7*math.Abs(ref[i]) {
			t.Errorf("dynamic map %d = %.9g, by definition %.9g", i, v, ref[i])
		}
		if i > 0 && got[i-1] >= v {
			t.Errorf("dynamic map not increasing at %d: %g, %g", i, got[i-1], v)
		}
	}
}

// TestQuantizeMatchesFloat64Reference holds Quantize and Dequantize to the float64 QLoRA
// algorithm: the same block scales, the same codes wherever float32 cannot tip a near tie, the
// same offset and scale codes under double quantization, and the same values.
func TestQuantizeMatchesFloat64Reference(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		dims []int
	}{
		{"nf4 qlora", QLoRA(), []int{300, 64}},
		{"nf4 qlora partial blocks", QLoRA(), []int{257, 75}},
		{"nf4 float32 scales", Config{Format: NF4}, []int{48, 40}},
		{"nf4 smaller than a block", QLoRA(), []int{7, 9}},
		{"int8", Default(Int8), []int{97, 33}},
		{"int8 double quant", Config{Format: Int8, DoubleQuant: true, ScaleBlockSize: 16}, []int{130, 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLayout(tc.c, tc.dims...)
			if err != nil {
				t.Fatal(err)
			}
			x := normalValues(uint64(l.Size()), l.Size(), 0.02)
			q, err := Quantize(tc.c, x, tc.dims...)
			if err != nil {
				t.Fatal(err)
			}
			levels := levels64(q.code())
			ref := refQuantize(float64s(x), l.BlockSize, levels, 1e-6)
			codes := unpackCodes(q)
			if len(codes) != l.NumBlocks()*l.BlockSize {
				t.Fatalf("%d codes, want %d blocks of %d", len(codes), l.NumBlocks(), l.BlockSize)
			}
			differ, ambiguous := 0, 0
			for i, c := range ref.codes {
				if ref.ambiguous[i] {
					ambiguous++
				}
				if codes[i] != c {
					differ++
					if !ref.ambiguous[i] {
						t.Fatalf("element %d (%g, block scale %g): code %d, the reference's %d", i, x[i], ref.scales[i/l.BlockSize], codes[i], c)
					}
				}
			}
			zero := q.code().index(0)
			for i := len(x); i < len(codes); i++ {
				if codes[i] != int(zero) {
					t.Errorf("padding element %d has code %d, want zero's %d", i, codes[i], zero)
				}
			}
			t.Logf("%d elements: %d codes differ from the reference, %d near ties", len(x), differ, ambiguous)

			scales := ref.scales
			if !tc.c.DoubleQuant {
				if !slices.Equal(float64s(q.Scales), ref.scales) {
					t.Errorf("block scales differ from the reference's maxima")
				}
			} else {
				sref, mean, decoded := refDoubleQuant(ref.scales, l.ScaleBlockSize)
				if d := math.Abs(float64(q.ScaleOffset) - mean); d > ulp32(mean)/2 {
					t.Errorf("offset %.9g, the scales' mean %.12g (off by %g)", q.ScaleOffset, mean, d)
				}
				for i, c := range sref.codes {
					if int(q.ScaleCodes[i]) != c && !sref.ambiguous[i] {
						t.Errorf("scale %d (%g): code %d, the reference's %d", i, ref.scales[i], q.ScaleCodes[i], c)
					}
				}
				for i, s := range sref.scales {
					if d := math.Abs(float64(q.ScaleScales[i]) - s); d > 2*ulp32(s) {
						t.Errorf("scale block %d: scale %.9g, the reference's %.9g", i, q.ScaleScales[i], s)
					}
				}
				scales = decoded
			}
			want := ref.dequantize(levels, scales, l.BlockSize)
			for i, v := range q.Dequantize() {
				if !ref.ambiguous[i] && math.Abs(float64(v)-want[i]) > 4*ulp32(scales[i/l.BlockSize]) {
					t.Fatalf("element %d dequantizes to %.9g, the reference to %.9g", i, v, want[i])
				}
			}
		})
	}
}

// ulp32 is the spacing of float32 values at x's magnitude.
func ulp32(x float64) float64 {
	f := float32(math.Abs(x))
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}
