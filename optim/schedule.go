package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/exact"
)

// Schedule is the learning rate as a function of the step, optax's schedules' counterpart: step
// counts the updates applied before this one, so the first update uses the rate at 0. Rate builds
// it in the step's graph, in float32 as optax computes it; At is the same function in float64, the
// reference Rate is tested against; String describes it for checkpoints' manifests (two schedules
// with one description give the same rates). Constant, WarmupCosine and WarmupExponentialDecay
// are schedules; a type of your own with these three methods is one too.
type Schedule interface {
	// Rate returns the learning rate (a float32 scalar) of the update after step updates (a
	// float32 scalar).
	Rate(step *graph.Node) *graph.Node
	// At returns the learning rate of the update after step updates.
	At(step int) float64
	// String describes the schedule and its parameters.
	String() string
}

// ApplySchedule sets GoMLX's learning-rate variable, in g, to s's rate at the global step (the
// number of updates applied so far): GoMLX's optimizers and onegpu's read that variable, so call
// it before the optimizer's update in the same graph.
func ApplySchedule(ctx *context.Context, g *graph.Graph, s Schedule) {
	f32 := dtypes.Float32
	step := graph.ConvertDType(optimizers.GetGlobalStepVar(ctx).ValueGraph(g), f32)
	lr := s.Rate(step)
	v := optimizers.LearningRateVar(ctx, f32, s.At(0))
	v.SetValueGraph(graph.ConvertDType(lr, v.Shape().DType))
}

// ValidateSchedule returns the error of s's Validate method when it has one (the schedules of
// this package do), and an error for a nil schedule.
func ValidateSchedule(s Schedule) error {
	if s == nil {
		return fmt.Errorf("no learning-rate schedule: use optim.Constant(1e-3), optim.WarmupCosine(...) or optim.WarmupExponentialDecay(...)")
	}
	if v, ok := s.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// ConstantSchedule is the same learning rate at every step (optax.constant_schedule).
type ConstantSchedule struct{ LearningRate float64 }

// Constant returns the schedule of a constant learning rate lr.
func Constant(lr float64) ConstantSchedule { return ConstantSchedule{LearningRate: lr} }

// Rate is the constant, in float32.
func (s ConstantSchedule) Rate(step *graph.Node) *graph.Node {
	return graph.Scalar(step.Graph(), dtypes.Float32, s.LearningRate)
}

// At is the constant.
func (s ConstantSchedule) At(int) float64 { return s.LearningRate }

// String is "constant(lr)".
func (s ConstantSchedule) String() string { return fmt.Sprintf("constant(%g)", s.LearningRate) }

// Validate returns an error unless the rate is positive and finite.
func (s ConstantSchedule) Validate() error {
	if !(s.LearningRate > 0) || math.IsInf(s.LearningRate, 0) {
		return fmt.Errorf("schedule: learning rate %g must be a positive finite number", s.LearningRate)
	}
	return nil
}

// WarmupExponentialDecaySchedule is optax's warmup_exponential_decay_schedule, the tutorial's
// learning rate: linear from Init to Peak over WarmupSteps updates, then
// Peak·DecayRate^((step-WarmupSteps)/TransitionSteps).
type WarmupExponentialDecaySchedule struct {
	Init, Peak      float64
	WarmupSteps     int
	TransitionSteps int
	DecayRate       float64
}

// WarmupExponentialDecay returns optax.warmup_exponential_decay_schedule(init, peak, warmup,
// transition, rate): linear from init to peak over warmup updates, then ×rate every transition
// updates (continuously).
func WarmupExponentialDecay(init, peak float64, warmup, transition int, rate float64) WarmupExponentialDecaySchedule {
	return WarmupExponentialDecaySchedule{Init: init, Peak: peak, WarmupSteps: warmup, TransitionSteps: transition, DecayRate: rate}
}

// Validate returns an error naming a field that cannot work.
func (s WarmupExponentialDecaySchedule) Validate() error {
	switch {
	case !(s.Peak > 0) || math.IsInf(s.Peak, 0): // NaN too
		return fmt.Errorf("schedule: peak learning rate %g must be a positive finite number", s.Peak)
	case !(s.Init >= 0) || math.IsInf(s.Init, 0):
		return fmt.Errorf("schedule: initial learning rate %g must be a finite number, at least 0", s.Init)
	case s.WarmupSteps < 0:
		return fmt.Errorf("schedule: %d warm-up steps cannot be negative", s.WarmupSteps)
	case s.TransitionSteps < 1:
		return fmt.Errorf("schedule: transition steps %d must be at least 1", s.TransitionSteps)
	case !(s.DecayRate > 0 && s.DecayRate <= 1): // NaN too
		return fmt.Errorf("schedule: decay rate %g must be in (0, 1]", s.DecayRate)
	}
	return nil
}

// At returns the learning rate of the update after step updates, in float64.
func (s WarmupExponentialDecaySchedule) At(step int) float64 {
	if step < s.WarmupSteps {
		return warmupAt(step, s.Init, s.Peak, s.WarmupSteps)
	}
	return s.Peak * math.Pow(s.DecayRate, float64(step-s.WarmupSteps)/float64(s.TransitionSteps))
}

// Rate computes optax's formulas (linear_schedule's interpolation from the peak,
// exponential_decay's power) with operations that round the same on every backend, so that the
// embedded backend (the optimizer offload's host) and XLA set the same float32 rate: the
// interpolation as a float64 sum of exact products (exact.ProductSum), the power by squaring
// (exact.PowInt; with TransitionSteps > 1, of rate^(1/TransitionSteps) computed here). Backends'
// Pow differ in the last bit (0.99^n for 13% of n), and XLA fuses multiply-adds.
func (s WarmupExponentialDecaySchedule) Rate(step *graph.Node) *graph.Node {
	return afterWarmup(step, s.Init, s.Peak, s.WarmupSteps, func() *graph.Node {
		// optax.exponential_decay: peak · rate^((step - warmup)/transition), rate and peak as the
		// float32 values optax computes with.
		base := float64(float32(s.DecayRate))
		if s.TransitionSteps > 1 {
			base = math.Pow(base, 1/float64(s.TransitionSteps))
		}
		updates := graph.ConvertDType(graph.AddScalar(step, -float64(s.WarmupSteps)), dtypes.Int64)
		return graph.ConvertDType(graph.MulScalar(exact.PowInt(base, updates), float64(float32(s.Peak))), dtypes.Float32)
	})
}

// String lists the parameters with optax's names.
func (s WarmupExponentialDecaySchedule) String() string {
	return fmt.Sprintf("warmup_exponential_decay(init=%g, peak=%g, warmup=%d, transition=%d, rate=%g)",
		s.Init, s.Peak, s.WarmupSteps, s.TransitionSteps, s.DecayRate)
}

// WarmupCosineSchedule is optax's warmup_cosine_decay_schedule: linear from Init to Peak over
// WarmupSteps updates, then a half cosine from Peak down to End, reached after DecaySteps updates
// in all (the warm-up included), and End from there on.
type WarmupCosineSchedule struct {
	Init, Peak, End float64
	WarmupSteps     int
	DecaySteps      int
}

// WarmupCosine returns optax.warmup_cosine_decay_schedule(init, peak, warmup, decay, end): decay
// counts the warm-up's updates too (optax's decay_steps).
func WarmupCosine(init, peak float64, warmup, decay int, end float64) WarmupCosineSchedule {
	return WarmupCosineSchedule{Init: init, Peak: peak, End: end, WarmupSteps: warmup, DecaySteps: decay}
}

// Validate returns an error naming a field that cannot work.
func (s WarmupCosineSchedule) Validate() error {
	switch {
	case !(s.Peak > 0) || math.IsInf(s.Peak, 0):
		return fmt.Errorf("schedule: peak learning rate %g must be a positive finite number", s.Peak)
	case !(s.Init >= 0) || math.IsInf(s.Init, 0) || !(s.End >= 0) || math.IsInf(s.End, 0):
		return fmt.Errorf("schedule: initial and final learning rates %g and %g must be finite numbers, at least 0", s.Init, s.End)
	case s.WarmupSteps < 0:
		return fmt.Errorf("schedule: %d warm-up steps cannot be negative", s.WarmupSteps)
	case s.DecaySteps <= s.WarmupSteps:
		return fmt.Errorf("schedule: %d decay steps must be more than the %d warm-up steps (they include them, as optax's decay_steps)", s.DecaySteps, s.WarmupSteps)
	}
	return nil
}

// At returns the learning rate of the update after step updates, in float64.
func (s WarmupCosineSchedule) At(step int) float64 {
	if step < s.WarmupSteps {
		return warmupAt(step, s.Init, s.Peak, s.WarmupSteps)
	}
	progress := min(float64(step-s.WarmupSteps)/float64(s.DecaySteps-s.WarmupSteps), 1)
	return s.End + (s.Peak-s.End)*0.5*(1+math.Cos(math.Pi*progress))
}

// Rate computes in float32, with optax's formulas (linear_schedule, then cosine_decay_schedule
// with alpha = End/Peak). The cosine is the backend's: the embedded backend's and XLA's may differ
// in the last bit, so an offloaded run follows the device's to that rounding (the warm-up and the
// other schedules round the same everywhere).
func (s WarmupCosineSchedule) Rate(step *graph.Node) *graph.Node {
	return afterWarmup(step, s.Init, s.Peak, s.WarmupSteps, func() *graph.Node {
		progress := graph.Min(graph.DivScalar(graph.AddScalar(step, -float64(s.WarmupSteps)), float64(s.DecaySteps-s.WarmupSteps)),
			graph.ScalarOne(step.Graph(), dtypes.Float32))
		cosine := graph.MulScalar(graph.AddScalar(graph.Cos(graph.MulScalar(progress, math.Pi)), 1), 0.5)
		return graph.AddScalar(graph.MulScalar(cosine, s.Peak-s.End), s.End)
	})
}

// String lists the parameters with optax's names.
func (s WarmupCosineSchedule) String() string {
	return fmt.Sprintf("warmup_cosine_decay(init=%g, peak=%g, warmup=%d, decay=%d, end=%g)", s.Init, s.Peak, s.WarmupSteps, s.DecaySteps, s.End)
}

// warmupAt is optax.linear_schedule from init to peak over warmup steps, at step (< warmup).
func warmupAt(step int, init, peak float64, warmup int) float64 {
	return init + (peak-init)*float64(step)/float64(warmup)
}

// afterWarmup returns, in the graph, optax.linear_schedule's rate from init to peak while step
// is below warmup, then the rate decayed builds (optax.join_schedules).
func afterWarmup(step *graph.Node, init, peak float64, warmup int, decayed func() *graph.Node) *graph.Node {
	// optax.linear_schedule: (init - peak)·(1 - step/warmup) + peak, with 1 - step/warmup as
	// (warmup - step)·(1/warmup) (an exact difference, one rounding) and the rest a float64 sum of
	// exact float32 products, rounded once: the same bits with or without a fused multiply-add.
	g, f32 := step.Graph(), dtypes.Float32
	frac := graph.MulScalar(graph.Sub(graph.Scalar(g, f32, float64(warmup)), step), 1/float64(max(warmup, 1)))
	warm := graph.ConvertDType(exact.ProductSum(frac, graph.Scalar(g, f32, init-peak), graph.ScalarOne(g, f32), graph.Scalar(g, f32, peak)), f32)
	after := decayed()
	return graph.Where(graph.LessThan(step, graph.Scalar(g, f32, float64(warmup))), warm, after)
}
