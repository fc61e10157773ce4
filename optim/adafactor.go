package optim

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
)

const (
	// AdafactorScope is the absolute scope of Adafactor's second moments, momentum and update counter.
	AdafactorScope = "AdafactorOptimizer"
	// AdafactorMinParameterScale is the smallest parameter scale (rms) an update is multiplied by,
	// optax.scale_by_param_block_rms's min_scale: a parameter that starts at zero still moves.
	AdafactorMinParameterScale = 1e-3
)

// AdafactorConfig configures Adafactor (Shazeer & Stern 2018, "Adafactor: Adaptive Learning
// Rates with Sublinear Memory Cost") as optax.adafactor (optax 0.2.8) computes it, with the
// learning rate taken from GoMLX's learning-rate variable, which onegpu's schedules set every
// step. For each trainable tensor p with gradient g, at the n-th update (n = 1, 2, ...):
//
//	ρ = 1 - (n - decayOffset)^(-decayRate)                 (0 at the first update)
//	factored (the dimensions of axes a and b, the second largest and the largest, are >= minDimSizeToFactor):
//	  r = ρ·r + (1-ρ)·mean_b(g² + ε)                        (optax's v_row: p's shape without axis b)
//	  c = ρ·c + (1-ρ)·mean_a(g² + ε)                        (optax's v_col: p's shape without axis a)
//	  u = g · (r / mean_a(r))^-½ · c^-½                     (r, c broadcast back over b and a)
//	otherwise:
//	  v = ρ·v + (1-ρ)·(g² + ε);  u = g · v^-½
//	u = u / max(1, rms(u) / clippingThreshold)              (clip_by_block_rms)
//	u = u · lr · max(rms(p), 1e-3)                          (multiply_by_parameter_scale)
//	m = β·m + (1-β)·u;  u = m                               (only with Momentum)
//	u = u + weightDecayRate·p                               (only with WeightDecayRate; not times lr)
//	p = p - u
//
// rms is the root mean square over the whole tensor. The state is r and c for factored tensors
// (sizes that add up instead of multiplying: a 1024x4096 matrix keeps 5,120 numbers instead of
// Adam's 8,388,608), v for the others, an update counter, and m with Momentum. It is float32 (float64
// for float64 parameters) whatever the parameters' dtype: optax keeps it in the parameters' dtype,
// which under bfloat16 parameters would round the running averages to 8 bits.
//
// The one departure from optax.adafactor's defaults is the learning rate: optax's default (None)
// applies no learning rate at all, and Adafactor's relative step size (the paper's
// min(1e-2, 1/√n)) is not used; here the update is multiplied by the learning-rate variable, as
// optax.adafactor(learning_rate=schedule) does.
//
// Create it with Adafactor and finish with Done.
type AdafactorConfig struct {
	learningRate       float64
	decayRate          float64
	decayOffset        int
	minDimSizeToFactor int
	epsilon            float64
	clippingThreshold  float64
	parameterScale     bool
	factored           bool
	momentum           float64
	weightDecayRate    float64
}

// Adafactor returns the configuration with optax.adafactor's defaults: decay rate 0.8, decay
// offset 0, factored second moments for tensors whose two largest dimensions are at least 128,
// epsilon 1e-30, update clipping at rms 1, updates multiplied by the parameter's rms, no momentum,
// no weight decay; the learning rate is the context's (see LearningRate).
func Adafactor() *AdafactorConfig {
	return &AdafactorConfig{learningRate: -1, decayRate: 0.8, minDimSizeToFactor: 128, epsilon: 1e-30,
		clippingThreshold: 1, parameterScale: true, factored: true}
}

// LearningRate sets the initial value of the learning-rate variable (GoMLX's
// optimizers.LearningRateVar, which schedules overwrite every step). Negative (the default): the
// context's "learning_rate" parameter or 0.001.
func (c *AdafactorConfig) LearningRate(lr float64) *AdafactorConfig { c.learningRate = lr; return c }

// DecayRate sets the exponent of the second moments' decay schedule, ρ = 1 - n^(-rate)
// (optax's decay_rate, 0.8 by default).
func (c *AdafactorConfig) DecayRate(rate float64) *AdafactorConfig { c.decayRate = rate; return c }

// DecayOffset sets the update number the decay schedule starts from, for fine-tuning: ρ = 1 -
// (n - offset)^(-rate) (optax's decay_offset, 0 by default). The first update must come after it.
func (c *AdafactorConfig) DecayOffset(steps int) *AdafactorConfig { c.decayOffset = steps; return c }

// MinDimSizeToFactor sets how large a tensor's two largest dimensions must both be for its second
// moment to be factored (optax's min_dim_size_to_factor, 128 by default).
func (c *AdafactorConfig) MinDimSizeToFactor(n int) *AdafactorConfig {
	c.minDimSizeToFactor = n
	return c
}

// Epsilon sets the constant added to the squared gradients (optax's eps, 1e-30 by default).
func (c *AdafactorConfig) Epsilon(eps float64) *AdafactorConfig { c.epsilon = eps; return c }

// ClippingThreshold sets the largest rms of a tensor's scaled update before the learning rate
// (optax's clipping_threshold, 1 by default); 0 turns clipping off (optax's None).
func (c *AdafactorConfig) ClippingThreshold(t float64) *AdafactorConfig {
	c.clippingThreshold = t
	return c
}

// MultiplyByParameterScale sets whether updates are multiplied by max(rms(p), 1e-3), so that the
// learning rate is relative to each tensor's scale (optax's multiply_by_parameter_scale, true by
// default).
func (c *AdafactorConfig) MultiplyByParameterScale(on bool) *AdafactorConfig {
	c.parameterScale = on
	return c
}

// Factored sets whether large tensors keep factored second moments (optax's factored, true by
// default); false keeps a full second moment for every tensor.
func (c *AdafactorConfig) Factored(on bool) *AdafactorConfig { c.factored = on; return c }

// Momentum sets the decay of a first moment of the updates (optax's momentum, an exponential
// moving average without debiasing); 0 (the default, optax's None) keeps none, and no state for it.
func (c *AdafactorConfig) Momentum(beta float64) *AdafactorConfig { c.momentum = beta; return c }

// WeightDecayRate sets a decay added to the update as rate·p, after the learning rate, so not
// multiplied by it (optax's weight_decay_rate, applied to every parameter); 0 (the default) turns
// it off.
func (c *AdafactorConfig) WeightDecayRate(rate float64) *AdafactorConfig {
	c.weightDecayRate = rate
	return c
}

// Validate returns an error naming a setting that cannot work.
func (c *AdafactorConfig) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !(c.decayRate >= 0) || !finite(c.decayRate):
		return fmt.Errorf("adafactor: decay rate %g must be a finite number, at least 0 (optax's default is 0.8)", c.decayRate)
	case c.decayOffset < 0:
		return fmt.Errorf("adafactor: decay offset %d cannot be negative", c.decayOffset)
	case c.minDimSizeToFactor < 1:
		return fmt.Errorf("adafactor: minimum dimension to factor %d must be at least 1 (optax's default is 128)", c.minDimSizeToFactor)
	case !(c.epsilon > 0) || !finite(c.epsilon):
		return fmt.Errorf("adafactor: epsilon %g must be positive and finite: a zero gradient would divide by zero (optax's default is 1e-30)", c.epsilon)
	case !(c.clippingThreshold >= 0) || !finite(c.clippingThreshold):
		return fmt.Errorf("adafactor: clipping threshold %g must be positive and finite, or 0 for no clipping", c.clippingThreshold)
	case !(c.momentum >= 0 && c.momentum < 1):
		return fmt.Errorf("adafactor: momentum %g must be in [0, 1) (0: none)", c.momentum)
	case !(c.weightDecayRate >= 0) || !finite(c.weightDecayRate):
		return fmt.Errorf("adafactor: weight decay rate %g must be a finite number, at least 0", c.weightDecayRate)
	}
	return nil
}

// Done returns the optimizer. It panics (GoMLX's convention for graph-building configuration)
// with Validate's message when the configuration cannot work.
func (c *AdafactorConfig) Done() *AdafactorOptimizer {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return &AdafactorOptimizer{config: *c}
}

// AdafactorOptimizer implements optimizers.Interface and UpdateGraphWithGradients (GoMLX's
// train.OptimizeWithGradients), so it goes wherever GoMLX's Adam goes: Apply at the end of a
// Chain (with micro-batches, a loss scale, MultiSteps), or GoMLX's Trainer.
type AdafactorOptimizer struct {
	config AdafactorConfig
}

// FactoredAxes returns the axes a tensor of the given dimensions factors its second moment over
// (optax's rule): a is the second largest dimension's axis and b the largest's (the earlier axis
// first among equal dimensions, as NumPy's argsort orders them); ok is false when the tensor keeps
// a full second moment (rank below 2, a dimension under the minimum, or factoring off).
func (o *AdafactorOptimizer) FactoredAxes(dims []int) (a, b int, ok bool) {
	if !o.config.factored || len(dims) < 2 {
		return 0, 0, false
	}
	axes := make([]int, len(dims))
	for i := range axes {
		axes[i] = i
	}
	slices.SortStableFunc(axes, func(i, j int) int { return dims[i] - dims[j] })
	a, b = axes[len(axes)-2], axes[len(axes)-1]
	if dims[a] < o.config.minDimSizeToFactor {
		return 0, 0, false
	}
	return a, b, true
}

// UpdateGraph differentiates loss with respect to the trainable variables and applies the update.
func (o *AdafactorOptimizer) UpdateGraph(ctx *context.Context, _ *graph.Graph, loss *graph.Node) {
	o.UpdateGraphWithGradients(ctx, gradientsOf(ctx, loss, "optim.Adafactor"), loss.DType())
}

// UpdateGraphWithGradients applies grads, one per trainable variable used in the graph in context
// order (as ctx.BuildTrainableVariablesGradientsGraph returns them). Each variable's update is
// computed in float32 (float64 for a float64 variable) whatever lossDType is.
func (o *AdafactorOptimizer) UpdateGraphWithGradients(ctx *context.Context, grads []*graph.Node, _ dtypes.DType) {
	// n, the update's number (1 at the first), is optax's count + 1.
	g, learningRate, n := startUpdate(ctx, grads, "optim.Adafactor", AdafactorScope, o.config.learningRate)
	eachTrainable(ctx, g, grads, "optim.Adafactor", func(v *context.Variable, grad *graph.Node) {
		o.apply(ctx, v, grad, learningRate, n)
	})
}

// apply updates variable v and its state with gradient grad at update n.
func (o *AdafactorOptimizer) apply(ctx *context.Context, v *context.Variable, grad, learningRate, n *graph.Node) {
	c := o.config
	g := grad.Graph()
	dtype := wideDType(v.DType())
	value := v.ValueGraph(g)
	p := graph.ConvertDType(value, dtype)
	grad = graph.ConvertDType(grad, dtype)
	// ρ = 1 - (n - offset)^(-rate), in the update's dtype (float32, as optax's _decay_rate_pow).
	rho := graph.OneMinus(graph.Pow(graph.ConvertDType(graph.AddScalar(n, -float64(c.decayOffset)), dtype), graph.Scalar(g, dtype, -c.decayRate)))
	average := func(old, x *graph.Node) *graph.Node { // ρ·old + (1-ρ)·x
		return graph.Add(graph.Mul(rho, old), graph.Mul(graph.OneMinus(rho), x))
	}
	squares := graph.AddScalar(graph.Square(grad), c.epsilon)
	dims := v.Shape().Dimensions
	var u *graph.Node
	if a, b, ok := o.FactoredAxes(dims); ok {
		rowVar, colVar := o.state(ctx, v, "v_row", dtype, without(dims, b)), o.state(ctx, v, "v_col", dtype, without(dims, a))
		rows := average(rowVar.ValueGraph(g), graph.ReduceMean(squares, b))
		cols := average(colVar.ValueGraph(g), graph.ReduceMean(squares, a))
		rowVar.SetValueGraph(rows)
		colVar.SetValueGraph(cols)
		aInRows := a
		if a > b {
			aInRows-- // axis b is gone from the rows
		}
		rowFactor := graph.Rsqrt(graph.Div(rows, graph.ReduceAndKeep(rows, graph.ReduceMean, aInRows)))
		colFactor := graph.Rsqrt(cols)
		u = graph.Mul(graph.Mul(grad, graph.ExpandAxes(rowFactor, b)), graph.ExpandAxes(colFactor, a))
	} else {
		fullVar := o.state(ctx, v, "v", dtype, dims)
		full := average(fullVar.ValueGraph(g), squares)
		fullVar.SetValueGraph(full)
		u = graph.Mul(grad, graph.Rsqrt(full))
	}
	if c.clippingThreshold > 0 {
		denominator := graph.Max(graph.ScalarOne(g, dtype), graph.DivScalar(rms(u), c.clippingThreshold))
		u = graph.Div(u, denominator)
	}
	u = graph.Mul(u, graph.ConvertDType(learningRate, dtype))
	if c.parameterScale {
		u = graph.Mul(u, graph.Max(rms(p), graph.Scalar(g, dtype, AdafactorMinParameterScale)))
	}
	if c.momentum > 0 {
		momentumVar := o.state(ctx, v, "momentum", dtype, dims)
		beta := graph.Scalar(g, dtype, c.momentum)
		u = graph.Add(graph.Mul(beta, momentumVar.ValueGraph(g)), graph.Mul(graph.OneMinus(beta), u))
		momentumVar.SetValueGraph(u)
	}
	if c.weightDecayRate > 0 {
		u = graph.Add(u, graph.MulScalar(p, c.weightDecayRate))
	}
	v.SetValueGraph(graph.ConvertDType(graph.Sub(p, u), value.DType()))
}

// Clear deletes Adafactor's state and its update counter.
func (o *AdafactorOptimizer) Clear(ctx *context.Context) error {
	return ctx.InAbsPath(context.ScopeSeparator + AdafactorScope).DeleteVariablesInScope()
}

// state returns (creating it, zero, on first use) variable v's state called which ("v_row",
// "v_col", "v" or "momentum", optax's names), under /AdafactorOptimizer/<v's scope>.
func (o *AdafactorOptimizer) state(ctx *context.Context, v *context.Variable, which string, dtype dtypes.DType, dims []int) *context.Variable {
	scoped := ctx.Checked(false).InAbsPath(context.ScopeSeparator + AdafactorScope + v.Scope()).WithInitializer(initializers.Zero)
	return scoped.VariableWithShape(v.Name()+"_"+which, shapes.Make(dtype, dims...)).SetTrainable(false)
}

// without returns dims with axis removed.
func without(dims []int, axis int) []int {
	return append(slices.Clone(dims[:axis]), dims[axis+1:]...)
}

// rms is the root mean square of all of x's elements, a scalar.
func rms(x *graph.Node) *graph.Node { return graph.Sqrt(graph.ReduceAllMean(graph.Square(x))) }

// Optax is optax.adafactor's name and arguments, by optax's names, for the JAX reference (what
// optim.OptaxOptimizer asks): every argument is given; booleans are 0 or 1, and a clipping
// threshold, momentum or weight decay rate of 0 stands for optax's None. The learning rate is
// the schedule's, not an argument.
func (o *AdafactorOptimizer) Optax() (string, map[string]float64) {
	c := o.config
	flag := func(on bool) float64 {
		if on {
			return 1
		}
		return 0
	}
	return "adafactor", map[string]float64{"min_dim_size_to_factor": float64(c.minDimSizeToFactor), "decay_rate": c.decayRate,
		"decay_offset": float64(c.decayOffset), "multiply_by_parameter_scale": flag(c.parameterScale),
		"clipping_threshold": c.clippingThreshold, "momentum": c.momentum, "weight_decay_rate": c.weightDecayRate,
		"eps": c.epsilon, "factored": flag(c.factored)}
}

// String describes the optimizer with its settings that differ from optax.adafactor's defaults,
// e.g. "adafactor" or "adafactor(momentum=0.9, weight_decay_rate=0.001)": two Adafactors with the
// same description update the same way.
func (o *AdafactorOptimizer) String() string {
	_, settings := o.Optax()
	_, defaults := Adafactor().Done().Optax()
	var changed []string
	for _, name := range adafactorSettings {
		if settings[name] != defaults[name] {
			changed = append(changed, fmt.Sprintf("%s=%g", name, settings[name]))
		}
	}
	if len(changed) == 0 {
		return "adafactor"
	}
	return "adafactor(" + strings.Join(changed, ", ") + ")"
}

// adafactorSettings are optax.adafactor's arguments in its order.
var adafactorSettings = []string{"min_dim_size_to_factor", "decay_rate", "decay_offset", "multiply_by_parameter_scale",
	"clipping_threshold", "momentum", "weight_decay_rate", "eps", "factored"}
