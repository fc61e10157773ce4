package quant

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/x448/float16"
)

// TestBytesPerParameter: the storage by arithmetic (QLoRA: 4 bits, plus 8 bits and 32/256 bits
// of scales a block of 64: 4.127 bits), and Layout.Bytes for a whole tensor, padding included.
func TestBytesPerParameter(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want float64
	}{
		{QLoRA(), 0.5 + 1.0/64 + 4.0/(64*256)},
		{Config{Format: NF4}, 0.5 + 4.0/64},
		{Default(Int8), 1 + 4.0/64},
		{Config{Format: Int8, DoubleQuant: true}, 1 + 1.0/64 + 4.0/(64*256)},
	} {
		if got := tc.c.BytesPerParameter(); got != tc.want {
			t.Errorf("%+v: %v bytes a parameter, want %v", tc.c, got, tc.want)
		}
	}
	if got := QLoRA().BytesPerParameter(); got != 0.515869140625 {
		t.Errorf("QLoRA: %v bytes a parameter, want 0.515869140625", got)
	}
	// Llama-3.1-8B's q_proj [4096, 4096]: 262,144 blocks, 1,024 scale blocks.
	l, err := NewLayout(QLoRA(), 4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(4096*4096/2 + 262144 + 4*1024 + 4); l.Bytes() != want {
		t.Errorf("q_proj: %d bytes, want %d", l.Bytes(), want)
	}
	// 75 elements: 2 blocks (the second padded), one scale block.
	l, _ = NewLayout(QLoRA(), 3, 25)
	if want := int64(2*32 + 2 + 4 + 4); l.Bytes() != want || l.NumBlocks() != 2 {
		t.Errorf("[3, 25]: %d bytes in %d blocks, want %d in 2", l.Bytes(), l.NumBlocks(), want)
	}
}

// TestBadInput: what cannot be quantized is an error naming the value, before any work.
func TestBadInput(t *testing.T) {
	x := normalValues(1, 128, 1)
	for _, tc := range []struct {
		name   string
		c      Config
		values []float32
		dims   []int
		want   string
	}{
		{"odd nf4 block", Config{Format: NF4, BlockSize: 63}, x, []int{128}, "Config.BlockSize 63 must be even"},
		{"negative block", Config{Format: Int8, BlockSize: -1}, x, []int{128}, "Config.BlockSize -1 must be positive"},
		{"no format", Config{}, x, []int{128}, `Config.Format "" is not a format`},
		{"zero dimension", QLoRA(), nil, []int{0, 4}, "every dimension must be positive"},
		{"count", QLoRA(), x, []int{100}, "128 values for dimensions [100]"},
		{"nan", QLoRA(), append(append([]float32{}, x[:70]...), float32(math.NaN())), []int{71}, "non-finite value (NaN at flat index 70)"},
		{"inf", Default(Int8), []float32{1, float32(math.Inf(-1))}, []int{2}, "non-finite value (-Inf at flat index 1)"},
	} {
		_, err := Quantize(tc.c, tc.values, tc.dims...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := ParseFormat("nf3"); err == nil || !strings.Contains(err.Error(), `"nf3": want nf4 or int8`) {
		t.Errorf("ParseFormat(nf3): %v", err)
	}
	if f, err := ParseFormat("NF4"); err != nil || f != NF4 {
		t.Errorf("ParseFormat(NF4) = %q, %v", f, err)
	}
	if _, err := QuantizeTensor(QLoRA(), tensors.FromValue([]int32{1, 2})); err == nil || !strings.Contains(err.Error(), "cannot quantize: a Int32 tensor is not float32") {
		t.Errorf("QuantizeTensor(int32): %v", err)
	}
}

// TestQuantizeTensor: a bfloat16, float16 or float64 tensor quantizes as its float32 values do,
// also one of several chunks of blocks a worker with a partial last block; a NaN in it is named
// at its flat index.
func TestQuantizeTensor(t *testing.T) {
	for _, dims := range [][]int{{6, 64}, {2051, 97}} {
		n := dims[0] * dims[1]
		x := normalValues(5, n, 0.1)
		b := make([]bfloat16.BFloat16, n)
		h := make([]float16.Float16, n)
		d := make([]float64, n)
		exact := make([]float32, n)
		for i, v := range x {
			b[i] = bfloat16Nearest(v)
			exact[i] = b[i].Float32()
			h[i] = float16.Fromfloat32(exact[i])
			d[i] = float64(exact[i]) // bfloat16 values are exact in float16 at this scale, and in float64
		}
		want, _ := Quantize(QLoRA(), exact, dims...)
		for name, x := range map[string]*tensors.Tensor{
			"bfloat16": tensors.FromFlatDataAndDimensions(b, dims...),
			"float16":  tensors.FromFlatDataAndDimensions(h, dims...),
			"float64":  tensors.FromFlatDataAndDimensions(d, dims...),
			"float32":  tensors.FromFlatDataAndDimensions(exact, dims...),
		} {
			q, err := QuantizeTensor(QLoRA(), x)
			if err != nil {
				t.Fatal(err)
			}
			if string(q.Codes) != string(want.Codes) || string(q.ScaleCodes) != string(want.ScaleCodes) ||
				!slices.Equal(q.ScaleScales, want.ScaleScales) || q.ScaleOffset != want.ScaleOffset || !slices.Equal(q.Dims, dims) {
				t.Errorf("%v %s: quantized differently from its float32 values", dims, name)
			}
			for i, p := range q.Parts() {
				if got := q.Tensors()[i].Shape(); !got.Equal(p.Shape) {
					t.Errorf("part %s is %s, want %s", p.Name, got, p.Shape)
				}
			}
			if q.Parts()[0].Shape.DType != dtypes.Uint8 {
				t.Errorf("codes are %s", q.Parts()[0].Shape.DType)
			}
		}
		b[n-3] = bfloat16.FromFloat32(float32(math.NaN()))
		if _, err := QuantizeTensor(QLoRA(), tensors.FromFlatDataAndDimensions(b, dims...)); err == nil ||
			!strings.Contains(err.Error(), fmt.Sprintf("(NaN at flat index %d)", n-3)) {
			t.Errorf("%v: a NaN at %d: %v", dims, n-3, err)
		}
	}
}
