package hostengine

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/optim"
)

// A stage's flat update: the optimizer's flat loop (optim.FlatUpdate) over the masters, the
// gradients and the state in Go memory, after one small program per step on the engine's backend
// computes the step-wide scalars (the schedule's learning rate, the counts), held until Commit as
// the graph updates' are.

// flatFits reports whether the stage can run the flat loop: float32 variables, and parameters out
// in float32 or bfloat16 (or none).
func (s *Stage) flatFits() bool {
	if c := s.e.cfg.Compute; !s.e.cfg.NoParams && c != dtypes.InvalidDType && c != dtypes.Float32 && c != dtypes.BFloat16 {
		return false
	}
	for _, v := range s.vars {
		if v.DType() != dtypes.Float32 {
			return false
		}
	}
	return true
}

// updateFlat runs the flat loop on the stage's variables, after the step's scalars.
func (s *Stage) updateFlat(grads []*tensors.Tensor, scaling Scaling) ([]*tensors.Tensor, error) {
	e := s.e
	if e.step == nil {
		if err := e.runScalars(); err != nil {
			return nil, err
		}
	}
	out := make([]*tensors.Tensor, len(s.vars))
	if !e.cfg.NoParams {
		dt := e.cfg.Compute
		if dt == dtypes.InvalidDType {
			dt = dtypes.Float32
		}
		for i, v := range s.vars {
			out[i] = tensors.FromShape(shapes.Make(dt, v.Shape().Dimensions...))
		}
	}
	if err := e.flat.Update(optim.FlatStep{Scalars: e.step, GradientScaling: scaling}, s.vars, grads, out); err != nil {
		return nil, fmt.Errorf("hostengine: stage %q's update: %w", s.name, err)
	}
	if e.cfg.NoParams {
		return nil, nil
	}
	return out, nil
}

// runScalars runs the step-wide program of the flat loop: the schedule, then the optimizer's
// scalars (FlatUpdate.Scalars), the step-wide variables held until Commit.
func (e *Engine) runScalars() error {
	if e.scalars == nil {
		var err error
		e.scalars, err = context.NewExec(e.cfg.Backend, e.cfg.Ctx, func(ctx *context.Context, g *graph.Graph) []*graph.Node {
			if e.cfg.Schedule != nil {
				optim.ApplySchedule(ctx, g, e.cfg.Schedule)
			}
			outs := e.flat.Scalars(ctx, g)
			var wide []*graph.Node
			e.held, wide = holdStepWide(ctx, g)
			return append(outs, wide...)
		})
		if err != nil {
			return err
		}
		e.scalars = e.scalars.WithName("host_scalars")
	}
	outs, err := e.scalars.Exec()
	if err != nil {
		return fmt.Errorf("hostengine: the update's scalars: %w", err)
	}
	n := len(outs) - len(e.held)
	e.step = make([]float64, n)
	for i, t := range outs[:n] {
		switch x := t.Value().(type) {
		case float32:
			e.step[i] = float64(x)
		case float64:
			e.step[i] = x
		case int64:
			e.step[i] = float64(x)
		default:
			return fmt.Errorf("hostengine: the update's scalar #%d is %s, want a float or int64 scalar", i, t.Shape())
		}
		t.FinalizeAll()
	}
	e.setPending(e.held, outs[n:])
	return nil
}
