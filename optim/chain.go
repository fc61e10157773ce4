package optim

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/panics"
)

// Update is what a Transform sees of one step: the gradients flowing down the chain and what they
// belong to.
type Update struct {
	Ctx   *context.Context
	Graph *graph.Graph
	// Variables are the trainable variables the step's graph uses, in context order (the order of
	// optimizers' UpdateGraphWithGradients).
	Variables []*context.Variable
	// Gradients are one per variable: float32 (float64 for float64 variables), multiplied by the
	// loss scale until a LossScale link unscales them.
	Gradients []*graph.Node
	// Count is what the loss averages over (tokens or examples; nil counts the step as 1).
	// MultiSteps weighs each call by it.
	Count *graph.Node
	// LossDType is the dtype the optimizer computes in: float32, or float64 for a float64 loss.
	LossDType dtypes.DType
}

// Transform is one link of a Chain: it processes u's gradients and hands the result to next,
// which runs the rest of the chain. A link may call next at most once; a link that gates the rest
// (LossScale, MultiSteps) calls it with Rollback.
type Transform interface {
	Apply(u Update, next func(Update))
	// String names the link in errors, e.g. "MultiSteps(4)".
	String() string
}

// kind orders the links onegpu knows; a user's own Transform is a plain gradient transformation.
type kind int

const (
	kindTransform kind = iota
	kindMicroBatches
	kindLossScale
	kindMultiSteps
	kindClip
	kindOptimizer
)

type kinded interface{ kind() kind }

func kindOf(t Transform) kind {
	if k, ok := t.(kinded); ok {
		return k.kind()
	}
	return kindTransform
}

// Chain is a sequence of gradient transformations ending in an optimizer, optax.chain's
// counterpart: gradients flow through the links in order, and the last link applies them.
// It implements optimizers.Interface, so GoMLX's train.Trainer and context.Exec use it like any
// optimizer; Step computes the gradients itself (over micro-batches, loss-scaled) and runs the chain.
type Chain struct {
	links        []Transform
	microBatches int
	scale        *lossScale
}

// NewChain checks that links can work together and returns their chain. The rules, each reported
// as an error that names both links when broken:
//   - the last link is the optimizer (Apply), and there is exactly one;
//   - MicroBatches, which computes the gradients, comes first;
//   - LossScale comes before ClipByGlobalNorm (a clip must see unscaled gradients);
//   - LossScale, MicroBatches and MultiSteps appear at most once each.
//
// LossScale and MultiSteps work in either order: LossScale before MultiSteps skips one non-finite
// call and keeps accumulating; MultiSteps before LossScale checks the window's sum once, and a
// non-finite call drops the whole window (the scale stays the same within a window).
func NewChain(links ...Transform) (*Chain, error) {
	c := &Chain{microBatches: 1}
	if len(links) == 0 {
		return nil, fmt.Errorf("an empty chain: end it with the optimizer, e.g. optim.NewChain(optim.Apply(optimizers.Adam().Done()))")
	}
	first := map[kind]Transform{}
	for i, l := range links {
		if l == nil {
			return nil, fmt.Errorf("link #%d of the chain is nil", i)
		}
		if ch, ok := l.(interface{ check() error }); ok {
			if err := ch.check(); err != nil {
				return nil, err
			}
		}
		k := kindOf(l)
		if prev, ok := first[kindOptimizer]; ok {
			return nil, fmt.Errorf("%s after %s: the optimizer applies the gradients, so it comes last and only once", l, prev)
		}
		if prev, ok := first[k]; ok && k != kindTransform && k != kindClip {
			return nil, fmt.Errorf("%s and %s in one chain: use one %s", prev, l, strings.SplitN(l.String(), "(", 2)[0])
		}
		switch k {
		case kindMicroBatches:
			if i > 0 {
				return nil, fmt.Errorf("%s after %s: micro-batches compute the gradients the other links transform, so MicroBatches comes first", l, links[i-1])
			}
			c.microBatches = l.(microBatches).k
		case kindLossScale:
			if clip, ok := first[kindClip]; ok {
				return nil, fmt.Errorf("%s after %s: the clip would see gradients multiplied by the loss scale; put LossScale before the clip", l, clip)
			}
			c.scale = l.(*lossScale)
		}
		if _, ok := first[k]; !ok {
			first[k] = l
		}
		c.links = append(c.links, l)
	}
	if _, ok := first[kindOptimizer]; !ok {
		return nil, fmt.Errorf("the chain %s has no optimizer: end it with optim.Apply(optimizers.Adam().Done()) or another GoMLX optimizer", c)
	}
	return c, nil
}

// String lists the links, e.g. "LossScale(dynamic(...)) -> MultiSteps(4) -> Apply(*optimizers.AdamConfig)".
func (c *Chain) String() string {
	names := make([]string, len(c.links))
	for i, l := range c.links {
		names[i] = l.String()
	}
	return strings.Join(names, " -> ")
}

// MicroBatches returns the number of micro-batches each step's gradients are computed over (1
// without a MicroBatches link).
func (c *Chain) MicroBatches() int { return c.microBatches }

// ScaleLoss returns loss multiplied by the chain's loss scale (float32), or loss itself without a
// LossScale link: differentiate it to feed ApplyGradients with gradients of your own.
func (c *Chain) ScaleLoss(ctx *context.Context, loss *graph.Node) *graph.Node {
	if c.scale == nil {
		return loss
	}
	return c.scale.ls.Scale(ctx, loss)
}

// Step computes the loss, metrics and gradients of inputs with lossFn over the chain's
// micro-batches (loss-scaled if the chain has a LossScale), runs the chain on them and returns the
// batch's result. The step's finite flag is Finite(ctx, g).
func (c *Chain) Step(ctx *context.Context, inputs []*graph.Node, lossFn accum.LossFn) *accum.Result {
	r := c.Gradients(ctx, inputs, lossFn)
	c.run(Update{Ctx: ctx, Graph: r.Loss.Graph(), Variables: r.Variables, Gradients: r.Gradients, Count: r.Count, LossDType: r.Loss.DType()})
	return r
}

// Gradients is the first half of Step: the loss, metrics and gradients of inputs over the chain's
// micro-batches, of the loss multiplied by the chain's loss scale when it has one, without running
// the chain. ApplyGradients, possibly in another graph (e.g. on the host), is the second half.
func (c *Chain) Gradients(ctx *context.Context, inputs []*graph.Node, lossFn accum.LossFn) *accum.Result {
	if c.scale != nil {
		return accum.ScaledGradients(ctx, c.microBatches, inputs, lossFn, c.scale.ls.Scale)
	}
	return accum.Gradients(ctx, c.microBatches, inputs, lossFn)
}

// StepFn returns a train step for context.NewExec and analysis.ContextProgram that calls Step and
// returns the loss followed by the metrics.
func (c *Chain) StepFn(lossFn accum.LossFn) accum.StepFn {
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		return c.Step(ctx, inputs, lossFn).Outputs()
	}
}

// UpdateGraph differentiates the scalar loss (scaled by the chain's loss scale) with respect to the
// trainable variables g uses and runs the chain. It implements optimizers.Interface, so the chain
// plugs into GoMLX's train.Trainer. With a LossScale, the losses the Trainer's metrics read are
// replaced by the last finite step's loss on a skipped step, so moving averages stay finite. It
// panics for a chain with MicroBatches(k > 1), which needs the loss function: use Step.
func (c *Chain) UpdateGraph(ctx *context.Context, g *graph.Graph, loss *graph.Node) {
	if !loss.IsScalar() || !loss.DType().IsFloat() {
		panicf("optim.Chain.UpdateGraph: the loss must be a floating-point scalar, got %s", loss.Shape())
	}
	if c.microBatches > 1 {
		panicf("optim.Chain.UpdateGraph: the chain %s splits the batch into micro-batches, which needs the loss function: "+
			"build the step with Chain.Step or Chain.StepFn", c)
	}
	vars := accum.TrainableVariables(ctx, g)
	if len(vars) == 0 {
		panicf("optim.Chain.UpdateGraph: the loss uses no trainable variables: there is nothing to optimize")
	}
	values := make([]*graph.Node, len(vars))
	for i, v := range vars {
		values[i] = v.ValueGraph(g)
	}
	grads := graph.Gradient(c.ScaleLoss(ctx, loss), values...)
	for i, v := range vars {
		grads[i] = graph.ConvertDType(grads[i], wideDType(v.DType()))
	}
	c.run(Update{Ctx: ctx, Graph: g, Variables: vars, Gradients: grads, LossDType: loss.DType()})
	if c.scale != nil {
		keepTrainerLossesFinite(ctx, g)
	}
}

// ApplyGradients runs the chain on gradients computed by the caller: of ScaleLoss(ctx, loss), one
// per trainable variable g uses, in context order; count is what the loss averages over (nil: 1).
func (c *Chain) ApplyGradients(ctx *context.Context, g *graph.Graph, grads []*graph.Node, count *graph.Node, lossDType dtypes.DType) {
	vars := accum.TrainableVariables(ctx, g)
	if len(vars) != len(grads) {
		panicf("optim.Chain.ApplyGradients: %d gradients for %d trainable variables used in graph %q", len(grads), len(vars), g.Name())
	}
	wide := make([]*graph.Node, len(grads))
	for i, v := range vars {
		wide[i] = graph.ConvertDType(grads[i], wideDType(v.DType()))
	}
	c.run(Update{Ctx: ctx, Graph: g, Variables: vars, Gradients: wide, Count: count, LossDType: lossDType})
}

func (c *Chain) run(u Update) {
	defer analysis.Section(u.Graph, "optimizer")() // for the memory timeline
	if u.LossDType != dtypes.Float64 {
		u.LossDType = dtypes.Float32
	}
	var at func(i int) func(Update)
	at = func(i int) func(Update) {
		if i == len(c.links) {
			return func(Update) { panicf("optim: the chain %s ended without an optimizer", c) }
		}
		called := false
		return func(u Update) {
			if called {
				panicf("optim: link %s called the rest of the chain twice", c.links[max(i-1, 0)])
			}
			called = true
			c.links[i].Apply(u, at(i+1))
		}
	}
	at(0)(u)
}

// Clear deletes the variables of every link that keeps state (the optimizer's, the loss scale's,
// MultiSteps' accumulators and counters). It implements optimizers.Interface.
func (c *Chain) Clear(ctx *context.Context) error {
	for _, l := range c.links {
		if cl, ok := l.(interface{ Clear(*context.Context) error }); ok {
			if err := cl.Clear(ctx); err != nil {
				return fmt.Errorf("clearing %s: %w", l, err)
			}
		}
	}
	return nil
}

var _ optimizers.Interface = (*Chain)(nil)

// wideDType is the dtype gradients are processed in: float64 stays, everything else is float32.
var wideDType = exact.WideDType

// panicf panics with an error, the way GoMLX's graph-building functions report misuse.
var panicf = panics.Panicf
