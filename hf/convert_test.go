package hf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// bf16Value is the float64 value of bfloat16 bits, with the bits past the largest finite value
// (0x7f80, infinity) standing for 2^128, the next value in the format's spacing: rounding to
// nearest picks infinity exactly when 2^128 is the nearer.
func bf16Value(b uint16) float64 {
	if b&0x7fff == 0x7f80 {
		return math.Copysign(math.Ldexp(1, 128), float64(int16(b)))
	}
	return float64(math.Float32frombits(uint32(b) << 16))
}

// TestBFloat16RoundsToNearestEven checks bfloat16Bits against float64 distances to the two
// neighbouring bfloat16 values, on edge cases and a million random bit patterns.
func TestBFloat16RoundsToNearestEven(t *testing.T) {
	values := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1 + 1.0/256, 1 + 1.0/128 + 1.0/256, 1 + 3.0/256,
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7f7fff), math.Float32frombits(0x00008000)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		values = append(values, math.Float32frombits(r.Uint32()))
	}
	for _, x := range values {
		got := bfloat16Bits(x)
		if x != x {
			if v := math.Float32frombits(uint32(got) << 16); v == v || math.Signbit(float64(v)) != math.Signbit(float64(x)) {
				t.Fatalf("NaN %08x became %04x", math.Float32bits(x), got)
			}
			continue
		}
		down := uint16(math.Float32bits(x) >> 16) // towards zero
		if math.IsInf(float64(x), 0) {
			if got != down {
				t.Fatalf("%v became %04x", x, got)
			}
			continue
		}
		up := down + 1
		dDown, dUp := math.Abs(float64(x)-bf16Value(down)), math.Abs(bf16Value(up)-float64(x))
		want := down
		if dUp < dDown || (dUp == dDown && down&1 == 1) {
			want = up
		}
		if got != want {
			t.Fatalf("%v (%08x): got %04x, want %04x", x, math.Float32bits(x), got, want)
		}
	}
}

// TestFloat16Decodes checks every float16 bit pattern against IEEE binary16's definition.
func TestFloat16Decodes(t *testing.T) {
	src := make([]byte, 2)
	dst := make([]byte, 4)
	for b := range 1 << 16 {
		binary.LittleEndian.PutUint16(src, uint16(b))
		if err := convert(dst, safetensors.F32, src, safetensors.F16); err != nil {
			t.Fatal(err)
		}
		got := float64(math.Float32frombits(binary.LittleEndian.Uint32(dst)))
		sign, exp, mant := b>>15, (b>>10)&0x1f, b&0x3ff
		var want float64
		switch exp {
		case 0:
			want = math.Ldexp(float64(mant), -24)
		case 31:
			want = math.Inf(1)
			if mant != 0 {
				want = math.NaN()
			}
		default:
			want = math.Ldexp(1+float64(mant)/1024, exp-15)
		}
		if sign == 1 {
			want = -want
		}
		if !(got == want || (math.IsNaN(got) && math.IsNaN(want))) || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("float16 %04x: got %v, want %v", b, got, want)
		}
	}
}

// TestConvertPairs: every pair of the four types converts a few values as float64 math says.
func TestConvertPairs(t *testing.T) {
	values := []float64{0, 1, -2.5, 0.1, 1e-3, 65504, 3.0e38}
	encode := func(d safetensors.DType, xs []float64) []byte {
		var out []byte
		for _, x := range xs {
			switch d {
			case safetensors.F64:
				out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x))
			case safetensors.F32:
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(x)))
			case safetensors.BF16:
				out = binary.LittleEndian.AppendUint16(out, bfloat16Bits(float32(x)))
			case safetensors.F16:
				f32 := make([]byte, 4)
				binary.LittleEndian.PutUint32(f32, math.Float32bits(float32(x)))
				h := make([]byte, 2)
				_ = convert(h, safetensors.F16, f32, safetensors.F32)
				out = append(out, h...)
			}
		}
		return out
	}
	types := []safetensors.DType{safetensors.F64, safetensors.F32, safetensors.BF16, safetensors.F16}
	for _, from := range types {
		for _, to := range types {
			src := encode(from, values)
			dst := make([]byte, len(values)*valueBytes(to))
			if err := convert(dst, to, src, from); err != nil {
				t.Fatal(err)
			}
			// The expected bytes: the source's values (as decoded to float32, exact for 16-bit
			// sources) encoded in the target type.
			decoded := make([]byte, len(values)*4)
			_ = convert(decoded, safetensors.F32, src, from)
			var xs []float64
			for i := range values {
				xs = append(xs, float64(math.Float32frombits(binary.LittleEndian.Uint32(decoded[4*i:]))))
			}
			want := encode(to, xs)
			if from == safetensors.F64 && to == safetensors.F64 {
				want = src
			}
			if string(dst) != string(want) {
				t.Errorf("%s -> %s: %v, want %v", from, to, dst, want)
			}
		}
	}
	if err := convert(make([]byte, 4), safetensors.F32, make([]byte, 4), safetensors.I32); err == nil {
		t.Error("converting I32 did not fail")
	}
}
