package train

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/optim/hostengine"
)

// stagedUpdate is the staged step's optimizer update on the device: the host update's engine
// (optim/hostengine) with Config.OnDevice, one stage per stage instance (the embedding, each
// block, the head), the blocks' sharing block 0's compiled program (StageLike), and the
// moving-average loss.
type stagedUpdate struct {
	engine *hostengine.Engine
	// owner is each trainable variable's stage; tied the head's variables the embedding trains
	// too (a tied table), updated with the embedding's, after its backward program.
	owner map[*context.Variable]*hostengine.Stage
	tied  map[*context.Variable]bool
	mean  *context.Exec
}

// newStagedUpdate prepares e's update on the trainer's device, creating and initializing the
// optimizer's state there.
func newStagedUpdate(e *stagedExecutor) (*stagedUpdate, error) {
	t := e.t
	chain, err := t.Chain()
	if err != nil {
		return nil, err
	}
	engine, err := hostengine.New(hostengine.Config{Backend: t.Backend, Ctx: t.Ctx, Chain: chain, Schedule: t.Config.Schedule, NoParams: true, OnDevice: true})
	if err != nil {
		return nil, err
	}
	u := &stagedUpdate{engine: engine, owner: map[*context.Variable]*hostengine.Stage{}, tied: map[*context.Variable]bool{}}
	trainable := func(st *streamStage, sources []*context.Variable) []*context.Variable {
		var vars []*context.Variable
		for _, j := range st.trainable {
			vars = append(vars, sources[j])
		}
		return vars
	}
	add := func(name string, vars []*context.Variable, like *hostengine.Stage) (*hostengine.Stage, error) {
		if len(vars) == 0 {
			return nil, nil
		}
		var s *hostengine.Stage
		var err error
		if like != nil {
			s, err = engine.StageLike(name, vars, like)
		} else {
			s, err = engine.Stage(name, vars)
		}
		if err != nil {
			return nil, err
		}
		for _, v := range vars {
			u.owner[v] = s
		}
		return s, nil
	}
	embedVars := trainable(e.embed, e.embedVars)
	headVars, tied := headUpdates(embedVars, trainable(e.head, e.headVars))
	for _, v := range tied {
		u.tied[v] = true
	}
	var block0 *hostengine.Stage
	for i, sources := range e.blockVars {
		s, err := add(fmt.Sprintf("block_%d", i), trainable(e.block, sources), block0)
		if err != nil {
			u.close()
			return nil, err
		}
		if i == 0 {
			block0 = s
		}
	}
	for _, st := range []struct {
		name string
		vars []*context.Variable
	}{{"embed", embedVars}, {"head", headVars}} {
		if _, err := add(st.name, st.vars, nil); err != nil {
			u.close()
			return nil, err
		}
	}
	u.mean, err = context.NewExec(t.Backend, t.Ctx, func(ctx *context.Context, loss, finite *graph.Node) *graph.Node {
		return movingAverage(ctx, loss.Graph(), loss, finite)
	})
	if err != nil {
		u.close()
		return nil, err
	}
	u.mean = u.mean.WithName("staged_mean_loss")
	return u, nil
}

// headUpdates splits the head's trainable variables into those its update stage takes and those
// the embedding's takes (tied: used by both, their gradients added up after the embedding's
// backward program, the last to use them).
func headUpdates(embed, head []*context.Variable) (own, tied []*context.Variable) {
	for _, v := range head {
		if slices.Contains(embed, v) {
			tied = append(tied, v)
		} else {
			own = append(own, v)
		}
	}
	return own, tied
}

func (u *stagedUpdate) close() {
	if u.mean != nil {
		u.mean.Finalize()
	}
	u.engine.Close()
}

// stagedStep is one step's update: stages updated as their gradients are complete when the chain
// has no step-wide part, else their gradients held (checked) until every stage's are in.
type stagedStep struct {
	u    *stagedUpdate
	step *hostengine.Step
	held []heldGradients
}

// heldGradients are a stage's gradients waiting for the step-wide decision.
type heldGradients struct {
	stage *hostengine.Stage
	grads []*tensors.Tensor
}

// begin starts a step whose gradients are sums to divide by denominator.
func (u *stagedUpdate) begin(denominator float32) (*stagedStep, error) {
	step, err := u.engine.Begin(nonZero32(denominator))
	if err != nil {
		return nil, err
	}
	if !step.Checks() {
		if _, err := step.Decide(); err != nil { // nothing step-wide: every stage updates at once
			return nil, err
		}
	}
	return &stagedStep{u: u, step: step}, nil
}

// take receives one stage instance's complete gradients (by variable, all of one update stage's)
// and updates the stage, or checks and holds them; it returns the gradient bytes held then.
func (s *stagedStep) take(grads map[*context.Variable]*tensors.Tensor) (int64, error) {
	var stage *hostengine.Stage
	for v := range grads {
		stage = s.u.owner[v]
		break
	}
	if stage == nil {
		freeGradients(grads)
		return s.heldBytes(), nil // nothing trains here, or nothing to take
	}
	vars := stage.Variables()
	list := make([]*tensors.Tensor, len(vars))
	for i, v := range vars {
		if list[i] = grads[v]; list[i] == nil {
			freeGradients(grads)
			return 0, fmt.Errorf("no gradient of %s with the rest of stage %s's", v.ScopeAndName(), vars[0].ScopeAndName())
		}
	}
	if len(grads) != len(vars) {
		freeGradients(grads)
		return 0, fmt.Errorf("%d gradients for the %d variables of the stage of %s", len(grads), len(vars), vars[0].ScopeAndName())
	}
	if s.step.Checks() {
		if err := s.step.Check(stage, list); err != nil {
			freeAll(list)
			return 0, err
		}
		s.held = append(s.held, heldGradients{stage, list})
		return s.heldBytes(), nil
	}
	held := s.heldBytes() + bytesOf(list)
	_, err := s.step.Update(stage, list)
	freeAll(list)
	return held, err
}

// finish decides the step (when it held gradients), updates the held stages and ends the step;
// it returns the step's finite flag and the moving-average loss of loss, as StepFn's last two
// outputs.
func (s *stagedStep) finish(loss float32) ([]*tensors.Tensor, error) {
	apply, err := s.step.Decide()
	if err != nil {
		return nil, err
	}
	for _, h := range s.held {
		if apply {
			if _, err := s.step.Update(h.stage, h.grads); err != nil {
				return nil, err
			}
		}
	}
	s.free()
	if err := s.step.Finish(); err != nil {
		return nil, err
	}
	mean, err := s.u.mean.Exec(loss, apply)
	if err != nil {
		return nil, fmt.Errorf("the moving-average loss: %w", err)
	}
	return []*tensors.Tensor{tensors.FromScalar(apply), mean[0]}, nil
}

// heldBytes are the bytes of the gradients held (0 for a nil step: before the backward pass).
func (s *stagedStep) heldBytes() int64 {
	if s == nil {
		return 0
	}
	var n int64
	for _, h := range s.held {
		n += bytesOf(h.grads)
	}
	return n
}

// free releases the held gradients.
func (s *stagedStep) free() {
	for _, h := range s.held {
		freeAll(h.grads)
	}
	s.held = nil
}

func bytesOf(ts []*tensors.Tensor) int64 {
	var n int64
	for _, t := range ts {
		if t != nil {
			n += int64(t.Memory())
		}
	}
	return n
}

func freeGradients(grads map[*context.Variable]*tensors.Tensor) {
	for _, g := range grads {
		g.FinalizeAll()
	}
}
