package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
)

// bfloat16Nearest rounds a finite float32 to bfloat16, to nearest with ties to even.
func bfloat16Nearest(x float32) bfloat16.BFloat16 {
	b := math.Float32bits(x)
	return bfloat16.FromBits(uint16((b + 0x7FFF + (b>>16)&1) >> 16))
}

// TestDequantizeInGraph: on every backend, Nodes.Dequantize gives Tensor.Dequantize's float32
// values bit for bit (bitsandbytes' dequantize_4bit's, for the fixture) and their bfloat16
// rounding to nearest even; Rows gives the same rows as the whole.
func TestDequantizeInGraph(t *testing.T) {
	fixture := openBnbFixture(t).float32s("input")
	for _, tc := range []struct {
		name   string
		c      Config
		values []float32
		dims   []int
		rows   [2]int // first, count: block-aligned rows
	}{
		{"nf4 qlora, bitsandbytes' fixture", QLoRA(), fixture, []int{333, 50}, [2]int{32, 64}},
		{"nf4 float32 scales", Config{Format: NF4}, normalValues(1, 96*40, 0.5), []int{96, 40}, [2]int{8, 16}},
		{"int8 partial block", Default(Int8), normalValues(2, 37*10, 1), []int{37, 10}, [2]int{32, 5}},
		{"int8 double quant", Config{Format: Int8, DoubleQuant: true, ScaleBlockSize: 7}, normalValues(3, 64*64, 3), []int{64, 64}, [2]int{1, 3}},
	} {
		q, err := Quantize(tc.c, tc.values, tc.dims...)
		if err != nil {
			t.Fatal(err)
		}
		host := q.Dequantize()
		first, count := tc.rows[0], tc.rows[1]
		row := q.Size() / q.Dims[0]
		for _, backend := range testkit.All() {
			name := fmt.Sprintf("%s on %s", tc.name, backend.Name())
			outs := testkit.Execute(t, backend, func(in []*graph.Node) []*graph.Node {
				n := NewNodes(q.Layout, in...)
				return []*graph.Node{n.Dequantize(dtypes.Float32), n.Dequantize(dtypes.BFloat16), n.Rows(first, count, dtypes.Float32)}
			}, q.Tensors()...)
			if !slices.Equal(outs[0].Shape().Dimensions, tc.dims) || !slices.Equal(outs[1].Shape().Dimensions, tc.dims) || outs[1].DType() != dtypes.BFloat16 {
				t.Fatalf("%s: shapes %s and %s, want %v", name, outs[0].Shape(), outs[1].Shape(), tc.dims)
			}
			f32 := tensors.MustCopyFlatData[float32](outs[0])
			if !equalBits(f32, host) {
				t.Errorf("%s: float32 values differ from Tensor.Dequantize's", name)
			}
			for i, v := range tensors.MustCopyFlatData[bfloat16.BFloat16](outs[1]) {
				if v != bfloat16Nearest(host[i]) {
					t.Fatalf("%s: element %d is %v in bfloat16, want %v (%g rounded to nearest)", name, i, v, bfloat16Nearest(host[i]), host[i])
				}
			}
			if !equalBits(tensors.MustCopyFlatData[float32](outs[2]), host[first*row:(first+count)*row]) {
				t.Errorf("%s: rows [%d, %d) differ from the whole's", name, first, first+count)
			}
		}
	}
}

// TestRoundToFloat32: Veltkamp's splitting in a graph rounds products of float32 values to
// float32 as Go's conversion does (nearest, ties to even), ties included, on every backend.
func TestRoundToFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 36))
	var products []float64
	for i := range 1 << 14 {
		a, b := float32(r.NormFloat64()), float32(r.NormFloat64()*math.Pow(10, -6*r.Float64()))
		if i%2 == 0 { // 12 and 13 significant bits: the product's 25th bit is often the last, a tie
			a = float32(1 + float64(r.IntN(1<<12))/(1<<12))
			b = float32(1+float64(2*r.IntN(1<<12)+1)/(1<<24)) * float32(math.Ldexp(1, r.IntN(20)-10))
		}
		products = append(products, float64(a)*float64(b))
	}
	for _, backend := range testkit.All() {
		got := testkit.Run(t, backend, func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{roundToFloat32(in[0])}
		}, tensors.FromValue(products))[0]
		for i, p := range products {
			if want := float64(float32(p)); got[i] != want {
				t.Fatalf("%s: %.17g rounds to %.17g, want %.17g", backend.Name(), p, got[i], want)
			}
		}
	}
}

// TestNewNodesChecksParts: parts that do not match the layout, or rows off the blocks, panic
// naming what is wrong.
func TestNewNodesChecksParts(t *testing.T) {
	q, err := Quantize(QLoRA(), normalValues(1, 4*40, 1), 4, 40)
	if err != nil {
		t.Fatal(err)
	}
	g := graph.NewGraph(testkit.Embedded(), "parts")
	var parts []*graph.Node
	for _, x := range q.Tensors() {
		parts = append(parts, graph.Const(g, x))
	}
	testkit.MustPanic(t, "3 parts for a nf4 layout that has 4", func() { NewNodes(q.Layout, parts[:3]...) })
	wrong := append([]*graph.Node{graph.Const(g, make([]float32, 3*32))}, parts[1:]...)
	testkit.MustPanic(t, "part 0 (codes) is", func() { NewNodes(q.Layout, wrong...) })
	n := NewNodes(q.Layout, parts...)
	testkit.MustPanic(t, "which do not start and end on blocks of 64", func() { n.Rows(1, 1, dtypes.Float32) })
	testkit.MustPanic(t, "cannot dequantize to Int32", func() { n.Dequantize(dtypes.Int32) })
	n.Rows(0, 4, dtypes.Float32) // 160 elements: blocks 0-2, the last cut at the tensor's end
}
