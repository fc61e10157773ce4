package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/analysis"
)

// GradientsOptimizer is an optimizer that applies gradients computed elsewhere, as GoMLX's Adam,
// AdamW, RMSProp and SGD do: the method set of GoMLX's train.OptimizeWithGradients.
type GradientsOptimizer interface {
	optimizers.Interface
	gomlxtrain.OptimizeWithGradients
}

// gradientsOf differentiates the scalar loss with respect to the trainable variables, for an
// optimizer's UpdateGraph; name names the optimizer in the panic.
func gradientsOf(ctx *context.Context, loss *graph.Node, name string) []*graph.Node {
	if !loss.IsScalar() {
		panicf("%s: the loss must be a scalar, got shape %s", name, loss.Shape())
	}
	return ctx.BuildTrainableVariablesGradientsGraph(loss)
}

// startUpdate begins an optimizer's update in the graph of grads, as GoMLX's Adam does: it returns
// the learning rate (GoMLX's float32 learning-rate variable, which schedules set; created with lr,
// or when lr is negative with the context's "learning_rate" or 0.001) and the optimizer's update
// count including this one (int64, 1 at the first), kept under the absolute scope; it also
// increments the context's global step.
func startUpdate(ctx *context.Context, grads []*graph.Node, name, scope string, lr float64) (g *graph.Graph, learningRate, count *graph.Node) {
	if len(grads) == 0 {
		panicf("%s: no gradients: the graph uses no trainable variable", name)
	}
	g = grads[0].Graph()
	learningRate, count = countUpdate(ctx, g, scope, lr)
	return g, learningRate, count
}

// countUpdate is startUpdate in g: the learning rate and the update count, the global step
// incremented.
func countUpdate(ctx *context.Context, g *graph.Graph, scope string, lr float64) (learningRate, count *graph.Node) {
	if lr < 0 {
		lr = context.GetParamOr(ctx, optimizers.ParamLearningRate, optimizers.AdamDefaultLearningRate)
	}
	learningRate = optimizers.LearningRateVar(ctx, dtypes.Float32, lr).ValueGraph(g)
	_ = optimizers.IncrementGlobalStepGraph(ctx, g, dtypes.Float32)
	count = optimizers.IncrementGlobalStepGraph(ctx.InAbsPath(context.ScopeSeparator+scope), g, dtypes.Int64)
	return learningRate, count
}

// eachTrainable calls update with every trainable variable g uses (graph.VariableRole's trainable
// weights: frozen weights are left as they are), in context order, and its gradient from grads
// (one per variable, as ctx.BuildTrainableVariablesGradientsGraph returns them); name names the
// optimizer when the counts differ.
func eachTrainable(ctx *context.Context, g *graph.Graph, grads []*graph.Node, name string, update func(v *context.Variable, grad *graph.Node)) {
	i := 0
	for v := range ctx.IterVariables() {
		if analysis.VariableRole(ctx, v) != analysis.RoleTrainable || !v.InUseByGraph(g) {
			continue
		}
		if i >= len(grads) {
			panicf("%s: %d gradients for more trainable variables (at %s)", name, len(grads), v.ScopeAndName())
		}
		update(v, grads[i])
		i++
	}
	if i != len(grads) {
		panicf("%s: %d gradients for %d trainable variables", name, len(grads), i)
	}
}

// apply is the optimizer link.
type apply struct {
	opt optimizers.Interface
}

// Apply ends a chain with a GoMLX optimizer (Adam, SGD, RMSProp, ...), used unchanged: it applies
// the gradients that reach it with UpdateGraphWithGradients. An optimizer without that method is
// an error at NewChain.
func Apply(opt optimizers.Interface) Transform { return apply{opt: opt} }

func (apply) kind() kind { return kindOptimizer }

func (a apply) String() string { return fmt.Sprintf("Apply(%T)", a.opt) }

func (a apply) Apply(u Update, _ func(Update)) {
	a.opt.(GradientsOptimizer).UpdateGraphWithGradients(u.Ctx, u.Gradients, u.LossDType)
}

// Clear deletes the optimizer's variables.
func (a apply) Clear(ctx *context.Context) error { return a.opt.Clear(ctx) }

func (a apply) check() error {
	if a.opt == nil {
		return fmt.Errorf("Apply(nil): give a GoMLX optimizer, e.g. optim.Apply(optimizers.Adam().Done())")
	}
	if _, ok := a.opt.(GradientsOptimizer); !ok {
		return fmt.Errorf("%s: optimizer %T cannot apply gradients computed by the chain (it has no UpdateGraphWithGradients method): "+
			"use optimizers.Adam(), optimizers.StochasticGradientDescent() or optimizers.RMSProp()", a, a.opt)
	}
	return nil
}

// microBatches is the MicroBatches link.
type microBatches struct{ k int }

// MicroBatches makes Chain.Step split every input along axis 0 into k micro-batches and compute
// the batch's gradients over them in the step's graph, one micro-batch's activations alive at a
// time (accum.Gradients): the whole batch's gradients exactly, with a fraction of the activation
// memory. It computes the gradients the other links transform, so it comes first. k < 1 is an
// error at NewChain.
func MicroBatches(k int) Transform { return microBatches{k: k} }

func (microBatches) kind() kind { return kindMicroBatches }

func (m microBatches) String() string { return fmt.Sprintf("MicroBatches(%d)", m.k) }

// Apply passes the gradients on: Chain.Step computed them over the micro-batches already.
func (microBatches) Apply(u Update, next func(Update)) { next(u) }

// clip is the ClipByGlobalNorm link.
type clip struct{ maxNorm float64 }

// ClipByGlobalNorm scales all gradients by min(1, maxNorm / ‖g‖), ‖g‖ the L2 norm of all of them
// together, computed in float32 (optax.clip_by_global_norm). It must see unscaled gradients, so it
// comes after LossScale. maxNorm must be positive and finite (checked at NewChain).
func ClipByGlobalNorm(maxNorm float64) Transform { return clip{maxNorm: maxNorm} }

func (clip) kind() kind { return kindClip }

func (c clip) String() string { return fmt.Sprintf("ClipByGlobalNorm(%g)", c.maxNorm) }

func (c clip) Apply(u Update, next func(Update)) {
	var squares *graph.Node
	for _, x := range u.Gradients {
		s := graph.ReduceAllSum(graph.Square(graph.ConvertDType(x, dtypes.Float32)))
		if squares == nil {
			squares = s
		} else {
			squares = graph.Add(squares, s)
		}
	}
	if squares == nil {
		next(u)
		return
	}
	factor := clipFactor(squares, c.maxNorm)
	clipped := make([]*graph.Node, len(u.Gradients))
	for i, x := range u.Gradients {
		clipped[i] = graph.Mul(x, graph.ConvertDType(factor, x.DType()))
	}
	u.Gradients = clipped
	next(u)
}

// clipFactor is min(1, maxNorm/√squares) for the float32 sum of the squares of every gradient.
func clipFactor(squares *graph.Node, maxNorm float64) *graph.Node {
	g := squares.Graph()
	norm := graph.Sqrt(squares)
	return graph.Min(graph.ScalarOne(g, dtypes.Float32), graph.Div(graph.Scalar(g, dtypes.Float32, maxNorm), norm))
}

func (m microBatches) check() error {
	if m.k < 1 {
		return fmt.Errorf("%s: the number of micro-batches must be at least 1", m)
	}
	return nil
}

func (c clip) check() error {
	if !(c.maxNorm > 0) || math.IsInf(c.maxNorm, 0) {
		return fmt.Errorf("%s: the maximum norm must be positive and finite", c)
	}
	return nil
}

func (m multiSteps) check() error {
	if m.every < 1 {
		return fmt.Errorf("%s: the number of steps per update must be at least 1", m)
	}
	return nil
}
