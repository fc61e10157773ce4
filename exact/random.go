package exact

import (
	"hash/fnv"
	"math"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/internal/panics"
)

// Random numbers that are a function of a key and the element's position only, the same bits on
// every backend. GoMLX's random numbers come from the backend's RngBitGenerator, which the
// embedded backend and XLA implement differently, so the same seed gave different initial weights
// on each. Here the bits are SplitMix64 (Steele, Lea and Flood 2014) of a counter: element i of a
// stream with key k gets mix(k + (i+1)·γ), integer multiplications, additions, xors and shifts
// that every backend computes exactly. A normal value is the half-normal's inverse CDF of 63 of
// those bits, read from a table of quantiles (float32 values computed here, in Go) and
// interpolated with exact products, its sign the 64th bit.

// splitMixGamma is SplitMix64's increment, 2^64 divided by the golden ratio.
const splitMixGamma = 0x9E3779B97F4A7C15

// mix64 is SplitMix64's output function (Stafford's Mix13), on the host.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// RandomKey returns the key of a stream of random numbers named name (e.g. a variable's scope and
// name) of the given dimensions, under seed: a hash of the three, so that streams with different
// names, shapes or seeds are independent.
func RandomKey(seed uint64, name string, dims []int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	key := mix64(seed + splitMixGamma)
	key = mix64(key ^ h.Sum64())
	for _, d := range dims {
		key = mix64(key ^ uint64(d))
	}
	return key
}

// RandomBits returns uint64 random values with the given dimensions: the element with flat
// (row-major) index i is SplitMix64's output mix(key + (i+1)·γ), i.e. the (i+1)-th number of
// SplitMix64 seeded with key. The same bits on every backend.
func RandomBits(g *graph.Graph, key uint64, dims ...int) *graph.Node {
	u64 := dtypes.Uint64
	n := shapes.Make(u64, dims...).Size()
	i := graph.IotaFull(g, shapes.Make(u64, n))
	z := graph.Add(graph.Mul(i, graph.Const(g, uint64(splitMixGamma))), graph.Const(g, key+splitMixGamma))
	shiftXorMul := func(z *graph.Node, shift uint, factor uint64) *graph.Node {
		z = graph.BitwiseXor(z, graph.Div(z, graph.Const(g, uint64(1)<<shift)))
		if factor == 0 {
			return z
		}
		return graph.Mul(z, graph.Const(g, factor))
	}
	z = shiftXorMul(z, 30, 0xBF58476D1CE4E5B9)
	z = shiftXorMul(z, 27, 0x94D049BB133111EB)
	z = shiftXorMul(z, 31, 0)
	return graph.Reshape(z, dims...)
}

// RandomNormal returns values of shape (a float dtype) drawn from a normal distribution with mean
// 0 and standard deviation std, as a function of key and the element's position only: the same
// bits on every backend (see RandomBits). Each value uses one uint64 of RandomBits: its top bit is
// the sign and the other 63 pick the tail probability t in (0, 1], whose half-normal quantile
// √2·erfc⁻¹(t) is read from a table (256 bins per octave of t, the deepest 2^-40, so values reach
// 7.1·std) with linear interpolation. float32 and float64 values are rounded once from float64;
// bfloat16 and float16 ones are rounded to their precision with integer arithmetic first, so that
// the final conversion is exact (the embedded backend truncates to bfloat16, XLA rounds). It
// panics for other dtypes or a std that is not positive and finite.
func RandomNormal(g *graph.Graph, key uint64, shape shapes.Shape, std float64) *graph.Node {
	if !shape.DType.IsFloat() {
		panics.Panicf("RandomNormal: %s is not a float shape", shape)
	}
	if !(std > 0) || math.IsInf(std, 0) {
		panics.Panicf("RandomNormal: standard deviation %g must be positive and finite", std)
	}
	f64 := dtypes.Float64
	bits := RandomBits(g, key, shape.Size()) // flat: the table lookups gather along one axis
	negative := graph.GreaterOrEqual(bits, graph.Const(g, uint64(1)<<63))
	// T in [1, 2^63], the tail probability t = T·2^-63 = 2^-c·(1 + (bin + frac)/256), where c is
	// T's number of leading zeros and N = T·2^c its normalized form.
	tail := graph.Add(graph.BitwiseAnd(bits, graph.Const(g, uint64(1)<<63-1)), graph.Const(g, uint64(1)))
	zeros := graph.Clz(tail)
	level := graph.Min(zeros, graph.Const(g, uint64(normalLevels-1)))
	normalized := graph.Mul(tail, gatherConst(graph.Const(g, powersOfTwo()), zeros))
	bin := graph.Sub(graph.Div(normalized, graph.Const(g, uint64(1)<<(63-normalBinBits))), graph.Const(g, uint64(normalBins)))
	frac := graph.BitwiseAnd(graph.Div(normalized, graph.Const(g, uint64(1)<<(63-normalBinBits-normalFracBits))),
		graph.Const(g, uint64(1)<<normalFracBits-1))
	index := graph.Add(graph.Mul(level, graph.Const(g, uint64(normalBins))), bin)
	table := normalTable()
	quantile := gatherConst(graph.Const(g, table.quantiles), index)
	slope := gatherConst(graph.Const(g, table.slopes), index)
	// quantile + slope·frac in float64: the product of a float32 slope and a 29-bit fraction is
	// exact, so the sum is rounded once, with or without a fused multiply-add (see ProductSum).
	f := graph.MulScalar(graph.ConvertDType(frac, f64), math.Ldexp(1, -normalFracBits))
	x := graph.Add(graph.ConvertDType(quantile, f64), graph.Mul(graph.ConvertDType(slope, f64), f))
	x = graph.MulScalar(x, std)
	switch shape.DType {
	case dtypes.Float64:
		return graph.Reshape(graph.Where(negative, graph.Neg(x), x), shape.Dimensions...)
	case dtypes.Float32:
	case dtypes.BFloat16:
		x = roundSignificant(x, 8, 10*std)
	case dtypes.Float16:
		x = roundSignificant(x, 11, 10*std)
	default:
		panics.Panicf("RandomNormal: unsupported dtype %s", shape.DType)
	}
	x = graph.ConvertDType(graph.ConvertDType(x, dtypes.Float32), shape.DType) // exact
	return graph.Reshape(graph.Where(negative, graph.Neg(x), x), shape.Dimensions...)
}

// gatherConst returns table[index] for an integer index tensor.
func gatherConst(table, index *graph.Node) *graph.Node {
	return graph.Gather(table, graph.InsertAxes(graph.ConvertDType(index, dtypes.Int32), -1))
}

// roundSignificant rounds non-negative float64 values below limit to `bits` significant bits,
// ties to even, with integer arithmetic: the values are scaled by a power of two into uint64
// (truncating below 2^-K of limit's scale, far below the precision kept), their leading bit
// found with Clz, and the rest rounded. The result is a float64 holding a value the target dtype
// represents exactly.
func roundSignificant(x *graph.Node, bits int, limit float64) *graph.Node {
	g := x.Graph()
	u64 := dtypes.Uint64
	_, e := math.Frexp(limit) // limit < 2^e
	k := 62 - e               // x·2^k < 2^62
	m := graph.ConvertDType(graph.MulScalar(x, math.Ldexp(1, k)), u64)
	// Bits to drop: 64 - leading zeros - bits, at least 0 (and at most 63).
	drop := graph.Sub(graph.Const(g, uint64(64-bits)), graph.Min(graph.Clz(m), graph.Const(g, uint64(64-bits))))
	unit := gatherConst(graph.Const(g, powersOfTwo()), drop)
	q := graph.Div(m, unit)
	rest := graph.Sub(m, graph.Mul(q, unit))
	half := graph.Div(unit, graph.Const(g, uint64(2)))
	odd := graph.Equal(graph.BitwiseAnd(q, graph.Const(g, uint64(1))), graph.Const(g, uint64(1)))
	up := graph.LogicalOr(graph.GreaterThan(rest, half),
		graph.LogicalAnd(graph.Equal(rest, half), graph.LogicalAnd(odd, graph.GreaterThan(unit, graph.Const(g, uint64(1))))))
	q = graph.Where(up, graph.Add(q, graph.Const(g, uint64(1))), q)
	return graph.MulScalar(graph.ConvertDType(graph.Mul(q, unit), dtypes.Float64), math.Ldexp(1, -k))
}

// powersOfTwo returns 2^0 ... 2^63 as uint64.
func powersOfTwo() []uint64 {
	p := make([]uint64, 64)
	for i := range p {
		p[i] = 1 << i
	}
	return p
}

// The quantile table: normalLevels octaves of the tail probability (t in [2^-c, 2^(1-c)) for
// c = 0 ... normalLevels-1; deeper tails use the last octave), normalBins bins each, and
// normalFracBits bits of the position within a bin.
const (
	normalLevels   = 41
	normalBinBits  = 8
	normalBins     = 1 << normalBinBits
	normalFracBits = 29 // a 29-bit fraction times a float32 slope is exact in float64
)

type quantileTable struct {
	quantiles, slopes []float32 // at each bin's lower edge in t, and to the next edge
}

// normalTable returns the table, computed once.
var normalTable = sync.OnceValue(func() quantileTable {
	n := normalLevels * normalBins
	edges := make([]float64, n)
	for c := range normalLevels {
		for b := range normalBins {
			t := math.Ldexp(1+float64(b)/normalBins, -c)
			edges[c*normalBins+b] = halfNormalQuantile(min(t, 1))
		}
	}
	table := quantileTable{quantiles: make([]float32, n), slopes: make([]float32, n)}
	for c := range normalLevels {
		for b := range normalBins {
			j := c*normalBins + b
			next := 0.0 // t = 2^(1-c) >= 1 for c <= 1 (and c = 0 holds only t = 1)
			switch {
			case b+1 < normalBins:
				next = edges[j+1]
			case c >= 2:
				next = edges[(c-1)*normalBins]
			}
			if c == 0 {
				next = 0
			}
			table.quantiles[j] = float32(edges[j])
			table.slopes[j] = float32(next - edges[j])
		}
	}
	return table
})

// halfNormalQuantile returns x >= 0 with P(|Z| > x) = t for a standard normal Z: √2·erfc⁻¹(t),
// refined by Newton's method on log erfc, which stays accurate in the far tail where Go's
// Erfcinv (computed as Erfinv(1-t)) loses its digits.
func halfNormalQuantile(t float64) float64 {
	if t >= 1 {
		return 0
	}
	x := math.Sqrt2 * math.Erfcinv(t)
	if t < 1e-8 || math.IsInf(x, 0) {
		x = math.Sqrt(-2 * math.Log(t)) // the tail's leading term; Newton refines it
	}
	for range 50 {
		tail := math.Erfc(x / math.Sqrt2)
		density := math.Sqrt(2/math.Pi) * math.Exp(-x*x/2)
		step := (math.Log(tail) - math.Log(t)) * tail / density
		x += step
		if math.Abs(step) <= 1e-15*x {
			break
		}
	}
	return x
}
