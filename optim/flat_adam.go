package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// flatChunk is how many elements one goroutine updates at a time: small enough to share the
// work evenly and to keep a chunk's parameters in the core's cache while they are converted to
// the compute dtype, large enough that taking a chunk costs nothing.
const flatChunk = 1 << 14

// Flat returns Adam's (and AdamW's) update as a flat loop: GoMLX's float32 Adam as the embedded
// backend computes it. Nil when ctx sets a GoMLX hyperparameter the loop does not implement.
func (a adamOptimizer) Flat(ctx *context.Context) FlatUpdate {
	if flatDeclines(ctx) {
		return nil
	}
	return adamFlat{config: a.config, ctx: ctx}
}

// adamFlat is Adam's flat update of the variables of ctx.
type adamFlat struct {
	config AdamConfig
	ctx    *context.Context
}

// Scalars are the learning rate and Adam's update count as float32, as GoMLX's Adam reads them.
func (a adamFlat) Scalars(ctx *context.Context, g *graph.Graph) []*graph.Node {
	f32 := dtypes.Float32
	lr := a.config.learningRate
	if lr < 0 {
		lr = context.GetParamOr(ctx, optimizers.ParamLearningRate, optimizers.AdamDefaultLearningRate)
	}
	learningRate := optimizers.LearningRateVar(ctx, f32, lr).ValueGraph(g)
	_ = optimizers.IncrementGlobalStepGraph(ctx, g, f32)
	count := optimizers.IncrementGlobalStepGraph(ctx.In(optimizers.AdamDefaultScope), g, f32)
	return []*graph.Node{learningRate, count}
}

// Update runs GoMLX's Adam (optimizers.AdamConfig's applyAdamGraph in float32) element by element:
// the moments' moving averages, the debiasing, ε outside the square root, the decoupled weight
// decay scaled by the learning rate, each operation rounded to float32 as the graph rounds it.
func (a adamFlat) Update(step FlatStep, vars []*context.Variable, grads, out []*tensors.Tensor) error {
	if err := checkFlat("adam", vars, grads, out); err != nil {
		return err
	}
	if len(step.Scalars) != 2 {
		return fmt.Errorf("adam: %d scalars, want the learning rate and the count", len(step.Scalars))
	}
	c := a.config
	b1, b2 := float32(c.beta1), float32(c.beta2)
	t := float32(step.Scalars[1])
	k := adamScalars{
		lr: float32(step.Scalars[0]), b1: b1, b2: b2, omb1: 1 - b1, omb2: 1 - b2,
		// As the embedded backend computes Pow in float32: math.Pow in float64, rounded.
		debias1: 1 / (1 - float32(math.Pow(float64(b1), float64(t)))),
		debias2: 1 / (1 - float32(math.Pow(float64(b2), float64(t)))),
		eps:     float32(c.epsilon), decay: float32(c.weightDecay),
	}
	// Per variable: value, gradient, first and second moment, output.
	all := make([]*tensors.Tensor, 0, 5*len(vars))
	mutable := make([]bool, 0, 5*len(vars))
	sizes := make([]int, len(vars))
	for i, v := range vars {
		scope := context.ScopeSeparator + optimizers.AdamDefaultScope + v.Scope() // as GoMLX's Adam names it
		value, err := v.Value()
		if err != nil {
			return err
		}
		m, err := stateValue(a.moment(scope, v, "1st"), v)
		if err != nil {
			return err
		}
		s, err := stateValue(a.moment(scope, v, "2nd"), v)
		if err != nil {
			return err
		}
		all = append(all, value, grads[i], m, s, out[i])
		mutable = append(mutable, true, false, true, true, true)
		sizes[i] = v.Shape().Size()
	}
	tasks := splitTasks(sizes, flatChunk, 1)
	return withFlat(all, mutable, func(flats []any) {
		runTasks(tasks, func(_ int, t flatTask) {
			f := flats[5*t.v : 5*t.v+5]
			p := f[0].([]float32)[t.lo:t.hi]
			k.apply(step, p, f[1].([]float32)[t.lo:t.hi], f[2].([]float32)[t.lo:t.hi], f[3].([]float32)[t.lo:t.hi])
			if f[4] != nil {
				convertOut(f[4], t.lo, p)
			}
		})
	})
}

// moment is the variable of v's moment ("1st" or "2nd") under Adam's scope, nil if missing.
func (a adamFlat) moment(scope string, v *context.Variable, which string) *context.Variable {
	return a.ctx.GetVariableByScopeAndName(scope, fmt.Sprintf("%s_%s_moment", v.Name(), which))
}

// adamScalars are one step's float32 constants of Adam.
type adamScalars struct {
	lr, b1, b2, omb1, omb2, debias1, debias2, eps, decay float32
}

// apply updates p, m and s in place with gradient g (all of one length): the vector kernel on
// whole vectors where there is one, the Go loop on the rest.
func (k adamScalars) apply(step FlatStep, p, g, m, s []float32) {
	g, m, s = g[:len(p)], m[:len(p)], s[:len(p)]
	scaling := step.loop()
	vectors := 0
	if hasAVX2 && len(p) >= 8 {
		vectors = len(p) &^ 7
		v := k.vector(scaling)
		adamAVX2(&p[0], &g[0], &m[0], &s[0], vectors, &v)
	}
	k.loop(scaling, p[vectors:], g[vectors:], m[vectors:], s[vectors:])
}

// loop is apply in Go.
func (k adamScalars) loop(scaling loopScaling, p, g, m, s []float32) {
	g, m, s = g[:len(p)], m[:len(p)], s[:len(p)]
	for j := range p {
		gj := scaling.of(g[j])
		mj := float32(k.b1*m[j]) + float32(k.omb1*gj)
		sj := float32(k.b2*s[j]) + float32(k.omb2*float32(gj*gj))
		m[j], s[j] = mj, sj
		denominator := float32(math.Sqrt(float64(float32(sj*k.debias2)))) + k.eps
		direction := float32(k.lr*float32(mj*k.debias1)) / denominator
		if k.decay > 0 {
			direction += float32(k.lr * float32(p[j]*k.decay))
		}
		p[j] -= direction
	}
}

// adamVector is what the vector kernel (adamAVX2) reads, at fixed offsets: the step's constants,
// the gradient's two divisors (a reciprocal to multiply by, or a value to divide by) and clip
// factor, and which of them apply.
type adamVector struct {
	adamScalars
	divisors     [2]float32
	clip         float32
	kinds        [2]int32
	clips, decay int32
}

// vector is k with scaling for adamAVX2.
func (k adamScalars) vector(scaling loopScaling) adamVector {
	v := adamVector{adamScalars: k, clip: scaling.clip}
	for i, d := range scaling.divide {
		v.kinds[i], v.divisors[i] = int32(d.kind), d.d
		if d.kind == 1 {
			v.divisors[i] = d.inverse
		}
	}
	if scaling.clip != 1 {
		v.clips = 1
	}
	if k.decay > 0 {
		v.decay = 1
	}
	return v
}
