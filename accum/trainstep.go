package accum

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// StepFn is a train step as context.NewExec and graph.ContextProgram (onegpu's graph package) take
// it: the inputs are the batch, the outputs the loss and metrics; variable updates are returned by
// the executor.
type StepFn = func(ctx *context.Context, inputs []*graph.Node) []*graph.Node

// ScaledGradientsApplier applies gradients of a scaled loss: it unscales them, checks them and
// updates the variables (or skips the step) and the loss scale. onegpu's mixed.Optimizer is one.
type ScaledGradientsApplier interface {
	ApplyScaledGradients(ctx *context.Context, g *graph.Graph, scaledGrads []*graph.Node, lossDType dtypes.DType) (finite *graph.Node)
}

// TrainStep returns a train step that splits its inputs into microBatches micro-batches, computes
// the batch's loss, metrics and gradients with Gradients, and applies the gradients with opt. The
// step returns the loss followed by the metrics (float32 scalars).
//
// opt is an optimizer that applies gradients (GoMLX's Adam, SGD, RMSProp) or a *MultiSteps, which
// then accumulates the step's gradients across calls too (with its loss scale, if it has one).
// TrainStep returns an error for microBatches < 1 or another optimizer; a batch that does not split
// makes the step panic while its graph is built (check it first with CheckSplit).
//
//	step, err := accum.TrainStep(optimizers.Adam().Done(), 4, accum.MeanLoss(loss))
//	exec, err := context.NewExec(backend, ctx, step)
func TrainStep(opt optimizers.Interface, microBatches int, lossFn LossFn) (StepFn, error) {
	if err := checkStep(microBatches, lossFn); err != nil {
		return nil, err
	}
	if ms, ok := opt.(*MultiSteps); ok {
		return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
			var r *Result
			if ms.scale != nil {
				r = ScaledGradients(ctx, microBatches, inputs, lossFn, ms.scale)
			} else {
				r = Gradients(ctx, microBatches, inputs, lossFn)
			}
			ms.ApplyResult(ctx, r.Loss.Graph(), r)
			return r.Outputs()
		}, nil
	}
	withGrads, ok := opt.(GradientsOptimizer)
	if !ok {
		return nil, fmt.Errorf("optimizer %T cannot apply accumulated gradients (it has no UpdateGraphWithGradients method): "+
			"use optimizers.Adam(), optimizers.StochasticGradientDescent(), optimizers.RMSProp() or an accum.MultiSteps; "+
			"for a loss-scaled optimizer use ScaledTrainStep", opt)
	}
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		r := Gradients(ctx, microBatches, inputs, lossFn)
		withGrads.UpdateGraphWithGradients(ctx, r.Gradients, r.Loss.DType())
		return r.Outputs()
	}, nil
}

// ScaledTrainStep is TrainStep with loss scaling: each micro-batch's loss is scaled by ls (see
// ScaledGradients) and opt unscales, checks and applies the batch's gradients once. With onegpu's
// mixed package:
//
//	opt := mixed.WithLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
//	step, err := accum.ScaledTrainStep(opt, opt.LossScale(), 4, lossFn)
func ScaledTrainStep(opt ScaledGradientsApplier, ls LossScale, microBatches int, lossFn LossFn) (StepFn, error) {
	if err := checkStep(microBatches, lossFn); err != nil {
		return nil, err
	}
	if opt == nil || ls == nil {
		return nil, fmt.Errorf("a loss-scaled train step needs an optimizer and a loss scale, got optimizer %v and loss scale %v", opt, ls)
	}
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		r := ScaledGradients(ctx, microBatches, inputs, lossFn, ls)
		opt.ApplyScaledGradients(ctx, r.Loss.Graph(), r.Gradients, r.Loss.DType())
		return r.Outputs()
	}, nil
}

func checkStep(microBatches int, lossFn LossFn) error {
	if microBatches < 1 {
		return fmt.Errorf("%d micro-batches: the number of micro-batches must be at least 1", microBatches)
	}
	if lossFn == nil {
		return fmt.Errorf("no loss function")
	}
	return nil
}
