package hostengine

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/optim"
)

// Stages that share one compiled update (a model's blocks: the same variables under another
// scope). A block's update program is compiled once, for the first block's variables; another
// block's stage binds its own variables and optimizer state in the first block's place (the
// tensors themselves, nothing copied), runs that program, takes the updated values and binds the
// first block's back. Compile time then does not grow with the number of blocks.

// StageLike returns the stage of vars that runs like's graph update: vars match like's variables
// one for one in the context's order (the same names under another scope, shapes and dtypes: one
// block's and another's), and so does the optimizer state the update creates for them (checked
// by name, shape and dtype). Its Update takes gradients in Variables' order and computes what its
// own program would. A flat stage has no program to share: StageLike is then Stage.
func (e *Engine) StageLike(name string, vars []*context.Variable, like *Stage) (*Stage, error) {
	s, err := e.Stage(name, vars)
	if err != nil || s.flat {
		return s, err
	}
	if like == nil || like.e != e || like.like != nil || like.flat {
		return nil, fmt.Errorf("hostengine: stage %q: the stage to run like is not a stage of this engine with its own graph update", name)
	}
	mine, err := e.usedBy(s)
	if err != nil {
		return nil, err
	}
	theirs, err := e.usedBy(like)
	if err != nil {
		return nil, err
	}
	// Variables both programs use (the step-wide scalars) stay; the others pair in order.
	var ordered, other []*context.Variable
	for v := range e.cfg.Ctx.IterVariables() {
		switch {
		case mine[v] && !theirs[v]:
			ordered = append(ordered, v)
		case theirs[v] && !mine[v]:
			other = append(other, v)
		}
	}
	if len(ordered) != len(other) {
		return nil, fmt.Errorf("hostengine: stage %q's update reads and writes %d variables, stage %q's %d: a stage runs like another only with the same variables",
			name, len(ordered), like.name, len(other))
	}
	for i, v := range ordered {
		w := other[i]
		if v.Name() != w.Name() || !v.Shape().Equal(w.Shape()) {
			return nil, fmt.Errorf("hostengine: stage %q's variable %s (%s) does not match stage %q's %s (%s): a stage runs like another only with the same variables",
				name, v.ScopeAndName(), v.Shape(), like.name, w.ScopeAndName(), w.Shape())
		}
		s.swap = append(s.swap, [2]*context.Variable{w, v})
	}
	if s.update != nil {
		s.update.Finalize() // never compiled: like's program runs instead
		s.update = nil
	}
	s.like = like
	return s, nil
}

// usedBy returns the variables s's graph update reads or writes (built, not compiled).
func (e *Engine) usedBy(s *Stage) (map[*context.Variable]bool, error) {
	p, err := e.UpdateProgram(s.name, s.vars)
	if err != nil {
		return nil, fmt.Errorf("hostengine: stage %q's update: %w", s.name, err)
	}
	defer p.Graph.Finalize()
	used := map[*context.Variable]bool{}
	for v := range e.cfg.Ctx.IterVariables() {
		if v.InUseByGraph(p.Graph) {
			used[v] = true
		}
	}
	return used, nil
}

// updateLike runs like's update program with s's variables and state bound in like's place, then
// gives s's variables the updated values and like's its own back.
func (s *Stage) updateLike(grads []*tensors.Tensor, scaling Scaling) (params []*tensors.Tensor, err error) {
	saved := make([]*tensors.Tensor, 0, len(s.swap))
	defer func() {
		for i, value := range saved {
			theirs, own := s.swap[i][0], s.swap[i][1]
			if err == nil {
				updated, e := theirs.Value()
				if e == nil {
					e = own.SetValuePreservingOld(updated) // the update donated own's previous value
				}
				err = e
			}
			if e := theirs.SetValuePreservingOld(value); e != nil && err == nil {
				err = e
			}
		}
	}()
	for _, pair := range s.swap {
		theirs, own := pair[0], pair[1]
		value, err := theirs.Value()
		if err != nil {
			return nil, err
		}
		ownValue, err := own.Value()
		if err != nil {
			return nil, err
		}
		if err := theirs.SetValuePreservingOld(ownValue); err != nil {
			return nil, err
		}
		saved = append(saved, value)
	}
	params, err = s.like.updateGraph(grads, scaling)
	if err != nil {
		return nil, fmt.Errorf("hostengine: stage %q (run like %q): %w", s.name, s.like.name, err)
	}
	return params, nil
}

// devicePartials computes Step.Check's partial results of grads in a program on the engine's
// backend (Config.OnDevice): only the flag and the squares leave it.
func (e *Engine) devicePartials(scaling optim.GradientScaling, grads []*tensors.Tensor) (bool, []float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.partials == nil {
		exec, err := graph.NewExec(e.cfg.Backend, func(in []*graph.Node) []*graph.Node {
			finite, squares := optim.GraphPartials(in[0], in[1], in[2:])
			return append([]*graph.Node{finite}, squares...)
		})
		if err != nil {
			return false, nil, err
		}
		e.partials = exec.WithName("device_partials")
	}
	args := []any{orOne(scaling.Denominator), orOne(scaling.LossScale)}
	for _, g := range grads {
		args = append(args, g)
	}
	outs, err := e.partials.Exec(args...)
	if err != nil {
		return false, nil, fmt.Errorf("the gradients' partial results: %w", err)
	}
	defer func() {
		for _, o := range outs {
			o.FinalizeAll()
		}
	}()
	squares := make([]float32, len(grads))
	for i := range squares {
		squares[i] = outs[1+i].Value().(float32)
	}
	return outs[0].Value().(bool), squares, nil
}
