package hostengine

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
)

// A stage's graph update: the optimizer's UpdateGraphWithGradients in one program per stage on the
// engine's backend, the state in the backend's buffers, donated to each update and written in place.

// compile prepares the stage's update program (compiled at its first run).
func (s *Stage) compile() error {
	var err error
	s.update, err = context.NewExec(s.e.cfg.Backend, s.e.cfg.Ctx, platform.AliasUpdatedState(s.updateFn))
	if err != nil {
		return err
	}
	s.update = s.update.WithName("host_update_" + s.name)
	return nil
}

// updateGraph runs the stage's update program.
func (s *Stage) updateGraph(grads []*tensors.Tensor, scaling Scaling) ([]*tensors.Tensor, error) {
	args := []any{orOne(scaling.Denominator), orOne(scaling.LossScale), orOne(scaling.Clip)}
	for _, g := range grads {
		args = append(args, g)
	}
	outs, err := s.update.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("hostengine: stage %q's update: %w", s.name, err)
	}
	params, wide := outs[:len(outs)-len(s.stepWide)], outs[len(outs)-len(s.stepWide):]
	s.e.setPending(s.stepWide, wide)
	if s.e.cfg.NoParams {
		for _, p := range params {
			p.FinalizeAll()
		}
		return nil, nil
	}
	return params, nil
}

// updateFn is the stage's update program: inputs the denominator, loss scale, clip factor and the
// gradients; outputs the parameters in the compute dtype (none with NoParams but a placeholder)
// and the step-wide variables' new values, which it does not write (Commit does).
func (s *Stage) updateFn(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	g := inputs[0].Graph()
	denominator, lossScale, clip, grads := inputs[0], inputs[1], inputs[2], inputs[3:]
	for _, v := range s.vars {
		v.ValueGraph(g) // in use first, so that the optimizer pairs them with grads in this order
	}
	if s.e.cfg.Schedule != nil {
		optim.ApplySchedule(ctx, g, s.e.cfg.Schedule)
	}
	scaled := make([]*graph.Node, len(grads))
	for i, x := range grads {
		// As the streamed step normalizes a sum, optim.LossScale unscales and optim.ClipByGlobalNorm
		// clips: dividing and multiplying by 1 is exact, so an unscaled step is the plain optimizer's.
		x = optim.Unscale(x, denominator, lossScale)
		scaled[i] = graph.Mul(x, graph.ConvertDType(clip, x.DType()))
	}
	s.e.optimizer.UpdateGraphWithGradients(ctx, scaled, dtypes.Float32)
	var outs []*graph.Node
	if s.e.cfg.NoParams {
		outs = append(outs, graph.ScalarZero(g, dtypes.Float32))
	} else {
		for _, v := range s.vars {
			outs = append(outs, s.e.computeCopy(v.ValueGraph(g)))
		}
	}
	var wide []*graph.Node
	s.stepWide, wide = holdStepWide(ctx, g)
	return append(outs, wide...)
}

// paramsFn returns the stage's parameters in the compute dtype.
func (s *Stage) paramsFn(ctx *context.Context, g *graph.Graph) []*graph.Node {
	outs := make([]*graph.Node, len(s.vars))
	for i, v := range s.vars {
		outs[i] = s.e.computeCopy(v.ValueGraph(g))
	}
	return outs
}

// holdStepWide returns the step-wide variables g changed and their new values, which g will not
// write: each variable's value in g is set back to its parameter (Commit writes the values).
func holdStepWide(ctx *context.Context, g *graph.Graph) ([]*context.Variable, []*graph.Node) {
	var vars []*context.Variable
	var values []*graph.Node
	for v := range ctx.IterVariables() {
		if !isStepWide(v) || !v.ChangedInGraph(g) {
			continue // a parameter or its optimizer state: updated in place
		}
		value := v.ValueGraph(g)
		v.SetValueGraph(g.GetParameterByName(v.ParameterName())) // read, not written: Commit writes it
		vars = append(vars, v)
		values = append(values, graph.MulScalar(value, 1)) // never an input returned as is (embedded backend)
	}
	return vars, values
}

// isStepWide reports whether v is a scalar every stage's update reads and a one-program update
// would change once per step: a global-step counter (GoMLX's, the optimizer's update count) or a
// variable under GoMLX's optimizers scope (the learning rate).
func isStepWide(v *context.Variable) bool {
	return v.Shape().IsScalar() && (v.Name() == optimizers.GlobalStepVariableName ||
		strings.HasPrefix(v.Scope(), optim.OptimizersScope))
}

func orOne(x float32) float32 {
	if x == 0 {
		return 1
	}
	return x
}
