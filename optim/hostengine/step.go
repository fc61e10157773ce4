package hostengine

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/optim"
)

// Step is one step of a run's update with the engine's Chain, the whole chain split across the
// stages (optim.Chain.Split): Begin reads the loss scale; Check takes each stage's partial results
// (when Checks says the chain needs them: a loss scale's finite check, a global-norm clip); Decide
// runs the chain's step-wide part (the loss scale's adjustment and skip count, the clip factor)
// and says whether the step applies; Update updates each stage with its gradients divided and
// clipped as the chain would; Finish ends the step (Commit, or dropping a skipped step's values).
// The result is the chain's update of every variable in one program, within the rounding of the
// gradients' global norm (optim.GradientScaling.Partials).
type Step struct {
	e           *Engine
	denominator float32
	lossScale   float32
	finite      bool
	squares     map[*context.Variable]float32
	checked     map[*Stage]bool
	// updated are the stages whose update this step stands; speculated those of them updated
	// before Decide (Speculate), which Decide may undo.
	updated, speculated map[*Stage]bool
	// decided says Decide ran; apply that the step updates, with clip the clip factor.
	decided, apply bool
	clip           float32
}

// Begin starts a step whose gradients are sums to divide by denominator (1 for gradients that are
// means already). It needs Config.Chain.
func (e *Engine) Begin(denominator float32) (*Step, error) {
	chain := e.cfg.Chain
	if chain == nil {
		return nil, fmt.Errorf("hostengine: Begin runs the chain's step: give Config.Chain (or call Stage.Update and Commit)")
	}
	st := &Step{e: e, denominator: denominator, lossScale: 1, finite: true, squares: map[*context.Variable]float32{}, checked: map[*Stage]bool{},
		updated: map[*Stage]bool{}, speculated: map[*Stage]bool{}}
	if !chain.ChecksFinite() {
		return st, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.begin == nil {
		exec, err := context.NewExec(e.cfg.Backend, e.cfg.Ctx, func(ctx *context.Context, g *graph.Graph) *graph.Node {
			return graph.MulScalar(chain.LossScaleValue(ctx, g), 1) // never a variable returned as is
		})
		if err != nil {
			return nil, err
		}
		e.begin = exec.WithName("host_loss_scale")
	}
	outs, err := e.begin.Exec()
	if err != nil {
		return nil, fmt.Errorf("hostengine: reading the loss scale: %w", err)
	}
	st.lossScale = outs[0].Value().(float32)
	outs[0].FinalizeAll()
	return st, nil
}

// Checks reports whether Decide needs every stage's Check: the chain checks that the gradients are
// finite or clips their global norm.
func (st *Step) Checks() bool {
	return st.e.cfg.Chain.ChecksFinite() || st.e.cfg.Chain.ClipNorm() > 0
}

// Check takes stage s's gradients' partial results: whether they are finite and their squares.
func (st *Step) Check(s *Stage, grads []*tensors.Tensor) error {
	if st.decided {
		return fmt.Errorf("hostengine: stage %q checked after Decide", s.name)
	}
	if len(grads) != len(s.vars) {
		return fmt.Errorf("hostengine: stage %q: %d gradients for %d variables", s.name, len(grads), len(s.vars))
	}
	var (
		finite  bool
		squares []float32
		err     error
	)
	if st.e.cfg.OnDevice {
		finite, squares, err = st.e.devicePartials(st.scaling(), grads)
	} else {
		finite, squares, err = st.scaling().Partials(grads)
	}
	if err != nil {
		return fmt.Errorf("hostengine: stage %q: %w", s.name, err)
	}
	st.finite = st.finite && finite
	for i, v := range s.vars {
		st.squares[v] = squares[i]
	}
	st.checked[s] = true
	return nil
}

// Decide runs the chain's step-wide part from the stages' partial results and reports whether the
// step applies (false: a loss-scaled step whose gradients are not finite, skipped). It undoes the
// speculated updates (Speculate) the decision does not keep: all of them when the step is skipped
// or clipped (a factor below 1). Update then updates each stage whose update does not stand
// (Updated).
func (st *Step) Decide() (bool, error) {
	e, chain := st.e, st.e.cfg.Chain
	if st.decided {
		return st.apply, nil
	}
	st.decided, st.apply, st.clip = true, true, 1
	if !st.Checks() {
		return true, nil
	}
	// The squares in the context's order, as ClipByGlobalNorm adds them.
	var squares float32
	for v := range e.cfg.Ctx.IterVariables() {
		squares += st.squares[v]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.decide == nil {
		exec, err := context.NewExec(e.cfg.Backend, e.cfg.Ctx, func(ctx *context.Context, finite, squares *graph.Node) *graph.Node {
			return graph.ConvertDType(chain.StepWide(ctx, finite.Graph(), finite, squares), dtypes.Float32)
		})
		if err != nil {
			return false, err
		}
		e.decide = exec.WithName("host_step_wide")
	}
	outs, err := e.decide.Exec(st.finite, squares)
	if err != nil {
		return false, fmt.Errorf("hostengine: the chain's step-wide part: %w", err)
	}
	st.clip = outs[0].Value().(float32)
	outs[0].FinalizeAll()
	st.apply = st.finite || !chain.ChecksFinite()
	return st.apply, st.undo()
}

// Update updates stage s with its gradients (Stage.Update with the step's scaling), after Decide
// said the step applies.
func (st *Step) Update(s *Stage, grads []*tensors.Tensor) ([]*tensors.Tensor, error) {
	switch {
	case !st.decided:
		return nil, fmt.Errorf("hostengine: stage %q updated before Decide", s.name)
	case !st.apply:
		return nil, fmt.Errorf("hostengine: stage %q updated in a skipped step", s.name)
	case st.Checks() && !st.checked[s]:
		return nil, fmt.Errorf("hostengine: stage %q updated without its Check: the chain's step-wide part needs every stage's", s.name)
	case st.updated[s]:
		return nil, fmt.Errorf("hostengine: stage %q updated twice in a step", s.name)
	}
	scaling := st.scaling()
	scaling.Clip = st.clip
	params, err := s.Update(grads, scaling)
	if err == nil {
		st.updated[s] = true
	}
	return params, err
}

// Finish ends the step: the step-wide scalars take their new values (Commit), or keep theirs for
// a skipped step.
func (st *Step) Finish() error {
	if st.apply && st.decided {
		return st.e.Commit()
	}
	if !st.decided { // a step given up before Decide: its speculations are undone
		st.apply = false
		st.e.mu.Lock()
		err := st.undo()
		st.e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	st.e.discard()
	return nil
}

// scaling is the step's division of the gradients, before the clip.
func (st *Step) scaling() optim.GradientScaling {
	return optim.GradientScaling{Denominator: st.denominator, LossScale: st.lossScale}
}

// Variables are the variables the engine's programs for its stages and Begin's steps read or
// write: the stages' parameters and optimizer state, the step-wide scalars, the chain's loss-scale
// state. A caller whose device program shares some of them (the loss scale) brings them to the
// host before a step (GoMLX binds a tensor to one backend).
func (e *Engine) Variables() (map[*context.Variable]bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	used := map[*context.Variable]bool{}
	add := func(name string, inputs []shapes.Shape, fn func(ctx *context.Context, in []*graph.Node) []*graph.Node) error {
		p, err := analysis.ContextProgram(e.cfg.Backend, e.cfg.Ctx, name, inputs, fn)
		if err != nil {
			return err
		}
		defer p.Graph.Finalize()
		for v := range e.cfg.Ctx.IterVariables() {
			if v.InUseByGraph(p.Graph) {
				used[v] = true
			}
		}
		return nil
	}
	for _, s := range e.stages {
		if err := add("host_update_"+s.name, s.inputShapes(), s.updateFn); err != nil {
			return nil, err
		}
	}
	if chain := e.cfg.Chain; chain != nil {
		err := add("host_step_wide", []shapes.Shape{shapes.Make(dtypes.Bool), shapes.Make(dtypes.Float32)}, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			return []*graph.Node{chain.LossScaleValue(ctx, in[0].Graph()), chain.StepWide(ctx, in[0].Graph(), in[0], in[1])}
		})
		if err != nil {
			return nil, err
		}
	}
	return used, nil
}
