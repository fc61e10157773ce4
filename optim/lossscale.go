package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/mixed"
)

const (
	// DefaultScope is the absolute context scope of the chain's own state: LossScale's
	// skipped-steps counter, MultiSteps' accumulators (under "multisteps"), the last finite loss.
	DefaultScope = "/optim"
	// SkippedStepsVariable counts, in DefaultScope, the steps (or, after MultiSteps, the windows)
	// LossScale skipped because their gradients were not finite (int64 scalar).
	SkippedStepsVariable = "skipped_steps"
)

// Metric names of LossScaleMetrics.
const (
	// MetricLossScale is the loss scale the next step will use.
	MetricLossScale = "loss_scale"
	// MetricSkippedSteps is the number of steps skipped because their gradients were not finite.
	MetricSkippedSteps = "skipped_steps"
)

// lossScale is the LossScale link.
type lossScale struct{ ls mixed.LossScale }

// LossScale multiplies the loss by ls before differentiation and, where it stands in the chain,
// divides the gradients by the scale in float32, checks that they are all finite and runs the rest
// of the chain only if they are: on a non-finite step every variable the rest of the chain changes
// (parameters, Adam's moments and step, the global step, MultiSteps' accumulators) and every
// variable changed under /optimizers (learning-rate schedules) keeps its value from before the
// step, bit for bit. Then ls adjusts (a dynamic scale is lowered) and the skip is counted
// (SkippedStepsVariable). mixed.NoOpLossScale{} (or nil) only skips non-finite steps, like
// optax.apply_if_finite. Finite(ctx, g) exposes the check to the rest of the step.
//
// Variables changed outside the chain (batch-norm statistics, your metrics) are not rolled back:
// gate them with Finite and Rollback.
func LossScale(ls mixed.LossScale) Transform {
	if ls == nil {
		ls = mixed.NoOpLossScale{}
	}
	return &lossScale{ls: ls}
}

func (*lossScale) kind() kind { return kindLossScale }

func (l *lossScale) String() string { return fmt.Sprintf("LossScale(%s)", describeScale(l.ls)) }

// describeScale names ls in the chain's description: "none" for the no-op scale (the link then
// only skips non-finite steps).
func describeScale(ls mixed.LossScale) string {
	if _, ok := ls.(mixed.NoOpLossScale); ok {
		return "none"
	}
	return mixed.DescribeLossScale(ls)
}

func (l *lossScale) Apply(u Update, next func(Update)) {
	g := u.Graph
	u.Gradients = l.ls.Unscale(u.Ctx, u.Gradients)
	finite := mixed.AllFinite(g, u.Gradients...)
	recordFinite(u.Ctx, g, finite)
	Rollback(u.Ctx, g, finite, []string{OptimizersScope}, nil, func() { next(u) })
	l.adjust(u.Ctx, g, finite)
}

// adjust sets the loss scale for the next step and counts the step as skipped when it is not
// finite.
func (l *lossScale) adjust(ctx *context.Context, g *graph.Graph, finite *graph.Node) {
	l.ls.Adjust(ctx, finite)
	skipped := skippedVariable(ctx)
	notFinite := graph.ConvertDType(graph.LogicalNot(finite), dtypes.Int64)
	skipped.SetValueGraph(graph.Add(skipped.ValueGraph(g), notFinite))
}

func skippedVariable(ctx *context.Context) *context.Variable {
	return ctx.Checked(false).InAbsPath(DefaultScope).VariableWithValue(SkippedStepsVariable, int64(0)).SetTrainable(false)
}

// Clear deletes the loss scale's state (when it has a Clear method, as mixed.DynamicLossScale
// does) and the skipped-steps counter.
func (l *lossScale) Clear(ctx *context.Context) error {
	if c, ok := l.ls.(interface{ Clear(*context.Context) error }); ok {
		if err := c.Clear(ctx); err != nil {
			return err
		}
	}
	return ctx.DeleteVariable(DefaultScope, SkippedStepsVariable)
}

// LossScaleMetrics returns, by name (MetricLossScale, MetricSkippedSteps), float64 scalar nodes
// with the loss scale for the next step and the number of skipped steps so far; nil when the chain
// has no LossScale. Call it after the chain ran in g.
func (c *Chain) LossScaleMetrics(ctx *context.Context, g *graph.Graph) map[string]*graph.Node {
	if c.scale == nil {
		return nil
	}
	return map[string]*graph.Node{
		MetricLossScale:    graph.ConvertDType(c.scale.ls.Value(ctx, g), dtypes.Float64),
		MetricSkippedSteps: graph.ConvertDType(skippedVariable(ctx).ValueGraph(g), dtypes.Float64),
	}
}

// Stats are the chain's loss-scale counters as stored in a context between steps.
type Stats struct {
	// LossScale is the scale the next step will use (1 without a LossScale link; NaN for a
	// mixed.LossScale type this package cannot read on the host).
	LossScale float64
	// SkippedSteps is the number of steps skipped because their gradients were not finite.
	SkippedSteps int64
}

// Stats reads the loss scale and the skipped-steps counter from ctx, on the host.
func (c *Chain) Stats(ctx *context.Context) (Stats, error) {
	s := Stats{LossScale: 1}
	if c.scale == nil {
		return s, nil
	}
	switch ls := c.scale.ls.(type) {
	case mixed.StaticLossScale:
		s.LossScale = float64(ls)
	case *mixed.DynamicLossScale:
		v, err := ls.Current(ctx)
		if err != nil {
			return s, err
		}
		s.LossScale = v
	case mixed.NoOpLossScale:
	default:
		s.LossScale = math.NaN()
	}
	n, err := readScalar[int64](ctx, DefaultScope, SkippedStepsVariable)
	s.SkippedSteps = n
	return s, err
}

// readScalar reads a scalar variable on the host; a missing variable reads as zero.
func readScalar[T int64 | float32](ctx *context.Context, scope, name string) (T, error) {
	var zero T
	v := ctx.GetVariableByScopeAndName(scope, name)
	if v == nil {
		return zero, nil
	}
	t, err := v.Value()
	if err != nil {
		return zero, fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
	}
	x, ok := t.Value().(T)
	if !ok {
		return zero, fmt.Errorf("variable %s holds %s, want a %T scalar", v.ScopeAndName(), t.Shape(), zero)
	}
	return x, nil
}
