package exact

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/internal/panics"
)

// Arithmetic that rounds the same on every backend, for computations whose bits must agree
// between the embedded backend and XLA: the optimizer offload runs the update on the former and
// the plain step on the latter, and 8-bit optimizer codes turn a last-bit difference into a whole
// code step. Measured on v0.26.0 and the XLA CPU plugin, a backend computes an element-wise
// formula differently in four ways:
//
//   - XLA fuses a multiply and the add that consumes it into one fused multiply-add (LLVM's FMA
//     contraction, always on in XLA's CPU and GPU compilers), which rounds once where the
//     embedded backend rounds twice: β·m + (1-β)·g in float32 differs in the last bit for 28% of
//     the elements. A sum of products is the same under contraction when every product is exact:
//     the product of two float32 values is exact in float64 (48 of 53 bits), so ProductSum
//     computes in float64 from float32 operands and rounds once.
//   - XLA turns a division by a broadcast value (a per-row scale) into a multiplication by its
//     reciprocal; the embedded backend divides. Compare against products instead of dividing
//     (optim's 8-bit codes do), or divide element by element.
//   - Pow is a library function: XLA's and Go's math.Pow differ in the last bit (0.999^t for
//     0.6% of t). PowInt multiplies constants by squaring instead.
//   - Round's ties: the embedded backend rounds half away from zero, XLA half to even.
//     RoundHalfUp decides ties with a comparison.
//
// Multiplication, addition of exact values, square roots and comparisons round the same
// everywhere; float64 division too (XLA's GPU compiler divides float32 approximately, 2 ulp).
// Values rounded to float32 and used again in the same program should stay float64 until they are
// stored: XLA may drop a float64 -> float32 -> float64 round trip ("excess precision").

// ProductSum returns a·x + b·y in float64 for float32 operands (tensors or scalars, broadcast as
// graph.Mul does; float64 operands holding float32 values are accepted). Both products are exact
// in float64, so the sum is rounded once: the same bits with or without a fused multiply-add.
// Round the result to float32 only where it is stored or returned. It panics for other dtypes.
func ProductSum(a, x, b, y *graph.Node) *graph.Node {
	return graph.Add(graph.Mul(exactWide(a), exactWide(x)), graph.Mul(exactWide(b), exactWide(y)))
}

// exactWide converts a float32 node to float64 (exactly); a float64 one is returned as is.
func exactWide(x *graph.Node) *graph.Node {
	switch x.DType() {
	case dtypes.Float64:
		return x
	case dtypes.Float32:
		return graph.ConvertDType(x, dtypes.Float64)
	}
	panics.Panicf("ProductSum: operands must be float32 (or float64 holding float32 values), got %s", x.Shape())
	return nil
}

// PowInt returns base^n in float64 for a constant base in [0, 1] and an integer tensor n >= 0
// (negative n is taken as 0), by binary exponentiation with the constants base^(2^k) computed in
// Go: n's bits select which to multiply in, so every backend performs the same multiplications.
// Once base^(2^k) underflows to 0, the result is 0 for every n >= 2^k. It panics for a base
// outside [0, 1] or a non-integer n.
func PowInt(base float64, n *graph.Node) *graph.Node {
	if !(base >= 0 && base <= 1) {
		panics.Panicf("PowInt: base %g must be in [0, 1]", base)
	}
	if !n.DType().IsInt() {
		panics.Panicf("PowInt: the exponent must be an integer tensor, got %s", n.Shape())
	}
	g := n.Graph()
	f64 := dtypes.Float64
	n = graph.Max(n, graph.ScalarZero(g, n.DType()))
	result := graph.Ones(g, shapes.Make(f64, n.Shape().Dimensions...))
	power := base // base^(2^k)
	for k := 0; k < n.DType().Bits()-1; k++ {
		if power == 0 {
			large := graph.GreaterOrEqual(n, graph.Scalar(g, n.DType(), math.Ldexp(1, k)))
			return graph.Where(large, graph.ZerosLike(result), result)
		}
		if power != 1 {
			bit := graph.NotEqual(graph.BitwiseAnd(n, graph.Scalar(g, n.DType(), math.Ldexp(1, k))), graph.ScalarZero(g, n.DType()))
			result = graph.Where(bit, graph.Mul(result, graph.Scalar(g, f64, power)), result)
		}
		power *= power
	}
	return result
}

// RoundHalfUp rounds x (float) to the nearest integer, ties toward +∞, with exact operations only
// (Floor, a comparison, adding small integers): the same on every backend, unlike graph.Round.
func RoundHalfUp(x *graph.Node) *graph.Node {
	down := graph.Floor(x)
	up := graph.GreaterOrEqual(x, graph.AddScalar(down, 0.5))
	return graph.Where(up, graph.AddScalar(down, 1), down)
}
