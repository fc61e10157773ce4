package optim

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/mixed"
)

// The chain split across programs. A host that updates a model a set of variables at a time
// (optim/hostengine: one program, or one loop, per block) runs the chain's links in two parts: the
// step-wide part, which needs every gradient of the step (the loss scale's finite check and its
// adjustment, the global norm of ClipByGlobalNorm), once per step from each variable's partial
// results; and the optimizer, per set of variables, on gradients divided by the loss scale and
// multiplied by the clip factor, exactly as Chain.ApplyGradients would hand them to it. Only the
// links the trainer builds split this way: MicroBatches, LossScale, ClipByGlobalNorm and the
// optimizer (Split says which chain cannot).

// Split checks that the chain runs split across programs: its links are MicroBatches, at most one
// LossScale, at most one ClipByGlobalNorm after it, and the optimizer. MultiSteps and a Transform
// of your own need every gradient in one graph: an error names them.
func (c *Chain) Split() error {
	clips := 0
	for _, l := range c.links {
		switch kindOf(l) {
		case kindMicroBatches, kindLossScale, kindOptimizer:
		case kindClip:
			if clips++; clips > 1 {
				return fmt.Errorf("the chain %s has two clips: a split update applies one global-norm clip", c)
			}
		default:
			return fmt.Errorf("the chain %s has %s, which needs every gradient in one program: a split update (the host engine) runs "+
				"MicroBatches, LossScale, ClipByGlobalNorm and the optimizer only", c, l)
		}
	}
	return nil
}

// Optimizer is the optimizer the chain ends with (its Apply link's).
func (c *Chain) Optimizer() GradientsOptimizer {
	return c.links[len(c.links)-1].(apply).opt.(GradientsOptimizer)
}

// ChecksFinite reports whether the chain has a LossScale link, whose step is skipped (every
// variable left as it was) when a gradient is not finite.
func (c *Chain) ChecksFinite() bool { return c.scale != nil }

// ClipNorm is the maximum global norm of the chain's ClipByGlobalNorm link, 0 without one.
func (c *Chain) ClipNorm() float64 {
	for _, l := range c.links {
		if cl, ok := l.(clip); ok {
			return cl.maxNorm
		}
	}
	return 0
}

// LossScaleValue is the scale the step's gradients are divided by (a float32 scalar in g, read
// before StepWide adjusts it): the LossScale link's current scale, 1 without one.
func (c *Chain) LossScaleValue(ctx *context.Context, g *graph.Graph) *graph.Node {
	if c.scale == nil {
		return graph.ScalarOne(g, dtypes.Float32)
	}
	return c.scale.ls.Value(ctx, g)
}

// StepWide builds, in g, the chain's step-wide part from the step's partial results: finite, a
// boolean scalar, true when every gradient divided by LossScaleValue is finite; squares, a float32
// scalar, the sum of their squares (each variable's sum of squares added in context order, as
// ClipByGlobalNorm adds them). It records finite as the step's flag (Finite), adjusts the loss
// scale and counts a skipped step, as the LossScale link does, and returns the factor the
// gradients are multiplied by: ClipByGlobalNorm's min(1, maxNorm/√squares), 1 without a clip. The
// caller applies the optimizer only when finite (ChecksFinite) is true.
func (c *Chain) StepWide(ctx *context.Context, g *graph.Graph, finite, squares *graph.Node) *graph.Node {
	if c.scale != nil {
		recordFinite(ctx, g, finite)
		c.scale.adjust(ctx, g, finite)
	}
	if maxNorm := c.ClipNorm(); maxNorm > 0 {
		return clipFactor(squares, maxNorm)
	}
	return graph.ScalarOne(g, dtypes.Float32)
}

// Unscale is a gradient of a chain split across programs as the optimizer sees it before the
// clip, in a graph: x (a sum over micro-batches of gradients of the loss times the loss scale)
// divided by denominator, then by lossScale (float32 scalars), each rounded in x's dtype, as
// GradientScaling.Of divides an element.
func Unscale(x, denominator, lossScale *graph.Node) *graph.Node {
	x = graph.Div(x, graph.ConvertDType(denominator, x.DType()))
	return graph.Div(x, graph.ConvertDType(lossScale, x.DType()))
}

// GraphPartials is GradientScaling.Partials in a graph, for gradients that stay on the device that
// computed them: whether every element of grads, unscaled (Unscale by denominator and lossScale),
// is finite, and each gradient's float32 sum of the squares of those values, as ClipByGlobalNorm
// sums them in one program.
func GraphPartials(denominator, lossScale *graph.Node, grads []*graph.Node) (finite *graph.Node, squares []*graph.Node) {
	unscaled := make([]*graph.Node, len(grads))
	for i, x := range grads {
		unscaled[i] = Unscale(x, denominator, lossScale)
		squares = append(squares, graph.ReduceAllSum(graph.Square(graph.ConvertDType(unscaled[i], dtypes.Float32))))
	}
	finite = mixed.AllFinite(denominator.Graph(), unscaled...)
	if finite == nil { // no floating-point gradient
		finite = graph.Const(denominator.Graph(), true)
	}
	return finite, squares
}
