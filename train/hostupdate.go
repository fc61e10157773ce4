package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/optim/hostengine"
)

// hostUpdate is the host's part of an offloaded step, the same for the optimizer offload and the
// streamed step: the run's chain (loss-scale check and skip, clipping, the optimizer) through
// optim/hostengine on the host backend (hostengine.NewBackend: XLA's CPU client when there is a
// CPU plugin, else the embedded backend; the optimizer's flat loop where it has one), and the
// moving-average loss.
type hostUpdate struct {
	t      *Trainer
	engine *hostengine.Engine
	stages []*hostengine.Stage
	mean   *context.Exec
}

// newHostUpdate prepares the update of the trainable variables on backend, one stage per set (a
// variable in one set only), in order, creating and initializing the optimizer's state there. A
// set named in like runs the graph update of the stage like names (created before it:
// hostengine.Engine.StageLike, a block like another), whose program it shares.
func newHostUpdate(t *Trainer, backend backends.Backend, sets map[string][]*context.Variable, order []string, like map[string]string) (*hostUpdate, error) {
	chain, err := t.Chain()
	if err != nil {
		return nil, err
	}
	engine, err := hostengine.New(hostengine.Config{Backend: backend, Ctx: t.Ctx, Chain: chain, Schedule: t.Config.Schedule, NoParams: true})
	if err != nil {
		return nil, err
	}
	h := &hostUpdate{t: t, engine: engine}
	byName := map[string]*hostengine.Stage{}
	for _, name := range order {
		var s *hostengine.Stage
		if other, ok := like[name]; ok && byName[other] != nil {
			s, err = engine.StageLike(name, sets[name], byName[other])
		} else {
			s, err = engine.Stage(name, sets[name])
		}
		byName[name] = s
		if err != nil {
			h.close()
			return nil, err
		}
		h.stages = append(h.stages, s)
	}
	h.mean, err = context.NewExec(backend, t.Ctx, func(ctx *context.Context, loss, finite *graph.Node) *graph.Node {
		return movingAverage(ctx, loss.Graph(), loss, finite)
	})
	if err != nil {
		h.close()
		return nil, err
	}
	h.mean = h.mean.WithName("host_mean_loss")
	return h, nil
}

// run applies one step's gradients (float32, local or on the host backend, by variable; sums to
// divide by denominator, 1 for means) to every stage, and returns the step's finite flag and the
// moving-average loss of loss, as StepFn's last two outputs.
func (h *hostUpdate) run(grads map[*context.Variable]*tensors.Tensor, loss, denominator float32) ([]*tensors.Tensor, error) {
	apply, err := h.apply(grads, denominator)
	if err != nil {
		return nil, err
	}
	return h.outputs(loss, apply)
}

// apply runs one step of the chain on every stage, after every gradient arrived, and reports
// whether the step applied.
func (h *hostUpdate) apply(grads map[*context.Variable]*tensors.Tensor, denominator float32) (bool, error) {
	step, err := h.engine.Begin(denominator)
	if err != nil {
		return false, err
	}
	stageGrads := make([][]*tensors.Tensor, len(h.stages))
	for i, s := range h.stages {
		for _, v := range s.Variables() {
			g := grads[v]
			if g == nil {
				return false, fmt.Errorf("the host update: no gradient of %s", v.ScopeAndName())
			}
			stageGrads[i] = append(stageGrads[i], g)
		}
		if step.Checks() {
			if err := step.Check(s, stageGrads[i]); err != nil {
				return false, err
			}
		}
	}
	apply, err := step.Decide()
	if err != nil {
		return false, err
	}
	if apply {
		for i, s := range h.stages {
			if _, err := step.Update(s, stageGrads[i]); err != nil {
				return false, err
			}
		}
	}
	return apply, step.Finish()
}

// outputs are StepFn's last two outputs for a step that applied or not: its finite flag and the
// moving-average loss of loss.
func (h *hostUpdate) outputs(loss float32, apply bool) ([]*tensors.Tensor, error) {
	mean, err := h.mean.Exec(loss, apply)
	if err != nil {
		return nil, fmt.Errorf("the moving-average loss: %w", err)
	}
	return []*tensors.Tensor{tensors.FromScalar(apply), mean[0]}, nil
}

// variables are the variables the engine's programs read or write (the moving-average loss's are
// the host's alone).
func (h *hostUpdate) variables() (map[*context.Variable]bool, error) { return h.engine.Variables() }

func (h *hostUpdate) close() {
	if h.mean != nil {
		h.mean.Finalize()
	}
	h.engine.Close()
}
