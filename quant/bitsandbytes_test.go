package quant

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// bnbFixture reads reference/bitsandbytes/nf4_fixture.py's output: bitsandbytes' own NF4 codes,
// scales and double quantization of a tensor.
type bnbFixture struct {
	f *safetensors.File
	t *testing.T
}

func openBnbFixture(t *testing.T) bnbFixture {
	f, err := safetensors.Open("testdata/bnb_nf4.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return bnbFixture{f, t}
}

func (b bnbFixture) bytes(name string) []byte {
	raw, err := b.f.ReadTensor(name)
	if err != nil {
		b.t.Fatal(err)
	}
	return raw
}

func (b bnbFixture) float32s(name string) []float32 {
	raw := b.bytes(name)
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestMatchesBitsandbytes compares Quantize with bitsandbytes 0.50.2 on the same tensor, bit for
// bit: its NF4 and dynamic-map tables, the NF4 codes (a partial last block and a block of zeros
// included), the block scales, the double quantization's offset, scale codes and scale scales,
// and dequantize_4bit's values; and the codes of a bfloat16 tensor.
func TestMatchesBitsandbytes(t *testing.T) {
	fx := openBnbFixture(t)
	if !equalBits(fx.float32s("nf4_levels"), NF4Levels[:]) {
		t.Errorf("NF4Levels differ from bitsandbytes' table %v", fx.float32s("nf4_levels"))
	}
	dyn := DynamicMap()
	if !equalBits(fx.float32s("dynamic_map"), dyn[:]) {
		t.Errorf("DynamicMap differs from bitsandbytes' create_dynamic_map()")
	}
	x := fx.float32s("input")
	q, err := Quantize(QLoRA(), x, len(x))
	if err != nil {
		t.Fatal(err)
	}
	codes, absmax := fx.bytes("codes"), fx.float32s("absmax")
	// bitsandbytes pads an odd count with one zero value; here the last block is padded whole.
	if string(q.Codes[:len(codes)]) != string(codes) {
		t.Errorf("NF4 codes differ from bitsandbytes'")
	}
	plain, err := Quantize(Config{Format: NF4}, x, len(x))
	if err != nil {
		t.Fatal(err)
	}
	if string(plain.Codes) != string(q.Codes) || !equalBits(plain.Scales, absmax) {
		t.Errorf("block scales differ from bitsandbytes' absmax")
	}
	offset := fx.float32s("offset")[0]
	if q.ScaleOffset != offset {
		t.Errorf("offset %.9g, bitsandbytes' %.9g", q.ScaleOffset, offset)
	}
	if string(q.ScaleCodes) != string(fx.bytes("scale_codes")) {
		t.Errorf("scale codes differ from bitsandbytes' reference kernel's")
	}
	if !equalBits(q.ScaleScales, fx.float32s("scale_scales")) {
		t.Errorf("scale scales %v, bitsandbytes' %v", q.ScaleScales, fx.float32s("scale_scales"))
	}
	if !equalBits(q.Dequantize(), fx.float32s("dequantized")) {
		t.Errorf("dequantized values differ from bitsandbytes' dequantize_4bit")
	}
	cpu := fx.bytes("scale_codes_cpu")
	differ := 0
	for i := range cpu {
		if cpu[i] != q.ScaleCodes[i] {
			differ++
		}
	}
	t.Logf("bitsandbytes' CPU kernel (a 65,536-bin lookup) codes %d of %d scales differently from its reference kernel and onegpu", differ, len(cpu))

	raw := fx.bytes("bf16_input")
	xb := make([]float32, len(raw)/2)
	for i := range xb {
		xb[i] = bfloat16.FromBits(binary.LittleEndian.Uint16(raw[2*i:])).Float32()
	}
	qb, err := Quantize(Config{Format: NF4}, xb, 7, 40)
	if err != nil {
		t.Fatal(err)
	}
	bcodes := fx.bytes("bf16_codes")
	if string(qb.Codes[:len(bcodes)]) != string(bcodes) || !equalBits(qb.Scales, fx.float32s("bf16_absmax")) {
		t.Errorf("a bfloat16 tensor's codes or scales differ from bitsandbytes'")
	}
}
