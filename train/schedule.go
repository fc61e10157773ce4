package train

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Schedule is optax's warmup_exponential_decay_schedule, the tutorial's learning rate: linear from
// Init to Peak over WarmupSteps updates, then Peak·DecayRate^((step-WarmupSteps)/TransitionSteps).
// step counts the updates already applied, so the first update uses Init.
type Schedule struct {
	Init, Peak      float64
	WarmupSteps     int
	TransitionSteps int
	DecayRate       float64
}

// TutorialSchedule is the tutorial's: from 0 to 4e-4 over 10 steps, then ×0.99 per step.
var TutorialSchedule = Schedule{Init: 0, Peak: 4e-4, WarmupSteps: 10, TransitionSteps: 1, DecayRate: 0.99}

// Validate returns an error naming a field that cannot work.
func (s Schedule) Validate() error {
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

// At returns the learning rate of the update after step updates, in float64 (the reference for
// the graph version).
func (s Schedule) At(step int) float64 {
	if step < s.WarmupSteps {
		return s.Init + (s.Peak-s.Init)*float64(step)/float64(s.WarmupSteps)
	}
	return s.Peak * math.Pow(s.DecayRate, float64(step-s.WarmupSteps)/float64(s.TransitionSteps))
}

// Apply sets the optimizer's learning-rate variable, in the graph, to the schedule's value at the
// global step (the number of updates applied so far). GoMLX's optimizers read that variable.
//
// It computes in float32, with optax's formulas (linear_schedule's interpolation from the peak,
// exponential_decay's power), as optax does: float64 here would put float64 scalar work into
// every parameter's update fusion, which JAX's program does not have, for a learning rate the
// float32 optimizer rounds to float32 anyway.
func (s Schedule) Apply(ctx *context.Context, g *graph.Graph) {
	f32 := dtypes.Float32
	step := graph.ConvertDType(optimizers.GetGlobalStepVar(ctx).ValueGraph(g), f32)
	// optax.linear_schedule: (init - peak)·(1 - step/warmup) + peak.
	frac := graph.OneMinus(graph.DivScalar(step, float64(max(s.WarmupSteps, 1))))
	warm := graph.AddScalar(graph.MulScalar(frac, s.Init-s.Peak), s.Peak)
	// optax.exponential_decay: peak · rate^((step - warmup)/transition).
	decayed := graph.MulScalar(graph.Pow(graph.Scalar(g, f32, s.DecayRate),
		graph.DivScalar(graph.AddScalar(step, -float64(s.WarmupSteps)), float64(s.TransitionSteps))), s.Peak)
	lr := graph.Where(graph.LessThan(step, graph.Scalar(g, f32, float64(s.WarmupSteps))), warm, decayed)
	v := optimizers.LearningRateVar(ctx, f32, s.Peak)
	v.SetValueGraph(graph.ConvertDType(lr, v.Shape().DType))
}
