package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// GradientsOptimizer is an optimizer that applies gradients computed elsewhere, as GoMLX's Adam,
// AdamW, RMSProp and SGD do: the method set of GoMLX's train.OptimizeWithGradients.
type GradientsOptimizer interface {
	optimizers.Interface
	gomlxtrain.OptimizeWithGradients
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
	g := u.Graph
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
	norm := graph.Sqrt(squares)
	factor := graph.Min(graph.ScalarOne(g, dtypes.Float32), graph.Div(graph.Scalar(g, dtypes.Float32, c.maxNorm), norm))
	clipped := make([]*graph.Node, len(u.Gradients))
	for i, x := range u.Gradients {
		clipped[i] = graph.Mul(x, graph.ConvertDType(factor, x.DType()))
	}
	u.Gradients = clipped
	next(u)
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
