package optim

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Block-wise 8-bit codes for optimizer moments (Dettmers et al. 2021, "8-bit Optimizers via
// Block-wise Quantization"). A tensor is cut into blocks of a fixed number of elements; each block
// keeps one float32 scale (its largest magnitude) and one byte per element. The codes are
// non-linear, like the paper's dynamic code, so that values far below a block's largest keep
// precision; they are closed-form powers rather than the paper's 256-entry table, so quantizing is
// a few element-wise ops instead of a search:
//
//   - first moment (signed, int8): m = scale · t·|t| with t = q/127, so q = 127·sign(r)·√|r| for
//     r = m/scale. The spacing near zero is scale/127², 64x finer than a linear int8 code.
//   - second moment (non-negative, uint8): v = scale · (q/255)⁴, so √v, the quantity Adam divides
//     by, has a square code. A positive v never becomes code 0: it is stored as at least the
//     smallest positive code, so Adam's denominator cannot fall to ε and blow an update up
//     (rounding up there only shrinks that element's step).

const (
	signedLevels   = 127 // int8 codes -127..127
	unsignedLevels = 255 // uint8 codes 0..255
)

// toBlocks flattens x and cuts it into rows of blockSize elements, padding the last row with zeros.
func toBlocks(x *graph.Node, blockSize int) *graph.Node {
	n := x.Shape().Size()
	flat := graph.Reshape(x, n)
	numBlocks := (n + blockSize - 1) / blockSize
	if pad := numBlocks*blockSize - n; pad > 0 {
		// Concatenate, not Pad: the embedded backend has no Pad.
		flat = graph.Concatenate([]*graph.Node{flat, graph.Zeros(x.Graph(), shapes.Make(x.DType(), pad))}, 0)
	}
	return graph.Reshape(flat, numBlocks, blockSize)
}

// fromBlocks undoes toBlocks for a tensor of the given dimensions.
func fromBlocks(blocks *graph.Node, dims []int) *graph.Node {
	n := 1
	for _, d := range dims {
		n *= d
	}
	flat := graph.Reshape(blocks, blocks.Shape().Size())
	if flat.Shape().Size() != n {
		flat = graph.Slice(flat, graph.AxisRange(0, n))
	}
	return graph.Reshape(flat, dims...)
}

// blockScales returns each row's largest magnitude, [numBlocks] float32.
func blockScales(blocks *graph.Node) *graph.Node {
	return graph.ReduceMax(graph.Abs(blocks), 1)
}

// divideByScales divides every row by its scale; rows whose scale is 0 (all zeros) stay 0.
func divideByScales(blocks, scales *graph.Node) *graph.Node {
	g := blocks.Graph()
	safe := graph.Where(graph.GreaterThan(scales, graph.ScalarZero(g, scales.DType())), scales, graph.OnesLike(scales))
	return graph.Div(blocks, graph.InsertAxes(safe, 1))
}

// quantizeSigned encodes float32 blocks [numBlocks, blockSize] as int8 codes and per-block scales.
func quantizeSigned(blocks *graph.Node) (codes, scales *graph.Node) {
	scales = blockScales(blocks)
	r := divideByScales(blocks, scales)
	q := graph.Round(graph.MulScalar(graph.Mul(graph.Sign(r), graph.Sqrt(graph.Abs(r))), signedLevels))
	return graph.ConvertDType(q, dtypes.Int8), scales
}

// dequantizeSigned decodes quantizeSigned's codes into float32 blocks.
func dequantizeSigned(codes, scales *graph.Node) *graph.Node {
	t := graph.DivScalar(graph.ConvertDType(codes, dtypes.Float32), signedLevels)
	return graph.Mul(graph.Mul(t, graph.Abs(t)), graph.InsertAxes(scales, 1))
}

// quantizeUnsigned encodes non-negative float32 blocks as uint8 codes and per-block scales; a
// positive value gets at least code 1.
func quantizeUnsigned(blocks *graph.Node) (codes, scales *graph.Node) {
	g := blocks.Graph()
	scales = blockScales(blocks)
	r := divideByScales(blocks, scales)
	q := graph.Round(graph.MulScalar(graph.Sqrt(graph.Sqrt(r)), unsignedLevels))
	positive := graph.GreaterThan(r, graph.ScalarZero(g, r.DType()))
	q = graph.Where(positive, graph.Max(q, graph.OnesLike(q)), q)
	return graph.ConvertDType(q, dtypes.Uint8), scales
}

// dequantizeUnsigned decodes quantizeUnsigned's codes into float32 blocks.
func dequantizeUnsigned(codes, scales *graph.Node) *graph.Node {
	t := graph.Square(graph.DivScalar(graph.ConvertDType(codes, dtypes.Float32), unsignedLevels))
	return graph.Mul(graph.Square(t), graph.InsertAxes(scales, 1))
}
