package optim

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/exact"
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
//
// A code is the nearest level on that scale, ties rounded up (away from zero): |q| >= k exactly
// when |m| >= scale·((k-½)/L)^p (L levels, p = 2 or 4), in float32. The code is estimated from
// m/scale, then checked against the two thresholds around the estimate, which are products only:
// XLA turns a division by a block's scale into a multiplication by its reciprocal, the embedded
// backend divides, and GPUs divide float32 approximately, so an estimate can differ by one near a
// boundary, but the thresholds are the same bits everywhere (see exact.ProductSum): every backend
// stores the same codes for the same moments.

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

// blockScales returns each row's largest magnitude, [numBlocks], in the blocks' dtype.
func blockScales(blocks *graph.Node) *graph.Node {
	return graph.ReduceMax(graph.Abs(blocks), 1)
}

// nearestCodes returns, for float32 magnitudes [numBlocks, blockSize] and their rows' scales
// [numBlocks] (the rows' largest magnitudes), the codes q in [0, levels] (float32) whose levels
// scale·(q/levels)^power are nearest on the scale of magnitude^(1/power), ties up; power is 2 or
// 4. A zero magnitude gets code 0.
func nearestCodes(magnitudes, scales *graph.Node, levels, power int) *graph.Node {
	g := magnitudes.Graph()
	f32 := dtypes.Float32
	zero := graph.ScalarZero(g, f32)
	positive := graph.GreaterThan(scales, zero)
	inverse := graph.Where(positive, graph.Reciprocal(graph.Where(positive, scales, graph.OnesLike(scales))), graph.ZerosLike(scales))
	scale := graph.InsertAxes(scales, 1)
	root := graph.Sqrt(graph.Mul(magnitudes, graph.InsertAxes(inverse, 1)))
	if power == 4 {
		root = graph.Sqrt(root)
	}
	estimate := graph.Min(exact.RoundHalfUp(graph.MulScalar(root, levels)), graph.Scalar(g, f32, levels))
	// threshold(k) = scale·((k-½)/L)^power: the smallest magnitude with code >= k.
	threshold := func(k *graph.Node) *graph.Node {
		u := graph.Square(graph.MulScalar(graph.AddScalar(k, -0.5), 1/float64(levels)))
		if power == 4 {
			u = graph.Square(u)
		}
		return graph.Mul(u, scale)
	}
	down := graph.LogicalAnd(graph.GreaterThan(estimate, zero), graph.LessThan(magnitudes, threshold(estimate)))
	next := graph.AddScalar(estimate, 1)
	up := graph.LogicalAnd(graph.LogicalAnd(graph.LessThan(estimate, graph.Scalar(g, f32, levels)), graph.GreaterThan(magnitudes, zero)),
		graph.GreaterOrEqual(magnitudes, threshold(next)))
	codes := graph.Where(down, graph.AddScalar(estimate, -1), estimate)
	return graph.Where(up, next, codes)
}

// quantizeSigned encodes blocks [numBlocks, blockSize] as int8 codes and float32 per-block
// scales. Float64 blocks (the update's moments) are rounded to float32 first and never widened
// again (see exact.ProductSum on excess precision).
func quantizeSigned(blocks *graph.Node) (codes, scales *graph.Node) {
	blocks = graph.ConvertDType(blocks, dtypes.Float32)
	scales = blockScales(blocks)
	magnitude := nearestCodes(graph.Abs(blocks), scales, signedLevels, 2)
	negative := graph.LessThan(blocks, graph.ScalarZero(blocks.Graph(), blocks.DType()))
	q := graph.Where(negative, graph.Neg(magnitude), magnitude)
	return graph.ConvertDType(q, dtypes.Int8), scales
}

// dequantizeSigned decodes quantizeSigned's codes into float32 blocks (products only: the same
// bits on every backend).
func dequantizeSigned(codes, scales *graph.Node) *graph.Node {
	t := graph.DivScalar(graph.ConvertDType(codes, dtypes.Float32), signedLevels)
	return graph.Mul(graph.Mul(t, graph.Abs(t)), graph.InsertAxes(scales, 1))
}

// quantizeUnsigned encodes non-negative blocks as uint8 codes and float32 per-block scales, as
// quantizeSigned does; a positive value gets at least code 1.
func quantizeUnsigned(blocks *graph.Node) (codes, scales *graph.Node) {
	blocks = graph.ConvertDType(blocks, dtypes.Float32)
	scales = blockScales(blocks)
	q := nearestCodes(blocks, scales, unsignedLevels, 4)
	positive := graph.GreaterThan(blocks, graph.ScalarZero(blocks.Graph(), blocks.DType()))
	q = graph.Where(positive, graph.Max(q, graph.OnesLike(q)), q)
	return graph.ConvertDType(q, dtypes.Uint8), scales
}

// dequantizeUnsigned decodes quantizeUnsigned's codes into float32 blocks.
func dequantizeUnsigned(codes, scales *graph.Node) *graph.Node {
	t := graph.Square(graph.DivScalar(graph.ConvertDType(codes, dtypes.Float32), unsignedLevels))
	return graph.Mul(graph.Square(t), graph.InsertAxes(scales, 1))
}
