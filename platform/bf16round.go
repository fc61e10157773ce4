package platform

import (
	"errors"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// The embedded backend of GoMLX v0.26.0 converts float32 to bfloat16 by truncation
// (bfloat16.FromFloat32 keeps the top 16 bits), which biases every bfloat16 value toward zero.
// XLA and JAX round to nearest, ties to even. onegpu owns its conversion rules: the embedded
// backend's builder (guardedBuilder) turns every ConvertDType from float32 to bfloat16 into the
// rounding below, so that a bfloat16 run on the embedded backend rounds as it does on XLA.
//
// The embedded backend has no Bitcast and no shifts, so the rounding is built from its float
// operations, each exact:
//
//	c = trunc(x)               the truncation, toward zero (a bfloat16 value)
//	r = x - c                  the part truncation drops: exact, |r| < u, the bfloat16 ulp of c
//	t = trunc(x + r)           x + r = c + 2r is exact in float32; its truncation is c when
//	                           |r| < u/2 and c's neighbour away from zero when |r| >= u/2:
//	                           rounding to nearest with ties away from zero
//	tie = |2r| == |t - c|      exactly half an ulp dropped
//	result = c  when r == 0 (exact, and keeps -0), x is infinite, or a tie with c even
//	             (c a multiple of 2u: Rem(c, 2u) == 0); t otherwise
//
// It holds for subnormals (the ulp is fixed there, 2^-133) and at the top of the range (x + r
// overflows to infinity exactly when rounding goes past the largest bfloat16). A NaN comes out
// as the truncation of x + r, which is x quieted: a NaN with x's sign and the top bits of its
// payload, as the usual bit-level rounding ((bits + 0x7FFF + lsb) >> 16, NaN: bits>>16 | 0x40)
// gives. TestBFloat16RoundsToNearestEven holds it bit for bit to that rounding.

// convertToBFloat16Nearest converts x (float32, of the given shape) to bfloat16, rounding to
// nearest with ties to even.
func (b guardedBuilder) convertToBFloat16Nearest(x backends.Op, shape shapes.Shape) (result backends.Op, err error) {
	if shape.DType != dtypes.Float32 {
		return nil, errors.New("onegpu: convertToBFloat16Nearest needs a float32 operand")
	}
	// op stops at the first error (through roundingError), so that the rounding reads as the
	// formulas above.
	defer func() {
		switch e := recover().(type) {
		case nil:
		case roundingError:
			result, err = nil, e.error
		default:
			panic(e)
		}
	}()
	op := func(o backends.Op, e error) backends.Op {
		if e != nil {
			panic(roundingError{e})
		}
		return o
	}
	inner := b.Builder
	scalar := func(v float32) backends.Op {
		return op(inner.BroadcastInDim(op(inner.Constant([]float32{v})), shape, nil))
	}
	trunc := func(v backends.Op) (bf16, f32 backends.Op) {
		bf16 = op(inner.ConvertDType(v, dtypes.BFloat16))
		return bf16, op(inner.ConvertDType(bf16, dtypes.Float32))
	}
	c16, c := trunc(x)
	r := op(inner.Sub(x, c))
	t16, t := trunc(op(inner.Add(x, r)))
	u := op(inner.Abs(op(inner.Sub(t, c))))
	absR := op(inner.Abs(r))
	tie := op(inner.Equal(op(inner.Add(absR, absR)), u))
	even := op(inner.Equal(op(inner.Rem(c, op(inner.Add(u, u)))), scalar(0)))
	exact := op(inner.Equal(r, scalar(0)))
	infinite := op(inner.Equal(op(inner.Abs(x)), scalar(float32(math.Inf(1)))))
	keep := op(inner.LogicalOr(op(inner.LogicalOr(exact, infinite)), op(inner.LogicalAnd(tie, even))))
	return op(inner.Where(keep, c16, t16)), nil
}

// roundingError carries a builder error out of convertToBFloat16Nearest's chain of operations.
type roundingError struct{ error }

// DotGeneral of bfloat16 operands accumulates in float32 on the embedded backend, as on XLA, and
// then truncates the sums to bfloat16, where XLA rounds them to nearest even. So the guard takes
// the product of the operands converted to float32 (exact) and rounds it once: XLA's numbers, for
// a float32 copy of the operands while the product runs.
//
// The embedded backend's bfloat16 elementwise operations (Add, Mul, Exp, ...) also compute in
// float32 and truncate each result. Rounding those too would add the rounding's passes after
// every one-pass operation: measured on the tiny GPT's bfloat16 step (compare --backend go), the
// losses then sit 3.5e-4 from JAX's instead of 2.8e-3, but the step takes 6.7 s instead of 1.7 s.
// So they keep GoMLX's truncation.
func (b guardedBuilder) DotGeneral(lhs backends.Op, lhsContractingAxes, lhsBatchAxes []int, rhs backends.Op, rhsContractingAxes, rhsBatchAxes []int) (backends.Op, error) {
	return b.roundedProduct(lhs, rhs, func(lhs, rhs backends.Op) (backends.Op, error) {
		return b.Builder.DotGeneral(lhs, lhsContractingAxes, lhsBatchAxes, rhs, rhsContractingAxes, rhsBatchAxes)
	})
}

// Dot is DotGeneral's short form (graph.Dot), which the embedded backend builds without going
// through the guard's DotGeneral.
func (b guardedBuilder) Dot(lhs, rhs backends.Op) (backends.Op, error) {
	return b.roundedProduct(lhs, rhs, b.Builder.Dot)
}

// roundedProduct returns product(lhs, rhs), computed in float32 and rounded to nearest even when
// both operands are bfloat16.
func (b guardedBuilder) roundedProduct(lhs, rhs backends.Op, product func(lhs, rhs backends.Op) (backends.Op, error)) (backends.Op, error) {
	l, errL := b.Builder.OpShape(lhs)
	r, errR := b.Builder.OpShape(rhs)
	if errL != nil || errR != nil || l.DType != dtypes.BFloat16 || r.DType != dtypes.BFloat16 {
		return product(lhs, rhs)
	}
	lhs32, err := b.Builder.ConvertDType(lhs, dtypes.Float32)
	if err != nil {
		return nil, err
	}
	rhs32, err := b.Builder.ConvertDType(rhs, dtypes.Float32)
	if err != nil {
		return nil, err
	}
	sums, err := product(lhs32, rhs32)
	if err != nil {
		return nil, err
	}
	shape, err := b.Builder.OpShape(sums)
	if err != nil {
		return nil, err
	}
	return b.convertToBFloat16Nearest(sums, shape)
}
