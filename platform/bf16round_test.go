package platform_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// nearestEvenBFloat16 is the reference: float32 to bfloat16 rounded to nearest, ties to even, by
// the usual bit-level rule (what Eigen, XLA and JAX do); a NaN keeps its sign and the top bits of
// its payload and is made quiet.
func nearestEvenBFloat16(x float32) uint16 {
	bits := math.Float32bits(x)
	if x != x {
		return uint16(bits>>16) | 0x40
	}
	lsb := (bits >> 16) & 1
	return uint16((bits + 0x7FFF + lsb) >> 16)
}

// bf16EdgeBits are float32 bit patterns at the edges of rounding to bfloat16.
var bf16EdgeBits = []uint32{
	0x00000000, 0x80000000, // ±0
	0x3F800000, 0xBF800000, // ±1
	0x3F808000, 0xBF808000, // 1 + 2^-8: a tie, 1 is even: stays 1
	0x3F818000, 0xBF818000, // 1 + 3·2^-8: a tie, 1 + 2^-7 is odd: rounds up
	0x3F807FFF, 0x3F808001, // just below and just above the tie
	0x3F80FFFF, 0x3FFFFFFF, 0x3FFF8000, // up into the next bfloat16, and across a power of two
	0x00000001, 0x80000001, // the smallest subnormal: rounds to ±0
	0x00008000, 0x00018000, // subnormal ties: to 0 (even), to 0x0002 (0x0001 is odd)
	0x00007FFF, 0x00008001, 0x007FFFFF, 0x807FFFFF, // around them, and the largest subnormal
	0x00800000, 0x00FF8000, // the smallest normal; a tie just above it
	0x7F7F0000, 0x7F7F7FFF, // the largest bfloat16; just below half an ulp above it
	0x7F7F8000, 0xFF7F8000, // half an ulp above it, a tie with an odd bfloat16: ±Inf
	0x7F7E8000,             // a tie below it with an even bfloat16: stays
	0x7F7FFFFF, 0xFF7FFFFF, // the largest float32: ±Inf
	0x7F800000, 0xFF800000, // ±Inf
	0x7FC00000, 0xFFC00000, // quiet NaNs
	0x7F800001, 0xFF800001, // signalling NaNs whose payload truncation would drop (giving Inf)
	0x7FC12345, 0x7FA00000, // a payload in the top bits; a signalling NaN with one there
	0x4B7FFFFF, 0x477FFF80, 0x477FFF7F, // large integers near ties
	0x3EAAAAAB, 0x3DCCCCCD, // 1/3 and 0.1
}

// TestBFloat16RoundsToNearestEven: on the embedded backend, ConvertDType from float32 to bfloat16
// gives the reference's bits for edge values (ties both ways, NaN, Inf, subnormals, the largest
// values) and for 200,000 random bit patterns, where GoMLX v0.26.0's own conversion truncates.
// With a PJRT plugin configured, XLA's conversion gives the same bits (NaN payloads aside).
func TestBFloat16RoundsToNearestEven(t *testing.T) {
	bits := append([]uint32(nil), bf16EdgeBits...)
	rng := rand.New(rand.NewPCG(2026, 28))
	for range 200_000 {
		bits = append(bits, rng.Uint32())
	}
	values := make([]float32, len(bits))
	for i, b := range bits {
		values[i] = math.Float32frombits(b)
	}
	convert := func(t *testing.T, backend backends.Backend) []bfloat16.BFloat16 {
		exec, err := graph.NewExec(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.BFloat16) })
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(values, len(values)))
		if err != nil {
			t.Fatal(err)
		}
		return tensors.MustCopyFlatData[bfloat16.BFloat16](out[0])
	}
	check := func(t *testing.T, got []bfloat16.BFloat16, nanPayloads bool) {
		wrong := 0
		for i, x := range values {
			want := nearestEvenBFloat16(x)
			g := got[i].Bits()
			if x != x && !nanPayloads { // a NaN of the same sign
				if g&0x7F80 == 0x7F80 && g&0x7F != 0 && g>>15 == want>>15 {
					continue
				}
			}
			if g != want {
				if wrong++; wrong <= 10 {
					t.Errorf("float32 %#08x (%g) -> bfloat16 %#04x, want %#04x", bits[i], x, g, want)
				}
			}
		}
		if wrong > 0 {
			t.Errorf("%d of %d values rounded wrong", wrong, len(values))
		}
	}
	t.Run("embedded", func(t *testing.T) { check(t, convert(t, embedded()), true) })
	if b := xlaBackend(); b != nil {
		t.Run("xla", func(t *testing.T) { check(t, convert(t, b), false) })
	}
}

// TestBFloat16RoundingInGradients: a float32 gradient flowing into a bfloat16 part of the graph
// (the VJP of a bfloat16-to-float32 conversion converts the cotangent back) rounds to nearest even
// too: the gradient of sum(w·f32(bf16(x))) with respect to the bfloat16 x is bf16(w).
func TestBFloat16RoundingInGradients(t *testing.T) {
	weights := []float32{1 + 1.0/256, 1 + 3.0/256, 1 + 1.0/128 + 1.0/512, -(1 + 3.0/256)}
	exec, err := graph.NewExec(embedded(), func(x *graph.Node) *graph.Node {
		x16 := graph.ConvertDType(x, dtypes.BFloat16)
		w := graph.Const(x.Graph(), weights)
		loss := graph.ReduceAllSum(graph.Mul(graph.ConvertDType(x16, dtypes.Float32), w))
		return graph.Gradient(loss, x16)[0]
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4}, 4))
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[bfloat16.BFloat16](out[0])
	for i, w := range weights {
		if want := nearestEvenBFloat16(w); got[i].Bits() != want {
			t.Errorf("gradient %d: bfloat16 %#04x (%g), want %#04x (%v rounded to nearest even)", i, got[i].Bits(), got[i].Float32(), want, w)
		}
	}
}

// TestBFloat16DotRoundsToNearestEven: a bfloat16 product whose float32 sums are exact integers
// rounds them to nearest even once: the ties 257, 259, 261 and 1022 give 256, 260, 260 and 1024,
// and 263 gives 264, where truncation gives 256, 258, 260, 1020 and 262. graph.Dot and
// graph.DotGeneral (through Einsum) both round.
func TestBFloat16DotRoundsToNearestEven(t *testing.T) {
	// Rows of lhs times the column of ones: the row sums.
	lhs := [][]float32{{256, 1}, {256, 3}, {256, 5}, {1016, 6}, {256, 7}, {128, 64}}
	want := []float32{256, 260, 260, 1024, 264, 192}
	exec, err := graph.NewExec(embedded(), func(x *graph.Node) (dot, einsum *graph.Node) {
		x16 := graph.ConvertDType(x, dtypes.BFloat16)
		ones := graph.ConvertDType(graph.Const(x.Graph(), [][]float32{{1}, {1}}), dtypes.BFloat16)
		dot = graph.ConvertDType(graph.Dot(x16, ones), dtypes.Float32)
		einsum = graph.ConvertDType(graph.Einsum("ij,jk->ik", x16, ones), dtypes.Float32)
		return
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Exec(tensors.FromValue(lhs))
	if err != nil {
		t.Fatal(err)
	}
	for k, name := range []string{"Dot", "Einsum"} {
		got := tensors.MustCopyFlatData[float32](out[k])
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s, row %d: %v summed in bfloat16 = %v, want %v", name, i, lhs[i], got[i], want[i])
			}
		}
	}
}
