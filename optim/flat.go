package optim

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Flat updates: an optimizer's element-wise update written as one Go loop over flat host buffers
// (the master weights, the gradients and the optimizer's state in Go memory), run by one
// goroutine per core. Where the update runs on the host (optim/hostengine), a graph moves each
// parameter's bytes several times (XLA's CPU compiler runs Adam as four loops: 50 bytes per
// parameter where one pass moves 30; the embedded backend one loop per op); the flat loop reads
// and writes each buffer once. It computes what the optimizer's graph update computes on the
// embedded backend, bit for bit: every operation in the same order and dtype, each rounded on its
// own (explicit conversions keep Go from fusing a multiply and an add, which would round once).

// FlatOptimizer is an optimizer whose update also runs as a flat loop (Adam, AdamW, Adam8bit).
type FlatOptimizer interface {
	GradientsOptimizer
	// Flat returns the update as a flat loop for the variables of ctx, or nil when this
	// configuration has none (a GoMLX hyperparameter in ctx that the loop does not implement,
	// such as clipping the step by value): the caller runs the graph update then.
	Flat(ctx *context.Context) FlatUpdate
}

// FlatUpdate is an optimizer's update as a flat loop. The optimizer's state variables are the
// graph update's (the same names, shapes and dtypes, created by building the graph update once),
// so checkpoints do not tell them apart.
type FlatUpdate interface {
	// Scalars builds, in g, the update's step-wide part as the graph update builds it: it
	// increments GoMLX's global step and the optimizer's own count and returns the scalars the loop
	// reads (the learning rate, the count, ...), which Update takes as float64 values in this order.
	// Build it after the learning-rate schedule (ApplySchedule) in the same graph.
	Scalars(ctx *context.Context, g *graph.Graph) []*graph.Node
	// Update applies one step to vars (trainable float32 variables of the context Flat was given,
	// their values and state local or shared with the host backend) in place: grads[i] is the
	// float32 gradient of vars[i], read as Step.Gradient does; out[i], when not nil, receives the
	// new value in its own dtype (float32 or bfloat16, rounded to nearest even).
	Update(step FlatStep, vars []*context.Variable, grads, out []*tensors.Tensor) error
}

// FlatStep is what a flat update needs besides the buffers: the scalars Scalars returned, and the
// scaling of each gradient element.
type FlatStep struct {
	Scalars []float64
	GradientScaling
}

// GradientScaling is what a chain split across programs (Chain.Split) does to each gradient
// element before the optimizer sees it: divide it by Denominator (a sum over micro-batches into a
// mean), then by LossScale (Chain.LossScaleValue), then multiply it by Clip (Chain.StepWide's
// factor), each in float32 and rounded, as the graph divides and multiplies; 0 means 1 for each.
type GradientScaling struct {
	Denominator, LossScale, Clip float32
}

// Of is element g as the optimizer sees it.
func (s GradientScaling) Of(g float32) float32 { return s.loop().of(g) }

// loop is the scaling set up for a loop.
func (s GradientScaling) loop() loopScaling {
	return loopScaling{divide: [2]divisor{newDivisor(orOne(s.Denominator)), newDivisor(orOne(s.LossScale))}, clip: orOne(s.Clip)}
}

// loopScaling divides by two divisors and multiplies by clip, each rounded.
type loopScaling struct {
	divide [2]divisor
	clip   float32
}

func (s loopScaling) of(g float32) float32 {
	g = s.divide[1].of(s.divide[0].of(g))
	if s.clip != 1 {
		g *= s.clip
	}
	return g
}

// divisor divides by d, or multiplies by its reciprocal when d is a power of two (the same
// result, as the reciprocal is exact, and a multiplication costs a fraction of a division).
type divisor struct {
	d, inverse float32
	kind       int8 // 0: d is 1; 1: multiply by inverse; 2: divide by d
}

func newDivisor(d float32) divisor {
	switch frac, _ := math.Frexp(float64(d)); {
	case d == 1:
		return divisor{d: 1}
	case frac == 0.5 && !math.IsInf(float64(1/d), 0) && 1/d != 0:
		return divisor{d: d, inverse: 1 / d, kind: 1}
	}
	return divisor{d: d, kind: 2}
}

func (v divisor) of(x float32) float32 {
	switch v.kind {
	case 1:
		return x * v.inverse
	case 2:
		return x / v.d
	}
	return x
}

func orOne(x float32) float32 {
	if x == 0 {
		return 1
	}
	return x
}

// flatTask is a range of one variable's elements that one goroutine updates.
type flatTask struct{ v, lo, hi int }

// splitTasks cuts each variable's sizes[v] elements into ranges of about chunk elements (a
// multiple of align), for the cores to share.
func splitTasks(sizes []int, chunk, align int) []flatTask {
	chunk = max(chunk/align, 1) * align
	var tasks []flatTask
	for v, n := range sizes {
		for lo := 0; lo < n; lo += chunk {
			tasks = append(tasks, flatTask{v: v, lo: lo, hi: min(n, lo+chunk)})
		}
	}
	return tasks
}

// runTasks runs fn on every task (and its index), one goroutine per core taking the next task as
// it finishes one.
func runTasks(tasks []flatTask, fn func(i int, t flatTask)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(tasks)); i = next.Add(1) - 1 {
				fn(int(i), tasks[i])
			}
		}()
	}
	wg.Wait()
}

// withFlat calls fn with the flat data of every tensor of ts (nil entries stay nil), each locked
// for the call: mutable ones as MutableFlatData gives them (brought local, device copies
// invalidated), the others as ConstFlatData does.
func withFlat(ts []*tensors.Tensor, mutable []bool, fn func(flats []any)) error {
	flats := make([]any, len(ts))
	var open func(i int) error
	open = func(i int) error {
		for i < len(ts) && ts[i] == nil {
			i++
		}
		if i == len(ts) {
			fn(flats)
			return nil
		}
		var inner error
		access := func(flat any) { flats[i] = flat; inner = open(i + 1) }
		var err error
		if mutable[i] {
			err = ts[i].MutableFlatData(access)
		} else {
			err = ts[i].ConstFlatData(access)
		}
		if err != nil {
			return err
		}
		return inner
	}
	return open(0)
}

// convertOut writes values into out (a []float32 or []bfloat16.BFloat16) from index at.
func convertOut(out any, at int, values []float32) {
	switch o := out.(type) {
	case []float32:
		copy(o[at:], values)
	case []bfloat16.BFloat16:
		o = o[at : at+len(values)]
		vectors := 0
		if hasAVX2 && len(values) >= 16 {
			vectors = len(values) &^ 15
			bfloat16AVX2((*uint16)(&o[0]), &values[0], vectors)
		}
		for j := vectors; j < len(values); j++ {
			o[j] = bfloat16ToNearest(values[j])
		}
	}
}

// BFloat16Nearest writes src rounded to bfloat16 into dst (of src's length), to nearest with ties to
// even as XLA converts, eight lanes at a time with AVX2 on amd64: the host's copy of float32 values
// a device program converts to bfloat16, bit for bit.
func BFloat16Nearest(dst []bfloat16.BFloat16, src []float32) { convertOut(dst, 0, src) }

// bfloat16ToNearest rounds x to bfloat16, to nearest with ties to even, as XLA converts (GoMLX's
// bfloat16.FromFloat32 truncates); a NaN stays a NaN.
func bfloat16ToNearest(x float32) bfloat16.BFloat16 {
	b := math.Float32bits(x)
	if x != x {
		return bfloat16.BFloat16(b>>16 | 0x40)
	}
	return bfloat16.BFloat16((b + 0x7fff + (b>>16)&1) >> 16)
}

// checkFlat checks that out's tensors can take vars' new values and that every gradient is a
// float32 tensor of its variable's shape.
func checkFlat(name string, vars []*context.Variable, grads, out []*tensors.Tensor) error {
	if len(grads) != len(vars) || len(out) != len(vars) {
		return fmt.Errorf("%s: %d gradients and %d outputs for %d variables", name, len(grads), len(out), len(vars))
	}
	for i, v := range vars {
		if v.DType() != dtypes.Float32 {
			return fmt.Errorf("%s: variable %s is %s: the flat update takes float32 variables", name, v.ScopeAndName(), v.DType())
		}
		if g := grads[i]; g == nil || g.DType() != dtypes.Float32 || g.Size() != v.Shape().Size() {
			return fmt.Errorf("%s: the gradient of %s is not a float32 tensor of %d elements", name, v.ScopeAndName(), v.Shape().Size())
		}
		if o := out[i]; o != nil && (o.Size() != v.Shape().Size() || (o.DType() != dtypes.Float32 && o.DType() != dtypes.BFloat16)) {
			return fmt.Errorf("%s: the output for %s is %s, want float32 or bfloat16 of %d elements", name, v.ScopeAndName(), o.Shape(), v.Shape().Size())
		}
	}
	return nil
}

// stateValue is the value of a state variable the graph update created, or an error saying so.
func stateValue(v *context.Variable, owner *context.Variable) (*tensors.Tensor, error) {
	if v == nil || !v.HasValue() {
		return nil, fmt.Errorf("the optimizer's state of %s has no value: build and initialize the graph update first", owner.ScopeAndName())
	}
	return v.Value()
}

// flatDeclines reports whether ctx sets a GoMLX optimizer hyperparameter a flat loop does not
// implement (clipping the step by value or NaNs, a NaN logger): the graph update runs then.
func flatDeclines(ctx *context.Context) bool {
	_, logger := ctx.GetParam(optimizers.ParamNanLogger)
	return logger || context.GetParamOr(ctx, optimizers.ParamClipStepByValue, 0.0) != 0 ||
		context.GetParamOr(ctx, optimizers.ParamClipNaN, false)
}

// Partials are what Chain.StepWide needs from one set of gradients (float32 tensors, local or
// shared with a host backend), computed by the cores together: whether every element, divided by
// Denominator and LossScale, is finite, and each gradient's sum of the squares of those values
// (accumulated in float64, in a fixed order for a given machine, and rounded to float32; Clip is
// not applied). The graph's float32 reduction rounds the sums differently in their last bits.
func (s GradientScaling) Partials(grads []*tensors.Tensor) (finite bool, squares []float32, err error) {
	sizes := make([]int, len(grads))
	for i, g := range grads {
		if g == nil || g.DType() != dtypes.Float32 {
			return false, nil, fmt.Errorf("gradient #%d is not a float32 tensor", i)
		}
		sizes[i] = g.Size()
	}
	scaling := s.loop()
	scaling.clip = 1
	tasks := splitTasks(sizes, flatChunk, 1)
	sums := make([]float64, len(tasks))
	nonFinite := make([]bool, len(tasks))
	err = withFlat(grads, make([]bool, len(grads)), func(flats []any) {
		runTasks(tasks, func(i int, t flatTask) {
			g := flats[t.v].([]float32)[t.lo:t.hi]
			var sum float64
			vectors := 0
			if hasAVX2 && len(g) >= 8 {
				vectors = len(g) &^ 7
				v := adamScalars{}.vector(scaling)
				sum = squaresAVX2(&g[0], vectors, &v)
			}
			for _, x := range g[vectors:] {
				x := float64(scaling.of(x))
				sum += x * x
			}
			sums[i], nonFinite[i] = sum, math.IsNaN(sum) || math.IsInf(sum, 0)
		})
	})
	if err != nil {
		return false, nil, err
	}
	total := make([]float64, len(grads))
	finite = true
	for i, t := range tasks {
		total[t.v] += sums[i]
		finite = finite && !nonFinite[i]
	}
	squares = make([]float32, len(grads))
	for i, x := range total {
		squares[i] = float32(x)
	}
	return finite, squares, nil
}
