package accum

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/panics"
)

// Mean is a mean carried as its sum and its count, so that the means of parts of a batch combine
// exactly: the mean of the whole is ΣSum / ΣCount, not the mean of the parts' means, which is wrong
// whenever the parts count different numbers of tokens (the gradient-accumulation loss bug of 2024).
//
// Sum and Count are scalar nodes of any numeric dtype; they are combined in float32 (float64 when
// Sum is float64). Count is the number of tokens or examples Sum adds up (it may be fractional, for
// weighted losses) and must not depend on trainable variables: it is not differentiated.
type Mean struct {
	Sum, Count *graph.Node
}

// Value returns Sum / Count in float32 (float64 for a float64 Sum); a Count of 0 counts as 1 (a
// sum over nothing that counts is 0, so the mean is 0 rather than NaN).
func (m Mean) Value() *graph.Node {
	m.check("accum.Mean.Value")
	sum := widen(m.Sum)
	return safeDiv(sum, graph.ConvertDType(m.Count, sum.DType()))
}

func (m Mean) check(where string) {
	if m.Sum == nil || m.Count == nil {
		panicf("%s: a Mean needs both Sum and Count, got Sum=%v, Count=%v", where, m.Sum, m.Count)
	}
	for _, x := range []*graph.Node{m.Sum, m.Count} {
		if !x.IsScalar() || !(x.DType().IsFloat() || x.DType().IsInt()) {
			panicf("%s: Sum and Count must be numeric scalars, got Sum %s and Count %s", where, m.Sum.Shape(), m.Count.Shape())
		}
	}
}

// MaskedMean returns the sum of values where mask is set and the number of those values, as a
// Mean. The sum runs in float32 (float64 for float64 values), whatever the dtype of values, so that
// bfloat16 losses are not summed in bfloat16. mask may be nil (every value counts), boolean (true
// counts) or numeric (a weight per value: the count is the sum of the weights). It has the shape of
// values or of its leading axes: a [batch] mask of [batch, tokens] values masks whole examples, each
// counting as tokens values. Masked-out values are dropped, not multiplied by 0, so a NaN or Inf
// in a padded position does not leak into the sum.
func MaskedMean(values, mask *graph.Node) Mean {
	if !values.DType().IsFloat() {
		panicf("accum.MaskedMean: values must be floating point, got %s", values.Shape())
	}
	v := widen(values)
	g := v.Graph()
	if mask == nil {
		return Mean{Sum: graph.ReduceAllSum(v), Count: graph.Scalar(g, dtypes.Float32, float64(v.Shape().Size()))}
	}
	if mask.Rank() > v.Rank() {
		panicf("accum.MaskedMean: mask %s has more axes than values %s", mask.Shape(), values.Shape())
	}
	for axis := range mask.Rank() {
		if mask.Shape().Dim(axis) != v.Shape().Dim(axis) {
			panicf("accum.MaskedMean: mask %s does not match the leading axes of values %s", mask.Shape(), values.Shape())
		}
	}
	weights := graph.ConvertDType(mask, v.DType()) // true -> 1, false -> 0
	if mask.Rank() < v.Rank() {
		dims := append(mask.Shape().Clone().Dimensions, make([]int, v.Rank()-mask.Rank())...)
		for axis := mask.Rank(); axis < v.Rank(); axis++ {
			dims[axis] = 1
		}
		weights = graph.BroadcastToDims(graph.Reshape(weights, dims...), v.Shape().Dimensions...)
	}
	kept := graph.Where(graph.NotEqual(weights, graph.ScalarZero(g, v.DType())), graph.Mul(v, weights), graph.ScalarZero(g, v.DType()))
	return Mean{Sum: graph.ReduceAllSum(kept), Count: graph.ConvertDType(graph.ReduceAllSum(weights), dtypes.Float32)}
}

// LossFn computes the loss of one micro-batch, and optionally metrics, as Means. batch holds the
// micro-batch's slice of each input, in the order of the inputs; the same variables must be used
// for every micro-batch (they are created on the first call and reused afterwards).
type LossFn func(ctx *context.Context, batch []*graph.Node) (loss Mean, metrics []Mean)

// MeanLoss adapts a loss function that returns a scalar mean over the examples of its batch (axis 0
// of batch[0]), such as a mean cross-entropy, to a LossFn: the mean counts as many examples as the
// micro-batch has. Micro-batches have equal numbers of examples, so this is exact for per-example
// means; for per-token means with padding, use MaskedLoss.
func MeanLoss(fn func(ctx *context.Context, batch []*graph.Node) *graph.Node) LossFn {
	return func(ctx *context.Context, batch []*graph.Node) (Mean, []Mean) {
		mean := fn(ctx, batch)
		if !mean.IsScalar() {
			panicf("accum.MeanLoss: the loss function must return a scalar mean, got %s", mean.Shape())
		}
		if len(batch) == 0 || batch[0].Rank() == 0 {
			panicf("accum.MeanLoss: the first input must have a batch axis")
		}
		n := graph.Scalar(mean.Graph(), dtypes.Float32, float64(batch[0].Shape().Dim(0)))
		w := widen(mean)
		return Mean{Sum: graph.Mul(w, graph.ConvertDType(n, w.DType())), Count: n}, nil
	}
}

// MaskedLoss adapts a loss function that returns per-example or per-token losses and a mask of the
// ones that count (nil: all of them; see MaskedMean) to a LossFn whose loss is their exact mean
// over the whole batch, however the mask splits across micro-batches.
func MaskedLoss(fn func(ctx *context.Context, batch []*graph.Node) (losses, mask *graph.Node)) LossFn {
	return func(ctx *context.Context, batch []*graph.Node) (Mean, []Mean) {
		losses, mask := fn(ctx, batch)
		return MaskedMean(losses, mask), nil
	}
}

// wideDType is the dtype sums and accumulators use for values of dtype: float64 stays float64,
// anything else becomes float32.
var wideDType = exact.WideDType

// panicf panics with an error, the way GoMLX's graph-building functions report misuse.
var panicf = panics.Panicf

// widen converts x to wideDType, returning x itself when it already has it.
func widen(x *graph.Node) *graph.Node {
	if w := wideDType(x.DType()); x.DType() != w {
		return graph.ConvertDType(x, w)
	}
	return x
}

// safeDiv returns num / den, with a den of 0 taken as 1 (see nonZero).
func safeDiv(num, den *graph.Node) *graph.Node {
	return graph.Div(num, graph.ConvertDType(nonZero(den), num.DType()))
}

// nonZero returns den with 0 replaced by 1: sums over nothing that counts are 0, so an empty batch
// gets a zero loss and zero gradients instead of NaN.
func nonZero(den *graph.Node) *graph.Node {
	g := den.Graph()
	return graph.Where(graph.Equal(den, graph.ScalarZero(g, den.DType())), graph.ScalarOne(g, den.DType()), den)
}
