package mixed

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/panics"
)

// Float32 islands: reductions and normalizations that lose too much in 16 bits run in float32
// whatever the dtype of their input, then return the dtype the caller asks for. GoMLX's embedded
// backend accumulates 16-bit sums in 16 bits (a bfloat16 sum of 1024 ones is 256), and even where
// a backend accumulates wider, exp/log and divisions lose precision in bfloat16.
//
// Each function takes an out dtype: dtypes.InvalidDType means "the input's dtype". Float64 inputs
// are computed in float64; everything else in float32. The gradients flow back through the
// conversions, so they reach the input in its own dtype.

// wide returns the dtype an island computes x in: float64 for float64, float32 otherwise.
func wide(x *graph.Node) dtypes.DType { return exact.WideDType(x.DType()) }

// panicf panics with an error, the way GoMLX's graph-building functions report misuse.
var panicf = panics.Panicf

// widen converts x to the dtype its island computes in. It panics on non-float input.
func widen(x *graph.Node, fn string) *graph.Node {
	if !x.DType().IsFloat() {
		panicf("mixed.%s: input dtype %s is not a floating-point dtype", fn, x.DType())
	}
	return graph.ConvertDType(x, wide(x))
}

// narrow converts an island's result to out (the input's dtype when out is dtypes.InvalidDType).
func narrow(result *graph.Node, in *graph.Node, out dtypes.DType) *graph.Node {
	if out == dtypes.InvalidDType {
		out = in.DType()
	}
	if !out.IsFloat() {
		panicf("mixed: requested output dtype %s is not a floating-point dtype", out)
	}
	return graph.ConvertDType(result, out)
}

// lastAxis returns axes, or [-1] when empty.
func lastAxis(axes []int) []int {
	if len(axes) == 0 {
		return []int{-1}
	}
	return axes
}

// Sum is graph.ReduceSum (over all axes when none are given) accumulated in float32, returned in
// out.
func Sum(x *graph.Node, out dtypes.DType, axes ...int) *graph.Node {
	return narrow(graph.ReduceSum(widen(x, "Sum"), axes...), x, out)
}

// Mean is graph.ReduceMean (over all axes when none are given) accumulated in float32, returned in
// out.
func Mean(x *graph.Node, out dtypes.DType, axes ...int) *graph.Node {
	return narrow(graph.ReduceMean(widen(x, "Mean"), axes...), x, out)
}

// Softmax is graph.Softmax over axes (default: the last axis) computed in float32, returned in
// out. Its gradient is computed in float32 from the output alone: no float32 intermediate is kept
// for the backward pass.
func Softmax(logits *graph.Node, out dtypes.DType, axes ...int) *graph.Node {
	axes = normalizedAxes(lastAxis(axes), logits.Rank())
	y := narrow(graph.Softmax(widen(logits, "Softmax"), axes...), logits, out)
	return withGradient(logits, y, func(y, v *graph.Node) *graph.Node { return softmaxGrad(y, v, axes) })
}

// LogSoftmax is graph.LogSoftmax over axes (default: the last axis) computed in float32, returned
// in out. Its gradient is computed in float32 from the output alone.
func LogSoftmax(logits *graph.Node, out dtypes.DType, axes ...int) *graph.Node {
	axes = normalizedAxes(lastAxis(axes), logits.Rank())
	y := narrow(graph.LogSoftmax(widen(logits, "LogSoftmax"), axes...), logits, out)
	return withGradient(logits, y, func(y, v *graph.Node) *graph.Node { return logSoftmaxGrad(y, v, axes) })
}

// LogSumExp returns log(sum(exp(x))) over axes (default: the last axis), which are removed from
// the shape. It subtracts the maximum first, so it neither overflows nor underflows, and computes
// in float32; the result is returned in out. Its gradient, softmax(x)·v, is computed in float32
// from x in its own dtype.
func LogSumExp(x *graph.Node, out dtypes.DType, axes ...int) *graph.Node {
	axes = normalizedAxes(lastAxis(axes), x.Rank())
	lse := logSumExp(widen(x, "LogSumExp"), axes)
	return withGradient(x, narrow(lse, x, out), func(_, v *graph.Node) *graph.Node {
		p := graph.Exp(graph.Sub(toWide(x, x), expandAxes(lse, axes)))
		return graph.Mul(expandAxes(toWide(v, x), axes), p)
	})
}

// logSumExp reduces the (normalized) axes of a widened x.
func logSumExp(x *graph.Node, axes []int) *graph.Node {
	shift := graph.ReduceAndKeep(x, graph.ReduceMax, axes...)
	sum := graph.ReduceAndKeep(graph.Exp(graph.Sub(x, shift)), graph.ReduceSum, axes...)
	return graph.Squeeze(graph.Add(graph.Log(sum), shift), axes...)
}

// SoftmaxCrossEntropy returns, for each example, the cross-entropy -log softmax(logits)[label]
// computed in float32 and returned in out. logits are [..., classes]; labels are integers in
// [0, classes) with logits' shape minus the last axis (a trailing axis of size 1 is also
// accepted). The result has the labels' shape (without the trailing 1).
func SoftmaxCrossEntropy(logits, labels *graph.Node, out dtypes.DType) *graph.Node {
	return narrow(crossEntropy(logits, labels), logits, out)
}

// SoftmaxCrossEntropySum returns the weighted sum of the per-example cross-entropies and the sum
// of the weights, both float32 scalars (float64 for float64 logits), so that callers can form
// exact means over masked examples and over micro-batches: mean = Σsum / Σcount.
//
// weights has the labels' shape and may be nil (every example counts 1), a boolean mask (true
// counts 1) or floating-point weights. Examples of weight 0 contribute exactly 0 to both sums,
// even when their loss is not finite (e.g. padding whose logits are -inf).
func SoftmaxCrossEntropySum(logits, labels, weights *graph.Node) (sum, count *graph.Node) {
	if weights == nil {
		losses := crossEntropy(logits, labels)
		return graph.ReduceAllSum(losses), graph.Scalar(losses.Graph(), losses.DType(), float64(losses.Shape().Size()))
	}
	x := logits
	if weights.Rank() == x.Rank() && weights.Shape().Dim(-1) == 1 {
		weights = graph.Squeeze(weights, -1)
	}
	if !slices.Equal(weights.Shape().Dimensions, x.Shape().Dimensions[:x.Rank()-1]) {
		panicf("mixed.SoftmaxCrossEntropySum: weights shape %s does not match logits shape %s minus its last (class) axis",
			weights.Shape(), logits.Shape())
	}
	if weights.DType() != dtypes.Bool && !weights.DType().IsFloat() {
		panicf("mixed.SoftmaxCrossEntropySum: weights dtype %s is neither bool nor floating-point", weights.DType())
	}
	w := graph.ConvertDType(weights, wide(x))
	// Examples of weight 0 get logits 0 before the loss, so that their (possibly -Inf) logits
	// reach neither the sums nor, as 0·NaN, the gradient.
	kept := graph.NotEqual(w, graph.ScalarZero(x.Graph(), w.DType()))
	x = graph.Where(kept, x, graph.ZerosLike(x))
	losses := crossEntropy(x, labels)
	return graph.ReduceAllSum(graph.Mul(w, losses)), graph.ReduceAllSum(w)
}

// SoftmaxCrossEntropyMean returns Σ weights·cross-entropy / Σ weights (see SoftmaxCrossEntropySum)
// in out; weights may be nil (plain mean). It is 0, with zero gradients, when every weight is 0.
func SoftmaxCrossEntropyMean(logits, labels, weights *graph.Node, out dtypes.DType) *graph.Node {
	sum, count := SoftmaxCrossEntropySum(logits, labels, weights)
	zero := graph.ScalarZero(count.Graph(), count.DType())
	safe := graph.Where(graph.GreaterThan(count, zero), count, graph.ScalarOne(count.Graph(), count.DType()))
	return narrow(graph.Div(sum, safe), logits, out)
}

// crossEntropy returns the per-example cross-entropy of logits in float32 (float64 for float64
// logits). Classes whose logit is -Inf (masked out) have probability 0 and a zero gradient, unless
// they are the label. Its gradient, (softmax(x) - onehot)·v, is computed in float32 from the logits
// in their own dtype.
func crossEntropy(logits, labels *graph.Node) *graph.Node {
	x := widen(logits, "SoftmaxCrossEntropy")
	if !labels.DType().IsInt() {
		panicf("mixed.SoftmaxCrossEntropy: labels dtype %s is not an integer dtype", labels.DType())
	}
	if labels.Rank() == x.Rank() && labels.Shape().Dim(-1) == 1 {
		labels = graph.Squeeze(labels, -1)
	}
	if !slices.Equal(labels.Shape().Dimensions, x.Shape().Dimensions[:x.Rank()-1]) {
		panicf("mixed.SoftmaxCrossEntropy: labels shape %s does not match logits shape %s minus its last (class) axis",
			labels.Shape(), x.Shape())
	}
	last := []int{x.Rank() - 1}
	isLabel := func() *graph.Node {
		oneHot := graph.OneHot(labels, x.Shape().Dim(-1), x.DType())
		return graph.NotEqual(oneHot, graph.ScalarZero(x.Graph(), x.DType()))
	}
	lse := logSumExp(x, last)
	picked := graph.ReduceSum(graph.Where(isLabel(), x, graph.ZerosLike(x)), -1) // not x·onehot: -Inf·0 is NaN
	losses := graph.Sub(lse, picked)
	return withGradient(logits, losses, func(_, v *graph.Node) *graph.Node {
		wideX := toWide(logits, logits)
		p := graph.Exp(graph.Sub(wideX, expandAxes(lse, last)))
		p = graph.Sub(p, graph.ConvertDType(isLabel(), p.DType()))
		return graph.Mul(expandAxes(toWide(v, logits), last), p)
	})
}

// LayerNormStats returns the mean and the (biased) variance of x over axes (default: the last
// axis), computed in float32 with the reduced axes kept (size 1), ready to broadcast against x.
// The variance is the mean of squared deviations from the mean (two passes), not E[x²]-E[x]²,
// which cancels catastrophically when the mean is large.
func LayerNormStats(x *graph.Node, axes ...int) (mean, variance *graph.Node) {
	w := widen(x, "LayerNormStats")
	axes = lastAxis(axes)
	mean = graph.ReduceAndKeep(w, graph.ReduceMean, axes...)
	centered := graph.Sub(w, mean)
	variance = graph.ReduceAndKeep(graph.Mul(centered, centered), graph.ReduceMean, axes...)
	return mean, variance
}

// Normalize returns (x - mean) / sqrt(variance + epsilon) over axes (default: the last axis), with
// the statistics of LayerNormStats and the arithmetic in float32, converted back to x's dtype.
// It is LayerNorm without gain and offset, which callers apply in the compute dtype.
//
// Its gradient is computed in float32 from the output and the per-row 1/sqrt(variance + epsilon):
// neither x nor any float32 copy of it is kept for the backward pass.
func Normalize(x *graph.Node, epsilon float64, axes ...int) *graph.Node {
	axes = normalizedAxes(lastAxis(axes), x.Rank())
	mean, variance := LayerNormStats(x, axes...)
	r := graph.Rsqrt(graph.AddScalar(variance, epsilon))
	y := graph.ConvertDType(graph.Mul(graph.Sub(graph.ConvertDType(x, mean.DType()), mean), r), x.DType())
	return withGradient(x, y, func(y, v *graph.Node) *graph.Node { return normalizeGrad(y, r, v, axes) })
}

// RMSNormalize returns x / sqrt(mean(x²) + epsilon) over axes (default: the last axis), with the
// mean of squares and the arithmetic in float32 (float64 for float64 x), converted back to x's
// dtype: Llama's RMSNorm without its weight (Hugging Face's LlamaRMSNorm computes the same in
// float32 and casts back before applying the weight), which callers apply in the compute dtype.
// A bfloat16 mean of squares would saturate (see the package's islands).
//
// Its gradient is computed in float32 from the output and the per-row 1/sqrt(mean(x²) + epsilon):
// neither x nor any float32 copy of it is kept for the backward pass.
func RMSNormalize(x *graph.Node, epsilon float64, axes ...int) *graph.Node {
	axes = normalizedAxes(lastAxis(axes), x.Rank())
	w := widen(x, "RMSNormalize")
	r := graph.Rsqrt(graph.AddScalar(graph.ReduceAndKeep(graph.Mul(w, w), graph.ReduceMean, axes...), epsilon))
	y := graph.ConvertDType(graph.Mul(w, r), x.DType())
	return withGradient(x, y, func(y, v *graph.Node) *graph.Node { return rmsNormalizeGrad(y, r, v, axes) })
}
