package quant

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/panics"
)

// Nodes are a quantized tensor's parts in a graph (parameters, constants or variables' values),
// in Layout.Parts' order. A projection keeps them, never the dequantized matrix: Dequantize (or
// Blocks, Rows for a part of it) expands them where they are multiplied, so the full-precision
// values are a temporary of the operation that uses them.
type Nodes struct {
	Layout
	Parts []*graph.Node
}

// NewNodes checks parts against l.Parts (names, dtypes, shapes) and returns them as Nodes; it
// panics naming the first part that does not match.
func NewNodes(l Layout, parts ...*graph.Node) Nodes {
	want := l.Parts()
	if len(parts) != len(want) {
		panics.Panicf("quant.NewNodes: %d parts for a %s layout that has %d (%v)", len(parts), l.Format, len(want), want)
	}
	for i, p := range want {
		if !parts[i].Shape().Equal(p.Shape) {
			panics.Panicf("quant.NewNodes: part %d (%s) is %s, want %s", i, p.Name, parts[i].Shape(), p.Shape)
		}
	}
	return Nodes{Layout: l, Parts: parts}
}

// Dequantize returns the tensor, shaped Dims, in dtype (a float type): each element's level times
// its block's scale in float32, as Tensor.Dequantize computes it on the host, then converted.
func (n Nodes) Dequantize(dtype dtypes.DType) *graph.Node {
	values := n.flat(0, n.NumBlocks(), n.Size(), dtype)
	return graph.Reshape(values, n.Dims...)
}

// Rows returns rows [first, first+count) of the tensor (its first axis; a row is the product of
// the other dimensions), dequantized to dtype: a matmul can expand its weight a slice of rows at
// a time. The rows must start on a block boundary and end on one or at the tensor's end (for a
// weight [out, in] with in a multiple of BlockSize, any rows do); it panics otherwise.
func (n Nodes) Rows(first, count int, dtype dtypes.DType) *graph.Node {
	if len(n.Dims) < 1 || first < 0 || count < 1 || first+count > n.Dims[0] {
		panics.Panicf("quant.Nodes.Rows: rows [%d, %d) of a tensor of dimensions %v", first, first+count, n.Dims)
	}
	row := n.Size() / n.Dims[0]
	start, end := first*row, (first+count)*row
	if start%n.BlockSize != 0 || (end%n.BlockSize != 0 && end != n.Size()) {
		panics.Panicf("quant.Nodes.Rows: rows [%d, %d) of %v are elements [%d, %d), which do not start and end on blocks of %d", first, first+count, n.Dims, start, end, n.BlockSize)
	}
	values := n.flat(start/n.BlockSize, ceilDiv(end, n.BlockSize)-start/n.BlockSize, end-start, dtype)
	return graph.Reshape(values, append([]int{count}, n.Dims[1:]...)...)
}

// Blocks returns blocks [first, first+count) dequantized to dtype, [count, BlockSize] (the last
// block's padding included, as zeros).
func (n Nodes) Blocks(first, count int, dtype dtypes.DType) *graph.Node {
	if first < 0 || count < 1 || first+count > n.NumBlocks() {
		panics.Panicf("quant.Nodes.Blocks: blocks [%d, %d) of %d", first, first+count, n.NumBlocks())
	}
	g := n.Parts[0].Graph()
	codes := graph.Slice(n.Parts[0], graph.AxisRange(first, first+count))
	if n.Format == NF4 {
		// No 4-bit type and no shifts: the high nibble is the byte divided by 16, the low one the
		// remainder; the pair becomes two adjacent elements, high first.
		sixteen := graph.Scalar(g, dtypes.Uint8, 16)
		codes = graph.Stack([]*graph.Node{graph.Div(codes, sixteen), graph.Rem(codes, sixteen)}, -1)
		codes = graph.Reshape(codes, count, n.BlockSize)
	}
	values := lookup(n.code().levels, codes)
	scales := graph.Slice(n.scales(), graph.AxisRange(first, first+count))
	values = graph.Mul(values, graph.InsertAxes(scales, -1))
	if dtype != dtypes.Float32 {
		values = graph.ConvertDType(values, dtype)
	}
	return values
}

// flat returns blocks [first, first+count) dequantized to dtype and flattened, cut to size elements.
func (n Nodes) flat(first, count, size int, dtype dtypes.DType) *graph.Node {
	if !dtype.IsFloat() {
		panics.Panicf("quant: cannot dequantize to %s: want a float dtype", dtype)
	}
	values := graph.Reshape(n.Blocks(first, count, dtype), count*n.BlockSize)
	if size < count*n.BlockSize {
		values = graph.Slice(values, graph.AxisRange(0, size))
	}
	return values
}

// scales returns the blocks' scales, float32 [NumBlocks], decoded under DoubleQuant as
// Tensor.BlockScales does (and bitsandbytes' dequantize_blockwise): level·scale rounded to
// float32, then the offset added in float32. XLA moves the rounding of a float64 product of
// float32 operands down to a float32 multiply and fuses it with the addition into one rounding
// (measured on the XLA CPU plugin: 153 of 261 scales of the bitsandbytes fixture one ulp off), so
// the product is rounded to float32 with float64 additions only (roundToFloat32), which no
// backend fuses or reorders.
func (n Nodes) scales() *graph.Node {
	if !n.DoubleQuant {
		return n.Parts[1]
	}
	codes, scaleScales, offset := n.Parts[1], n.Parts[2], n.Parts[3]
	levels := lookup(dynamicMap[:], codes)
	perBlock := graph.BroadcastToDims(graph.InsertAxes(scaleScales, -1), n.NumScaleBlocks(), n.ScaleBlockSize)
	perBlock = graph.Reshape(perBlock, n.NumScaleBlocks()*n.ScaleBlockSize)
	if n.NumScaleBlocks()*n.ScaleBlockSize != n.NumBlocks() {
		perBlock = graph.Slice(perBlock, graph.AxisRange(0, n.NumBlocks()))
	}
	f64 := dtypes.Float64
	product := graph.Mul(graph.ConvertDType(levels, f64), graph.ConvertDType(perBlock, f64)) // exact
	return graph.Add(graph.ConvertDType(roundToFloat32(product), dtypes.Float32), offset)
}

// roundToFloat32 rounds float64 values with at most 48 significant bits (a product of two
// float32 values) to the nearest float32 value, ties to even, by Veltkamp's splitting with
// additions only: c = x·2^29 + x (the product is exact, so a fused multiply-add gives the same),
// then (x - c) + c keeps x's top 24 bits, rounded to nearest. Checked against Go's conversion on
// 20 million products, 13,621 of them ties. Results below float32's normal range keep 24 bits
// where float32 would keep fewer (not reached by scales of real weights).
func roundToFloat32(x *graph.Node) *graph.Node {
	c := graph.Add(graph.MulScalar(x, 1<<29), x)
	return graph.Add(c, graph.Sub(x, c))
}

// lookup returns table[codes] (float32, shaped as codes) for integer codes. The codes index the
// table as they are (bytes: every part of a layout is uint8), not converted to int32 first, which
// would be the largest temporary of a dequantization: 4 bytes a weight, 224 MiB for a
// [14336, 4096] projection, beside the gathered float32 levels.
func lookup(table []float32, codes *graph.Node) *graph.Node {
	g := codes.Graph()
	// Gather in v0.26.0 rejects a rank-1 table (its index axis is checked against the table's
	// rank): gather rows of a [len, 1] table by a flat [n, 1] index instead.
	column := graph.Reshape(graph.Const(g, table), len(table), 1)
	flat := graph.Reshape(codes, codes.Shape().Size(), 1)
	return graph.Reshape(graph.Gather(column, flat), codes.Shape().Dimensions...)
}

// After returns n with every part made to depend on dep, values unchanged (an exact zero computed
// from dep added to each): a dequantization built from them can neither run before dep exists
// nor be merged with the same dequantization built from other parts (XLA's common-subexpression
// elimination). A backward pass that needs the weight again dequantizes After its cotangent, so
// that the forward pass's copy is not kept until then.
func (n Nodes) After(dep *graph.Node) Nodes {
	zero := exact.NegativeZeroFrom(dep) // -0.0: adds nothing to a float, 0 as an integer
	parts := make([]*graph.Node, len(n.Parts))
	for i, p := range n.Parts {
		parts[i] = graph.Add(p, graph.ConvertDType(zero, p.DType()))
	}
	return Nodes{Layout: n.Layout, Parts: parts}
}
