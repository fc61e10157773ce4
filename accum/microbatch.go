package accum

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// Result is what Gradients computes for a whole batch. Every node is float32 (float64 where the
// loss or a variable is float64).
type Result struct {
	// Loss is the loss of the whole batch, ΣSum / ΣCount over the micro-batches.
	Loss *graph.Node
	// Count is ΣCount of the loss: the tokens or examples the loss averages over.
	Count *graph.Node
	// Metrics are the metrics of the whole batch, ΣSum / ΣCount each, in the order the loss
	// function returns them.
	Metrics []*graph.Node
	// Gradients are the gradients of Loss (times the loss scale, for ScaledGradients) with respect
	// to Variables: one per trainable variable the graph uses, in context order, which is the order
	// optimizers' UpdateGraphWithGradients expects.
	Gradients []*graph.Node
	// Variables are the trainable variables Gradients are for.
	Variables []*context.Variable
}

// Outputs returns Loss followed by Metrics: what a train step returns.
func (r *Result) Outputs() []*graph.Node {
	return append([]*graph.Node{r.Loss}, r.Metrics...)
}

// Gradients splits every input along axis 0 into microBatches equal micro-batches, calls lossFn on
// each, and returns the loss, metrics and gradients of the whole batch, exactly as if lossFn had
// seen it at once: losses and metrics are combined as sums and counts (see Mean), so micro-batches
// with different numbers of tokens that count are weighted correctly.
//
// The micro-batches are unrolled in the graph (GoMLX v0.26.0 has no loops) and serialized: each
// one's inputs depend, through an exact zero, on the gradients accumulated so far, and it is built
// after the previous one's backward pass, so that only one micro-batch's activations are alive at
// a time, on the embedded backend (which runs ops in creation order) and under XLA's scheduler
// alike. Gradients are accumulated in float32 (float64 for float64 variables), whatever the
// compute dtype. With microBatches = 1 the graph is that of a plain step.
//
// Apply the gradients with an optimizer's UpdateGraphWithGradients (GoMLX's Adam, SGD, RMSProp),
// or let optim.Chain.Step (onegpu's optim package, with its MicroBatches link) call Gradients and
// apply them through a chain. It panics, like GoMLX graph builders, when the inputs do not split (see
// CheckSplit, which reports the same as an error), when lossFn returns something other than numeric
// scalar Means, or when it uses different trainable variables for different micro-batches.
func Gradients(ctx *context.Context, microBatches int, inputs []*graph.Node, lossFn LossFn) *Result {
	return accumulate(ctx, microBatches, inputs, lossFn, nil, "accum.Gradients")
}

// ScaleFn multiplies a loss by a loss scale before it is differentiated: the Scale method of a
// mixed.LossScale is one.
type ScaleFn = func(ctx *context.Context, loss *graph.Node) *graph.Node

// ScaledGradients is Gradients with loss scaling: each micro-batch's loss is multiplied by ls
// before it is differentiated, so Result.Gradients are the gradients of the scaled loss; Loss and
// Metrics are not scaled. Unscale, check and apply them once for the whole batch: optim.Chain.Step
// does, with its LossScale link.
func ScaledGradients(ctx *context.Context, microBatches int, inputs []*graph.Node, lossFn LossFn, ls ScaleFn) *Result {
	if ls == nil {
		panicf("accum.ScaledGradients: the loss scale is nil; use Gradients for unscaled gradients")
	}
	return accumulate(ctx, microBatches, inputs, lossFn, ls, "accum.ScaledGradients")
}

func accumulate(ctx *context.Context, k int, inputs []*graph.Node, lossFn LossFn, ls ScaleFn, caller string) *Result {
	if len(inputs) == 0 {
		panicf("%s: no inputs", caller)
	}
	inputShapes := make([]shapes.Shape, len(inputs))
	for i, x := range inputs {
		inputShapes[i] = x.Shape()
	}
	if err := CheckSplit(k, inputShapes...); err != nil {
		panicf("%s: %v", caller, err)
	}
	g := inputs[0].Graph()
	// Each micro-batch's loss sum is multiplied by a power of two near 1/(its number of rows) before
	// it is differentiated, and the sums of gradients are divided by ΣCount times the same power:
	// the scaling is exact and keeps gradient magnitudes near those of a per-example mean.
	norm := math.Ldexp(1, -int(math.Floor(math.Log2(float64(inputShapes[0].Dim(0)/k)))))

	r := &Result{}
	var (
		lossSum, lossCount       *graph.Node
		metricSums, metricCounts []*graph.Node
		sums                     []*graph.Node // Σ of the gradients of norm × the (scaled) loss sums
		after                    *graph.Node
	)
	for i := range k {
		c := ctx
		if i > 0 {
			c = ctx.Reuse() // the variables exist: creating one now would be a bug in lossFn
		}
		loss, metrics := lossFn(c, microBatch(inputs, k, i, after))
		loss.check(caller + ": the loss")
		for _, m := range metrics {
			m.check(caller + ": a metric")
		}
		if !loss.Sum.DType().IsFloat() {
			panicf("%s: the loss sum must be floating point to be differentiated, got %s", caller, loss.Sum.DType())
		}
		if i == 0 {
			r.Variables = TrainableVariables(ctx, g)
			if len(r.Variables) == 0 {
				panicf("%s: the loss uses no trainable variables: there is nothing to differentiate", caller)
			}
			metricSums, metricCounts = make([]*graph.Node, len(metrics)), make([]*graph.Node, len(metrics))
		} else if len(metrics) != len(metricSums) {
			panicf("%s: the loss function returned %d metrics for micro-batch 0 and %d for micro-batch %d", caller, len(metricSums), len(metrics), i)
		}

		target := graph.MulScalar(widen(loss.Sum), norm)
		if ls != nil {
			target = ls(c, target)
		}
		values := make([]*graph.Node, len(r.Variables))
		for j, v := range r.Variables {
			values[j] = v.ValueGraph(g)
		}
		grads := graph.Gradient(target, values...)
		if sums == nil {
			sums = make([]*graph.Node, len(grads))
		}
		for j, grad := range grads {
			sums[j] = addWide(sums[j], graph.ConvertDType(grad, wideDType(r.Variables[j].DType())))
		}
		lossSum, lossCount = addWide(lossSum, loss.Sum), addCount(lossCount, loss.Count)
		for j, m := range metrics {
			metricSums[j], metricCounts[j] = addWide(metricSums[j], m.Sum), addCount(metricCounts[j], m.Count)
		}
		if i < k-1 {
			after = serializeAfter(sums)
		}
	}
	if used := TrainableVariables(ctx, g); len(used) != len(r.Variables) {
		panicf("%s: the loss function used %d trainable variables for micro-batch 0 but %d in all: "+
			"every micro-batch must use the same variables", caller, len(r.Variables), len(used))
	}

	r.Count = lossCount
	r.Loss = safeDiv(lossSum, lossCount)
	for j := range metricSums {
		r.Metrics = append(r.Metrics, safeDiv(metricSums[j], metricCounts[j]))
	}
	denominator := nonZero(graph.MulScalar(lossCount, norm)) // exact: norm is a power of two
	r.Gradients = make([]*graph.Node, len(sums))
	for j, s := range sums {
		r.Gradients[j] = graph.Div(s, graph.ConvertDType(denominator, s.DType()))
	}
	return r
}

// TrainableVariables lists the trainable variables g uses (graph.VariableRole's trainable weights:
// not frozen weights, not optimizer state), in context order: the order of
// context.BuildTrainableVariablesGradientsGraph and of optimizers' UpdateGraphWithGradients.
func TrainableVariables(ctx *context.Context, g *graph.Graph) []*context.Variable {
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		if analysis.VariableRole(ctx, v) == analysis.RoleTrainable && v.InUseByGraph(g) {
			vars = append(vars, v)
		}
	}
	return vars
}

// addWide returns total + x with x widened (see wideDType); a nil total starts the sum.
func addWide(total, x *graph.Node) *graph.Node {
	x = widen(x)
	if total == nil {
		return x
	}
	if total.DType() != x.DType() {
		x = graph.ConvertDType(x, total.DType())
	}
	return graph.Add(total, x)
}

// addCount returns total + count in float32; a nil total starts the sum.
func addCount(total, count *graph.Node) *graph.Node {
	if count.DType() != dtypes.Float32 {
		count = graph.ConvertDType(count, dtypes.Float32)
	}
	if total == nil {
		return count
	}
	return graph.Add(total, count)
}
