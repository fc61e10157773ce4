package hf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/x448/float16"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// The floating-point types a checkpoint may hold and a variable may have, on each side's names.
var fileTypes = map[dtypes.DType]safetensors.DType{
	dtypes.Float32: safetensors.F32, dtypes.BFloat16: safetensors.BF16, dtypes.Float16: safetensors.F16,
	dtypes.Float64: safetensors.F64,
}

var variableTypes = map[safetensors.DType]dtypes.DType{
	safetensors.F32: dtypes.Float32, safetensors.BF16: dtypes.BFloat16, safetensors.F16: dtypes.Float16,
	safetensors.F64: dtypes.Float64,
}

// valueBytes is the size of one value of a supported floating-point type.
func valueBytes(t safetensors.DType) int { return t.Bits() / 8 }

// convert writes the values of src (type from) into dst (type to; len(dst)/size(to) ==
// len(src)/size(from)), little-endian. Equal types are copied; otherwise each value goes through
// float32 (float64 to float64 is a copy; float64 into a 16-bit type rounds twice, to float32 and
// then to 16 bits) and is rounded to nearest, ties to even, as torch's and XLA's conversions
// round: overflow gives infinity, NaN stays NaN.
func convert(dst []byte, to safetensors.DType, src []byte, from safetensors.DType) error {
	n := len(src) / valueBytes(from)
	if len(dst) != n*valueBytes(to) {
		return fmt.Errorf("converting %d values of %s: %d bytes of %s to fill", n, from, len(dst), to)
	}
	if from == to {
		copy(dst, src)
		return nil
	}
	le := binary.LittleEndian
	var read func(i int) float32
	switch from {
	case safetensors.F32:
		read = func(i int) float32 { return math.Float32frombits(le.Uint32(src[4*i:])) }
	case safetensors.F64:
		read = func(i int) float32 { return float32(math.Float64frombits(le.Uint64(src[8*i:]))) }
	case safetensors.BF16:
		read = func(i int) float32 { return math.Float32frombits(uint32(le.Uint16(src[2*i:])) << 16) }
	case safetensors.F16:
		read = func(i int) float32 { return float16.Frombits(le.Uint16(src[2*i:])).Float32() }
	default:
		return fmt.Errorf("cannot convert values of %s (the model's weights are F32, BF16, F16 or F64)", from)
	}
	switch to {
	case safetensors.F32:
		for i := range n {
			le.PutUint32(dst[4*i:], math.Float32bits(read(i)))
		}
	case safetensors.F64:
		for i := range n {
			le.PutUint64(dst[8*i:], math.Float64bits(float64(read(i))))
		}
	case safetensors.BF16:
		for i := range n {
			le.PutUint16(dst[2*i:], bfloat16Bits(read(i)))
		}
	case safetensors.F16:
		for i := range n {
			le.PutUint16(dst[2*i:], float16.Fromfloat32(read(i)).Bits())
		}
	default:
		return fmt.Errorf("cannot convert values to %s (F32, BF16, F16 or F64)", to)
	}
	return nil
}

// bfloat16Bits rounds x to bfloat16, to nearest with ties to even (GoMLX's bfloat16.FromFloat32
// truncates, which biases every weight towards zero by up to one unit in the last place).
func bfloat16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	if x != x { // NaN: keep the sign and make sure the truncated mantissa stays non-zero
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
