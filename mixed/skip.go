package mixed

import (
	"fmt"
	"math"
	"strings"

	gomlxtrain "github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// GradientsOptimizer is an optimizer that can also apply gradients computed elsewhere: GoMLX's
// Adam, AdamW, RMSProp and SGD are. It has the method set of GoMLX's train.OptimizeWithGradients.
type GradientsOptimizer interface {
	optimizers.Interface
	// UpdateGraphWithGradients applies grads, one per trainable variable used in the graph, in
	// context order; lossDType is the dtype the optimizer computes in by default.
	gomlxtrain.OptimizeWithGradients
}

// Metric names of Optimizer.Metrics.
const (
	// MetricLossScale is the loss scale the next step will use.
	MetricLossScale = "loss_scale"
	// MetricSkippedSteps is the number of steps skipped because their gradients were not finite.
	MetricSkippedSteps = "skipped_steps"
)

const (
	// DefaultOptimizerScope is the absolute context scope of the Optimizer's own variables.
	DefaultOptimizerScope = "/mixed"
	// SkippedStepsVariable counts the skipped steps (int64 scalar) in the Optimizer's scope.
	SkippedStepsVariable = "skipped_steps"
)

// Optimizer wraps a GoMLX optimizer with loss scaling and an atomic skip of non-finite steps, the
// way optax wraps a transformation (optax.apply_if_finite) instead of growing flags inside it.
// Create it with WithLossScale. It implements optimizers.Interface, so train.Trainer and
// context.Exec use it like any optimizer.
//
// A step differentiates the scaled loss, unscales the gradients in float32, checks that they are
// all finite and calls the inner optimizer. Then, on a non-finite step, every variable the inner
// optimizer changed in the graph (parameters, Adam's moments, global_step, Adam's own step)
// and every variable changed in a guarded scope ("/optimizers" by default: GoMLX's learning rate
// and schedules such as cosineschedule, which run in the model function) gets its value from
// before the step back, bit for bit: value = Where(finite, new, old). The loss scale is then
// adjusted (lowered) and the skip counted. Variables changed elsewhere (e.g. batch-norm
// statistics, metrics) are not rolled back; add their scopes with Guard.
//
// It does not implement UpdateGraphWithGradients on purpose: GoMLX's Trainer.AccumulateGradients
// would pass it unscaled gradients. Callers that compute gradients themselves (e.g. in-graph
// micro-batch accumulation) differentiate LossScale().Scale(ctx, loss) and call
// ApplyScaledGradients.
type Optimizer struct {
	inner   GradientsOptimizer
	scale   LossScale
	scope   string
	guarded []string
}

// WithLossScale wraps inner (which must also implement GradientsOptimizer, as GoMLX's Adam and SGD
// do) with the loss scale ls; a nil ls is NoOpLossScale (skip non-finite steps only). It panics
// when inner cannot apply gradients.
func WithLossScale(inner optimizers.Interface, ls LossScale) *Optimizer {
	withGrads, ok := inner.(GradientsOptimizer)
	if !ok {
		panicf("mixed.WithLossScale: optimizer %T has no UpdateGraphWithGradients method; use one that does "+
			"(optimizers.Adam(), optimizers.StochasticGradientDescent(), optimizers.RMSProp())", inner)
	}
	if ls == nil {
		ls = NoOpLossScale{}
	}
	return &Optimizer{inner: withGrads, scale: ls, scope: DefaultOptimizerScope,
		guarded: []string{context.ScopeSeparator + optimizers.Scope}}
}

// Scope sets the absolute context scope of the skipped-steps counter (default
// DefaultOptimizerScope).
func (o *Optimizer) Scope(scope string) *Optimizer {
	if !strings.HasPrefix(scope, context.ScopeSeparator) {
		panicf("mixed.Optimizer.Scope(%q): the scope must be absolute (start with %q)", scope, context.ScopeSeparator)
	}
	o.scope = scope
	return o
}

// Guard adds absolute scopes whose variables, when changed in the step's graph before or during
// the update, are rolled back on a non-finite step too. "/optimizers" is always guarded.
func (o *Optimizer) Guard(scopes ...string) *Optimizer {
	for _, s := range scopes {
		if !strings.HasPrefix(s, context.ScopeSeparator) {
			panicf("mixed.Optimizer.Guard(%q): the scope must be absolute (start with %q)", s, context.ScopeSeparator)
		}
		o.guarded = append(o.guarded, strings.TrimSuffix(s, context.ScopeSeparator))
	}
	return o
}

// LossScale returns the wrapper's loss scale.
func (o *Optimizer) LossScale() LossScale { return o.scale }

// Inner returns the wrapped optimizer.
func (o *Optimizer) Inner() optimizers.Interface { return o.inner }

// UpdateGraph builds one training step for the scalar loss: it differentiates the scaled loss with
// respect to the trainable variables used in g and calls ApplyScaledGradients. It implements
// optimizers.Interface.
func (o *Optimizer) UpdateGraph(ctx *context.Context, g *graph.Graph, loss *graph.Node) {
	if !loss.IsScalar() {
		panicf("mixed.Optimizer.UpdateGraph: the loss must be a scalar, got shape %s", loss.Shape())
	}
	grads := ctx.BuildTrainableVariablesGradientsGraph(o.scale.Scale(ctx, loss))
	o.ApplyScaledGradients(ctx, g, grads, loss.DType())
}

// ApplyScaledGradients applies gradients of the scaled loss (LossScale().Scale(ctx, loss)), one
// per trainable variable used in g in context iteration order, as UpdateGraph does after
// differentiating: unscale in float32, check finiteness, update through the inner optimizer, roll
// every change back if a gradient is not finite, adjust the loss scale and count a skip. The
// inner optimizer computes in lossDType, raised to float32 when it is a 16-bit (or invalid) dtype.
//
// It returns the scalar boolean node that says whether the step was applied.
func (o *Optimizer) ApplyScaledGradients(ctx *context.Context, g *graph.Graph, scaledGrads []*graph.Node, lossDType dtypes.DType) (finite *graph.Node) {
	grads := o.scale.Unscale(ctx, scaledGrads)
	finite = AllFinite(g, grads...)
	if lossDType != dtypes.Float64 {
		lossDType = dtypes.Float32
	}

	// Each variable's value node before the update: a variable whose node changes during the
	// update, or that the update starts using (moments created on the first step), was changed by
	// the inner optimizer.
	before := map[*context.Variable]*graph.Node{}
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) {
			before[v] = v.ValueGraph(g)
		}
	}
	o.inner.UpdateGraphWithGradients(ctx, grads, lossDType)
	for v := range ctx.IterVariables() {
		if !v.ChangedInGraph(g) {
			continue
		}
		updated := v.ValueGraph(g)
		previous, used := before[v]
		if used && updated == previous && !o.isGuarded(v) {
			continue
		}
		old := g.GetParameterByName(v.ParameterName())
		if old == nil {
			panicf("mixed.Optimizer: variable %s changed in graph %q but has no parameter node", v.ScopeAndName(), g.Name())
		}
		v.SetValueGraph(graph.Where(finite, updated, old))
	}

	o.scale.Adjust(ctx, finite)
	skipped := o.skippedVariable(ctx)
	count := skipped.ValueGraph(g)
	skipped.SetValueGraph(graph.Add(count, graph.Where(finite, graph.ScalarZero(g, dtypes.Int64), graph.ScalarOne(g, dtypes.Int64))))
	return finite
}

// isGuarded reports whether v lives in one of the guarded scopes.
func (o *Optimizer) isGuarded(v *context.Variable) bool {
	for _, s := range o.guarded {
		if v.Scope() == s || strings.HasPrefix(v.Scope(), s+context.ScopeSeparator) {
			return true
		}
	}
	return false
}

func (o *Optimizer) skippedVariable(ctx *context.Context) *context.Variable {
	return ctx.Checked(false).InAbsPath(o.scope).VariableWithValue(SkippedStepsVariable, int64(0)).SetTrainable(false)
}

// Metrics returns, by name (MetricLossScale, MetricSkippedSteps), float64 scalar nodes with the
// loss scale for the next step and the number of skipped steps so far. Call it after UpdateGraph
// in the same graph; the nodes are new ops, safe to return as graph outputs (e.g. wrapped in
// metrics.NewBaseMetric by a trainer).
func (o *Optimizer) Metrics(ctx *context.Context, g *graph.Graph) map[string]*graph.Node {
	return map[string]*graph.Node{
		MetricLossScale:    graph.ConvertDType(o.scale.Value(ctx, g), dtypes.Float64),
		MetricSkippedSteps: graph.ConvertDType(o.skippedVariable(ctx).ValueGraph(g), dtypes.Float64),
	}
}

// Stats are the wrapper's counters as stored in a context between steps.
type Stats struct {
	// LossScale is the scale the next step will use (NaN for a LossScale type this package does not
	// know how to read on the host).
	LossScale float64
	// SkippedSteps is the number of steps skipped because their gradients were not finite.
	SkippedSteps int64
}

// Stats reads the loss scale and the skipped-steps counter from ctx, on the host.
func (o *Optimizer) Stats(ctx *context.Context) (Stats, error) {
	s := Stats{LossScale: math.NaN()}
	switch ls := o.scale.(type) {
	case NoOpLossScale:
		s.LossScale = 1
	case StaticLossScale:
		s.LossScale = float64(ls)
	case *DynamicLossScale:
		v, err := ls.Current(ctx)
		if err != nil {
			return s, err
		}
		s.LossScale = v
	}
	if v := ctx.GetVariableByScopeAndName(o.scope, SkippedStepsVariable); v != nil {
		t, err := v.Value()
		if err != nil {
			return s, fmt.Errorf("skipped-steps variable %s: %w", v.ScopeAndName(), err)
		}
		n, ok := t.Value().(int64)
		if !ok {
			return s, fmt.Errorf("skipped-steps variable %s holds %s, want an int64 scalar", v.ScopeAndName(), t.Shape())
		}
		s.SkippedSteps = n
	}
	return s, nil
}

// Clear deletes the inner optimizer's variables, the loss scale's state (when it has a Clear
// method, as DynamicLossScale does) and the skipped-steps counter. It implements
// optimizers.Interface.
func (o *Optimizer) Clear(ctx *context.Context) error {
	if err := o.inner.Clear(ctx); err != nil {
		return err
	}
	if c, ok := o.scale.(interface{ Clear(*context.Context) error }); ok {
		if err := c.Clear(ctx); err != nil {
			return err
		}
	}
	return ctx.DeleteVariable(o.scope, SkippedStepsVariable)
}
